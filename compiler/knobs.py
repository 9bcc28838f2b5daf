"""Every environment setting gemmforge reads, declared once with its type and default."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


class KnobError(ValueError):
    """An environment setting holds a value of the wrong kind; the message names it."""


def _path(name: str, default: Path) -> Path:
    """$name as a folder path (default `default`); KnobError where it names a file."""
    value = os.environ.get(name)
    path = Path(value).expanduser() if value else default
    if path.exists() and not path.is_dir():
        raise KnobError(f"{name}: {path} is a file, not a folder")
    return path


def _optional_path(name: str, must_exist: bool = False) -> Path | None:
    """$name as a folder path, None if unset; KnobError where it names a file, or (when
    `must_exist`) nothing."""
    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value).expanduser()
    if must_exist and not path.exists():
        raise KnobError(f"{name}: no such folder: {path}")
    if path.exists() and not path.is_dir():
        raise KnobError(f"{name}: {path} is a file, not a folder")
    return path


def _flag(name: str, default: bool) -> bool:
    """$name as a switch: "1" on, "0" off, unset or empty the default; KnobError otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise KnobError(f"{name}: {text!r} is not 0 or 1")
    return text == "1"


URL_FORM = re.compile(r"^[A-Za-z][A-Za-z0-9+_.-]*://")


def _url(name: str) -> str | None:
    """$name as a storage URL (":memory:" or DIALECT://...), None if unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if text != ":memory:" and not URL_FORM.match(text):
        raise KnobError(f"{name}: {text!r} is not an SQLAlchemy URL "
                        "(e.g. sqlite:///tune.db or postgresql+psycopg://user@host/db)")
    return text


def _shipped(name: str) -> str | None:
    """$name: "none" or a file that exists, None if unset."""
    text = os.environ.get(name, "").strip()
    if not text or text.lower() == "none":
        return text or None
    path = Path(text).expanduser()
    if not path.is_file():
        raise KnobError(f"{name}: no such file: {path} (give a shipped file or 'none')")
    return text


def _number(name: str, default: str, kind: type, least: float, strict: bool = False):
    """$name as `kind` (int or float), >= `least` (> when `strict`); KnobError naming it
    otherwise."""
    text = os.environ.get(name, "").strip() or default
    try:
        value = kind(text)
    except ValueError:
        raise KnobError(f"{name}: {text!r} is not {'an integer' if kind is int else 'a number'}"
                        ) from None
    if not (value > least if strict else value >= least):  # also refuses nan
        raise KnobError(f"{name}: {text} must be {'>' if strict else '>='} {least:g}")
    return value


def _default_cache() -> Path:
    try:
        import platformdirs
        return Path(platformdirs.user_cache_dir("gemmforge"))
    except ImportError:  # platformdirs is a dependency; this keeps bare checkouts usable
        return Path.home() / ".cache" / "gemmforge"


@dataclass(frozen=True)
class Knobs:
    cache_dir: Path       # GEMMFORGE_CACHE_DIR: built artifacts (default: user cache dir)
    dump_dir: Path | None  # GEMMFORGE_DUMP: write every pipeline stage's output here
    nvcc: str             # GEMMFORGE_NVCC: the nvcc to build with (default: nvcc on PATH)
    build_timeout_s: float  # GEMMFORGE_BUILD_TIMEOUT: seconds one build may take
    nvcc_threads: int     # GEMMFORGE_NVCC_THREADS: nvcc --threads
    triton_direct_launch: bool  # GEMMFORGE_TRITON_DIRECT_LAUNCH=0: through Triton's runner
    triton_raw_launch: bool  # GEMMFORGE_TRITON_RAW_LAUNCH=0: through compiled.run
    triton_descriptor_cache: bool  # GEMMFORGE_TRITON_DESCRIPTOR_CACHE=1: reuse TMA encodings
    tune_db: str | None   # GEMMFORGE_TUNE_DB: SQLAlchemy URL of studies + tuned database
    cutlass_dir: Path | None  # GEMMFORGE_CUTLASS_DIR: CUTLASS headers (default: the nvidia-cutlass wheel's)
    shipped: str | None   # GEMMFORGE_SHIPPED: the shipped-programs file to read ("none": no file)
    torch_op: bool        # GEMMFORGE_TORCH_OP=0: matmul never builds torch.ops.gemmforge.mm
    pdl: bool             # GEMMFORGE_PDL=0: resolved programs run without programmatic dependent launch
    cuda_wgmma_templates: Path | None  # GEMMFORGE_CUDA_WGMMA_TEMPLATES: another template folder
    debug: bool           # GEMMFORGE_DEBUG=1: a failure prints its traceback


def knobs() -> Knobs:
    """Read the environment now (tests change it, so this is not cached); KnobError naming
    the setting where one holds a value of the wrong kind: a number out of range, a switch
    not 0 or 1, a folder that is a file (or missing, for template folders), a URL without a
    dialect, a shipped file that is not there."""
    return Knobs(
        cache_dir=_path("GEMMFORGE_CACHE_DIR", _default_cache() / "artifacts"),
        dump_dir=_optional_path("GEMMFORGE_DUMP"),
        nvcc=os.environ.get("GEMMFORGE_NVCC", "nvcc"),
        build_timeout_s=_number("GEMMFORGE_BUILD_TIMEOUT", "900", float, 0, strict=True),
        nvcc_threads=_number("GEMMFORGE_NVCC_THREADS", "1", int, 0),
        triton_direct_launch=_flag("GEMMFORGE_TRITON_DIRECT_LAUNCH", True),
        triton_raw_launch=_flag("GEMMFORGE_TRITON_RAW_LAUNCH", True),
        triton_descriptor_cache=_flag("GEMMFORGE_TRITON_DESCRIPTOR_CACHE", False),
        tune_db=_url("GEMMFORGE_TUNE_DB"),
        cutlass_dir=_optional_path("GEMMFORGE_CUTLASS_DIR", must_exist=True),
        shipped=_shipped("GEMMFORGE_SHIPPED"),
        torch_op=_flag("GEMMFORGE_TORCH_OP", True),
        pdl=_flag("GEMMFORGE_PDL", True),
        cuda_wgmma_templates=_optional_path("GEMMFORGE_CUDA_WGMMA_TEMPLATES", must_exist=True),
        debug=_flag("GEMMFORGE_DEBUG", False),
    )
