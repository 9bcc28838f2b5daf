"""`patch(model)`: route a torch module's eligible `nn.Linear` layers through gemmforge.

    import gemmforge
    report = gemmforge.patch(model)               # every eligible nn.Linear, in place
    print(report)                                 # what it routed, and each layer it kept, once
    y = model(x)                                  # eager, CUDA-graph captured or torch.compile'd
    gemmforge.unpatch(model)                      # the stock forward back

A patched layer's forward is `torch.ops.gemmforge.linear(x, self.weight, self.bias)`, nothing
more, so its host cost is nn.Linear's: the C++ op launches the program registered for the
call's token bucket, or calls cuBLAS (at::linear) where no program of ours measured faster at
that shape, or for a bucket not prepared. `patch` prepares the buckets of `tokens` (default:
every power of two up to MAX_TOKENS) for each routed (n, k) before it returns: it resolves
each bucket's program, builds it (artifact cache: once per machine) and registers it. Nothing else changes: the parameters, the
state dict, hooks and the module tree stay as they were (the forward is set on the instance
and removed again by `unpatch`). Eligible: a CUDA fp16 or bf16 weight of shape (n, k),
contiguous and 16-byte aligned, with k and n multiples of 8 (TMA rows) and a bias of the
weight's dtype or none. Every other layer (an fp32 weight, say) stays on F.linear, listed
once in the report, never warned per call. fp16 and bf16 layers of one (n, k) are prepared
apart: each dtype resolves, builds and registers its own kernels (the op's table is keyed by
dtype). Where autograd
records (training), the op is at::linear itself.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field

from .linears import build_ahead, prepare_buckets

ALIGN = 8  # elements: TMA wants 16-byte rows, 8 fp16 or bf16 values
MAX_TOKENS = 16384
DEFAULT_TOKENS = tuple(1 << i for i in range(MAX_TOKENS.bit_length()))  # 1, 2, 4, ..., 16384
_MARK = "_gemmforge_patched"
_op = []  # [torch.ops.gemmforge.linear.default] once loaded


@dataclass
class PatchReport:
    """What `patch` did: the layers it routed and each one it kept on F.linear, with why."""

    routed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # layer name -> why
    shapes: set = field(default_factory=set)  # (n, k) of the routed layers

    def __str__(self) -> str:
        lines = [f"gemmforge.patch: {len(self.routed)} nn.Linear layers routed through gemmforge "
                 f"({len(self.shapes)} distinct (n, k)), {len(self.kept)} kept on F.linear"]
        reasons: dict[str, list[str]] = {}
        for name, why in self.kept.items():
            reasons.setdefault(why, []).append(name)
        for why, names in sorted(reasons.items()):
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            lines.append(f"  kept ({why}): {shown}")
        return "\n".join(lines)


def ineligible(layer) -> str | None:
    """Why `layer` (an nn.Linear) can't be routed, or None."""
    import torch
    served = (torch.float16, torch.bfloat16)  # the dtypes the kernels compute
    w, b = layer.weight, layer.bias
    if not w.is_cuda:
        return "weight not on a CUDA device"
    if w.dtype not in served:
        return f"weight dtype {str(w.dtype).replace('torch.', '')}, not float16 or bfloat16"
    if w.dim() != 2 or not w.is_contiguous() or w.data_ptr() % 16:
        return "weight not a contiguous, 16-byte aligned (n, k) matrix"
    n, k = w.shape
    if n % ALIGN or k % ALIGN:
        return f"n = {n} or k = {k} not a multiple of {ALIGN}"
    if b is not None and (b.dtype is not w.dtype or not b.is_contiguous()
                          or b.device != w.device):
        return "bias not a contiguous vector of the weight's dtype on its device"
    return None


def patch(model, tokens=DEFAULT_TOKENS) -> PatchReport:
    """Route `model`'s eligible nn.Linear layers through gemmforge (module doc); returns the
    report. A layer already patched is left as it is; `tokens`: token counts whose buckets
    are prepared for every routed (n, k) (a count outside them runs cuBLAS)."""
    import torch
    from .ops import _op_ready
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"gemmforge.patch: model must be a torch.nn.Module, not {type(model).__name__}")
    tokens = _checked_tokens(tokens)
    report = PatchReport()
    biased: dict[tuple, bool] = {}  # (n, k, device, dtype) of the routed layers -> any has a bias
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if any(ineligible(m) is None for _, m in layers) and not _op_ready():
        report.kept = {name or "(model)": "torch.ops.gemmforge could not be built here (warned)"
                       for name, _ in layers}
        return report
    for name, layer in layers:
        if getattr(layer, _MARK, False):
            continue
        why = ineligible(layer)
        if why is not None:
            report.kept[name or "(model)"] = why
            continue
        if not _op:
            _op.append(torch.ops.gemmforge.linear.default)
        layer.forward = types.MethodType(_forward, layer)
        setattr(layer, _MARK, True)
        report.routed.append(name)
        shape = (*layer.weight.shape, layer.weight.device.index or 0,
                 "bf16" if layer.weight.dtype is torch.bfloat16 else "f16")
        biased[shape] = biased.get(shape, False) or layer.bias is not None
    for device in sorted({d for _, _, d, _ in biased}) if tokens else ():
        build_ahead([(n, k, b, t) for (n, k, d, t), b in biased.items() if d == device],
                    tokens, device)
    for (n, k, device, dtype), bias in sorted(biased.items()):
        prepare_buckets(n, k, tokens, device, bias, dtype)
    report.shapes = {(n, k) for n, k, _, _ in biased}
    return report


def unpatch(model) -> int:
    """Give every patched layer of `model` its stock forward back; the number unpatched."""
    count = 0
    for layer in model.modules():
        if getattr(layer, _MARK, False):
            del layer.forward
            delattr(layer, _MARK)
            count += 1
    return count


def _forward(self, x):
    return _op[0](x, self.weight, self.bias)


def _checked_tokens(tokens) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in tokens)
    except (TypeError, ValueError):
        raise ValueError(f"gemmforge.patch: tokens must be positive integers, not {tokens!r}") from None
    if any(t <= 0 for t in values):
        raise ValueError(f"gemmforge.patch: tokens must be positive integers, not {tokens!r}")
    return values
