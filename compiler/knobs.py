"""Every environment setting gemmforge reads, declared once with its type and default."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def _optional_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


class KnobError(ValueError):
    """An environment setting holds a value of the wrong kind; the message names it."""


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


def knobs() -> Knobs:
    """Read the environment now (tests change it, so this is not cached); KnobError if a
    numeric setting is not a number or out of range."""
    return Knobs(
        cache_dir=_path("GEMMFORGE_CACHE_DIR", _default_cache() / "artifacts"),
        dump_dir=_optional_path("GEMMFORGE_DUMP"),
        nvcc=os.environ.get("GEMMFORGE_NVCC", "nvcc"),
        build_timeout_s=_number("GEMMFORGE_BUILD_TIMEOUT", "900", float, 0, strict=True),
        nvcc_threads=_number("GEMMFORGE_NVCC_THREADS", "1", int, 0),
        triton_direct_launch=os.environ.get("GEMMFORGE_TRITON_DIRECT_LAUNCH", "1") != "0",
        triton_raw_launch=os.environ.get("GEMMFORGE_TRITON_RAW_LAUNCH", "1") != "0",
        triton_descriptor_cache=os.environ.get("GEMMFORGE_TRITON_DESCRIPTOR_CACHE", "0") == "1",
        tune_db=os.environ.get("GEMMFORGE_TUNE_DB") or None,
        cutlass_dir=_optional_path("GEMMFORGE_CUTLASS_DIR"),
        shipped=os.environ.get("GEMMFORGE_SHIPPED") or None,
        torch_op=os.environ.get("GEMMFORGE_TORCH_OP", "1") != "0",
        pdl=os.environ.get("GEMMFORGE_PDL", "1") != "0",
    )
