"""CPU tier for search: records, the correctness gate, builder pool and GPU runner under real
faults (fake runners that crash, hang, raise or answer wrongly inside real worker
processes), and the CSV/PNG report. No CUDA needed."""
from __future__ import annotations

import math
import re
import stat
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import fault_hooks as hooks
from gemmforge.ir.program import Problem
from gemmforge.ir.text import parse
from gemmforge.search.measure import bench, gate, report
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner, measure
from gemmforge.search.measure.records import (
    FAILURE_KINDS, ArtifactRecord, BenchSettings, MeasureRequest, Result,
)

HOOKS = f"{Path(hooks.__file__).resolve()}:"
SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"
ILLEGAL = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c2x1 nows direct"
HANG_LIMIT = BenchSettings(timeout_s=2.0)
ROOMY = BenchSettings(timeout_s=60.0)  # a fresh worker imports torch inside its first request


def request(m: int, n: int = 24, k: int = 40, program: str = SIMT, **kw) -> MeasureRequest:
    """A request whose m picks the fake runner's behaviour (fault_hooks)."""
    limit = HANG_LIMIT if m in (hooks.HANG, hooks.SPAWN) else ROOMY
    return MeasureRequest(program, m, n, k, settings=kw.pop("settings", limit), **kw)


def fake_artifact(req: MeasureRequest) -> ArtifactRecord:
    return ArtifactRecord("k", "fake", "/nonexistent", req.program, req.layout, req.acc)


# --- records ---------------------------------------------------------------------------

def test_request_round_trip():
    req = MeasureRequest.make(parse(SIMT), Problem(1000, 4096, 333, "nt", "f16"),
                              BenchSettings(rounds=7, protocols=("kernel", "call")), seed=9)
    assert MeasureRequest.from_json(req.to_json()) == req
    assert req.key == parse(SIMT).key and req.problem() == Problem(1000, 4096, 333, "nt", "f16")


def test_settings_and_artifact_round_trip():
    s = BenchSettings(warmup=0, statistic="min", l2_flush_factor=3.0)
    assert BenchSettings.from_json(s.to_json()) == s
    a = ArtifactRecord("abc", "cuda_so", "/x/y.so", SIMT, "nn", "f32", {"symbol": "f"})
    assert ArtifactRecord.from_json(a.to_json()) == a
    assert ArtifactRecord.from_artifact(a.to_artifact()) == a


_times = st.none() | st.floats(min_value=0, max_value=1e7, allow_nan=False)


@given(kind=st.sampled_from((None,) + FAILURE_KINDS), t=_times, c=_times,
       err=st.none() | st.floats(allow_nan=True), flags=st.lists(st.text(max_size=20)))
@hsettings(max_examples=60, deadline=None)
def test_result_round_trip(kind, t, c, err, flags):
    r = Result(SIMT, 64, 128, 256, status="failed" if kind else "ok", kind=kind,
               message="x\ny", kernel_us=t, cublas_us=c, rel_err=err, flags=tuple(flags))
    back = Result.from_json(r.to_json())
    assert back.to_json() == r.to_json()  # NaN != NaN, so compare the text


def test_result_checks_status_and_kind():
    with pytest.raises(ValueError):
        Result(SIMT, 1, 1, 1, status="ok", kind="wrong")
    with pytest.raises(ValueError):
        Result(SIMT, 1, 1, 1, status="failed", kind="bogus")
    with pytest.raises(ValueError):
        BenchSettings(protocols=("call",))


def test_from_dict_ignores_unknown_fields():
    data = Result(SIMT, 1, 2, 3).to_dict() | {"added_later": 1}
    assert Result.from_dict(data) == Result(SIMT, 1, 2, 3)


# --- the correctness gate, on CPU ---------------------------------------------------------

def test_gate_accepts_a_correct_kernel():
    err = gate.gate(hooks._correct, Problem(37, 53, 71), device="cpu", seed=1)
    assert err < 1e-3


@pytest.mark.parametrize("kernel, words", [(hooks._drops_last_k, "Frobenius"),
                                           (hooks._skips_last_row, "NaN")])
def test_gate_rejects(kernel, words):
    with pytest.raises(gate.GateFailure, match=words):
        gate.gate(kernel, Problem(32, 48, 64), device="cpu", seed=0)


