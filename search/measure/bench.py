"""What a GPU worker runs for a batch of requests: correctness gates, timing against cuBLAS.

    result = run_request(request, artifact_record)          # one program, inside a worker
    results = run_group(requests, artifact_records)         # several, timed interleaved

Steps: load the artifacts; each candidate's gate (search.measure.gate) on fresh random inputs;
calibration; the timing protocols that the settings list (search.measure.timing), each
interleaving the candidates with cuBLAS NN and TN over rounds (BenchSettings' docstring
counts every launch); a last gate run per candidate into a NaN-filled output;
plausibility flags against the chip's limits. Times are microseconds per GEMM.

A group is what search.measure.measure sends for the requests of one batch that share a problem
and settings (BenchSettings.interleave): every round then visits every candidate, so a
slow spell of the GPU (they last tens of ms, benchmarks/NOTES.md) lands on all of them
alike instead of on whichever request was running, and cuBLAS is timed once per round
for the whole group instead of once per request. In a group a wrong output makes that
candidate's Result `wrong` and the rest go on; any other exception (a CUDA error
included) propagates, and the caller measures the group's requests one by one. For one
request, a wrong output raises gate.GateFailure and any other exception propagates: the
worker turns it into a `runtime` Result and exits, because a CUDA context that has seen
an error can't be trusted.

Constraints:
  - a kernel must be capturable in a CUDA graph (no allocation or synchronisation in launch);
  - the artifacts' layout and accumulator must match the requests' problem;
  - the requests of a group share one problem and one BenchSettings.
"""
from __future__ import annotations

import statistics
import time
from typing import Sequence

from . import gate, timing
from ...ir.devices import A100, H100, H200
from .operands import OperandPool
from .records import (
    IMPLAUSIBLE, ArtifactRecord, BenchSettings, MeasureRequest, Result,
)
from .timing_protocols import PROTOCOLS

PLAUSIBILITY_MARGIN = 1.05
"""A time is flagged when it beats the chip's limit by more than this factor."""

CHIP_LIMITS = {  # device-name fragment -> (dense fp16 tensor TFLOP/s, HBM bytes/s)
    facts.name.upper(): (facts.peak_tflops, facts.hbm_bytes_per_s)
    for facts in (H200, H100, A100)
}
DEFAULT_LIMITS = (H200.peak_tflops, H200.hbm_bytes_per_s)  # the fastest chip gemmforge targets: never a false flag


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


_POOL = OperandPool()


def _quiet(step: str) -> None:
    """The progress callback of a request timed alone: nobody listens."""


