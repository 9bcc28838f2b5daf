"""Issue 20's benchmark: small and medium GEMMs (2mnk < 1e11) and LLM-layer shapes against
cuBLAS, with L2 warm (kernel) and L2 cold (operands flushed from L2 before each launch).

    python3 benchmarks/small_medium.py --sample 15 --seed 20 --programs P.txt --name sm
    python3 benchmarks/small_medium.py --llm --layout nt --programs P.txt --name llm
    python3 benchmarks/small_medium.py --shapes 1x4096x4096,77x4096x4096 --layout nt ...
    python3 benchmarks/small_medium.py --report a.csv b.csv      # summarise, measure nothing
    python3 benchmarks/small_medium.py --sample 24 --part 1/2 ...  # half the shapes per call
    python3 benchmarks/small_medium.py --winners p1.csv p2.csv --name confirm
        # each shape's best program of those runs (warm), timed again beside cuBLAS (the
        # best of many noisy readings reads high: quote the confirmation)

Shapes: `--sample N` draws N grid shapes per FLOP decade (floor(log10(2mnk)), 1e5..1e10)
with random.Random(seed), all of a decade where it has fewer; `--llm` takes Llama-class
projection layers (N x K of 6144x4096 qkv, 4096x4096 o, 28672x4096 gate+up, 4096x14336
down) at M in LLM_TOKENS; `--shapes` a comma list. Programs: each line of `--programs`
that verify accepts for the shape, plus the heuristic's program for it (`--heuristic`,
on by default), timed as one group per shape (search.measure.env.evaluate: correctness gate, then
CUDA-graph kernel and cold protocols interleaved with cuBLAS NN/TN in the same process).

Prints per shape the best program's ratio (cuBLAS time / ours) warm and cold, the
heuristic's ratio, and per FLOP decade the geomeans. Results: <report-dir>/<name>.csv.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hopper_large import best_over_runs, geomean, part  # noqa: E402

from gemmforge.ir import check, parse, parse_problem  # noqa: E402
from gemmforge.ir.program import Arch  # noqa: E402
from gemmforge.policy.heuristic import default_program  # noqa: E402
from gemmforge.search.measure.shapes import GRID  # noqa: E402
from gemmforge.search.measure.env import evaluate  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from gemmforge.search.measure.report import read_csv, write_report  # noqa: E402

LARGE_FLOPS = 1e11            # the large class starts here (benchmarks/hopper_large.py)
LLM_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
LLM_LAYERS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))  # (N, K)


def flops(shape: str) -> float:
    return 2 * math.prod(map(int, shape.split("x")))


def decade(shape: str) -> int:
    return int(math.floor(math.log10(flops(shape))))


def sample(per_decade: int, seed: int) -> list[str]:
    """`per_decade` grid shapes below LARGE_FLOPS from each FLOP decade, drawn with seed."""
    by_decade = defaultdict(list)
    for s in GRID.read_text().split():
        if flops(s) < LARGE_FLOPS:
            by_decade[decade(s)].append(s)
    rng = random.Random(seed)
    return [s for d in sorted(by_decade)
            for s in sorted(rng.sample(by_decade[d], min(per_decade, len(by_decade[d]))),
                            key=flops)]


def llm_shapes() -> list[str]:
    return [f"{m}x{n}x{k}" for n, k in LLM_LAYERS for m in LLM_TOKENS]


def summary(results, heuristic: dict[str, str]) -> str:
    """Per shape: best warm ratio and its program, the cold ratio of the best-cold program,
    the heuristic program's warm ratio; then geomeans per FLOP decade and overall."""
    by_shape = defaultdict(list)
    for r in results:
        if r.ok and r.speedup:
            by_shape[f"{r.m}x{r.n}x{r.k}"].append(r)
    lines = [f"{'shape':>16} {'warm':>6} {'cold':>6} {'heur':>6} {'cuBLAS us':>9} {'cold us':>8}"
             f"  best warm program"]
    per_decade = defaultdict(lambda: ([], [], []))
    for shape in sorted(by_shape, key=flops):
        rows = by_shape[shape]
        warm = max(rows, key=lambda r: r.speedup)
        colds = [r for r in rows if r.cold_us and r.cublas_cold_us]
        cold = max(colds, key=lambda r: r.cublas_cold_us / r.cold_us) if colds else None
        cold_ratio = cold.cublas_cold_us / cold.cold_us if cold else float("nan")
        heur = [r.speedup for r in rows if r.program == heuristic.get(shape)]
        heur_ratio = heur[0] if heur else float("nan")
        d = per_decade[decade(shape)]
        d[0].append(warm.speedup)
        if cold:
            d[1].append(cold_ratio)
        if heur:
            d[2].append(heur_ratio)
        lines.append(f"{shape:>16} {warm.speedup:6.3f} {cold_ratio:6.3f} {heur_ratio:6.3f} "
                     f"{warm.cublas_us:9.2f} {cold.cublas_cold_us if cold else float('nan'):8.2f}"
                     f"  {warm.program}")
    lines.append(f"{'decade':>8} {'shapes':>6} {'warm':>6} {'cold':>6} {'heur':>6}")
    everything = ([], [], [])
    for d, cols in sorted(per_decade.items()):
        lines.append(f"{'1e%d' % d:>8} {len(cols[0]):6d} "
                     + " ".join(f"{geomean(c) if c else float('nan'):6.3f}" for c in cols))
        for acc, c in zip(everything, cols):
            acc.extend(c)
    lines.append(f"{'all':>8} {len(everything[0]):6d} "
                 + " ".join(f"{geomean(c) if c else float('nan'):6.3f}" for c in everything))
    failed = [r for r in results if not r.ok]
    lines.append(f"{len(failed)} failed candidates"
                 + "".join(f"\n  FAILED {r.m}x{r.n}x{r.k} {r.program}: {r.kind}: {r.message[:140]}"
                           for r in failed[:8]))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, help="grid shapes per FLOP decade below 1e11")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--llm", action="store_true", help="the LLM-layer shapes")
    ap.add_argument("--shapes", help="comma list of MxNxK")
    ap.add_argument("--layout", choices=("nn", "nt"), default="nn")
    ap.add_argument("--acc", choices=("f32", "f16"), default="f32")
    ap.add_argument("--programs", type=Path, help="program list file (# comments)")
    ap.add_argument("--no-heuristic", action="store_true", help="leave the heuristic's program out")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per protocol")
    ap.add_argument("--protocols", default="kernel,cold")
    ap.add_argument("--part", help="I/N: only the I-th of N interleaved parts of the shapes")
    ap.add_argument("--name", default="small_medium")
    ap.add_argument("--report-dir", type=Path, default=Path("."))
    ap.add_argument("--report", type=Path, nargs="+", help="results CSVs: summarise, measure nothing")
    ap.add_argument("--winners", type=Path, nargs="+",
                    help="results CSVs: time each shape's best program of these runs again")
    args = ap.parse_args()
    if args.report:
        rows = [r for path in args.report for r in read_csv(path)]
        print(summary(rows, {}))
        return 0
    winners = best_over_runs([read_csv(path) for path in args.winners]) if args.winners else {}
    chosen = (list(winners) + (args.shapes.split(",") if args.shapes else [])
              + (sample(args.sample, args.seed) if args.sample else [])
              + (llm_shapes() if args.llm else []))
    if not chosen:
        ap.error("choose shapes: --sample N, --llm or --shapes")
    if args.part:
        try:
            chosen = part(chosen, args.part)
        except ValueError as e:
            ap.error(str(e))
    texts = ([t.strip() for t in args.programs.read_text().splitlines()
              if t.strip() and not t.startswith("#")] if args.programs else [])
    settings = BenchSettings(protocols=tuple(args.protocols.split(",")), rounds=args.rounds)
    heuristic, results = {}, []
    start = time.perf_counter()
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        for i, shape in enumerate(chosen):
            problem = parse_problem(f"{shape} {args.layout} {args.acc}")
            programs = [p for p in map(parse, winners.get(shape, []) + texts)
                        if check(p, problem) is None]
            if not args.no_heuristic:
                h = default_program(problem, Arch.SM90A)
                heuristic[shape] = str(h)
                programs = [h] + [p for p in programs if p != h]
            results += evaluate(programs, problem, device_runner=runner, builders=builders,
                                settings=settings)
            print(f"[{i + 1}/{len(chosen)}] {shape}: {len(programs)} programs, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    csv_path, _ = write_report(results, args.name, args.report_dir)
    print(f"wrote {csv_path}")
    print(summary(results, heuristic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
