"""Our measured ratios beside CUDA-L2's published H100 ratios, on the shapes both have.

    python3 benchmarks/vs_cuda_l2.py benchmarks/results/grid_h100.csv.gz [--data FOLDER]
    python3 benchmarks/vs_cuda_l2.py REPORT.csv --protocol call     # any `--report` CSV

Per shape of the results CSV (its best program), prints our ratio to cuBLAS and CUDA-L2's
published one (FOLDER/cuda_l2_h100_published_offline.csv, default ../shared/data, or _server.csv with
`--l2 server`), against cuBLAS's best of NN and TN (their "cuBLAS-max" column) or
torch.matmul (`--against torch`), then both geomeans over the common shapes.

Read it with care: CUDA-L2's figures come from their machine and their timing. Their
"offline" protocol is one call plus synchronize (our `call` protocol, `--protocol call`);
our `kernel` protocol (the default) times graphs of back-to-back launches, which leaves the
host out, so at shapes where a call is mostly host overhead the two protocols' ratios
are not comparable. Only ratios measured in one run against one cuBLAS mean anything on
their own; this table sets two such runs side by side.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import math
import statistics
import sys
import tempfile
from pathlib import Path

from gemmforge.search.measure.report import best_per_shape, read_csv

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COLUMNS = {"cublas": "cuBLAS-max", "torch": "torch.matmul"}


def published(path: Path, column: str) -> dict[tuple[int, int, int], float]:
    """CUDA-L2's ratio per (m, n, k) from one of its published CSVs."""
    with path.open(newline="") as f:
        return {tuple(map(int, row["mnk"].split("_"))): float(row[column])
                for row in csv.DictReader(f)}


def results(path: Path) -> list:
    """The Results of a report CSV, gzipped (.csv.gz, as benchmarks/results keeps them) or not."""
    if path.suffix != ".gz":
        return read_csv(path)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return read_csv(plain)


def geomean(xs) -> float:
    return math.exp(statistics.fmean(map(math.log, xs)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a report CSV (e.g. benchmarks/results/grid_h100.csv.gz)")
    ap.add_argument("--protocol", choices=("kernel", "call"), default="kernel",
                    help="which of our ratios: kernel (graphs) or call (one call + sync)")
    ap.add_argument("--l2", choices=("offline", "server"), default="offline")
    ap.add_argument("--against", choices=tuple(COLUMNS), default="cublas")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of CUDA-L2's CSVs")
    args = ap.parse_args()
    source = args.data / f"cuda_l2_h100_published_{args.l2}.csv"
    if not source.exists():
        print(f"{source} not found (--data names the folder)", file=sys.stderr)
        return 2
    theirs = published(source, COLUMNS[args.against])
    rows = []
    for r in best_per_shape(results(args.results)):
        ours = r.speedup if args.protocol == "kernel" else r.call_speedup
        if ours and (r.m, r.n, r.k) in theirs:
            rows.append((f"{r.m}x{r.n}x{r.k}", ours, theirs[(r.m, r.n, r.k)]))
    if not rows:
        print("no shape in common with a measured ratio")
        return 1
    print(f"{'shape':>18} {'ours':>6} {'CUDA-L2':>8}   (ratio to {COLUMNS[args.against]}; "
          f"ours: {args.protocol} protocol, CUDA-L2: {args.l2})")
    for shape, ours, l2 in rows:
        print(f"{shape:>18} {ours:6.3f} {l2:8.3f}")
    ahead = sum(o > t for _, o, t in rows)
    print(f"{len(rows)} shapes: geomean ours {geomean(r[1] for r in rows):.3f}, CUDA-L2 "
          f"{geomean(r[2] for r in rows):.3f}; ours higher on {ahead}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
