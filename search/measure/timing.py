"""The timing protocols of search.measure.bench: contenders timed interleaved, round by round.

    samples = kernel_protocol(contenders, settings, launches, stream)  # {name: [us per round]}

A Contender is one GEMM implementation under test (a candidate kernel, cuBLAS NN or TN).
Every protocol visits all contenders once per round, in a new order each round, so whatever
the GPU does over time (clock swings under the power cap, a slow spell lasting tens of ms)
lands on all of them alike, and each contender runs right after every other equally often
(under the power cap a neighbour's draw moved the next reading by up to 8 %,
benchmarks/NOTES.md, Measurement protocols); each returns per-round samples, in
microseconds per GEMM, by contender name. BenchSettings' docstring counts every launch.

Constraints:
  - a contender's `launch` must be capturable in a CUDA graph (no allocation, no sync);
  - the caller has made the stream it times on current (graphs can't be captured on the
    legacy default stream).
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from .records import BenchSettings

SLOW_CONFIRMATIONS = 2
"""How many more times calibrate() times a launch that read slower than its cut-off."""


@dataclass
class Contender:
    """One GEMM implementation under test: `launch` enqueues C = A @ B into fixed buffers on
    the current stream; `call` is the user-facing Python call (allocates its output);
    `launch_on(i)` the launch on operand copy i (0: launch's buffers), for the cold protocol."""

    name: str
    launch: Callable[[], None]
    call: Callable[[], object]
    launch_on: Callable[[int], None] | None = None


def elapsed_us(enqueue: Callable[[], None]) -> float:
    """GPU time of what `enqueue` puts on the current stream, in us. The device-wide sync
    before the end event makes work hidden on any other stream count too."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    enqueue()
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def repeat(fn: Callable[[], None], n: int) -> Callable[[], None]:
    def run():
        for _ in range(n):
            fn()
    return run


def graph(enqueue: Callable[[], None], stream):
    """A CUDA graph of what `enqueue` launches, captured on `stream` and replayed once
    (untimed: the first replay uploads the graph)."""
    import torch
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        enqueue()
    g.replay()
    return g


def launches_per_graph(settings: BenchSettings, per_launch_us: float) -> int:
    """n = clamp(ceil(graph_us / per_launch_us), min_graph_launches, max_graph_launches)."""
    want = math.ceil(settings.graph_us / max(per_launch_us, 1e-3))
    return min(max(want, settings.min_graph_launches), settings.max_graph_launches)


def round_orders(n: int) -> list[list[int]]:
    """Visiting orders of n contenders, one per round, balanced for what runs just before
    each: a Williams design (first row 0, 1, n-1, 2, n-2, ...; row r adds r mod n; for odd
    n the rows reversed as well), in which every contender directly follows every other
    equally often over the cycle (n rows for even n, 2n for odd)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def interleave(contenders, rounds: int, sample: Callable, warm_rounds: int = 0,
               after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """`rounds` samples per contender; each round visits all of them, in the orders of
    round_orders(), so over a cycle each contender runs after every other equally often
    (under the power cap a neighbour's draw moves the next reading). `warm_rounds` rounds
    run first and are not recorded; `after_round(r)` is called after each round (a group's
    worker reports it as progress)."""
    out = {c.name: [] for c in contenders}
    orders = round_orders(len(contenders)) if contenders else [[]]
    for r in range(warm_rounds + rounds):
        # recorded rounds start the cycle, so whole cycles of them are exactly balanced
        for c in (contenders[i] for i in orders[(r - warm_rounds) % len(orders)]):
            value = sample(c)
            if r >= warm_rounds:
                out[c.name].append(value)
        if after_round is not None:
            after_round(r)
    return out


def kernel_protocol(cs, settings, counts, stream,
                    after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Per round, one replay of each contender's graph of counts[name] launches (L2 warm)."""
    graphs = {c.name: graph(repeat(c.launch, counts[c.name]), stream) for c in cs}
    return interleave(cs, settings.rounds,
                      lambda c: elapsed_us(graphs[c.name].replay) / counts[c.name],
                      settings.warm_rounds, after_round)


MAX_ROTATION = 64
"""The most operand copies the cold protocol rotates through; a problem so small that it
would need more is timed after a flush instead (cold_protocol)."""


def rotation_sets(footprint_bytes: int, l2_bytes: int, factor: float) -> int:
    """How many copies of a launch's operands (`footprint_bytes`: A, B and C) the cold
    protocol rotates through so that each launch finds its own evicted: enough that the
    others' total is over `factor` x L2; 1 where that would take more than MAX_ROTATION."""
    sets = math.ceil(factor * l2_bytes / max(footprint_bytes, 1)) + 1
    return sets if sets <= MAX_ROTATION else 1


def cold_protocol(cs, settings, times, stream, sets: int = 1,
                  after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Per launch with L2 cold: the operands come from HBM, and L2 holds nothing the launch
    must write back first (as a model's layers find their weights).

    sets > 1 (rotation_sets): each contender's graph runs back to back through `sets` copies
    of its operands (`launch_on(i)`), a multiple of `sets` launches, `times[name]` sizing it;
    the reading is the graph's time per launch. sets == 1 (a problem too small to rotate):
    graph(n x (flush, launch)) - graph(n x flush), the flush a sum over a buffer of
    l2_flush_factor x L2 (a read: a written flush would leave L2 dirty, and the launch after
    it would pay for writing it back, 1.3x the time at 1x4096x4096, benchmarks/NOTES.md)."""
    if sets > 1:
        n = {c.name: sets * math.ceil(launches_per_graph(settings, times[c.name]) / sets)
             for c in cs}
        rotated = {c.name: graph(repeat(lambda c=c: [c.launch_on(i) for i in range(sets)],
                                        n[c.name] // sets), stream) for c in cs}
        return interleave(cs, settings.rounds,
                          lambda c: elapsed_us(rotated[c.name].replay) / n[c.name],
                          settings.warm_rounds, after_round)
    import torch
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    junk = torch.zeros(int(l2 * settings.l2_flush_factor) // 4, dtype=torch.float32,
                       device="cuda")
    total = torch.zeros((), dtype=torch.float32, device="cuda")

    def flush():
        torch.sum(junk, dim=0, out=total)
    return _each_after(cs, settings, times, stream, flush, after_round)


AFTER_KERNEL_ELEMENTS = 1 << 18
"""The after protocol's kernel: an in-place add over this many fp32 values (1 MiB)."""


def after_protocol(cs, settings, times, stream,
                   after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Per launch after another kernel, L2 warm: graph(n x (add, launch)) - graph(n x add),
    the add an in-place elementwise kernel of torch's over AFTER_KERNEL_ELEMENTS values, as in
    a model where a GEMM follows a norm or an activation. The kernel protocol's launches
    follow their own previous launch, which a pdl program overlaps; a GEMM after a kernel
    that does not let it start early (any of torch's) overlaps nothing
    (benchmarks/README.md, launch_timeline.py)."""
    import torch
    x = torch.zeros(AFTER_KERNEL_ELEMENTS, dtype=torch.float32, device="cuda")
    return _each_after(cs, settings, times, stream, lambda: torch.add(x, 1.0, out=x), after_round)


def _each_after(cs, settings, times, stream, before: Callable[[], None],
                after_round) -> dict[str, list[float]]:
    """Per round, each contender's graph(n x (before, launch)) - graph(n x before), / n."""
    before_us = elapsed_us(repeat(before, 3)) / 3
    n = {c.name: launches_per_graph(settings, times[c.name] + before_us) for c in cs}

    def pair(c):
        return lambda: (before(), c.launch())
    both = {c.name: graph(repeat(pair(c), n[c.name]), stream) for c in cs}
    alone = {c.name: graph(repeat(before, n[c.name]), stream) for c in cs}
    return interleave(cs, settings.rounds, lambda c: (
        elapsed_us(both[c.name].replay) - elapsed_us(alone[c.name].replay)) / n[c.name],
        settings.warm_rounds, after_round)


def sustained_protocol(cs, settings, counts, stream,
                       after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Per round, each contender in turn runs back to back for `sustained_s` seconds (its
    graph of counts[name] launches, replayed without a pause): the power cap's clock, not
    the short window's. Sample: the median per launch over that turn's replays. The first
    warm_rounds turns (the GPU still below its cap) are not recorded."""
    graphs = {c.name: graph(repeat(c.launch, counts[c.name]), stream) for c in cs}
    return interleave(cs, settings.sustained_rounds, lambda c: _sustained_us(
        graphs[c.name], counts[c.name], settings.sustained_s), settings.warm_rounds, after_round)


def _sustained_us(g, launches: int, seconds: float) -> float:
    """Median us per launch over replays of graph `g` (of `launches` launches) enqueued
    back to back for about `seconds`, an event between replays, one sync at the end."""
    import torch
    first = elapsed_us(g.replay)  # sizes the turn: how many replays fill `seconds`
    replays = max(2, math.ceil(seconds * 1e6 / max(first, 1e-3)))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
    events[0].record()
    for e in events[1:]:
        g.replay()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 / launches
                             for a, b in zip(events, events[1:]))


def call_us(c: Contender, refill: Callable[[], None], idle_s: float = 0.0) -> float:
    """Wall-clock us of one Python call + device-wide sync, on freshly written inputs."""
    import torch
    refill()
    torch.cuda.synchronize()
    if idle_s:
        time.sleep(idle_s)
    t0 = time.perf_counter_ns()
    c.call()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e3


def call_protocol(cs, settings, refill: Callable[[], None]) -> dict[str, list[float]]:
    for c in cs:
        call_us(c, refill)  # one warm call: allocator and handles
    return interleave(cs, settings.rounds * settings.call_repeats,
                      lambda c: call_us(c, refill))


def server_protocol(cs, settings, refill: Callable[[], None],
                    seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return interleave(cs, settings.server_calls, lambda c: call_us(
        c, refill, rng.uniform(0.0, settings.server_max_gap_ms) / 1e3))


def calibrate(c: Contender, settings, cutoff_us: float = math.inf) -> tuple[float, float]:
    """(time of one launch alone, time per launch over `warmup` back to back), in us; the
    warm-up is skipped (and the one-launch time returned twice) above `cutoff_us`. A launch
    above `cutoff_us` is timed again, up to SLOW_CONFIRMATIONS times, and the fastest
    counts: the first launches on an idle GPU (clocks ramping up, a module loading) can
    take hundreds of times longer than the kernel."""
    one = elapsed_us(c.launch)
    for _ in range(SLOW_CONFIRMATIONS if one > cutoff_us else 0):
        one = min(one, elapsed_us(c.launch))  # a one-off stall is not a slow kernel
        if one <= cutoff_us:
            break
    if one > cutoff_us or not settings.warmup:
        return one, one
    return one, elapsed_us(repeat(c.launch, settings.warmup)) / settings.warmup


def stat(settings: BenchSettings, samples: list[float]) -> float:
    """The settings' statistic (median or min) of one contender's samples."""
    return statistics.median(samples) if settings.statistic == "median" else min(samples)


def per_round_speedups(samples: dict[str, list[float]],
                       name: str) -> tuple[list[float], list[float]]:
    """(per round, cuBLAS's best time / contender `name`'s; per round, cuBLAS's best)."""
    blas = [min(nn, tn) for nn, tn in zip(samples["cublas_nn"], samples["cublas_tn"])]
    return [b / c if c > 0 else math.inf for b, c in zip(blas, samples[name])], blas


def spread(xs: list[float]) -> float:
    """(max - min) / median."""
    mid = statistics.median(xs)
    return (max(xs) - min(xs)) / mid if mid > 0 else math.inf