def test_exact_check_catches_what_the_statistics_miss():
    def off_by_one(a, b, out):
        hooks._correct(a, b, out)
        out[0, 0] += 1  # tiny in Frobenius norm, never right in exact arithmetic
    problem = Problem(64, 64, 64)
    assert gate.run_once(off_by_one, problem, device="cpu", seed=0) < gate.F32_TOLERANCE
    with pytest.raises(gate.GateFailure, match="exact"):
        gate.gate(off_by_one, problem, device="cpu", seed=0)


def test_f16_tolerance_covers_an_f16_accumulator():
    import torch
    assert gate.tolerance(Problem(8, 8, 4096, acc="f16")) == pytest.approx(2 * 2**-11 * 64)
    assert gate.tolerance(Problem(8, 8, 16, acc="f16")) == gate.F32_TOLERANCE

    def f16_accumulate(a, b, out):  # round the running sum to fp16 after every step
        acc = torch.zeros(out.shape, dtype=torch.float16)
        for i in range(a.shape[1]):
            acc = (acc.float() + a[:, i:i + 1].float() * b[i:i + 1].float()).half()
        out.copy_(acc)
    problem = Problem(48, 48, 1024, acc="f16")
    err = gate.gate(f16_accumulate, problem, device="cpu", seed=3)
    assert err < gate.tolerance(problem)


def test_plausibility_flags():
    cube = Problem(4096, 4096, 4096)  # 137 GFLOP: 139 us at 989 TFLOP/s
    assert bench.plausibility_flags(cube, "NVIDIA H200", {"kernel": 200.0}) == []
    [flag] = bench.plausibility_flags(cube, "NVIDIA H200", {"kernel": 100.0})
    assert flag.startswith("implausible kernel")
    skinny = Problem(16384, 16384, 64)  # 541 MB to move: 113 us at 4.8 TB/s; 35 us of math
    assert bench.plausibility_flags(skinny, "NVIDIA H200", {"kernel": 50.0}) == []
    [flag] = bench.plausibility_flags(skinny, "NVIDIA H200", {"cold": 50.0})
    assert flag.startswith("implausible cold") and "TB/s" in flag


# --- the GPU runner, with faults injected in real worker processes ----------------------

def _pid(message: str) -> int:
    return int(re.search(r"(?:worker|pid) (\d+)", message).group(1))


def test_runner_survives_every_fault():
    kinds = {hooks.OK: None, hooks.ABORT: "runtime", hooks.EXIT: "runtime",
             hooks.HANG: "timeout", hooks.RAISE: "runtime", hooks.CUDA_ERROR: "runtime",
             hooks.WRONG: "wrong", hooks.UNWRITTEN: "wrong"}
    plan = [hooks.OK, hooks.ABORT, hooks.EXIT, hooks.HANG, hooks.RAISE, hooks.CUDA_ERROR,
            hooks.OK, hooks.WRONG, hooks.UNWRITTEN, hooks.OK]
    reqs = [request(m, seed=i) for i, m in enumerate(plan)]
    with DeviceRunner(runner=HOOKS + "run") as runner:
        results = runner.run([(r, fake_artifact(r)) for r in reqs])
        restarts = runner.restarts
        assert runner.target_sm == 90
    assert [r.kind for r in results] == [kinds[m] for m in plan], [r.message for r in results]
    assert restarts == 5  # abort, exit, hang, raise, CUDA error; not "wrong"
    assert "SIGABRT" in results[1].message and "exit status 7" in results[2].message
    assert "no answer within 2 s" in results[3].message
    assert "injected failure" in results[4].message and "illegal" in results[5].message
    pids = [_pid(r.message) for r in results if r.kind != "wrong"]
    assert pids[0] == pids[1] and len(set(pids[1:7])) == 6  # a new worker after each fault
    assert pids[-1] == pids[-2]  # a wrong answer from a healthy worker keeps it


def test_two_workers_share_a_batch():
    reqs = [request(m) for m in (hooks.QUICK_OK, hooks.HANG, hooks.QUICK_OK, hooks.QUICK_OK)]
    with DeviceRunner(devices=[0, 1], runner=HOOKS + "run") as runner:
        kinds = [r.kind for r in runner.run([(r, fake_artifact(r)) for r in reqs])]
    assert kinds == [None, "timeout", None, None]


def test_runner_setup_failure_is_a_runtime_result():
    with DeviceRunner(runner=HOOKS + "no_such_function", startup_timeout_s=30) as runner:
        [r] = runner.run([(request(hooks.OK), fake_artifact(request(hooks.OK)))])
    assert r.kind == "runtime" and "setup failed" in r.message


