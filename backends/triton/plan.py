"""What a triton-backend program launches, as plain data: the kernels of its kernel.py in
launch order (names, Triton signatures, constexprs, warps, stages, grid rule), its tensor
descriptors and its workspace; and the template context that renders kernel.py.

Pure Python with no triton import: `lower()` renders from it, `build()` compiles from it,
and the runtime launches from its JSON form (stored in the artifact's metadata).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..elements import Element, element
from ...ir.program import (
    Accum, Epilogue, Layout, Problem, Program, RasterOrder, Reduction, Schedule, lowered_name,
)

ELEMENTWISE_BLOCK = 1024   # elements per program of the split-K zero and reduce kernels
ELEMENTWISE_WARPS = 4
ALIGN_HINT = 16            # tt.divisibility Triton is told for aligned pointers and sizes
F32_BYTES = 4
I32_BYTES = 4
TMA_ROW_ALIGN_HALFS = 8    # TMA descriptors need 16-byte aligned row strides (8 fp16)
TMA_MAX_BOX_ROWS = 256     # a TMA box spans at most 256 elements per dimension

# Integer parameters whose alignment selects a compiled variant, and the problem
# dimension product each one stands for (NUMEL = M * N).
ALIGNABLE = ("N", "K", "NUMEL")
# Launch arguments that change from call to call (the addresses of A, B, C, the
# workspace and a fused bias, and TMA descriptors over A, B and C), in the order the
# runtime keeps them; every other argument follows from the problem size.
PER_CALL_ARGS = ("a_ptr", "b_ptr", "c_ptr", "ws_ptr", "bias_ptr", "a_desc", "b_desc", "c_desc")
DESCRIPTOR_BASES = {"a_desc": "a_ptr", "b_desc": "b_ptr", "c_desc": "c_ptr"}


@dataclass(frozen=True)
class KernelPlan:
    """One @triton.jit kernel of kernel.py and how to launch it.

    `signature` maps every parameter, in the kernel's parameter order, to its Triton
    type ("*fp16", "i32", "tensordesc<fp16[128, 64]>", or "constexpr"); that order is
    the launch order, so the JSON form keeps it as a list of [name, type] pairs (JSON
    objects are unordered, and the artifact cache writes them with sorted keys).
    `grid` is "tiles" (one program per work unit), "persistent" (min(SM count, work
    units)) or "elements" (NUMEL / BLOCK). `launch_pdl`: compiled with Triton's
    `launch_pdl` option, so its launcher sets programmatic stream serialization (the
    program's `pdl`; every kernel of such a plan waits for its predecessor's memory with
    gdc_wait before touching global memory).
    """

    role: str          # gemm, zero or reduce
    name: str
    signature: dict[str, str]
    constexprs: dict[str, int]
    num_warps: int
    num_stages: int
    grid: str
    launch_pdl: bool = False

    def args(self, values: dict) -> list:
        """Positional launch arguments: `values` by parameter name, constexprs as planned."""
        return [self.constexprs[name] if ty == "constexpr" else values[name]
                for name, ty in self.signature.items()]

    def launch_template(self, values: dict) -> tuple[tuple, tuple[tuple[int, int], ...]]:
        """`args(values)` with the PER_CALL_ARGS left open, for a runtime that fills them
        per launch: (the arguments, None where a per-call one goes; for each of those,
        (its position, its index in PER_CALL_ARGS)). `values` holds the sizes only."""
        args, slots = [], []
        for at, (name, ty) in enumerate(self.signature.items()):
            if ty == "constexpr":
                args.append(self.constexprs[name])
            elif name in PER_CALL_ARGS:
                args.append(None)
                slots.append((at, PER_CALL_ARGS.index(name)))
            else:
                args.append(values[name])
        return tuple(args), tuple(slots)

    def as_json(self) -> dict:
        return {**asdict(self), "signature": [list(item) for item in self.signature.items()]}

    @classmethod
    def from_json(cls, data: dict) -> "KernelPlan":
        if not isinstance(data["signature"], list):
            raise ValueError(f"{data['name']}: the signature must be a list of [name, type] "
                             "pairs (its order is the launch order); rebuild the artifact")
        return cls(**{**data, "signature": {name: ty for name, ty in data["signature"]}})


@dataclass(frozen=True)
class LaunchPlan:
    """The kernels one GEMM launch runs, in order, and what they need from the host.

    `descriptors` maps a tensor-descriptor parameter to [rows, cols] (names of the
    problem sizes giving its global shape; strides follow, row-major) and its block
    shape; `workspace_slices` is how many fp32 M x N buffers the workspace holds (written
    before they are read in every launch, so any memory will do). `counters`: the GEMM
    kernel takes `cnt_ptr`, one int32 arrival counter per tile of C (split-K inkernel),
    which must be zero before the first launch; each launch leaves them zero again (the
    last slice of a tile to arrive resets its counter), so the runtime allocates them
    zeroed once and keeps them, apart from the shared workspace (counter_bytes).
    """

    kernels: tuple[KernelPlan, ...]
    descriptors: dict[str, dict]
    workspace_slices: int
    tile: tuple[int, int, int]
    split_k: int
    counters: bool = False

    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        return self.workspace_slices * m * n * F32_BYTES

    def counter_bytes(self, m: int, n: int) -> int:
        """Bytes of the zero-initialised, self-resetting counters at m x n (0 if none)."""
        bm, bn, _ = self.tile
        return _cdiv(m, bm) * _cdiv(n, bn) * I32_BYTES if self.counters else 0

    def grid(self, kernel: KernelPlan, m: int, n: int, num_sms: int) -> int:
        """Programs (a 1-D grid) `kernel` launches at m x n on a device of `num_sms` SMs."""
        if kernel.grid == "elements":
            return _cdiv(m * n, ELEMENTWISE_BLOCK)
        bm, bn, _ = self.tile
        units = _cdiv(m, bm) * _cdiv(n, bn) * self.split_k
        return min(units, num_sms) if kernel.grid == "persistent" else units

    def as_json(self) -> dict:
        return {**asdict(self), "kernels": [k.as_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, data: dict) -> "LaunchPlan":
        kernels = tuple(KernelPlan.from_json(k) for k in data["kernels"])
        return cls(kernels, data["descriptors"], data["workspace_slices"],
                   tuple(data["tile"]), data["split_k"], data.get("counters", False))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def uses_tma(program: Program) -> bool:
    """epilogue=tma switches the whole kernel to TMA tensor descriptors (sm_90a only)."""
    return program.epilogue == Epilogue.TMA


def _descriptors(program: Program, layout: Layout) -> dict[str, dict]:
    t = program.tile
    descs = {"a_desc": {"dims": ["M", "K"], "block": [t.bm, t.bk]}}
    if layout == Layout.NN:
        descs["b_desc"] = {"dims": ["K", "N"], "block": [t.bk, t.bn]}
    else:
        descs["b_desc"] = {"dims": ["N", "K"], "block": [t.bn, t.bk]}
    if program.split_k.slices == 1:  # split-K writes C from the reduce kernel instead
        descs["c_desc"] = {"dims": ["M", "N"], "block": [t.bm, t.bn]}
    return descs


def _operand_types(program: Program, layout: Layout, el: Element) -> dict[str, str]:
    ptr = el.triton_ptr
    if not uses_tma(program):
        return {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr}
    types = {name: "tensordesc<{}[{}, {}]>".format(ptr[1:], *d["block"])
             for name, d in _descriptors(program, layout).items()}
    if "c_desc" not in types:  # split-K: the reduce kernel writes C through a pointer
        types["c_ptr"] = ptr
    return types


def in_kernel(program: Program) -> bool:
    """Split-K reduced inside the GEMM kernel (turn-taking through per-tile counters)."""
    return program.split_k.slices > 1 and program.split_k.reduction == Reduction.INKERNEL


def _gemm_kernel(program: Program, problem: Problem) -> KernelPlan:
    t = program.tile
    counters = {"cnt_ptr": "*i32"} if in_kernel(program) else {}
    ptr = element(problem.dtype).triton_ptr
    bias = {"bias_ptr": ptr} if program.bias else {}
    signature = {**_operand_types(program, problem.layout, element(problem.dtype)),
                 "ws_ptr": "*fp32", **bias, **counters,
                 "M": "i32", "N": "i32", "K": "i32", "NUM_PROGRAMS": "i32"}
    constexprs = {"BLOCK_M": t.bm, "BLOCK_N": t.bn, "BLOCK_K": t.bk,
                  "GROUP": program.raster.group, "SPLIT_K": program.split_k.slices}
    signature.update({name: "constexpr" for name in constexprs})
    grid = "persistent" if program.schedule == Schedule.PERSISTENT else "tiles"
    return KernelPlan("gemm", lowered_name(program, problem), signature, constexprs,
                      program.warps.count, program.stages, grid, program.pdl)


def _elementwise_kernel(program: Program, problem: Problem, role: str,
                        slices: int) -> KernelPlan:
    signature = {"ws_ptr": "*fp32"}
    constexprs = {"BLOCK": ELEMENTWISE_BLOCK}
    if role == "reduce":
        ptr = element(problem.dtype).triton_ptr
        signature["c_ptr"] = ptr
        if program.bias:  # the fused bias goes in with the sum; N finds each one's column
            signature.update({"bias_ptr": ptr, "N": "i32"})
        constexprs = {"SLICES": slices, **constexprs}
    signature["NUMEL"] = "i64"
    signature.update({name: "constexpr" for name in constexprs})
    return KernelPlan(role, f"{lowered_name(program, problem)}_{role}", signature, constexprs,
                      ELEMENTWISE_WARPS, 1, "elements", program.pdl)


def make_plan(program: Program, problem: Problem) -> LaunchPlan:
    """The launch plan of `program` for `problem`'s layout (assumes verify passed)."""
    split = program.split_k
    gemm = _gemm_kernel(program, problem)
    if split.slices == 1:
        kernels, slices = (gemm,), 0
    elif in_kernel(program):
        kernels, slices = (gemm,), split.slices
    elif split.reduction == Reduction.ATOMIC:
        kernels = (_elementwise_kernel(program, problem, "zero", 1), gemm,
                   _elementwise_kernel(program, problem, "reduce", 1))
        slices = 1
    else:
        kernels = (gemm, _elementwise_kernel(program, problem, "reduce", split.slices))
        slices = split.slices
    descs = _descriptors(program, problem.layout) if uses_tma(program) else {}
    t = program.tile
    return LaunchPlan(kernels, descs, slices, (t.bm, t.bn, t.bk), split.slices,
                      in_kernel(program))


