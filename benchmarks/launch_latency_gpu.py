"""Issue 3's last few µs: how long a GEMM kernel runs on the GPU when it runs alone, the way
search.measure.bench's call protocol runs it, against its time back to back.

    python3 benchmarks/launch_latency_gpu.py [--rounds 40] [--shapes 256x256x256,...]

host_overhead_gpu.py found gemmforge's host path at or below torch.matmul's, but one launch
replayed from a CUDA graph still 1.5-8 µs slower for our Triton kernels than for cuBLAS's.
This script asks the GPU directly (torch.profiler, CUPTI kernel records) per shape and
program, for each contender:

  alone    the kernel's duration in the call protocol: refill a and b (normal_),
           synchronize, one call, synchronize; median over --rounds
  b2b      its duration in a run of 20 calls back to back (median)
  start    alone - b2b: what running cold (after the refill kernels, idle SMs) adds
  gap      in a CUDA graph holding the refill and one call, replayed: from the last refill
           kernel's end to the GEMM's first kernel's start (no host in between, so this
           is the GPU's own launch latency, including any work before the first CTA starts)

Contenders: the gemmforge program; the same with its functions' preferred shared-memory
carve-out set to the maximum (cuFuncSetAttribute, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_
MEMORY_CARVEOUT = 100), to test whether reconfiguring the L1/shared split between the
refill kernels (no shared memory) and ours is the cost; and torch.matmul (cuBLAS).
A kernel record's duration runs from its first CTA's start to its last CTA's end, so the
launch path before it is not in these figures; "start" is what the kernel itself pays.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from rows import measure_rows  # noqa: E402
from gemmforge.backends.pipeline import compile_and_load  # noqa: E402
from gemmforge.ir import parse, parse_problem  # noqa: E402

SHAPES = ("256x256x256", "1024x1024x1024", "2048x2048x512")
PROGRAMS = (
    "triton sm_90a 64x64x64 w2x2 s4 swnone row/4 pred k1 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 persistent c1x1 nows tma",
)
REFILL_WORDS = ("normal", "distribution")  # the refill kernels' names (torch's normal_)
B2B_CALLS = 20
CARVEOUT_ATTRIBUTE = 9      # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
CARVEOUT_MAX_SHARED = 100   # percent of the unified L1/shared array given to shared memory


def gemm_kernels(prof) -> list[tuple[float, str, float]]:
    """(start, name, µs) of every kernel in `prof` that is not a refill kernel."""
    out = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if any(w in e.name for w in REFILL_WORDS):
            continue
        out.append((e.time_range.start, e.name, e.device_time))
    return sorted(out)


def per_call(kernels: list, calls: int) -> list[float]:
    """Each call's GPU time: its kernels' durations summed (split-K runs two)."""
    if not kernels or len(kernels) % calls:
        raise RuntimeError(f"{len(kernels)} GEMM kernel records for {calls} calls")
    per = len(kernels) // calls
    return [sum(d for _, _, d in kernels[i * per:(i + 1) * per]) for i in range(calls)]


def profiled(fn, calls: int, before=None) -> tuple[float, str]:
    """(median GPU µs per call, the first GEMM kernel's name) over `calls` calls of `fn`
    under the profiler after a warm one; with `before`, each call is alone: before(),
    synchronize, call, synchronize."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if before:
                before()
                torch.cuda.synchronize()
            fn()
            if before:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    kernels = gemm_kernels(prof)
    return statistics.median(per_call(kernels, calls)), kernels[0][1]



def gap_us(fn, refill, rounds: int) -> float:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        refill()
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            refill()
            fn()
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            graph.replay()
            torch.cuda.synchronize()
    records = sorted((e.time_range.start, e.time_range.end, any(w in e.name for w in REFILL_WORDS))
                     for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    gaps = [start - records[i - 1][1] for i, (start, _, is_refill) in enumerate(records)
            if i and not is_refill and records[i - 1][2]]
    if len(gaps) != rounds:
        raise RuntimeError(f"{len(gaps)} refill -> GEMM gaps in {rounds} replays")
    return statistics.median(gaps)


def set_carveout(kernel, percent: int) -> int:
    """Set the preferred carve-out on every function the Triton kernel has launched;
    returns how many were set."""
    cuda = ctypes.CDLL("libcuda.so.1")
    done = 0
    for prepared in kernel._prepared.values():
        for step in prepared.launches:
            err = cuda.cuFuncSetAttribute(ctypes.c_void_p(step.function),
                                          ctypes.c_int(CARVEOUT_ATTRIBUTE), ctypes.c_int(percent))
            if err:
                raise RuntimeError(f"cuFuncSetAttribute: CUresult {err}")
            done += 1
    return done


def measure(shape: str, text: str, rounds: int) -> dict:
    problem = parse_problem(shape)
    kern = compile_and_load(parse(text), problem)
    a = torch.randn(problem.m, problem.k, device="cuda").half()
    b = torch.randn(problem.k, problem.n, device="cuda").half()
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
    ours, theirs = (lambda: kern(a, b, out=c)), (lambda: torch.matmul(a, b, out=c))
    torch.testing.assert_close(kern(a, b), a @ b, rtol=2e-2, atol=1.0)

    def refill():
        a.normal_()
        b.normal_()
    row = {}
    for label, fn in (("ours", ours), ("torch", theirs)):
        row[f"{label} alone"], row[f"{label} kernel"] = profiled(fn, rounds, refill)
        row[f"{label} b2b"] = profiled(fn, B2B_CALLS)[0]
        row[f"{label} gap"] = gap_us(fn, refill, rounds)
    row["carve functions"] = set_carveout(kern, CARVEOUT_MAX_SHARED)
    row["carve alone"], _ = profiled(ours, rounds, refill)
    row["carve b2b"] = profiled(ours, B2B_CALLS)[0]
    row["carve gap"] = gap_us(ours, refill, rounds)
    for label in ("ours", "torch", "carve"):
        row[f"{label} start"] = row[f"{label} alone"] - row[f"{label} b2b"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of MxNxK")
    ap.add_argument("--json", type=Path, help="also write every row here")
    args = ap.parse_args()
    cols = ("ours alone", "ours b2b", "ours start", "ours gap", "carve start", "carve gap",
            "torch alone", "torch b2b", "torch start", "torch gap")
    rows = measure_rows(args.shapes.split(","), PROGRAMS,
                        lambda shape, text: measure(shape, text, args.rounds), cols,
                        lambda t: " ".join(t.split()[2:3] + t.split()[9:10] + t.split()[-1:]), 11)
    for label in ("ours", "carve", "torch"):
        print(f"median {label}: " + ", ".join(
            f"{x} {statistics.median(r[f'{label} {x}'] for r in rows.values()):.2f} µs"
            for x in ("start", "gap")))
    print("cuBLAS kernels: " + ", ".join(sorted({r["torch kernel"][:60] for r in rows.values()})))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
