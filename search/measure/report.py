"""Benchmark results on disk: `<name>.csv` and a PNG plot beside it, in the current
directory or the folder given (never the installed package's folder).

    csv_path, png_path = write_report(results, "simt_grid_h200", root=Path("results"))
    results = read_csv(csv_path)

One CSV row per measured (shape, program), with the columns of COLUMNS (DESIGN.md asks for
at least m,n,k,device,backend,program,kernel_us,cublas_us,call_us,cublas_call_us). Times
are microseconds; an empty cell is a time that wasn't measured (a failure, or a protocol
left out). `speedup` = cublas_us / kernel_us and `call_speedup` = cublas_call_us / call_us
are written for reading convenience and recomputed, not read, by read_csv. `dtype` is the
operands' and cuBLAS's (f16 or bf16; a file written before the column reads as f16). Record the
command that produced a file in benchmarks/README.md.
"""
from __future__ import annotations

import csv
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from ...compiler.extras import require
from .records import Result
from .timing_protocols import PROTOCOLS

_SPEEDUP_COLUMN = {"kernel": "speedup", "call": "call_speedup"}  # written after their times
_TIMES = tuple(f for p in PROTOCOLS.values() for f in (p.field, p.cublas_field))
COLUMNS = ("m", "n", "k", "layout", "acc", "dtype", "device", "backend", "program", "status",
           "kind",
           *(c for p in PROTOCOLS.values()
             for c in (p.field, p.cublas_field, _SPEEDUP_COLUMN.get(p.name)) if c),
           "rel_err", "spread", "cublas_spread", "paired_speedup", "flags", "key", "build_s",
           "measure_s", "message")
_INTS = ("m", "n", "k")
_FLOATS = (*_TIMES, "rel_err", "spread", "cublas_spread", "paired_speedup", "build_s",
           "measure_s")
FLAG_SEPARATOR = " | "


def check_name(name: str) -> str:
    """`name` if it can name a result file (letters, digits, '_', '.', '-'), else ValueError."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"result name {name!r}: use letters, digits, '_', '.', '-'")
    return name


def _path(name: str, root: Path | None, suffix: str) -> Path:
    return Path(root or Path.cwd()) / f"{check_name(name)}{suffix}"


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # repr round-trips exactly
    return str(value)


def _row(r: Result) -> dict[str, str]:
    values = r.to_dict()
    values.update(backend=r.backend, speedup=r.speedup, call_speedup=r.call_speedup,
                  flags=FLAG_SEPARATOR.join(r.flags))
    return {c: _cell(values.get(c)) for c in COLUMNS}


def write_csv(results: Iterable[Result], name: str, root: Path | None = None,
              extra: Sequence[dict] | None = None) -> Path:
    """Write `results` to <root>/<name>.csv (root: the current directory); return the path.
    `extra`, one dict per result, adds columns after COLUMNS (in first-seen key order).
    The file is written whole to a temporary name and renamed into place."""
    path = _path(name, root, ".csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    results = list(results)
    extra = list(extra) if extra is not None else [{} for _ in results]
    columns = list(COLUMNS) + [k for k in dict.fromkeys(k for e in extra for k in e)
                               if k not in COLUMNS]
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows({**_row(r), **{k: _cell(v) for k, v in e.items()}}
                         for r, e in zip(results, extra))
    tmp.replace(path)
    return path


def _parse_row(row: dict[str, str]) -> Result:
    data: dict = {k: v for k, v in row.items() if v != "" and k is not None}
    for name in _INTS:
        data[name] = int(data[name])
    for name in _FLOATS:
        if name in data:
            data[name] = float(data[name])
    data["flags"] = tuple(row.get("flags", "").split(FLAG_SEPARATOR)) if row.get("flags") else ()
    return Result.from_dict(data)


def read_csv(path: Path | str) -> list[Result]:
    """The Results in a CSV that write_csv wrote (unknown columns are ignored)."""
    with Path(path).open(newline="") as f:
        return [_parse_row(row) for row in csv.DictReader(f)]


def best_per_shape(results: Iterable[Result]) -> list[Result]:
    """The ok result with the highest kernel speedup for each (m, n, k, layout, acc, dtype, device),
    sorted by FLOPs."""
    best: dict[tuple, Result] = {}
    for r in results:
        if not r.ok or r.speedup is None:
            continue
        key = (r.m, r.n, r.k, r.layout, r.acc, r.dtype, r.device)
        if key not in best or r.speedup > best[key].speedup:
            best[key] = r
    return sorted(best.values(), key=lambda r: (r.flops, r.m, r.n, r.k))


def decade_exponent(flops: int) -> int:
    """The power of ten below a shape's FLOP count (2mnk)."""
    return int(math.floor(math.log10(flops)))


def plot_speedup(results: Sequence[Result], path: Path | str, title: str = "") -> Path:
    """A PNG of speedup over cuBLAS (cublas/kernel, log scale; call-time speedup too) of the
    best program per shape, one column of points per FLOP decade (2*m*n*k), the decade's
    median as a bar. Returns the path (ModuleNotFoundError naming the [search] extra
    without matplotlib)."""
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    best = best_per_shape(results)
    groups: dict[int, list[Result]] = defaultdict(list)
    for r in best:
        groups[decade_exponent(r.flops)].append(r)
    decades = sorted(groups)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(decades) + 2), 4.5))
    for x, d in enumerate(decades):
        _plot_decade(ax, x, groups[d], first=(x == 0))
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(decades)), [f"1e{d}" for d in decades])
    ax.set_xlabel("FLOPs (2*m*n*k), by decade")
    ax.set_ylabel("speedup over cuBLAS (higher is better)")
    devices = sorted({r.device for r in best if r.device})
    ax.set_title(title or f"best program per shape ({len(best)} shapes; {', '.join(devices)})")
    if best:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def _plot_decade(ax, x: int, rows: list[Result], first: bool) -> None:
    n = len(rows)
    jitter = [x - 0.25 + 0.5 * (i + 0.5) / n for i in range(n)]
    kernel = [r.speedup for r in rows]
    ax.scatter(jitter, kernel, s=12, color="tab:blue", label="kernel time" if first else None)
    calls = [(j, r.call_speedup) for j, r in zip(jitter, rows) if r.call_speedup]
    if calls:
        ax.scatter(*zip(*calls), s=12, marker="x", color="tab:orange",
                   label="call time" if first else None)
    ax.hlines(statistics.median(kernel), x - 0.35, x + 0.35, color="black", linewidth=2,
              label="median (kernel)" if first else None)


def write_report(results: Sequence[Result], name: str,
                 root: Path | None = None) -> tuple[Path, Path]:
    """write_csv and plot_speedup side by side: (<root>/<name>.csv, <root>/<name>.png)."""
    csv_path = write_csv(results, name, root)
    return csv_path, plot_speedup(results, _path(name, root, ".png"))
