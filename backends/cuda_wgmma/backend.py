"""cuda_wgmma: Hopper (sm_90a) GEMM from jinja2 templates and inline PTX.

The kernel, in steps (templates/kernel.cuh.jinja):
  1. The launcher builds two TMA tensor maps on the host (cuTensorMapEncodeTiled, reached
     through cudaGetDriverEntryPointByVersion so the .so links only cudart), cached per
     (pointers, M, N, K), and passes them as `const __grid_constant__ CUtensorMap`.
  2. A ring of `stages` shared-memory stages, each with a `full` and an `empty` mbarrier.
     The producer (warp_spec cooperative: a whole warpgroup that gives its registers away
     with setmaxnreg.dec; warp_spec none: thread 0 of the first consumer, between its own
     wgmmas) waits for `empty`, posts the stage's byte count on `full`
     (arrive.expect_tx) and issues cp.async.bulk.tensor loads of A and B into it,
     128B-swizzled; out-of-bounds elements arrive as zeros, so ragged M, N, K need no masks
     (templates/producer.cuh.jinja).
  3. Each consumer warpgroup (setmaxnreg.inc) owns a wg_m x wg_n block of the CTA tile; per
     stage it waits on `full` (try_wait.parity), issues bk/16 x wg_m/64 wgmma.mma_async
     m64n{wg_n}k16 from shared-memory descriptors (B transposed for layout nn), commits,
     and once the previous stage's group has retired (wait_group 1) frees that stage.
     warp_spec pingpong: two consumer warpgroups each own whole tiles and take the CTA's
     units in turn (each skips the other's stages in the ring), so one's epilogue runs
     while the other computes.
  4. Epilogue direct: accumulators go straight from registers to C -- 16-byte stores after a
     transpose within each quad of threads where the block lies inside a 16-byte aligned C,
     half2 or predicated stores elsewhere -- or to fp32 split-K partials that a reduce
     kernel sums (workspace) or accumulates (atomic), or (inkernel) that the last slice to
     arrive on a per-warp counter adds to its own registers before it writes C, leaving the
     counter at zero for the next launch (templates/epilogue.cuh.jinja, splitk_arrive), or
     (cluster) that the tile's other slices, the CTAs of its cluster, leave in their shared
     memory for rank 0 to add between two cluster barriers (cluster_reduce).
     Epilogue tma: each consumer writes 64 x 64 boxes of C into two
     swizzled shared-memory buffers in turn and stores each with cp.async.bulk.tensor (TMA
     clips at the edges); a C that TMA can't write (not 16-byte aligned, n % 8 != 0) takes
     the direct stores compiled beside it.
  5. schedule persistent: as many CTAs (clusters) as fit at once walk the units (tile x K
     slice, grouped raster) with a stride; the producer runs ahead across unit boundaries.
     Every schedule maps a unit to its tile with divisors the launcher fixes (FastDiv: a
     multiply-high and a shift each, templates/fastdiv.cuh.jinja), so the walk to a CTA's
     first unit, which its first load waits for, costs no run-time division.
     schedule stream_k: the same grid, but where the tiles don't fill the last wave (T % G
     of them, or all T < G) those tiles are split by k-tiles after the whole ones: a head
     for the tile's owner and a tail, in parts, for the CTAs the last wave would leave idle;
     each tail part leaves its accumulators in the workspace and raises a flag, and the
     owner adds them before its epilogue (templates/streamk.cuh.jinja). Where the count
     says splitting saves under 1 %, or the idle CTAs are too few for the tails, the
     launcher shares nothing.
  6. cluster cm x cn: CTA (i, j) loads 1/cn of the A tile and 1/cm of the B tile and
     multicasts each slice to the CTAs sharing it; `empty` counts the consumers of every
     CTA writing into a stage (remote arrives through mapa); a cluster barrier follows the
     mbarrier inits, and each producer drains the ring before exiting so no peer signals a
     CTA that has gone.

  7. swap_ab: the launcher swaps the operands and M with N, and the kernel computes
     C^T = B^T A^T: the problem's N runs along wgmma's 64-row side and its M (the token
     side of an LLM layer, 8..256 in steps of 8) along wgmma's N side, so a small M fills
     the instruction instead of a 64-row tile; the direct epilogue writes C transposed.
     Its consumers compute their tile's coordinates before the mainloop: left to the
     compiler, those divisions sink into the epilogue, between the last k-tile and the exit.
  8. pdl: launched with programmatic stream serialization, the kernel runs its set-up (the
     barriers, the tensor maps' prefetch, the producer's walk to its first unit) while the
     previous kernel finishes, then waits for that kernel's memory (griddepcontrol.wait)
     before any load and lets the next kernel launch.
  9. bias: each consumer adds bias[n] (fp16, read once per column it owns; with swap_ab
     per row, the kernel's M being C's N) to its fp32 (or f16) accumulators after the
     mainloop and any split-K or stream-K sum, before whichever store writes C; split-K
     through a workspace or atomics adds it in the reduce kernel instead. Launched through
     gemmforge_launch_bias (gemmforge_launch runs the same kernel without it).

Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC
(`gemmforge emit` writes the standalone .cu with these commands in its header).

Constraints:
  - arch sm_90a; swizzle sw128; tile.bk a multiple of 64; tile.bm <= 256 (bn <= 256 for nt);
  - warps wm x wn consumer warpgroups, at most 4; a warpgroup's N (bn / wn) <= 256 and, for
    layout nn, a multiple of 64; its accumulator must fit its register budget;
  - stages >= 2 (up to 16) and the ring within 227 KB of shared memory;
  - swap_ab needs layout nt (both swapped operands are read K-major) and epilogue direct;
    the tile stays in the problem's terms: bn (N) on the 64-row side, bm (M) on the N side;
  - padding predicate needs k % 8 == 0 (and n % 8 == 0 for nn): TMA reads 16-byte aligned
    rows; padop copies unaligned operands into the workspace instead;
  - schedule data_parallel, persistent or stream_k (stream_k: cluster c1x1);
    epilogue direct or tma (tma: split_k 1, and a
    warpgroup's N a multiple of 64); warp_spec pingpong needs warps w1x1;
  - l2_hint stream_first: cluster c1x1 (the streamed operand's loads carry the hint; a
    multicast load does not take one here);
  - cluster cm x cn with cm * cn <= 4. (Until 2026-11-25 layout nn with a warpgroup wider
    than one 64-column atom was declined with clusters: off rank 0 the atoms past the first
    read garbage. The cause: in a cluster, the shared address cvta gives a CTA carries its
    rank in the high bits, and OR-ing it unmasked into a wgmma descriptor spilled into the
    leading-byte-offset field, which only N-major B reads; the start address is now masked
    to its 14 bits: benchmarks/NOTES.md, Hopper kernels (cuda_wgmma), the nn cluster bug.)
"""
from __future__ import annotations

