"""Device classes: which measured results may choose a kernel for which GPU.

A tuned or shipped program was measured on one device (its name as CUDA reports it, e.g.
"NVIDIA H100 80GB HBM3"); lookups compare devices by class, the chip's family in lower case
("h100", "h200", "a100", "gh200", "l40s"): the same chip in another board or memory size
tunes alike, another chip does not. A replayed or synthetic run's device ("replay",
"synthetic") has no class, so its results never choose a kernel for a real GPU.

    device_class("NVIDIA H100 80GB HBM3")  -> "h100"
    device_class("replay")                 -> None
    lookup_classes("h200")                 -> ("h200", "h100")   # own class, then siblings
"""
from __future__ import annotations

import re

from ..ir.devices import DEVICES
from ..ir.program import Arch

_CHIP = re.compile(r"\b(gh\d{3}|[a-z]{1,2}\d{2,3}[a-z]?)\b")
"""A chip family in a lower-cased device name: h100, h200, a100, gh200, l40s. A name without
one (a GeForce RTX 4090) gets its whole name, made a slug, as its class."""

NOT_REAL = ("replay", "synthetic")
"""Device-name words of results that were not measured on a GPU (search.measure.replay)."""

SIBLINGS: dict[str, tuple[str, ...]] = {
    "h100": ("h200",),
    "h200": ("h100",),
    "gh200": ("h100", "h200"),
}
"""Classes of the same die (GH100: 132 SMs, the same clocks and shared memory), whose
programs are the next best evidence when a device's own class has none for a shape; they
differ in memory bandwidth, which moves the best program only for memory-bound shapes."""

MULTIPROCESSORS: dict[str, int] = {name: facts.sms for name, facts in DEVICES.items()}
"""Streaming multiprocessors per class (ir.devices): the wave size of a grid of CTAs, which
dispatch.waves uses to judge a neighbour's program at another shape."""

DEFAULT_CLASS: dict[Arch, str] = {Arch.SM90A: "h100", Arch.SM80: "a100"}
"""The class `gemmforge emit` looks up for an arch when no GPU or --device-class says."""


def device_class(device: str | None) -> str | None:
    """The class of a device name (see the module doc); None for a replayed, synthetic,
    empty or unnamed device."""
    if not device:
        return None
    name = device.strip().lower()
    if not name or any(word in name for word in NOT_REAL):
        return None
    name = name.removeprefix("nvidia").strip()
    if name.startswith("cuda:"):  # a runner that could not read its device's name
        return None
    found = _CHIP.search(name)
    return found.group(1) if found else re.sub(r"[^a-z0-9]+", "-", name).strip("-") or None


def lookup_classes(cls: str) -> tuple[str, ...]:
    """The classes whose results may serve `cls`, best first: itself, then its siblings."""
    return (cls, *SIBLINGS.get(cls, ()))


def check_class(cls: str) -> str:
    """`cls` normalised (lower case), or ValueError naming what a class looks like."""
    value = cls.strip().lower()
    if not value or not re.fullmatch(r"[a-z0-9-]+", value) or value in NOT_REAL:
        raise ValueError(f"device class: {cls!r} is not a GPU class such as h100, h200 or a100")
    return value


def multiprocessors(cls: str | None) -> int | None:
    """The SM count of a device class (MULTIPROCESSORS), None for a class not listed."""
    return MULTIPROCESSORS.get(cls) if cls else None
