"""The frozen template context of cuda_wgmma: every number the templates use, computed here
(tile geometry, shared-memory layout, wgmma descriptor bits, register budgets), and the
legality rules that follow from the same numbers (`reason()`), so that what verify checks
and what the kernel is built from can't drift apart.

Shared-memory layout (per pipeline stage, every tile base 1024-byte aligned):
  A   bm rows x bk halves, K-major: bk / 64 TMA boxes of bm x 64, each bm x 128 bytes,
      128B-swizzled (16-byte chunk c of row r stored at chunk c ^ (r % 8)).
  B   nt: bn rows x bk, K-major, as A (bk / 64 boxes of bn x 64).
      nn: bk rows x bn, N-major: bn / 64 boxes of bk x 64 (one per 64 columns of N),
      each bk x 128 bytes; wgmma reads it transposed (imm-trans-b = 1).
A wgmma descriptor names one 64-row (A) or wg_n-column (B) slab of a stage; its k16 steps
move the start address: +32 bytes inside a 128-byte K-major row (a new box every 4 steps),
or +16 rows (2048 bytes) of an N-major box.
After the ring's tiles, epilogue tma gives each consumer warpgroup two 64 x 64 C boxes (8 KB
each, 128B-swizzled like the operands), written from registers and stored by TMA in turn; one
box where two don't fit beside the ring (192x128 ping-pong with 5 stages).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..elements import Element, element
from ...ir.arch import HALF_BYTES, LIMITS, WARPGROUP_THREADS
from ...ir.program import (
    Accum, Arch, Cluster, Epilogue, L2Hint, Layout, Padding, Problem, Program, RasterOrder,
    Reduction, Schedule, Swizzle, Tile, WarpSpec, Warps, lowered_name,
)

WGMMA_M, WGMMA_K, WGMMA_N_MAX, WGMMA_N_STEP = 64, 16, 256, 8
SWIZZLE_BYTES = 128          # one 128B-swizzled shared-memory row
SWIZZLE_HALFS = SWIZZLE_BYTES // HALF_BYTES
SWIZZLE_ATOM_BYTES = 8 * SWIZZLE_BYTES   # the swizzle pattern repeats every 8 rows
DESC_LAYOUT_SW128 = 1        # wgmma descriptor bits 62-63: 128-byte swizzle
DESC_UNIT = 16               # descriptor addresses and offsets count 16-byte units
TMA_BOX_MAX = 256            # a TMA box spans at most 256 elements per dimension
TMA_ROW_ALIGN_HALFS = 8      # TMA needs 16-byte aligned global row strides
MBARRIER_BYTES = 8
SMEM_ALIGN_SLACK = 1024      # dynamic shared memory is only 16-byte aligned: round up by hand
REGS_PER_SM = LIMITS[Arch.SM90A].regs_per_sm
MAX_THREAD_REGS = 255
SETMAXNREG_MAX = 256         # setmaxnreg takes 24..256, multiples of 8
PRODUCER_REGS = {1: 40, 2: 40, 3: 24, 4: 24}  # the TMA warpgroup's registers, by consumer count
ACC_HEADROOM_REGS = 40       # addressing, descriptors and loop state beside the accumulators
                             # (192 accumulators in 232 registers build without spills)
WGMMA_OPERAND_REGS = 26      # one wgmma's registers beside its accumulator: ptxas compiles the
# kernel at the launch's per-thread cap whatever setmaxnreg later grants, and refused m64n144k16
# f32 (72 + 26 = 98) at 640 threads' cap of 96 while it took m64n136k16 (68 + 26 = 94)
MAX_CONSUMERS = 4
MAX_CLUSTER_SIZE = 4         # CTAs sharing operands through multicast (portable limit: 8)
MAX_CLUSTER_SLICES = 8       # split-K slices summed through one cluster (the portable limit)
STREAM_K_MIN_WG_N = 16       # stream_k: its workspace takes accumulators 4 x 32 bits at a time
PINGPONG_CONSUMERS = 2       # ping-pong: two consumer warpgroups, each on its own tiles
EPI_BOX = 64                 # epilogue tma: C leaves shared memory in 64 x 64 boxes
EPI_BUFFERS = 2              # per consumer at most: one box filling while the other is stored
EPI_BOX_BYTES = EPI_BOX * EPI_BOX * HALF_BYTES


def _floor8(x: int) -> int:
    return x // 8 * 8


def _ceil8(x: int) -> int:
    return (x + 7) // 8 * 8


@dataclass(frozen=True)
class WgmmaContext:
    kernel_name: str
    program_text: str
    layout: str              # nn, nt
    acc: str                 # f32, f16
    bm: int
    bn: int
    bk: int
    stages: int
    consumers: int           # consumer warpgroups (each issues wgmma)
    wn: int                  # consumers of one tile along N (wm = tile consumers / wn along M)
    pingpong: bool           # consumers take turns at whole tiles (else they share each tile)
    wg_m: int                # C block one consumer owns: wg_m x wg_n
    wg_n: int
    m_atoms: int             # m64 wgmmas per k16 step per consumer
    k_atoms: int             # k16 steps per k-tile
    acc_regs: int            # registers of one m64 x wg_n accumulator per thread
    producer: bool           # a producer warpgroup issues TMA (cooperative), else thread 0 does
    threads: int
    producer_regs: int
    consumer_regs: int       # setmaxnreg target of the consumers (or the plain cap without one)
    a_boxes: int             # TMA boxes per stage: A, then B
    b_boxes: int
    a_box_rows: int
    b_box_rows: int
    a_box_bytes: int
    b_box_bytes: int
    a_tile_bytes: int
    b_tile_bytes: int
    epi_tma: bool            # epilogue tma: registers -> swizzled 64 x 64 boxes -> TMA store
    epi_box: int             # rows and columns of one C box
    epi_buffers: int         # C boxes per consumer
    epi_bytes: int           # shared memory of those boxes, all consumers
    smem_bytes: int          # dynamic shared memory requested, slack included
    a_desc_hi: str           # wgmma descriptor bits besides the start address (hex)
    b_desc_hi: str
    tnsp_b: int
    consumer_inc: bool       # setmaxnreg.inc has registers to gain (else only the producer's dec)
    cluster_m: int           # CTAs of a cluster along M (they share B) and along N (share A)
    cluster_n: int
    a_slice_rows: int        # rows of each A box this CTA loads and multicasts (bm / cluster_n)
    b_slice_rows: int        # rows of each B box this CTA loads and multicasts (/ cluster_m)
    empty_arrivals: int      # consumers of a stage, of every CTA writing into this one
    persistent: bool         # a grid of the resident CTAs walks the units (stream_k too)
    stream_k: bool           # the tiles past the last whole wave are shared out by k-tiles
    raster_col: bool
    raster_group: int
    l2_stream_first: bool    # the raster's streamed operand (B for rows, A for columns) evict_first
    split_k: int
    atomic_reduce: bool
    inkernel_reduce: bool    # split-K summed by the last slice to arrive, in the kernel
    cluster_k: int           # split_k cluster: a tile's slices as one cluster (else 1)
    red_bytes: int           # shared memory where its ranks > 0 leave their accumulators
    swap_ab: bool            # the kernel computes C^T = B^T A^T (kernel_view's geometry)
    pdl: bool                # launched for programmatic dependent launch (griddepcontrol)
    bias: bool               # fused bias add before C's rounding (gemmforge_launch_bias)
    predicate: bool
    mma_op: dict             # name and operand numbers of the wgmma wrapper (ptx/wgmma.jinja)
    el: Element              # the operand dtype's types and conversions (backends.elements)

    def as_dict(self) -> dict:
        return asdict(self)


def _desc_hi(lbo: int, sbo: int) -> str:
    bits = ((lbo // DESC_UNIT) << 16) | ((sbo // DESC_UNIT) << 32) | (DESC_LAYOUT_SW128 << 62)
    return f"0x{bits:016x}ull"


def kernel_view(program: Program) -> Program:
    """The program in the kernel's own terms. With swap_ab the kernel computes
    C^T = B^T A^T: its M side (wgmma's 64-row side) runs along the problem's N and its N
    side (8..256 in steps of 8) along the problem's M, so tile, warps and cluster swap."""
    if not program.swap_ab:
        return program
    t, w, c = program.tile, program.warps, program.cluster
    return replace(program, tile=Tile(t.bn, t.bm, t.bk), warps=Warps(w.wn, w.wm),
                   cluster=Cluster(c.cn, c.cm))


def kernel_problem(program: Program, problem: Problem) -> Problem:
    """The problem the kernel computes: C^T (n x m, the operands' roles swapped) with swap_ab."""
    if not program.swap_ab:
        return problem
    return replace(problem, m=problem.n, n=problem.m)


def geometry(program: Program, layout: Layout) -> dict:
    """The numbers legality and lowering share (no problem size needed)."""
    t, w = program.tile, program.warps
    pingpong = program.warp_spec == WarpSpec.PINGPONG
    consumers = PINGPONG_CONSUMERS if pingpong else w.count
    producer = program.warp_spec in (WarpSpec.COOPERATIVE, WarpSpec.PINGPONG)
    threads = (consumers + producer) * WARPGROUP_THREADS
    entry = min(MAX_THREAD_REGS, _floor8(REGS_PER_SM // threads))
    if producer:
        # setmaxnreg.inc draws only on the registers this CTA's producer released with .dec
        # (USETMAXREG.TRY_ALLOC.CTAPOOL): asking for more spins forever. With __launch_bounds__
        # (threads, 1) ptxas gives every warp `entry` registers at launch (a CPU test checks),
        # so prod + consumers * cons <= (consumers + 1) * entry, 255 counting as 256.
        prod = PRODUCER_REGS.get(consumers, 24)
        pool = (consumers + 1) * min(SETMAXNREG_MAX, _ceil8(entry))
        cons = min(SETMAXNREG_MAX, _floor8((pool - prod) // consumers))
    else:
        prod, cons = 0, entry
    nt = layout == Layout.NT
    b_box_rows = t.bn if nt else t.bk
    b_boxes = t.bk // SWIZZLE_HALFS if nt else t.bn // SWIZZLE_HALFS
    stage_bytes = (t.bm + t.bn) * t.bk * HALF_BYTES
    epi_tma = program.epilogue == Epilogue.TMA
    ring_bytes = (program.stages * (stage_bytes + 2 * MBARRIER_BYTES)
                  + (consumers * MBARRIER_BYTES if pingpong else 0) + SMEM_ALIGN_SLACK)
    # Two C boxes per consumer (one filling while the other is stored) where they fit beside
    # the ring, else one (each box's store must have read it before it is written again).
    room = LIMITS[program.arch].max_smem_per_block - ring_bytes
    fits_two = consumers * EPI_BUFFERS * EPI_BOX_BYTES <= room
    epi_buffers = (EPI_BUFFERS if fits_two else 1) if epi_tma else 0
    epi_bytes = consumers * epi_buffers * EPI_BOX_BYTES
    # split_k cluster: every consumer thread's accumulators, fp32 (f16 packs two: room to
    # spare), where rank 0 of the cluster reads them
    cluster_k = (program.split_k.slices
                 if program.split_k.reduction == Reduction.CLUSTER else 1)
    red_bytes = (consumers * (t.bm // w.wm // WGMMA_M) * acc_regs(t.bn // w.wn, Accum.F32)
                 * WARPGROUP_THREADS * 4 if cluster_k > 1 and not pingpong else 0)
    c = program.cluster
    return dict(
        consumers=consumers, pingpong=pingpong, producer=producer, threads=threads,
        entry_regs=entry, epi_tma=epi_tma, epi_bytes=epi_bytes, epi_buffers=epi_buffers,
        consumer_inc=producer and cons > min(SETMAXNREG_MAX, _ceil8(entry)),
        a_slice_rows=t.bm // c.cn, b_slice_rows=b_box_rows // c.cm,
        producer_regs=prod, consumer_regs=cons,
        wg_m=t.bm // w.wm, wg_n=t.bn // w.wn, nt=nt,
        a_boxes=t.bk // SWIZZLE_HALFS, b_boxes=b_boxes, b_box_rows=b_box_rows,
        a_box_bytes=t.bm * SWIZZLE_BYTES, b_box_bytes=b_box_rows * SWIZZLE_BYTES,
        cluster_k=cluster_k, red_bytes=red_bytes,
        smem_bytes=ring_bytes + epi_bytes + red_bytes,
    )


def acc_regs(wg_n: int, acc: Accum) -> int:
    """32-bit registers per thread of one m64 x wg_n accumulator (f16 packs two)."""
    return wg_n // 2 if acc == Accum.F32 else wg_n // 4


def reason(program: Program, problem: Problem | None) -> str | None:
    """Why this program can't be lowered (for `problem`, if given), or None."""
    if program.swap_ab:
        if problem is not None and problem.layout != Layout.NT:
            return ("swap_ab: cuda_wgmma reads both swapped operands K-major from TMA, so it "
                    "needs layout nt (B stored N x K); without swap_ab it serves nn too")
        if program.epilogue == Epilogue.TMA:
            return ("epilogue: with swap_ab C is written transposed by direct stores; "
                    "use epilogue direct")
        problem = kernel_problem(program, problem) if problem else None
        program = kernel_view(program)
    return _kernel_reason(program, problem)


def _kernel_reason(program: Program, problem: Problem | None) -> str | None:
    t, w = program.tile, program.warps
    layout = problem.layout if problem else Layout.NT
    g = geometry(program, layout)
    if program.swizzle != Swizzle.B128:
        return (f"swizzle: cuda_wgmma stages operands through TMA in the 128B swizzle that "
                f"wgmma descriptors read; use sw128, not {program.swizzle.value}")
    if g["pingpong"] and w.count != 1:
        return (f"warps: a ping-pong consumer warpgroup owns a whole tile (two take turns); "
                f"use w1x1, not w{w.wm}x{w.wn}")
    if t.bk % SWIZZLE_HALFS:
        return f"tile.bk: {t.bk} is not a multiple of {SWIZZLE_HALFS} (one 128-byte swizzled row)"
    if t.bm > TMA_BOX_MAX or (layout == Layout.NT and t.bn > TMA_BOX_MAX):
        return f"tile: bm and bn are at most {TMA_BOX_MAX} (one TMA box), got {t.bm}x{t.bn}"
    if g["wg_m"] % WGMMA_M:
        side = "bn (swap_ab puts N on" if program.swap_ab else "bm (M is"
        return (f"tile.{side} wgmma's {WGMMA_M}-row side): a warpgroup's {g['wg_m']} rows are "
                f"not a multiple of {WGMMA_M}")
    if g["wg_n"] % WGMMA_N_STEP:
        return (f"tile: a warpgroup's {g['wg_n']} columns are not a multiple of wgmma's "
                f"N step ({WGMMA_N_STEP})")
    if g["consumers"] > MAX_CONSUMERS:
        return (f"warps: {w.wm}x{w.wn} is {g['consumers']} consumer warpgroups; at most "
                f"{MAX_CONSUMERS} share a CTA's registers")
    if g["wg_n"] > WGMMA_N_MAX:
        return (f"warps.wn: a warpgroup's {g['wg_n']} columns exceed wgmma's largest N "
                f"({WGMMA_N_MAX}); raise warps.wn")
    if layout == Layout.NN and g["wg_n"] % SWIZZLE_HALFS:
        return (f"warps.wn: layout nn reads B N-major in {SWIZZLE_HALFS}-column swizzle atoms; "
                f"a warpgroup's {g['wg_n']} columns are not a whole number of them")
    c = program.cluster
    if c.size > MAX_CLUSTER_SIZE:
        return f"cluster: {c.cm}x{c.cn} is {c.size} CTAs; cuda_wgmma multicasts to at most {MAX_CLUSTER_SIZE}"
    if g["b_slice_rows"] % 8 or g["b_slice_rows"] * c.cm != g["b_box_rows"]:
        return (f"cluster: cluster.cm {c.cm} cuts the {g['b_box_rows']}-row B box into slices that "
                f"are not whole 8-row swizzle atoms")
    if program.stages < 2:
        return "stages: the TMA ring needs at least 2 stages"
    if program.l2_hint != L2Hint.NONE and c.size > 1:
        return (f"l2_hint: cuda_wgmma puts the hint on unicast loads only; use cluster c1x1 "
                f"with {program.l2_hint.value}, not c{c.cm}x{c.cn}")
    if program.schedule == Schedule.STREAM_K and c.size > 1:
        return (f"cluster: cuda_wgmma's stream_k shares tiles out CTA by CTA; use cluster "
                f"c1x1 with it, not c{c.cm}x{c.cn}")
    if program.schedule == Schedule.STREAM_K and g["wg_n"] < STREAM_K_MIN_WG_N:
        return (f"warps.wn: stream_k moves accumulators to its workspace four registers at a "
                f"time, so a warpgroup needs at least {STREAM_K_MIN_WG_N} columns (f16 packs "
                f"two per register), not {g['wg_n']}")
    if g["cluster_k"] > 1:
        why = _cluster_reduce_reason(program, g)
        if why:
            return why
    if g["epi_tma"] and program.split_k.slices > 1:
        return ("epilogue: split-K writes fp32 partials that a reduce kernel sums into C; "
                "use epilogue direct with split_k > 1")
    if g["epi_tma"] and g["wg_n"] % EPI_BOX:
        return (f"epilogue: tma stores {EPI_BOX}-column boxes; a warpgroup's {g['wg_n']} columns "
                f"are not a whole number of them (use direct, or raise tile.bn)")
    acc = problem.acc if problem else Accum.F32
    need = (g["wg_m"] // WGMMA_M) * acc_regs(g["wg_n"], acc) + ACC_HEADROOM_REGS
    if need > g["consumer_regs"]:
        return (f"tile: a consumer's {g['wg_m']}x{g['wg_n']} {acc.value} accumulator needs about "
                f"{need} registers per thread; {g['consumer_regs']} are available")
    one = acc_regs(g["wg_n"], acc) + WGMMA_OPERAND_REGS
    if one > g["entry_regs"]:
        return (f"tile: one m64n{g['wg_n']} wgmma needs about {one} registers per thread, and "
                f"ptxas compiles {g['threads']} threads at {g['entry_regs']} each (fewer "
                f"warpgroups or a narrower warpgroup N)")
    budget = LIMITS[program.arch].max_smem_per_block
    if g["smem_bytes"] > budget:
        return (f"stages: {program.stages} stages of {t.bm}x{t.bn}x{t.bk} need "
                f"{g['smem_bytes']} B of shared memory (alignment slack and barriers "
                f"included); {program.arch.value} allows {budget} B per CTA")
    return _alignment_reason(program, problem)


def _cluster_reduce_reason(program: Program, g: dict) -> str | None:
    """Why split_k cluster (the slices of a tile as one cluster) can't serve, or None."""
    k, c = program.split_k.slices, program.cluster
    if k > MAX_CLUSTER_SLICES:
        return (f"split_k: a cluster sums at most {MAX_CLUSTER_SLICES} slices (the portable "
                f"cluster size); got k{k}c")
    if c.size > 1:
        return (f"cluster: split_k k{k}c makes each tile's {k} slices the cluster; use "
                f"cluster c1x1 with it, not c{c.cm}x{c.cn}")
    if program.schedule != Schedule.DATA_PARALLEL:
        return (f"schedule: split_k k{k}c gives each CTA one slice of one tile; use "
                f"schedule dp, not {program.schedule.value}")
    if g["pingpong"]:
        return (f"warp_spec: split_k k{k}c needs every consumer on the CTA's one tile; use "
                f"coop or nows, not pingpong")
    return None


def _alignment_reason(program: Program, problem: Problem | None) -> str | None:
    if problem is None or program.padding != Padding.PREDICATE:
        return None
    a = TMA_ROW_ALIGN_HALFS
    if problem.k % a or (problem.layout == Layout.NN and problem.n % a):
        return (f"padding: TMA reads rows whose stride is a multiple of 16 bytes (k % {a} == 0, "
                f"and n % {a} == 0 for layout nn); {problem.shape} {problem.layout.value} is "
                f"not: use padop (pad_operands), which copies the operands into the workspace")
    return None


def _wgmma_operands(n: int, acc: Accum, tnsp_b: int, el: Element) -> dict:
    regs = acc_regs(n, acc)
    return {"name": f"wgmma_m64n{n}k16_{acc.value}", "n": n, "acc": acc.value, "ab": el.name,
            "regs": regs, "desc_a": regs, "desc_b": regs + 1, "scale_d": regs + 2,
            "tnsp_b": tnsp_b}


def make_context(program: Program, problem: Problem) -> WgmmaContext:
    name = lowered_name(program, problem)  # of the program, not its kernel view: the file's name
    problem = kernel_problem(program, problem)
    program = kernel_view(program)
    t, w = program.tile, program.warps
    g = geometry(program, problem.layout)
    tnsp_b = 0 if g["nt"] else 1
    # K-major: 8-row groups 1024 B apart (SBO); the leading offset is unused (1 unit).
    # N-major: 8-k-row groups 1024 B apart (SBO); 64-column atoms one box apart (LBO).
    a_hi = _desc_hi(DESC_UNIT, SWIZZLE_ATOM_BYTES)
    b_hi = a_hi if g["nt"] else _desc_hi(g["b_box_bytes"], SWIZZLE_ATOM_BYTES)
    return WgmmaContext(
        kernel_name=name, program_text=str(program),
        layout=problem.layout.value, acc=problem.acc.value,
        bm=t.bm, bn=t.bn, bk=t.bk, stages=program.stages,
        consumers=g["consumers"], wn=w.wn, wg_m=g["wg_m"], wg_n=g["wg_n"],
        m_atoms=g["wg_m"] // WGMMA_M, k_atoms=t.bk // WGMMA_K,
        acc_regs=acc_regs(g["wg_n"], problem.acc),
        producer=g["producer"], threads=g["threads"],
        producer_regs=g["producer_regs"], consumer_regs=g["consumer_regs"],
        a_boxes=g["a_boxes"], b_boxes=g["b_boxes"], a_box_rows=t.bm, b_box_rows=g["b_box_rows"],
        a_box_bytes=g["a_box_bytes"], b_box_bytes=g["b_box_bytes"],
        a_tile_bytes=t.bm * t.bk * HALF_BYTES, b_tile_bytes=t.bn * t.bk * HALF_BYTES,
        epi_tma=g["epi_tma"], epi_box=EPI_BOX, epi_buffers=g["epi_buffers"], epi_bytes=g["epi_bytes"],
        pingpong=g["pingpong"],
        smem_bytes=g["smem_bytes"], a_desc_hi=a_hi, b_desc_hi=b_hi, tnsp_b=tnsp_b,
        consumer_inc=g["consumer_inc"], cluster_m=program.cluster.cm, cluster_n=program.cluster.cn,
        a_slice_rows=g["a_slice_rows"], b_slice_rows=g["b_slice_rows"],
        empty_arrivals=((1 if g["pingpong"] else g["consumers"])
                        * (program.cluster.cm + program.cluster.cn - 1)),
        persistent=program.schedule in (Schedule.PERSISTENT, Schedule.STREAM_K),
        stream_k=program.schedule == Schedule.STREAM_K,
        raster_col=program.raster.order == RasterOrder.COL,
        raster_group=program.raster.group,
        l2_stream_first=program.l2_hint == L2Hint.STREAM_FIRST,
        split_k=program.split_k.slices,
        atomic_reduce=program.split_k.reduction == Reduction.ATOMIC,
        inkernel_reduce=program.split_k.reduction == Reduction.INKERNEL,
        cluster_k=g["cluster_k"], red_bytes=g["red_bytes"],
        swap_ab=program.swap_ab,
        pdl=program.pdl,
        bias=program.bias,
        predicate=program.padding == Padding.PREDICATE,
        mma_op=_wgmma_operands(g["wg_n"], problem.acc, tnsp_b, element(problem.dtype)),
        el=element(problem.dtype),
    )
