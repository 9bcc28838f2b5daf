"""The GPU conformance suite's data: the programs each backend is checked with, and the
shapes and problem kinds every one of them meets (tests/gpu/test_conformance_gpu.py).

A backend listed in PROGRAMS is checked with those programs (each keeps the features its
tests covered: split-K, stream-K, clusters, epilogues, ...); any other registered backend
with the heuristic policy's first program per arch it claims, so a new backend gets the
whole suite by registering. SEPARATE names a backend checked elsewhere, and why.

bf16 operands (a backend's `dtypes`): every backend that serves them is checked in bf16 too,
with an fp32 accumulator (BF16_KINDS), on the same aligned and ragged shapes, with the
programs of BF16_PROGRAMS (one per feature its f16 list covers: the kernel and epilogue
forms, each split-K reduction, stream-K, clusters, swap_ab, padded operands), or the first
of its f16 programs per arch where it has none there.
"""
from __future__ import annotations

KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]
BF16_KINDS = [("nn", "f32"), ("nt", "f32")]  # bf16 accumulates in f32 only
ALIGNED = [(64, 64, 64), (256, 256, 256), (1000, 4096, 336), (4096, 64, 8192)]
RAGGED = [(1, 1, 1), (17, 33, 65), (1000, 4096, 333), (129, 255, 1000)]
BINARY = (200, 136, 520)  # {0,1} inputs, k <= 2048: every partial sum is exact in fp16

