"""Issue 3's repeatability: one program timed twice in one run, under several settings.

    python3 benchmarks/repeatability.py [--shapes sample:24:5] [--json PATH]

Per shape, the first program of triton_sample.SWEEP that verify accepts is measured twice
in one batch (search.measure.env.evaluate, kernel protocol, cuBLAS interleaved), once per setting
below. The spread of a pair is |t1 - t2| / mean, for the kernel time and for its ratio to
the interleaved cuBLAS (which cancels clock drift common to both). Printed per setting:
median and max over shapes, the worst shape, and the wall time of one pair's batch.

Two ways a batch is timed (BenchSettings.interleave):
  alone     each request on its own, one after the other, each against its own cuBLAS
            rounds: the two timings are tens of ms apart, so the pair's spread includes the
            GPU's slow spells that last that long (benchmarks/NOTES.md)
  grouped   both requests in one group (search.measure.bench.run_group): every round times both
            copies and cuBLAS, so the pair's spread is the protocol's own noise at one time,
            which is what decides a comparison of two candidates of one batch

Settings: rounds x graph length, statistic, memory, batch:
  5 x 2 ms median               the default rounds, alone (how batches were timed before groups)
  5 x 2 ms median, grouped      the default (what triton_sample, the tuner and evaluate use)
  5 x 2 ms median, grouped, no warm round
                                the default without its unrecorded first round
                                (BenchSettings.warm_rounds; all other settings have one)
  20 x 2 ms median, grouped     four times the rounds
  60 x 1 ms median, grouped     many short windows, grouped
  10 x 10 ms median             longer and more windows, alone
  10 x 10 ms median, grouped    the same, grouped
  10 x 10 ms median, fresh      each request on newly allocated buffers (reuse_operands
                                off: how requests were timed before the worker's pool), alone
  10 x 10 ms min                the fastest window instead of the median, alone
  60 x 1 ms median              many short windows: each round's candidate/cuBLAS pair runs
                                within ~3 ms, so clock swings under the power cap hit both
  120 x 1 ms median             the same, twice the rounds

    python3 benchmarks/repeatability.py --setting "10 x 10 ms median" --setting "60 x 1 ms median"
runs only the named settings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import check, parse  # noqa: E402
from gemmforge.search.measure.shapes import parse_shapes  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from triton_sample import SWEEP  # noqa: E402

_KERNEL = {"protocols": ("kernel",)}
SETTINGS = {
    "5 x 2 ms median": BenchSettings(**_KERNEL, rounds=5, graph_us=2000, interleave=False),
    "5 x 2 ms median, grouped": BenchSettings(**_KERNEL, rounds=5, graph_us=2000),
    "5 x 2 ms median, grouped, no warm round": BenchSettings(**_KERNEL, rounds=5,
                                                            graph_us=2000, warm_rounds=0),
    "20 x 2 ms median, grouped": BenchSettings(**_KERNEL, rounds=20, graph_us=2000),
    "60 x 1 ms median, grouped": BenchSettings(**_KERNEL, rounds=60, graph_us=1000),
    "10 x 10 ms median": BenchSettings(**_KERNEL, rounds=10, graph_us=10000, interleave=False),
    "10 x 10 ms median, grouped": BenchSettings(**_KERNEL, rounds=10, graph_us=10000),
    "10 x 10 ms median, fresh": BenchSettings(**_KERNEL, rounds=10, graph_us=10000,
                                              reuse_operands=False, interleave=False),
    "10 x 10 ms min": BenchSettings(**_KERNEL, rounds=10, graph_us=10000, statistic="min",
                                    interleave=False),
    "60 x 1 ms median": BenchSettings(**_KERNEL, rounds=60, graph_us=1000, interleave=False),
    "120 x 1 ms median": BenchSettings(**_KERNEL, rounds=120, graph_us=1000, interleave=False),
}


def spread(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="sample:24:5")
    ap.add_argument("--json", type=Path, help="also write every pair here")
    ap.add_argument("--setting", action="append", choices=list(SETTINGS),
                    help="a setting to run (repeatable; default: all)")
    args = ap.parse_args()
    chosen = {name: SETTINGS[name] for name in args.setting or SETTINGS}
    pairs: dict[str, list] = {name: [] for name in chosen}
    wall: dict[str, list[float]] = {name: [] for name in chosen}
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        for problem in parse_shapes(args.shapes):
            program = next(p for p in map(parse, SWEEP) if check(p, problem) is None)
            for name, settings in chosen.items():
                start = time.perf_counter()
                r1, r2 = evaluate([program, program], problem, device_runner=runner,
                                  builders=builders, settings=settings)
                wall[name].append(time.perf_counter() - start)
                if r1.ok and r2.ok:
                    pairs[name].append((str(problem), r1.kernel_us, r2.kernel_us,
                                        r1.speedup, r2.speedup))
    for name, rows in pairs.items():
        if not rows:
            print(f"{name}: no pair measured")
            continue
        kernel = [spread(r[1], r[2]) for r in rows]
        ratio = [spread(r[3], r[4]) for r in rows]
        worst = rows[max(range(len(rows)), key=ratio.__getitem__)]
        print(f"{name:26s} over {len(rows)} shapes: kernel time median "
              f"{100 * statistics.median(kernel):.2f}% max {100 * max(kernel):.2f}%; ratio to "
              f"cuBLAS median {100 * statistics.median(ratio):.2f}% max {100 * max(ratio):.2f}% "
              f"({worst[0]}, {worst[1]:.1f} us); "
              f"{1e3 * statistics.median(wall[name]):.0f} ms per pair (median)")
    if args.json:
        args.json.write_text(json.dumps(pairs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
