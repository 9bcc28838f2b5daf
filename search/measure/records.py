"""Plain records that cross process boundaries in search: settings, requests, artifacts, results.

Every record is a dataclass of str, int, float, bool, None, tuples and nested records, with
`to_dict`/`from_dict` (JSON-ready dicts) and `to_json`/`from_json` (strings). The builder
pool and the GPU workers exchange only these: no CUDA tensor, no open handle, no exception
object ever crosses a process boundary ("Do not put CUDA Tensors in here!", Inductor's
autotune_process). A failure is a value: `Result.kind` is one of FAILURE_KINDS with a message.

`from_dict` ignores keys it doesn't know, so a file written by a later version (one more
field) still reads; a missing field takes its default (search.measure.record_json).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .record_json import Record, known_fields
from .timing_protocols import PROTOCOLS

FAILURE_KINDS = ("invalid", "compile", "runtime", "timeout", "wrong")
"""invalid: the program does not parse or verify. compile: lowering or the toolchain failed.
runtime: the launch or the worker failed (CUDA error, crash). timeout: a build or a
measurement ran past its limit and was killed. wrong: the output failed the correctness gate."""

IMPLAUSIBLE = "implausible"
"""Prefix of a Result flag saying a time is faster than the chip can physically go."""


@dataclass(frozen=True)
class BenchSettings(Record):
    """How one request is timed (search.measure.bench). All times are per launch, in microseconds.

    Contenders: the candidate, cuBLAS NN (torch.matmul with B as K x N) and cuBLAS TN (B
    stored N x K, passed as a transposed view). They run in the same process on the same
    input values, interleaved: each round visits every contender, in a new order each round
    (search.measure.timing.interleave), before the next round.

    Exactly how many times the candidate is launched for one request (candidate_launches()
    computes it), where n = clamp(ceil(graph_us / t1), min_graph_launches,
    max_graph_launches) with t1 the calibrated time per launch (the warm-up's average), and
    nc, for a problem whose operands rotate through s copies (search.measure.timing.rotation_sets),
    n rounded up to a multiple of s, else (s = 1: a problem too small to rotate) n with t1 +
    the time of one L2 flush:
      correctness gate ..... 1, plus 1 for the {0,1} check when exact_check and k <= 2048
      calibration .......... 1 (timed alone; up to 2 more alone if it is over the slow
                             cut-off below), then `warmup` back to back (timed together)
      kernel ("kernel") .... (warm_rounds + rounds + 1) x n: one CUDA graph of n launches,
                             replayed once untimed, then once per round (L2 warm: the same
                             buffers); the first warm_rounds rounds are not recorded
      cold ("cold") ........ (warm_rounds + rounds + 1) x nc: a graph of nc launches
                             back to back, each on the next of s copies of the operands
                             (their total over l2_flush_factor x L2); for s = 1, a graph of
                             nc (L2 flush, launch) pairs, the flush a read, and a graph of
                             nc flushes alone timed too and subtracted
      call ("call") ........ 1 + rounds x call_repeats Python calls (Kernel.__call__ + sync),
                             fresh input values (written untimed) before each
      server ("server") .... server_calls calls, each after a random idle gap in
                             [0, server_max_gap_ms]
      sustained ............ (warm_rounds + sustained_rounds) turns of back-to-back
                             replays of the kernel protocol's graph for sustained_s seconds
                             each (one more replay sizes each turn); not in the default list
      re-validation ........ 1 (after all timing, into a NaN-filled output, fresh inputs)
    cuBLAS NN and TN are launched as often in calibration and kernel (their own n); in
    cold, call, server and sustained only the faster of the two by kernel time runs, as
    often as the candidate (its own nc in cold). Choosing the layout once, by the stable kernel time,
    keeps the noisy call timings from picking whichever of two equal calls drew less noise.
    If the candidate's fastest calibration launch takes longer than slow_cutoff x cuBLAS's
    time per launch, its warm-up and everything from "kernel" to "server" are skipped:
    kernel_us is that one launch, and the Result is flagged "slow".

    Warm rounds: coming out of the idle gap that gates, calibration and graph capture
    leave, the GPU runs the first ~10 ms of graphs faster (a power-capped kernel's first
    round read 15-25 % below its median, benchmarks/NOTES.md); warm_rounds whole rounds
    run first, unrecorded, in the kernel and cold protocols.

    Batches: with interleave (the default), search.measure.measure times the requests of one
    batch that share a problem and these settings as one group (search.measure.bench.run_group):
    every round visits every candidate of the group, then cuBLAS NN and TN once, so the
    counts above hold per candidate while cuBLAS's kernel and calibration launches are
    paid once per group (call and server: per candidate). Each round's pairs still set each
    candidate's paired speedup.
    Cold rounds visit every candidate and cuBLAS's winning layout; call and server pair
    each candidate with that layout on its own, as for a request alone.
    Without it every request is timed alone against its own cuBLAS rounds.

    Time limit: a request timed alone may take timeout_s seconds in all; in a group, each
    step (a gate, a calibration, one protocol's rounds for the whole group) may.

    Memory: with reuse_operands (the default) a worker keeps the operand and output tensors
    of its recent problems (search.measure.operands.OperandPool) and draws fresh values into them for
    each request, so every request for a problem is timed on the same memory; without it
    each request allocates its own.

    L2: "kernel" keeps L2 warm; "cold" rotates the operands through copies whose total is
    over l2_flush_factor x the L2 size (each launch finds its own evicted and L2 holding
    nothing dirty to write back, as a model's layers find their weights), or, where that
    would take more than search.measure.timing.MAX_ROTATION copies, reads a buffer of that size
    before every launch. Statistic: the median (or minimum) over rounds of each contender's
    per-launch time; cuBLAS's kernel figure is the better of NN and TN, and its cold, call
    and server figures are that layout's. A device-wide synchronize
    precedes every end event and every host clock read, so work on any stream counts.
    """

    warmup: int = 10
    rounds: int = 5
    warm_rounds: int = 1
    graph_us: float = 2000.0
    min_graph_launches: int = 3
    max_graph_launches: int = 1000
    call_repeats: int = 10
    server_calls: int = 20
    server_max_gap_ms: float = 5.0
    l2_flush_factor: float = 2.0
    statistic: str = "median"
    sustained_s: float = 1.0
    sustained_rounds: int = 2
    protocols: tuple[str, ...] = tuple(p.name for p in PROTOCOLS.values() if p.by_default)
    exact_check: bool = True
    slow_cutoff: float = 20.0
    timeout_s: float = 120.0
    reuse_operands: bool = True
    interleave: bool = True

    def __post_init__(self):
        object.__setattr__(self, "protocols", tuple(self.protocols))
        unknown = set(self.protocols) - set(PROTOCOLS)
        if unknown or "kernel" not in self.protocols:
            raise ValueError(f"protocols: {self.protocols} must include 'kernel' and only "
                             + ", ".join(f"'{name}'" for name in PROTOCOLS))
        if self.statistic not in ("median", "min"):
            raise ValueError(f"statistic: {self.statistic!r} is not 'median' or 'min'")
        if self.sustained_s <= 0 or self.sustained_rounds < 1:
            raise ValueError("sustained_s must be > 0 and sustained_rounds >= 1")
        if self.rounds < 1 or self.warmup < 0 or self.warm_rounds < 0 \
                or self.min_graph_launches < 1:
            raise ValueError("rounds and min_graph_launches must be >= 1, warmup and "
                             "warm_rounds >= 0")
        if self.max_graph_launches < self.min_graph_launches or self.timeout_s <= 0:
            raise ValueError("need max_graph_launches >= min_graph_launches, timeout_s > 0")

    def candidate_launches(self, n: int, nc: int, k: int) -> int:
        """How many times one request launches the candidate (the count in this class's
        docstring), for graph sizes n and nc, when the timing is not cut short; the
        sustained protocol's launches (set by the clock, not a count) are not included."""
        exact = 1 if self.exact_check and k <= 2048 else 0
        p = self.protocols
        timed = self.warm_rounds + self.rounds + 1
        return (1 + exact + 1 + self.warmup + timed * n
                + (timed * nc if "cold" in p else 0)
                + (1 + self.rounds * self.call_repeats if "call" in p else 0)
                + (self.server_calls if "server" in p else 0) + 1)


@dataclass(frozen=True)
class MeasureRequest(Record):
    """One (program, problem) to measure: the program's canonical text, the problem's
    m, n, k, layout ("nn" or "nt"), accumulator ("f32" or "f16") and operand dtype ("f16"
    or "bf16": the worker's operands, outputs and cuBLAS baselines are of it), the bench
    settings and the seed of the random inputs. `key` is the program's content key (for
    logs)."""

    program: str
    m: int
    n: int
    k: int
    layout: str = "nn"
    acc: str = "f32"
    settings: BenchSettings = field(default_factory=BenchSettings)
    seed: int = 0
    key: str = ""
    dtype: str = "f16"

    @classmethod
    def make(cls, program, problem, settings: BenchSettings | None = None,
             seed: int = 0) -> "MeasureRequest":
        """A request for an ir Program (or its text) and an ir Problem (its dtype: f16 or
        bf16)."""
        text = str(program)
        key = program.key if hasattr(program, "key") else ""
        return cls(text, problem.m, problem.n, problem.k, str(problem.layout), str(problem.acc),
                   settings or BenchSettings(), seed, key, str(getattr(problem, "dtype", "f16")))

    def problem(self):
        """The ir.Problem this request computes."""
        from ...ir.program import Problem
        return Problem(self.m, self.n, self.k, self.layout, self.acc, self.dtype)

    @property
    def backend(self) -> str:
        return self.program.split()[0] if self.program.split() else ""

    @classmethod
    def from_dict(cls, data: dict) -> "MeasureRequest":
        data = dict(data)
        if isinstance(data.get("settings"), dict):
            data["settings"] = BenchSettings.from_dict(data["settings"])
        return known_fields(cls, data)


@dataclass(frozen=True)
class ArtifactRecord(Record):
    """A built kernel as a plain record (compiler.values.Artifact with str fields)."""

    key: str
    kind: str
    path: str
    program_text: str
    layout: str
    acc: str
    meta: dict = field(default_factory=dict)
    dtype: str = "f16"

    @classmethod
    def from_artifact(cls, artifact) -> "ArtifactRecord":
        return cls(artifact.key, artifact.kind, str(artifact.path), artifact.program_text,
                   str(artifact.layout), str(artifact.acc), dict(artifact.meta),
                   str(artifact.dtype))

    def to_artifact(self):
        """The compiler.values.Artifact that backends.pipeline.load() takes."""
        from pathlib import Path

        from ...compiler.values import Artifact
        from ...ir.program import Accum, DType, Layout
        return Artifact(self.key, self.kind, Path(self.path), self.program_text,
                        Layout(self.layout), Accum(self.acc), dict(self.meta),
                        DType(self.dtype))


@dataclass(frozen=True)
class Result(Record):
    """What measuring one request gave. Times are microseconds per GEMM (None: not measured).

    status "ok" or "failed"; a failure has `kind` (one of FAILURE_KINDS) and `message`.
    kernel_us / cublas_us: CUDA-graph median per launch, L2 warm (cuBLAS: best of NN, TN).
    cold_us / cublas_cold_us: the same with L2 cold (BenchSettings: operands rotated through
    copies over 2x L2; cuBLAS: the layout that won the kernel times, as for call and server).
    Older results wrote L2 before each launch instead, which also
    charged the launch for writing that buffer back (benchmarks/NOTES.md).
    call_us / cublas_call_us: one Python call + synchronize, wall clock, fresh inputs.
    server_us / cublas_server_us: calls after random idle gaps.
    sustained_us / cublas_sustained_us: per launch, run back to back for seconds (under the
    power cap), the median over turns (cuBLAS: the layout that won the kernel times).
    after_us / cublas_after_us: per launch after another kernel (a 1 MiB add), L2 warm, the
    add's own time subtracted (timing.after_protocol; cuBLAS: the kernel times' layout).
    rel_err: relative Frobenius error of the gate (the larger of gate and re-validation).
    paired_speedup: median over rounds of each round's cublas/kernel (statistic "median"
    only). The candidate and cuBLAS of one round run within one round's time of each
    other, so the pairs cancel clock drift that the ratio of the two medians keeps;
    `speedup` is this where it was measured.
    spread: (max - min) / median over rounds of the per-round speedup cublas/kernel;
    cublas_spread: the same for cuBLAS's per-round time (drift of the GPU during the run).
    flags: remarks; one starting with IMPLAUSIBLE means a time beats the chip's limits.
    """

    program: str
    m: int
    n: int
    k: int
    layout: str = "nn"
    acc: str = "f32"
    status: str = "ok"
    kind: str | None = None
    message: str = ""
    device: str = ""
    key: str = ""
    kernel_us: float | None = None
    cublas_us: float | None = None
    cold_us: float | None = None
    cublas_cold_us: float | None = None
    call_us: float | None = None
    cublas_call_us: float | None = None
    server_us: float | None = None
    cublas_server_us: float | None = None
    sustained_us: float | None = None
    cublas_sustained_us: float | None = None
    after_us: float | None = None
    cublas_after_us: float | None = None
    rel_err: float | None = None
    spread: float | None = None
    cublas_spread: float | None = None
    paired_speedup: float | None = None
    flags: tuple[str, ...] = ()
    build_s: float | None = None
    measure_s: float | None = None
    dtype: str = "f16"  # the operands' and output's, cuBLAS's included ("f16" or "bf16")

    def __post_init__(self):
        object.__setattr__(self, "flags", tuple(self.flags))
        if self.status not in ("ok", "failed"):
            raise ValueError(f"status: {self.status!r} is not 'ok' or 'failed'")
        if (self.status == "failed") != (self.kind in FAILURE_KINDS):
            raise ValueError(f"kind: {self.kind!r} with status {self.status!r}; a failed "
                             f"result has a kind in {FAILURE_KINDS}, an ok one has none")

    @classmethod
    def failure(cls, request: MeasureRequest, kind: str, message: str, **extra) -> "Result":
        """A failed Result for `request`."""
        return cls(request.program, request.m, request.n, request.k, request.layout,
                   request.acc, status="failed", kind=kind, message=message, key=request.key,
                   dtype=request.dtype, **extra)

    @classmethod
    def for_request(cls, request: MeasureRequest, **values) -> "Result":
        """An ok Result for `request` with the measured `values`."""
        return cls(request.program, request.m, request.n, request.k, request.layout,
                   request.acc, key=request.key, dtype=request.dtype, **values)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def backend(self) -> str:
        return self.program.split()[0] if self.program.split() else ""

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def problem(self):
        """The ir.Problem this result measured."""
        from ...ir.program import Problem
        return Problem(self.m, self.n, self.k, self.layout, self.acc, self.dtype)

    @property
    def speedup(self) -> float | None:
        """cuBLAS's time over the candidate's (above 1: faster than cuBLAS): the median
        of the per-round ratios where measured (paired_speedup), else cublas_us /
        kernel_us; None without both times."""
        if self.paired_speedup is not None and self.kernel_us and self.cublas_us:
            return self.paired_speedup
        return _ratio(self.cublas_us, self.kernel_us)

    def ratio(self, protocol: str) -> float | None:
        """cuBLAS's reading over the candidate's under `protocol` (a PROTOCOLS name; their
        Result fields), or None without both; "kernel" is `speedup`."""
        if protocol == "kernel":
            return self.speedup
        p = PROTOCOLS[protocol]
        return _ratio(getattr(self, p.cublas_field), getattr(self, p.field))

    @property
    def cold_speedup(self) -> float | None:
        return self.ratio("cold")

    @property
    def call_speedup(self) -> float | None:
        return self.ratio("call")

    @property
    def sustained_speedup(self) -> float | None:
        return self.ratio("sustained")

    @property
    def after_speedup(self) -> float | None:
        return self.ratio("after")

    @property
    def implausible(self) -> bool:
        return any(f.startswith(IMPLAUSIBLE) for f in self.flags)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den > 0 or not math.isfinite(num):
        return None
    return num / den


def replace(record: Any, **changes) -> Any:
    """A copy of a record with some fields changed."""
    return dataclasses.replace(record, **changes)
