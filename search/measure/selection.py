"""How a campaign picks a shape's winner among its confirmation's results.

    selection_ratio(problem, result)   # the figure the winner maximises
    selected_by(problem, result)       # which: sustained, after, kernel+cold, kernel
    disturbed(rounds)                  # confirmation rounds measured on a disturbed GPU
    comparable_speedup(results, protocol)  # ranks readings of different groups against one cuBLAS
    ranking_protocol(problem, results)     # which protocol: after below the large class
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

from ...ir.program import Problem
from .shapes import shape_class
from .records import Result


def ok(r: Result) -> bool:
    """A result that may win: measured right, plausible, with a kernel ratio."""
    return r.ok and not r.implausible and r.speedup is not None


def selection_ratio(problem: Problem, r: Result) -> float:
    """What a confirmation's winner is chosen by: the sustained ratio for the large class
    where measured; else the after protocol's ratio where measured (each launch after another
    kernel, as a GEMM runs in a model: the kernel protocol's launches follow their own, which
    a pdl program overlaps, and so do the cold protocol's rotated copies of small problems;
    benchmarks/NOTES.md); else the geometric mean of the kernel
    ratios with L2 warm and L2 cold where both are measured; else the kernel ratio (paired,
    L2 warm)."""
    return _SELECTED[selected_by(problem, r)](r)


_SELECTED: dict[str, Callable[[Result], float]] = {
    "sustained": lambda r: r.sustained_speedup,
    "after": lambda r: r.after_speedup,
    "kernel+cold": lambda r: math.sqrt(r.speedup * r.cold_speedup),
    "kernel": lambda r: r.speedup,
}


def selected_by(problem: Problem, r: Result) -> str:
    """Which figures selection_ratio uses for `r`: sustained, after, kernel+cold or kernel."""
    if shape_class(problem) == "large" and r.sustained_speedup is not None:
        return "sustained"
    if r.after_speedup is not None:
        return "after"
    return "kernel+cold" if r.cold_speedup is not None else "kernel"


def latest_clean(rounds: dict[int, list[Result]], bad: set[int]) -> list[Result]:
    """The ok results of the latest confirmation round not measured on a disturbed GPU
    (`bad`, from disturbed()); [] when there is none."""
    clean = [n for n in rounds if n not in bad]
    return [r for r in rounds[clean[-1]] if ok(r)] if clean else []


# A confirmation round whose cuBLAS reading is this much slower than the shape's fastest
# cuBLAS reading in any of its rounds was measured on a disturbed GPU (seen on an H100: one
# round read cuBLAS 20.2 us and the candidates 7.8-562 us where other rounds read 3.6-3.8 us
# and 3.3 us); its ranking says nothing about the programs.
DISTURBED = 1.5


def _cublas_reading(results: list[Result]) -> float | None:
    """A round's cuBLAS kernel time: every result of one group carries the same reading."""
    readings = [r.cublas_us for r in results if r.cublas_us]
    return statistics.median(readings) if readings else None


def disturbed(rounds: dict[int, list[Result]]) -> set[int]:
    """The rounds (of one shape's confirmations, {round: results}) whose cuBLAS reading is
    over DISTURBED x the fastest round's: what the GPU did then was not the programs' doing.
    With fewer than two readings nothing can be told apart, and nothing is disturbed."""
    readings = {n: c for n, rs in rounds.items() if (c := _cublas_reading(rs)) is not None}
    if len(readings) < 2:
        return set()
    fastest = min(readings.values())
    return {n for n, c in readings.items() if c > DISTURBED * fastest}


# Portfolio groups of one shape whose cuBLAS readings differ by more than this are not
# compared by their ratios (the readings of calm groups agree within 3-5 %).
SAME_CUBLAS = 1.25


_FIGURES = {"kernel": ("cublas_us", "kernel_us", "speedup"),
            "after": ("cublas_after_us", "after_us", "after_speedup")}
"""Per protocol a portfolio ranks by: cuBLAS's time, ours, and their ratio (Result fields)."""


def ranking_protocol(problem: Problem, results: list[Result]) -> str:
    """What a shape's portfolio and search readings are ranked by for its confirmation: the
    after protocol below the large class where every reading has it (what selection_ratio
    then picks by), else the kernel protocol."""
    if (shape_class(problem) != "large" and results
            and all(r.after_speedup is not None for r in results)):
        return "after"
    return "kernel"


def comparable_speedup(results: list[Result],
                       protocol: str = "kernel") -> Callable[[Result], float]:
    """A ranking figure for readings of one shape taken in different groups (a portfolio's
    rounds, days apart): the protocol's ratio, except in a group whose cuBLAS read over
    SAME_CUBLAS x the fastest cuBLAS reading among `results` (a disturbed GPU): there the
    program's time against that fastest reading, where lower. Seen at 4096x64x4096: a group
    whose cuBLAS read 13.1 us (8.7 elsewhere) ranked its programs at 1.03-1.04, ahead of a
    0.98 program from a calm group; they confirmed at 0.71."""
    theirs, ours, ratio = _FIGURES[protocol]
    readings = [getattr(r, theirs) for r in results if getattr(r, theirs)]
    fastest = min(readings, default=None)

    def figure(r: Result) -> float:
        cublas, own = getattr(r, theirs), getattr(r, ours)
        if fastest and cublas and own and cublas > SAME_CUBLAS * fastest:
            return min(getattr(r, ratio), fastest / own)
        return getattr(r, ratio)
    return figure
