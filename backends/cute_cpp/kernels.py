"""The IR → CUTLASS mapping, as data: which CUTLASS type or argument serves each IR value.

sm_90a programs become CUTLASS 3.x kernels (`CollectiveBuilder<arch::Sm90, ...>` mainloop
and epilogue, `GemmUniversal`, `GemmUniversalAdapter`); sm_80 programs become the
CUTLASS 2.x `cutlass::gemm::device::Gemm` (tensor ops, Sm80 multistage cp.async mainloop,
shared-memory epilogue). `legality` checks programs against these tables and
`context` reads the CUTLASS spellings from them, so the two can't disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.program import (
    Epilogue, Raster, RasterOrder, Reduction, Schedule, WarpSpec, Warps,
)

ALIGNMENT_HALFS = 8         # 16-byte rows: TMA strides and CUTLASS's 8-half vector accesses
SM90_SMEM_BYTES = 232_448   # cutlass::gemm::collective::detail::sm90_smem_capacity_bytes
SM90_SMEM_SLACK = 2_048     # pipeline barriers, scheduler storage, 1 KiB swizzle alignment
SM90_MAX_TILE = 256         # a TMA box spans at most 256 elements per dimension
SM90_MAX_CLUSTER = 8        # portable cluster size (CUTLASS doesn't opt in to 16)
SWIZZLE_SIZES = (1, 2, 4, 8)  # CUTLASS's max_swizzle_size / GemmIdentityThreadblockSwizzle<N>
DATA_PARALLEL_CTAS = 65_535   # "SM count" that makes a persistent scheduler launch one CTA per
                              # tile (a grid dimension may not exceed 65535)

RASTERS = frozenset(Raster(o, g) for o in RasterOrder for g in SWIZZLE_SIZES)

# IR raster order -> the persistent tile scheduler's RasterOrderOptions. "row" walks along a
# row of C tiles (along N), grouping `group` tile rows: CUTLASS's AlongN with that swizzle.
SM90_RASTER_ORDER = {RasterOrder.ROW: "AlongN", RasterOrder.COL: "AlongM"}

SM90_REDUCTION = {Reduction.WORKSPACE: "Deterministic",      # turnstile through the workspace
                  Reduction.ATOMIC: "Nondeterministic"}      # atomic adds into the workspace


@dataclass(frozen=True)
class Sm90Kernel:
    """One CUTLASS sm90 kernel schedule and what a program may ask of it."""

    schedule: str                   # KernelSchedule type of the mainloop builder
    warps: frozenset                # consumer warpgroup layouts it serves (Program.warps)
    epilogues: dict                 # IR epilogue -> epilogue schedule type
    schedules: frozenset            # IR schedules it serves
    stream_k: bool                  # can use the stream-K scheduler (stream_k, split-K)
    rasters: frozenset              # IR rasters it honours
    min_stages: int


SM90_KERNELS = {
    # No producer/consumer split: all 128 threads issue GMMA, one issues TMA; one CTA per tile,
    # launched as a (tiles_m, tiles_n) grid, i.e. walking along M.
    WarpSpec.NONE: Sm90Kernel(
        "cutlass::gemm::KernelTma", frozenset({Warps(1, 1)}),
        {Epilogue.DIRECT: "cutlass::epilogue::NoSmemWarpSpecialized"},
        frozenset({Schedule.DATA_PARALLEL}), False,
        frozenset({Raster(RasterOrder.COL, 1)}), 3),
    # A producer warpgroup (TMA) and two consumer warpgroups sharing each tile: w2x1 splits it
    # along M (the builder's own layout), w1x2 along N (the transposed problem, see below).
    WarpSpec.COOPERATIVE: Sm90Kernel(
        "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
        frozenset({Warps(2, 1), Warps(1, 2)}),
        {Epilogue.DIRECT: "cutlass::epilogue::NoSmemWarpSpecialized",
         Epilogue.TMA: "cutlass::epilogue::TmaWarpSpecializedCooperative"},
        frozenset(Schedule), True, RASTERS, 2),
    # A producer warpgroup and two consumer warpgroups on alternate tiles (each owns a tile).
    WarpSpec.PINGPONG: Sm90Kernel(
        "cutlass::gemm::KernelTmaWarpSpecializedPingpong", frozenset({Warps(1, 1)}),
        {Epilogue.DIRECT: "cutlass::epilogue::NoSmemWarpSpecialized",
         Epilogue.TMA: "cutlass::epilogue::TmaWarpSpecialized"},
        frozenset({Schedule.DATA_PARALLEL, Schedule.PERSISTENT}), False, RASTERS, 2),
}

# Cooperative consumers split along N (w1x2). CUTLASS's cooperative kernel always splits its own
# M between the two warpgroups (64-row GMMAs each), so a w1x2 program runs it on the transposed
# problem C^T = B^T A^T: CUTLASS's M is our N, its N our M, its A our B. Each warpgroup then
# covers bn/2 of our columns and all bm rows with one GMMA of N = bm per k-step (192x128 w1x2:
# m64n192k16, the tile cuBLAS's nvjet_sm90_hsh_128x192_..._2x1 kernels use), where w2x1 on a
# 192-row tile would need 96-row warpgroups. CUTLASS's M must then hold two 64-row GMMAs.
SM90_TRANSPOSED_WARPS = Warps(1, 2)
SM90_COOP_M_GRAIN = 128


def sm90_transposed(warp_spec: WarpSpec, warps: Warps) -> bool:
    """Whether the program runs as CUTLASS's kernel on C^T = B^T A^T (consumers split N)."""
    return warp_spec == WarpSpec.COOPERATIVE and warps == SM90_TRANSPOSED_WARPS


