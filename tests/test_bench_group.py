"""CPU tier for search.measure.bench.run_group on a simulated CUDA (tests/simulated_cuda.py): several
candidates of one problem timed against cuBLAS rounds paid once, each reporting its own
planted time, launched as often as alone, failed or cut short alone, and every step
reported to the worker's parent."""
from __future__ import annotations

import pytest
import torch

from gemmforge.search.measure import bench, gate, timing
from gemmforge.search.measure.records import ArtifactRecord, BenchSettings, MeasureRequest
from simulated_cuda import SIMT, TN_US, FakeKernel, cold_graph, simulate  # noqa: F401 (a fixture)


def _group(sim, kernels, k=72, **settings):
    s = BenchSettings(rounds=3, warmup=2, call_repeats=2, server_calls=3, server_max_gap_ms=0,
                      min_graph_launches=3, max_graph_launches=3, **settings)
    reqs = [MeasureRequest(SIMT, 40, 24, k, "nn", "f32", s, seed=5 + 3 * i)
            for i in range(len(kernels))]
    arts = [ArtifactRecord(f"key{i}", "fake", "/nonexistent", SIMT, "nn", "f32")
            for i in range(len(kernels))]
    by_key = dict(zip((a.key for a in arts), kernels))
    return reqs, bench.run_group(reqs, arts, load=lambda art: by_key[art.key])


def test_group_times_each_candidate_against_cublas_rounds_paid_once(simulate, monkeypatch):
    """Three candidates in one group: each reports its own planted time against the same
    cuBLAS, each is launched exactly as often as alone, and cuBLAS is launched as often as
    for one request alone (its calibration and kernel rounds are shared)."""
    sim = simulate(candidate_us=5.0)
    blas_calls, matmul = [], torch.matmul
    monkeypatch.setattr(torch, "matmul",
                        lambda *a, **k: (blas_calls.append(1), matmul(*a, **k))[1])
    kernels = [FakeKernel(sim, "nn", us) for us in (5.0, 9.0, 3.0)]
    reqs, results = _group(sim, kernels, protocols=("kernel", "cold"))
    assert [r.kernel_us for r in results] == pytest.approx([5.0, 9.0, 3.0])
    assert [r.speedup for r in results] == pytest.approx([TN_US / 5.0, TN_US / 9.0, TN_US / 3.0])
    assert all(r.ok and r.cublas_us == pytest.approx(TN_US) and r.flags == () for r in results)
    assert [r.program for r in results] == [q.program for q in reqs]
    want = reqs[0].settings.candidate_launches(3, cold_graph(reqs[0]), 72)
    assert [k.launches for k in kernels] == [want] * 3
    group_blas = len(blas_calls)
    blas_calls.clear()
    _group(sim, [FakeKernel(sim, "nn", 5.0)], protocols=("kernel", "cold"))
    assert group_blas == len(blas_calls)  # calibration, kernel and cold rounds are shared


def test_group_pairs_each_call_with_cublas_alone(simulate, monkeypatch):
    """Call and server rounds time each candidate against cuBLAS's winning layout on its
    own, as a request alone does; cold rounds visit the whole group."""
    sim = simulate(candidate_us=5.0)
    ran = []
    for name in ("cold_protocol", "call_protocol", "server_protocol"):
        def spy(cs, *args, _real=getattr(timing, name), _name=name):
            ran.append((_name, [c.name for c in cs]))
            return _real(cs, *args)
        monkeypatch.setattr(timing, name, spy)
    _, results = _group(sim, [FakeKernel(sim, "nn", us) for us in (5.0, 9.0)])
    assert ran == [("cold_protocol", ["candidate0", "candidate1", "cublas_tn"]),
                   ("call_protocol", ["candidate0", "cublas_tn"]),
                   ("call_protocol", ["candidate1", "cublas_tn"]),
                   ("server_protocol", ["candidate0", "cublas_tn"]),
                   ("server_protocol", ["candidate1", "cublas_tn"])]
    assert all(r.call_us > 0 and r.cublas_call_us > 0 and r.server_us > 0 for r in results)


def test_group_fails_a_wrong_candidate_alone(simulate, monkeypatch):
    def off_by_one(a, b, out):
        out.copy_(gate.reference(a, b, "nn").half())
        out[3, 4] += 1
    sim = simulate(candidate_us=5.0)
    kernels = [FakeKernel(sim, "nn", 5.0), FakeKernel(sim, "nn", 4.0, off_by_one),
               FakeKernel(sim, "nn", 7.0)]
    _, results = _group(sim, kernels, protocols=("kernel",))
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert results[1].kind == "wrong" and "exact" in results[1].message
    assert [results[0].kernel_us, results[2].kernel_us] == pytest.approx([5.0, 7.0])
    assert kernels[1].launches == 2  # its gate (normal, exact) only: never timed

    monkeypatch.setattr(bench, "healthy", lambda: False)  # the wrong output broke the context
    with pytest.raises(RuntimeError, match="health check"):
        _group(sim, kernels, protocols=("kernel",))


def test_group_cuts_a_slow_candidate_short_alone(simulate):
    sim = simulate(candidate_us=5.0)
    _, (fast, slow) = _group(sim, [FakeKernel(sim, "nn", 5.0), FakeKernel(sim, "nn", 1000.0)])
    assert fast.flags == () and fast.kernel_us == pytest.approx(5.0) and fast.call_us > 0
    assert slow.flags[0].startswith("slow") and slow.kernel_us == pytest.approx(1000.0)
    assert slow.call_us is None


def test_group_needs_one_problem_and_settings(simulate):
    sim = simulate(candidate_us=5.0)
    req = MeasureRequest(SIMT, 40, 24, 72, "nn", "f32", BenchSettings(rounds=2), seed=5)
    art = ArtifactRecord("key", "fake", "/nonexistent", SIMT, "nn", "f32")
    for other in (MeasureRequest(SIMT, 40, 24, 80, "nn", "f32", req.settings),
                  MeasureRequest(SIMT, 40, 24, 72, "nn", "f32", BenchSettings(rounds=3))):
        with pytest.raises(ValueError, match="one problem"):
            bench.run_group([req, other], [art, art], load=lambda a: FakeKernel(sim, "nn"))
    with pytest.raises(ValueError, match="one problem"):
        bench.run_group([], [])


def test_group_reports_every_step(simulate):
    """run_group's progress callback hears of every gate, calibration, round and re-check,
    which is what lets the worker's parent bound each step instead of the whole group."""
    sim = simulate(candidate_us=5.0)
    steps = []
    s = BenchSettings(rounds=3, warmup=2, min_graph_launches=3, max_graph_launches=3,
                      protocols=("kernel", "cold"))
    reqs = [MeasureRequest(SIMT, 40, 24, 72, "nn", "f32", s, seed=5 + 3 * i) for i in range(2)]
    arts = [ArtifactRecord("key", "fake", "/nonexistent", SIMT, "nn", "f32")] * 2
    bench.run_group(reqs, arts, load=lambda a: FakeKernel(sim, "nn"), progress=steps.append)
    rounds = s.warm_rounds + s.rounds
    assert steps == (["gate 0", "gate 1", "calibrated candidate0", "calibrated candidate1"]
                     + [f"kernel round {r}" for r in range(rounds)]
                     + [f"cold round {r}" for r in range(rounds)] + ["cold rounds"]
                     + ["re-check 0", "re-check 1"])