CUDA = [
    "cuda_simt sm_80 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct",
    "cuda_simt sm_80 32x64x16 w1x2 s1 swnone row/1 padop k3 dp c1x1 nows direct",
    "cuda_wmma sm_80 64x128x32 w2x2 s3 swpad row/8 pred k1 dp c1x1 nows direct",
    "cuda_wmma sm_80 32x32x16 w2x2 s2 swnone row/2 padop k2a dp c1x1 nows direct",
    "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct",
    "cuda_mma sm_80 128x256x32 w2x4 s3 sw64 col/8 pred k1 dp c1x1 nows direct",
    "cuda_mma sm_80 64x64x64 w2x2 s3 swpad row/4 padop k4 dp c1x1 nows direct",
    "cuda_mma sm_80 32x32x32 w1x1 s2 swnone row/1 pred k3a dp c1x1 nows direct",
    # 256-deep k-tiles (ir.space searches bk up to 256 since the twenty-second session)
    "cuda_mma sm_80 64x64x256 w2x2 s2 swpad row/4 pred k1 dp c1x1 nows direct",
]
CUDA_WGMMA = [
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 col/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s5 sw128 col/4 padop k3 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 64x128x128 w1x1 s3 sw128 row/1 padop k2a dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w1x2 s4 sw128 row/8 padop k1 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 256x128x64 w4x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k2 dp c2x2 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 col/4 padop k1 persistent c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k3 persistent c1x1 pingpong direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 persistent c2x1 pingpong tma",
    "cuda_wgmma sm_90a 192x128x64 w1x2 s4 sw128 row/8 pred k1 persistent c1x1 coop tma",
    "cuda_wgmma sm_90a 192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 pingpong tma",
    "cuda_wgmma sm_90a 192x128x64 w1x1 s5 sw128 row/4 pred k1 persistent c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 padop k1 streamk c1x1 coop direct",
    "cuda_wgmma sm_90a 64x128x64 w1x1 s4 sw128 row/1 pred k1 streamk c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x2 s4 sw128 row/1 pred k1 persistent c2x1 coop tma",
    "cuda_wgmma sm_90a 128x256x64 w1x4 s4 sw128 row/8 padop k1 dp c1x2 coop direct",
    # 256-deep k-tiles: unswapped, and the shipped 16-token decode program
    "cuda_wgmma sm_90a 64x128x256 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 16x64x256 w1x1 s5 sw128 row/8 pred k1 dp c1x1 coop direct swap pdl",
    # the large class's biggest shipped tiles (twenty-fourth and twenty-fifth sessions): 192 on
    # one side, in 2-CTA multicast clusters and with stream-K; reached off the grid too (a
    # shape takes its nearest tuned shape's program), so ragged edges must come out right
    "cuda_wgmma sm_90a 256x192x64 w2x1 s3 sw128 row/8 pred k1 persistent c2x1 coop tma",
    "cuda_wgmma sm_90a 192x256x64 w1x2 s3 sw128 row/8 pred k1 persistent c2x1 coop tma",
    "cuda_wgmma sm_90a 256x192x64 w2x1 s3 sw128 row/8 pred k1 streamk c1x1 coop tma",
    "cuda_wgmma sm_90a 192x256x64 w1x2 s3 sw128 row/8 pred k1 streamk c1x1 coop tma",
    # policy.wave_fit's forms (thirtieth session, shipped for the H200): N tiles off the powers
    # of two, unswapped and swapped, and split-K summed through the cluster
    "cuda_wgmma sm_90a 128x96x64 w2x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 64x48x128 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 64x224x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 128x64x64 w2x1 s8 sw128 row/8 pred k2c dp c1x1 coop direct",
    "cuda_wgmma sm_90a 64x192x64 w1x1 s5 sw128 row/8 pred k2c dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 8x192x64 w1x1 s8 sw128 row/8 pred k3c dp c1x1 coop direct swap pdl",
    # the output-bound form's 128-deep twin (thirty-first session, shipped for the H200): one
    # K step a tile at K = 128, two ring stages, direct stores
    "cuda_wgmma sm_90a 128x256x128 w2x1 s2 sw128 row/8 pred k1 persistent c1x1 coop direct pdl",
    # the long-K split round's forms (thirty-second session, shipped for the H200): a cooperative
    # tile split four ways through the workspace, and 128x64 tiles in a cluster along N
    "cuda_wgmma sm_90a 128x128x64 w2x1 s7 sw128 row/8 pred k4 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 128x64x64 w2x1 s8 sw128 row/8 pred k1 dp c1x2 coop direct",
    # the streaming round's forms (same session): 192 rows by 64 in clusters along N (A
    # multicast), two consumers side by side on 192x128, and B loaded evict-first
    "cuda_wgmma sm_90a 192x64x64 w1x1 s7 sw128 row/8 pred k1 dp c1x2 coop direct pdl",
    "cuda_wgmma sm_90a 192x128x64 w1x2 s4 sw128 row/8 pred k1 dp c1x2 coop direct pdl",
    "cuda_wgmma sm_90a 64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct l2first",
    # cuBLAS's own kernels read column-major (thirty-second session's mirror round, shipped for
    # the H200 in the thirty-third): clusters along M on data-parallel tiles (B multicast), the
    # 128x128 pair along N split four ways through the workspace
    "cuda_wgmma sm_90a 64x128x64 w1x1 s8 sw128 row/8 pred k1 dp c2x1 coop direct",
    "cuda_wgmma sm_90a 64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c2x1 coop direct pdl",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c2x1 coop direct pdl",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s6 sw128 row/8 pred k1 dp c1x2 coop direct pdl",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s6 sw128 row/8 pred k4 dp c1x2 coop direct",
]
CUTE_CPP = [
    "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 persistent c2x1 coop tma",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone col/8 pred k1 streamk c1x2 coop tma",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/2 padop k4 dp c1x1 coop direct",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/1 padop k3a persistent c1x1 coop direct",
    "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/4 padop k1 dp c1x1 pingpong direct",
    "cute_cpp sm_90a 64x128x64 w1x1 s4 swnone row/1 pred k1 persistent c2x1 pingpong tma",
    "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/1 pred k1 dp c1x1 nows direct",
    "cute_cpp sm_80 128x128x32 w1x1 s3 swnone col/4 padop k2 dp c1x1 nows smem",
    "cute_cpp sm_80 256x128x32 w2x1 s3 swnone row/2 pred k1 dp c1x1 nows smem",
    # a 192-wide tile (TILE_EXTRAS): the tile cuBLAS picks for 12288x256x16384
    "cute_cpp sm_90a 128x192x64 w2x1 s4 swnone row/8 pred k1 persistent c2x1 coop tma",
    # one ping-pong warpgroup holding 192 accumulators (cute_cpp's consumer budget)
    "cute_cpp sm_90a 192x128x64 w1x1 s4 swnone row/8 pred k1 persistent c1x1 pingpong tma",
    # consumers split along N (w1x2): CUTLASS's cooperative kernel on C^T = B^T A^T, with a
    # cluster and with stream-K, both swapped into its frame
    "cute_cpp sm_90a 192x128x64 w1x2 s5 swnone row/8 pred k1 persistent c2x1 coop tma",
    "cute_cpp sm_90a 256x128x64 w1x2 s4 swnone col/4 pred k1 streamk c1x1 coop tma",
    "cute_cpp sm_90a 128x64x256 w1x1 s2 swnone row/4 pred k1 dp c1x1 pingpong tma",  # bk 256
]
TRITON = [
    "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_80 64x64x64 w2x2 s3 swnone col/4 pred k4 dp c1x1 nows direct",
    "triton sm_80 128x64x32 w2x2 s4 swnone row/8 pred k3a persistent c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 128x64x64 w1x4 s4 swnone col/4 pred k4 dp c1x1 nows tma",
    "triton sm_80 64x64x256 w2x2 s2 swnone row/4 pred k1 dp c1x1 nows direct",  # bk 256
    "triton sm_90a 64x128x256 w2x2 s2 swnone row/4 pred k1 dp c1x1 nows direct",
]