import os
from pathlib import Path

from .. import register
from ...compiler.values import Source
from ..cuda.backend import SELFTEST_DEFAULT, CudaBackend
from .context import (
    ACC_HEADROOM_REGS, SETMAXNREG_MAX, TMA_ROW_ALIGN_HALFS, geometry, kernel_view, make_context,
    reason,
)
from ..templating import fingerprint, render
from ...compiler import nvcc
from ...ir.arch import MmaFamily
from ...ir.program import (
    MAX_STAGES, TILE_EXTRAS, Arch, DType, Epilogue, L2Hint, Layout, Padding, Problem, Program,
    Reduction, Schedule, WarpSpec, lowered_name,
)

# GEMMFORGE_CUDA_WGMMA_TEMPLATES: render from another folder of these templates (a template
# A/B: benchmarks/template_ab.py); the folder's fingerprint keys its builds apart.
TEMPLATES = Path(os.environ.get("GEMMFORGE_CUDA_WGMMA_TEMPLATES") or Path(__file__).with_name("templates"))


@register
class CudaWgmma(CudaBackend):
    """TMA + mbarrier ring + wgmma.mma_async, warp-specialized, for sm_90a.

    The cuda family's build (nvcc into a .so with the extern "C" gemmforge_launch API),
    loader and standalone self-test are reused; lowering and templates are its own.
    """

    name = "cuda_wgmma"
    path = "wgmma"
    archs = frozenset({Arch.SM90A})
    instruction = "wgmma.mma_async"
    mma_family = MmaFamily.WGMMA
    mma_shape = (64, 8, 16)   # m64nNk16; a warpgroup's N is any multiple of 8 up to 256
    unit_threads = 128        # Program.warps counts consumer warpgroups (of one tile)
    # verify's coarse bound; reason() checks each program's real setmaxnreg budget
    consumer_accum_regs = SETMAXNREG_MAX - ACC_HEADROOM_REGS
    # any multiple of 8 up to 256 (one TMA box): on the wgmma N side (the token side with
    # swap_ab, N for layout nt) any of them, on the 64-row side multiples of 64 (192 = 3 x m64)
    tile_extras = TILE_EXTRAS
    max_stages = MAX_STAGES   # the ring's depth is bounded by shared memory (reason())
    dtypes = frozenset(DType)  # wgmma .f16 and .bf16 (bf16 with an f32 accumulator)
    reductions = frozenset(Reduction)
    fusions = frozenset({"bias"})  # added to the accumulators before every kind of store
    allowed = {
        "swap_ab": frozenset({False, True}),
        "padding": frozenset(Padding),
        "schedule": frozenset({Schedule.DATA_PARALLEL, Schedule.PERSISTENT, Schedule.STREAM_K}),
        "warp_spec": frozenset(WarpSpec),
        "epilogue": frozenset({Epilogue.DIRECT, Epilogue.TMA}),
        "l2_hint": frozenset(L2Hint),
        "pdl": frozenset({False, True}),
    }

    def supports(self, program: Program, problem: Problem | None = None) -> str | None:
        return reason(program, problem)

    def smem_bytes(self, program: Program) -> int | None:
        # the ring plus one or two 64 x 64 C boxes per consumer (not ir.graph's whole C tile)
        return geometry(kernel_view(program), Layout.NN)["smem_bytes"]

    def source(self, program: Program, problem: Problem, selftest: tuple[int, int, int]) -> Source:
        ctx = make_context(program, problem).as_dict()
        m, n, k = selftest
        if selftest == SELFTEST_DEFAULT and program.padding == Padding.PREDICATE:
            # the default shape must be legal (an emitted shape passed verify already)
            k = (k + TMA_ROW_ALIGN_HALFS - 1) // TMA_ROW_ALIGN_HALFS * TMA_ROW_ALIGN_HALFS
        ctx.update(gencode=" ".join(nvcc.gencode(program.arch)),
                   selftest_m=m, selftest_n=n, selftest_k=k)
        text = render(TEMPLATES, "gemm.cu.jinja", ctx)
        name = f"{lowered_name(program, problem)}.cu"
        return Source(program, problem, "cuda", {name: text}, name)

    def fingerprint(self) -> str:
        return fingerprint(str(TEMPLATES))
