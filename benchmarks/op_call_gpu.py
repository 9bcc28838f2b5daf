"""Issue 21's call-path target: torch.ops.gemmforge.mm against torch.matmul on the 50
smallest grid shapes, paired in one process.

    python3 benchmarks/op_call_gpu.py [--count 50] [--rounds 200] [--enqueue 1000] \
        [--report-dir DIR] [--name op_call_h100]

Per shape: the program gemmforge.matmul resolves (dispatch.choice: tuned, shipped or the
heuristic's; the line says which) is built (in parallel, before any timing) and registered
with the op by one gemmforge.matmul call; the op's output is checked against an fp32
reference. Then, interleaved round by round in a fresh order each round:
  call + sync   fresh input values written and synchronized (untimed), then wall clock from
                just before the call to just after torch.cuda.synchronize(); median over
                --rounds. Contenders: op (torch.ops.gemmforge.mm(a, b)), torch
                (torch.matmul(a, b)), matmul (gemmforge.matmul(a, b), the Python face).
  enqueue       --enqueue calls back to back with no synchronize between them: host µs per
                call (wall clock of the loop / count), then the synchronize; the better of
                3 tries.
`served` says whether the op ran gemmforge's kernel (its launch entry was registered) or
something else ran (a Triton program: the Python Kernel; the op would fall back).
Writes <report-dir>/<name>.csv and prints the medians and how many shapes meet the target
(op call + sync <= torch's; op enqueue rate >= torch's).
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings
from host_overhead_gpu import call_sync_us  # noqa: E402  (the same call + sync timing)

import gemmforge  # noqa: E402
from gemmforge.ir import Problem

COLUMNS = ("m", "n", "k", "device", "program", "source", "served", "rel_err", "op_call_us",
           "torch_call_us", "matmul_call_us", "call_ratio", "op_enqueue_us",
           "torch_enqueue_us", "enqueue_ratio")


def grid_shapes() -> list[tuple[int, int, int]]:
    """The 1,000 grid shapes (the package's search/data/grid_1000.txt)."""
    text = (resources.files("gemmforge.search") / "data" / "grid_1000.txt").read_text()
    return [tuple(map(int, s.split("x"))) for s in text.split()]


def smallest(count: int) -> list[Problem]:
    """The `count` grid shapes of fewest FLOPs (ties: by m, n, k)."""
    shapes = sorted(grid_shapes(), key=lambda s: (s[0] * s[1] * s[2], s))
    return [Problem(*s) for s in shapes[:count]]


def prebuild(problems: list[Problem]) -> dict:
    """Resolve every shape's program and build them in parallel: {problem: Choice}."""
    from gemmforge.compiler.values import Target
    from gemmforge import ops
    from gemmforge.backends.pipeline import compile
    major, minor = torch.cuda.get_device_capability(0)
    sm = major * 10 + minor
    cls = ops.device_class_of(0)
    choices = {p: ops.choice_for(p, ops._arch_of(sm), cls) for p in problems}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: compile(choices[p].program, p, Target(device_sm=sm)), problems))
    return choices


def enqueue_us(fn, count: int) -> float:
    """Host µs per call over `count` calls issued back to back (best of 3)."""
    best = math.inf
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(count):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / 1e3 / count)
        torch.cuda.synchronize()
    return best


def measure(problem: Problem, choice, rounds: int, count: int, rng: random.Random) -> dict:
    m, n, k = problem.m, problem.n, problem.k
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(k, n, device="cuda").half()
    first = gemmforge.matmul(a, b)  # resolves, builds (cached) and registers the shape
    ref = a.float() @ b.float()
    rel_err = (torch.linalg.norm(first.float() - ref) / torch.linalg.norm(ref)).item()
    served = "op" if torch.ops.gemmforge._registered(m, n, k, 0, 0) else "python kernel"
    contenders = {"op": lambda: torch.ops.gemmforge.mm(a, b), "torch": lambda: torch.matmul(a, b),
                  "matmul": lambda: gemmforge.matmul(a, b)}

    def refill():
        a.normal_()
        b.normal_()
    samples = {name: [] for name in contenders}
    for fn in contenders.values():
        call_sync_us(fn, refill)
    for _ in range(rounds):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            samples[name].append(call_sync_us(contenders[name], refill))
    call = {name: statistics.median(xs) for name, xs in samples.items()}
    enq = {name: enqueue_us(contenders[name], count) for name in ("op", "torch")}
    return {"m": m, "n": n, "k": k, "device": torch.cuda.get_device_name(0),
            "program": str(choice.program), "source": choice.provenance, "served": served,
            "rel_err": rel_err, "op_call_us": call["op"], "torch_call_us": call["torch"],
            "matmul_call_us": call["matmul"], "call_ratio": call["torch"] / call["op"],
            "op_enqueue_us": enq["op"], "torch_enqueue_us": enq["torch"],
            "enqueue_ratio": enq["torch"] / enq["op"]}


def summary(rows: list[dict]) -> str:
    med = {c: statistics.median(r[c] for r in rows)
           for c in ("op_call_us", "torch_call_us", "matmul_call_us", "op_enqueue_us",
                     "torch_enqueue_us")}
    geo = {c: math.exp(statistics.fmean(math.log(r[c]) for r in rows))
           for c in ("call_ratio", "enqueue_ratio")}
    calls_ok = sum(r["op_call_us"] <= r["torch_call_us"] for r in rows)
    enq_ok = sum(r["op_enqueue_us"] <= r["torch_enqueue_us"] for r in rows)
    served = sum(r["served"] == "op" for r in rows)
    return (f"{len(rows)} shapes ({served} served by the op's registered kernel)\n"
            f"call + sync, median µs: op {med['op_call_us']:.1f}, torch {med['torch_call_us']:.1f}, "
            f"gemmforge.matmul {med['matmul_call_us']:.1f}; torch/op geomean "
            f"{geo['call_ratio']:.3f}; op <= torch on {calls_ok}/{len(rows)}\n"
            f"enqueue, median µs per call: op {med['op_enqueue_us']:.2f}, torch "
            f"{med['torch_enqueue_us']:.2f}; torch/op geomean {geo['enqueue_ratio']:.3f}; "
            f"op rate >= torch's on {enq_ok}/{len(rows)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=50, help="smallest grid shapes to time")
    ap.add_argument("--rounds", type=int, default=200, help="call + sync rounds per shape")
    ap.add_argument("--enqueue", type=int, default=1000, help="calls per enqueue-rate try")
    ap.add_argument("--report-dir", type=Path, default=Path("."))
    ap.add_argument("--name", default="op_call", help="CSV name (without .csv)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if min(args.count, args.rounds, args.enqueue) < 1:
        ap.error("--count, --rounds and --enqueue take counts of at least 1")
    problems = smallest(args.count)
    choices = prebuild(problems)
    rng = random.Random(args.seed)
    rows = []
    for p in problems:
        rows.append(measure(p, choices[p], args.rounds, args.enqueue, rng))
        r = rows[-1]
        print(f"{p.shape:>16} {r['source']:>15} {r['served']:>13}  call op {r['op_call_us']:6.1f} "
              f"torch {r['torch_call_us']:6.1f}  enqueue op {r['op_enqueue_us']:5.2f} torch "
              f"{r['torch_enqueue_us']:5.2f}  err {r['rel_err']:.1e}", flush=True)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    path = args.report_dir / f"{args.name}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(summary(rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
