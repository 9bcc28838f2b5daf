"""What `gemmforge.matmul` accepts, checked before any program is resolved or built.

    check_matmul_operands(a, b, "nn", "f32", None)   # (Layout.NN, Accum.F32), or raises

`a` is an (m, k) tensor; `b` is (k, n) for layout "nn" or (n, k) for "nt"; both float16 or
both bfloat16 (bfloat16 accumulates in f32 only), on one CUDA device, 2-D with every
dimension >= 1; `out`, where given, a contiguous (m, n) tensor of their dtype on that device. Each refusal is one line that names the argument and what is
expected: TypeError for a value that is not a tensor (or a string where one is expected),
OperandError (a ValueError) for a tensor of the wrong kind, ModuleNotFoundError naming the
extra to install where PyTorch is missing. While torch.compile traces (fake tensors) the
device is not checked: the traced graph holds torch.ops.gemmforge.mm, which serves or
hands on to torch.matmul whatever it is given at run time.
"""
from __future__ import annotations

from .ir.program import Accum, IRError, Layout


class OperandError(ValueError):
    """An operand of gemmforge.matmul is not what it takes; the message names it."""


def check_matmul_operands(a, b, layout="nn", acc="f32", out=None) -> tuple[Layout, Accum]:
    """(layout, accumulator) of a matmul call whose operands are all usable (module doc);
    raises naming the first argument that is not."""
    try:
        import torch  # a plain import: torch.compile traces through it (not importlib)
    except ModuleNotFoundError as e:
        from .compiler.extras import install_hint
        raise ModuleNotFoundError(f"matmul: {install_hint(e) or e}", name=e.name) from None
    lay, accum = _kind("layout", layout, Layout), _kind("acc", acc, Accum)
    for name, t in (("a", a), ("b", b)):
        _tensor(torch, name, t)
    if b.dtype != a.dtype:
        raise OperandError(f"matmul: b: expected a's dtype {a.dtype}, got {b.dtype}")
    if a.dtype == torch.bfloat16 and accum != Accum.F32:
        raise OperandError(f"matmul: acc: bfloat16 operands accumulate in f32 only, not "
                           f"{accum.value}")
    m, k = a.shape
    n, kb = (b.shape[1], b.shape[0]) if lay == Layout.NN else b.shape
    if kb != k:
        want = "(k, n)" if lay == Layout.NN else "(n, k)"
        raise OperandError(f"matmul: b: expected {want} with k = {k} (a is {tuple(a.shape)}, "
                           f"layout {lay.value}), got shape {tuple(b.shape)}")
    if out is not None:
        _out(torch, out, (m, n), a.dtype)
    _devices(a, b, out, traced=torch.compiler.is_compiling())
    return lay, accum


def _kind(name: str, value, kind):
    if not isinstance(value, str):
        raise TypeError(f"matmul: {name}: expected a string "
                        f"({' or '.join(repr(x.value) for x in kind)}), got "
                        f"{type(value).__name__}")
    try:
        return kind.parse(value, name)
    except IRError as e:
        raise OperandError(f"matmul: {e}") from None


def _tensor(torch, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"matmul: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise OperandError(f"matmul: {name}: expected a 2-D tensor, got {t.dim()}-D shape "
                           f"{tuple(t.shape)} (batched inputs: call it per matrix, or "
                           "reshape to 2-D)")
    if t.dtype not in (torch.float16, torch.bfloat16):
        raise OperandError(f"matmul: {name}: expected dtype torch.float16 or torch.bfloat16, "
                           f"got {t.dtype} (convert with .half(), or call torch.matmul)")
    if 0 in t.shape:
        raise OperandError(f"matmul: {name}: expected every dimension >= 1, got shape "
                           f"{tuple(t.shape)}")


def _devices(a, b, out, traced: bool) -> None:
    """One CUDA device for a, b and out (not checked while tracing: module doc)."""
    if not traced and not a.is_cuda:
        raise OperandError(f"matmul: a: expected a CUDA tensor, got one on {a.device} "
                           "(move it with .cuda(), or call torch.matmul)")
    for name, t in (("b", b), ("out", out)):
        if t is not None and t.device != a.device:
            raise OperandError(f"matmul: {name}: expected a tensor on a's device {a.device}, "
                               f"got {t.device}")


def _out(torch, out, shape: tuple[int, int], dtype) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"matmul: out: expected a torch.Tensor or None, got "
                        f"{type(out).__name__}")
    if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
        raise OperandError(f"matmul: out: expected a contiguous {dtype} tensor of shape "
                           f"{shape}, got {'' if out.is_contiguous() else 'a strided '}"
                           f"{out.dtype} of shape {tuple(out.shape)}")
