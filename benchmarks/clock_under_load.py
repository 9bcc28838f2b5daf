"""What the GPU's clock allows at one shape: our program and cuBLAS, each run back to back
for some seconds while nvidia-smi samples the SM clock and the power draw, then the
TFLOP/s each reached beside what a tensor pipe busy every cycle would give at the clock
the GPU held meanwhile (the ceiling no kernel passes at that clock).

    python3 benchmarks/clock_under_load.py --shape 8192x8192x8192 \\
        --program "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma" \\
        --seconds 6 --turns 2 --name clock_8192_h100

Turns alternate (ours, cuBLAS, ours, cuBLAS, ...) so that heat builds up alike for both.
Per turn: the median TFLOP/s over batches of launches timed with CUDA events, the median SM
clock and mean power over the samples taken meanwhile, and the pipe's share that TFLOP/s
needs at that clock (dense fp16 on sm_90: 4096 FLOP per SM per cycle -- H100 SXM's 989.4
TFLOP/s at 1830 MHz over 132 SMs). The summary takes each side's turns after the first
(which starts below the power cap). `--winners CSV` does this for every shape's best
program in a results CSV, one shape after another (`--program P --shapes LIST`: for one
program at several shapes), and adds the geomean of the ratios.
Results: benchmarks/results/<name>.json.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.ir import IRError, check, parse, parse_problem  # noqa: E402

FLOP_PER_SM_CYCLE = 4096   # dense fp16 wgmma, sm_90 (989.4e12 / (132 * 1.83e9))
RESULTS = Path(__file__).with_name("results")
QUERY = "clocks.sm,power.draw,temperature.gpu"


class Sampler:
    """nvidia-smi's SM clock (MHz), power (W) and temperature (C) every `period_ms`."""

    def __init__(self, period_ms: int):
        self.period_ms, self.rows, self._proc = period_ms, [], None

    def __enter__(self):
        self._proc = subprocess.Popen(
            ["nvidia-smi", "-i", "0", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
             f"-lms={self.period_ms}"], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            try:
                self.rows.append(tuple(float(x) for x in line.split(",")))
            except ValueError:
                continue  # "[N/A]" and the like

    def __exit__(self, *exc):
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._reader.join(timeout=10)


def run_turn(fn, flops: float, seconds: float, batch: int, period_ms: int) -> dict:
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    with Sampler(period_ms) as sampler:
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            rates.append(flops * batch / (start.elapsed_time(end) * 1e-3) / 1e12)
    if not sampler.rows:
        raise RuntimeError("nvidia-smi gave no samples; is it on PATH?")
    clock = statistics.median(r[0] for r in sampler.rows)
    return {"tflops": statistics.median(rates), "batches": len(rates),
            "sm_clock_mhz": clock, "power_w": statistics.fmean(r[1] for r in sampler.rows),
            "temp_c": max(r[2] for r in sampler.rows), "samples": len(sampler.rows)}


def measure(problem, program, args) -> dict:
    """Turns of `program` and cuBLAS at `problem`, alternating. Raises SystemExit if the
    program's output is wrong, RuntimeError (compiler.values.BuildError among them) if it fails to
    build or launch."""
    import torch
    from gemmforge.backends.pipeline import compile_and_load
    kernel = compile_and_load(program, problem)
    m, n, k = problem.m, problem.n, problem.k
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    ours_out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    ref_out = torch.empty_like(ours_out)
    kernel(a, b, out=ours_out)
    torch.matmul(a, b, out=ref_out)
    err = ((ours_out.float() - ref_out.float()).norm() / ref_out.float().norm()).item()
    if not err < 5e-3:
        raise SystemExit(f"{program} at {problem.shape}: relative error {err:.2e}, not timed")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flops = 2.0 * m * n * k
    runs = {"ours": lambda: kernel(a, b, out=ours_out),
            "cublas": lambda: torch.matmul(a, b, out=ref_out)}
    turns = []
    for turn in range(args.turns):
        for who, fn in runs.items():
            row = {"turn": turn, "who": who,
                   **run_turn(fn, flops, args.seconds, args.batch, args.sample_ms)}
            row["ceiling_tflops"] = sms * FLOP_PER_SM_CYCLE * row["sm_clock_mhz"] * 1e6 / 1e12
            row["pipe_share"] = row["tflops"] / row["ceiling_tflops"]
            turns.append(row)
            print(f"{problem.shape} turn {turn} {who:6s} {row['tflops']:6.0f} TFLOP/s at "
                  f"{row['sm_clock_mhz']:5.0f} MHz, {row['power_w']:4.0f} W, {row['temp_c']:3.0f} C: "
                  f"ceiling {row['ceiling_tflops']:4.0f}, pipe {row['pipe_share']:.3f}", flush=True)
    del a, b, ours_out, ref_out
    return {"shape": problem.shape, "program": str(program), "rel_err": err,
            "device": torch.cuda.get_device_name(0), "sms": sms, "turns": turns}


def settled(turns: list[dict], who: str) -> list[dict]:
    """`who`'s turns after the first where there are several (the first starts below the
    power cap, from a cooler chip)."""
    rows = [t for t in turns if t["who"] == who]
    return rows[1:] if len(rows) > 1 else rows


def summary(results: list[dict]) -> str:
    lines = [f"{'shape':>18} {'ours':>6} {'MHz':>5} {'cuBLAS':>6} {'MHz':>5} {'ratio':>6}  program"]
    ratios = []
    for r in results:
        ours, theirs = settled(r["turns"], "ours"), settled(r["turns"], "cublas")
        t_ours = statistics.median(t["tflops"] for t in ours)
        t_cublas = statistics.median(t["tflops"] for t in theirs)
        ratios.append(t_ours / t_cublas)
        lines.append(f"{r['shape']:>18} {t_ours:6.0f} "
                     f"{statistics.median(t['sm_clock_mhz'] for t in ours):5.0f} {t_cublas:6.0f} "
                     f"{statistics.median(t['sm_clock_mhz'] for t in theirs):5.0f} "
                     f"{ratios[-1]:6.3f}  {r['program']}")
    if len(ratios) > 1:
        geo = math.exp(statistics.fmean(map(math.log, ratios)))
        lines.append(f"{len(ratios)} shapes under load: geomean {geo:.3f}, min {min(ratios):.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8192x8192x8192")
    ap.add_argument("--program", help="program text (layout nn, f32 accumulate)")
    ap.add_argument("--winners", type=Path,
                    help="a results CSV instead of --shape/--program: each shape's best program")
    ap.add_argument("--shapes", help="comma list of MxNxK: with --winners, only these; with "
                                     "--program, the program at each (instead of --shape)")
    ap.add_argument("--seconds", type=float, default=6.0, help="per turn")
    ap.add_argument("--turns", type=int, default=2, help="turns each, alternating")
    ap.add_argument("--batch", type=int, default=10, help="launches per timed batch")
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--name", default="clock_under_load")
    args = ap.parse_args()
    if args.seconds <= 0 or args.turns < 1 or args.batch < 1:
        ap.error("--seconds must be positive, --turns and --batch at least 1")
    if (args.program is None) == (args.winners is None):
        ap.error("give --program (with --shape) or --winners")
    try:
        if args.winners:
            from gemmforge.search.measure.report import best_per_shape, read_csv
            best = {f"{r.m}x{r.n}x{r.k}": r.program for r in best_per_shape(read_csv(args.winners))}
            wanted = args.shapes.split(",") if args.shapes else list(best)
            missing = [shape for shape in wanted if shape not in best]
            if missing:
                ap.error(f"--shapes: not in {args.winners}: {', '.join(missing)}")
            jobs = [(parse_problem(shape), parse(best[shape])) for shape in wanted]
        else:
            program = parse(args.program)
            jobs = [(parse_problem(shape), program)
                    for shape in (args.shapes.split(",") if args.shapes else [args.shape])]
    except (IRError, OSError) as e:
        ap.error(str(e))
    for problem, program in jobs:
        why = check(program, problem)
        if why:
            ap.error(f"{program} can't run {problem.shape}: {why}")
    out = RESULTS / f"{args.name}.json"
    results, failed = [], []
    for problem, program in jobs:  # the file is rewritten after every shape: a crash keeps the rest
        try:
            results.append(measure(problem, program, args))
        except (SystemExit, RuntimeError) as e:  # a wrong output, a failed build or launch
            print(f"{problem.shape}: not timed: {e}", flush=True)
            failed.append({"shape": problem.shape, "program": str(program), "error": str(e)})
        out.write_text(json.dumps(results[0] if len(jobs) == 1 and results
                                  else results + failed, indent=1))
    print(f"wrote {out}")
    if results:
        print(summary(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
