"""The default policy: hand-written rules from tile-size folklore, no learning.

Large problems get big tiles for arithmetic intensity; small M x N get small tiles so
the grid fills the 108-132 SMs; few tiles with a long K get split-K. Every candidate is
checked with ir.verify, and the illegal ones are skipped, so propose() returns only
legal programs. It is also the fallback when a learned policy has nothing to say.
"""
from __future__ import annotations

import itertools
import math

from ir.program import (
    Arch, Padding, Problem, Program, Raster, RasterOrder, SplitK, Swizzle, Tile, Warps,
)
from ir.verify import check

SMS = 132                 # multiprocessors on H100/H200 (A100: 108); sets the wave size
DEFAULT_BACKEND = "cuda_mma"

# (bm, bn, bk, wm, wn, stages), largest first
_TILES = [
    (128, 256, 32, 2, 4, 3), (256, 128, 32, 4, 2, 3), (128, 128, 32, 2, 2, 4),
    (128, 128, 64, 2, 2, 3), (128, 64, 32, 2, 2, 4), (64, 128, 32, 2, 2, 4),
    (64, 64, 32, 2, 2, 4), (64, 64, 64, 2, 2, 3), (32, 64, 32, 1, 2, 4), (32, 32, 32, 1, 1, 4),
    (16, 16, 16, 1, 1, 2),
]


def _tiles_for(problem: Problem) -> list[tuple]:
    """Tile choices ordered by how well their grid fills the chip."""
    def waste(t):
        bm, bn = t[0], t[1]
        ctas = math.ceil(problem.m / bm) * math.ceil(problem.n / bn)
        waves = ctas / SMS
        fill = waves / math.ceil(waves)                   # last-wave quantization
        pad = (problem.m * problem.n) / (math.ceil(problem.m / bm) * bm *
                                         math.ceil(problem.n / bn) * bn)
        big = bm * bn / (256 * 128)                       # bigger tiles reuse more
        return -(fill * pad * (0.5 + big) if ctas >= SMS // 2 else pad * ctas / SMS)
    return sorted(_TILES, key=waste)


def _split_for(problem: Problem, bm: int, bn: int, bk: int) -> int:
    ctas = math.ceil(problem.m / bm) * math.ceil(problem.n / bn)
    k_tiles = math.ceil(problem.k / bk)
    if ctas >= SMS or k_tiles < 8:
        return 1
    return max(1, min(16, SMS // ctas, k_tiles // 4))


def _program(backend: str, arch: Arch, t: tuple, split: int, swizzle: Swizzle) -> Program:
    bm, bn, bk, wm, wn, stages = t
    return Program(backend=backend, arch=arch, tile=Tile(bm, bn, bk), warps=Warps(wm, wn),
                   stages=stages, swizzle=swizzle, raster=Raster(RasterOrder.ROW, 8),
                   padding=Padding.PREDICATE, split_k=SplitK(split))


class HeuristicPolicy:
    name = "heuristic"

    def __init__(self, backend: str = DEFAULT_BACKEND):
        self.backend = backend

    def _swizzles(self) -> list[Swizzle]:
        return [Swizzle.B128, Swizzle.PAD, Swizzle.NONE]

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        out: list[Program] = []
        for t, swizzle in itertools.product(_tiles_for(problem), self._swizzles()):
            program = _program(self.backend, arch, t, _split_for(problem, *t[:3]), swizzle)
            if check(program, problem) is None and program not in out:
                out.append(program)
                if len(out) == n:
                    break
        return out

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Rules don't learn."""


def default_program(problem: Problem, arch: Arch, backend: str = DEFAULT_BACKEND) -> Program:
    """The one program the heuristic likes best (what `gemmforge emit` uses untuned)."""
    proposals = HeuristicPolicy(backend).propose(problem, arch, 1)
    if not proposals:
        raise ValueError(f"no legal {backend} program for {problem} on {arch.value}")
    return proposals[0]
