"""Hypothesis strategies over IR values."""
from hypothesis import strategies as st

from gemmforge.ir.program import (
    MAX_CLUSTER, MAX_RASTER_GROUP, MAX_SPLIT_K, MAX_STAGES, MAX_WARPS_PER_DIM, TILE_EXTRAS,
    TILE_LIMITS,
    MAX_DIM,
    Accum, Arch, Cluster, DType, Epilogue, L2Hint, Layout, Padding, Problem, Program, Raster,
    RasterOrder, Reduction, Schedule, SplitK, Swizzle, Tile, WarpSpec, Warps,
)


def pow2(lo: int, hi: int):
    return st.sampled_from([1 << i for i in range(12) if lo <= 1 << i <= hi])


def tiles():
    side = st.one_of(pow2(*TILE_LIMITS["bm"]), st.sampled_from(sorted(TILE_EXTRAS)))
    return st.builds(Tile, side, side, pow2(*TILE_LIMITS["bk"]))


def split_ks():
    return st.integers(1, MAX_SPLIT_K).flatmap(
        lambda s: st.builds(SplitK, st.just(s),
                            st.sampled_from(list(Reduction) if s > 1 else [Reduction.WORKSPACE])))


def programs(backends=("cuda_simt", "cuda_wmma", "cuda_mma", "cuda_wgmma", "triton")):
    """Well-formed Programs (not necessarily legal for their backend)."""
    return st.builds(
        Program,
        backend=st.sampled_from(backends),
        arch=st.sampled_from(list(Arch)),
        tile=tiles(),
        warps=st.builds(Warps, pow2(1, MAX_WARPS_PER_DIM), pow2(1, MAX_WARPS_PER_DIM)),
        stages=st.integers(1, MAX_STAGES),
        swizzle=st.sampled_from(list(Swizzle)),
        raster=st.builds(Raster, st.sampled_from(list(RasterOrder)), st.integers(1, MAX_RASTER_GROUP)),
        padding=st.sampled_from(list(Padding)),
        split_k=split_ks(),
        schedule=st.sampled_from(list(Schedule)),
        cluster=st.builds(Cluster, pow2(1, MAX_CLUSTER), pow2(1, MAX_CLUSTER)),
        warp_spec=st.sampled_from(list(WarpSpec)),
        epilogue=st.sampled_from(list(Epilogue)),
        l2_hint=st.sampled_from(list(L2Hint)),
        swap_ab=st.booleans(),
        pdl=st.booleans(),
        bias=st.booleans(),
    )


def problems():
    """Problems of every layout, accumulator and operand dtype (f16 accumulation only with
    f16 operands, as Problem requires)."""
    dim = st.integers(1, MAX_DIM)
    kind = st.sampled_from([(a, d) for a in Accum for d in DType
                            if a == Accum.F32 or d == DType.F16])
    return st.builds(lambda m, n, k, lay, ad: Problem(m, n, k, lay, *ad),
                     dim, dim, dim, st.sampled_from(list(Layout)), kind)
