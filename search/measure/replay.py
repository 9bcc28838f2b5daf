"""A runner that answers from recorded results, so the tuner and the policies run without a GPU.

    runner = ReplayRunner("tune.csv")     # a results CSV (search.measure.report), JSONL, or none
    results = runner.evaluate(programs, problem)                   # like search.measure.env.evaluate

Answers, per program, in order:
  1. a program that fails ir.verify: an `invalid` Result with verify's reason (as env does);
  2. a recorded (program text, m, n, k, layout, acc): the recorded Result (the last one
     recorded for that key), its device included;
  3. otherwise, with `synthetic=True` (the default): a deterministic **synthetic** Result from
     `synthetic_kernel_us`, a roofline-style cost model over the IR fields of an H200-like
     chip. Its device says "synthetic" and its flags carry SYNTHETIC_FLAG: it is a test
     fixture with the shape of the real landscape (tile quantization, waves, split-K, stages,
     swizzle), not a measurement. cuBLAS's time is the recorded H200 grid figure where the
     shape is on the grid (search/data/cublas_h200_grid.csv.gz), else a synthetic one too;
     with `synthetic=False`: a `runtime` failure saying the result was not recorded.

Record files: a CSV written by search.measure.report.write_csv, or JSON lines of Result.to_dict().
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
import time
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from ...ir.arch import MmaFamily, mma_family_on
from ...ir.devices import H200
from ...ir.program import Arch, Problem, Program
from .records import Result

DATA = Path(__file__).parents[1] / "data"
CUBLAS_GRID = DATA / "cublas_h200_grid.csv.gz"
SYNTHETIC_FLAG = "synthetic: roofline model of an H200-like chip, not a measurement"
SYNTHETIC_DEVICE = "synthetic H200 model"

# The modelled chip (H200-like). Named once; only the synthetic model uses them.
CHIP = H200
PEAK_FLOP_PER_US = CHIP.peak_fp16_flops / 1e6   # dense fp16 tensor peak
SIMT_FRACTION = 0.1           # fp16 FMA on the CUDA cores, as a fraction of tensor peak
MMA_SYNC_CAP = 0.63           # mma.sync on Hopper caps near 63% of peak (DESIGN.md)
WGMMA_CAP = 0.92
FAMILY_CAPS = {MmaFamily.SIMT: SIMT_FRACTION, MmaFamily.WMMA: MMA_SYNC_CAP,
               MmaFamily.MMA_SYNC: MMA_SYNC_CAP, MmaFamily.WGMMA: WGMMA_CAP}
HBM_BYTES_PER_US = CHIP.hbm_bytes_per_s / 1e6
L2_BYTES_PER_US = 12e6
SMS = CHIP.sms
LAUNCH_US = 2.0               # launch + tail of one kernel
REDUCE_LAUNCH_US = 1.5        # the split-K reduction (or zero/cast) kernel
SMEM_PER_SM = CHIP.smem_per_sm
NOISE = 0.04                  # +-2% deterministic jitter per (program, problem)

Key = tuple  # (program text, m, n, k, layout, acc)


def _unit(*parts) -> float:
    """A deterministic number in [0, 1) from the parts' text."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def _cap(program: Program) -> float:
    """Peak fraction of the program's instruction path, from the backend's declared data."""
    from ...backends import registry
    backend = registry.get(program.backend)
    cap = FAMILY_CAPS[mma_family_on(backend.mma_family, program.arch)]
    return cap * (0.85 + 0.15 * _unit("backend", program.backend))  # per-backend quirk


def _efficiency(program: Program) -> float:
    """Fraction of the path's peak one CTA sustains: warp-tile reuse, CTA-tile reuse,
    latency hiding by stages, K step, bank conflicts, Hopper extras."""
    from ...backends import registry
    t, w = program.tile, program.warps
    wt_m, wt_n = t.bm / w.wm, t.bn / w.wn
    warp = min(1.0, (wt_m * wt_n / (wt_m + wt_n)) / 32)
    cta = min(1.0, math.sqrt((t.bm * t.bn / (t.bm + t.bn)) / 85))
    stages = 1 - 0.55 ** program.stages
    k_step = 1 - 0.5 * 8 / (t.bk + 8)
    one_swizzle = len(registry.get(program.backend).allowed.get("swizzle", (0, 1))) == 1
    swizzle = 1.0 if one_swizzle else {"none": 0.75, "32B": 0.85, "64B": 0.93, "128B": 1.0,
                                       "pad": 0.95}[program.swizzle.value]
    threads = w.count * registry.get(program.backend).unit_threads
    occupancy = 0.7 if threads < 128 else 1.0
    extras = {"none": 1.0, "cooperative": 1.08, "pingpong": 1.1}[program.warp_spec.value]
    extras *= 1.03 if program.epilogue.value == "tma" else 1.0
    return warp * cta * stages * k_step * swizzle * occupancy * extras


