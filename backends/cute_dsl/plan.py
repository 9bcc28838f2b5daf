"""The kernel plan: every compile-time knob of a CuTe DSL kernel, derived from the IR.

`make_plan(program, problem, device_sm)` turns a verified Program into a `KernelPlan`,
a frozen record of plain values (JSON-serialisable) that the DSL kernels read and the
C launcher template renders from. Arithmetic and legality live here, in pure Python, so
that the backend can refuse a program (`refusal`) and lower it without the DSL.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ...ir.program import Accum, Arch, Layout, Problem, Program, RasterOrder, Schedule, Swizzle

WARP_THREADS = 32
WARPGROUP_WARPS = 4           # wgmma is issued by 4 warps stacked along M
WGMMA_M = 64                  # rows of C one warpgroup's wgmma covers
WGMMA_MAX_N = 256             # widest wgmma N
TMA_MAX_BOX = 256             # a TMA box spans at most 256 elements per dimension
SW128_HALFS = 64              # a 128-byte swizzle atom row holds 64 fp16 values
TMA_ALIGN_HALFS = 8           # TMA global strides must be multiples of 16 bytes
MAX_CONSUMER_WARPGROUPS = 2   # with one producer warpgroup: 384 threads, 232/40 registers
CP_ASYNC_MIN_HALFS = 2        # cp.async moves 4, 8 or 16 bytes; narrower is a plain load
VECTOR_HALFS = (8, 4, 2, 1)   # 16, 8, 4, 2-byte global accesses, widest first
MMA_K = 16                    # K of one mma.sync / wgmma instruction
SWIZZLE_BITS = {Swizzle.NONE: 0, Swizzle.B32: 1, Swizzle.B64: 2, Swizzle.B128: 3}
SYMBOL_PREFIX = "gf"


@dataclass(frozen=True)
class KernelPlan:
    """What one exported kernel is: its family, tile, pipeline and launch rules.

    kernel     "sm80_multistage" (cp.async + ldmatrix + mma.sync) or
               "sm90_warpspecialized" (TMA + wgmma, producer/consumer warpgroups)
    dsl_arch   the CUTE_DSL_ARCH the kernel compiles for (sm_80, sm_90 or sm_90a)
    align      elements every row of A, B and C starts on (n and k must divide by it)
    """

    program: str
    prefix: str
    kernel: str
    dsl_arch: str
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    swizzle_bits: int
    raster_col: bool
    group: int
    persistent: bool
    cm: int
    cn: int
    acc_f16: bool
    b_k_major: bool
    align: int
    threads: int

    @property
    def cluster_size(self) -> int:
        return self.cm * self.cn

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "KernelPlan":
        return KernelPlan(**json.loads(text))


def problem_align(problem: Problem) -> int:
    """The widest vector (in halves) that divides n and k: row starts of A, B, C align to it."""
    return next(v for v in VECTOR_HALFS if problem.n % v == 0 and problem.k % v == 0)


def dsl_arch(program: Program, device_sm: int | None) -> str:
    """The arch the DSL compiles for: sm_90a programs need wgmma; an sm_80 program on a
    Hopper device is compiled as sm_90 (sm_80 machine code does not run there)."""
    if program.arch == Arch.SM90A:
        return "sm_90a"
    return "sm_80" if device_sm in (None, 80) else f"sm_{device_sm}"


def _copy_grid(rows: int, cols: int, align: int, threads: int) -> str | None:
    """None if `threads` can move a rows x cols tile (cols contiguous) in align-wide vectors."""
    vectors = cols // align
    along = min(vectors, threads)
    if vectors % along or threads % along or rows % (threads // along):
        return (f"{threads} threads can't tile a {rows}x{cols} copy in {align}-element "
                f"vectors ({along} along the row, {threads // max(along, 1)} rows a pass)")
    return None


def _sm80_refusal(p: Program, align: int) -> str | None:
    t, threads = p.tile, p.warps.count * WARP_THREADS
    if p.swizzle not in SWIZZLE_BITS:
        return (f"swizzle: cute_dsl sm_80 uses an XOR swizzle (none, 32B, 64B, 128B), "
                f"not {p.swizzle.value}")
    if p.stages < 2:
        return "stages: the sm_80 cp.async pipeline needs at least 2 stages"
    if t.bk < 2 * MMA_K:
        return (f"tile.bk: {t.bk} < {2 * MMA_K}: the sm_80 register pipeline runs one "
                f"k16 block ahead")
    if p.schedule != Schedule.DATA_PARALLEL:
        return "schedule: cute_dsl sm_80 kernels are data_parallel"
    if p.warp_spec.value != "none" or p.epilogue.value != "smem":
        return "warp_spec/epilogue: cute_dsl sm_80 uses no warp specialization and an smem epilogue"
    if t.bn % (p.warps.wn * 16):
        return (f"tile.bn: {t.bn} must be a multiple of warps.wn x 16 "
                f"(ldmatrix.x4 feeds B in pairs of n8 blocks)")
    for what, rows, cols in (("A", t.bm, t.bk), ("B (nt)", t.bn, t.bk), ("B (nn)", t.bk, t.bn),
                             ("C", t.bm, t.bn)):
        reason = _copy_grid(rows, cols, align, threads)
        if reason:
            return f"tile: {what}: {reason}"
    return None


def _sm90_refusal(p: Program, problem: Problem | None) -> str | None:
    t, w = p.tile, p.warps
    if w.wm % WARPGROUP_WARPS or w.wn != 1:
        return (f"warps: sm_90a issues wgmma per warpgroup of {WARPGROUP_WARPS} warps stacked "
                f"along M: use w4x1 or w8x1, not w{w.wm}x{w.wn}")
    groups = w.wm // WARPGROUP_WARPS
    if groups > MAX_CONSUMER_WARPGROUPS:
        return f"warps: at most {MAX_CONSUMER_WARPGROUPS} consumer warpgroups (w8x1)"
    if t.bm not in (WGMMA_M * groups, 2 * WGMMA_M * groups):
        return (f"tile.bm: {t.bm} must be {WGMMA_M * groups} or {2 * WGMMA_M * groups} "
                f"with {groups} consumer warpgroup(s)")
    if t.bn > min(WGMMA_MAX_N, TMA_MAX_BOX) or t.bn % SW128_HALFS:
        return f"tile.bn: {t.bn} must be a multiple of {SW128_HALFS} up to {WGMMA_MAX_N}"
    if t.bk % SW128_HALFS:
        return f"tile.bk: {t.bk} must be a multiple of {SW128_HALFS} (128-byte swizzled rows)"
    if p.swizzle != Swizzle.B128:
        return "swizzle: sm_90a wgmma operands use 128B swizzled shared memory (sw128)"
    if p.schedule == Schedule.STREAM_K:
        return "schedule: cute_dsl sm_90a runs data_parallel or persistent, not stream_k"
    if p.warp_spec.value != "cooperative" or p.epilogue.value != "tma":
        return "warp_spec/epilogue: cute_dsl sm_90a is cooperative with a TMA store epilogue"
    if problem is not None and problem_align(problem) < TMA_ALIGN_HALFS:
        return (f"problem: TMA needs n and k multiples of {TMA_ALIGN_HALFS} "
                f"(got n={problem.n}, k={problem.k}); use an sm_80 program")
    return None


def refusal(program: Program, problem: Problem | None = None) -> str | None:
    """Why the cute_dsl kernels can't compute `program` (for `problem`), or None."""
    if program.arch == Arch.SM90A:
        return _sm90_refusal(program, problem)
    align = problem_align(problem) if problem is not None else VECTOR_HALFS[0]
    return _sm80_refusal(program, align)


