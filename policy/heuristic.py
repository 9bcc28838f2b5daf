"""The default policy: hand-written rules from tile-size folklore, no learning.

Large problems get big tiles for arithmetic intensity; small M x N get small tiles so
the grid fills the 108-132 SMs; few tiles with a long K get split-K. Ahead of those rules
go the measured special cases of policy.cases (one table, each case naming its evidence)
where their conditions hold. Every candidate is checked with ir.verify, and the illegal
ones are skipped, so propose() returns only legal programs. It is also the fallback when a learned policy has nothing to say.
"""
from __future__ import annotations

import functools
import itertools
import math

from ..ir.program import (
    Arch, Layout, Padding, Problem, Program, Raster, RasterOrder, SplitK, Swizzle, Tile, Warps,
    WarpSpec,
)
from ..ir.devices import H100
from ..ir.verify import check
from . import cases, small_shapes, wave_fit
from .cases import SEED_MIN_FLOPS

SMS = H100.sms            # multiprocessors on H100/H200 (A100: 108); sets the wave size
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


# Warp layouts to fall back on when the table's is illegal for a backend (warpgroup
# backends count 128-thread units, so 2x2 warps become 2x1 warpgroups, and so on).
_WARP_FALLBACKS = ((2, 1), (1, 1), (1, 2), (4, 1), (2, 2), (2, 4), (4, 2))
_SWIZZLE_ORDER = (Swizzle.B128, Swizzle.PAD, Swizzle.NONE, Swizzle.B64, Swizzle.B32)


def _fit(backend, program: Program) -> Program:
    """`program` with each field a backend restricts set to an accepted value: kept if
    accepted, else the first accepted one (deterministic order)."""
    changes = {}
    for fld, values in getattr(backend, "allowed", {}).items():
        if getattr(program, fld) not in values:
            changes[fld] = sorted(values, key=str)[0]
    return program.replace(**changes) if changes else program


def _candidates(backend, arch: Arch, problem: Problem):
    """Programs for one backend, best guess first (not yet verified)."""
    pdl = _pdl(backend, arch, problem)
    for bm, bn, bk, wm, wn, stages in _tiles_for(problem):
        split = _split_for(problem, bm, bn, bk)
        for swizzle in _SWIZZLE_ORDER:
            for warps in ((wm, wn), *_WARP_FALLBACKS):
                yield _fit(backend, Program(
                    backend=backend.name, arch=arch, tile=Tile(bm, bn, bk), warps=Warps(*warps),
                    stages=stages, swizzle=swizzle, raster=Raster(RasterOrder.ROW, 8),
                    padding=Padding.PREDICATE, split_k=SplitK(split), pdl=pdl))


PREFERRED = {Arch.SM90A: ("cuda_wgmma", "cuda_mma"), Arch.SM80: ("cuda_mma",)}
"""Backends `default_program` tries, in order, per arch (raw CUDA: emits standalone files)."""


# Warp layouts for small tiles, per warp unit (32 threads: the token side wants one warp
# row; 128-thread warpgroups: one consumer)
_SMALL_WARPS = {32: ((1, 4), (1, 2), (1, 1), (2, 2), (2, 1), (4, 1)), 128: ((1, 1), (2, 1))}


def _deepest(program: Program, problem: Problem) -> tuple[Program | None, str | None]:
    """`program` at the deepest ring verify accepts (its stages are the most to try; the
    ring stops at the K steps one slice has), or None and verify's reason when it blames
    another field than stages."""
    k_steps = math.ceil(problem.k / program.split_k.slices / program.tile.bk)
    reason = None
    for stages in range(min(program.stages, max(2, k_steps)), 1, -1):
        candidate = program.replace(stages=stages)
        reason = check(candidate, problem)
        if reason is None:
            return candidate, None
        if not reason.startswith("stages"):
            break
    return None, reason


def _small_candidates(backend, arch: Arch, problem: Problem):
    """Programs from policy.small_shapes' rules for a small or medium problem, each at the
    deepest ring it holds; nothing for a large problem. Other swizzles and warps are
    tried only while verify blames those."""
    if not small_shapes.is_small(problem):
        return
    for shape in small_shapes.shapes(problem, backend):
        for swizzle, warps in itertools.product(
                _SWIZZLE_ORDER, _SMALL_WARPS.get(backend.unit_threads, _WARP_FALLBACKS)):
            program = _fit(backend, Program(
                backend=backend.name, arch=arch, tile=Tile(shape.bm, shape.bn, shape.bk),
                warps=Warps(*warps), stages=backend.max_stages, swizzle=swizzle,
                raster=Raster(RasterOrder.ROW, 8), padding=Padding.PREDICATE,
                split_k=SplitK(shape.slices, shape.reduction), swap_ab=shape.swap_ab,
                pdl=_pdl(backend, arch, problem)))
            deep, reason = _deepest(program, problem)
            if deep is not None:
                yield deep
            if deep is not None or not (reason.startswith("swizzle") or "warps" in reason):
                break


