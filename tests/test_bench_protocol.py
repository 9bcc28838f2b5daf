"""CPU tier for search.measure.bench's orchestration: run_request on a simulated CUDA.

torch.cuda is replaced by a small simulation on CPU (tests/simulated_cuda.py): tensors made
"on cuda" live on the CPU, CUDA graphs record launches and replay them, and events read a
fake GPU clock that advances by a planted time per GEMM (candidate, cuBLAS NN, cuBLAS TN, L2
flush). The timing protocols must then report exactly the planted per-launch times, the cold
protocol's flush subtraction must cancel the flushes, and the candidate must be launched
exactly as often as BenchSettings' docstring says. Groups of candidates (run_group) are
tests/test_bench_group.py's. What this can't show (real graph capture, real events, cuBLAS)
is the GPU tier's job (tests/gpu/test_measure_gpu.py).
"""
from __future__ import annotations

import collections
import types

import pytest
import torch

from gemmforge.search.measure import bench, gate, timing
from gemmforge.search.measure.records import ArtifactRecord, BenchSettings, MeasureRequest
from simulated_cuda import (  # noqa: F401 (simulate is a fixture)
    FLUSH_US, SIMT, TN_US, FakeKernel, cold_graph, simulate,
)


def _run(sim, layout="nn", acc="f32", k=72, **settings):
    s = BenchSettings(rounds=3, warmup=2, call_repeats=2, server_calls=3, server_max_gap_ms=0,
                      min_graph_launches=3, max_graph_launches=3, **settings)
    req = MeasureRequest(SIMT, 40, 24, k, layout, acc, s, seed=5)
    art = ArtifactRecord("key", "fake", "/nonexistent", SIMT, layout, acc)
    return req, bench.run_request(req, art, load=lambda a: FakeKernel(sim, layout))


@pytest.mark.parametrize("layout, acc, k", [("nn", "f32", 72), ("nt", "f16", 2100)])
def test_protocols_report_the_planted_times(simulate, layout, acc, k):
    sim = simulate(candidate_us=5.0, layout=layout)
    req, r = _run(sim, layout, acc, k)
    assert r.ok and r.kernel_us == pytest.approx(5.0) and r.cublas_us == pytest.approx(TN_US)
    assert r.cold_us == pytest.approx(5.0) and r.cublas_cold_us == pytest.approx(TN_US)
    assert r.spread == pytest.approx(0.0) and r.cublas_spread == pytest.approx(0.0)
    assert r.call_us > 0 and r.server_us > 0 and r.rel_err < gate.tolerance(req.problem())
    assert r.flags == () and r.speedup == pytest.approx(TN_US / 5.0)
    assert sim.launches == req.settings.candidate_launches(3, cold_graph(req), k)


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
    held = []  # every buffer launched on stays alive, so no address is reused for another

    def record(a, b, out):
        held.append((a, b, out))
        seen[(a.data_ptr(), b.data_ptr(), out.data_ptr())] += 1
        out.copy_(gate.reference(a, b, "nn").half())
    sim = simulate(candidate_us=5.0, kernel_fn=record)
    req, r = _run(sim, protocols=("kernel", "cold"))
    assert r.ok and r.cold_us == pytest.approx(5.0)
    sets = cold_graph(req)
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
    assert list(pool.kept) == [(4096, 4096, 64, "nn", "f16")]


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


def test_after_reads_each_launch_after_another_kernel(simulate, monkeypatch):
    """The after protocol: each launch follows an elementwise add, whose own time is taken
    out, so the planted per-launch times come back (cuBLAS: the kernel times' layout)."""
    sim = simulate(candidate_us=5.0)
    real_add = torch.add
    adds = []
    monkeypatch.setattr(torch, "add", lambda *a, **k: sim.gemm(
        FLUSH_US, lambda: adds.append(real_add(*a, **k))))
    _, r = _run(sim, protocols=("kernel", "after"))
    assert r.ok and r.after_us == pytest.approx(5.0) and r.cublas_after_us == pytest.approx(TN_US)
    assert adds and all(x.numel() == timing.AFTER_KERNEL_ELEMENTS for x in adds)
