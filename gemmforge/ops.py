"""`matmul(a, b)`: a drop-in fp16 or bf16 GEMM that runs the best known gemmforge kernel.

Programs are chosen per token bucket: for (bucket of m, n, k, layout, device), the bucket
being the power of two at or above m (torch_op.bucket), dispatch.choice resolves the program
at the bucket's top m (the user's tuned database, then the shipped file, by device class and
nearest legal shape within a distance limit, else the heuristic's), builds it once
(artifact cache) and keeps the loaded kernel; every m of the bucket runs it (the kernels
take m at run time), so a new m costs no build. Where a record says cuBLAS won the shape, or
the chosen program's own record reads slower than cuBLAS, cuBLAS serves (dispatch.choice,
cublas="slower"). With fp16 or bf16 operands, an fp32 accumulator and no `out`, the call
goes through the C++ operator `torch.ops.gemmforge.mm` (gemmforge.torch_op): the bucket's
launch entry (or its cuBLAS mark) is registered there, under the operands' dtype, on the
bucket's first call, and later calls cost a dictionary lookup and the op. A kernel without
a C launch entry (Triton) is swapped, below OP_HOST_BOUND_FLOPS, for the best program of
another backend (dispatch.choice.resolve with that backend excluded) that has one; above it,
and for `acc="f16"`, `out=` and machines where the op can't be built (warned once;
GEMMFORGE_TORCH_OP=0 never tries), the Python Kernel runs. The operands' dtype
(torch.float16 or torch.bfloat16) is the problem's (ir Problem.dtype), and C comes back in it.

    from gemmforge.ops import matmul
    c = matmul(a, b)                  # a: (m, k), b: (k, n), fp16 (or bf16) CUDA tensors
    c = matmul(a, b_nk, layout="nt")  # b given as (n, k)
"""
from __future__ import annotations

import threading
import warnings

from .compiler.runtime import Kernel
from .ir.program import Accum, Arch, DType, Layout, Problem, Program
from .operands import check_matmul_operands

OP_HOST_BOUND_FLOPS = 1e9
"""Below this (2mnk), a call is mostly host time: the Python path of a kernel without a C
launch entry costs ~20 us more than the op's (benchmarks/NOTES.md, Host path), more
than the ~5 % a Triton winner's kernel gains there, so the op runs the best program that
has one instead."""
_kernels: dict[tuple, Kernel] = {}
_routes: dict[tuple, object] = {}  # (bucket, n, k, layout, device, dtype) -> None (the op
                                   # serves it: our kernel or cuBLAS) or a Python Kernel
                                   # (no C entry)
_classes: dict[int, str | None] = {}
_op_state: dict[str, bool] = {}  # "ready": whether torch.ops.gemmforge.mm is loaded
_lock = threading.Lock()


def _arch_of(device_sm: int) -> Arch:
    return Arch.SM90A if device_sm >= 90 else Arch.SM80


def device_class_of(device_index: int) -> str | None:
    """The device class (dispatch.devices) of CUDA device `device_index`."""
    cls = _classes.get(device_index, "")
    if cls == "":
        import torch
        from .dispatch.devices import device_class
        cls = _classes[device_index] = device_class(torch.cuda.get_device_name(device_index))
    return cls


def choice_for(problem: Problem, arch: Arch, device_class: str | None, cublas: str = "never",
               exclude: frozenset = frozenset()):
    """dispatch.choice.resolve: the program for `problem` (or cuBLAS, as `cublas` says) and
    where it came from."""
    from .dispatch.choice import resolve
    return resolve(problem, arch, device_class, cublas=cublas, exclude=exclude)


def program_for(problem: Problem, arch: Arch, device_class: str | None = None) -> Program:
    """The resolved program for `problem` on `arch` programs (see choice_for)."""
    return choice_for(problem, arch, device_class).program


def kernel_for(problem: Problem, device_index: int) -> Kernel:
    """The loaded kernel for `problem` on CUDA device `device_index` (built on first use)."""
    import torch
    major, minor = torch.cuda.get_device_capability(device_index)
    key = (problem, device_index)
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            sm = major * 10 + minor
            program = program_for(problem, _arch_of(sm), device_class_of(device_index))
            kernel = _kernels[key] = _build(program, problem, sm)
    return kernel


def _build(program: Program, problem: Problem, sm: int) -> Kernel:
    """`program` compiled for a device of compute capability `sm` (artifact cache) and loaded."""
    from .backends.pipeline import compile, load
    from .compiler.values import Target
    return load(compile(program, problem, Target(device_sm=sm)))


def matmul(a, b, layout: str = "nn", acc: str = "f32", out=None):
    """C = A @ B (layout nn: b is (k, n); nt: b is (n, k)) with gemmforge's best kernel, in
    the operands' dtype (float16 or bfloat16; bf16 accumulates in f32 only)."""
    check_matmul_operands(a, b, layout, acc, out)
    lay = Layout.parse(layout, "layout")
    acc_ = Accum.parse(acc, "acc")
    dtype = _dtype(a)
    # the op serves fp16 and bf16, each dtype's kernels apart (and hands anything it can't
    # serve to torch.matmul, saying why)
    if out is None and acc_ == Accum.F32 and _op_ready():
        return _through_op(a, b if lay == Layout.NN else b.transpose(-2, -1))
    if dtype is None:
        raise ValueError(f"a must be a float16 or bfloat16 tensor, got "
                         f"{getattr(a, 'dtype', type(a).__name__)}")
    m, k = a.shape
    n = b.shape[1] if lay == Layout.NN else b.shape[0]
    problem = Problem(m, n, k, lay, acc_, dtype)
    return kernel_for(problem, a.device.index or 0)(a, b, out=out)