def sm90_tile(program) -> tuple[int, int]:
    """The tile in CUTLASS's M x N: (bm, bn), or (bn, bm) for a transposed program."""
    t = program.tile
    return (t.bn, t.bm) if sm90_transposed(program.warp_spec, program.warps) else (t.bm, t.bn)


# sm_80: the threadblock swizzle functor of cutlass::gemm::device::Gemm per IR raster.
# GemmIdentityThreadblockSwizzle<G> launches blockIdx.x over M in bands of G tile columns
# (IR col/G); gf::RowBandSwizzle<G> (templates/sm80.cuh.jinja) is its mirror image, along N
# in bands of G tile rows (IR row/G). CUTLASS's GemmHorizontalThreadblockSwizzle would be
# row/1, but kernel::Gemm can't call it (it lacks get_tile_offset(int log_tile)).
SM80_SWIZZLE = {
    **{Raster(RasterOrder.COL, g): f"cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{g}>"
       for g in SWIZZLE_SIZES},
    **{Raster(RasterOrder.ROW, g): f"gf::RowBandSwizzle<{g}>" for g in SWIZZLE_SIZES},
}
SM80_EPILOGUES = frozenset({Epilogue.SMEM})  # the 2.x tensor-op epilogue stages C in smem
SM80_BK = (32, 64)           # crosswise smem layouts CUTLASS 2.x instantiates for fp16
SM80_MIN_STAGES = 3          # the multistage (cp.async) mainloop
SM80_WARP_GRAIN = 32         # warp tiles in multiples of 32 x 32 (as CUTLASS instantiates them)
SM80_UNIT_WARPS = (2, 2)     # one Program.warps unit (128 threads) = 2 x 2 warps


def sm90_tile_scheduler(schedule: Schedule, split_k: int, warp_spec: WarpSpec) -> str:
    """The GemmUniversal TileScheduler tag: void for the non-persistent KernelTma."""
    if warp_spec == WarpSpec.NONE:
        return "void"
    if schedule == Schedule.STREAM_K or split_k > 1:
        return "cutlass::gemm::StreamKScheduler"
    return "cutlass::gemm::PersistentScheduler"


def sm90_decomposition(schedule: Schedule, split_k: int) -> str | None:
    """The stream-K scheduler's DecompositionMode (None: no stream-K scheduler)."""
    if split_k > 1:
        return "SplitK"
    return "StreamK" if schedule == Schedule.STREAM_K else None
