"""The default policy: hand-written rules from tile-size folklore, no learning.

Large problems get big tiles for arithmetic intensity; small M x N get small tiles so
the grid fills the 108-132 SMs; few tiles with a long K get split-K. Every candidate is
checked with ir.verify, and the illegal ones are skipped, so propose() returns only
legal programs. It is also the fallback when a learned policy has nothing to say.
"""
from __future__ import annotations

import itertools
import math

from ..ir.program import (
    Arch, Layout, Padding, Problem, Program, Raster, RasterOrder, SplitK, Swizzle, Tile, Warps,
    WarpSpec,
)
from ..ir.devices import H100
from ..ir.verify import check
from . import small_shapes, wave_fit

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


# Programs that won on large shapes (benchmarks/results/hopper_large_h100_v5.csv,
# hopper_large_h200_v5.csv, and for cuda_wgmma hopper_large_h100_v11.csv and _v11b.csv),
# proposed first where legal, before the rules' own guesses: per backend in the order of
# their geomean over all 21 shapes of those runs (cuda_wgmma: 1.008, 0.991, 0.989, ...;
# a stream-K program runs as its persistent twin wherever its launcher shares no tiles).
SEEDS = (
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/4 pred k1 streamk c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 streamk c1x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/4 pred k1 persistent c1x1 pingpong tma",
    "cuda_wgmma sm_90a 256x128x64 w2x1 s4 sw128 row/8 pred k1 streamk c1x1 coop tma",
    "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c2x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s5 sw128 row/4 pred k1 persistent c1x1 pingpong tma",
    "cute_cpp sm_90a 256x128x64 w1x2 s4 swnone col/8 pred k1 persistent c1x1 coop tma",
    "cute_cpp sm_90a 128x256x64 w1x2 s4 swnone row/8 pred k1 persistent c1x1 coop tma",
    "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 streamk c1x1 coop tma",
    "triton sm_90a 128x256x64 w2x4 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
)
# 192-wide tiles lose badly where the problem leaves a ragged last row (column) of tiles
# (0.50-0.68x, hopper_192x128_all_h100) and win where it divides evenly: 192x128 ping-pong
# at M = 12288 (1.03-1.13x; cuda_wgmma's 1.10-1.15x at K = 1024), 192x128 w1x2 where N fits
# one or two 128-column tiles (12288x256x16384), 128x192 where M is short and N divides
# (512x12288x8192). These go first, ahead of SEEDS, on the problems they fit.
SEEDS_192 = (
    ("cute_cpp sm_90a 192x128x64 w1x2 s5 swnone row/8 pred k1 persistent c1x1 coop tma",
     lambda p: p.m % 192 == 0 and p.n <= 256),
    ("cute_cpp sm_90a 192x128x64 w1x1 s4 swnone row/8 pred k1 persistent c1x1 pingpong tma",
     lambda p: p.m % 192 == 0 and p.n > 256),
    ("cuda_wgmma sm_90a 192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 pingpong tma",
     lambda p: p.m % 192 == 0 and p.n > 256),
    ("cute_cpp sm_90a 128x192x64 w2x1 s5 swnone row/8 pred k1 persistent c1x1 coop tma",
     lambda p: p.n % 192 == 0 and p.m <= 512),
)
# Output-bound problems: K <= 128 over an M x N of 3 * 2^23 or more, where writing C takes
# longer than the MMAs. 128x256 persistent cooperative tiles with direct 16-byte stores go
# first there: at the H200's grid rows with K <= 512 and M x N >= 2^23 (output_bound_h200_s31:
# the shipped program beside these and eight other forms, best three confirmed warm and cold)
# they won all 38 rows with K <= 128 and M x N >= 3 * 2^23, 7 of the 26 with less, none of
# the 64 with K >= 256; at five K = 128 shapes the stream-K and ping-pong programs shipped
# before read 0.87-0.95x cuBLAS and these 1.03-1.10x (benchmarks/NOTES.md).
OUTPUT_BOUND_MAX_K = 128
OUTPUT_BOUND_MIN_MN = 3 << 23
OUTPUT_BOUND = (
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x128 w2x1 s2 sw128 row/8 pred k1 persistent c1x1 coop direct",
)


