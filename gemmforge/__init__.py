"""gemmforge: an HGEMM compiler with a search front end.

The face of the package:

    import gemmforge
    program = gemmforge.parse("cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct")
    kernel = gemmforge.load(gemmforge.compile(program, gemmforge.Problem(1000, 4096, 333)))
    c = gemmforge.matmul(a, b)       # the shipped, tuned or heuristic program for a's and b's shape
    gemmforge.load_op()              # torch.ops.gemmforge.mm(a, b), the C++ op matmul calls
    gemmforge.patch(model)           # a model's nn.Linear layers through gemmforge (or cuBLAS)

The floors below it, each importing only those under it: `gemmforge.ir` (programs, text,
schema, verify against the capability table) -> `gemmforge.compiler` (the toolchain: nvcc,
knobs, artifacts, runtime) -> `gemmforge.backends` (and the pipeline) -> `gemmforge.policy`
-> `gemmforge.dispatch` (picking a program at run time) -> `gemmforge.search` (measure,
learn, tune, campaign); this folder (`ops`, `emit`, `cli`) sits on top. The IR never imports
the backends: this module installs the loader that imports them when the IR first looks a
backend up. `compile`, `load`, `matmul` and `load_op` are imported on first use, so `import
gemmforge` costs only the IR.
"""
from __future__ import annotations

from importlib import metadata as _metadata

from .ir.capabilities import table as _capabilities
from .ir.program import Problem, Program
from .ir.text import parse
from . import torch_hint as _torch_hint

try:
    __version__ = _metadata.version("gemmforge")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"


def _import_backends() -> None:
    """Fill the IR's capability table: importing the backends registers them (and installs
    their own loader for the rest)."""
    import importlib
    importlib.import_module("gemmforge.backends")


_capabilities.on_first_use(_import_backends)
_torch_hint.install()  # torch.ops.gemmforge.mm before load_op() says to call it

_LAZY = {
    "compile": ("gemmforge.backends.pipeline", "compile"),
    "load": ("gemmforge.backends.pipeline", "load"),
    "matmul": ("gemmforge.ops", "matmul"),
    "load_op": ("gemmforge.torch_op", "load_op"),
    "patch": ("gemmforge.patching", "patch"),
    "unpatch": ("gemmforge.patching", "unpatch"),
    "linear": ("gemmforge.linears", "linear"),
}

__all__ = ["Problem", "Program", "parse", "compile", "load", "matmul", "load_op", "patch",
           "unpatch", "linear", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gemmforge' has no attribute {name!r}")
