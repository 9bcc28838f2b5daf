"""CPU tier for search.bench's orchestration: run_request on a simulated CUDA.

torch.cuda is replaced by a small simulation on CPU: tensors made "on cuda" live on the CPU,
CUDA graphs record launches and replay them, and events read a fake GPU clock that
advances by a planted time per GEMM (candidate, cuBLAS NN, cuBLAS TN, L2 flush). The
timing protocols must then report exactly the planted per-launch times, the cold
protocol's flush subtraction must cancel the flushes, and the candidate must be launched
exactly as often as BenchSettings' docstring says. What this can't show (real graph
capture, real events, cuBLAS) is the GPU tier's job (tests/gpu/test_measure_gpu.py).
"""
from __future__ import annotations

import collections
import contextlib
import types

import pytest
import torch

from gemmforge.search import bench, gate, timing
from gemmforge.search.records import ArtifactRecord, BenchSettings, MeasureRequest

SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"
NN_US, TN_US, FLUSH_US = 7.0, 6.0, 40.0


class SimulatedCuda:
    """The torch.cuda surface search.bench touches, on CPU, with a fake clock in us."""

    def __init__(self, candidate_us: float, kernel_fn):
        self.clock, self.capturing, self.launches = 0.0, None, 0
        self.candidate_us, self.kernel_fn = candidate_us, kernel_fn
        sim = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = sim.clock

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.t - self.t) / 1e3

        class Graph:
            def replay(self):
                for fn in self.recorded:
                    fn()

        @contextlib.contextmanager
        def graph(g, stream=None):
            g.recorded, self.capturing = [], g
            yield
            self.capturing = None

        self.Event, self.CUDAGraph, self.graph = Event, Graph, graph
        self.synchronize = lambda: None
        self.Stream = lambda: types.SimpleNamespace(cuda_stream=0)
        self.current_stream = lambda *a: types.SimpleNamespace(cuda_stream=0)
        self.stream = lambda s: contextlib.nullcontext()
        self.current_device = lambda: 0
        self.get_device_properties = lambda d: types.SimpleNamespace(L2_cache_size=1 << 16)
        self.get_device_name = lambda *a: "NVIDIA H200 (simulated)"

    def gemm(self, cost_us: float, fn, counts: bool = False):
        """Run `fn` now (advancing the clock), or record it when a graph is capturing."""
        def run():
            self.clock += cost_us
            self.launches += counts
            return fn()
        if self.capturing is not None:
            self.capturing.recorded.append(run)
            return None
        return run()


class FakeKernel:
    """compiler.runtime.Kernel's surface, computing with the simulation's kernel_fn in
    `us` per launch (default: the simulation's candidate_us)."""

    def __init__(self, sim: SimulatedCuda, layout: str, us: float | None = None, fn=None):
        self.sim, self.layout = sim, layout
        self.us = sim.candidate_us if us is None else us
        self.fn = fn or sim.kernel_fn
        self.launches = 0

    def count(self, a, b, out):
        self.launches += 1
        return self.fn(a, b, out)

    def workspace_bytes(self, m, n, k):
        return 0

    def __call__(self, a, b):
        out = torch.empty((a.shape[0], b.shape[1] if self.layout == "nn" else b.shape[0]),
                          dtype=torch.float16)
        self.sim.gemm(self.us, lambda: self.count(a, b, out), True)
        return out


@pytest.fixture
def simulate(monkeypatch):
    def install(candidate_us: float, kernel_fn=None, layout: str = "nn") -> SimulatedCuda:
        kernel_fn = kernel_fn or (lambda a, b, out: out.copy_(
            gate.reference(a, b, layout).half()))
        sim = SimulatedCuda(candidate_us, kernel_fn)
        for name in ("empty", "zeros", "full", "randn", "randint", "ones", "Generator"):
            real = getattr(torch, name)
            monkeypatch.setattr(torch, name, lambda *a, _real=real, **k: _real(
                *a, **{**k, "device": "cpu"} if k.get("device") == "cuda" else k))
        real_matmul, real_zero = torch.matmul, torch.Tensor.zero_
        monkeypatch.setattr(torch, "matmul", lambda a, b, **k: sim.gemm(
            NN_US if b.is_contiguous() else TN_US, lambda: real_matmul(a, b, **k)))
        monkeypatch.setattr(torch.Tensor, "zero_",
                            lambda t: sim.gemm(FLUSH_US, lambda: real_zero(t)))
        monkeypatch.setattr(bench._Buffers, "launch_into", lambda self, k, a, b, out: sim.gemm(
            k.us, lambda: k.count(a, b, out), True))
        monkeypatch.setattr(torch, "cuda", sim)
        return sim
    return install


