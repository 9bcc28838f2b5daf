"""Two fresh re-timings of shipped winners (campaign reports, one row a shape: the large class's,
or any shapes both looks timed), side by side: each call's class figure, the call's offset read on the programs both timed, how
far the programs that changed in between moved beyond that offset, how well the two calls
agree shape by shape on those programs (the correlation of their log ratios, and the spread
of the per-shape difference), and the class figure of the newer call's programs over both
calls (per shape, the geomean of its two readings where the program is the same, else the
newer reading). The two calls may be on different chips (an H100's look beside an H200's).

    python3 benchmarks/recheck_compare.py OLD.csv NEW.csv [--column sustained_speedup]

Why (benchmarks/NOTES.md, twenty-fourth and twenty-fifth sessions): one call moves the
whole class by up to 0.6 % on programs that did not change, more than the margin the
issue's target leaves, so a class figure should come from two calls, and a change from
the programs that changed against those that did not.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from gemmforge.search.campaign.grid_report import geomean as _geomean
from gemmforge.search.measure.report import read_csv

COLUMNS = ("sustained_speedup", "speedup", "cold_speedup", "call_speedup")


def geomean(values) -> float:
    """The report's geomean; nan (not None) over nothing, for the ratios below."""
    g = _geomean(values)
    return float("nan") if g is None else g


def read(path: Path, column: str) -> dict[tuple[int, int, int], tuple[str, float]]:
    """(m, n, k) -> (program, its ratio `column`, a Result property) for the ok rows of a
    report CSV."""
    out = {}
    for r in read_csv(path):
        ratio = getattr(r, column)
        if r.ok and ratio is not None:
            out[(r.m, r.n, r.k)] = (r.program, ratio)
    if not out:
        raise SystemExit(f"{path}: no ok rows with a {column} figure")
    return out


def compare(old: dict, new: dict) -> dict[str, float | int]:
    """The figures the module doc names; shapes in only one call count for that call alone."""
    both = old.keys() & new.keys()
    same = [s for s in both if old[s][0] == new[s][0]]
    changed = [s for s in both if old[s][0] != new[s][0]]
    offset = geomean(new[s][1] / old[s][1] for s in same)
    moved = geomean(new[s][1] / old[s][1] for s in changed)
    return {
        "old": geomean(v for _, v in old.values()), "new": geomean(v for _, v in new.values()),
        "shapes_both": len(both), "unchanged": len(same), "changed": len(changed),
        "offset": offset, "changed_moved": moved, "beyond_offset": moved / offset,
        **agreement([math.log(old[s][1]) for s in same], [math.log(new[s][1]) for s in same]),
        "two_calls": geomean(math.sqrt(old[s][1] * v) if s in old and old[s][0] == p else v
                             for s, (p, v) in new.items()),
    }


def agreement(old_logs: list[float], new_logs: list[float]) -> dict[str, float | None]:
    """How two calls' log ratios of the same programs agree shape by shape: their Pearson
    correlation and the standard deviation of the per-shape difference (as a fraction);
    None where it is undefined (fewer than two shapes, or a call that reads every shape
    alike)."""
    if len(old_logs) < 2:
        return {"correlation": None, "difference_sd": None}
    spread = statistics.stdev(b - a for a, b in zip(old_logs, new_logs))
    try:
        correlation = statistics.correlation(old_logs, new_logs)
    except statistics.StatisticsError:
        correlation = None
    return {"correlation": correlation, "difference_sd": spread}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--column", default="sustained_speedup", choices=COLUMNS,
                    help="the ratio to compare (sustained_speedup)")
    args = ap.parse_args(argv)
    for path in (args.old, args.new):
        if not path.is_file():
            raise SystemExit(f"{path}: no such file")
    c = compare(read(args.old, args.column), read(args.new, args.column))
    print(f"{args.column}: {args.old.name} {c['old']:.4f}, {args.new.name} {c['new']:.4f}")
    if c["unchanged"]:
        print(f"  {c['unchanged']} programs in both calls: {c['offset']:.4f} (the call's offset)")
        if c["difference_sd"] is not None:
            corr = "undefined" if c["correlation"] is None else f"{c['correlation']:.2f}"
            print(f"  shape by shape on those: correlation {corr}, "
                  f"difference sd {100 * c['difference_sd']:.1f} %")
    else:
        print("  no program in both calls: no offset to read")
    if c["changed"]:
        beyond = f", {c['beyond_offset']:.4f} beyond the offset" if c["unchanged"] else ""
        print(f"  {c['changed']} changed in between: {c['changed_moved']:.4f}{beyond}")
    else:
        print("  none changed in between")
    print(f"  the newer call's programs over both calls: {c['two_calls']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
