"""`matmul(a, b)`: a drop-in fp16 GEMM that runs the best known gemmforge kernel.

For each (m, n, k, layout, accumulator, device) it asks the tuned database for the best
program (or the nearest tuned shape's program, if it is legal here), falls back to the
heuristic policy, builds it once (artifact cache) and keeps the loaded kernel, so later
calls cost one dictionary lookup plus the launch.

    from gemmforge.ops import matmul
    c = matmul(a, b)                  # a: (m, k), b: (k, n), fp16 CUDA tensors
    c = matmul(a, b_nk, layout="nt")  # b given as (n, k)
"""
from __future__ import annotations

import threading

from gemmforge.compiler.runtime import Kernel
from gemmforge.ir.program import Accum, Arch, Layout, Problem, Program

_kernels: dict[tuple, Kernel] = {}
_lock = threading.Lock()


def _arch_of(device_sm: int) -> Arch:
    return Arch.SM90A if device_sm >= 90 else Arch.SM80


def program_for(problem: Problem, arch: Arch) -> Program:
    """The tuned database's program for `problem` (exact, or the nearest tuned shape's when
    it is legal here) if it has one, else the heuristic's."""
    try:
        from gemmforge.search.database import lookup
        tuned = lookup(problem, arch)
    except ImportError:  # the database needs the [search] extra (SQLAlchemy)
        tuned = None
    if tuned is not None:
        return tuned
    from gemmforge.policy.heuristic import default_program
    return default_program(problem, arch)


def kernel_for(problem: Problem, device_index: int) -> Kernel:
    """The loaded kernel for `problem` on CUDA device `device_index` (built on first use)."""
    import torch
    major, minor = torch.cuda.get_device_capability(device_index)
    key = (problem, device_index)
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            from gemmforge.compiler.values import Target
            from gemmforge.backends.pipeline import compile, load
            sm = major * 10 + minor
            program = program_for(problem, _arch_of(sm))
            kernel = load(compile(program, problem, Target(device_sm=sm)))
            _kernels[key] = kernel
    return kernel


def matmul(a, b, layout: str = "nn", acc: str = "f32", out=None):
    """C = A @ B (layout nn: b is (k, n); nt: b is (n, k)) with gemmforge's best kernel."""
    lay = Layout.parse(layout, "layout")
    m, k = a.shape
    n = b.shape[1] if lay == Layout.NN else b.shape[0]
    problem = Problem(m, n, k, lay, Accum.parse(acc, "acc"))
    return kernel_for(problem, a.device.index or 0)(a, b, out=out)
