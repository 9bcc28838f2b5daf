"""Issue 3's host overhead, taken apart on a GPU: where a gemmforge call's extra µs go.

    python3 benchmarks/host_overhead_gpu.py [--rounds 300] [--json PATH]

Per shape and program, the contenders below run interleaved (each round visits each once),
each timed the way search.measure.bench's call protocol times a call: fresh input values written
and synchronized first (untimed), then wall clock from just before the call to just after
a device-wide synchronize. Median over `--rounds`, in µs:

  torch            torch.matmul(a, b)            (allocates its output)
  torch out=       torch.matmul(a, b, out=c)
  call             kernel(a, b)                  (Kernel.__call__: checks, output, launch)
  call out=        kernel(a, b, out=c)
  launch           kernel.launch(raw pointers)   (no checks, no allocation)
  graph            one launch captured in a CUDA graph, replayed (no host launch path:
                   TMA descriptors were encoded once, at capture)
  torch graph      torch.matmul(a, b, out=c) captured the same way
  sync             torch.cuda.synchronize() alone

and "kernel" / "torch kernel": CUDA events around 200 launches issued back to back from
Python. For kernels shorter than a launch's host time (all the small shapes here) that
measures the host's launch rate, not the GPU, so compare the call columns with each other:
call vs torch is what search.measure.bench's call protocol compares; call out= vs torch out=
leaves out the output allocation; call out= vs launch is gemmforge's Python (launch asks
torch for the current stream, itself a few µs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

import torch  # noqa: E402

from rows import measure_rows  # noqa: E402
from gemmforge.backends.pipeline import compile_and_load  # noqa: E402
from gemmforge.ir import parse, parse_problem  # noqa: E402

SHAPES = ("256x256x256", "64x1024x512", "4096x256x64", "2048x2048x512")
PROGRAMS = (
    "triton sm_90a 64x64x64 w2x2 s4 swnone row/4 pred k1 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 64x64x128 w2x2 s3 swnone row/4 pred k4 dp c1x1 nows direct",
)


def kernel_us(fn, n: int = 200) -> float:
    """Per-launch GPU time of `fn` over n back-to-back launches (warm L2)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def call_sync_us(fn, refill) -> float:
    refill()
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e3


def captured(fn):
    """A CUDA graph holding one call of `fn` (captured on a side stream, after a warm call)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.synchronize()
    return graph


def measure(shape: str, text: str, rounds: int) -> dict[str, float]:
    problem = parse_problem(shape)
    kern = compile_and_load(parse(text), problem)
    a = torch.randn(problem.m, problem.k, device="cuda").half()
    b = torch.randn(problem.k, problem.n, device="cuda").half()
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
    need = kern.workspace_bytes(problem.m, problem.n, problem.k)
    ws = torch.empty(max(need, 1), device="cuda", dtype=torch.uint8)
    ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), problem.m, problem.n, problem.k,
            ws.data_ptr() if need else 0, need)

    def launch():
        kern.launch(*ptrs, torch.cuda.current_stream().cuda_stream)

    graph, torch_graph = captured(launch), captured(lambda: torch.matmul(a, b, out=c))
    contenders = {
        "torch": lambda: torch.matmul(a, b), "torch out=": lambda: torch.matmul(a, b, out=c),
        "call": lambda: kern(a, b), "call out=": lambda: kern(a, b, out=c),
        "launch": launch, "graph": graph.replay, "torch graph": torch_graph.replay,
        "sync": lambda: None}

    def refill():
        a.normal_()
        b.normal_()
    samples = {name: [] for name in contenders}
    for fn in contenders.values():  # warm: allocator, handles, prepared launches
        call_sync_us(fn, refill)
    for _ in range(rounds):
        for name, fn in contenders.items():
            samples[name].append(call_sync_us(fn, refill))
    row = {name: statistics.median(xs) for name, xs in samples.items()}
    row["kernel"] = kernel_us(launch)
    row["torch kernel"] = kernel_us(lambda: torch.matmul(a, b, out=c))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--json", type=Path, help="also write every row here")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of MxNxK")
    args = ap.parse_args()
    cols = ("sync", "torch", "torch out=", "call", "call out=", "launch", "graph",
            "torch graph", "kernel", "torch kernel")
    rows = measure_rows(args.shapes.split(","), PROGRAMS,
                        lambda shape, text: measure(shape, text, args.rounds), cols,
                        lambda t: " ".join(t.split()[2:3] + t.split()[8:10] + t.split()[-1:]), 12)
    over = {name: statistics.median(r[name] - (r["torch kernel"] if "torch" in name
                                               else r["kernel"]) for r in rows.values())
            for name in ("torch", "torch out=", "call", "call out=", "launch")}
    print("median over rows of (call + sync), µs: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in rows.values()):.1f}"
        for k in ("torch out=", "call out=", "launch", "graph", "torch graph")))
    print("median over rows of (call + sync - kernel), µs: "
          + ", ".join(f"{k} {v:.1f}" for k, v in over.items()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
