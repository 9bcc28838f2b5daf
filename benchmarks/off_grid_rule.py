"""Issue 21 offline: the resolver's rules for a shape the shipped file lacks, replayed on
recorded GPU measurements (no GPU; nothing is timed here).

    python3 benchmarks/off_grid_rule.py --off-grid .carry/campaign/off_grid_h100.db \
        --grid .carry/campaign/rerun_h100.db [--device-class h100] [--csv off_grid_rule.csv] \
        [--reach 1.0]

Two rules of search.choice.pick: `nearest` (the nearest shipped shape's program within one
octave, the rule before the wave rule) and `waves` (every shipped neighbour within one
octave, its measured time carried to the shape by its waves of tiles, search.waves; the
shortest predicted time wins). A pick is scored at a shape by the campaign store's portfolio
pass there (every program of a shape timed in one group beside cuBLAS, one reading each,
kernel protocol): the pick's recorded cuBLAS ratio over the best recorded ratio of that pass
(the reference: what tuning the shape itself found, up to one pass's noise). A pick the
pass did not time is counted as untimed, never given a value; a pick that failed there
scores 0.

  (a) off grid: each shape of --off-grid (30 model shapes, ~90 programs each), resolved
      from the package's shipped file as `matmul` would (search.choice.resolve, shipped
      file alone);
  (b) leave one out on the grid: each shape of --grid (the grid campaign's store, ~40
      programs a shape) with a shipped row of the class, resolved from the shipped file
      without that shape's rows (search.choice.shipped_candidates, else the heuristic's).

Prints per evaluation and rule: shapes, picks timed (coverage), geomean of the fraction,
how many reach 0.95, and the same on the shapes where every rule's pick was timed.
`--reach` replaces the resolver's one octave (search.choice.MAX_DISTANCE) for both rules.
"""
from __future__ import annotations

import argparse
import csv
import math
import sqlite3
import statistics
import sys
from pathlib import Path

from gemmforge.ir.program import Arch
from gemmforge.search.choice import MAX_DISTANCE, RULES, pick, resolve, shipped_candidates
from gemmforge.search.devices import lookup_classes
from gemmforge.search.shapes import parse_shapes
from gemmforge.search.shipped import ShippedFile, shipped

TARGET = 0.95
ARCH = Arch.SM90A


def portfolio(path: str) -> dict:
    """{problem: {program text: cuBLAS ratio, 0.0 where it failed}} of a campaign store's
    portfolio pass (read-only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out: dict = {}
    for problem, text, status, speedup in con.execute(
            "SELECT m.problem, p.text, m.status, m.speedup FROM measurements m "
            "JOIN programs p ON p.id = m.program WHERE m.pass = 'portfolio'"):
        shape, layout, acc = problem.split()
        key = parse_shapes(shape, layout, acc)[0]
        ratio = speedup if status == "ok" and speedup else 0.0
        out.setdefault(key, {})[text] = max(ratio, out.get(key, {}).get(text, 0.0))
    con.close()
    return out


def _heuristic(problem):
    from gemmforge.policy.heuristic import default_program
    return default_program(problem, ARCH)


def off_grid_picks(readings: dict, cls: str, reach: float = MAX_DISTANCE) -> dict:
    """{rule: {problem: program text}} as resolve serves each shape from the shipped file."""
    return {rule: {p: str(resolve(p, ARCH, cls, use_tuned=False, rule=rule,
                                  max_distance=reach).program)
                   for p in readings} for rule in RULES}


def leave_one_out_picks(readings: dict, cls: str, reach: float = MAX_DISTANCE) -> dict:
    """{rule: {problem: program text}} for each shape with a shipped row of `cls`, resolved
    from the shipped file without that shape's rows."""
    book, classes = shipped(), lookup_classes(cls)
    out: dict = {rule: {} for rule in RULES}
    for p in readings:
        if book.exact(cls, p) is None:
            continue
        held_out = ShippedFile([r for r in book.rows if r.problem != p])
        found = shipped_candidates(p, ARCH, classes, held_out, reach)
        for rule in RULES:
            choice = pick(p, found, classes, rule) if found else None
            out[rule][p] = str(choice.program if choice else _heuristic(p))
    return out


def fractions(readings: dict, picks: dict) -> dict:
    """{problem: fraction of the best recorded ratio, or None where the pick was untimed
    (or nothing there measured ok)}."""
    out = {}
    for p, text in picks.items():
        timed = readings[p]
        best = max(timed.values(), default=0.0)
        out[p] = timed[text] / best if text in timed and best > 0 else None
    return out


def summary(fr: dict, shapes) -> str:
    values = [fr[p] for p in shapes if fr[p] is not None]
    geo = math.exp(statistics.fmean(math.log(max(v, 1e-3)) for v in values)) if values else 0
    return (f"timed {len(values)}/{len(shapes)}, geomean {geo:.3f}, "
            f">= {TARGET}: {sum(v >= TARGET for v in values)}")


def report(name: str, readings: dict, picks: dict, rows: list) -> None:
    frs = {rule: fractions(readings, picks[rule]) for rule in RULES}
    shapes = list(picks[RULES[0]])
    common = [p for p in shapes if all(frs[r][p] is not None for r in RULES)]
    print(f"{name}: {len(shapes)} shapes, {len(common)} with every rule's pick timed")
    for rule in RULES:
        print(f"  {rule:8s} all: {summary(frs[rule], shapes)}; "
              f"common: {summary(frs[rule], common)}")
    for p in shapes:
        rows.append({"evaluation": name, "problem": str(p),
                     **{f"{r}_program": picks[r][p] for r in RULES},
                     **{f"{r}_fraction": frs[r][p] for r in RULES}})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--off-grid", help="the off-grid shapes' campaign store (sqlite file)")
    ap.add_argument("--grid", help="the grid campaign's store, for leave-one-out")
    ap.add_argument("--device-class", default="h100", help="the class both stores measured")
    ap.add_argument("--csv", help="write one row per shape and evaluation here")
    ap.add_argument("--reach", type=float, default=MAX_DISTANCE,
                    help="octaves a neighbour may lie from the shape (default: the resolver's)")
    args = ap.parse_args(argv)
    rows: list = []
    if args.off_grid:
        readings = portfolio(args.off_grid)
        report("off-grid", readings, off_grid_picks(readings, args.device_class, args.reach),
               rows)
    if args.grid:
        readings = portfolio(args.grid)
        report("leave-one-out", readings,
               leave_one_out_picks(readings, args.device_class, args.reach), rows)
    if args.csv and rows:
        with Path(args.csv).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
