"""What a GPU worker runs for one request: correctness gate, timing against cuBLAS, re-check.

    result = run_request(request, artifact_record)     # inside a worker (search.measure)

Steps: load the artifact; the gate (search.gate) on fresh random inputs; calibration; the
timing protocols that `request.settings` lists, each interleaving the candidate with cuBLAS
NN and TN over rounds (BenchSettings' docstring counts every launch); a last gate run into
a NaN-filled output; plausibility flags against the chip's limits. Times are microseconds
per GEMM. A wrong output raises gate.GateFailure; any other exception (a CUDA error
included) propagates: the worker turns it into a `runtime` Result and exits, because a
CUDA context that has seen an error can't be trusted.

Constraints:
  - a kernel must be capturable in a CUDA graph (no allocation or synchronisation in launch);
  - the artifact's layout and accumulator must match the request's problem.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from search import gate
from search.operands import OperandPool
from search.records import IMPLAUSIBLE, ArtifactRecord, BenchSettings, MeasureRequest, Result

PLAUSIBILITY_MARGIN = 1.05
"""A time is flagged when it beats the chip's limit by more than this factor."""

CHIP_LIMITS = {  # device-name fragment -> (dense fp16 tensor TFLOP/s, HBM bytes/s)
    "H200": (989.0, 4.8e12),
    "H100": (989.0, 3.35e12),
    "A100": (312.0, 2.04e12),
}
DEFAULT_LIMITS = (989.0, 4.8e12)  # the fastest chip gemmforge targets: never a false flag


def setup(device: int) -> dict:
    """Worker start-up: select CUDA `device`, create its context, keep the fp32 reference
    in true fp32 (no TF32). Returns {"sm": compute capability as 90, "device": name}."""
    import torch
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.empty(1, device="cuda").sum().item()
    major, minor = torch.cuda.get_device_capability()
    return {"sm": major * 10 + minor, "device": torch.cuda.get_device_name()}


def healthy() -> bool:
    """True if the CUDA context still works (a device-wide sync and a tiny kernel succeed)."""
    import torch
    try:
        torch.cuda.synchronize()
        return torch.ones(8, device="cuda").sum().item() == 8.0
    except RuntimeError:
        return False


@dataclass
class _Contender:
    """One GEMM implementation under test: `launch` enqueues C = A @ B into fixed buffers on
    the current stream; `call` is the user-facing Python call (allocates its output)."""

    name: str
    launch: Callable[[], None]
    call: Callable[[], object]


_POOL = OperandPool()


class _Buffers:
    """The operands every contender shares: a (m, k), b as K x N and as N x K, outputs;
    from the worker's OperandPool when `reuse`, with fresh values drawn from `seed`."""

    def __init__(self, problem, kernel, seed: int, reuse: bool = True):
        import torch
        self.problem, self.kernel = problem, kernel
        if reuse:
            t = _POOL.take(problem)
            self.a, self.b_kn, self.b_nk, self.c, self.c_blas = (
                t["a"], t["b_kn"], t["b_nk"], t["c"], t["c_blas"])
            gen = torch.Generator(device="cuda").manual_seed(seed)
            self.a.normal_(generator=gen)
            b = self.b_kn if str(problem.layout) == "nn" else self.b_nk
            b.normal_(generator=gen)
            (self.b_nk if b is self.b_kn else self.b_kn).copy_(b.t())
        else:
            a, b = gate.random_inputs(problem, device="cuda", seed=seed)
            self.a = a
            self.b_kn = b if str(problem.layout) == "nn" else b.t().contiguous()
            self.b_nk = b if str(problem.layout) == "nt" else b.t().contiguous()
            self.c = torch.empty((problem.m, problem.n), dtype=torch.float16, device="cuda")
            self.c_blas = torch.empty_like(self.c)
        self.ws_bytes = kernel.workspace_bytes(problem.m, problem.n, problem.k)
        ws = t.get("ws") if reuse else None
        if ws is None or ws.numel() < self.ws_bytes:
            ws = torch.empty(max(self.ws_bytes, 1), dtype=torch.uint8, device="cuda")
            if reuse:
                t["ws"] = ws  # grown to the largest workspace a candidate asked for
        self.ws = ws

    @property
    def b(self):
        return self.b_kn if str(self.problem.layout) == "nn" else self.b_nk

    def launch_into(self, a, b, out) -> None:
        """The lean launch path: raw pointers, the request's workspace, current stream."""
        import torch
        p = self.problem
        self.kernel.launch(a.data_ptr(), b.data_ptr(), out.data_ptr(), p.m, p.n, p.k,
                           self.ws.data_ptr() if self.ws_bytes else 0, self.ws_bytes,
                           torch.cuda.current_stream().cuda_stream)

    def refill(self) -> None:
        """Fresh input values (the call protocols' "fresh inputs each time")."""
        for t in (self.a, self.b_kn, self.b_nk):
            t.normal_()

    def contenders(self) -> list[_Contender]:
        import torch
        return [
            _Contender("candidate", lambda: self.launch_into(self.a, self.b, self.c),
                       lambda: self.kernel(self.a, self.b)),
            _Contender("cublas_nn", lambda: torch.matmul(self.a, self.b_kn, out=self.c_blas),
                       lambda: torch.matmul(self.a, self.b_kn)),
            _Contender("cublas_tn", lambda: torch.matmul(self.a, self.b_nk.t(), out=self.c_blas),
                       lambda: torch.matmul(self.a, self.b_nk.t())),
        ]