# The fused bias (Program.bias): bias twins of programs that cover every path a bias takes
# in the backends that lower it -- direct and TMA stores, f16 accumulators, split-K summed
# through the workspace, atomics, in the kernel and through a cluster, stream-K's fix-up,
# swap_ab (C written transposed, the bias along the kernel's M), padded operands -- on fewer
# shapes and kinds than the rest, so the suite stays short.
BIAS = [
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 col/4 padop k1 persistent c1x1 pingpong tma",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s5 sw128 col/4 padop k3 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 64x128x128 w1x1 s3 sw128 row/1 padop k2a dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s6 sw128 row/8 pred k3i dp c1x1 coop direct",
    "cuda_wgmma sm_90a 64x192x64 w1x1 s5 sw128 row/8 pred k2c dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma",
    "cuda_wgmma sm_90a 16x64x256 w1x1 s5 sw128 row/8 pred k1 dp c1x1 coop direct swap pdl",
    "cuda_wgmma sm_90a 32x128x64 w1x1 s6 sw128 row/8 padop k3 dp c1x1 coop direct swap",
    "cuda_wgmma sm_90a 8x192x64 w1x1 s8 sw128 row/8 pred k3c dp c1x1 coop direct swap pdl",
    "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_80 64x64x64 w2x2 s3 swnone col/4 pred k4 dp c1x1 nows direct",
    "triton sm_80 128x64x32 w2x2 s4 swnone row/8 pred k3a persistent c1x1 nows direct",
    "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k3i dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 64x128x64 w1x4 s4 swnone row/8 pred k1 dp c1x1 nows direct swap",
]
BIAS_SHAPES = [(256, 256, 256), (77, 4096, 4096), (17, 33, 65), (129, 255, 1000)]
BIAS_KINDS = [("nn", "f32"), ("nt", "f32"), ("nt", "f16")]

PROGRAMS: dict[str, list[str]] = {}
for _text in (*CUDA, *CUDA_WGMMA, *CUTE_CPP, *TRITON):
    PROGRAMS.setdefault(_text.split()[0], []).append(_text)

BF16 = [
    "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct",
    "cuda_mma sm_80 64x64x64 w2x2 s3 swpad row/4 padop k4 dp c1x1 nows direct",
    "cuda_mma sm_80 32x32x32 w1x1 s2 swnone row/1 pred k3a dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s5 sw128 col/4 padop k3 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 64x128x128 w1x1 s3 sw128 row/1 padop k2a dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k2 dp c2x2 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w1x4 s4 sw128 row/8 padop k1 dp c1x2 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma",
    "cuda_wgmma sm_90a 16x64x256 w1x1 s5 sw128 row/8 pred k1 dp c1x1 coop direct swap pdl",
    "cuda_wgmma sm_90a 128x64x64 w2x1 s8 sw128 row/8 pred k2c dp c1x1 coop direct",
    "cuda_wgmma sm_90a 64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct l2first",
    "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 persistent c2x1 coop tma",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/2 padop k4 dp c1x1 coop direct",
    "cute_cpp sm_80 256x128x32 w2x1 s3 swnone row/2 pred k1 dp c1x1 nows smem",
    "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_80 128x64x32 w2x2 s4 swnone row/8 pred k3a persistent c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 128x64x64 w1x4 s4 swnone col/4 pred k4 dp c1x1 nows tma",
]
BF16_PROGRAMS: dict[str, list[str]] = {}
for _text in BF16:
    BF16_PROGRAMS.setdefault(_text.split()[0], []).append(_text)

