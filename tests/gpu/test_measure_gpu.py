"""GPU tier for search.measure.measure / search.measure.bench / search.measure.env: a real cuda_simt kernel measured
against cuBLAS, a real kernel computing the wrong thing caught by the gate, and a real
illegal-address crash that costs one worker, not the batch. Run on the GPU machine:

    python -m pytest tests/gpu -m gpu -v
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gemmforge.ir.program import Problem  # noqa: E402
from gemmforge.ir.text import parse  # noqa: E402
from gemmforge.search.measure import env, gate, report  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner, measure  # noqa: E402
from gemmforge.search.measure.records import BenchSettings, MeasureRequest  # noqa: E402
from gemmforge.search.measure.worker import resolve  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HOOKS = f"{Path(__file__).with_name('gpu_hooks.py').resolve()}:run"
gpu_hooks, _ = resolve(HOOKS)  # the module the worker loads, for its codes
# m picks gpu_hooks' tampering: 255 miscounts K, 257 passes a bogus pointer; others are clean.
SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"
# SIMT kernels trail cuBLAS by 10-100x; a high slow_cutoff keeps every protocol running.
QUICK = BenchSettings(rounds=3, call_repeats=5, server_calls=6, slow_cutoff=1e4, timeout_s=180)


@pytest.fixture(scope="module")
def pools():
    with BuilderPool(workers=4) as builders, DeviceRunner(runner=HOOKS) as runner:
        yield builders, runner


def _measure(pools, problems, program=SIMT):
    builders, runner = pools
    reqs = [MeasureRequest.make(parse(program), p, QUICK, seed=i)
            for i, p in enumerate(problems)]
    return measure(reqs, builders=builders, runner=runner, progress=False)


@pytest.mark.parametrize("problem", [Problem(1000, 1024, 333), Problem(512, 384, 4096, "nt"),
                                     Problem(263, 129, 1500, "nn", "f16")],
                         ids=str)
def test_correct_program_measures_ok(pools, problem, tmp_path):
    [r] = _measure(pools, [problem])
    assert r.ok, r.message
    assert r.kernel_us > 0 and r.cublas_us > 0 and r.call_us > 0 and r.cublas_call_us > 0
    assert r.cold_us is not None and r.server_us is not None and r.cublas_server_us > 0
    assert r.rel_err < gate.tolerance(problem) and not r.implausible, r.flags
    assert math.isfinite(r.spread) and r.device
    print(f"\n{problem}: kernel {r.kernel_us:.2f} us, cuBLAS {r.cublas_us:.2f} us "
          f"(x{r.speedup:.3f}, spread {r.spread:.3f}); cold {r.cold_us:.2f}/"
          f"{r.cublas_cold_us:.2f}; call {r.call_us:.1f}/{r.cublas_call_us:.1f}; server "
          f"{r.server_us:.1f}/{r.cublas_server_us:.1f}; err {r.rel_err:.2e}; {r.flags}")
    csv_path, png_path = report.write_report([r], "gpu_test", root=tmp_path)
    assert report.read_csv(csv_path) == [r] and png_path.exists()


def test_gate_catches_a_kernel_that_miscounts_k(pools):
    [r] = _measure(pools, [Problem(255, 256, 256)])  # m == SHORT_K_M: launched with k - 8
    assert r.kind == "wrong", r.message
    assert "Frobenius" in r.message or "exact" in r.message


def test_illegal_address_costs_one_worker_not_the_batch(pools):
    _, runner = pools
    before = runner.restarts
    problems = [Problem(256, 256, 256), Problem(257, 256, 256), Problem(256, 256, 256),
                Problem(257, 128, 128), Problem(256, 128, 128)]  # m == 257: bogus A pointer
    results = _measure(pools, problems)
    assert [r.kind for r in results] == [None, "runtime", None, "runtime", None], \
        [r.message[-400:] for r in results]
    assert "illegal" in results[1].message.lower(), results[1].message[-600:]
    assert all(r.kernel_us > 0 for r in results if r.ok)
    # each fault ended its worker; a worker starts again when the next request comes (the
    # batch runs in build-completion order, so a fault may be its last request)
    [after] = _measure(pools, [Problem(256, 256, 256)])
    assert after.ok and runner.restarts == before + 2


def test_evaluate_rewards(pools):
    builders, runner = pools
    programs = [SIMT, SIMT.replace("c1x1", "c2x1"), SIMT.replace("64x64x32", "128x64x32")]
    results = env.evaluate(programs, Problem(1024, 1024, 1024), device_runner=runner,
                           builders=builders, settings=QUICK)
    assert [r.kind for r in results] == [None, "invalid", None], [r.message for r in results]
    rewards = [env.reward(r) for r in results]
    assert rewards[1] == env.WORST_REWARD  # SIMT is far behind cuBLAS: its reward is < 0
    assert all(env.WORST_REWARD <= x < 0.5 for x in (rewards[0], rewards[2])), rewards


def _group(pools, seeds, problem=Problem(256, 256, 256)):
    builders, runner = pools
    reqs = [MeasureRequest.make(parse(SIMT), problem, QUICK, seed=s) for s in seeds]
    return measure(reqs, builders=builders, runner=runner, progress=False)


def test_group_times_together_and_fails_a_wrong_kernel_alone(pools):
    """Three requests of one problem form one group; the middle one (SHORT_K_M) computes
    the wrong thing and fails alone while the group goes on."""
    results = _group(pools, [1, gpu_hooks.SEED_BASE + gpu_hooks.SHORT_K_M, 7])
    assert [r.kind for r in results] == [None, "wrong", None], [r.message for r in results]
    assert not any(f.startswith("timed alone") for r in results for f in r.flags)
    same = results[0].kernel_us / results[2].kernel_us
    assert 0.9 < same < 1.1 and results[0].cublas_us == results[2].cublas_us


def test_a_crash_in_a_group_costs_one_request(pools):
    """The middle request (BOGUS_M) faults: the group's worker dies, each request is
    then measured alone, and only the one at fault fails."""
    results = _group(pools, [1, gpu_hooks.SEED_BASE + gpu_hooks.BOGUS_M, 7])
    assert [r.kind for r in results] == [None, "runtime", None], [r.message for r in results]
    assert "illegal" in results[1].message.lower(), results[1].message[-600:]
    assert all(any(f.startswith("timed alone: the group") for f in r.flags)
               for r in (results[0], results[2])), results[0].flags