WAVE_FIT_STAGE_BYTES = 32 * 1024  # a ring stage this big or more keeps 64-deep K steps
_WAVE_FIT_WARPS = ((2, 1), (1, 1), (1, 2), (4, 1), (2, 2))


def wave_fit_programs(backend, arch: Arch, problem: Problem):
    """Programs from policy.wave_fit's tile and split shapes (cheapest predicted first),
    cooperative and data-parallel, each at the deepest ring it holds; warps and reductions
    other than the model's are tried only while verify refuses."""
    if arch != Arch.SM90A:
        return
    aligned = problem.k % 8 == 0 and (problem.layout == Layout.NT or problem.n % 8 == 0)
    for fit in wave_fit.fits(problem, backend):
        rows = fit.bm + fit.bn
        bk = 64 * min(4, 1 << int(math.log2(max(1, WAVE_FIT_STAGE_BYTES // (rows * 64 * 2)))))
        rows_64 = fit.bm // 64  # one consumer warpgroup per 64 rows where that is a power of two
        warps = ((rows_64, 1), *_WAVE_FIT_WARPS) if not fit.swap_ab and rows_64 in (1, 2, 4) \
            else _WAVE_FIT_WARPS
        reductions = [fit.reduction, *(r for r in backend.reductions if r != fit.reduction)] \
            if fit.slices > 1 else [fit.reduction]
        for (wm, wn), reduction in itertools.product(dict.fromkeys(warps), reductions):
            program = _fit(backend, Program(
                backend=backend.name, arch=arch, tile=Tile(fit.bm, fit.bn, bk),
                warps=Warps(wm, wn), stages=backend.max_stages, swizzle=Swizzle.B128,
                raster=Raster(RasterOrder.ROW, 8),
                padding=Padding.PREDICATE if aligned else Padding.PAD_OPERANDS,
                split_k=SplitK(fit.slices, reduction), swap_ab=fit.swap_ab,
                warp_spec=WarpSpec.COOPERATIVE, pdl=_pdl(backend, arch, problem)))
            deep, _ = _deepest(program, problem)
            if deep is not None:
                yield deep
                break


def _pdl(backend, arch: Arch, problem: Problem) -> bool:
    """Programmatic dependent launch where the backend lowers it (sm_90a) and the problem is
    below SEED_MIN_FLOPS: back to back, a launch overlaps the previous kernel's tail (on the
    H100, pdl twins against their plain forms: +5 % at 2mnk 1e8, +3 % at 1e9, -1 % at 1e10,
    a single launch unchanged; benchmarks/NOTES.md, Small shapes and pdl)."""
    return (arch == Arch.SM90A and problem.flops < SEED_MIN_FLOPS
            and True in backend.allowed.get("pdl", ()))


@functools.lru_cache(maxsize=None)
def _parse(text: str) -> Program:
    from ..ir.text import parse
    return parse(text)


def _seeds(backend: str, arch: Arch, problem: Problem) -> list[Program]:
    """The programs of policy.cases' table that lead for `problem`, of `backend` on `arch`."""
    return [p for p in map(_parse, cases.programs(problem))
            if p.backend == backend and p.arch == arch]


class HeuristicPolicy:
    """Rule-based proposals for one or several backends (round-robin between them)."""

    name = "heuristic"

    def __init__(self, backend: str | None = None, backends: list[str] | None = None):
        self.backends = list(backends) if backends else [backend or DEFAULT_BACKEND]

    def _legal(self, name: str, problem: Problem, arch: Arch, n: int) -> list[Program]:
        from ..backends import registry
        backend = registry.get(name)
        if arch not in backend.archs:
            return []
        out: list[Program] = []
        for program in itertools.chain(_seeds(name, arch, problem),
                                       wave_fit_programs(backend, arch, problem),
                                       _small_candidates(backend, arch, problem),
                                       _candidates(backend, arch, problem)):
            if program not in out and check(program, problem) is None:
                out.append(program)
                if len(out) == n:
                    break
        return out

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        per_backend = [self._legal(b, problem, arch, n) for b in self.backends]
        ordered = [p for group in itertools.zip_longest(*per_backend) for p in group if p]
        return ordered[:n]

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Rules don't learn."""


def default_program(problem: Problem, arch: Arch, backend: str | None = None) -> Program:
    """The one program the heuristic likes best (what `gemmforge emit` uses untuned): of
    `backend`, or of the arch's first PREFERRED backend that has a legal program."""
    for name in (backend,) if backend else PREFERRED[arch]:
        proposals = HeuristicPolicy(name).propose(problem, arch, 1)
        if proposals:
            return proposals[0]
    raise ValueError(f"no legal {backend or ' or '.join(PREFERRED[arch])} program for "
                     f"{problem} on {arch.value}")