SEPARATE = {
    "cute_dsl": "tests/gpu/test_cute_dsl_gpu.py: its kernels are compiled per exact shape "
                "ahead of time on a CPU machine (scripts/prebuild_cute_dsl.py), not here",
}


def programs_for(backend) -> list[str]:
    """The program texts `backend` (a registry entry) is checked with."""
    if backend.name in PROGRAMS:
        return PROGRAMS[backend.name]
    from gemmforge.ir.program import Problem
    from gemmforge.policy.heuristic import HeuristicPolicy
    policy = HeuristicPolicy(backend.name)
    return [str(p) for arch in sorted(backend.archs, key=lambda a: a.value)
            for p in policy.propose(Problem(256, 256, 256), arch, 1)]


def bias_cases() -> list[tuple[str, tuple, str, str]]:
    """(bias program text, shape, layout, acc): each of BIAS with the bias field set, on
    BIAS_SHAPES and BIAS_KINDS where ir.verify accepts it; every one of BIAS has some."""
    from gemmforge.ir import Problem, check, parse
    out = []
    for text in BIAS:
        program = parse(text).replace(bias=True)
        for shape in BIAS_SHAPES:
            for layout, acc in BIAS_KINDS:
                if check(program, Problem(*shape, layout, acc)) is None:
                    out.append((str(program), shape, layout, acc))
    return out


BF16_BIAS = [  # of BIAS: each way the bias reaches C (direct, TMA store, reduce, swapped)
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s5 sw128 col/4 padop k3 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 16x64x256 w1x1 s5 sw128 row/8 pred k1 dp c1x1 coop direct swap pdl",
    "triton sm_80 64x64x64 w2x2 s3 swnone col/4 pred k4 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
]


def bf16_bias_cases() -> list[tuple[str, tuple, str, str, str]]:
    """(bias program text, shape, layout, acc, dtype): each of BF16_BIAS with the bias field
    set, in bf16, on BIAS_SHAPES and BF16_KINDS where ir.verify accepts it."""
    from gemmforge.ir import Problem, check, parse
    out = []
    for text in BF16_BIAS:
        program = parse(text).replace(bias=True)
        for shape in BIAS_SHAPES:
            for layout, acc in BF16_KINDS:
                if check(program, Problem(*shape, layout, acc, "bf16")) is None:
                    out.append((str(program), shape, layout, acc, "bf16"))
    return out


def bf16_programs_for(backend) -> list[str]:
    """The program texts `backend` is checked with in bf16: none where it serves f16 only;
    its BF16_PROGRAMS, else the first of programs_for() per arch."""
    from gemmforge.ir import DType, parse
    from gemmforge.ir.capabilities import serves_dtypes
    if DType.BF16 not in serves_dtypes(backend):
        return []
    if backend.name in BF16_PROGRAMS:
        return BF16_PROGRAMS[backend.name]
    firsts = {}
    for text in programs_for(backend):
        firsts.setdefault(parse(text).arch, text)
    return list(firsts.values())


def cases() -> list[tuple[str, tuple, str, str, str]]:
    """(program text, shape, layout, acc, dtype) for every registered backend outside
    SEPARATE: f16 with every program of it and kind of KINDS, bf16 with its
    bf16_programs_for() and kind of BF16_KINDS, shape of ALIGNED + RAGGED, where ir.verify
    accepts the program for that problem (a legal program must compute it right)."""
    from gemmforge.backends import registry
    from gemmforge.ir import Problem, check, parse
    out = []
    for backend in registry.all():
        if backend.name in SEPARATE:
            continue
        for dtype, texts, kinds in (("f16", programs_for(backend), KINDS),
                                    ("bf16", bf16_programs_for(backend), BF16_KINDS)):
            for text in texts:
                program = parse(text)
                for shape in (*ALIGNED, *RAGGED):
                    for layout, acc in kinds:
                        if check(program, Problem(*shape, layout, acc, dtype)) is None:
                            out.append((text, shape, layout, acc, dtype))
    return out
