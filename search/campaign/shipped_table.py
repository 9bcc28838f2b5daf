"""The shipped file in one table: per (device class, layout), geomeans of cuBLAS time / our
time over its rows, each row's figures from the confirmation that chose it.

Columns: rows; kernel time with L2 warm and with L2 cold (rotated operands); each launch
after another kernel (the after protocol, over the rows whose confirmation measured it);
rows under 1.0x warm; the large class (2mnk >= 1e11: rows, warm geomean). README.md holds
this table between the MARKERS; `python3 benchmarks/shipped_summary.py --readme README.md`
rewrites it there from the shipped file.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from ..measure.shapes import LARGE_FLOPS

MARKERS = ("<!-- results-table: begin (benchmarks/shipped_summary.py --readme README.md) -->",
           "<!-- results-table: end -->")
HEADER = ("| GPU | layout | rows | L2 warm | L2 cold | after another kernel | under 1.0x warm "
          "| large class (2mnk >= 1e11): rows, warm |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |")


def geomean(xs: list[float]) -> float:
    """The geometric mean of the positive values, nan for none."""
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def ratios(rows: list[dict], protocol: str) -> list[float]:
    """cuBLAS / ours in `protocol` (its `<protocol>_us` and `cublas_<protocol>_us`), over the
    rows that have both."""
    return [r[f"cublas_{protocol}_us"] / r[f"{protocol}_us"] for r in rows
            if r.get(f"{protocol}_us") and r.get(f"cublas_{protocol}_us")]


def summary(rows: list[dict]) -> list[dict]:
    """One line per (device class, layout, operand dtype), sorted; a bf16 group's layout
    reads "nn bf16" (f16 rows, which carry no dtype, keep the bare layout)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        layout = r["layout"] + (f" {r['dtype']}" if r.get("dtype", "f16") != "f16" else "")
        groups[(r["device_class"], layout)].append(r)
    out = []
    for (device, layout), rs in sorted(groups.items()):
        cold, after = ratios(rs, "cold"), ratios(rs, "after")
        large = [r["speedup"] for r in rs if 2 * r["m"] * r["n"] * r["k"] >= LARGE_FLOPS]
        out.append({"device": device, "layout": layout, "rows": len(rs),
                    "warm": geomean([r["speedup"] for r in rs]),
                    "cold": geomean(cold), "cold_rows": len(cold),
                    "after": geomean(after), "after_rows": len(after),
                    "under": sum(r["speedup"] < 1.0 for r in rs),
                    "large_rows": len(large), "large_warm": geomean(large)})
    return out


def table(lines: list[dict]) -> list[str]:
    """The markdown table of `summary`'s lines."""
    out = list(HEADER)
    for s in lines:
        cold = f"{s['cold']:.3f}x" + ("" if s["cold_rows"] == s["rows"] else f" ({s['cold_rows']} rows)")
        after = f"{s['after']:.3f}x ({s['after_rows']} rows)" if s["after_rows"] else "-"
        large = f"{s['large_rows']}, {s['large_warm']:.3f}x" if s["large_rows"] else "-"
        out.append(f"| {s['device']} | {s['layout']} | {s['rows']} | {s['warm']:.3f}x | {cold} | "
                   f"{after} | {s['under']} | {large} |")
    return out


def shipped_table(path: Path) -> list[str]:
    """The table of the shipped file at `path`."""
    from ...dispatch.shipped import text
    return table(summary(json.loads(text(path))["rows"]))


def between_markers(text: str) -> list[str]:
    """The lines between the MARKERS in `text`; ValueError where they are missing."""
    begin, end = MARKERS
    if begin not in text or end not in text.split(begin, 1)[1]:
        raise ValueError(f"no results table between {begin!r} and {end!r}")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n").splitlines()


def with_table(text: str, rows: list[str]) -> str:
    """`text` with the lines between the MARKERS replaced by `rows`."""
    between_markers(text)
    begin, end = MARKERS
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + "\n".join(rows) + "\n" + end + rest.split(end, 1)[1]