def _waves(program: Program, ctas: int) -> float:
    """CTA-times per SM: waves of SMS x (CTAs resident per SM), each resident CTA getting
    its share of the SM (a little better latency hiding with two)."""
    from ...backends import registry
    t = program.tile
    smem = program.stages * (t.bm + t.bn) * t.bk * 2
    threads = program.warps.count * registry.get(program.backend).unit_threads
    per_sm = max(1, min(2, SMEM_PER_SM // max(smem, 1))) if threads <= 256 else 1
    share = per_sm / (1.1 if per_sm > 1 else 1.0)
    if program.schedule.value == "stream_k":
        return ctas / (SMS * per_sm) * share
    if program.schedule.value == "persistent":
        return (ctas / (SMS * per_sm) + 0.2 * (ctas % (SMS * per_sm) > 0)) * share
    return math.ceil(ctas / (SMS * per_sm)) * share


def _memory_us(program: Program, problem: Problem, tm: int, tn: int) -> float:
    m, n, k = problem.m, problem.n, problem.k
    group = min(program.raster.group, max(tm, tn))
    cluster = program.cluster.size
    dram = 2 * (m * k + k * n + m * n) * (1 + 0.6 / group) / (1 + 0.1 * (cluster - 1))
    l2 = 2 * (m * k * tn + k * n * tm) / cluster
    return max(dram / HBM_BYTES_PER_US, l2 / L2_BYTES_PER_US)


def _extras_us(program: Program, problem: Problem, tm: int, tn: int) -> float:
    m, n, k = problem.m, problem.n, problem.k
    t, s = program.tile, program.split_k.slices
    extra = 1.0 if program.schedule.value == "stream_k" else 0.0
    if s > 1 and program.split_k.reduction.value == "workspace":
        extra += REDUCE_LAUNCH_US + 4 * m * n * s * 2 / HBM_BYTES_PER_US
    elif s > 1:
        extra += REDUCE_LAUNCH_US + 4 * m * n * s / L2_BYTES_PER_US + 6 * m * n / HBM_BYTES_PER_US
    ragged = m % t.bm or n % t.bn or k % t.bk
    if program.padding.value == "pad_operands" and ragged:
        extra += REDUCE_LAUNCH_US + 4 * (tm * t.bm * k + k * tn * t.bn) / HBM_BYTES_PER_US
    elif program.padding.value == "predicate" and ragged:
        extra += 0.03 * m * n * k * 2 / PEAK_FLOP_PER_US  # masked loads cost a little
    return extra


def synthetic_kernel_us(program: Program, problem: Problem) -> float:
    """The synthetic model's time (µs) of `program` on `problem`: launch + max(compute over
    waves of CTAs, DRAM/L2 traffic) + split-K / padding extras, times a +-2% deterministic
    jitter. Deterministic; a test fixture, not a prediction of real hardware."""
    t, s = program.tile, program.split_k.slices
    tm, tn = math.ceil(problem.m / t.bm), math.ceil(problem.n / t.bn)
    k_slice = math.ceil(math.ceil(problem.k / s) / t.bk) * t.bk
    rate = PEAK_FLOP_PER_US / SMS * _cap(program) * _efficiency(program)
    compute = _waves(program, tm * tn * s) * 2 * t.bm * t.bn * k_slice / rate
    total = LAUNCH_US + max(compute, _memory_us(program, problem, tm, tn)) \
        + _extras_us(program, problem, tm, tn)
    return total * (1 + NOISE * (_unit(program, problem) - 0.5))


@lru_cache(maxsize=1)
def _cublas_grid() -> dict[tuple[int, int, int], float]:
    if not CUBLAS_GRID.exists():
        return {}
    with gzip.open(CUBLAS_GRID, "rt", newline="") as f:
        return {(int(r["m"]), int(r["n"]), int(r["k"])):
                min(float(r["nn_kernel_us"]), float(r["tn_kernel_us"])) for r in csv.DictReader(f)}


def cublas_us(problem: Problem) -> tuple[float, bool]:
    """(cuBLAS kernel time in µs, recorded?): the H200 grid figure for a grid shape, else a
    synthetic roofline (launch + the larger of 75% of peak and HBM traffic)."""
    recorded = _cublas_grid().get((problem.m, problem.n, problem.k))
    if recorded is not None:
        return recorded, True
    m, n, k = problem.m, problem.n, problem.k
    compute = 2 * m * n * k / (0.75 * PEAK_FLOP_PER_US)
    return LAUNCH_US + max(compute, 2 * (m * k + k * n + m * n) / HBM_BYTES_PER_US), False


def synthetic_result(program: Program, problem: Problem) -> Result:
    """An ok Result from the synthetic model, flagged SYNTHETIC_FLAG (and device says so)."""
    blas, _ = cublas_us(problem)
    return Result(str(program), problem.m, problem.n, problem.k, str(problem.layout),
                  str(problem.acc), device=SYNTHETIC_DEVICE, key=program.key,
                  dtype=str(problem.dtype),
                  kernel_us=synthetic_kernel_us(program, problem), cublas_us=blas,
                  flags=(SYNTHETIC_FLAG,))


def _key(program: str, m: int, n: int, k: int, layout: str, acc: str,
         dtype: str = "f16") -> Key:
    return (" ".join(program.split()), int(m), int(n), int(k), str(layout), str(acc),
            str(dtype or "f16"))


def load_records(path: Path | str) -> dict[Key, Result]:
    """Recorded Results by (program text, m, n, k, layout, acc, dtype), from a CSV that
    search.measure.report wrote or a JSONL of Result dicts; a later row wins."""
    path = Path(path)
    if path.suffix == ".csv":
        from .report import read_csv
        rows = read_csv(path)
    else:
        rows = [Result.from_dict(json.loads(line)) for line in path.read_text().splitlines()
                if line.strip()]
    return {_key(r.program, r.m, r.n, r.k, r.layout, r.acc, r.dtype): r for r in rows}


def write_records(results: Iterable[Result], path: Path | str) -> Path:
    """Write Results as JSON lines (what load_records reads); atomically."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(r.to_json() + "\n" for r in results))
    tmp.replace(path)
    return path


class ReplayRunner:
    """An evaluator (the tuner's runner protocol: `device`, `archs`, `evaluate`, `close`)
    that answers from records and, where allowed, the synthetic model.

    `delay_s` sleeps that long per evaluated program (to test time budgets and kills);
    `calls` counts the programs answered."""

    def __init__(self, records: Path | str | Iterable[Result] | None = None, *,
                 synthetic: bool = True, device: str = "replay",
                 archs: Sequence[Arch | str] = (Arch.SM90A, Arch.SM80), delay_s: float = 0.0):
        if records is None:
            self.records: dict[Key, Result] = {}
        elif isinstance(records, (str, Path)):
            self.records = load_records(records)
        else:
            self.records = {_key(r.program, r.m, r.n, r.k, r.layout, r.acc, r.dtype): r
                            for r in records}
        self.synthetic, self.device, self.delay_s = synthetic, device, delay_s
        self.archs = tuple(Arch(a) for a in archs)
        self.calls = 0

    def answer(self, program: Program, problem: Problem) -> Result:
        """The Result for one program (see the module docstring for the order)."""
        from ...ir.verify import check
        text = str(program)
        base = Result(text, problem.m, problem.n, problem.k, str(problem.layout),
                      str(problem.acc), key=program.key, dtype=str(problem.dtype))
        reason = check(program, problem)
        if reason:
            return _failed(base, "invalid", reason)
        hit = self.records.get(_key(text, problem.m, problem.n, problem.k, str(problem.layout),
                                    str(problem.acc), str(problem.dtype)))
        if hit is not None:
            return hit
        if self.synthetic:
            return synthetic_result(program, problem)
        return _failed(base, "runtime", f"replay: no recorded result for {text} on {problem}")

    def evaluate(self, programs: Sequence[Program], problem: Problem) -> list[Result]:
        """One Result per program, in order (never raises for a bad program)."""
        out = []
        for program in programs:
            if self.delay_s:
                time.sleep(self.delay_s)
            out.append(self.answer(program, problem))
            self.calls += 1
        return out

    def close(self) -> None:
        """Nothing to release (the protocol's close)."""


def _failed(base: Result, kind: str, message: str) -> Result:
    from .records import replace
    return replace(base, status="failed", kind=kind, message=message)
