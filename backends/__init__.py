"""Backend registry: the decorator `register`, and out-of-tree backends found through the
`gemmforge.backends` entry-point group. Nothing outside this package names a backend."""
from __future__ import annotations

import threading
from importlib import import_module
from importlib.metadata import entry_points

from gemmforge.backends.base import Artifact, Backend, BuildError, Source, Target

ENTRY_POINT_GROUP = "gemmforge.backends"
_IN_TREE = ("gemmforge.backends.cuda", "gemmforge.backends.triton", "gemmforge.backends.cute_cpp", "gemmforge.backends.cuda_wgmma",
            "gemmforge.backends.cute_dsl")

__all__ = ["Artifact", "Backend", "BuildError", "Source", "Target", "register", "registry"]


class _Registry:
    def __init__(self):
        self._backends: dict[str, Backend] = {}
        self._loaded = False
        self.unavailable: dict[str, str] = {}  # module -> why it could not be imported
        self._lock = threading.RLock()  # builder threads may look up backends concurrently

    def add(self, cls: type[Backend]) -> type[Backend]:
        if cls.name in self._backends and type(self._backends[cls.name]) is not cls:
            raise ValueError(f"backend {cls.name!r} is registered twice")
        self._backends[cls.name] = cls()
        return cls

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            for module in _IN_TREE:
                try:
                    import_module(module)
                except ImportError as e:  # a backend whose toolchain isn't installed here
                    self.unavailable[module] = str(e)
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                ep.load()  # the module registers itself with @register
            self._loaded = True

    def get(self, name: str) -> Backend:
        self._load()
        if name not in self._backends:
            missing = "".join(f"; {m} not loaded ({why})" for m, why in self.unavailable.items())
            raise KeyError(f"backend {name!r} is not registered; known: "
                           f"{', '.join(self.names())}{missing}")
        return self._backends[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._backends)

    def all(self) -> list[Backend]:
        self._load()
        return [self._backends[n] for n in sorted(self._backends)]


registry = _Registry()


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make `cls` the backend for Programs whose backend is `cls.name`."""
    return registry.add(cls)
