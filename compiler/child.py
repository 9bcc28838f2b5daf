"""The command line that runs a gemmforge module in a child Python process.

    subprocess.Popen(python_module("gemmforge.search.measure.worker", "build", spec))

`python -m` puts the current directory first on sys.path; run from a gemmforge checkout,
its `gemmforge/` folder (the package's face alone) would shadow an installed copy. On
Python 3.11+ `-P` leaves the current directory out, so children import what the parent
imported.
"""
from __future__ import annotations

import sys

SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def python_module(module: str, *args: str) -> list[str]:
    """[python, (-P,) -m, module, *args] for this interpreter."""
    return [sys.executable, *SAFE_PATH, "-m", module, *args]
