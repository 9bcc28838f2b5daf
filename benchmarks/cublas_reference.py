"""Our cuBLAS readings and kernel times beside the H200 reference times of the whole grid.

    python3 benchmarks/cublas_reference.py benchmarks/results/grid_h200_fresh_s28.csv \
        benchmarks/results/large_h200_fresh_s28.csv

The reference (search/data/cublas_h200_grid.csv, a copy of ../shared/data/'s: cuBLAS fp16 with
fp32 accumulate, kernel time, on an H200, best of nn and tn) came from another run with
another protocol. Per FLOP decade over the grid shapes of the results CSVs (each shape's
best program), prints our cuBLAS reading over the reference (above 1: ours read cuBLAS
slower) and the reference over our kernel time (our ratio against that file). Not like for
like: the issue's figures are ratios against cuBLAS in the same group, which this is not.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from gemmforge.ir.program import Problem
from gemmforge.search.campaign.grid_report import decade, geomean
from gemmforge.search.measure.replay import cublas_us
from gemmforge.search.measure.report import best_per_shape, read_csv


def ratios(results) -> dict[str, list[tuple[float, float]]]:
    """{decade: [(our cuBLAS / reference, reference / our kernel)]} over the grid shapes of
    `results` (each shape's best ok program), with "all" for every shape."""
    out: dict[str, list] = defaultdict(list)
    for r in best_per_shape(results):
        reference, recorded = cublas_us(Problem(r.m, r.n, r.k))
        if recorded and r.cublas_us and r.kernel_us:
            pair = (r.cublas_us / reference, reference / r.kernel_us)
            out[decade(r.flops)].append(pair)
            out["all"].append(pair)
    return dict(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, nargs="+", help="results CSVs (benchmarks/results)")
    args = ap.parse_args(argv)
    for path in args.results:
        if not path.exists():
            raise SystemExit(f"{path}: no such file")
    by_decade = ratios([r for path in args.results for r in read_csv(path)])
    if not by_decade:
        print("no grid shape with a cuBLAS and a kernel time")
        return 1
    print(f"{'decade':>7} {'shapes':>6} {'cuBLAS ours/ref':>15} {'ref/kernel':>10}")
    for name in sorted(by_decade, key=lambda d: (d == "all", float(d) if d != "all" else 0)):
        pairs = by_decade[name]
        print(f"{name:>7} {len(pairs):>6} {geomean(p[0] for p in pairs):>15.3f} "
              f"{geomean(p[1] for p in pairs):>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
