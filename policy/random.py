"""A baseline policy: uniformly random legal programs from the tuner's space."""
from __future__ import annotations

import random

from ..ir.program import Arch, Problem, Program


class RandomPolicy:
    """Uniformly random legal programs of ir.space for the given archs and backends."""

    name = "random"

    def __init__(self, archs, backends=None, seed: int = 0):
        self.archs, self.backends, self._rng = archs, backends, random.Random(seed)

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        """Up to `n` distinct legal programs (fewer if 20 n draws find no more)."""
        from ..ir.space import Space
        space = Space.build([arch], self.backends, problem)
        out: list[Program] = []
        for _ in range(20 * n):
            p = space.sample_legal(problem, self._rng)
            if p not in out:
                out.append(p)
            if len(out) == n:
                break
        return out

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Random doesn't learn."""