class _Buffers:
    """The operands every contender shares: a (m, k), b as K x N and as N x K, outputs,
    and one workspace as large as the largest any of `kernels` asks for; from the worker's
    OperandPool when `reuse`, with fresh values drawn from `seed`."""

    def __init__(self, problem, kernels: Sequence, seed: int, reuse: bool = True):
        import torch
        self.problem, self.kernels = problem, list(kernels)
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
            self.c = torch.empty((problem.m, problem.n), dtype=gate.element_dtype(problem),
                                 device="cuda")
            self.c_blas = torch.empty_like(self.c)
        self.ws_bytes = max((self._ws_need(k) for k in self.kernels), default=0)
        ws = t.get("ws") if reuse else None
        if ws is None or ws.numel() < self.ws_bytes:
            ws = torch.empty(max(self.ws_bytes, 1), dtype=torch.uint8, device="cuda")
            if reuse:
                t["ws"] = ws  # grown to the largest workspace a candidate asked for
        self.ws = ws
        self.sets = [(self.a, self.b_kn, self.b_nk, self.c, self.c_blas)]

    def rotate(self, sets: int) -> None:
        """Keep `sets` copies of the operands and outputs for the cold protocol (copy 0 the
        buffers above, the others clones of it); rotate(1) frees the clones."""
        first = self.sets[0]
        self.sets = [first, *(tuple(t.clone() for t in first) for _ in range(sets - 1))]

    def footprint(self) -> int:
        """Bytes one launch touches: A, one layout of B, C (fp16 or bf16: 2 bytes each)."""
        p = self.problem
        return 2 * (p.m * p.k + p.k * p.n + p.m * p.n)

    def _ws_need(self, kernel) -> int:
        p = self.problem
        return kernel.workspace_bytes(p.m, p.n, p.k)

    @property
    def b(self):
        return self.b_kn if str(self.problem.layout) == "nn" else self.b_nk

    def launch_into(self, kernel, a, b, out) -> None:
        """The lean launch path of `kernel`: raw pointers, the shared workspace (its own
        size), the current stream."""
        import torch
        p, need = self.problem, self._ws_need(kernel)
        kernel.launch(a.data_ptr(), b.data_ptr(), out.data_ptr(), p.m, p.n, p.k,
                      self.ws.data_ptr() if need else 0, need,
                      torch.cuda.current_stream().cuda_stream)

    def launcher(self, kernel):
        """launch(a, b, out) for the gate: `kernel` into the given tensors."""
        return lambda a, b, out: self.launch_into(kernel, a, b, out)

    def refill(self) -> None:
        """Fresh input values (the call protocols' "fresh inputs each time")."""
        for t in (self.a, self.b_kn, self.b_nk):
            t.normal_()

    def contenders(self, kernels: Sequence) -> list[timing.Contender]:
        """candidate0, candidate1, ... (one per kernel), then cublas_nn and cublas_tn."""
        import torch

        nn = str(self.problem.layout) == "nn"

        def candidate(i, kernel):
            def launch_on(s):
                a, b_kn, b_nk, c, _ = self.sets[s]
                self.launch_into(kernel, a, b_kn if nn else b_nk, c)
            return timing.Contender(
                f"candidate{i}", lambda: self.launch_into(kernel, self.a, self.b, self.c),
                lambda: kernel(self.a, self.b), launch_on)

        def blas_nn(s):
            a, b_kn, _, _, c = self.sets[s]
            torch.matmul(a, b_kn, out=c)

        def blas_tn(s):
            a, _, b_nk, _, c = self.sets[s]
            torch.matmul(a, b_nk.t(), out=c)
        return [*(candidate(i, k) for i, k in enumerate(kernels)),
                timing.Contender("cublas_nn", lambda: blas_nn(0),
                                 lambda: torch.matmul(self.a, self.b_kn), blas_nn),
                timing.Contender("cublas_tn", lambda: blas_tn(0),
                                 lambda: torch.matmul(self.a, self.b_nk.t()), blas_tn)]


def plausibility_flags(problem, device_name: str, times: dict[str, float | None]) -> list[str]:
    """Flags for candidate times (us) faster than the chip allows: any protocol above the
    dense fp16 peak, and the cold protocol (L2 cold) below the HBM bytes floor of
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


def _time_group(bufs: _Buffers, kernels: Sequence, settings: BenchSettings,
                seed: int, progress=_quiet) -> list[tuple[dict, list[str]]]:
    """Run the protocols for every kernel at once; per kernel, (Result time fields, flags).
    A kernel whose calibration launch is over slow_cutoff x cuBLAS's is cut short alone."""
    cs = bufs.contenders(kernels)
    cands, blas = cs[:-2], cs[-2:]
    warm = {c.name: timing.calibrate(c, settings)[1] for c in blas}
    blas_us = min(warm.values())
    cutoff = settings.slow_cutoff * blas_us
    out, timed = {}, []
    for c in cands:
        one, warm[c.name] = timing.calibrate(c, settings, cutoff)
        progress(f"calibrated {c.name}")
        if one > cutoff:
            out[c.name] = ({"kernel_us": one, "cublas_us": blas_us}, [
                f"slow: one launch took {one / blas_us:.1f}x cuBLAS "
                f"(> slow_cutoff {settings.slow_cutoff}); timing cut short"])
        else:
            timed.append(c)
    if timed:
        out.update(_time_protocols(bufs, timed, blas, settings, warm, seed, progress))
    return [out[c.name] for c in cands]


