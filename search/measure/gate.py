"""The correctness gate: no time counts until the kernel's output matches an fp32 reference.

Two checks, each into an output filled with NaN first (so an element the kernel never
writes fails):
1. random normal inputs, every element compared with (a.float() @ b.float()): the relative
   Frobenius error ||C - R||_F / ||R||_F must stay under `tolerance(problem)`;
2. (when k <= EXACT_K_LIMIT) inputs drawn from {0, 1}: every partial sum is an integer no
   larger than k <= 2048, which fp16 and fp32 both hold exactly, so with either
   accumulator, any summation order and any split-K reduction the output must equal the
   reference bit for bit. This catches a dropped or doubled K step or tile edge that the
   statistical check could blur.
Ragged shapes are the caller's to choose (search.measure.env and the tests measure them).

The gate works on any torch device: the GPU worker runs it on CUDA with the real kernel,
and the CPU tests run the same code on CPU with a fake kernel.
"""
from __future__ import annotations

import math
from typing import Callable

from ...compiler.runtime import TORCH_DTYPES

F32_TOLERANCE = 5e-3
"""Relative Frobenius error allowed with an fp32 accumulator. Rounding the fp32 result to
the fp16 output alone costs about 2**-11 / sqrt(3) ~ 3e-4 relative (uniform rounding error
within half an ulp), so 5e-3 leaves room for any fp32 summation order and no more."""

FP16_UNIT_ROUNDOFF = 2.0 ** -11
"""Unit roundoff of fp16 (10 stored mantissa bits, round to nearest)."""

BF16_UNIT_ROUNDOFF = 2.0 ** -8
"""Unit roundoff of bf16 (7 stored mantissa bits, 8 of precision, round to nearest)."""

BF16_TOLERANCE = 5 * BF16_UNIT_ROUNDOFF
"""Relative Frobenius error allowed for bf16 operands and output (fp32 accumulator), about
2e-2. Rounding the fp32 result to the bf16 output alone costs about u / sqrt(3) ~ 2.3e-3
relative (u = 2**-8, as for fp16 above), some 4e-3 at most. The inputs are bf16 exactly and
the reference multiplies the same values in fp32, so nothing else but fp32 summation order
adds to it: 5u leaves room for that and no more (a dropped K step or a wrong tile edge
costs far more than 2e-2)."""

EXACT_K_LIMIT = 2048
"""fp16 represents every integer in [0, 2048] exactly (2049 is the first it can't)."""


class GateFailure(Exception):
    """The kernel's output is wrong; the message says how (error, tolerance, first mismatch)."""


def tolerance(problem) -> float:
    """Largest relative Frobenius error the gate accepts for `problem` (an ir Problem).

    f32 accumulate: F32_TOLERANCE (BF16_TOLERANCE for bf16 operands). f16 accumulate: max(F32_TOLERANCE, 2 * u * sqrt(k)) with
    u = 2**-11. Why: an fp16 accumulator rounds the running sum after each of the k
    multiply-adds, each rounding a relative error of at most u; with random normal inputs
    those errors have random signs and add up like a random walk, so the relative error of
    the final sum grows like u * sqrt(k) (not u * k, the worst case). The factor 2 is the
    margin for the walk's spread; at k = 4096 the bound is 0.0625."""
    if str(problem.acc) == "f32":
        bf16 = str(getattr(problem, "dtype", "f16")) == "bf16"
        return BF16_TOLERANCE if bf16 else F32_TOLERANCE
    return max(F32_TOLERANCE, 2.0 * FP16_UNIT_ROUNDOFF * math.sqrt(problem.k))


def operand_shapes(problem) -> tuple[tuple[int, int], tuple[int, int]]:
    """Shapes of A and of B as the kernel takes them: B is (k, n) for nn, (n, k) for nt."""
    b = (problem.k, problem.n) if str(problem.layout) == "nn" else (problem.n, problem.k)
    return (problem.m, problem.k), b