def _elapsed_us(enqueue: Callable[[], None]) -> float:
    """GPU time of what `enqueue` puts on the current stream, in us. The device-wide sync
    before the end event makes work hidden on any other stream count too."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    enqueue()
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def _repeat(fn: Callable[[], None], n: int) -> Callable[[], None]:
    def run():
        for _ in range(n):
            fn()
    return run


def _graph(enqueue: Callable[[], None], stream):
    """A CUDA graph of what `enqueue` launches, captured on `stream` and replayed once
    (untimed: the first replay uploads the graph)."""
    import torch
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        enqueue()
    g.replay()
    return g


def _count(settings: BenchSettings, per_launch_us: float) -> int:
    want = math.ceil(settings.graph_us / max(per_launch_us, 1e-3))
    return min(max(want, settings.min_graph_launches), settings.max_graph_launches)


def _interleave(contenders, rounds: int, sample: Callable) -> dict[str, list[float]]:
    """`rounds` samples per contender; each round visits all of them, in alternating order."""
    out = {c.name: [] for c in contenders}
    for r in range(rounds):
        for c in (contenders if r % 2 == 0 else contenders[::-1]):
            out[c.name].append(sample(c))
    return out


def _kernel_protocol(cs, settings, counts, stream) -> dict[str, list[float]]:
    graphs = {c.name: _graph(_repeat(c.launch, counts[c.name]), stream) for c in cs}
    return _interleave(cs, settings.rounds,
                       lambda c: _elapsed_us(graphs[c.name].replay) / counts[c.name])


def _cold_protocol(cs, settings, times, stream) -> dict[str, list[float]]:
    """Per launch, L2 flushed before each: graph(n x (flush, launch)) - graph(n x flush)."""
    import torch
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    junk = torch.empty(int(l2 * settings.l2_flush_factor), dtype=torch.uint8, device="cuda")
    flush = junk.zero_
    flush_us = _elapsed_us(_repeat(flush, 3)) / 3
    n = {c.name: _count(settings, times[c.name] + flush_us) for c in cs}

    def pair(c):
        return lambda: (flush(), c.launch())
    both = {c.name: _graph(_repeat(pair(c), n[c.name]), stream) for c in cs}
    alone = {c.name: _graph(_repeat(flush, n[c.name]), stream) for c in cs}
    return _interleave(cs, settings.rounds, lambda c: (
        _elapsed_us(both[c.name].replay) - _elapsed_us(alone[c.name].replay)) / n[c.name])


def _call_us(c: _Contender, refill: Callable[[], None], idle_s: float = 0.0) -> float:
    """Wall-clock us of one Python call + device-wide sync, on freshly written inputs."""
    import torch
    refill()
    torch.cuda.synchronize()
    if idle_s:
        time.sleep(idle_s)
    t0 = time.perf_counter_ns()
    c.call()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e3


def _call_protocol(cs, settings, bufs) -> dict[str, list[float]]:
    for c in cs:
        _call_us(c, bufs.refill)  # one warm call: allocator and handles
    return _interleave(cs, settings.rounds * settings.call_repeats,
                       lambda c: _call_us(c, bufs.refill))


def _server_protocol(cs, settings, bufs, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return _interleave(cs, settings.server_calls, lambda c: _call_us(
        c, bufs.refill, rng.uniform(0.0, settings.server_max_gap_ms) / 1e3))


def _stat(settings: BenchSettings, samples: list[float]) -> float:
    return statistics.median(samples) if settings.statistic == "median" else min(samples)


def _best_blas(settings, samples: dict[str, list[float]]) -> float:
    return min(_stat(settings, samples[n]) for n in ("cublas_nn", "cublas_tn") if n in samples)


def _per_round_speedups(samples: dict[str, list[float]]) -> tuple[list[float], list[float]]:
    """(per round, cuBLAS's best time / the candidate's; per round, cuBLAS's best time)."""
    blas = [min(nn, tn) for nn, tn in zip(samples["cublas_nn"], samples["cublas_tn"])]
    return [b / c if c > 0 else math.inf for b, c in zip(blas, samples["candidate"])], blas


def _spread(xs: list[float]) -> float:
    """(max - min) / median."""
    mid = statistics.median(xs)
    return (max(xs) - min(xs)) / mid if mid > 0 else math.inf


def plausibility_flags(problem, device_name: str, times: dict[str, float | None]) -> list[str]:
    """Flags for candidate times (us) faster than the chip allows: any protocol above the
    dense fp16 peak, and the cold protocol (L2 flushed) below the HBM bytes floor of
    reading A and B and writing C once. Warm protocols may legally beat HBM (L2 hits)."""
    tflops, bytes_per_s = next((v for frag, v in CHIP_LIMITS.items() if frag in device_name),
                               DEFAULT_LIMITS)
    p = problem
    flops_floor = p.flops / (tflops * 1e12 * PLAUSIBILITY_MARGIN) * 1e6
    moved = 2 * (p.m * p.k + p.k * p.n + p.m * p.n)  # fp16 bytes of A, B and C
    bytes_floor = moved / (bytes_per_s * PLAUSIBILITY_MARGIN) * 1e6
    flags = []
    for name, t in times.items():
        if t is None:
            continue
        if t <= 0:  # only the cold protocol subtracts, and only noise makes it negative
            flags.append(f"noisy {name}: {t:.3g} us, below the measurement noise")
        elif t < flops_floor:
            flags.append(f"{IMPLAUSIBLE} {name}: faster than physically possible: {t:.4g} us "
                         f"is {p.flops / t / 1e6:.0f} TFLOP/s, above {tflops:.0f} x "
                         f"{PLAUSIBILITY_MARGIN}")
        elif name == "cold" and t < bytes_floor:
            flags.append(f"{IMPLAUSIBLE} cold: faster than physically possible: {t:.4g} us "
                         f"beats the {bytes_floor:.4g} us floor of moving A, B, C once at "
                         f"{bytes_per_s / 1e12:.2f} TB/s")
    return flags


SLOW_CONFIRMATIONS = 2


def _calibrate(c: _Contender, settings, cutoff_us: float = math.inf) -> tuple[float, float]:
    """(time of one launch alone, time per launch over `warmup` back to back), in us; the
    warm-up is skipped (and the one-launch time returned twice) above `cutoff_us`. A launch
    above `cutoff_us` is timed again, up to SLOW_CONFIRMATIONS times, and the fastest
    counts: the first launches on an idle GPU (clocks ramping up, a module loading) can
    take hundreds of times longer than the kernel."""
    one = _elapsed_us(c.launch)
    for _ in range(SLOW_CONFIRMATIONS if one > cutoff_us else 0):
        one = min(one, _elapsed_us(c.launch))  # a one-off stall is not a slow kernel
        if one <= cutoff_us:
            break
    if one > cutoff_us or not settings.warmup:
        return one, one
    return one, _elapsed_us(_repeat(c.launch, settings.warmup)) / settings.warmup


def _time_all(bufs: _Buffers, settings: BenchSettings, seed: int) -> tuple[dict, list[str]]:
    """Run the protocols; return (Result time fields, flags)."""
    import torch
    cs = bufs.contenders()
    cand, blas = cs[0], cs[1:]
    warm = {c.name: _calibrate(c, settings)[1] for c in blas}
    blas_us = min(warm.values())
    cand_one, warm["candidate"] = _calibrate(cand, settings, settings.slow_cutoff * blas_us)
    if cand_one > settings.slow_cutoff * blas_us:
        return {"kernel_us": cand_one, "cublas_us": blas_us}, [
            f"slow: one launch took {cand_one / blas_us:.1f}x cuBLAS "
            f"(> slow_cutoff {settings.slow_cutoff}); timing cut short"]
    stream = torch.cuda.current_stream()
    counts = {c.name: _count(settings, warm[c.name]) for c in cs}
    kernel = _kernel_protocol(cs, settings, counts, stream)
    speedups, blas_rounds = _per_round_speedups(kernel)
    out = {"kernel_us": _stat(settings, kernel["candidate"]),
           "cublas_us": _best_blas(settings, kernel), "spread": _spread(speedups),
           "cublas_spread": _spread(blas_rounds)}
    if settings.statistic == "median":  # each round's pair ran within one round's time
        out["paired_speedup"] = statistics.median(speedups)
    # The other protocols time cuBLAS's layout that won the kernel protocol. Taking the
    # lower of the NN and TN medians again would pick whichever drew the luckier noise, a
    # bias of its own in the noisy call timings (two equal calls' min reads low).
    best = min(blas, key=lambda c: _stat(settings, kernel[c.name]))
    if "cold" in settings.protocols:
        cold = _cold_protocol([cand, best], settings, warm, stream)
        out.update(cold_us=_stat(settings, cold["candidate"]),
                   cublas_cold_us=_stat(settings, cold[best.name]))
    if "call" in settings.protocols:
        call = _call_protocol([cand, best], settings, bufs)
        out.update(call_us=_stat(settings, call["candidate"]),
                   cublas_call_us=_stat(settings, call[best.name]))
    if "server" in settings.protocols:
        server = _server_protocol([cand, best], settings, bufs, seed)
        out.update(server_us=_stat(settings, server["candidate"]),
                   cublas_server_us=_stat(settings, server[best.name]))
    return out, []


def run_request(request: MeasureRequest, artifact: ArtifactRecord, *, load=None) -> Result:
    """Gate, time and re-check one request on the current CUDA device; return an ok Result.

    `load` (default compiler.runtime.load) turns the Artifact into a Kernel: tests pass a
    wrapper to inject faults. Raises gate.GateFailure for a wrong output, RuntimeError (or
    any other exception) for a failure to launch or run."""
    import torch
    from compiler.runtime import load as runtime_load
    start = time.perf_counter()
    problem, art = request.problem(), artifact.to_artifact()
    if (art.layout, art.acc) != (problem.layout, problem.acc):
        raise RuntimeError(f"artifact computes {art.layout}/{art.acc}, the request asks for "
                           f"{problem.layout}/{problem.acc}")
    kernel = (load or runtime_load)(art)
    settings, sync = request.settings, torch.cuda.synchronize
    # One side stream for everything: graphs can't be captured on the legacy default stream,
    # and calibration then warms the very stream the graphs are captured on.
    with torch.cuda.stream(torch.cuda.Stream()):
        bufs = _Buffers(problem, kernel, request.seed, settings.reuse_operands)
        err = gate.gate(bufs.launch_into, problem, device="cuda", seed=request.seed,
                        exact_check=settings.exact_check, sync=sync)
        times, flags = _time_all(bufs, settings, request.seed)
        err = max(err, gate.run_once(bufs.launch_into, problem, device="cuda",
                                     seed=request.seed + 2, sync=sync))
    device = torch.cuda.get_device_name()
    checked = {name: times.get(f"{name}_us") for name in ("kernel", "cold", "call", "server")}
    flags += plausibility_flags(problem, device, checked)
    return Result.for_request(request, device=device, rel_err=err, flags=tuple(flags),
                              measure_s=time.perf_counter() - start, **times)
