"""Backend registry: the decorator `register`, and out-of-tree backends found through the
`gemmforge.backends` entry-point group. Nothing outside this package names a backend.

`registry` is the IR's capability table (`gemmforge.ir.capabilities.table`): registering a
backend is what lets verify, space and schema see it. On first lookup the table imports
the in-tree backends and loads the entry points.
"""
from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from .base import Backend
from ..ir.capabilities import table as registry

ENTRY_POINT_GROUP = "gemmforge.backends"
_IN_TREE = ("gemmforge.backends.cuda", "gemmforge.backends.triton", "gemmforge.backends.cute_cpp",
            "gemmforge.backends.cuda_wgmma", "gemmforge.backends.cute_dsl")

__all__ = ["Backend", "register", "registry"]


def _load_backends() -> None:
    """Import every in-tree backend (noting those whose toolchain isn't installed here)
    and every entry point of the group; each module registers itself with @register."""
    for module in _IN_TREE:
        try:
            import_module(module)
        except ImportError as e:
            registry.unavailable[module] = str(e)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


registry.on_first_use(_load_backends)


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make `cls` the backend for Programs whose backend is `cls.name`."""
    registry.add(cls())
    return cls
