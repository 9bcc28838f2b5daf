"""The shipped file in one table: per (device class, layout), geomeans of cuBLAS time / our
time over its rows, with each row's figures from the confirmation that chose it.

    python3 benchmarks/shipped_summary.py [--shipped dispatch/data/shipped.json]

Columns: rows; kernel time with L2 warm and with L2 cold (rotated operands); each launch
after another kernel (the after protocol, over the rows whose confirmation measured it);
rows under 1.0x warm; the large class (2mnk >= 1e11: rows, warm geomean). README's "Where it
stands" table is this output (its sustained-load figures come from the rounds it names).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from gemmforge.search.campaign.grid_report import geomean as _geomean
from gemmforge.search.measure.shapes import LARGE_FLOPS

DEFAULT = Path(__file__).resolve().parent.parent / "search" / "data" / "shipped.json"


def geomean(xs: list[float]) -> float:
    """search.campaign.grid_report.geomean, nan for none."""
    value = _geomean(xs)
    return float("nan") if value is None else value


def ratios(rows: list[dict], protocol: str) -> list[float]:
    """cuBLAS / ours in `protocol` (its `<protocol>_us` and `cublas_<protocol>_us`), over the
    rows that have both."""
    return [r[f"cublas_{protocol}_us"] / r[f"{protocol}_us"] for r in rows
            if r.get(f"{protocol}_us") and r.get(f"cublas_{protocol}_us")]


def summary(rows: list[dict]) -> list[dict]:
    """One line per (device class, layout), sorted."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["device_class"], r["layout"])].append(r)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", type=Path, default=DEFAULT)
    args = ap.parse_args()
    lines = summary(json.loads(args.shipped.read_text())["rows"])
    print("| GPU | layout | rows | L2 warm | L2 cold | after another kernel | under 1.0x warm "
          "| large class: rows, warm |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in lines:
        cold = f"{s['cold']:.3f}x" + ("" if s["cold_rows"] == s["rows"] else f" ({s['cold_rows']} rows)")
        after = f"{s['after']:.3f}x ({s['after_rows']} rows)" if s["after_rows"] else "-"
        large = f"{s['large_rows']}, {s['large_warm']:.3f}x" if s["large_rows"] else "-"
        print(f"| {s['device']} | {s['layout']} | {s['rows']} | {s['warm']:.3f}x | {cold} | "
              f"{after} | {s['under']} | {large} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
