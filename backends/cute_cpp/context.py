"""The frozen template context of the cute_cpp backend: every CUTLASS type name and number
the templates print, computed here from the IR through the tables in `kernels`."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..elements import Element, element
from .kernels import (
    ALIGNMENT_HALFS, DATA_PARALLEL_CTAS, SM80_SWIZZLE, SM80_UNIT_WARPS, SM90_KERNELS,
    SM90_RASTER_ORDER, SM90_REDUCTION, SM90_SMEM_BYTES, sm90_decomposition, sm90_tile_scheduler,
    sm90_tile, sm90_transposed,
)
from ...ir.program import (
    Accum, Arch, Layout, Padding, Problem, Program, RasterOrder, Schedule, lowered_name,
)

SELFTEST_DEFAULT = (1000, 4096, 336)  # the self-test's shape when main() gets no arguments
# CUTLASS's layout tag for a row-major operand (True) or a column-major one (False)
_LAYOUT_TAG = {True: "cutlass::layout::RowMajor", False: "cutlass::layout::ColumnMajor"}


@dataclass(frozen=True)
class CommonContext:
    kernel_name: str
    program_text: str
    arch: str                 # sm_80, sm_90a
    family: str               # sm90 (CUTLASS 3.x builders) or sm80 (CUTLASS 2.x device::Gemm)
    cutlass_version: str
    nvcc_flags: str           # flags besides -I for the header comment's command lines
    layout: str               # nn, nt
    acc: str                  # f32, f16
    layout_nt: bool
    acc_f16: bool
    element_accumulator: str
    layout_b: str             # CUTLASS's B is K x N: RowMajor for nn, ColumnMajor for nt
    bm: int
    bn: int
    bk: int
    stages: int
    alignment: int            # halves per 16-byte vector: the alignment template argument
    pad_operands: bool        # unaligned n or k: copy into an aligned, zero-padded workspace
    split_k: int
    selftest_m: int
    selftest_n: int
    selftest_k: int
    el: Element               # the operand dtype's types and conversions (backends.elements)


@dataclass(frozen=True)
class Sm90Context:
    transposed: bool          # CUTLASS computes C^T = B^T A^T (kernels.sm90_transposed)
    tile_m: int               # TileShape and ClusterShape in CUTLASS's M x N: ours, or swapped
    tile_n: int
    cm: int
    cn: int
    cutlass_layout_a: str     # CUTLASS's A, B and D layout tags (B^T, A^T, C^T if transposed)
    cutlass_layout_b: str
    cutlass_layout_d: str
    kernel_schedule: str
    epilogue_schedule: str
    tile_scheduler: str       # void, PersistentScheduler or StreamKScheduler
    scheduler_args: bool      # the scheduler takes raster / swizzle arguments
    raster_order: str         # RasterOrderOptions: AlongN (IR row) or AlongM (IR col)
    max_swizzle: int
    stream_k: bool            # StreamKScheduler: decomposition, splits, reduction mode
    decomposition: str
    reduction_mode: str
    persistent: bool          # grid from the device's SM count (else one CTA per tile)
    data_parallel_ctas: int
    smem_limit: int


@dataclass(frozen=True)
class Sm80Context:
    warp_m: int
    warp_n: int
    swizzle_functor: str
    split_k_serial: bool


def _common(p: Program, problem: Problem, version: str, flags: str,
            selftest: tuple[int, int, int]) -> CommonContext:
    t = p.tile
    m, n, k = selftest
    return CommonContext(
        kernel_name=lowered_name(p, problem), program_text=str(p), arch=p.arch.value,
        family="sm90" if p.arch == Arch.SM90A else "sm80",
        cutlass_version=version, nvcc_flags=flags,
        layout=problem.layout.value, acc=problem.acc.value,
        layout_nt=problem.layout == Layout.NT, acc_f16=problem.acc == Accum.F16,
        element_accumulator="cutlass::half_t" if problem.acc == Accum.F16 else "float",
        layout_b=("cutlass::layout::ColumnMajor" if problem.layout == Layout.NT
                  else "cutlass::layout::RowMajor"),
        bm=t.bm, bn=t.bn, bk=t.bk, stages=p.stages, alignment=ALIGNMENT_HALFS,
        pad_operands=p.padding == Padding.PAD_OPERANDS, split_k=p.split_k.slices,
        selftest_m=m, selftest_n=n, selftest_k=k, el=element(problem.dtype))


def _sm90(p: Program, problem: Problem) -> Sm90Context:
    kernel = SM90_KERNELS[p.warp_spec]
    decomposition = sm90_decomposition(p.schedule, p.split_k.slices)
    scheduler = sm90_tile_scheduler(p.schedule, p.split_k.slices, p.warp_spec)
    c, nt = p.cluster, problem.layout == Layout.NT
    transposed = sm90_transposed(p.warp_spec, p.warps)
    tile_m, tile_n = sm90_tile(p)
    if transposed:  # B^T is N x K: K-contiguous (RowMajor) for nt, N-contiguous for nn
        frame = dict(cm=c.cn, cn=c.cm,
                     cutlass_layout_a=_LAYOUT_TAG[nt], cutlass_layout_b=_LAYOUT_TAG[False],
                     cutlass_layout_d=_LAYOUT_TAG[False])
        order = RasterOrder.COL if p.raster.order == RasterOrder.ROW else RasterOrder.ROW
    else:            # B is K x N: K-contiguous (ColumnMajor) for nt, N-contiguous for nn
        frame = dict(cm=c.cm, cn=c.cn,
                     cutlass_layout_a=_LAYOUT_TAG[True], cutlass_layout_b=_LAYOUT_TAG[not nt],
                     cutlass_layout_d=_LAYOUT_TAG[True])
        order = p.raster.order
    return Sm90Context(
        transposed=transposed, tile_m=tile_m, tile_n=tile_n, **frame,
        kernel_schedule=kernel.schedule, epilogue_schedule=kernel.epilogues[p.epilogue],
        tile_scheduler=scheduler, scheduler_args=scheduler != "void",
        raster_order=SM90_RASTER_ORDER[order], max_swizzle=p.raster.group,
        stream_k=decomposition is not None, decomposition=decomposition or "",
        reduction_mode=SM90_REDUCTION[p.split_k.reduction],
        persistent=p.schedule != Schedule.DATA_PARALLEL,
        data_parallel_ctas=DATA_PARALLEL_CTAS, smem_limit=SM90_SMEM_BYTES)


def _sm80(p: Program) -> Sm80Context:
    um, un = SM80_UNIT_WARPS
    return Sm80Context(
        warp_m=p.tile.bm // (p.warps.wm * um), warp_n=p.tile.bn // (p.warps.wn * un),
        swizzle_functor=SM80_SWIZZLE[p.raster], split_k_serial=p.split_k.slices > 1)


def make_context(p: Program, problem: Problem, version: str, flags: str,
                 selftest: tuple[int, int, int] = SELFTEST_DEFAULT) -> dict:
    """The render context for `p` computing `problem` (assumes legality.check passed);
    `selftest`: the (m, n, k) the self-test's main() runs without arguments."""
    family = _sm90(p, problem) if p.arch == Arch.SM90A else _sm80(p)
    return {**asdict(_common(p, problem, version, flags, selftest)), **asdict(family)}
