"""The capability table: every backend's declared capabilities, by backend name.

verify, space and schema read backends from here, never from the backends package:
the IR sits at the bottom and imports nothing above it. The backends fill the table
when they register (`gemmforge.backends.register` adds each instance; the registry *is*
this table), and the layer that knows where backends live installs a loader:

    table.on_first_use(load_backends)      # a callable run once, before the first lookup

`gemmforge/__init__.py` installs one that imports `gemmforge.backends`, which installs its
own (in-tree modules and the entry-point group). An entry is any object with the
attributes of `gemmforge.backends.base.Backend` (name, archs, instruction, mma_shape,
unit_threads, allowed, layouts, accumulators, dtypes, tile_extras, consumer_accum_regs,
supports(), smem_bytes(); `fusions` where it lowers a fused epilogue operation).
"""
from __future__ import annotations

import threading
from typing import Callable

from .program import DType


class CapabilityTable:
    """Backends by name, filled by `add` and, on first lookup, by the installed loaders."""

    def __init__(self):
        self._entries: dict[str, object] = {}
        self._loaders: list[Callable[[], None]] = []
        self._loading = False
        self.unavailable: dict[str, str] = {}  # module -> why a loader could not import it
        self._lock = threading.RLock()  # builder threads may look backends up concurrently

    def add(self, entry) -> None:
        """Make `entry` the backend for programs whose backend is `entry.name`
        (ValueError if another class already holds that name)."""
        held = self._entries.get(entry.name)
        if held is not None and type(held) is not type(entry):
            raise ValueError(f"backend {entry.name!r} is registered twice")
        self._entries[entry.name] = entry

    def remove(self, name: str) -> None:
        """Forget the backend called `name` (a test's stand-in, once the test is done)."""
        self._entries.pop(name, None)

    def on_first_use(self, loader: Callable[[], None]) -> None:
        """Run `loader` once, before the next lookup (it may add entries and loaders)."""
        with self._lock:
            self._loaders.append(loader)

    def _load(self) -> None:
        # A loader leaves the list only once it has run, so a thread that finds the list
        # empty knows every backend is in; one that finds it not empty while another thread
        # loads waits on the lock until that load is done (builder threads look backends
        # up concurrently). The loading thread itself, re-entering from inside a loader
        # (the lock is re-entrant), returns at once.
        if not self._loaders:
            return
        with self._lock:
            if self._loading:
                return
            self._loading = True
            try:
                while self._loaders:
                    try:
                        self._loaders[0]()
                    finally:
                        self._loaders.pop(0)
            finally:
                self._loading = False

    def get(self, name: str):
        """The entry called `name`; KeyError naming the known ones (and any module a
        loader could not import) otherwise."""
        self._load()
        if name not in self._entries:
            missing = "".join(f"; {m} not loaded ({why})" for m, why in self.unavailable.items())
            raise KeyError(f"backend {name!r} is not registered; known: "
                           f"{', '.join(self.names())}{missing}")
        return self._entries[name]

    def names(self) -> list[str]:
        """Every registered backend name, sorted."""
        self._load()
        return sorted(self._entries)

    def all(self) -> list:
        """Every registered entry, sorted by name."""
        self._load()
        return [self._entries[n] for n in sorted(self._entries)]


table = CapabilityTable()


def serves_dtypes(entry) -> frozenset:
    """The operand dtypes backend `entry` computes: its `dtypes`, f16 alone for an entry
    that declares none (an out-of-tree backend may not know the field)."""
    return getattr(entry, "dtypes", None) or frozenset({DType.F16})
