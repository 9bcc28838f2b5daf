"""sm_90a: TMA + wgmma GEMM with a producer warpgroup and cooperative consumer warpgroups.

Algorithm, per CTA (one producer warpgroup, `wm / 4` consumer warpgroups):
  1. Tile order: the grid holds `num_clusters` clusters of cm x cn CTAs; cluster i owns
     cluster-tiles i, i + num_clusters, ... (persistent when the grid is smaller than the
     problem, one pass when it is not) in grouped raster order (common.tile_coords).
  2. Producer (one warp): for each k-step, wait until a stage is free, then TMA-load the
     A and B tiles into it (multicast across the cluster: A along N, B along M); the
     stage's mbarrier counts the bytes in.
  3. Consumers: wait for a full stage, issue wgmma over its bk columns (one group in
     flight), release the previous stage; the accumulator stays in registers.
  4. Epilogue: accumulator -> fp16 -> stmatrix into a ring of smem sub-tiles -> TMA store.
     TMA zero-fills loads and clips stores outside (m, n, k): ragged edges need no masks.

Constraints (checked by backends.cute_dsl.plan.refusal):
  - warps w4x1 or w8x1 (1 or 2 consumer warpgroups), tile.bm = 64 or 128 per warpgroup;
  - tile.bn and tile.bk multiples of 64 (128-byte swizzle), tile.bn <= 256;
  - n and k multiples of 8, pointers 16-byte aligned (TMA).
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.tensor_utils import LayoutEnum

from .common import operand_views, tile_coords

WARPGROUP = 128        # threads of one warpgroup
WARPGROUP_WARPS = 4
WGMMA_M = 64           # rows one warpgroup's wgmma covers
SMEM_ALIGN = 1024      # bytes: 128B-swizzled tiles start on a whole swizzle period
PRODUCER_REGS = 40     # setmaxnreg for the TMA warpgroup
CONSUMER_REGS = 232    # ... and for the wgmma warpgroups
EPI_TILE_N = 32        # columns of C one epilogue sub-tile holds
EPI_STAGES = 4         # sub-tiles in flight to the TMA store
MMA_IN_FLIGHT = 1      # wgmma groups left outstanding before a stage is released
EPI_BARRIER_ID = 1     # named barrier among the consumer threads


class Sm90Gemm:
    """C = A @ B for one KernelPlan; call it (traced by cute.compile) with pointers and sizes."""

    def __init__(self, plan):
        self.plan = plan
        self.acc_dtype = cutlass.Float16 if plan.acc_f16 else cutlass.Float32
        self.groups = plan.wm // WARPGROUP_WARPS
        self.tile = (plan.bm, plan.bn, plan.bk)
        self.consumer_threads = self.groups * WARPGROUP
        self.threads = self.consumer_threads + WARPGROUP
        self.epi_tile = (min(plan.bm, WGMMA_M * self.groups), EPI_TILE_N)
        self.b_layout = LayoutEnum.ROW_MAJOR if plan.b_k_major else LayoutEnum.COL_MAJOR

    @cute.jit
    def __call__(self, a: cute.Pointer, b: cute.Pointer, c: cute.Pointer,
                 m: cutlass.Int32, n: cutlass.Int32, k: cutlass.Int32,
                 num_clusters: cutlass.Int32, stream: cuda.CUstream):
        p = self.plan
        mA, mB, mC = operand_views(p, a, b, c, m, n, k)
        f16 = cutlass.Float16
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            f16, f16, LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(), self.acc_dtype, (self.groups, 1, 1),
            tiler_mn=(WGMMA_M, p.bn))
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile, f16, p.stages)
        sB_layout = sm90_utils.make_smem_layout_b(self.b_layout, self.tile, f16, p.stages)
        sC_layout = sm90_utils.make_smem_layout_epi(f16, LayoutEnum.ROW_MAJOR, self.epi_tile,
                                                    EPI_STAGES)
        tma_a, tA = self._tma_load(mA, sA_layout, (p.bm, p.bk), p.cn)
        tma_b, tB = self._tma_load(mB, sB_layout, (p.bn, p.bk), p.cm)
        tma_c, tC = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mC, cute.slice_(sC_layout, (None, None, 0)),
            self.epi_tile)

        @cute.struct
        class Storage:
            barriers: cute.struct.MemRange[cutlass.Int64, p.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(sA_layout)], SMEM_ALIGN]
            sB: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(sB_layout)], SMEM_ALIGN]
            sC: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(sC_layout)], SMEM_ALIGN]

        self.storage = Storage
        self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, tiled_mma, sA_layout, sB_layout,
                    sC_layout, num_clusters).launch(
            grid=(num_clusters * p.cluster_size, 1, 1), block=(self.threads, 1, 1),
            cluster=(p.cluster_size, 1, 1), min_blocks_per_mp=1, stream=stream)

    @staticmethod
    def _tma_load(tensor, smem_staged, box, multicast: int):
        op = (cpasync.CopyBulkTensorTileG2SOp() if multicast == 1
              else cpasync.CopyBulkTensorTileG2SMulticastOp())
        return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(smem_staged, (None, None, 0)),
                                           box, num_multicast=multicast)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
               mB: cute.Tensor, tma_c: cute.CopyAtom, mC: cute.Tensor,
               tiled_mma: cute.TiledMma, sA_layout: cute.ComposedLayout,
               sB_layout: cute.ComposedLayout, sC_layout: cute.ComposedLayout,
               num_clusters: cutlass.Int32):
        p = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        cluster_layout = cute.make_layout((p.cm, p.cn, 1))
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        coord = cluster_layout.get_flat_coord(rank)
        storage = cutlass.utils.SmemAllocator().allocate(self.storage)
        one_stage = (None, None, 0)
        stage_bytes = (cute.size_in_bytes(cutlass.Float16, cute.slice_(sA_layout, one_stage))
                       + cute.size_in_bytes(cutlass.Float16, cute.slice_(sB_layout, one_stage)))
        mcast = p.cm + p.cn - 1
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.barriers.data_ptr(), num_stages=p.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, mcast * self.groups * WARPGROUP_WARPS),  # per warp
            tx_count=stage_bytes, cta_layout_vmnk=cute.make_layout((1, p.cm, p.cn, 1)),
            defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(p.cm, p.cn), is_relaxed=True)

        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)
        gA = cute.local_tile(mA, (p.bm, p.bk), (None, None))   # (bm, bk, tiles_m, tiles_k)
        gB = cute.local_tile(mB, (p.bn, p.bk), (None, None))   # (bn, bk, tiles_n, tiles_k)
        gC = cute.local_tile(mC, (p.bm, p.bn), (None, None))   # (bm, bn, tiles_m, tiles_n)
        tAsA, tAgA = cpasync.tma_partition(
            tma_a, coord[1], cute.make_layout(p.cn), cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, coord[0], cute.make_layout(p.cm), cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2))

        tiles_m = cute.size(gA, mode=[2])
        tiles_n = cute.size(gB, mode=[2])
        k_tiles = cute.size(gA, mode=[3])
        clusters_m = (tiles_m + p.cm - 1) // p.cm
        clusters_n = (tiles_n + p.cn - 1) // p.cn
        total = clusters_m * clusters_n
        first = bidx // p.cluster_size
        pipeline.pipeline_init_wait(cluster_shape_mn=(p.cm, p.cn))

        if warp_idx < WARPGROUP_WARPS:   # the producer warpgroup
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                a_mask = cute.make_layout_image_mask(cluster_layout, coord, mode=1)
                b_mask = cute.make_layout_image_mask(cluster_layout, coord, mode=0)
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, p.stages)
                work = first
                while work < total:
                    cm_idx, cn_idx = tile_coords(work, clusters_m, clusters_n, p.group,
                                                 p.raster_col)
                    tAgA_t = tAgA[(None, cm_idx * p.cm + coord[0], None)]
                    tBgB_t = tBgB[(None, cn_idx * p.cn + coord[1], None)]
                    for kt in range(k_tiles):
                        mainloop.producer_acquire(state)
                        barrier = mainloop.producer_get_barrier(state)
                        cute.copy(tma_a, tAgA_t[(None, kt)], tAsA[(None, state.index)],
                                  tma_bar_ptr=barrier, mcast_mask=a_mask if p.cn > 1 else 0)
                        cute.copy(tma_b, tBgB_t[(None, kt)], tBsB[(None, state.index)],
                                  tma_bar_ptr=barrier, mcast_mask=b_mask if p.cm > 1 else 0)
                        mainloop.producer_commit(state)
                        state.advance()
                    work += num_clusters
                mainloop.producer_tail(state)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            self.consume(tiled_mma, mainloop, sA, sB, sC, gC, tma_c, tidx - WARPGROUP, warp_idx,
                         first, total, clusters_m, clusters_n, k_tiles, coord, num_clusters)

    @cute.jit
    def consume(self, tiled_mma, mainloop, sA, sB, sC, gC, tma_c, ctid, warp_idx, first, total,
                clusters_m, clusters_n, k_tiles, coord, num_clusters):
        """The consumer warpgroups: wgmma over each of this CTA's tiles, then the epilogue."""
        p = self.plan
        thr_mma = tiled_mma.get_slice(ctid)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC).shape[:3], self.acc_dtype)
        k_blocks = cute.size(tCrA, mode=[2])

        store_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, cutlass.Float16,
                                                  self.acc_dtype)
        stmatrix = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), cutlass.Float16)
        r2s = cute.make_tiled_copy_S(store_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = r2s.get_slice(ctid)
        tRS_sC = thr_r2s.partition_D(sC)
        tRS_acc = r2s.retile(acc)
        frag_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        frag_acc = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
        frag_out = cute.make_rmem_tensor(frag_shape, cutlass.Float16)
        frag_size = cute.size(frag_acc)
        epi_barrier = pipeline.NamedBarrier(barrier_id=EPI_BARRIER_ID,
                                            num_threads=self.consumer_threads)
        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     self.consumer_threads))

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, p.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, p.stages)
        work = first
        sub_tiles_done = cutlass.Int32(0)
        while work < total:
            cm_idx, cn_idx = tile_coords(work, clusters_m, clusters_n, p.group, p.raster_col)
            acc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            for kt in range(k_tiles):
                mainloop.consumer_wait(read)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], acc)
                warpgroup.commit_group()
                read.advance()
                if kt >= MMA_IN_FLIGHT:
                    warpgroup.wait_group(MMA_IN_FLIGHT)
                    mainloop.consumer_release(release)
                    release.advance()
            warpgroup.wait_group(0)
            for kt in range(cutlass.min(k_tiles, MMA_IN_FLIGHT)):
                mainloop.consumer_release(release)
                release.advance()

            gC_tile = gC[(None, None, cm_idx * p.cm + coord[0], cn_idx * p.cn + coord[1])]
            gC_epi = cute.zipped_divide(gC_tile, self.epi_tile)
            bSG_sC, bSG_gC = cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi)
            epi_grid = gC_epi.shape[1]
            epi_order = cute.make_layout(epi_grid, stride=(epi_grid[1], 1))
            for e in cutlass.range_constexpr(cute.size(gC_epi, mode=[1])):
                for v in cutlass.range_constexpr(frag_size):
                    frag_acc[v] = tRS_acc[e * frag_size + v]
                frag_out.store(frag_acc.load().to(cutlass.Float16))
                buf = (sub_tiles_done + e) % EPI_STAGES
                cute.copy(r2s, frag_out, tRS_sC[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                epi_barrier.arrive_and_wait()
                if warp_idx == WARPGROUP_WARPS:   # the first consumer warp stores
                    cute.copy(tma_c, bSG_sC[(None, buf)],
                              bSG_gC[(None, epi_order.get_hier_coord(e))])
                    store_pipe.producer_commit()
                    store_pipe.producer_acquire()
                epi_barrier.arrive_and_wait()
            sub_tiles_done += cute.size(gC_epi, mode=[1])
            work += num_clusters
        store_pipe.producer_tail()
