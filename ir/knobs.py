"""A program as a point in a product of knobs, the vocabulary `ir.space` searches over.

A *knob* is one scalar part of the IR's fields, named by its path (`tile.bm`, `warps.wn`,
`swizzle`, `split_k.reduction`, ...; KNOBS lists them in sampling order). A knob's
*primitive* value is what optuna and the policies store: an enum's text, a bool, or an int.
This module reads a knob of a program (`knob_value`), turns a primitive back into the IR
value it stands for (`ir_value`), builds a Program from knob values (`assemble`) and
changes one knob of a program (`with_knob`). Which values each knob may take for a backend
and arch is `ir.space`'s business; whether a program is legal is `ir.verify`'s.
"""
from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import Mapping

from .program import (
    DEFAULTS, Arch, Cluster, Program, Raster, Reduction, SplitK, Tile, Warps,
)

KNOBS = ("swap_ab", "tile.bm", "tile.bn", "tile.bk", "warps.wm", "warps.wn", "stages",
         "swizzle", "raster.order", "raster.group", "padding", "schedule", "split_k.slices",
         "split_k.reduction", "cluster.cm", "cluster.cn", "warp_spec", "epilogue", "l2_hint",
         "pdl")
"""Every knob, in the order a program's knobs are sampled (a condition precedes what it
governs: swap_ab, which decides the tile side that meets the MMA's narrow side, before the
tile; schedule, then split_k.slices, then split_k.reduction). The fusion fields
(ir.program.FUSION_FIELDS: bias) are no knobs: they say what a kernel computes, which the
caller decides; a search keeps them at their defaults."""

_PARTS = {"tile": Tile, "warps": Warps, "raster": Raster, "split_k": SplitK, "cluster": Cluster}


def _prim(value):
    """A knob value as optuna stores it: an enum's text, a bool, or the int."""
    if isinstance(value, bool):
        return value
    return value.value if isinstance(value, Enum) else int(value)

def knob_value(program: Program, knob: str):
    """The primitive value (int or str) of `knob` in `program`."""
    value = program
    for part in knob.split("."):
        value = getattr(value, part)
    return _prim(value)


def ir_value(knob: str, value):
    """A primitive knob value as the IR value it stands for (enum member or int)."""
    default = DEFAULTS
    for part in knob.split("."):
        default = getattr(default, part)
    if isinstance(default, bool):
        return bool(value)
    return type(default)(value) if isinstance(default, Enum) else int(value)


def assemble(backend: str, arch: Arch, values: Mapping[str, object]) -> Program:
    """The Program with these knob values; a knob left out keeps its IR default (and
    split_k.reduction is 'workspace' when there is one slice). Raises IRError if malformed."""
    top: dict[str, dict] = {}
    for knob, value in values.items():
        field_name, _, attr = knob.partition(".")
        top.setdefault(field_name, {})[attr] = ir_value(knob, value)
    if top.get("split_k", {}).get("slices", 1) == 1:
        top.get("split_k", {}).pop("reduction", None)
    kwargs = {}
    for field_name, parts in top.items():
        if field_name in _PARTS:
            kwargs[field_name] = replace(getattr(DEFAULTS, field_name), **parts)
        else:
            kwargs[field_name] = parts[""]
    return Program(backend=backend, arch=arch, **kwargs)


def with_knob(base: Program, knob: str, value) -> Program:
    """`base` with one knob set to the primitive `value` (split_k.reduction is set with 2
    slices, so that it exists). Raises IRError if the result is malformed."""
    values = {knob: value}
    if knob == "split_k.reduction":
        values["split_k.slices"] = 2
    field_name = knob.split(".")[0]
    part = getattr(base, field_name)
    if field_name in _PARTS:
        changed = {k.split(".")[1]: ir_value(k, v) for k, v in values.items()}
        if field_name == "split_k" and "reduction" not in changed:
            changed["reduction"] = Reduction.WORKSPACE
        return base.replace(**{field_name: replace(part, **changed)})
    return base.replace(**{field_name: ir_value(knob, value)})
