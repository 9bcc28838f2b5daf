"""Tiles and K splits sized to the chip's wave, ranked by a per-SM roofline.

Below the large class a GEMM's tiles are few: 256x6144x4096 in 128x128 tiles is 96 CTAs for
132 SMs, so a quarter of the chip idles while each busy SM streams 2 MB of operands. Two
cures, both in the IR already: a tile side off the powers of two (128x96 makes 128 tiles;
wgmma takes any multiple of 8 on its N side, and of 64 on its M side), and split-K over
bigger tiles (128x192 in two slices, also 128 CTAs, each moving a third fewer bytes). What
DeepGEMM's SM90 heuristics rank by (fewest waves, then the fullest last wave) picks the
first; a byte count per SM is needed to weigh the second. So:

    time = max(waves x max(flops per CTA / F_SM, bytes per CTA / B_SM),  (per-SM roofline)
               unique operand bytes / B_DRAM)                           (the memory floor)
           + waves x a wave's first-stage latency + the split's reduction

with F_SM the dense fp16 rate per SM at a held clock and B_SM what one SM's TMA ring draws
from L2 (both below, round figures from earlier readings). A wave holds fewer
CTAs when a split's slices form clusters (a cluster stays inside one GPC: RESIDENT_CTAS), and
an in-kernel split whose accumulators fill a thread's registers pays its last slice's sum in
L2 round trips (SUM_ROUND_TRIP_S). The model ranks the shapes of a tile, nothing else: ring
depth, warps, the producer's form and the reduction's form are left to ir.verify and the
measurement. Checked against the H200 campaign stores (benchmarks/NOTES.md, Tiles and K
splits sized to the wave): it ranks unlike programs well; among its own close proposals its
first pick was 13-21 % behind the best measured before the clusters' residency was counted,
8-11 % after, still blind to ring depth, so it proposes and the measurement picks.
Units: bytes, FLOPs, seconds.

    fits(problem, backend)   # FitShape proposals, cheapest predicted first
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.devices import H100
from ..ir.program import TILE_STEP, Layout, Problem, Reduction

SMS = H100.sms            # multiprocessors on H100/H200: one CTA each per wave
F_SM = 0.8 * H100.peak_fp16_flops / SMS  # FLOP/s an SM holds: the dense fp16 rate at ~1.5 GHz under load
B_SM = 80e9               # bytes/s one SM's loads draw from L2 (60-100 in the H200's nt rows)
B_DRAM = 3.0e12           # bytes/s from memory: what a copy reaches of H100.hbm_bytes_per_s (~0.9)
WAVE_LATENCY_S = 1.5e-6   # a wave's first stage lands this long after its request (H100)
REDUCE_LAUNCH_S = 2e-6    # a workspace split's second kernel
MIN_FLOPS, MAX_FLOPS = 1e8, 1e11  # where a wave's fill decides (the large class has many waves)
MAX_SLICES = 8            # split-K slices tried (a cluster sums at most 8)
MIN_K_PER_SLICE = 256     # each slice keeps at least four 64-deep K steps
ROW_SIDE = 64             # wgmma's M side: the 64-row side takes multiples of this
MAX_SIDE = 256            # one TMA box
HALF = 2                  # bytes of an fp16 element
PARTIAL = 4               # bytes of an fp32 partial sum
RESIDENT_CTAS = {1: 132, 2: 132, 3: 117, 4: 120, 5: 110, 6: 102, 7: 105, 8: 120}
"""CTAs resident at once in clusters of each size, one CTA an SM (cudaOccupancyMaxActiveClusters
on an H200: 132, 66, 39, 30, 22, 17, 15, 15 clusters; a cluster stays inside a GPC; an H100's
clusters of four held ~120 CTAs too). A split
summed through the cluster makes each tile's slices one cluster, so 32 tiles in k4c are 128
CTAs and two waves: at 2048x256x16384 128x128 k4c read 57.5 us against 44 for k4i
(benchmarks/NOTES.md)."""
SUM_ROUND_TRIP_S = 1.3e-6  # an in-kernel split's last slice, per L2 round trip of its sum
IN_KERNEL_FREE_REGS = 64   # accumulator registers a thread may hold and still batch that sum


@dataclass(frozen=True)
class FitShape:
    """One proposal in the problem's terms (bm along M, bn along N) and its predicted time."""

    swap_ab: bool
    bm: int
    bn: int
    slices: int
    reduction: Reduction
    seconds: float


