"""Issue 4's benchmark: the Hopper backends (cuda_wgmma, cute_cpp, triton), best of a small
sweep per shape, against cuBLAS on grid shapes with 2*m*n*k >= 1e11, plus 8192^3.

    python3 benchmarks/hopper_large.py [--count 20] [--seed 4] [--name hopper_large]
    python3 benchmarks/hopper_large.py --shapes 12288x256x16384 \
        --programs benchmarks/programs/hopper_weak.txt --name hopper_weak
    python3 benchmarks/hopper_large.py --winners benchmarks/results/hopper_large_h100_v6.csv \
        --rounds 20 --name hopper_large_h100_v6_confirm     # the winners alone, timed again
    python3 benchmarks/hopper_large.py --winners A.csv B.csv --top 3 --rounds 20 \
        --name shortlist    # each shape's best 3 alone; then --winners <shortlist>.csv
    python3 benchmarks/hopper_large.py --winners A.csv B.csv --top 5 --also C.csv \
        --rounds 20 --name shortlist  # and each shape's winner in C (an earlier confirmation)
    python3 benchmarks/hopper_large.py --all --part 1/3 --name population_1   # every big
        # grid shape, in three runs (each under the GPU machine's ten minutes per command)
    python3 benchmarks/hopper_large.py --report confirm_a.csv confirm_b.csv confirm_c.csv --all
        # no measuring: per shape the median over the runs of each run's best, the geomean
        # of those medians, each run's own (without --all: at the drawn sample only)

Shapes: `--count` grid shapes drawn uniformly (random.Random(seed)) from those with
2*m*n*k >= 1e11, and 8192x8192x8192 always (or the comma list `--shapes`, or `--all` of
them: 187 in the 1,000-shape grid); `--part I/N` keeps every N-th of those from the I-th on,
so N runs share them out with a like mix of sizes. Programs: `--programs` (default
benchmarks/programs/hopper_large.txt, one program text per line, # comments),
each measured with search.measure.env.evaluate (gate, then CUDA-graph kernel time interleaved with
cuBLAS NN/TN in the same process; layout nn, f32 accumulate; a shape's programs timed as one
group unless --alone). Prints per shape the best
program's cuBLAS/kernel ratio, then the geomean and minimum, and 8192^3's TFLOP/s.
Results: benchmarks/results/<name>.csv and .png.
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import check, parse, parse_problem  # noqa: E402
from gemmforge.search.measure.shapes import GRID  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from gemmforge.search.measure.report import best_per_shape, read_csv, write_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

PROGRAMS = Path(__file__).with_name("programs") / "hopper_large.txt"
BIG = "8192x8192x8192"
K_CLASSES = (("K <= 1024", 1, 1024), ("1024 < K <= 4096", 1025, 4096),
             ("K > 4096", 4097, math.inf))  # report: short, middling, long K


def big_shapes() -> list[str]:
    """Every grid shape with 2*m*n*k >= 1e11, 8192^3 first."""
    big = [s for s in GRID.read_text().split()
           if 2 * math.prod(map(int, s.split("x"))) >= 1e11 and s != BIG]
    return [BIG, *big]


def shapes(count: int, seed: int) -> list[str]:
    """8192^3 and `count` others drawn from big_shapes() with random.Random(seed)."""
    return [BIG, *random.Random(seed).sample(big_shapes()[1:], count)]


def part(items: list[str], spec: str) -> list[str]:
    """The I-th of N interleaved parts of `items` ("I/N", 1 <= I <= N)."""
    try:
        i, n = map(int, spec.split("/"))
    except ValueError:
        raise ValueError(f"--part: expected I/N such as 2/3, got {spec!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"--part: I must lie in 1..N, got {spec!r}")
    return items[i - 1::n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--name", default="hopper_large")
    ap.add_argument("--shapes", help="comma list of MxNxK instead of the drawn sample")
    ap.add_argument("--all", action="store_true",
                    help="every grid shape with 2*m*n*k >= 1e11 instead of the drawn sample")
    ap.add_argument("--part", help="I/N: only the I-th of N interleaved parts of the shapes")
    ap.add_argument("--report", type=Path, nargs="+",
                    help="results CSVs: print their summary at the chosen shapes, measure nothing")
    ap.add_argument("--programs", type=Path, default=PROGRAMS, help="program list file")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per request")
    ap.add_argument("--alone", action="store_true",
                    help="time each program on its own, not a shape's programs as one group")
    ap.add_argument("--winners", type=Path, nargs="+",
                    help="results CSVs: time only the best program per shape, by its geomean "
                         "ratio over these runs (a confirmation run: the best of many noisy "
                         "ratios reads high, so report winners measured again)")
    ap.add_argument("--top", type=int, default=1,
                    help="with --winners: time each shape's best N programs (each alone), a "
                         "shortlist whose CSV a later --winners run picks from")
    ap.add_argument("--also", type=Path, nargs="+", default=[],
                    help="with --winners: results CSVs (earlier confirmations) whose best "
                         "program per shape joins that shape's list, so a program the sweeps "
                         "ranked low by chance is still timed")
    args = ap.parse_args()
    texts = [t for t in args.programs.read_text().splitlines() if t.strip() and t[0] != "#"]
    if args.all and args.shapes:
        ap.error("--all and --shapes each choose the shapes; give one")
    chosen = (args.shapes.split(",") if args.shapes
              else big_shapes() if args.all else shapes(args.count, args.seed))
    if args.report:
        kept = set(chosen)
        print(report([[r for r in read_csv(path) if f"{r.m}x{r.n}x{r.k}" in kept]
                      for path in args.report], [path.stem for path in args.report]))
        return 0
    if args.top < 1 or (args.top > 1 and not args.winners):
        ap.error("--top takes a count of at least 1, and only with --winners")
    if args.also and not args.winners:
        ap.error("--also adds to the programs --winners picks; give --winners too")
    runs = [read_csv(path) for path in args.winners or []]
    winners = best_over_runs(runs, args.top) if runs else {}
    add_earlier_winners(winners, [read_csv(path) for path in args.also])
    if winners:
        chosen = [s for s in chosen if s in winners] if args.shapes or args.all else list(winners)
    if args.part:
        try:
            chosen = part(chosen, args.part)
        except ValueError as e:
            ap.error(str(e))
    settings = BenchSettings(protocols=("kernel",), rounds=args.rounds,
                             interleave=not (args.alone or winners))
    start = time.perf_counter()
    results = []
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        for shape in chosen:
            problem = parse_problem(shape)
            candidates = winners[shape] if winners else texts
            programs = [p for p in map(parse, candidates) if check(p, problem) is None]
            results += evaluate(programs, problem, device_runner=runner, builders=builders,
                                settings=settings)
    csv_path, png_path = write_report(results, args.name, RESULTS)
    print(f"wrote {csv_path} and {png_path}")
    print(summary(results))
    print(f"wall time {time.perf_counter() - start:.0f} s "
          f"({'alone' if args.alone or winners else 'grouped'}, {args.rounds} rounds)")
    return 0


def best_over_runs(runs: list[list], top: int = 1) -> dict[str, list[str]]:
    """Per shape "MxNxK", the `top` programs with the highest geomean speedup over `runs`
    (lists of Results), best first, among the programs measured ok at that shape in every
    run that measured the shape (so the parts of one sweep, `--part`, can be given as runs)."""
    ratios: dict[tuple[str, str], list[float]] = {}
    runs_at: dict[str, int] = {}
    for results in runs:
        for shape in {f"{r.m}x{r.n}x{r.k}" for r in results}:
            runs_at[shape] = runs_at.get(shape, 0) + 1
        for r in results:
            if r.ok and r.speedup:
                ratios.setdefault((f"{r.m}x{r.n}x{r.k}", r.program), []).append(r.speedup)
    ranked: dict[str, list[tuple[float, str]]] = {}
    for (shape, program), xs in ratios.items():
        if len(xs) == runs_at[shape]:
            ranked.setdefault(shape, []).append((geomean(xs), program))
    return {shape: [program for _, program in sorted(rows, reverse=True)[:top]]
            for shape, rows in ranked.items()}


def add_earlier_winners(winners: dict[str, list[str]], earlier: list[list]) -> None:
    """Append to each shape's programs in `winners` the best program of each run in
    `earlier` at that shape, where it is not there already."""
    for results in earlier:
        for shape, (program,) in best_over_runs([results]).items():
            if shape in winners and program not in winners[shape]:
                winners[shape].append(program)


def summary(results) -> str:
    best = best_per_shape(results)
    lines = [f"{'shape':>18} {'ratio':>6} {'TFLOP/s':>8} {'cuBLAS':>8}  best program"]
    for r in best:
        lines.append(f"{f'{r.m}x{r.n}x{r.k}':>18} {r.speedup:6.3f} "
                     f"{r.flops / r.kernel_us / 1e6:8.0f} {r.flops / r.cublas_us / 1e6:8.0f}  "
                     f"{r.program}")
    ratios = [r.speedup for r in best]
    if ratios:
        lines.append(f"{len(ratios)} shapes: geomean {geomean(ratios):.3f}, min {min(ratios):.3f}")
    per_backend = {}
    for r in results:
        if r.ok:
            b = parse(r.program).backend
            per_backend.setdefault(b, []).append(r)
    for b, rows in sorted(per_backend.items()):
        lines.append(f"{b}: best-of-backend geomean "
                     f"{_geomean_best(rows):.3f} over {len(best_per_shape(rows))} shapes")
    bad = [r for r in results if not r.ok]
    lines += [f"FAILED {r.m}x{r.n}x{r.k} {r.program}: {r.kind}: {r.message[:160]}" for r in bad]
    return "\n".join(lines)


def geomean(xs) -> float:
    return math.exp(statistics.fmean(map(math.log, xs)))


def report(runs: list[list], names: list[str]) -> str:
    """Earlier runs side by side: per shape the median over the runs that measured it of
    each run's best ratio (a run is one CSV: a confirmation, or one part of a sweep), the
    geomean and minimum of those medians, and each run's own figures."""
    per_shape: dict[str, list] = {}
    lines = [f"{'run':>44} {'shapes':>6} {'geomean':>8} {'min':>6} {'<1':>4} {'<0.98':>6} "
             f"{'8192^3 TFLOP/s (cuBLAS)':>24}"]
    for name, results in zip(names, runs):
        best = best_per_shape(results)
        for r in best:
            per_shape.setdefault(f"{r.m}x{r.n}x{r.k}", []).append(r)
        ratios = [r.speedup for r in best]
        if not ratios:
            lines.append(f"{name:>44} {0:6d}  (no ok results at these shapes)")
            continue
        big = [f"{r.flops / r.kernel_us / 1e6:.0f} ({r.flops / r.cublas_us / 1e6:.0f})"
               for r in best if f"{r.m}x{r.n}x{r.k}" == BIG]
        lines.append(f"{name:>44} {len(ratios):6d} {geomean(ratios):8.4f} {min(ratios):6.3f} "
                     f"{sum(x < 1 for x in ratios):4d} {sum(x < 0.98 for x in ratios):6d} "
                     f"{(big or ['-'])[0]:>24}")
    if not per_shape:
        return "\n".join(lines)
    medians = {shape: statistics.median(r.speedup for r in rs) for shape, rs in per_shape.items()}
    lines.append(f"{'shape':>18} {'median':>7} {'range':>13} {'runs':>4}  program (first run's best)")
    for shape, med in sorted(medians.items(), key=lambda kv: kv[1]):
        rs = per_shape[shape]
        lo, hi = min(r.speedup for r in rs), max(r.speedup for r in rs)
        lines.append(f"{shape:>18} {med:7.3f} {lo:6.3f}-{hi:6.3f} {len(rs):4d}  {rs[0].program}")
    for label, lo, hi in K_CLASSES:
        xs = [v for shape, v in medians.items() if lo <= int(shape.split("x")[2]) <= hi]
        if xs:
            lines.append(f"{label}: {len(xs)} shapes, geomean of the medians {geomean(xs):.4f}, "
                         f"min {min(xs):.3f}")
    lines.append(f"{len(medians)} shapes: geomean of the medians {geomean(medians.values()):.4f}, "
                 f"min {min(medians.values()):.3f}")
    return "\n".join(lines)


def _geomean_best(rows) -> float:
    return geomean(r.speedup for r in best_per_shape(rows))


if __name__ == "__main__":
    sys.exit(main())
