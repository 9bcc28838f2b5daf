"""The policy protocol: a policy proposes programs for a problem and observes results.

What to try lives here; how to emit (backends) and how to time (search) do not.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..ir.program import Arch, Problem, Program


@runtime_checkable
class Policy(Protocol):
    name: str

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        """Up to `n` distinct programs worth measuring for `problem` on `arch`, best first.
        Every program returned passes ir.verify for `problem`."""

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Learn from one measured result (reward = log(cuBLAS time / kernel time))."""
