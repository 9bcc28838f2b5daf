"""Does a program's time in a grouped sweep depend on its neighbours? One shape, one program
of interest, timed alone (the program and cuBLAS take turns) and inside the sweep's group in
three orders (as listed, reversed, the program first). Until the fifth 2026-11-22 session
search.measure.timing.interleave visited a group in a fixed order (forward, then backward), so each
program always followed the same two neighbours, and their power draw moved its reading
with the order (benchmarks/NOTES.md); it now uses a new order each round (a seeded shuffle
at first, then search.measure.timing.round_orders' balanced design), and the three orders should
read alike.

    python3 benchmarks/group_bias.py --shape 8192x2048x16384 \
        --program "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c1x1 coop tma" \
        --programs benchmarks/programs/hopper_large_v7.txt [--rounds 5] [--alone-rounds 20]

Prints, per configuration, the program's kernel time, cuBLAS's and the ratio, and the median
ratio change of every other program between the listed and the reversed order.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import check, parse, parse_problem  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True)
    ap.add_argument("--program", required=True, help="the program of interest (text form)")
    ap.add_argument("--programs", type=Path, required=True, help="the sweep's program list")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--alone-rounds", type=int, default=20)
    args = ap.parse_args()
    problem = parse_problem(args.shape)
    target = parse(args.program)
    if check(target, problem) is not None:
        raise SystemExit(f"--program: {check(target, problem)}")
    listed = [p for p in map(parse, (t for t in args.programs.read_text().splitlines()
                                     if t.strip() and t[0] != "#"))
              if check(p, problem) is None]
    if target not in listed:
        listed.append(target)
    orders = {"listed": listed, "reversed": listed[::-1],
              "first": [target, *(p for p in listed if p != target)]}
    rows, ratios = [], {}
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        alone = BenchSettings(protocols=("kernel",), rounds=args.alone_rounds, interleave=False)
        for r in evaluate([target], problem, device_runner=runner, builders=builders,
                          settings=alone):
            rows.append(("alone", r))
        grouped = BenchSettings(protocols=("kernel",), rounds=args.rounds, interleave=True)
        for name, programs in orders.items():
            results = evaluate(programs, problem, device_runner=runner, builders=builders,
                               settings=grouped)
            ratios[name] = {r.program: r.speedup for r in results if r.ok and r.speedup}
            rows += [(name, r) for r in results if r.program == str(target)]
    print(f"{args.shape}: {target}")
    print(f"{'order':>9} {'kernel us':>10} {'cuBLAS us':>10} {'ratio':>7}")
    for name, r in rows:
        if r.ok:
            print(f"{name:>9} {r.kernel_us:10.1f} {r.cublas_us:10.1f} {r.speedup:7.3f}")
        else:
            print(f"{name:>9} failed: {r.message}")
    both = [p for p in ratios["listed"] if p in ratios["reversed"] and p != str(target)]
    if both:
        moves = [ratios["reversed"][p] / ratios["listed"][p] - 1 for p in both]
        print(f"other programs, reversed / listed ratio - 1: median {statistics.median(moves):+.2%}, "
              f"min {min(moves):+.2%}, max {max(moves):+.2%} ({len(moves)} programs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
