"""`torch.ops.gemmforge.<op>` looked up before `gemmforge.load_op()` says to call it.

The ops exist once load_op() has built and loaded the C++ extension (gemmforge.torch_op);
before that torch's own namespace answers with a bare "'_OpNamespace' 'gemmforge' object has
no attribute 'mm'". `install()` (run by `import gemmforge`) gives torch.ops a `gemmforge`
namespace whose lookups work exactly as torch's and only reword that error. `import
gemmforge` must not import torch (it costs seconds), so where torch is not imported yet the
namespace is put in place as soon as it is: a finder on sys.meta_path that finds nothing
itself wraps torch's loader for that one import, then takes itself off the path.
"""
from __future__ import annotations

import importlib.util
import sys

NAMESPACE = "gemmforge"


def hint(op_name: str) -> str:
    return (f"torch.ops.{NAMESPACE}.{op_name} is not registered yet: call "
            f"gemmforge.load_op() first (it builds the op once and registers it)")


def install() -> None:
    """Put the hinting namespace into torch.ops now if torch is imported, else right after
    torch's import finishes."""
    torch = sys.modules.get("torch")
    if torch is None:
        if not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterTorch())
    elif hasattr(torch, "ops"):  # not while torch is halfway through its own import
        _install(torch)


def _install(torch) -> None:
    """Replace torch.ops.gemmforge by a _Namespace (its cached ops are looked up again);
    a torch whose ops module differs keeps its own namespace and message."""
    try:
        from torch._ops import _OpNamespace
    except ImportError:
        return
    if getattr(type(torch.ops.__dict__.get(NAMESPACE)), "hints", False):
        return

    class _Namespace(_OpNamespace):
        hints = True

        def __getattr__(self, op_name: str):
            try:
                return super().__getattr__(op_name)
            except AttributeError:
                if op_name.startswith("__"):
                    raise
                raise AttributeError(hint(op_name)) from None

    setattr(torch.ops, NAMESPACE, _Namespace(NAMESPACE))
    names = getattr(torch.ops, "_dir", None)
    if isinstance(names, list) and NAMESPACE not in names:
        names.append(NAMESPACE)


class _AfterTorch:
    """A meta-path finder for `torch` alone: it leaves the finding to the others and wraps
    the loader they find, so that `_install` runs once torch has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and so the search below does not come back here
        spec = importlib.util.find_spec(name)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenInstall(spec.loader)
        return spec


class _ThenInstall:
    """torch's loader, with `_install` after it executes the module; the module keeps the
    original loader."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            _install(module)
        except Exception:  # a hint must never break torch's import
            pass
