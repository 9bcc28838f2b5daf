"""The frozen template context of the cuda family: every number the templates use,
computed here in Python so the templates do no arithmetic."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..elements import Element, element
from ...ir import graph
from ...ir.arch import SMEM_ROW_PAD_HALFS
from ...ir.program import (
    Layout, Padding, Problem, Program, RasterOrder, Swizzle, lowered_name,
)

VEC_HALFS = 8  # one 16-byte cp.async moves 8 halves


@dataclass(frozen=True)
class CudaContext:
    kernel_name: str
    program_text: str
    path: str           # simt, wmma, mma
    arch: str           # sm_80, sm_90a
    threads: int
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    warp_m: int         # rows of C one warp owns
    warp_n: int         # columns of C one warp owns
    stages: int
    swizzle: str        # none, pad, 32B, 64B, 128B
    a_stride: int       # halves per shared-memory row of the A tile (bm rows of bk)
    b_rows: int         # rows of the B tile in shared memory (bk for nn, bn for nt)
    b_cols: int
    b_stride: int       # halves per shared-memory row of the B tile
    a_tile_halfs: int   # halves of one A stage, padding included
    b_tile_halfs: int
    smem_bytes: int
    layout: str         # nn, nt
    acc: str            # f32, f16
    raster_col: bool
    raster_group: int
    split_k: int
    atomic_reduce: bool
    predicate: bool     # ragged edges masked in the kernel (else operands padded by the launcher)
    el: Element         # the operand dtype's types and conversions (backends.elements)

    def as_dict(self) -> dict:
        return asdict(self)


def make_context(program: Program, problem: Problem, path: str, unit_threads: int = 32) -> CudaContext:
    t, w = program.tile, program.warps
    pad = SMEM_ROW_PAD_HALFS if program.swizzle == Swizzle.PAD else 0
    b_rows, b_cols = (t.bk, t.bn) if problem.layout == Layout.NN else (t.bn, t.bk)
    g = graph.build(program, unit_threads, problem.layout, problem.acc)
    return CudaContext(
        kernel_name=lowered_name(program, problem),
        program_text=str(program),
        path=path,
        arch=program.arch.value,
        threads=w.count * unit_threads,
        bm=t.bm, bn=t.bn, bk=t.bk, wm=w.wm, wn=w.wn,
        warp_m=t.bm // w.wm, warp_n=t.bn // w.wn,
        stages=program.stages,
        swizzle=program.swizzle.value,
        a_stride=t.bk + pad,
        b_rows=b_rows, b_cols=b_cols, b_stride=b_cols + pad,
        a_tile_halfs=t.bm * (t.bk + pad),
        b_tile_halfs=b_rows * (b_cols + pad),
        smem_bytes=graph.smem_bytes(g),
        layout=problem.layout.value,
        acc=problem.acc.value,
        raster_col=program.raster.order == RasterOrder.COL,
        raster_group=program.raster.group,
        split_k=program.split_k.slices,
        atomic_reduce=program.split_k.reduction.value == "atomic",
        predicate=program.padding == Padding.PREDICATE,
        el=element(problem.dtype),
    )
