"""sm_80: multistage cp.async + ldmatrix + mma.sync GEMM (runs on Ampere and, built as
sm_90, on Hopper).

Algorithm, per CTA (wm x wn warps, each warp a grid of m16n8k16 mma.sync atoms):
  1. Tile order: CTA i owns tile i of the grouped raster (common.tile_coords).
  2. K residue first: the k-tiles are shifted so that the *first* one is the partial one;
     its out-of-range columns are skipped (shared memory was zeroed), so the steady state
     runs without K checks. Rows past m (A) and n (B) are masked per copy vector.
  3. Pipeline: `stages - 1` k-tiles in flight with cp.async (16, 8 or 4-byte vectors by
     alignment class; 2-byte plain loads when n or k is odd); each k-tile is read with
     ldmatrix (transposed for N-major B) one k16 block ahead of the mma.sync that uses it.
  4. Epilogue: accumulator -> fp16 -> shared memory (reusing the operand buffers) ->
     vectorised, masked stores to C.

Constraints (checked by backends.cute_dsl.plan.refusal):
  - tile.bm % (16 wm) == 0, tile.bn % (16 wn) == 0, tile.bk % 16 == 0 and >= 32
    (the register pipeline runs one k16 block ahead), stages >= 2;
  - the CTA's threads tile every operand copy in whole vectors;
  - n and k multiples of the plan's alignment class (the launcher checks).
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warp

from .common import operand_views, tile_coords

MMA_SHAPE = (16, 8, 16)
SMEM_ATOM_ROWS = 8       # rows of one swizzle atom
SMEM_ATOM_MAX = 64       # contiguous halves of one swizzle atom (128 bytes)
HALF_BITS = 16
WARP_THREADS = 32
SWIZZLE_BASE, SWIZZLE_SHIFT = 3, 3   # XOR in units of 8 halves (16 bytes), rows of 64


class Sm80Gemm:
    """C = A @ B for one KernelPlan; call it (traced by cute.compile) with pointers and sizes."""

    def __init__(self, plan):
        self.plan = plan
        self.acc_dtype = cutlass.Float16 if plan.acc_f16 else cutlass.Float32
        self.threads = plan.wm * plan.wn * WARP_THREADS
        self.vec_bits = plan.align * HALF_BITS

    def _smem_layout(self, rows: int, cols: int, k_major: bool, stages: int | None):
        """Swizzled shared-memory layout of a rows x cols tile (x stages): 8-row atoms of up
        to 64 contiguous halves, XOR-swizzled in 16-byte chunks (plan.swizzle_bits)."""
        if k_major:
            width = min(cols, SMEM_ATOM_MAX)
            atom = cute.make_layout((SMEM_ATOM_ROWS, width), stride=(width, 1))
        else:
            width = min(rows, SMEM_ATOM_MAX)
            atom = cute.make_layout((width, SMEM_ATOM_ROWS), stride=(1, width))
        swizzle = cute.make_swizzle(self.plan.swizzle_bits, SWIZZLE_BASE, SWIZZLE_SHIFT)
        atom = cute.make_composed_layout(swizzle, 0, atom)
        shape = (rows, cols) if stages is None else (rows, cols, stages)
        return cute.tile_to_shape(atom, shape, (0, 1) if stages is None else (0, 1, 2))

    def _gmem_copy(self, atom, rows: int, cols: int, k_major: bool):
        """Threads over a rows x cols tile, each moving `align` contiguous halves."""
        align = self.plan.align
        if k_major:
            along = min(cols // align, self.threads)
            threads = cute.make_layout((self.threads // along, along), stride=(along, 1))
            values = cute.make_layout((1, align))
        else:
            along = min(rows // align, self.threads)
            threads = cute.make_layout((along, self.threads // along), stride=(1, along))
            values = cute.make_layout((align, 1))
        return cute.make_tiled_copy_tv(atom, threads, values)

    @cute.jit
    def __call__(self, a: cute.Pointer, b: cute.Pointer, c: cute.Pointer,
                 m: cutlass.Int32, n: cutlass.Int32, k: cutlass.Int32,
                 num_tiles: cutlass.Int32, stream: cuda.CUstream):
        p = self.plan
        mA, mB, mC = operand_views(p, a, b, c, m, n, k)
        sA_layout = self._smem_layout(p.bm, p.bk, True, p.stages)
        sB_layout = self._smem_layout(p.bn, p.bk, p.b_k_major, p.stages)
        sC_layout = self._smem_layout(p.bm, p.bn, True, None)
        if cutlass.const_expr(p.align >= 2):
            mode = (cute.nvgpu.LoadCacheMode.GLOBAL if p.align == 8
                    else cute.nvgpu.LoadCacheMode.ALWAYS)
            load = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=mode), cutlass.Float16,
                                       num_bits_per_copy=self.vec_bits)
        else:
            load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float16,
                                       num_bits_per_copy=self.vec_bits)
        store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float16,
                                    num_bits_per_copy=self.vec_bits)
        copy_A = self._gmem_copy(load, p.bm, p.bk, True)
        copy_B = self._gmem_copy(load, p.bn, p.bk, p.b_k_major)
        copy_C = self._gmem_copy(store, p.bm, p.bn, True)
        op = warp.MmaF16BF16Op(cutlass.Float16, self.acc_dtype, MMA_SHAPE)
        # N permuted to 16 per warp: one ldmatrix.x4 feeds two n8 atoms of B
        permutation = (p.wm * MMA_SHAPE[0], p.wn * 2 * MMA_SHAPE[1], MMA_SHAPE[2])
        tiled_mma = cute.make_tiled_mma(op, cute.make_layout((p.wm, p.wn, 1)),
                                        permutation_mnk=permutation)
        self.kernel(mA, mB, mC, sA_layout, sB_layout, sC_layout, copy_A, copy_B, copy_C,
                    tiled_mma).launch(grid=(num_tiles, 1, 1), block=(self.threads, 1, 1),
                                      stream=stream)

    @cute.kernel
    def kernel(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout, copy_A: cute.TiledCopy, copy_B: cute.TiledCopy,
               copy_C: cute.TiledCopy, tiled_mma: cute.TiledMma):
        p = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        tiles_m = (cute.size(mA, mode=[0]) + p.bm - 1) // p.bm
        tiles_n = (cute.size(mB, mode=[0]) + p.bn - 1) // p.bn
        tm, tn = tile_coords(bidx, tiles_m, tiles_n, p.group, p.raster_col)

        gA = cute.local_tile(mA, (p.bm, p.bk), (tm, None))    # (bm, bk, k_tiles)
        gB = cute.local_tile(mB, (p.bn, p.bk), (tn, None))    # (bn, bk, k_tiles)
        gC = cute.local_tile(mC, (p.bm, p.bn), (tm, tn))
        cA = cute.local_tile(cute.make_identity_tensor(mA.shape), (p.bm, p.bk), (tm, None))
        cB = cute.local_tile(cute.make_identity_tensor(mB.shape), (p.bn, p.bk), (tn, None))
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (p.bm, p.bn), (tm, tn))
        # Shift K so that the first k-tile is the partial one (negative columns are skipped).
        residue = cute.size(mA, mode=[1]) - p.bk * cute.size(gA, mode=[2])
        gA = cute.domain_offset((0, residue, 0), gA)
        gB = cute.domain_offset((0, residue, 0), gB)
        cA = cute.domain_offset((0, residue, 0), cA)
        cB = cute.domain_offset((0, residue, 0), cB)
        # residue, k and n are multiples of plan.align: every row start keeps the alignment.
        gA = cute.make_tensor(gA.iterator.align(p.align * 2), gA.layout)
        gB = cute.make_tensor(gB.iterator.align(p.align * 2), gB.layout)

        ab_bytes = (cute.cosize(sA_layout) + cute.cosize(sB_layout)) * 2
        c_bytes = cute.cosize(sC_layout) * 2
        raw = cutlass.utils.SmemAllocator().allocate(max(ab_bytes, c_bytes), byte_alignment=128)
        base = cute.recast_ptr(raw, dtype=cutlass.Float16)
        sA = cute.make_tensor(base, sA_layout)
        sB = cute.make_tensor(base + cute.cosize(sA_layout), sB_layout)
        sC = cute.make_tensor(base, sC_layout)

        thr_A, thr_B = copy_A.get_slice(tidx), copy_B.get_slice(tidx)
        tAgA, tAsA, tAcA = thr_A.partition_S(gA), thr_A.partition_D(sA), thr_A.partition_S(cA)
        tBgB, tBsB, tBcB = thr_B.partition_S(gB), thr_B.partition_D(sB), thr_B.partition_S(cB)
        tApA = self._row_predicate(tAcA, cute.size(mA, mode=[0]))
        tBpB = self._row_predicate(tBcB, cute.size(mB, mode=[0]))

        tAsA.fill(0)
        tBsB.fill(0)
        cute.arch.sync_threads()
        k_tiles = cute.size(tAgA, mode=[3])
        # Prologue: the partial first k-tile (column by column), then full ones.
        for kc in range(cute.size(tAsA, mode=[2])):
            if cute.elem_less(cutlass.Int32(-1), tAcA[0, 0, kc, 0][1]):
                cute.copy(copy_A, tAgA[None, None, kc, 0], tAsA[None, None, kc, 0],
                          pred=tApA[None, None, kc])
        for kc in range(cute.size(tBsB, mode=[2])):
            if cute.elem_less(cutlass.Int32(-1), tBcB[0, 0, kc, 0][1]):
                cute.copy(copy_B, tBgB[None, None, kc, 0], tBsB[None, None, kc, 0],
                          pred=tBpB[None, None, kc])
        cute.arch.cp_async_commit_group()
        for s in range(1, p.stages - 1):
            if s < k_tiles:
                cute.copy(copy_A, tAgA[None, None, None, s], tAsA[None, None, None, s], pred=tApA)
                cute.copy(copy_B, tBgB[None, None, None, s], tBsB[None, None, None, s], pred=tBpB)
            cute.arch.cp_async_commit_group()

        acc = self.mainloop(tiled_mma, sA, sB, gC, copy_A, copy_B, tAgA, tAsA, tBgB, tBsB,
                            tApA, tBpB, k_tiles, tidx)
        self.epilogue(tiled_mma, acc, sC, gC, cC, copy_C, mC, tidx)

    def _row_predicate(self, coords, rows):
        """One flag per (vector, copy row): does the vector's row lie inside the operand?
        Columns (K) are checked per k-tile, not here."""
        pred = cute.make_rmem_tensor(
            cute.make_layout((coords.shape[0][1], cute.size(coords, mode=[1]),
                              cute.size(coords, mode=[2])),
                             stride=(cute.size(coords, mode=[1]), 1, 0)),
            cutlass.Boolean)
        for v in range(pred.shape[0]):
            for r in range(pred.shape[1]):
                pred[v, r, 0] = cute.elem_less(coords[(0, v), r, 0, 0][0], rows)
        return pred

    @cute.jit
    def mainloop(self, tiled_mma, sA, sB, gC, copy_A, copy_B, tAgA, tAsA, tBgB, tBsB,
                 tApA, tBpB, k_tiles, tidx):
        """smem -> registers (ldmatrix, one k16 block ahead) -> mma.sync, while cp.async
        keeps `stages - 1` k-tiles in flight."""
        p = self.plan
        thr_mma = tiled_mma.get_slice(tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB)[None, None, None, 0])
        acc = tiled_mma.make_fragment_C(thr_mma.partition_C(gC))
        acc.fill(0.0)
        ld_A = cute.make_tiled_copy_A(cute.make_copy_atom(
            warp.LdMatrix8x8x16bOp(False, 4), cutlass.Float16), tiled_mma)
        ld_B = cute.make_tiled_copy_B(cute.make_copy_atom(
            warp.LdMatrix8x8x16bOp(not p.b_k_major, 4), cutlass.Float16), tiled_mma)
        thr_ldA, thr_ldB = ld_A.get_slice(tidx), ld_B.get_slice(tidx)
        sA_view, rA_view = thr_ldA.partition_S(sA), thr_ldA.retile(tCrA)
        sB_view, rB_view = thr_ldB.partition_S(sB), thr_ldB.retile(tCrB)
        k_blocks = cute.size(tCrA, mode=[2])

        read, write = cutlass.Int32(0), cutlass.Int32(p.stages - 1)
        next_load = cutlass.Int32(p.stages - 1)
        cute.arch.cp_async_wait_group(p.stages - 2)
        cute.arch.sync_threads()
        cute.copy(ld_A, sA_view[None, None, 0, read], rA_view[None, None, 0])
        cute.copy(ld_B, sB_view[None, None, 0, read], rB_view[None, None, 0])
        for kt in range(k_tiles):
            for kb in cutlass.range(k_blocks, unroll_full=True):
                if kb == k_blocks - 1:  # the next k-tile must have landed
                    read = (read + 1) % p.stages
                    cute.arch.cp_async_wait_group(p.stages - 2)
                    cute.arch.sync_threads()
                nxt = (kb + 1) % k_blocks
                cute.copy(ld_A, sA_view[None, None, nxt, read], rA_view[None, None, nxt])
                cute.copy(ld_B, sB_view[None, None, nxt, read], rB_view[None, None, nxt])
                if kb == 0:
                    if next_load < k_tiles:
                        cute.copy(copy_A, tAgA[None, None, None, next_load],
                                  tAsA[None, None, None, write], pred=tApA)
                        cute.copy(copy_B, tBgB[None, None, None, next_load],
                                  tBsB[None, None, None, write], pred=tBpB)
                    cute.arch.cp_async_commit_group()
                    next_load = next_load + 1
                    write = (write + 1) % p.stages
                cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()
        return acc

    @cute.jit
    def epilogue(self, tiled_mma, acc, sC, gC, cC, copy_C, mC, tidx):
        """Accumulator -> fp16 in shared memory -> whole vectors to C, rows and columns masked."""
        thr_mma = tiled_mma.get_slice(tidx)
        out = cute.make_fragment_like(acc, cutlass.Float16)
        out.store(acc.load().to(cutlass.Float16))
        cute.autovec_copy(out, thr_mma.partition_C(sC))
        cute.arch.sync_threads()
        thr_C = copy_C.get_slice(tidx)
        tsC, tgC, tcC = thr_C.partition_S(sC), thr_C.partition_D(gC), thr_C.partition_S(cC)
        staged = cute.make_fragment_like(tsC)
        cute.autovec_copy(tsC, staged)
        inside = cute.make_rmem_tensor(
            cute.make_layout((tgC.shape[0][1], cute.size(tgC, mode=[1]), cute.size(tgC, mode=[2])),
                             stride=(cute.size(tgC, mode=[1]) * cute.size(tgC, mode=[2]),
                                     cute.size(tgC, mode=[2]), 1)),
            cutlass.Boolean)
        for v in range(inside.shape[0]):
            for r in range(inside.shape[1]):
                for col in range(inside.shape[2]):
                    inside[v, r, col] = cute.elem_less(tcC[(0, v), r, col], mC.shape)
        cute.copy(copy_C, staged, tgC, pred=inside)