def output_bound(problem: Problem) -> bool:
    """Whether writing C outweighs the MMAs enough for the OUTPUT_BOUND forms to lead."""
    return problem.k <= OUTPUT_BOUND_MAX_K and problem.m * problem.n >= OUTPUT_BOUND_MIN_MN


# Long K over 16 or 32 output tiles of 128x128: the tile split 8 or 4 ways through the
# workspace (128 CTAs, then the reduce kernel), as cuBLAS runs 2048x256x16384 on an H200. In
# the long-K round (long_k_split_h200_s32: the shipped program beside
# 14 split forms at the H200's rows with K >= 4096 and M x N <= 2^21) the form won all 7
# rows with M, N >= 256 and K = 16384 and 2 of the 4 with 32 tiles and K = 12288;
# with a shorter K, or 128 on a side, other forms stayed ahead.
def long_k_split(problem: Problem) -> str | None:
    """The workspace split that leads for `problem`, or None where none should."""
    tiles = math.ceil(problem.m / 128) * math.ceil(problem.n / 128)
    if min(problem.m, problem.n) < 256 or tiles not in (16, 32):
        return None
    if problem.k < (16384 if tiles == 16 else 12288):
        return None
    stages, slices = (6, 8) if tiles == 16 else (7, 4)
    return (f"cuda_wgmma sm_90a 128x128x64 w2x1 s{stages} sw128 row/8 pred k{slices} dp c1x1 "
            "coop direct")


# A narrow side streaming the other operand past it: 128 CTAs that each hold one slice of the
# long side, as cuBLAS runs them (192 by 64, in pairs sharing the streamed tile). In the
# streaming round (stream_h200_s32: 105 nn and 20 nt rows with N = 128 or 256 and
# M >= 2048, or M = 64 or 128 and N >= 4096) 192x64 tiles in clusters along N (A multicast to
# both N tiles) won all six 12288x128 rows (+4-18 % beside the programs they replaced), 64x192
# tiles loading B evict-first ten rows at M <= 128 with N = 12288, 64x128 ones five with 96-128
# CTAs; where the grid came out at other sizes (16384 x 128: 172 CTAs) they did not.
def streaming(problem: Problem) -> list[str]:
    """The streaming forms that lead for `problem` (empty where none should)."""
    m, n = problem.m, problem.n
    if problem.k < 1024:
        return []
    if n == 128 and 120 <= 2 * math.ceil(m / 192) <= SMS:
        return ["cuda_wgmma sm_90a 192x64x64 w1x1 s7 sw128 row/8 pred k1 dp c1x2 coop direct pdl"]
    if m > 128:
        return []
    forms = []
    if 60 <= math.ceil(n / 192) <= 66:
        forms.append("cuda_wgmma sm_90a 64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct "
                     "l2first")
    if 96 <= math.ceil(n / 128) * math.ceil(m / 64) <= SMS:
        forms.append("cuda_wgmma sm_90a 64x128x64 w1x1 s9 sw128 row/8 pred k1 dp c1x1 coop direct "
                     "l2first")
    return forms


PREFERRED = {Arch.SM90A: ("cuda_wgmma", "cuda_mma"), Arch.SM80: ("cuda_mma",)}
"""Backends `default_program` tries, in order, per arch (raw CUDA: emits standalone files)."""


SEED_MIN_FLOPS = 1e10  # the seeds' big tiles fill the chip only on large problems