def make_plan(program: Program, problem: Problem, device_sm: int | None = None) -> KernelPlan:
    """The plan of `program` (assumed legal: see `refusal`) for `problem`'s layout, accumulator
    and alignment class, compiled for a device of compute capability `device_sm`."""
    hopper = program.arch == Arch.SM90A
    t, w = program.tile, program.warps
    threads = w.count * WARP_THREADS + (WARPGROUP_WARPS * WARP_THREADS if hopper else 0)
    return KernelPlan(
        program=str(program), prefix=f"{SYMBOL_PREFIX}_{program.key}",
        kernel="sm90_warpspecialized" if hopper else "sm80_multistage",
        dsl_arch=dsl_arch(program, device_sm),
        bm=t.bm, bn=t.bn, bk=t.bk, wm=w.wm, wn=w.wn, stages=program.stages,
        swizzle_bits=SWIZZLE_BITS.get(program.swizzle, 0),
        raster_col=program.raster.order == RasterOrder.COL, group=program.raster.group,
        persistent=program.schedule == Schedule.PERSISTENT,
        cm=program.cluster.cm, cn=program.cluster.cn,
        acc_f16=problem.acc == Accum.F16, b_k_major=problem.layout == Layout.NT,
        align=problem_align(problem), threads=threads,
    )
