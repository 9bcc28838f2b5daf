"""Issue 3's benchmark: Triton (best of a small sweep per shape) against cuBLAS, on a
50-shape sample of the grid, plus host overhead and repeatability.

    python3 benchmarks/triton_sample.py [--shapes sample:50:3] [--name triton_sample]

Sample: `sample:50:3` draws 50 of the 1,000 grid shapes uniformly without replacement with
Python's random.Random(3) (search.measure.shapes.parse_shapes). Per shape, every program of
SWEEP that verify accepts is measured with search.measure.env.evaluate (gate first; kernel time
from CUDA graphs and call time, cuBLAS NN/TN interleaved in the same process). The first
program is measured twice in the same batch for every shape: the difference between the
two is the repeatability figure, for the kernel time and for its ratio to cuBLAS timed
interleaved with it (which cancels the GPU's clock drift between the two). A shape's batch
is timed as one group (BenchSettings.interleave: every round visits every program and
cuBLAS), so the two copies share their rounds; `--alone` times each request on its own
instead, as before groups, and the copies are then tens of ms apart. Host overhead =
call_us - kernel_us, for the candidate and for torch.matmul in the same run. Results:
benchmarks/results/<name>.csv and .png; the summary printed last, with the wall time.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import check, parse  # noqa: E402
from gemmforge.search.measure.shapes import parse_shapes  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from gemmforge.search.measure.report import best_per_shape, write_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

SWEEP = [
    "triton sm_90a 128x256x64 w2x4 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 128x256x64 w2x4 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_90a 64x128x64 w2x2 s4 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_90a 64x64x64 w2x2 s4 swnone row/4 pred k1 dp c1x1 nows direct",
    "triton sm_90a 64x64x128 w2x2 s3 swnone row/4 pred k4 dp c1x1 nows direct",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="sample:50:3")
    ap.add_argument("--name", default="triton_sample")
    ap.add_argument("--rounds", type=int, default=20,
                    help="timing rounds per request (BenchSettings' default is 5: "
                         "repeatability.py measures what more rounds buy)")
    ap.add_argument("--graph-us", type=float, default=2000.0,
                    help="length of one timed CUDA graph of back-to-back launches")
    ap.add_argument("--call-repeats", type=int, default=5,
                    help="Python calls per round of the call protocol (host overhead)")
    ap.add_argument("--alone", action="store_true",
                    help="time each request on its own, not a shape's batch as one group")
    args = ap.parse_args()
    settings = BenchSettings(protocols=("kernel", "call"), rounds=args.rounds,
                             call_repeats=args.call_repeats,
                             graph_us=args.graph_us, interleave=not args.alone)
    start = time.perf_counter()
    results = []
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        for problem in parse_shapes(args.shapes):
            programs = [p for p in map(parse, SWEEP) if check(p, problem) is None]
            results += evaluate([programs[0], *programs], problem, device_runner=runner,
                                builders=builders, settings=settings)
    csv_path, png_path = write_report(results, args.name, RESULTS)
    print(f"wrote {csv_path} and {png_path}")
    print(summary(results))
    print(f"wall time {time.perf_counter() - start:.0f} s "
          f"({'alone' if args.alone else 'grouped'}), measuring "
          f"{sum(r.measure_s or 0 for r in results):.0f} s")
    return 0


def _geomean(xs) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def summary(results) -> str:
    best = best_per_shape(results)
    by_decade = defaultdict(list)
    for r in best:
        by_decade[int(math.log10(r.flops))].append(r.speedup)
    lines = ["decade  shapes  geomean(cuBLAS/kernel)  min    max"]
    for d in sorted(by_decade):
        xs = by_decade[d]
        lines.append(f"1e{d:<5} {len(xs):6d}  {_geomean(xs):22.3f}  {min(xs):.3f}  {max(xs):.3f}")
    big = [r.speedup for r in best if r.flops >= 1e11]
    lines.append(f">=1e11  {len(big):6d}  {_geomean(big):22.3f}")
    over = [(r.call_us - r.kernel_us, r.cublas_call_us - r.cublas_us) for r in best
            if r.call_us and r.cublas_call_us]
    if over:
        ours, torch_ = statistics.median(o[0] for o in over), statistics.median(o[1] for o in over)
        lines.append(f"host overhead per call (median over shapes): gemmforge {ours:.1f} us, "
                     f"torch.matmul {torch_:.1f} us")
        for kind, rows in sorted(_by_launch_kind(best).items()):
            lines.append(f"  best program {kind:>7} ({len(rows):2d} shapes): gemmforge "
                         f"{statistics.median(r.call_us - r.kernel_us for r in rows):.1f} us, "
                         f"torch.matmul "
                         f"{statistics.median(r.cublas_call_us - r.cublas_us for r in rows):.1f} us")
    lines.append(f"repeatability (same program twice, |t1 - t2| / mean): {_repeat(results)}")
    failed = [r for r in results if not r.ok]
    lines += [f"FAILED {r.m}x{r.n}x{r.k} {r.program}: {r.kind}: {r.message[:160]}"
              for r in failed[:10]]
    return "\n".join(lines)


def _by_launch_kind(best) -> dict[str, list]:
    """The shapes' best results by what one call launches: "tma" (host-encoded
    descriptors), "split-K" (a GEMM and a reduce kernel), or "direct" (one kernel)."""
    kinds = defaultdict(list)
    for r in best:
        if r.call_us and r.cublas_call_us:
            program = parse(r.program)
            kind = "split-K" if program.split_k.slices > 1 else \
                "tma" if program.epilogue.value == "tma" else "direct"
            kinds[kind].append(r)
    return kinds


def _repeat(results) -> str:
    pairs = defaultdict(list)
    for r in results:
        if r.ok:
            pairs[(r.m, r.n, r.k, r.program)].append(r)
    twice = [rs for rs in pairs.values() if len(rs) == 2]
    if not twice:
        return "n/a"

    def spread(values) -> str:
        diffs = [abs(a - b) / ((a + b) / 2) for a, b in values]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        r = twice[worst][0]
        return (f"median {100 * statistics.median(diffs):.2f}%, max {100 * diffs[worst]:.2f}% "
                f"({r.m}x{r.n}x{r.k}, {r.kernel_us:.1f} us)")
    return (f"over {len(twice)} shapes: kernel time {spread([(a.kernel_us, b.kernel_us) for a, b in twice])}; "
            f"ratio to cuBLAS {spread([(a.speedup, b.speedup) for a, b in twice])}")


if __name__ == "__main__":
    sys.exit(main())