def _run(sim, layout="nn", acc="f32", k=72, **settings):
    s = BenchSettings(rounds=3, warmup=2, call_repeats=2, server_calls=3, server_max_gap_ms=0,
                      min_graph_launches=3, max_graph_launches=3, **settings)
    req = MeasureRequest(SIMT, 40, 24, k, layout, acc, s, seed=5)
    art = ArtifactRecord("key", "fake", "/nonexistent", SIMT, layout, acc)
    return req, bench.run_request(req, art, load=lambda a: FakeKernel(sim, layout))


def _cold_graph(req) -> int:
    """Launches in one cold graph of `req` in the simulation (L2 of 64 KiB, graphs of 3
    launches): whole passes through the rotated operand copies."""
    p = req.problem()
    sets = timing.rotation_sets(2 * (p.m * p.k + p.k * p.n + p.m * p.n), 1 << 16,
                                req.settings.l2_flush_factor)
    return sets * -(-3 // sets)


@pytest.mark.parametrize("layout, acc, k", [("nn", "f32", 72), ("nt", "f16", 2100)])
def test_protocols_report_the_planted_times(simulate, layout, acc, k):
    sim = simulate(candidate_us=5.0, layout=layout)
    req, r = _run(sim, layout, acc, k)
    assert r.ok and r.kernel_us == pytest.approx(5.0) and r.cublas_us == pytest.approx(TN_US)
    assert r.cold_us == pytest.approx(5.0) and r.cublas_cold_us == pytest.approx(TN_US)
    assert r.spread == pytest.approx(0.0) and r.cublas_spread == pytest.approx(0.0)
    assert r.call_us > 0 and r.server_us > 0 and r.rel_err < gate.tolerance(req.problem())
    assert r.flags == () and r.speedup == pytest.approx(TN_US / 5.0)
    assert sim.launches == req.settings.candidate_launches(3, _cold_graph(req), k)


def test_call_and_cold_time_the_layout_that_won_the_kernel_protocol(simulate, monkeypatch):
    """cuBLAS TN wins the kernel times, so cold and call time the candidate against TN
    alone and report TN's figures, even where NN's call median happens to read lower
    (the lower of two noisy medians, taken afterwards, would report NN's)."""
    sim = simulate(candidate_us=5.0)
    monkeypatch.setattr(timing, "kernel_protocol", lambda *args: {
        "candidate0": [5.0] * 3, "cublas_nn": [7.0] * 3, "cublas_tn": [6.0] * 3})
    ran = []

    def planted(times):
        def protocol(cs, *args):
            ran.append([c.name for c in cs])
            return {"candidate0": [times[0]] * 3, "cublas_nn": [times[1]] * 3,
                    "cublas_tn": [times[2]] * 3}
        return protocol
    monkeypatch.setattr(timing, "cold_protocol", planted((9.0, 10.0, 12.0)))
    monkeypatch.setattr(timing, "call_protocol", planted((30.0, 25.0, 28.0)))
    _, r = _run(sim, protocols=("kernel", "cold", "call"))
    assert ran == [["candidate0", "cublas_tn"], ["candidate0", "cublas_tn"]]
    assert r.cublas_us == pytest.approx(6.0)
    assert r.cublas_cold_us == pytest.approx(12.0) and r.cublas_call_us == pytest.approx(28.0)


def test_cold_rotates_through_distinct_operand_copies(simulate, monkeypatch):
    """Each cold launch reads its own copy of the operands, a copy per rotation set, every
    copy holding the same values as the buffers the other protocols time."""
    seen = collections.Counter()

    def record(a, b, out):
        seen[(a.data_ptr(), b.data_ptr(), out.data_ptr())] += 1
        out.copy_(gate.reference(a, b, "nn").half())
    sim = simulate(candidate_us=5.0, kernel_fn=record)
    req, r = _run(sim, protocols=("kernel", "cold"))
    assert r.ok and r.cold_us == pytest.approx(5.0)
    sets = _cold_graph(req)
    assert sets > 3  # one pass through the copies per graph
    # copies 1.. serve the cold rounds alone (the warm round, the rounds, the untimed replay);
    # copy 0, the buffers of every other step, is launched on far more often
    cold_only = [n for n in seen.values() if n == req.settings.warm_rounds + req.settings.rounds + 1]
    assert len(cold_only) == sets - 1 and max(seen.values()) > 2 * cold_only[0]


def test_cold_on_a_problem_too_small_to_rotate_reads_a_flush(simulate, monkeypatch):
    """Where rotation would take more than MAX_ROTATION copies, each launch follows a read of
    a buffer of l2_flush_factor x L2, and the flushes' own time is subtracted."""
    sim = simulate(candidate_us=5.0)
    sim.get_device_properties = lambda d: types.SimpleNamespace(L2_cache_size=1 << 24)
    real_sum = torch.sum
    monkeypatch.setattr(torch, "sum", lambda *a, **k: sim.gemm(FLUSH_US,
                                                              lambda: real_sum(*a, **k)))
    _, r = _run(sim, protocols=("kernel", "cold"))
    assert r.ok and r.cold_us == pytest.approx(5.0) and r.cublas_cold_us == pytest.approx(TN_US)


def test_rotation_sets():
    assert timing.rotation_sets(10 << 20, 50 << 20, 2.0) == 11
    assert timing.rotation_sets(1 << 30, 50 << 20, 2.0) == 2
    assert timing.rotation_sets(1 << 10, 50 << 20, 2.0) == 1  # would need > MAX_ROTATION


def test_slow_candidate_is_cut_short(simulate):
    sim = simulate(candidate_us=1000.0)
    req, r = _run(sim)
    assert r.ok and r.kernel_us == pytest.approx(1000.0) and r.cublas_us == pytest.approx(TN_US)
    assert r.call_us is None and r.flags[0].startswith("slow")
    # gate (normal + exact), one calibration launch and two confirming it, re-check
    assert sim.launches == 2 + 1 + timing.SLOW_CONFIRMATIONS + 1


def test_a_one_off_stall_is_not_taken_for_a_slow_kernel(simulate, monkeypatch):
    """The first calibration launch stalls (as on an idle GPU): timed again, it is fast,
    and the kernel gets the full protocol."""
    sim = simulate(candidate_us=5.0)
    times = iter([5.0, 5.0, 1000.0])  # gate, exact check, then a stalled calibration launch
    monkeypatch.setattr(bench._Buffers, "launch_into", lambda self, k, a, b, out: sim.gemm(
        next(times, 5.0), lambda: sim.kernel_fn(a, b, out), True))
    _, r = _run(sim, protocols=("kernel",))
    assert r.ok and r.kernel_us == pytest.approx(5.0) and r.flags == ()


def test_impossible_speed_is_flagged(simulate):
    sim = simulate(candidate_us=1e-5)  # 40x24x72 in 10 ps: ~14 PFLOP/s
    _, r = _run(sim, protocols=("kernel",))
    assert any(f.startswith("implausible kernel") for f in r.flags) and r.implausible


def test_wrong_kernel_raises_gate_failure(simulate):
    def off_by_one(a, b, out):
        out.copy_(gate.reference(a, b, "nn").half())
        out[3, 4] += 1
    sim = simulate(candidate_us=5.0, kernel_fn=off_by_one)
    with pytest.raises(gate.GateFailure, match="exact"):
        _run(sim)


def test_requests_for_a_problem_share_memory_with_fresh_values(simulate, monkeypatch):
    """reuse_operands: the second request for a problem times on the first one's tensors
    (the same addresses), with values drawn afresh from its own seed; without it, new
    tensors. Each request's values still pass the gate."""
    pool = bench.OperandPool()
    monkeypatch.setattr(bench, "_POOL", pool)
    sim = simulate(candidate_us=5.0)
    seen, time_group = [], bench._time_group

    def timed(bufs, *args):
        seen.append((bufs.a.data_ptr(), bufs.b.data_ptr(), bufs.c.data_ptr(),
                     bufs.a[0, :4].tolist()))
        return time_group(bufs, *args)
    monkeypatch.setattr(bench, "_time_group", timed)

    def request(seed: int, reuse: bool = True):
        s = BenchSettings(rounds=1, warmup=0, protocols=("kernel",), min_graph_launches=1,
                          max_graph_launches=1, reuse_operands=reuse)
        req = MeasureRequest(SIMT, 40, 24, 72, "nn", "f32", s, seed=seed)
        art = ArtifactRecord("key", "fake", "/nonexistent", SIMT, "nn", "f32")
        assert bench.run_request(req, art, load=lambda a: FakeKernel(sim, "nn")).ok
        return seen[-1]

    first, second = request(5), request(6)
    assert first[:3] == second[:3] and first[3] != second[3]
    assert len(pool.kept) == 1
    assert request(7, reuse=False)[:3] != first[:3]


def test_operand_pool_keeps_recent_problems_within_its_limit():
    from gemmforge.ir import Problem
    pool = bench.OperandPool(limit=2 * 5 * 72 * 64 * 2, device="cpu")  # two problems' worth
    first = {m: pool.take(Problem(m, 64, 64))["a"] for m in (64, 64 + 8, 64 + 16)}
    assert [key[0] for key in pool.kept] == [64 + 8, 64 + 16]  # the 64-row problem's went
    assert pool.take(Problem(64 + 16, 64, 64))["a"] is first[64 + 16]
    pool.take(Problem(4096, 4096, 64))  # alone over the limit: kept, the rest go
    assert list(pool.kept) == [(4096, 4096, 64, "nn")]


def test_speedup_pairs_each_round_against_clock_drift(simulate, monkeypatch):
    """The GPU's clock halves from round 3 on (every contender's time doubles), but for the
    candidate only from round 4: its median stays at the fast clock while cuBLAS's does
    not. Each round's pair reads 1.5x but one, so speedup does; the ratio of the medians
    reads 3x."""
    sim = simulate(candidate_us=5.0)
    drift = [1.0, 1.0, 2.0, 2.0, 2.0]
    planted = {"candidate0": [4.0, 4.0, 4.0, 8.0, 8.0],
               "cublas_nn": [7.0 * d for d in drift], "cublas_tn": [6.0 * d for d in drift]}
    monkeypatch.setattr(timing, "kernel_protocol", lambda *args: planted)
    _, r = _run(sim, protocols=("kernel",))
    assert r.paired_speedup == pytest.approx(1.5) and r.speedup == pytest.approx(1.5)
    assert r.cublas_us / r.kernel_us == pytest.approx(3.0)
    assert r.spread == pytest.approx((3.0 - 1.5) / 1.5)
    _, r = _run(sim, protocols=("kernel",), statistic="min")  # minima: no pairing
    assert r.paired_speedup is None and r.speedup == pytest.approx(6.0 / 4.0)


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
    want = reqs[0].settings.candidate_launches(3, _cold_graph(reqs[0]), 72)
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


def test_warm_rounds_run_first_and_are_not_recorded():
    ticks = iter(range(100))
    cs = [timing.Contender(name, None, None) for name in ("a", "b")]
    samples = timing.interleave(cs, 2, lambda c: (c.name, next(ticks)), warm_rounds=1)
    # round 0 (ticks 0, 1) is the warm one; rounds 1 and 2 (ticks 2-3, 4-5) are recorded
    assert sorted(t for name in "ab" for _, t in samples[name]) == [2, 3, 4, 5]
    assert all(name == c for c in "ab" for name, _ in samples[c])
    assert {t // 2 for _, t in samples["a"]} == {1, 2}  # once per round


def test_each_round_visits_everyone_in_its_own_order():
    """No contender always follows the same neighbour (a power-hungry one would move its
    readings): over a cycle of rounds each runs right after every other equally often."""
    names = [f"c{i}" for i in range(8)]
    cs = [timing.Contender(name, None, None) for name in names]
    visits = []
    timing.interleave(cs, 8, visits.append)
    orders = [[c.name for c in visits[r * 8:(r + 1) * 8]] for r in range(8)]
    assert all(sorted(o) == names for o in orders) and len({tuple(o) for o in orders}) == 8
    pairs = collections.Counter((o[i - 1], o[i]) for o in orders for i in range(1, 8))
    assert len(pairs) == 8 * 7 and set(pairs.values()) == {1}


@pytest.mark.parametrize("n", range(1, 12))
def test_round_orders_balance_every_predecessor(n):
    """Williams design: permutations whose ordered neighbour pairs each appear equally often
    (once per cycle for even n, twice for odd)."""
    rows = timing.round_orders(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    pairs = collections.Counter((row[i - 1], row[i]) for row in rows for i in range(1, n))
    assert len(pairs) == n * (n - 1)
    assert set(pairs.values()) <= {1 if n % 2 == 0 else 2}


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


def test_sustained_protocol_reports_the_planted_times_against_the_winning_layout(simulate):
    """Turns of back-to-back replays read the planted per-launch times; cuBLAS's figure is
    the layout that won the kernel protocol (TN), as for cold and call."""
    sim = simulate(candidate_us=5.0)
    _, r = _run(sim, protocols=("kernel", "sustained"), sustained_s=1e-4, sustained_rounds=2)
    assert r.ok and r.sustained_us == pytest.approx(5.0)
    assert r.cublas_sustained_us == pytest.approx(TN_US)
    assert r.sustained_speedup == pytest.approx(TN_US / 5.0)


def test_sustained_turn_runs_for_the_asked_seconds(simulate):
    sim = simulate(candidate_us=5.0)
    g = timing.graph(timing.repeat(lambda: sim.gemm(5.0, lambda: None, True), 4), None)
    before = sim.clock
    assert timing._sustained_us(g, 4, 1e-3) == pytest.approx(5.0)
    assert sim.clock - before >= 1e3  # 1 ms of back-to-back replays, in us
