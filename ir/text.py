"""The canonical one-line text form of a Program, and its parser.

    cuda_mma sm_80 128x128x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct

Thirteen space-separated tokens, one per Program field, in field order:

    backend arch BMxBNxBK wWMxWN sSTAGES sw{none,32,64,128,pad} {row,col}/GROUP
    {pred,padop} kSLICES[a] {dp,persistent,streamk} cCMxCN {nows,coop,pingpong}
    {direct,smem,tma}

then the optional tokens of fields added later, each only where its field is set (at
the default it is left out, so every earlier text keeps its meaning): `l2first` where
l2_hint is stream_first, then `swap` where swap_ab is true, then `pdl` where pdl is true,
then `bias` where bias is true (a fused bias add).
`kS` reduces split-K slices
through a workspace, `kSa` with atomics, `kSi` inside the kernel (inkernel), `kSc` through
a cluster's shared memory (cluster). Every
Program has exactly one text form and `parse(to_text(p)) == p`. Logs, the tuned
database, regression files and the LLM policy all use this form.
"""
from __future__ import annotations

import re

from .program import (
    Arch, Cluster, Epilogue, IRError, L2Hint, Padding, Program, Raster, RasterOrder,
    Reduction, Schedule, SplitK, Swizzle, Tile, WarpSpec, Warps, set_text_form,
)

_SWIZZLE = {Swizzle.NONE: "swnone", Swizzle.B32: "sw32", Swizzle.B64: "sw64",
            Swizzle.B128: "sw128", Swizzle.PAD: "swpad"}
_PADDING = {Padding.PREDICATE: "pred", Padding.PAD_OPERANDS: "padop"}
_SCHEDULE = {Schedule.DATA_PARALLEL: "dp", Schedule.PERSISTENT: "persistent",
             Schedule.STREAM_K: "streamk"}
_WARP_SPEC = {WarpSpec.NONE: "nows", WarpSpec.COOPERATIVE: "coop",
              WarpSpec.PINGPONG: "pingpong"}
_L2_HINT = {L2Hint.NONE: "", L2Hint.STREAM_FIRST: "l2first"}  # optional tokens, in order
_SWAP = {False: "", True: "swap"}
_PDL = {False: "", True: "pdl"}
_BIAS = {False: "", True: "bias"}
_REDUCTION = {Reduction.WORKSPACE: "", Reduction.ATOMIC: "a", Reduction.INKERNEL: "i",
              Reduction.CLUSTER: "c"}
_OPTIONAL = {"l2_hint": _L2_HINT, "swap_ab": _SWAP, "pdl": _PDL,
             "bias": _BIAS}  # tokens only when set
_DEFAULT_NAMES = {"l2_hint": "none", "swap_ab": "noswap", "pdl": "nopdl",
                  "bias": "nobias"}  # in messages


def _invert(table: dict) -> dict:
    return {v: k for k, v in table.items()}


_FIELD_TEXT = {
    "backend": str,
    "arch": lambda a: a.value,
    "tile": lambda t: f"{t.bm}x{t.bn}x{t.bk}",
    "warps": lambda w: f"w{w.wm}x{w.wn}",
    "stages": lambda s: f"s{s}",
    "swizzle": _SWIZZLE.__getitem__,
    "raster": lambda r: f"{r.order.value}/{r.group}",
    "padding": _PADDING.__getitem__,
    "split_k": lambda s: f"k{s.slices}{_REDUCTION[s.reduction]}",
    "schedule": _SCHEDULE.__getitem__,
    "cluster": lambda c: f"c{c.cm}x{c.cn}",
    "warp_spec": _WARP_SPEC.__getitem__,
    "epilogue": lambda e: e.value,
    "l2_hint": _L2_HINT.__getitem__,
    "swap_ab": _SWAP.__getitem__,
    "pdl": _PDL.__getitem__,
    "bias": _BIAS.__getitem__,
}


def field_token(name: str, value) -> str:
    """The token of one field's value in the text form ("" for an optional field at its
    default, which the text leaves out)."""
    return _FIELD_TEXT[name](value)


def field_text(name: str, value) -> str:
    """The text token of one Program field's value (as it appears in the text form; an
    optional field left out at its default is named 'none', 'noswap', 'nopdl', 'nobias')."""
    return _FIELD_TEXT[name](value) or _DEFAULT_NAMES.get(name, str(value))


def to_text(p: Program) -> str:
    """The canonical text form of `p` (one line, 13 tokens and the optional ones set)."""
    tokens = (fn(getattr(p, name)) for name, fn in _FIELD_TEXT.items())
    return " ".join(t for t in tokens if t)


set_text_form(to_text)


