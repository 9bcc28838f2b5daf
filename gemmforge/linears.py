"""`linear(x, weight, bias)`: F.linear through gemmforge, for the layers `patch` routes.

    y = gemmforge.linears.linear(x, weight, bias)   # x (..., k), weight (n, k), bias (n,) or None

The call goes to the C++ op `torch.ops.gemmforge.linear` (gemmforge.torch_op), which looks up
(token bucket of m = x.numel() / k, n, k, layout nt, operand dtype, device) in its table and
launches the program registered there, or calls at::linear (cuBLASLt, bias fused) where the
table says cuBLAS or holds nothing. The first call of a bucket fills the table (`prepare`): the program
resolved at the bucket's top m, only where it was measured at that very shape and read
faster than cuBLAS there (dispatch.choice, cublas="unmeasured"); anything else is cuBLAS's.
So a bucket never runs a program slower than cuBLAS by its own record, and a new m inside a
prepared bucket costs no build. Under torch.compile the op is traced as is: prepare the
buckets first (`prepare_buckets`, or `patch(model, tokens=...)`); a bucket not prepared runs
at::linear, correctly.
"""
from __future__ import annotations

import os
import threading

from .torch_op import bucket

_prepared: dict[tuple, bool] = {}  # (bucket, n, k, device, dtype) whose table entry is
                                  # filled -> whether it was prepared for a layer with a bias
_lock = threading.Lock()
CUBLAS_RULE = "unmeasured"
"""dispatch.choice's cuBLAS rule for linear layers: a program of ours serves a bucket only where
a record measured it at that shape and it read faster than cuBLAS there. Off the measured
shapes, a neighbour's program read 0.94x cuBLAS over 30 model layer shapes (after another
kernel, on an H200: docs/model_path.md), so the rule gives those to cuBLAS until `gemmforge
tune --model` measures them."""


def linear(x, weight, bias=None):
    """F.linear(x, weight, bias) with gemmforge's kernel for the bucket where one wins; F.linear
    itself where autograd records (the op has no backward: patch serves inference)."""
    import torch
    if torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad):
        return torch.nn.functional.linear(x, weight, bias)
    dtype = _dtype_text(weight)
    if not torch.compiler.is_compiling() and x.is_cuda and dtype is not None:
        k = weight.shape[-1]
        key = (bucket(x.numel() // k) if k else 0, weight.shape[0], k, x.device.index or 0,
               dtype)
        if _prepared.get(key) is None or (bias is not None and not _prepared[key]):
            prepare_key(key, bias is not None)
    return torch.ops.gemmforge.linear(x, weight, bias)


def _dtype_text(t) -> str | None:
    """"f16" or "bf16" for a float16 or bfloat16 tensor, else None (the op's fallback serves)."""
    from .ops import _dtype
    dtype = _dtype(t)
    return None if dtype is None else str(dtype)


def prepare_key(key: tuple, bias: bool = False) -> None:
    """Fill the op's table for `key` = (bucket, n, k, device, dtype: "f16" or "bf16"), once,
    for layers with a bias too where `bias` (the program's bias twin: gemmforge.ops.prepare)."""
    from .ops import prepare
    with _lock:
        done = _prepared.get(key)
        if done is not None and (done or not bias):
            return
        m, n, k, device, dtype = key
        if m and n and k:
            prepare((m, n, k, "nt", device, dtype), CUBLAS_RULE, caller="gemmforge.linear",
                    bias=bias)
        _prepared[key] = bias


def prepare_buckets(n: int, k: int, tokens, device: int = 0, bias: bool = False,
                    dtype: str = "f16") -> None:
    """Fill the table for the buckets of every token count in `tokens` at layer (n, k) of
    `dtype` weights ("f16" or "bf16")."""
    for t in tokens:
        prepare_key((bucket(int(t)), n, k, device, str(dtype)), bias)


def build_ahead(layers, tokens, device: int = 0) -> int:
    """Build, in parallel, the programs that preparing `layers` ((n, k, bias, dtype), dtype
    "f16" or "bf16") at the buckets of `tokens` will load, so that preparing them finds each in the artifact cache
    (a fresh machine builds a model's kernels in the time of its slowest build, not their
    sum). Returns how many were built or found; a build that fails is left for `prepare`
    to report."""
    from concurrent.futures import ThreadPoolExecutor
    from .backends.pipeline import compile
    from .compiler.values import Target
    from .ir.program import Accum, Problem
    from .ops import _arch_of, choice_for, device_class_of, device_sm, with_bias
    sm = device_sm(device)
    jobs = {}
    for n, k, bias, dtype in layers:
        for m in sorted({bucket(int(t)) for t in tokens}):
            problem = Problem(m, n, k, "nt", Accum.F32, dtype)
            choice = choice_for(problem, _arch_of(sm), device_class_of(device), CUBLAS_RULE)
            if not choice.cublas:
                program = with_bias(choice.program, problem) if bias else choice.program
                jobs.setdefault(str(program), (program, problem))
    if not jobs:
        return 0

    def build(job) -> bool:
        try:
            compile(*job, Target(device_sm=sm))
            return True
        except Exception:  # reported by prepare, which builds it again
            return False
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
        return sum(pool.map(build, jobs.values()))


def forget() -> None:
    """Forget what was prepared (the op's table too): the next call of each bucket resolves
    again (after a tune, say)."""
    import torch
    from . import ops
    with _lock:
        _prepared.clear()
        ops._routes.clear()
        torch.ops.gemmforge._forget_all()