def aligned_params(m: int, n: int, k: int) -> tuple[str, ...]:
    """The ALIGNABLE integer arguments that are multiples of ALIGN_HINT at (m, n, k)."""
    values = {"N": n, "K": k, "NUMEL": m * n}
    return tuple(name for name in ALIGNABLE if values[name] % ALIGN_HINT == 0)


def _operand_roles(program: Program, nt: bool) -> dict:
    """How the mainloop feeds tl.dot: A (BLOCK_M x BLOCK_K) times B as BLOCK_K x BLOCK_N
    (`b` is loaded K x N for nn, N x K for nt), or with swap_ab the transposed product
    B^T A^T, whose accumulator is BLOCK_N x BLOCK_M (the tile of C^T)."""
    b_kn, b_nk = ("tl.trans(b)", "b") if nt else ("b", "tl.trans(b)")
    if program.swap_ab:
        return {"dot_lhs": b_nk, "dot_rhs": "tl.trans(a)", "acc_rows": "BLOCK_N",
                "acc_cols": "BLOCK_M", "c_tile": "tl.trans(acc)",
                "acc_doc": "transposed (swap_ab): BLOCK_N x BLOCK_M, the tile of C^T"}
    return {"dot_lhs": "a", "dot_rhs": b_kn, "acc_rows": "BLOCK_M", "acc_cols": "BLOCK_N",
            "c_tile": "acc", "acc_doc": "BLOCK_M x BLOCK_N"}