# --- the builder pool ---------------------------------------------------------------------

def test_builder_timeout_kills_and_goes_on():
    reqs = [request(hooks.HANG), request(hooks.OK), request(hooks.OK)]
    with BuilderPool(workers=2, timeout_s=1.5, builder=HOOKS + "build") as pool:
        built = pool.build(reqs, 90)
    assert built[0].failure.kind == "timeout" and "1.5 s" in built[0].failure.message
    assert [b.artifact.meta["target_sm"] for b in built[1:]] == [90, 90]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
    except (FileNotFoundError, IndexError):
        return True


def test_builder_timeout_kills_what_the_build_started(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("FAULT_HOOKS_PIDFILE", str(pidfile))
    with BuilderPool(workers=1, timeout_s=1.5, builder=HOOKS + "build") as pool:
        [built] = pool.build([request(hooks.SPAWN)], 90)
    assert built.failure.kind == "timeout"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), f"the build's child {pid} outlived the killed worker"


def test_invalid_programs_fail_verify_in_the_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_CACHE_DIR", str(tmp_path))
    with BuilderPool(workers=2) as pool:
        built = pool.build([request(64, program=ILLEGAL), request(64, program="not a program")],
                           90)
    assert [b.failure.kind for b in built] == ["invalid", "invalid"]
    assert "cluster" in built[0].failure.message and "13 tokens" in built[1].failure.message