_DTYPES: dict = {}  # torch dtype -> ir DType, filled on the first call (torch loaded by then)


def _dtype(a) -> DType | None:
    """The ir DType of tensor `a`, None where it is neither float16 nor bfloat16."""
    if not _DTYPES:
        import torch
        from .compiler.runtime import TORCH_DTYPES
        _DTYPES.update({getattr(torch, name): d for d, name in TORCH_DTYPES.items()})
    return _DTYPES.get(getattr(a, "dtype", None))


def _op_ready() -> bool:
    ready = _op_state.get("ready")
    if ready is None:
        from .compiler.knobs import knobs
        from .torch_op import op_available
        ready = _op_state["ready"] = knobs().torch_op and op_available()
    return ready


def _through_op(a, b_kn):
    """a @ b_kn (b_kn: k x n, row-major or a transposed row-major view) via the op, after
    registering the shape's kernel on its first call (a Python Kernel runs it instead
    where it has no C launch entry)."""
    import torch
    if torch.compiler.is_compiling():  # traced: the op alone (fake tensors have no data)
        return torch.ops.gemmforge.mm(a, b_kn)
    key = _key(a, b_kn)
    if key is not None:
        route = _routes.get(key, False)
        if route is False:
            route = _register(key)
        if route is not None:  # a Python Kernel: b in its own layout
            return route(a, b_kn if key[3] == "nn" else b_kn.t())
    return torch.ops.gemmforge.mm(a, b_kn)


def _key(a, b_kn) -> tuple | None:
    """(bucket of m, n, k, layout, device index, dtype) when the op can serve the operands,
    else None (the op then falls back to torch.matmul and says why). dtype: "f16" or "bf16"
    (ir DType's text), both operands'."""
    from .torch_op import layout_of
    dtype = _dtype(a)
    if (dtype is None or b_kn.dtype is not a.dtype or not a.is_cuda
            or a.dim() != 2 or b_kn.dim() != 2 or a.device != b_kn.device
            or not a.is_contiguous() or a.shape[1] != b_kn.shape[0] or 0 in a.shape
            or b_kn.shape[1] == 0):
        return None
    layout = layout_of(b_kn)
    if layout is None:
        return None
    from .torch_op import bucket
    return (bucket(a.shape[0]), b_kn.shape[1], a.shape[1], layout, a.device.index or 0,
            str(dtype))


def _register(key: tuple):
    """Resolve and build the program of `key` (bucket, n, k, layout, device, dtype) and
    register it with the op (None), or mark the bucket as cuBLAS's (None: the op calls torch.matmul
    there), or keep a Python Kernel when it has no C launch entry (the Kernel)."""
    route = _routes[key] = prepare(key, "slower", host_bound_flops=OP_HOST_BOUND_FLOPS)
    return route


def with_bias(program: Program, problem: Problem) -> Program:
    """`program` with the bias epilogue where that is legal at `problem`, else `program`."""
    from dataclasses import replace
    from .ir.verify import check
    twin = replace(program, bias=True)
    return twin if check(twin, problem) is None else program


def device_sm(device_index: int) -> int:
    """The compute capability of CUDA device `device_index`, as 90 for 9.0."""
    import torch
    major, minor = torch.cuda.get_device_capability(device_index)
    return major * 10 + minor


def prepare(key: tuple, cublas: str, host_bound_flops: float = float("inf"),
            caller: str = "gemmforge.matmul", bias: bool = False):
    """Fill the op's table for `key` = (bucket, n, k, layout, device, dtype; dtype "f16" or
    "bf16", the operands'): the program resolved for that dtype at the bucket's top m
    (dispatch.choice, `cublas` its cuBLAS rule), built for it and registered; or a
    cuBLAS mark where cuBLAS serves, the program has no C launch entry and no launchable
    alternative exists, or its build fails (one warning naming the shape). Returns None (the
    op serves every call of the bucket) or a Python Kernel (no C launch entry, and the
    problem at or above `host_bound_flops`: the caller runs it itself). With `bias`, the
    program's bias twin is built where its backend fuses a bias (with_bias): its artifact
    has both the plain launch entry and the bias one."""
    from .compiler.values import BuildError
    from .torch_op import register, register_cublas
    m, n, k, layout, device, dtype = key
    problem = Problem(m, n, k, layout, Accum.F32, dtype)
    sm = device_sm(device)
    exclude: frozenset = frozenset()
    try:
        for _ in range(2):  # the resolved program, then one of a backend with a C entry
            choice = choice_for(problem, _arch_of(sm), device_class_of(device), cublas, exclude)
            if choice.cublas:
                break
            program = with_bias(choice.program, problem) if bias else choice.program
            kernel = _build(program, problem, sm)
            if register(m, n, k, layout, device, kernel):
                return None
            if problem.flops >= host_bound_flops:
                return kernel
            exclude = frozenset({choice.program.backend})
    except (BuildError, ValueError, OSError) as e:  # no legal program, or its build failed
        warnings.warn(f"{caller}: no kernel for {problem}: {e}; cuBLAS serves this shape",
                      stacklevel=4)
    register_cublas(m, n, k, layout, device, dtype)
    return None
