"""Tile rules for small and medium problems, from a backend's declared capabilities.

Where cuBLAS wins below 1e11 FLOP (benchmarks/NOTES.md, Small shapes and pdl) it runs the token
side (M) in tiles of 8 to 64 rows on the MMA's narrow side, 64-wide weight tiles with deep
rings, and split-K for long K over few tiles. `shapes(problem, backend)` gives those choices
for any backend, read from its capabilities only (`allowed["swap_ab"]`, `tile_extras`,
`reductions`, `max_stages`), never its name; policy.heuristic turns them into programs and
keeps the ones ir.verify accepts. Units: tiles in elements, SMS in multiprocessors.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..ir.devices import H100
from ..ir.program import TILE_STEP, Problem, Reduction

SMS = H100.sms             # multiprocessors on H100/H200: the wave the grid should fill
SMALL_M = 256              # a token side this short is a small problem whatever N and K
SMALL_FLOPS = 1e10         # and so is anything under this many FLOPs (2mnk)
SWAP_M = 128               # token sides put on the MMA's narrow side (swap_ab)
TOKEN_TILE_MAX = 64        # the largest token-side tile; longer token sides take several
SPLIT_MIN_K = 2048         # K below which splitting K does not pay for its reduction
MIN_K_STEPS_PER_SLICE = 4  # each split-K slice keeps at least this many K steps
MAX_TILE = 256


@dataclass(frozen=True)
class SmallShape:
    """One proposal's tile, in the problem's terms (bm along M), and its split-K."""

    swap_ab: bool
    bm: int
    bn: int
    bk: int
    slices: int
    reduction: Reduction


def is_small(problem: Problem) -> bool:
    """A problem the small-shape rules serve: a short token side, or few FLOPs."""
    return problem.m <= SMALL_M or problem.flops < SMALL_FLOPS


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def token_target(m: int) -> int:
    """The token-side tile the rules aim for: the smallest multiple of 8 that holds M, or
    for M past TOKEN_TILE_MAX, M cut into ceil(M / 64) even tiles (77 -> 40, 333 -> 56)."""
    tiles = math.ceil(m / TOKEN_TILE_MAX)
    return _round_up(math.ceil(m / tiles), TILE_STEP)


def tile_values(backend) -> list[int]:
    """bm / bn values the backend declares: powers of two from 8, and its tile_extras."""
    pow2 = [1 << e for e in range(3, MAX_TILE.bit_length())]
    return sorted({*pow2, *(v for v in backend.tile_extras if v <= MAX_TILE)})


def token_tiles(m: int, backend) -> list[int]:
    """Token-side tiles to try, the closest fit first: the declared values from
    token_target(m) up (a backend whose instruction needs more rows skips the rest)."""
    return [v for v in tile_values(backend) if v >= min(token_target(m), MAX_TILE)]


def weight_tiles(problem: Problem, token: int) -> tuple[int, ...]:
    """The weight-side (N) tile, 64 wide while 128-wide tiles would leave SMs idle."""
    tiles_m = math.ceil(problem.m / token)
    return (64, 128) if tiles_m * math.ceil(problem.n / 128) < SMS else (128, 64)


def split_for(problem: Problem, tiles: int, bk: int, backend) -> tuple[int, Reduction]:
    """Split-K slices so tiles x slices nears one wave where K is long and tiles are
    few, reduced in the kernel where the backend can (else through the workspace)."""
    k_steps = math.ceil(problem.k / bk)
    if tiles >= SMS // 2 or problem.k < SPLIT_MIN_K:
        return 1, Reduction.WORKSPACE
    slices = max(1, min(16, round(SMS / tiles), k_steps // MIN_K_STEPS_PER_SLICE))
    if slices == 1:
        return 1, Reduction.WORKSPACE
    inkernel = Reduction.INKERNEL in backend.reductions
    return slices, Reduction.INKERNEL if inkernel else Reduction.WORKSPACE


def shapes(problem: Problem, backend) -> list[SmallShape]:
    """Tile and split choices for `problem` on `backend`, best guess first: swapped
    (token side on the MMA's narrow side) where the backend takes swap_ab and M is the
    short side, then unswapped; per token tile, the weight tile and K step in order."""
    swaps = [True] if (True in backend.allowed.get("swap_ab", ())
                       and problem.m <= SWAP_M and problem.m < problem.n) else []
    out = []
    for swap in (*swaps, False):
        for bm in token_tiles(problem.m, backend):
            for bk, bn in itertools.product((64, 32), weight_tiles(problem, bm)):
                tiles = math.ceil(problem.m / bm) * math.ceil(problem.n / bn)
                out.append(SmallShape(swap, bm, bn, bk, *split_for(problem, tiles, bk, backend)))
    return out
