"""gemmforge: an HGEMM compiler with a search front end.

The face of the package:

    import gemmforge
    program = gemmforge.parse("cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct")
    kernel = gemmforge.load(gemmforge.compile(program, gemmforge.Problem(1000, 4096, 333)))
    c = gemmforge.matmul(a, b)       # the shipped, tuned or heuristic program for a's and b's shape

The floors below it, each importing only those under it: `gemmforge.ir` (programs, text,
schema, verify) -> `gemmforge.compiler` (toolchain, pipeline, runtime) -> `gemmforge.backends`
-> `gemmforge.policy` -> `gemmforge.search`. `compile`, `load` and `matmul` are imported on
first use, so `import gemmforge` costs only the IR.
"""
from __future__ import annotations

from importlib import metadata as _metadata

from gemmforge.ir.program import Problem, Program
from gemmforge.ir.text import parse

try:
    __version__ = _metadata.version("gemmforge")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "compile": ("gemmforge.compiler.pipeline", "compile"),
    "load": ("gemmforge.compiler.pipeline", "load"),
    "matmul": ("gemmforge.compiler.ops", "matmul"),
}

__all__ = ["Problem", "Program", "parse", "compile", "load", "matmul", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gemmforge' has no attribute {name!r}")
