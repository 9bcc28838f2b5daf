"""The shipped file: the confirmed best program per (device class, layout, accumulator, operand
dtype, shape).

`dispatch/data/shipped.json.gz` travels inside the package, so `matmul`, `emit` and the torch op
have tuned programs on a fresh install (a user's own tuned database takes precedence:
dispatch.choice). It is plain JSON, read with the standard library only (no optuna, no
SQLAlchemy), written by `gemmforge ship` (search.campaign.ship) from confirmation CSVs:

    {"format": "gemmforge-shipped/1",
     "measurements": {"<id>": {"command": ..., "files": [...], "commit": ..., "date": ...,
                               "device": "NVIDIA H100 80GB HBM3"}},
     "rows": [{"device_class": "h100", "layout": "nn", "acc": "f32", "m": 8192, "n": 8192,
               "k": 8192, "program": "cuda_wgmma sm_90a ...", "kernel_us": ..., "cublas_us": ...,
               "speedup": ..., "min_speedup": ..., "readings": 3, "measured": "<id>"}, ...]}

A row's "dtype" (of A, B and C) is "bf16" or left out: a row without one is f16, and rows
of one dtype never serve a problem of another, nor lend it their ratio (dispatch.choice: a
bf16 problem with no bf16 row runs cuBLAS under the op's "unmeasured" rule, the heuristic's
bf16 program under matmul's).
A figure not measured (cold_us, cublas_cold_us, call_us, cublas_call_us, sustained_us,
cublas_sustained_us, after_us, cublas_after_us) is left out of its row. Times are µs, medians over the `readings` confirmations of that program at that shape;
speedup = the median of the per-reading cuBLAS/kernel ratios (kernel time, L2 warm),
min_speedup the lowest reading; sustained_* are seconds-long runs under the power cap, after_*
each launch after another kernel (search.measure.timing.after_protocol), where measured. `GEMMFORGE_SHIPPED=path` reads another file, `none` none.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from ..compiler.knobs import knobs
from ..ir.program import DType, Problem, Program

FORMAT = "gemmforge-shipped/1"
CUBLAS = "cublas"
"""A row's program text where cuBLAS won the shape's confirmation: the runtime calls cuBLAS
there (dispatch.choice), and no program of ours serves the shape."""
DEFAULT_PATH = Path(__file__).with_name("data") / "shipped.json.gz"
FIGURES = ("kernel_us", "cublas_us", "speedup", "min_speedup", "cold_us", "cublas_cold_us",
           "call_us", "cublas_call_us", "sustained_us", "cublas_sustained_us", "after_us",
           "cublas_after_us")


class ShippedError(ValueError):
    """The shipped file is unreadable or not in FORMAT; the message names the file."""


@dataclass(frozen=True)
class ShippedRow:
    """One shipped program: its shape, class and confirmed figures (µs; None: not measured)."""

    device_class: str
    problem: Problem
    program_text: str
    figures: dict
    readings: int
    measured: dict  # the measurement's record: command, files, commit, date, device

    @property
    def key(self) -> tuple:
        return (self.device_class, self.problem)

    @property
    def program(self) -> Program:
        return _parse(self.program_text)

    @property
    def speedup(self) -> float | None:
        return self.figures.get("speedup")

    @property
    def ratio(self) -> float | None:
        """cuBLAS time / ours as a model runs it: after another kernel where measured, else
        back to back (the kernel protocol's median ratio)."""
        after, cublas_after = self.figures.get("after_us"), self.figures.get("cublas_after_us")
        if after and cublas_after:
            return cublas_after / after
        return self.speedup

    @property
    def cublas(self) -> bool:
        return self.program_text == CUBLAS

    def to_json(self, measured_id: str) -> dict:
        p = self.problem
        dtype = {} if p.dtype == DType.F16 else {"dtype": str(p.dtype)}  # f16: left out
        return {"device_class": self.device_class, "layout": str(p.layout), "acc": str(p.acc),
                **dtype, "m": p.m, "n": p.n, "k": p.k, "program": self.program_text,
                **{name: _rounded(name, self.figures[name]) for name in FIGURES
                   if self.figures.get(name) is not None},
                "readings": self.readings, "measured": measured_id}


def _rounded(name: str, value: float | None) -> float | None:
    """Times to 1 ns, ratios to 1e-5: far inside the readings' spread, and the file stays small."""
    if value is None:
        return None
    return round(value, 3 if name.endswith("_us") else 5)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Program:
    from ..ir.text import parse
    return parse(text)


class ShippedFile:
    """The rows of one shipped file, indexed by (class, layout, acc, dtype) and by exact
    problem."""

    def __init__(self, rows: list[ShippedRow], path: Path | None = None):
        self.path = path
        self.rows = [r for r in rows if not r.cublas]  # rows of a program of ours
        self.cublas_rows = [r for r in rows if r.cublas]
        self._by_group: dict[tuple, list[ShippedRow]] = {}
        self._exact: dict[tuple, ShippedRow] = {}
        self._cublas: dict[tuple, ShippedRow] = {r.key: r for r in self.cublas_rows}
        for row in self.rows:
            p = row.problem
            self._by_group.setdefault((row.device_class, p.layout, p.acc, p.dtype),
                                      []).append(row)
            self._exact[row.key] = row

    def exact(self, device_class: str, problem: Problem) -> ShippedRow | None:
        return self._exact.get((device_class, problem))

    def cublas_won(self, device_class: str, problem: Problem) -> ShippedRow | None:
        """The row saying cuBLAS won `problem` on `device_class`, if the file has one."""
        return self._cublas.get((device_class, problem))

    def group(self, device_class: str, problem: Problem) -> list[ShippedRow]:
        """Rows of `device_class` with `problem`'s layout, accumulator and operand dtype."""
        return self._by_group.get((device_class, problem.layout, problem.acc, problem.dtype), [])

    def classes(self) -> list[str]:
        return sorted({r.device_class for r in self.rows})


def read(path: Path | str) -> ShippedFile:
    """Parse a shipped file (ShippedError naming the file and what is wrong)."""
    path = Path(path)
    try:
        data = json.loads(text(path))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShippedError(f"shipped file {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ShippedError(f"shipped file {path}: not a {FORMAT} file")
    measurements = data.get("measurements") or {}
    try:
        rows = [_row(r, measurements) for r in data.get("rows") or []]
    except (KeyError, TypeError, ValueError) as e:
        raise ShippedError(f"shipped file {path}: bad row: {e}") from None
    return ShippedFile(rows, path)


def text(path: Path | str) -> str:
    """The JSON text of a shipped file: gzip-compressed where its name ends in .gz (the
    package's own: one row per line compresses ninefold), plain otherwise."""
    path = Path(path)
    if path.suffix == ".gz":
        import gzip
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def _row(r: dict, measurements: dict) -> ShippedRow:
    problem = Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["layout"], r["acc"],
                      r.get("dtype") or DType.F16)
    figures = {name: r.get(name) for name in FIGURES}
    return ShippedRow(str(r["device_class"]), problem, str(r["program"]), figures,
                      int(r.get("readings") or 1), dict(measurements.get(r.get("measured"), {})))


def default_path() -> Path | None:
    """The file the runtime reads: GEMMFORGE_SHIPPED if set ("none": None), else the
    package's own dispatch/data/shipped.json.gz."""
    value = knobs().shipped
    if value:
        return None if value.lower() == "none" else Path(value).expanduser()
    return DEFAULT_PATH


def shipped(path: Path | str | None = None) -> ShippedFile:
    """The shipped file at `path` (default: default_path()), read once per path and
    modification time; an empty ShippedFile when there is none."""
    path = Path(path) if path is not None else default_path()
    if path is None or not path.exists():
        return ShippedFile([], path)
    return _cached(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _cached(path: Path, mtime_ns: int) -> ShippedFile:
    return read(path)
