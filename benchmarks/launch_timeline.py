"""Where back-to-back time goes: each launch's start and end on the GPU, ours beside cuBLAS.

    python3 benchmarks/launch_timeline.py --jobs @FILE [--layout nn|nt] [--launches 30] [--replays 5]
        [--spacer] [--pdl-twins] [--json OUT.json]

A job line is `MxNxK program text` (fp32 accumulate; '#' starts a comment); every program is
built first, in parallel. cuBLAS is torch.matmul: NN for layout nn, TN (B given as N x K, a
transposed view) for nt.
Per shape, every listed program (and with --pdl-twins, each one's twin with `pdl` toggled)
and torch.matmul (cuBLAS) each run as a CUDA graph of --launches calls on one stream,
replayed --replays times under torch.profiler (CUPTI kernel records: a record runs from the
kernel's first CTA's start to its last CTA's end). Per call i, from the records of the
calls between the first two and the last one:

  event     the graph's time per call, from CUDA events (what the kernel protocol reads)
  period    start(i+1) - start(i): the steady-state cost of one call back to back
  busy      end(i) - start(i): first CTA in to last CTA out (a pdl kernel's CTAs may start
            early and wait in griddepcontrol.wait, so its busy time includes the overlap)
  gap       start(i+1) - end(i): negative where the next call's CTAs started before this
            one's last CTA ended (pdl, or cuBLAS's own overlap)
  tail      end(i) - max(start(i), end(i-1)): from the previous call's end (or this one's
            start, if later) to this one's end: what the call adds once the one before has
            finished

With --spacer, a small elementwise kernel (a 1 MiB add) runs between the calls, as in a model
where a GEMM follows other work, and its records are left out of the GEMM's; the spacer alone
is timed too, and

  after     event - the spacer alone's event: what the call adds after another kernel

With --pdl-twins, each listed program is timed beside its twin with `pdl` toggled, and the
last lines are geomeans over the shapes of cuBLAS's time / ours for the listed programs and for
the twins, per launch back to back (event) and, with --spacer, after another kernel (after).
Medians in µs. --json keeps every row.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from gemmforge.backends.pipeline import compile_and_load
from gemmforge.ir import parse, parse_problem
from gemmforge.search.measure.timeline import calls_of, pdl_twin, read_jobs, timeline, twin_summary

SPACER_ELEMENTS = 1 << 18  # fp32: 1 MiB


def captured(enqueue, launches: int, spacer) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `launches` x (call, spacer), captured on a side stream after one
    untimed call, and replayed once (the first replay uploads it)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        enqueue()
        spacer()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(launches):
                enqueue()
                spacer()
    g.replay()
    torch.cuda.synchronize()
    return g


def event_us(g: torch.cuda.CUDAGraph, launches: int, replays: int) -> float:
    """Median over `replays` replays of the graph's time per call (CUDA events), in µs."""
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return statistics.median(times)


def build_all(by_shape: dict, layout: str) -> None:
    """Every program at its shape into the artifact cache, in parallel (nvcc runs as a
    subprocess); a failure is left for measure() to report."""
    from concurrent.futures import ThreadPoolExecutor

    from gemmforge.backends import pipeline
    target = pipeline.current_target()

    def build(job):
        shape, text = job
        try:
            pipeline.compile(parse(text), parse_problem(f"{shape} {layout} f32"), target)
        except Exception:  # noqa: BLE001 - measure() builds again and says why
            pass
    jobs = [(shape, t) for shape, progs in by_shape.items() for t in progs.values()]
    with ThreadPoolExecutor(os.cpu_count() or 8) as pool:
        list(pool.map(build, jobs))


def measure(shape: str, contenders: dict, args) -> list[dict]:
    problem = parse_problem(f"{shape} {args.layout} f32")
    nt = args.layout == "nt"
    a = torch.randn(problem.m, problem.k, device="cuda").half()
    b = torch.randn(*((problem.n, problem.k) if nt else (problem.k, problem.n)), device="cuda").half()
    b_blas = b.t() if nt else b
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
    x = torch.zeros(SPACER_ELEMENTS, device="cuda")
    spacer = (lambda: x.add_(1.0)) if args.spacer else (lambda: None)
    reference = a @ b_blas
    rows = []
    alone = None
    if args.spacer:
        alone = event_us(captured(lambda: None, args.launches, spacer), args.launches, args.replays)
    for name, text in contenders.items():
        if text is None:
            enqueue = lambda: torch.matmul(a, b_blas, out=c)  # noqa: E731
        else:
            kern = compile_and_load(parse(text), problem)
            torch.testing.assert_close(kern(a, b), reference, rtol=2e-2, atol=1.0)
            enqueue = lambda kern=kern: kern(a, b, out=c)  # noqa: E731
        g = captured(enqueue, args.launches, spacer)
        row = {"shape": shape, "contender": name, "program": text or "torch.matmul",
               "event": event_us(g, args.launches, args.replays)}
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.replays):
                g.replay()
                torch.cuda.synchronize()
        names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
        spacer_names = {n for n in names if "elementwise" in n or "vectorized" in n}
        row.update(timeline(calls_of(prof, args.launches, args.replays, spacer_names.__contains__)))
        row["after"] = row["event"] - alone if alone is not None else float("nan")
        row["kernels"] = sorted(n[:70] for n in names - spacer_names)
        rows.append(row)
        print(f"{shape:>16} {name:>10} " + " ".join(f"{row[k]:8.2f}" for k in COLS), flush=True)
    return rows


COLS = ("event", "period", "busy", "gap", "tail", "after")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", required=True, help="@FILE of `MxNxK program` lines, or a ';' list")
    ap.add_argument("--layout", choices=("nn", "nt"), default="nn")
    ap.add_argument("--launches", type=int, default=30)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--spacer", action="store_true", help="a 1 MiB add between the calls")
    ap.add_argument("--pdl-twins", action="store_true", help="each program's pdl twin too")
    ap.add_argument("--json", type=Path, help="write every row here")
    args = ap.parse_args()
    by_shape: dict[str, dict[str, str | None]] = {}
    try:
        jobs = read_jobs(args.jobs)
    except (OSError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    for shape, text in jobs:
        progs = by_shape.setdefault(shape, {})
        if text in progs.values():
            continue
        name = f"p{sum(not k.endswith('~') for k in progs)}"
        progs[name] = text
        if args.pdl_twins:
            progs[name + "~"] = pdl_twin(text)
    print(f"{'shape':>16} {'contender':>10} " + " ".join(f"{k:>8}" for k in COLS)
          + "   (pN: the listed program, pN~: its twin with pdl toggled)", flush=True)
    build_all(by_shape, args.layout)
    rows = []
    for shape, progs in by_shape.items():
        rows += measure(shape, {**progs, "cublas": None}, args)
    for shape, progs in by_shape.items():
        for name, text in progs.items():
            print(f"{shape} {name}: {text}")
    if args.pdl_twins:
        print(twin_summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