_FORM = ("backend arch BMxBNxBK wWMxWN sSTAGES sw{none,32,64,128,pad} {row,col}/GROUP "
         "{pred,padop} kSLICES[a|i] {dp,persistent,streamk} cCMxCN {nows,coop,pingpong} "
         "{direct,smem,tma} [l2first] [swap] [pdl] [bias]")


def _match(pattern: str, token: str, what: str, allowed: str) -> tuple[int, ...]:
    m = re.fullmatch(pattern, token)
    if not m:
        raise IRError(f"{what}: {token!r} is not of the form {allowed}")
    return tuple(int(g) for g in m.groups())


def _lookup(table: dict, token: str, what: str):
    inverse = _invert(table)
    if token not in inverse:
        raise IRError(f"{what}: {token!r} is not one of {', '.join(table.values())}")
    return inverse[token]


def parse(text: str) -> Program:
    """Parse the canonical text form; raise IRError naming the bad token and the allowed form."""
    if not isinstance(text, str):
        raise IRError(f"program text: expected a string, got {type(text).__name__}")
    tokens = text.split()
    if not 13 <= len(tokens) <= 13 + len(_OPTIONAL):
        raise IRError(f"program text: expected 13 tokens and the optional ones set "
                      f"({_FORM}), got {len(tokens)}")
    (backend, arch, tile, warps, stages, swizzle, raster, padding, split, schedule,
     cluster, warp_spec, epilogue) = tokens[:13]
    optional = _parse_optional(tokens[13:])
    bm, bn, bk = _match(r"(\d+)x(\d+)x(\d+)", tile, "tile", "BMxBNxBK")
    wm, wn = _match(r"w(\d+)x(\d+)", warps, "warps", "wWMxWN")
    (n_stages,) = _match(r"s(\d+)", stages, "stages", "sN")
    order_group = re.fullmatch(r"(row|col)/(\d+)", raster)
    if not order_group:
        raise IRError(f"raster: {raster!r} is not of the form row/G or col/G")
    split_m = re.fullmatch(r"k(\d+)([aic]?)", split)
    if not split_m:
        raise IRError(f"split_k: {split!r} is not of the form kN, kNa, kNi or kNc")
    cm, cn = _match(r"c(\d+)x(\d+)", cluster, "cluster", "cCMxCN")
    return Program(
        backend=backend,
        arch=Arch.parse(arch, "arch"),
        tile=Tile(bm, bn, bk),
        warps=Warps(wm, wn),
        stages=n_stages,
        swizzle=_lookup(_SWIZZLE, swizzle, "swizzle"),
        raster=Raster(RasterOrder(order_group.group(1)), int(order_group.group(2))),
        padding=_lookup(_PADDING, padding, "padding"),
        split_k=SplitK(int(split_m.group(1)), _invert(_REDUCTION)[split_m.group(2)]),
        schedule=_lookup(_SCHEDULE, schedule, "schedule"),
        cluster=Cluster(cm, cn),
        warp_spec=_lookup(_WARP_SPEC, warp_spec, "warp_spec"),
        epilogue=Epilogue.parse(epilogue, "epilogue"),
        **optional,
    )


def _parse_optional(tokens: list[str]) -> dict:
    """Field -> value for the optional trailing tokens, each at most once, in field order."""
    order = [(name, token, value) for name, table in _OPTIONAL.items()
             for value, token in table.items() if token]
    out, at = {}, 0
    for token in tokens:
        hit = next((i for i, (_, t, _) in enumerate(order) if t == token), None)
        if hit is None or hit < at:
            allowed = " ".join(t for _, t, _ in order)
            raise IRError(f"program text: {token!r} is not an optional token, or is out of "
                          f"place (each at most once, in the order: {allowed})")
        name, _, value = order[hit]
        out[name], at = value, hit + 1
    return out


def parse_problem(text: str):
    """Parse 'MxNxK[ layout[ acc[ dtype]]]' (e.g. '1000x4096x333 nt f16', '4096x4096x4096
    nn f32 bf16') into a Problem; str(Problem) writes this form (dtype only where bf16)."""
    from .program import Accum, DType, Layout, Problem
    tokens = text.split() if isinstance(text, str) else []
    if not 1 <= len(tokens) <= 4:
        raise IRError(f"shape: {text!r} is not of the form MxNxK [nn|nt] [f32|f16] [f16|bf16]")
    m, n, k = _match(r"(\d+)x(\d+)x(\d+)", tokens[0], "shape", "MxNxK (e.g. 1000x4096x333)")
    layout = Layout.parse(tokens[1], "layout") if len(tokens) > 1 else Layout.NN
    acc = Accum.parse(tokens[2], "acc") if len(tokens) > 2 else Accum.F32
    dtype = DType.parse(tokens[3], "dtype") if len(tokens) > 3 else DType.F16
    return Problem(m, n, k, layout, acc, dtype)