def element_dtype(problem):
    """torch's dtype of `problem`'s operands and output (float16 or bfloat16)."""
    import torch
    return getattr(torch, TORCH_DTYPES[getattr(problem, "dtype", "f16")])


def random_inputs(problem, *, device, seed: int, binary: bool = False):
    """Fresh (a, b) of the problem's dtype on `device`: standard normal, or uniform on {0, 1}."""
    import torch
    gen = torch.Generator(device=device).manual_seed(seed)
    shapes, dtype = operand_shapes(problem), element_dtype(problem)
    if binary:
        return tuple(torch.randint(0, 2, s, generator=gen, device=device).to(dtype)
                     for s in shapes)
    return tuple(torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes)


def reference(a, b, layout) -> "object":
    """fp32 reference of C = A @ B (B given as the layout stores it), computed in fp32."""
    bf = b.float() if str(layout) == "nn" else b.float().t()
    return a.float() @ bf


def check(out, ref, tol: float, *, exact: bool = False) -> float:
    """Compare the output (fp16 or bf16) with the fp32 reference; return the relative
    Frobenius error. Raise GateFailure when an element is not finite, when `exact` and any
    element differs from ref rounded to the output's dtype (the fp32 sums of {0,1} inputs
    are exact integers, so rounding them is too), or when the error exceeds `tol`."""
    import torch
    got = out.float()
    bad = (~torch.isfinite(got)).sum().item()
    if bad:
        raise GateFailure(f"{bad} of {got.numel()} outputs are NaN or infinite "
                          "(never written, or overflowed)")
    if exact:
        want = ref.to(out.dtype).float()
        wrong = (got != want).nonzero()
        if len(wrong):
            r, c = wrong[0].tolist()
            raise GateFailure(f"exact {{0,1}} check: {len(wrong)} of {got.numel()} outputs "
                              f"differ; first at ({r}, {c}): {got[r, c].item():g}, "
                              f"expected {want[r, c].item():g}")
    diff = got - ref
    den = torch.linalg.vector_norm(ref).item()
    err = torch.linalg.vector_norm(diff).item() / den if den > 0 else \
        torch.linalg.vector_norm(diff).item()
    if not err <= tol:
        worst = int(diff.abs().argmax().item())
        r, c = divmod(worst, got.shape[1])
        raise GateFailure(f"relative Frobenius error {err:.3g} exceeds {tol:.3g}; worst "
                          f"element ({r}, {c}): {got[r, c].item():g}, expected "
                          f"{ref[r, c].item():g}")
    return err


def run_once(launch: Callable, problem, *, device, seed: int, binary: bool = False,
             sync: Callable[[], None] = lambda: None) -> float:
    """Launch once on fresh inputs into a NaN-filled output, synchronize, check; return the
    relative error or raise GateFailure. `launch(a, b, out)` computes out = a @ b."""
    import torch
    a, b = random_inputs(problem, device=device, seed=seed, binary=binary)
    out = torch.full((problem.m, problem.n), float("nan"), dtype=element_dtype(problem),
                     device=device)
    launch(a, b, out)
    sync()
    ref = reference(a, b, problem.layout)
    kind = "{0,1}" if binary else "normal"
    try:
        return check(out, ref, tolerance(problem), exact=binary)
    except GateFailure as e:
        raise GateFailure(f"{problem} ({kind} inputs, seed {seed}): {e}") from None


def gate(launch: Callable, problem, *, device, seed: int, exact_check: bool = True,
         sync: Callable[[], None] = lambda: None) -> float:
    """The full gate: normal inputs, then (k <= EXACT_K_LIMIT and exact_check) {0,1} inputs.
    Returns the relative error of the normal check; raises GateFailure."""
    err = run_once(launch, problem, device=device, seed=seed, sync=sync)
    if exact_check and problem.k <= EXACT_K_LIMIT:
        run_once(launch, problem, device=device, seed=seed + 1, binary=True, sync=sync)
    return err
