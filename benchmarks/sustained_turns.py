"""Does the sustained protocol's turn length rank programs alike? The same programs at the
same shapes, timed beside cuBLAS with turns of several lengths, in alternation (A B A B: the
GPU's heat and the call's offset fall alike on every length), each run one `gemmforge bench`.

    python3 benchmarks/sustained_turns.py --shapes 16384x4096x12288,8192x8192x12288,16384x12288x4096 \\
        --chosen \\
        --program "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop tma" \\
        --turns 0.25,1 --repeats 2 --name sustained_turns_h100 --report-dir $OUT

Why (benchmarks/NOTES.md, twenty-fifth and twenty-sixth sessions): the large class's rounds
timed 0.25 s turns, and at four shapes its 192x128 c1x1 winners read 0.92-0.99x cuBLAS in two
such fresh calls and 1.03x in `gemmforge bench`'s 1 s turns. The command above (three shapes,
twenty-sixth session) found no consistent effect of the turn: single readings moved by up to
5 % either way. Prints, per shape and program, the sustained ratio (cuBLAS / ours, the mean
over repeats) at each turn length, then each program's geomean; writes <name>.csv (one row
per shape, program and turn length) and keeps every bench run's own CSV beside it.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from gemmforge.search.campaign.grid_report import geomean
from gemmforge.search.measure.records import Result
from gemmforge.search.measure.report import read_csv

FIELDS = ("m", "n", "k", "program", "turn_s", "runs", "sustained_ratio", "kernel_ratio")


def turn_lengths(text: str) -> list[float]:
    """'0.25,1' -> [0.25, 1.0]; each > 0, at least two, none twice."""
    try:
        turns = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--turns: {text!r} is not a comma list of seconds") from None
    if len(turns) < 2 or len(set(turns)) != len(turns) or not all(t > 0 for t in turns):
        raise SystemExit(f"--turns: {text!r}: give two or more different lengths, each > 0")
    return turns


def summarize(readings: list[tuple[float, Result]]) -> list[dict]:
    """(turn length, a bench Result) pairs -> one row per shape, program and turn: the mean
    sustained and kernel ratios (cuBLAS / ours) over the runs that measured it."""
    groups = defaultdict(list)
    for turn, r in readings:
        if not r.ok or r.sustained_speedup is None:
            continue
        groups[(r.m, r.n, r.k, r.program, turn)].append((r.sustained_speedup, r.speedup))
    return [dict(zip(FIELDS, (*key, len(v), statistics.fmean(s for s, _ in v),
                              statistics.fmean(k for _, k in v))))
            for key, v in sorted(groups.items())]


def by_program(rows: list[dict]) -> dict[tuple[str, float], float]:
    """(program, turn length) -> geomean sustained ratio over its shapes."""
    ratios = defaultdict(list)
    for r in rows:
        ratios[(r["program"], r["turn_s"])].append(r["sustained_ratio"])
    return {key: geomean(v) for key, v in ratios.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", required=True, help="as gemmforge bench --shapes")
    ap.add_argument("--program", action="append", default=[], help="as gemmforge bench (repeatable)")
    ap.add_argument("--chosen", action="store_true", help="also the program matmul would run")
    ap.add_argument("--turns", default="0.25,1", help="turn lengths in seconds (0.25,1)")
    ap.add_argument("--repeats", type=int, default=2, help="passes over the lengths (2)")
    ap.add_argument("--rounds", type=int, default=3, help="bench --rounds (3)")
    ap.add_argument("--name", default="sustained_turns")
    ap.add_argument("--report-dir", default=".", help="folder for the CSVs (the current one)")
    args = ap.parse_args(argv)
    turns = turn_lengths(args.turns)
    if args.repeats < 1 or args.rounds < 1:
        raise SystemExit("--repeats and --rounds must be >= 1")
    if not args.program and not args.chosen:
        raise SystemExit("give at least one --program or --chosen")
    out = Path(args.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    readings = []
    for rep in range(args.repeats):
        for turn in turns:
            run = f"{args.name}_{rep + 1}_{turn:g}s"
            cmd = ["gemmforge", "bench", "--shapes", args.shapes, "--protocols", "kernel,sustained",
                   "--rounds", str(args.rounds), "--sustained-seconds", str(turn),
                   "--name", run, "--report-dir", str(out)]
            cmd += [x for p in args.program for x in ("--program", p)]
            cmd += ["--chosen"] if args.chosen else []
            print(f"pass {rep + 1}, {turn:g} s turns", flush=True)
            if subprocess.run(cmd).returncode != 0:
                print(f"{run}: gemmforge bench failed; its CSV, if any, still counts", file=sys.stderr)
            path = out / f"{run}.csv"
            if path.exists():
                readings += [(turn, r) for r in read_csv(path)]
    rows = summarize(readings)
    with (out / f"{args.name}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'shape':>18} {'turn':>5} {'runs':>4} {'sustained':>9} {'kernel':>7}  program")
    for r in rows:
        print(f"{r['m']}x{r['n']}x{r['k']:<6} {r['turn_s']:>5g} {r['runs']:>4} "
              f"{r['sustained_ratio']:>9.3f} {r['kernel_ratio']:>7.3f}  {r['program']}")
    print("\ngeomean sustained ratio by program and turn length:")
    for (program, turn), geo in sorted(by_program(rows).items()):
        print(f"  {turn:>5g} s  {geo:.4f}  {program}")
    print(f"wrote {out / (args.name + '.csv')}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
