"""The operand bytes a grid's waves read from memory, by raster: the model behind the
campaign's raster twins (`gemmforge campaign --twins raster`).

    footprint_bytes(program, Problem(12288, 2048, 12288), sms=132)   # 1.01e9 (row/8)
    raster_twins(program, problem, sms=132)   # the same program with the rasters it favours

cuda_wgmma walks its tiles (clusters of tiles) in the grouped raster of
templates/units.cuh.jinja: `group` tile rows (raster row) or columns (col) at a time, across
the other side. A wave is the clusters resident at once (one CTA per SM: the large tiles
these programs use take over half an SM's shared memory), and its CTAs run about the same k
offsets together, so each A row panel and B column panel that a wave touches comes from
DRAM about once in that wave, and a K-long panel set does not outlive it in L2. So a
launch reads about

    sum over waves of (distinct tile rows x bm + distinct tile columns x bn) x K x 2 bytes

Measured beside ncu's dram__bytes_read (H100, one launch, caches flushed): 1.01 GB predicted
against 1.01 GB at 12288x2048x12288 (192x128 c2x1 row/8), 3.8 against 3.9 GB at
12288x8192x8192 (128x128 row/4); cuBLAS read 0.63 and 1.8 GB there (benchmarks/NOTES.md). Under the 700 W cap every DRAM byte is power the tensor cores don't
get, which is why a raster that reads less can win the sustained protocol where short
windows can't tell them apart.

Constraints:
  - cuda_wgmma only (the other backends' rasters walk tiles their own way): raster_twins
    gives none for them;
  - stream-K's shared last wave and split-K slices are counted as whole tiles;
  - one CTA per SM, `sms` of them (132 on an H100 SXM).
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...ir.program import MAX_RASTER_GROUP, Problem, Program, Raster, RasterOrder

BACKENDS = ("cuda_wgmma",)
GROUPS = tuple(g for g in (1, 2, 4, 8, 16, 32, 64) if g <= MAX_RASTER_GROUP)
TWIN_GAIN = 0.10  # a twin must read at least this fraction fewer bytes than the incumbent
TWIN_COUNT = 2


def tile_order(tiles_m: int, tiles_n: int, raster: Raster) -> list[tuple[int, int]]:
    """(row, column) of each unit in launch order: units.cuh.jinja's unit_at, per cluster."""
    col = raster.order == RasterOrder.COL
    major, minor = (tiles_n, tiles_m) if col else (tiles_m, tiles_n)
    per_group = raster.group * minor
    out = []
    for u in range(tiles_m * tiles_n):
        first = u // per_group * raster.group
        size = min(major - first, raster.group)
        along, across = first + u % per_group % size, u % per_group // size
        out.append((across, along) if col else (along, across))
    return out


def footprint_bytes(program: Program, problem: Problem, sms: int) -> int:
    """Operand bytes `program`'s waves read at `problem` (see the module doc)."""
    t, c = program.tile, program.cluster
    tiles_m = math.ceil(math.ceil(problem.m / t.bm) / c.cm)  # in clusters
    tiles_n = math.ceil(math.ceil(problem.n / t.bn) / c.cn)
    wave = max(1, sms // c.size)
    order = tile_order(tiles_m, tiles_n, program.raster)
    total = 0
    for start in range(0, len(order), wave):
        part = order[start:start + wave]
        rows = len({i for i, _ in part}) * c.cm * t.bm
        cols = len({j for _, j in part}) * c.cn * t.bn
        total += (rows + cols) * problem.k * 2
    return total


def raster_twins(program: Program, problem: Problem, sms: int,
                 count: int = TWIN_COUNT, gain: float = TWIN_GAIN) -> list[Program]:
    """Up to `count` copies of `program` with the rasters whose waves read the fewest bytes
    at `problem`, each at least `gain` fewer than `program`'s own; best first."""
    if program.backend not in BACKENDS:
        return []
    own = footprint_bytes(program, problem, sms)
    scored = []
    for order in RasterOrder:
        for group in GROUPS:
            raster = Raster(order, group)
            if raster == program.raster:
                continue
            twin = replace(program, raster=raster)
            scored.append((footprint_bytes(twin, problem, sms), str(twin), twin))
    scored.sort(key=lambda s: (s[0], s[1]))
    out: list[Program] = []
    seen: set[int] = set()
    for nbytes, _, twin in scored:
        if nbytes > own * (1 - gain) or len(out) == count:
            break
        if nbytes in seen:  # the same walk under another name (a group past the edge)
            continue
        seen.add(nbytes)
        out.append(twin)
    return out