def template_context(program: Program, problem: Problem) -> dict:
    """Everything gemm.py.jinja reads; the template does no arithmetic. The alignment
    variant is named in the file so that it is part of the artifact's cache key."""
    aligned = aligned_params(problem.m, problem.n, problem.k)
    tma, nt = uses_tma(program), problem.layout == Layout.NT
    split = program.split_k.slices > 1
    persistent = program.schedule == Schedule.PERSISTENT
    order = "columns" if program.raster.order == RasterOrder.COL else "rows"
    return {
        "kernel_name": lowered_name(program, problem),
        "program_text": str(program),
        "layout": problem.layout.value,
        "acc": problem.acc.value,
        "b_shape": "N x K" if nt else "K x N",
        "acc_dtype": "tl.float32" if problem.acc == Accum.F32 else "tl.float16",
        "el": element(problem.dtype).as_dict(),
        "tma": tma,
        "layout_nt": nt,
        "split": split,
        "atomic": split and program.split_k.reduction == Reduction.ATOMIC,
        "in_kernel": in_kernel(program),
        "swap": program.swap_ab,
        **_operand_roles(program, nt),
        "cnt_arg": " cnt_ptr," if in_kernel(program) else "",
        "bias": program.bias,
        "bias_arg": " bias_ptr," if program.bias else "",
        "persistent": persistent,
        "pdl": program.pdl,
        "raster_col": program.raster.order == RasterOrder.COL,
        "raster_doc": f"tiles of C along {order}, in groups of GROUP",
        "schedule_doc": ("a persistent grid of one program per SM loops over the units."
                         if persistent else "one program per work unit."),
        "aligned_doc": (f"{', '.join(aligned)} multiples of {ALIGN_HINT}" if aligned
                        else f"no size a multiple of {ALIGN_HINT}"),
        "a_arg": "a_desc" if tma else "a_ptr",
        "b_arg": "b_desc" if tma else "b_ptr",
        "c_arg": "c_desc" if tma and not split else "c_ptr",
    }
