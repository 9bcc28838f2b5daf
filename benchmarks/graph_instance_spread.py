"""Issue 3's repeatability, taken apart: does a kernel's time move between two requests
because each request captures its own CUDA graph?

    python3 benchmarks/graph_instance_spread.py [--requests 10] [--shapes 64x1024x512,...]

search.measure.bench's kernel protocol captures a fresh graph of n back-to-back launches per request
and replays it once per round; two requests for the same program differ by up to 3-4 % in
their ratio to cuBLAS (triton_sample v5), and the pairs show cuBLAS's own time moving as
much as the candidate's. Per shape, for cuBLAS (torch.matmul NN) this script times:

  recaptured   `--requests` requests, each with fresh input values, a new graph of n
               launches, one untimed replay, then `--rounds` timed replays (median per
               launch): what search.measure.bench does per request
  one graph    the same number of requests replaying one graph captured once
  spun up      as recaptured, but the GPU kept busy for --spin-ms (the graph replayed back
               to back) just before the timed rounds, so it is not timed coming out of
               the idle gap the refill and capture leave

and prints, for each, the spread over requests ((max - min) / median of the request
medians), and the kernel names the profiler saw in each mode (a change of cuBLAS's kernel
between requests would show as more than one name). The JSON also holds each request's
wall-clock span (time.time()), to line up with a clock log such as
`nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active
--format=csv -lms 20` running beside it.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = ("64x1024x512", "128x4096x512", "2048x2048x512", "4096x1024x64", "1024x1024x1024")
WINDOW_US = 2000.0


def elapsed_us(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def capture(fn, n: int):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(n):
                fn()
    torch.cuda.synchronize()
    graph.replay()
    return graph


def names(graph) -> set[str]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    return {e.name[:70] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def spread(xs: list[float]) -> float:
    mid = statistics.median(xs)
    return (max(xs) - min(xs)) / mid


def measure(shape: str, requests: int, rounds: int, spin_ms: float) -> dict:
    m, n, k = (int(x) for x in shape.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    gemm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    for _ in range(10):  # cuBLAS's handle and workspace, lazy module loading
        gemm()
    probe = capture(gemm, 100)  # launch-rate free: a graph, as search.measure.bench's protocol
    one = elapsed_us(probe.replay) / 100
    del probe
    count = max(3, min(1000, math.ceil(WINDOW_US / one)))
    row = {"launches": count, "recaptured": [], "one graph": [], "spun up": [], "names": set(),
           "spans": []}
    kept = capture(gemm, count)
    for _ in range(requests):
        began = time.time()
        a.normal_()
        b.normal_()
        graph = capture(gemm, count)
        row["names"] |= names(graph)
        row["recaptured"].append(statistics.median(
            elapsed_us(graph.replay) / count for _ in range(rounds)))
        row["one graph"].append(statistics.median(
            elapsed_us(kept.replay) / count for _ in range(rounds)))
        a.normal_()
        b.normal_()
        torch.cuda.synchronize()
        for _ in range(max(1, math.ceil(spin_ms * 1e3 / WINDOW_US))):
            graph.replay()
        row["spun up"].append(statistics.median(
            elapsed_us(graph.replay) / count for _ in range(rounds)))
        row["spans"].append((began, time.time()))
        del graph
    row["names"] = sorted(row["names"])
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--spin-ms", type=float, default=30.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = {}
    print(f"{'shape':>15} {'n':>5} {'µs/launch':>10} {'recaptured':>11} {'one graph':>10} "
          f"{'spun up':>9}  kernels")
    for shape in args.shapes.split(","):
        row = rows[shape] = measure(shape, args.requests, args.rounds, args.spin_ms)
        print(f"{shape:>15} {row['launches']:5d} {statistics.median(row['recaptured']):10.2f} "
              f"{spread(row['recaptured']) * 100:10.2f}% {spread(row['one graph']) * 100:9.2f}% "
              f"{spread(row['spun up']) * 100:8.2f}%  "
              f"{' | '.join(row['names'])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