def _fake_nvcc(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nvcc"
    script.write_text("#!/bin/sh\n"
                      'if [ "$1" = "--version" ]; then echo "fake nvcc 0.0"; exit 0; fi\n'
                      + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_build_error_is_compile_with_reproduce_command(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEMMFORGE_NVCC", _fake_nvcc(tmp_path, "echo 'error: boom' >&2; exit 1"))
    with BuilderPool(workers=1) as pool:
        [built] = pool.build([request(64)], 90)
    assert built.failure.kind == "compile"
    assert "reproduce:" in built.failure.message and "error: boom" in built.failure.message


def test_toolchain_timeout_is_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEMMFORGE_NVCC", _fake_nvcc(tmp_path, "exec sleep 30"))
    monkeypatch.setenv("GEMMFORGE_BUILD_TIMEOUT", "1")
    with BuilderPool(workers=1) as pool:
        [built] = pool.build([request(64)], 90)
    assert built.failure.kind == "timeout" and "reproduce:" in built.failure.message


@pytest.mark.nvcc  # conftest skips it where nvcc is missing
def test_real_build_for_hopper(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_CACHE_DIR", str(tmp_path))
    with BuilderPool(workers=1) as pool:
        [built] = pool.build([request(256, 256, 256)], 90)
    assert built.failure is None, built.failure.message
    assert built.artifact.kind == "cuda_so" and Path(built.artifact.path).exists()
    assert built.artifact.program_text == SIMT and built.build_s > 0


# --- measure(): builds and runs pipelined ---------------------------------------------------

def test_measure_pipeline_keeps_order():
    plan = [hooks.QUICK_OK, hooks.HANG, hooks.WRONG, hooks.QUICK_OK]
    reqs = [request(m) for m in plan]
    with BuilderPool(workers=2, timeout_s=1.5, builder=HOOKS + "build") as builders, \
            DeviceRunner(runner=HOOKS + "run") as runner:
        results = measure(reqs, builders=builders, runner=runner, progress=False)
    assert [r.kind for r in results] == [None, "timeout", "wrong", None]
    assert "build:" in results[1].message
    assert results[0].build_s is not None and results[0].speedup == pytest.approx(1.2)


# --- groups: a batch's requests of one problem timed together ------------------------------

def _grouped(result) -> bool:
    return any(f.startswith("group of") for f in result.flags)


def test_group_is_timed_together_and_a_wrong_output_fails_alone():
    reqs = [request(hooks.OK, seed=s) for s in (1, hooks.seed_for(hooks.WRONG), 4)]
    with DeviceRunner(runner=HOOKS + "run") as runner:
        results = runner.submit_group(reqs, [fake_artifact(r) for r in reqs],
                                      [0.5] * 3).result()
        assert runner.restarts == 0
    assert [r.kind for r in results] == [None, "wrong", None]
    assert "group of 3" in results[0].flags and results[0].build_s == 0.5
    assert [r.program for r in results] == [r.program for r in reqs]


@pytest.mark.parametrize("fault, kind, why", [
    (hooks.ABORT, "runtime", "the group's worker failed (runtime)"),
    (hooks.RAISE, "runtime", "the group failed: ValueError: injected failure"),
    (hooks.HANG, "timeout", "the group's worker failed (timeout)"),
])
def test_a_group_that_fails_is_measured_request_by_request(fault, kind, why):
    """A crash, an exception or a hang takes the whole group down; then each request is
    measured alone, so only the one at fault fails and the others say why they ran alone."""
    settings = BenchSettings(timeout_s=20.0 if fault != hooks.HANG else 2.0)
    reqs = [request(hooks.QUICK_OK, seed=s, settings=settings)
            for s in (1, hooks.seed_for(fault), 4)]
    with DeviceRunner(runner=HOOKS + "run") as runner:
        results = runner.submit_group(reqs, [fake_artifact(r) for r in reqs],
                                      [None] * 3).result()
    assert [r.kind for r in results] == [None, kind, None], [r.message for r in results]
    assert not any(_grouped(r) for r in results)
    assert all(any(f.startswith(f"timed alone: {why}") for f in r.flags)
               for r in (results[0], results[2])), results[0].flags


def test_a_group_reports_progress_so_a_hang_is_caught_per_step():
    """Five requests of 2 s each: a group that works through them reports each one, so it
    finishes although the whole takes longer than one request's limit; a hang in it is
    caught within about one limit, not five."""
    settings = BenchSettings(timeout_s=2.0)
    slow = [request(hooks.SLOW_OK, seed=s, settings=settings) for s in range(1, 6)]
    with DeviceRunner(runner=HOOKS + "run") as runner:
        start = time.monotonic()
        results = runner.submit_group(slow, [fake_artifact(r) for r in slow],
                                      [None] * 5).result()
        assert [r.kind for r in results] == [None] * 5 and all(_grouped(r) for r in results)
        assert time.monotonic() - start > 2.0 * 1.5  # longer than one limit in all
        hung = [request(hooks.QUICK_OK, seed=s, settings=settings)
                for s in (1, 2, hooks.seed_for(hooks.HANG), 4, 5)]
        start = time.monotonic()
        results = runner.submit_group(hung, [fake_artifact(r) for r in hung],
                                      [None] * 5).result()
        took = time.monotonic() - start
    assert [r.kind for r in results] == [None, None, "timeout", None, None]
    assert took < 2.0 * 2 + 15  # the group's one limit, then the hang's own, plus restarts


def test_measure_groups_requests_of_one_problem_and_settings():
    """Three requests of one problem form a group; one of another problem, and requests
    whose settings turn interleave off, are timed alone. Results keep the request order."""
    alone = BenchSettings(timeout_s=60.0, interleave=False)
    reqs = [request(hooks.QUICK_OK, seed=1), request(hooks.QUICK_OK, n=32, seed=2),
            request(hooks.QUICK_OK, seed=3), request(hooks.QUICK_OK, seed=4),
            request(hooks.QUICK_OK, seed=5, settings=alone),
            request(hooks.QUICK_OK, seed=6, settings=alone)]
    with BuilderPool(workers=2, builder=HOOKS + "build") as builders, \
            DeviceRunner(runner=HOOKS + "run") as runner:
        results = measure(reqs, builders=builders, runner=runner, progress=False)
    assert [r.n for r in results] == [r.n for r in reqs] and all(r.ok for r in results)
    assert [_grouped(r) for r in results] == [True, False, True, True, False, False]
    assert "group of 3" in results[0].flags


# --- report -------------------------------------------------------------------------------

def test_report_round_trip_and_plot(tmp_path):
    results = [Result(SIMT, 2 ** i, 2 ** i, 2 ** i, device="fake", kernel_us=float(i),
                      cublas_us=1.1 * i, call_us=20.0 + i, cublas_call_us=21.0,
                      rel_err=1e-4, flags=("a", "b c")) for i in range(6, 13)]
    results.append(Result.failure(request(64), "compile", "line 1\nline, 2"))
    csv_path, png_path = report.write_report(results, "unit_test", root=tmp_path)
    header = csv_path.read_text().splitlines()[0].split(",")
    for column in "m,n,k,device,backend,program,kernel_us,cublas_us,call_us,cublas_call_us" \
            .split(","):
        assert column in header
    assert report.read_csv(csv_path) == results
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert math.isclose(report.best_per_shape(results)[0].speedup, 1.1)
