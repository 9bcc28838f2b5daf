"""Rewards from recorded GPU measurements, for RL loops on a machine with no GPU.

    from gemmforge.search.learn.replay_reward import ReplayReward
    model = ReplayReward()                          # search/data/measured_gpu.csv.xz, H100 rows
    results = model.evaluate(programs, problem)     # Results, in order, like search.measure.env.evaluate
    rewards = model.score(programs, problem)        # policy.reward.reward of each

Answers, per program:
  1. text that doesn't parse, or a program that fails ir.verify for the problem: an
     `invalid` Result with the reason (so the reward is policy.reward.WORST_REWARD);
  2. a (program, problem) the GPU measured: the median of its recorded measurements
     (scripts/build_replay_data.py merged every CSV that benchmarks/results ever held and
     every ok reading of the H100 campaign stores),
     flagged REPLAYED_FLAG;
  3. otherwise an estimate from the K_NEAREST nearest measured (program, problem) pairs,
     flagged ESTIMATED_FLAG. The distance adds
     `program_distance` (knob by knob: |log2| steps for the power-of-two knobs, 1 for any
     other knob that differs, BACKEND_DISTANCE for another backend) and SHAPE_WEIGHT x the
     |log2| steps between the two problems' m, n and k, and KIND_DISTANCE where the arch,
     layout or accumulator differs. The estimated log speedup is the
     1 / (1 + distance) weighted mean of the neighbours' log speedups, less
     ESTIMATE_PENALTY per unit of the nearest distance: an unmeasured program is never
     scored as well as the measured one it resembles, so a policy gains nothing by
     wandering away from what was measured.

The reward is policy.reward.reward of the Result (what search.measure.env scores with): log(cuBLAS
time / kernel time). Replayed times are kernel times from short windows on one GPU, not a
live measurement: a final evaluation measures the proposals on the GPU (search.measure.env.evaluate).
"""
from __future__ import annotations

import csv
import gzip
import lzma
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ...ir.knobs import KNOBS, knob_value
from ...ir.program import Problem, Program
from ...policy.reward import reward
from ..measure.records import MeasureRequest, Result

DATA_FILE = Path(__file__).parents[1] / "data" / "measured_gpu.csv.xz"
DEFAULT_DEVICE = "H100"
REPLAYED_FLAG = "replayed"
ESTIMATED_FLAG = "estimated"
K_NEAREST = 4
SHAPE_WEIGHT = 1.0
BACKEND_DISTANCE = 4.0
KIND_DISTANCE = 16.0  # another arch, layout or accumulator: a neighbour of last resort
ESTIMATE_PENALTY = 0.02
_POW2_KNOBS = frozenset(("tile.bm", "tile.bn", "tile.bk", "warps.wm", "warps.wn", "stages",
                         "raster.group", "split_k.slices", "cluster.cm", "cluster.cn"))


@dataclass(frozen=True)
class Measured:
    """One merged measurement: the problem, the program's canonical text, the median
    speedup (cuBLAS time / kernel time) and times (µs), and how many were merged."""

    problem: Problem
    program: str
    speedup: float
    kernel_us: float
    cublas_us: float
    count: int


def read_measured(path: str | Path = DATA_FILE, device: str = DEFAULT_DEVICE) -> list[Measured]:
    """The rows of a build_replay_data file whose device contains `device` ("" for all)."""
    path = Path(path)
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rt", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [Measured(Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["layout"], r["acc"]),
                     r["program"], float(r["speedup"]), float(r["kernel_us"]),
                     float(r["cublas_us"]), int(r["count"]))
            for r in rows if device.lower() in r["device"].lower()]


def program_distance(a: Program, b: Program) -> float:
    """How far apart two programs are: per knob, |log2(a / b)| for the power-of-two knobs
    and 1 for any other knob that differs; BACKEND_DISTANCE more for another backend."""
    total = BACKEND_DISTANCE if a.backend != b.backend else 0.0
    for knob in KNOBS:
        x, y = knob_value(a, knob), knob_value(b, knob)
        if x == y:
            continue
        total += abs(math.log2(x / y)) if knob in _POW2_KNOBS else 1.0
    return total


def _log_shape(problem: Problem) -> np.ndarray:
    return np.log2([problem.m, problem.n, problem.k])


def _invalid(text: str, problem: Problem, reason: str) -> Result:
    request = MeasureRequest(text.strip(), problem.m, problem.n, problem.k,
                             str(problem.layout), str(problem.acc))
    return Result.failure(request, "invalid", reason)