def _time_protocols(bufs, timed, blas, settings, warm, seed,
                    progress) -> dict[str, tuple[dict, list]]:
    import torch
    stream = torch.cuda.current_stream()
    counts = {c.name: timing.launches_per_graph(settings, warm[c.name]) for c in timed + blas}
    kernel = timing.kernel_protocol(timed + blas, settings, counts, stream,
                                    lambda r: progress(f"kernel round {r}"))
    # cuBLAS's figure is the better layout's. The other protocols time that layout only:
    # taking the lower of the NN and TN medians again would pick whichever drew the luckier
    # noise, a bias of its own in the noisy call timings (two equal calls' min reads low).
    best = min(blas, key=lambda c: timing.stat(settings, kernel[c.name]))
    blas_us = timing.stat(settings, kernel[best.name])
    out = {}
    for c in timed:
        speedups, blas_rounds = timing.per_round_speedups(kernel, c.name)
        out[c.name] = {"kernel_us": timing.stat(settings, kernel[c.name]),
                       "cublas_us": blas_us,
                       "spread": timing.spread(speedups),
                       "cublas_spread": timing.spread(blas_rounds)}
        if settings.statistic == "median":  # each round's pair ran within one round's time
            out[c.name]["paired_speedup"] = statistics.median(speedups)
    # Cold rounds visit the whole group, like the kernel rounds. Call and server rounds pair
    # each candidate with cuBLAS alone: interleaved with a whole group of other calls,
    # torch.matmul's call + sync read 10-57 us slower and ours did not (benchmarks/NOTES.md),
    # which would flatter the host-overhead comparison.
    protocols = {
        "cold": lambda cs: _cold(bufs, cs, settings, warm, stream, progress),
        "call": lambda cs: timing.call_protocol(cs, settings, bufs.refill),
        "server": lambda cs: timing.server_protocol(cs, settings, bufs.refill, seed),
        "sustained": lambda cs: timing.sustained_protocol(
            cs, settings, counts, stream, lambda r: progress(f"sustained turn {r}")),
        "after": lambda cs: timing.after_protocol(
            cs, settings, warm, stream, lambda r: progress(f"after round {r}")),
    }
    for name, protocol in protocols.items():
        if name not in settings.protocols:
            continue
        for batch in [[c] for c in timed] if PROTOCOLS[name].alone else [timed]:
            samples = protocol(batch + [best])
            progress(f"{name} rounds")
            for c in batch:
                out[c.name].update({
                    PROTOCOLS[name].field: timing.stat(settings, samples[c.name]),
                    PROTOCOLS[name].cublas_field: timing.stat(settings, samples[best.name])})
    return {name: (times, []) for name, times in out.items()}


def _cold(bufs, cs, settings, warm, stream, progress) -> dict[str, list[float]]:
    """The cold protocol on `bufs`' operands rotated through copies (timing.cold_protocol),
    the copies freed after."""
    import torch
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    sets = timing.rotation_sets(bufs.footprint(), l2, settings.l2_flush_factor)
    bufs.rotate(sets)
    try:
        return timing.cold_protocol(cs, settings, warm, stream, sets,
                                    lambda r: progress(f"cold round {r}"))
    finally:
        bufs.rotate(1)


def run_request(request: MeasureRequest, artifact: ArtifactRecord, *, load=None) -> Result:
    """Gate, time and re-check one request on the current CUDA device; return an ok Result.

    `load` (default backends.pipeline.load) turns the Artifact into a Kernel: tests pass a
    wrapper to inject faults. Raises gate.GateFailure for a wrong output, RuntimeError (or
    any other exception) for a failure to launch or run."""
    return _measure([request], [artifact], load=load, isolate_wrong=False)[0]