def _sides(problem: Problem, swap: bool) -> tuple[list[int], list[int]]:
    """bm and bn values: the 64-row side in multiples of 64 (N with swap_ab, else M), the
    other in steps of 8 (layout nn reads B in 64-column atoms, so there bn steps by 64)."""
    rows = list(range(ROW_SIDE, MAX_SIDE + 1, ROW_SIDE))
    narrow_step = ROW_SIDE if (problem.layout == Layout.NN and not swap) else TILE_STEP
    narrow = list(range(narrow_step, MAX_SIDE + 1, narrow_step))
    return (narrow, rows) if swap else (rows, narrow)


def predicted_seconds(problem: Problem, bm: int, bn: int, slices: int,
                      reduction: Reduction, floor: bool = True, swap_ab: bool = False) -> float:
    """The model's time for `problem` in bm x bn tiles and `slices` K slices (without the
    memory floor if not `floor`: what ranks shapes the floor ties), one consumer warpgroup
    per 64 rows of the wgmma's 64-row side (N with `swap_ab`, else M)."""
    m, n, k = problem.m, problem.n, problem.k
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * slices
    k_slice = math.ceil(k / slices)
    flops = 2 * bm * bn * k_slice
    loaded = (min(bm, m) + min(bn, n)) * k_slice * HALF  # TMA fills rows past the edge free
    per_cta = max(flops / F_SM, loaded / B_SM)
    unique = (m * k + n * k + m * n) * HALF
    cluster = slices if reduction == Reduction.CLUSTER else 1
    waves = math.ceil(ctas / RESIDENT_CTAS[cluster])
    seconds = max(waves * per_cta, unique / B_DRAM if floor else 0) + waves * WAVE_LATENCY_S
    if slices > 1:
        if reduction == Reduction.CLUSTER:  # partials cross the cluster's shared memory
            seconds += bm * bn * PARTIAL * (slices - 1) / B_SM
        else:  # fp32 partials written and read back through memory
            seconds += 2 * m * n * PARTIAL * slices / B_DRAM
            if reduction == Reduction.WORKSPACE:
                seconds += REDUCE_LAUNCH_S
        narrow = bm if swap_ab else bn  # a warpgroup's accumulators: 64 x narrow, fp32
        if reduction == Reduction.INKERNEL and narrow // 2 > IN_KERNEL_FREE_REGS:
            # the last slice sums each accumulator pair's planes in turn, one L2 round trip
            # a pair when the accumulators leave no registers for more loads in flight (at
            # 2048x256x16384, 128x256 k8i 124 us where the workspace's k8 took 36)
            seconds += narrow // 4 * SUM_ROUND_TRIP_S
    return seconds


def _reductions(backend, slices: int) -> list[Reduction]:
    if slices == 1:
        return [Reduction.WORKSPACE]
    order = (Reduction.CLUSTER, Reduction.INKERNEL, Reduction.WORKSPACE)
    return [r for r in order if r in backend.reductions
            and (r != Reduction.CLUSTER or slices <= MAX_SLICES)]


def fits(problem: Problem, backend, limit: int = 12) -> list[FitShape]:
    """Up to `limit` tile and split shapes for `problem`, cheapest predicted first, one per
    (swap_ab, bm, slices, waves): the bn with the cheapest prediction there, with its
    cheapest reduction (ties on the memory floor go to the cheaper roofline, then the
    smaller tile). None outside MIN_FLOPS..MAX_FLOPS or for a backend whose instruction is
    not wgmma-shaped (a 64-row side, N in steps of 8)."""
    if not MIN_FLOPS <= problem.flops < MAX_FLOPS or tuple(backend.mma_shape[:2]) != (64, 8):
        return []
    swaps = [False]
    if True in backend.allowed.get("swap_ab", ()) and problem.layout == Layout.NT \
            and problem.m < problem.n:
        swaps.append(True)
    best: dict[tuple, tuple[tuple, FitShape]] = {}  # key -> (rank, shape)
    for swap in swaps:
        bms, bns = _sides(problem, swap)
        for bm in (v for v in bms if v < problem.m + bms[0]):  # past M: no fewer tiles
            for bn in (v for v in bns if v < problem.n + bns[0]):
                for slices in range(1, MAX_SLICES + 1):
                    if slices > 1 and problem.k / slices < MIN_K_PER_SLICE:
                        break
                    ctas = math.ceil(problem.m / bm) * math.ceil(problem.n / bn) * slices
                    key = (swap, bm, slices, math.ceil(ctas / SMS))
                    for reduction in _reductions(backend, slices):
                        shape = FitShape(swap, bm, bn, slices, reduction, predicted_seconds(
                            problem, bm, bn, slices, reduction, swap_ab=swap))
                        rank = (shape.seconds, predicted_seconds(
                            problem, bm, bn, slices, reduction, floor=False, swap_ab=swap),
                            bm * bn)
                        if key not in best or rank < best[key][0]:
                            best[key] = (rank, shape)
    return [shape for _, shape in sorted(best.values(), key=lambda v: v[0])][:limit]
