"""The parts of re-checking the shipped file that need no GPU (benchmarks/check_shipped.py
runs them): which rows a run takes, in which dtype, with which settings, and the shapes
where cuBLAS came out ahead.

    rows, skipped = rows_in_dtype(book.rows, "bf16")   # the f16 rows' programs, in bf16
    rows = interleaved_part(rows, "2/8")               # every 8th row from the second
    check_settings(problem, confirm=True)              # CONFIRM_BENCH, SUSTAINED_BENCH if large
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...dispatch.choice import usable
from ..measure.records import BenchSettings
from ..measure.selection import selection_ratio
from ..measure.shapes import shape_class
from .campaign import CONFIRM_BENCH, SUSTAINED_BENCH

CHECK_BENCH = BenchSettings(protocols=("kernel",), rounds=1, warmup=1, warm_rounds=0,
                            graph_us=200.0)
"""The short round of a correctness re-check: the gates around one kernel-protocol round."""


def check_settings(problem, confirm: bool) -> BenchSettings:
    """The short check's round, or a confirmation's settings (sustained for the large class)."""
    if not confirm:
        return CHECK_BENCH
    return SUSTAINED_BENCH if shape_class(problem) == "large" else CONFIRM_BENCH


def write_behind(results, name: str, folder: Path) -> list[Path]:
    """<folder>/<name>_behind_<layout>.txt per layout: the MxNxK of the ok results whose
    selection ratio reads under 1.0 (cuBLAS ahead), one a line; none written where none is."""
    behind: dict[str, list[str]] = {}
    for r in results:
        ratio = selection_ratio(r.problem(), r) if r.ok else None
        if ratio is not None and ratio < 1.0:
            behind.setdefault(r.layout, []).append(f"{r.m}x{r.n}x{r.k}")
    paths = []
    for layout, shapes in sorted(behind.items()):
        path = folder / f"{name}_behind_{layout}.txt"
        path.write_text("".join(f"{s}\n" for s in shapes))
        paths.append(path)
    return paths


def interleaved_part(rows, part: str) -> list:
    """The I-th of N interleaved parts of `rows` (`part` "I/N", 1 <= I <= N; ValueError
    naming --part otherwise)."""
    try:
        i, n = (int(x) for x in part.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise ValueError(f"--part {part!r}: give I/N with 1 <= I <= N")
    return rows[i - 1::n]


def rows_in_dtype(rows, dtype: str | None):
    """`rows` as they are (dtype None), or the f16 rows with their problems in `dtype`:
    those whose program is usable there, and how many were not."""
    if dtype is None:
        return rows, 0
    moved = [replace(r, problem=replace(r.problem, dtype=dtype)) for r in rows
             if str(r.problem.dtype) == "f16"]
    kept = [r for r in moved if usable(r.program, r.problem)]
    return kept, len(moved) - len(kept)
