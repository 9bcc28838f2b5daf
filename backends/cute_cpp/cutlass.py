"""Where the CUTLASS/CuTe C++ headers are, and which CUTLASS they are.

The headers ship in the `nvidia-cutlass` wheel (`pip install nvidia-cutlass`, or the
`cutlass` extra) under `cutlass_library/source/include` and
`cutlass_library/source/tools/util/include`. GEMMFORGE_CUTLASS_DIR overrides that with
the root of any CUTLASS tree (a git checkout, or the wheel's `source` folder): the one
holding `include/cutlass/cutlass.h` and `tools/util/include`.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from ...compiler.knobs import knobs

ENV_DIR = "GEMMFORGE_CUTLASS_DIR"
_MARKER = Path("include") / "cutlass" / "cutlass.h"
INSTALL_HINT = ("pip install nvidia-cutlass (the 'cutlass' extra), or set "
                f"{ENV_DIR} to a CUTLASS tree holding include/cutlass/cutlass.h")


def root() -> Path | None:
    """The CUTLASS tree to compile against: $GEMMFORGE_CUTLASS_DIR if set (even when it
    lacks the headers, so a typo is reported rather than silently bypassed), else the
    installed wheel's `cutlass_library/source`, else None."""
    override = knobs().cutlass_dir
    if override is not None:
        return override
    spec = importlib.util.find_spec("cutlass_library")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "source"


def include_dirs() -> list[Path] | None:
    """[<root>/include, <root>/tools/util/include], or None when the headers are missing."""
    base = root()
    if base is None or not (base / _MARKER).is_file():
        return None
    return [base / "include", base / "tools" / "util" / "include"]


def missing_reason() -> str | None:
    """Why the headers can't be used (None when they can)."""
    if include_dirs() is not None:
        return None
    base = root()
    where = f" ({base} has no {_MARKER})" if base is not None else ""
    return f"the CUTLASS headers are not found{where}; {INSTALL_HINT}"


def version() -> str:
    """'MAJOR.MINOR.PATCH' from the headers' cutlass/version.h, or 'missing'."""
    dirs = include_dirs()
    if dirs is None:
        return "missing"
    text = (dirs[0] / "cutlass" / "version.h").read_text(errors="replace")
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def include_flags() -> list[str]:
    """nvcc -I flags for the headers ([] when missing; build() reports that first)."""
    return [f"-I{d}" for d in include_dirs() or []]