# Small and medium problems on Hopper (2mnk < SEED_MIN_FLOPS), from the small/medium sweeps on an
# H100 (benchmarks/results/small_medium_h100.csv, llm_layers_h100.csv): deep rings and a
# cooperative producer everywhere; a token side of at most 48 rows (layout nt) on wgmma's
# narrow side (swap_ab) in the smallest tile of 8, 16, 32 or 48 that holds it, with split-K
# reduced in the kernel where the weight tiles alone leave most SMs idle; long K over few
# tiles split through the workspace so tiles x slices nears one wave; 64x128 tiles once
# 64x64 tiles number a wave, 128x128 ping-pong once they number three.
MANY_TILES = 3 * SMS      # 64x64 tiles past which the large-class ping-pong program wins
SPLIT_MIN_K = 2048        # K below which splitting never won in the sweeps
SWAP_MAX_M = 48           # the token sides the swapped tiles served best
DECODE_MAX_M = 32         # decode: the token side fits one 8/16/32-row swapped tile
DECODE_STAGES = {8: 6, 16: 5, 32: 4}  # 256-deep stages of token + 64 weight rows in 227 KB


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
    a single launch unchanged; benchmarks/NOTES.md)."""
    return (arch == Arch.SM90A and problem.flops < SEED_MIN_FLOPS
            and True in backend.allowed.get("pdl", ()))


def _tiles64(problem: Problem) -> int:
    return math.ceil(problem.m / 64) * math.ceil(problem.n / 64)


def _small_hopper(problem: Problem) -> list[str]:
    """Program texts for cuda_wgmma on a problem below SEED_MIN_FLOPS, best guess first."""
    aligned = problem.k % 8 == 0 and (problem.layout == Layout.NT or problem.n % 8 == 0)
    # TMA reads 16-byte aligned rows; padop copies. pdl: _pdl (every one is below 1e10)
    wg = ("cuda_wgmma sm_90a {tile} w1x1 s{s} sw128 row/8 " + ("pred" if aligned else "padop")
          + " {k} {sched} c1x1 {ws} {epi}{swap} pdl")
    tiles = _tiles64(problem)
    out = []
    if problem.m <= DECODE_MAX_M and problem.k >= SPLIT_MIN_K:
        # a decode step streams the weights: 256-deep K steps, as many stages as fit, no split
        # (the LLM-layer portfolio: 0.97-1.00 of the best at the 16
        # layers with M <= 32, against 0.71-0.94 for the 64-deep k2i form below)
        token = next(t for t in (8, 16, 32) if t >= problem.m)
        out.append(wg.format(tile=f"{token}x64x256", s=DECODE_STAGES[token], k="k1",
                             sched="dp", ws="coop", epi="direct", swap=" swap"))
    if problem.m <= SWAP_MAX_M:
        token = next(t for t in (8, 16, 32, 48) if t >= problem.m)
        split = "k2i" if problem.n // 64 < SMS and problem.k >= SPLIT_MIN_K else "k1"
        out.append(wg.format(tile=f"{token}x64x64", s=16, k=split, sched="dp", ws="coop",
                             epi="direct", swap=" swap"))
    if tiles >= MANY_TILES:
        out.append(wg.format(tile="128x128x64", s=6, k="k1", sched="persistent", ws="pingpong",
                             epi="tma", swap=""))
    if problem.k >= SPLIT_MIN_K and tiles < SMS // 2:
        slices = min(8, 1 << int(math.log2(max(1, SMS // tiles))))
        out.append(wg.format(tile="64x64x64", s=8, k=f"k{slices}", sched="dp", ws="coop",
                             epi="direct", swap=""))
    wide = tiles >= SMS
    if problem.k >= SPLIT_MIN_K and tiles >= SMS // 2:
        # a long K over half a wave or more: 128-deep K steps halve the ring's per-step
        # waits (the bk=128 twins of this program read 1.039x it over 48 grid shapes, 1.032x
        # over 10 LLM layers, replayed from the portfolio passes)
        out.append(wg.format(tile="64x128x128" if wide else "64x64x128", s=4 if wide else 6,
                             k="k1", sched="dp", ws="coop", epi="direct", swap=""))
    out.append(wg.format(tile="64x128x64" if wide else "64x64x64", s=8, k="k1", sched="dp",
                         ws="coop", epi="direct", swap=""))
    return out


def _seeds(backend: str, arch: Arch, problem: Problem) -> list[Program]:
    from ..ir.text import parse
    split = long_k_split(problem)
    bound_texts = OUTPUT_BOUND if output_bound(problem) else ()
    leads = [*(p.replace(pdl=problem.flops < SEED_MIN_FLOPS) for p in map(parse, bound_texts)),
             *map(parse, (*([split] if split else []), *streaming(problem)))]
    bound = [p for p in leads if p.backend == backend and p.arch == arch]
    if problem.flops < SEED_MIN_FLOPS:
        small = _small_hopper(problem) if arch == Arch.SM90A else []
        return bound + [p for p in map(parse, small) if p.backend == backend]
    fitting = [text for text, fits in SEEDS_192 if fits(problem)]
    return bound + [p for p in map(parse, (*fitting, *SEEDS))
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