class ReplayReward:
    """Replayed and estimated rewards over a file of merged GPU measurements.

    `rows` (Measured) default to read_measured(path, device). `exclude`: problems whose
    measurements must not be used (held-out shapes: neither replayed nor neighbours)."""

    def __init__(self, path: str | Path = DATA_FILE, device: str = DEFAULT_DEVICE, *,
                 rows: Sequence[Measured] | None = None, exclude: Iterable[Problem] = ()):
        skip = {str(p) for p in exclude}
        rows = [r for r in (rows if rows is not None else read_measured(path, device))
                if str(r.problem) not in skip]
        if not rows:
            raise ValueError(f"no measurements for device {device!r} in {path}")
        self.device = device
        self.rows = rows
        self.exact = {(str(r.problem), r.program): r for r in rows}
        self._at: dict[Problem, list[Measured]] = {}  # the rows of each problem
        for r in rows:
            self._at.setdefault(r.problem, []).append(r)
        self._programs = sorted({r.program for r in rows})
        index = {text: i for i, text in enumerate(self._programs)}
        self._parsed = [_parse(t) for t in self._programs]
        self._program_of = np.array([index[r.program] for r in rows])
        self._shape = np.array([_log_shape(r.problem) for r in rows])
        self._log_speedup = np.log([r.speedup for r in rows])
        groups = [(str(r.problem.layout), str(r.problem.acc),
                   self._parsed[index[r.program]].arch) for r in rows]
        self._group_ids = {g: i for i, g in enumerate(sorted(set(groups), key=str))}
        self._group = np.array([self._group_ids[g] for g in groups])
        self._distances = lru_cache(maxsize=4096)(self._program_distances)

    def problems(self) -> list[Problem]:
        """Every problem with at least one measurement, sorted by text."""
        return sorted(self._at, key=str)

    def programs(self) -> list[str]:
        """Every measured program's text, sorted."""
        return self._programs

    def at(self, problem: Problem) -> list[Measured]:
        """The rows measured at `problem` (none for a problem never measured)."""
        return self._at.get(problem, [])

    def best(self, problem: Problem) -> Measured | None:
        """The fastest measured program for `problem` (the tuned best), or None."""
        here = self.at(problem)
        return max(here, key=lambda r: r.speedup) if here else None

    def _program_distances(self, program: Program) -> np.ndarray:
        return np.array([program_distance(program, other) for other in self._parsed])

    def _cublas_us(self, problem: Problem, near: Measured) -> float:
        """cuBLAS's recorded time on `problem`, else `near`'s scaled by the FLOPs."""
        for r in self.at(problem):
            return r.cublas_us
        return near.cublas_us * problem.flops / near.problem.flops

    def estimate(self, program: Program, problem: Problem) -> tuple[float, list[Measured]]:
        """(estimated speedup, the neighbours it came from) for a pair never measured."""
        group = self._group_ids.get((str(problem.layout), str(problem.acc), program.arch), -1)
        same = self._group == group
        dist = (self._distances(program)[self._program_of]
                + SHAPE_WEIGHT * np.abs(self._shape - _log_shape(problem)).sum(axis=1))
        dist = dist + np.where(same, 0.0, KIND_DISTANCE)
        order = np.argsort(dist, kind="stable")[:K_NEAREST]
        weights = 1.0 / (1.0 + dist[order])
        log_ratio = float((weights * self._log_speedup[order]).sum() / weights.sum())
        log_ratio -= ESTIMATE_PENALTY * float(dist[order[0]])
        return math.exp(log_ratio), [self.rows[i] for i in order]

    def result(self, program: Program | str, problem: Problem) -> Result:
        """The Result for one program: replayed, estimated, or invalid with the reason."""
        from ...ir.program import IRError
        from ...ir.text import parse
        from ...ir.verify import check
        text = program if isinstance(program, str) else str(program)
        try:
            parsed = parse(text) if isinstance(program, str) else program
            reason = check(parsed, problem)
        except IRError as e:
            return _invalid(text, problem, str(e))
        if reason:
            return _invalid(str(parsed), problem, reason)
        request = MeasureRequest.make(parsed, problem)
        hit = self.exact.get((str(problem), str(parsed)))
        if hit is not None:
            return Result.for_request(
                request, device=self.device, kernel_us=hit.kernel_us, cublas_us=hit.cublas_us,
                paired_speedup=hit.speedup,
                flags=(f"{REPLAYED_FLAG}: median of {hit.count} GPU measurements",))
        speedup, near = self.estimate(parsed, problem)
        cublas = self._cublas_us(problem, near[0])
        return Result.for_request(
            request, device=self.device, kernel_us=cublas / speedup, cublas_us=cublas,
            paired_speedup=speedup,
            flags=(f"{ESTIMATED_FLAG}: nearest measured {near[0].program} on "
                   f"{near[0].problem}",))

    def evaluate(self, programs: Sequence, problem: Problem) -> list[Result]:
        """One Result per program (ir Programs or their text), in order."""
        return [self.result(p, problem) for p in programs]

    def score(self, programs: Sequence, problem: Problem) -> list[float]:
        """policy.reward.reward of each program's Result."""
        return [reward(r) for r in self.evaluate(programs, problem)]


def is_estimated(result: Result) -> bool:
    """True for a Result this model estimated rather than replayed."""
    return any(f.startswith(ESTIMATED_FLAG) for f in result.flags)


def _parse(text: str) -> Program:
    from ...ir.text import parse
    return parse(text)
