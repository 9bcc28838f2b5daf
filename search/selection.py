"""How a campaign picks a shape's winner among its confirmation's results.

    selection_ratio(problem, result)   # the figure the winner maximises
    selected_by(problem, result)       # which figures that was: sustained, kernel+cold, kernel
"""
from __future__ import annotations

import math

from gemmforge.ir.program import Problem
from gemmforge.search.portfolio import shape_class
from gemmforge.search.records import Result


def ok(r: Result) -> bool:
    """A result that may win: measured right, plausible, with a kernel ratio."""
    return r.ok and not r.implausible and r.speedup is not None


def selection_ratio(problem: Problem, r: Result) -> float:
    """What a confirmation's winner is chosen by: the sustained ratio for the large class
    where measured; else the geometric mean of the kernel ratios with L2 warm and L2 cold
    where both are measured (weights are cold in a model's forward pass: a program that
    wins warm by overlapping back-to-back launches, pdl, must not lose it cold); else the
    kernel ratio (paired, L2 warm)."""
    if shape_class(problem) == "large" and r.sustained_speedup is not None:
        return r.sustained_speedup
    if r.cold_speedup is not None:
        return math.sqrt(r.speedup * r.cold_speedup)
    return r.speedup


def selected_by(problem: Problem, r: Result) -> str:
    """Which figures selection_ratio used for `r`: sustained, kernel+cold or kernel."""
    if shape_class(problem) == "large" and r.sustained_speedup is not None:
        return "sustained"
    return "kernel+cold" if r.cold_speedup is not None else "kernel"
