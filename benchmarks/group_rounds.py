"""Issue 3's repeatability, taken apart: every round of a group that times one program twice.

    python3 benchmarks/group_rounds.py [--shapes 4096x512x8192,...] [--groups 4] [--json PATH]

repeatability.py's grouped settings time two copies of one program in the same rounds
(search.measure.bench.run_group), yet a few shapes' copies still differ by 3-6 %. This prints, per
shape and group, each round's time per launch of copy 0, copy 1 and cuBLAS's best layout
(as a fraction of that contender's median over the group), so one can see whether one
round, a stretch of rounds, or one copy throughout makes the difference. The program is
the first of triton_sample.SWEEP that verify accepts, built in this process; timing is
search.measure.bench.run_group's own, with the kernel protocol only.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import check, parse, parse_problem  # noqa: E402
from gemmforge.search.measure import bench, timing  # noqa: E402
from gemmforge.search.measure.records import BenchSettings, MeasureRequest  # noqa: E402
from gemmforge.search.measure.worker import build_one  # noqa: E402
from triton_sample import SWEEP  # noqa: E402

SHAPES = "4096x512x8192,512x4096x8192,8192x16384x1024,512x12288x64"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--groups", type=int, default=4, help="groups timed per shape")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--graph-us", type=float, default=10000.0)
    ap.add_argument("--json", type=Path, help="also write every round here")
    args = ap.parse_args()
    info = bench.setup(0)
    settings = BenchSettings(protocols=("kernel",), rounds=args.rounds, graph_us=args.graph_us)
    captured, protocol = [], timing.kernel_protocol

    def recording(cs, *rest):
        samples = protocol(cs, *rest)
        captured.append(samples)
        return samples
    timing.kernel_protocol = recording
    out = {}
    for text in args.shapes.split(","):
        problem = parse_problem(text)
        program = next(p for p in map(parse, SWEEP) if check(p, problem) is None)
        reqs = [MeasureRequest.make(program, problem, settings, seed=s) for s in (0, 3)]
        art = build_one(reqs[0], info["sm"])
        out[text] = []
        for g in range(args.groups):
            r0, r1 = bench.run_group(reqs, [art, art])
            s = captured[-1]
            blas = [min(a, b) for a, b in zip(s["cublas_nn"], s["cublas_tn"])]
            rows = {"copy0": s["candidate0"], "copy1": s["candidate1"], "cublas": blas}
            out[text].append(rows)
            print(f"{text} group {g}: copy0 {r0.kernel_us:.1f} us, copy1 {r1.kernel_us:.1f} us "
                  f"({100 * (r0.kernel_us / r1.kernel_us - 1):+.2f} %), speedups "
                  f"{r0.speedup:.3f} / {r1.speedup:.3f}")
            for name, xs in rows.items():
                mid = statistics.median(xs)
                print(f"    {name:6s} " + " ".join(f"{x / mid:.3f}" for x in xs))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
