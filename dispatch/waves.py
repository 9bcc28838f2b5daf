"""A neighbour's program at another shape: its measured time carried over by waves of tiles.

    predicted_us(program, measured=Problem(512, 4096, 4096), measured_us=28.3,
                 problem=Problem(700, 3584, 3584), sms=132)   # -> 49.6 (two waves, not one)

The shipped file measured each program at its own grid shape. At a shape off the grid the
same program cuts C into another number of tiles: ceil(m/bm) x ceil(n/bn) x split_k of them,
run in waves of one tile per SM (data-parallel and persistent schedules: ceil(tiles / sms)
waves; stream-K shares the last wave's work, so tiles / sms, at least one). Each wave costs
one tile's K loop, bm x bn x (its K slice rounded up to bk) multiply-adds per SM. So the
program's time at the new shape is its measured time scaled by that slot work:

    time(problem) = measured_us x slot_work(problem) / slot_work(measured)

which charges what a neighbour's tile wastes at this shape: a ragged last row of tiles
(m = 77 in tiles of 64 rows computes 128), a second wave that the neighbour did not need
(700x3584 in 128x128 tiles: 168 tiles on 132 SMs), and a longer or shorter K loop. It
ignores what the measured time already holds (the program's own rate: pipelining, memory,
launch), which is why it compares programs measured at shapes near the asked one only
(dispatch.choice.MAX_DISTANCE). Replayed against the recorded campaigns it took the nearest
shape's program from 0.855 to 0.864 of tuning each shape (benchmarks/NOTES.md, Off the grid:
the resolver's rules).

Constraints:
  - one resident CTA per SM (the deep-ring programs the campaigns ship fill shared memory);
  - split-K's reduction and a cluster's pairing are not charged;
  - units: times in µs, slot work in multiply-adds per SM.
"""
from __future__ import annotations

import math

from ..ir.program import Problem, Program, Schedule


def waves(program: Program, problem: Problem, sms: int) -> float:
    """Waves of tiles `program` runs at `problem` on `sms` SMs (see the module doc)."""
    t = program.tile
    tiles = math.ceil(problem.m / t.bm) * math.ceil(problem.n / t.bn) * program.split_k.slices
    if program.schedule == Schedule.STREAM_K:
        return max(1.0, tiles / sms)
    return float(math.ceil(tiles / sms))


def slot_work(program: Program, problem: Problem, sms: int) -> float:
    """Multiply-adds one SM spends on `problem` with `program`'s tiles, padding included:
    waves x bm x bn x the K slice rounded up to whole bk steps."""
    t = program.tile
    k_slice = math.ceil(math.ceil(problem.k / program.split_k.slices) / t.bk) * t.bk
    return waves(program, problem, sms) * t.bm * t.bn * k_slice


def predicted_us(program: Program, measured: Problem, measured_us: float, problem: Problem,
                 sms: int) -> float:
    """`program`'s time (µs) at `problem`, from its time `measured_us` at `measured`, scaled
    by slot_work (see the module doc)."""
    return measured_us * slot_work(program, problem, sms) / slot_work(program, measured, sms)