def run_group(requests: Sequence[MeasureRequest], artifacts: Sequence[ArtifactRecord], *,
              load=None, progress=None) -> list[Result]:
    """Gate every request, time them all interleaved (one group), re-check each; one Result
    per request, in order: ok, or `wrong` for an output that failed its gate.
    `progress(step: str)`, if given, is called after each step (a gate, a calibration, a
    kernel or cold round, a candidate's call or server rounds, a re-check): the worker
    reports these so that its parent's timeout bounds each step rather than the group.

    Raises ValueError for requests that don't share a problem and settings, RuntimeError
    (or any other exception) for a failure to load, launch or run any of them, and
    RuntimeError when the CUDA context fails its health check after a wrong output.
    measure_s of each Result is the group's time over its number of requests."""
    first = requests[0] if requests else None
    if not requests or len(requests) != len(artifacts) or any(
            (r.m, r.n, r.k, r.layout, r.acc, r.dtype, r.settings)
            != (first.m, first.n, first.k, first.layout, first.acc, first.dtype, first.settings)
            for r in requests):
        raise ValueError("a group is one or more requests (each with its artifact) for one "
                         "problem with one BenchSettings")
    return _measure(list(requests), list(artifacts), load=load, isolate_wrong=True,
                    progress=progress or _quiet)


def _measure(requests, artifacts, *, load, isolate_wrong: bool,
             progress=_quiet) -> list[Result]:
    import torch
    from ...backends.pipeline import load as runtime_load
    start = time.perf_counter()
    problem, settings, sync = requests[0].problem(), requests[0].settings, torch.cuda.synchronize
    for art in artifacts:
        if (art.layout, art.acc, art.dtype) != (str(problem.layout), str(problem.acc),
                                                str(problem.dtype)):
            raise RuntimeError(f"artifact {art.key} computes {art.layout}/{art.acc}/"
                               f"{art.dtype}, the request asks for {problem.layout}/"
                               f"{problem.acc}/{problem.dtype}")
    kernels = [(load or runtime_load)(art.to_artifact()) for art in artifacts]
    results: dict[int, Result] = {}
    errs: dict[int, float] = {}

    def checked(i: int, check) -> None:
        """Run a gate check of request i; with isolate_wrong, a wrong output fails request
        i alone (if the context is still healthy), else GateFailure propagates."""
        try:
            errs[i] = max(errs.get(i, 0.0), check())
        except gate.GateFailure as e:
            if not isolate_wrong:
                raise
            if not healthy():
                raise RuntimeError(f"the CUDA context failed its health check after a wrong "
                                   f"output of {requests[i].program}: {e}") from None
            results[i] = Result.failure(requests[i], "wrong", str(e))

    # One side stream for everything: graphs can't be captured on the legacy default stream,
    # and calibration then warms the very stream the graphs are captured on.
    with torch.cuda.stream(torch.cuda.Stream()):
        bufs = _Buffers(problem, kernels, requests[0].seed, settings.reuse_operands)
        for i, (req, kernel) in enumerate(zip(requests, kernels)):
            checked(i, lambda: gate.gate(bufs.launcher(kernel), problem, device="cuda",
                                         seed=req.seed, exact_check=settings.exact_check,
                                         sync=sync))
            progress(f"gate {i}")
        live = [i for i in range(len(requests)) if i not in results]
        timed = dict(zip(live, _time_group(bufs, [kernels[i] for i in live], settings,
                                           requests[0].seed, progress)))
        for i in live:
            checked(i, lambda: gate.run_once(bufs.launcher(kernels[i]), problem,
                                             device="cuda", seed=requests[i].seed + 2,
                                             sync=sync))
            progress(f"re-check {i}")
    device = torch.cuda.get_device_name()
    measure_s = (time.perf_counter() - start) / len(requests)
    for i, (times, flags) in timed.items():
        if i in results:  # wrong at the re-check
            continue
        checked_times = {name: times.get(f"{name}_us")
                         for name in PROTOCOLS}
        flags = [*flags, *plausibility_flags(problem, device, checked_times)]
        results[i] = Result.for_request(requests[i], device=device, rel_err=errs[i],
                                        flags=tuple(flags), measure_s=measure_s, **times)
    return [results[i] for i in range(len(requests))]
