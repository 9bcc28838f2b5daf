"""What the grid campaign measures with: many problems' groups per call, each stored as it lands.

    runner = GridRunner(builders=16)               # or ReplayGridRunner(ReplayRunner(...))
    failed = runner.build(programs_with_a_problem, deadline)   # the portfolio, built once
    runner.measure_groups([(problem, [program text, ...]), ...], settings,
                          on_group=lambda problem, results: store.record(...))

Both are also tuner runners (search.measure.runners.Runner: `device`, `archs`, `evaluate`), so the
campaign's search pass hands them to search.tune.tuner as they are. GridRunner times each group
on the GPU through search.measure.measure (a group = one problem's programs + cuBLAS, timed
interleaved by search.measure.bench.run_group); `on_group` gets a problem's Results once all of
them have landed, so a caller writes a group in one transaction. ReplayGridRunner answers
from search.measure.replay (records, else the synthetic model) without a GPU; where the settings
ask for the sustained protocol it derives a synthetic sustained figure (flagged, like
every synthetic figure) so the selection under load runs in CPU tests too.
"""
from __future__ import annotations

import time
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import as_completed
from typing import Callable, Sequence

from ...ir.program import Problem
from ..measure.records import BenchSettings, MeasureRequest, Result, replace
from ..measure.runners import archs_for_sm

OnGroup = Callable[[Problem, list[Result]], None]
SEED_STRIDE = 3  # as search.measure.env: the gate draws seed, seed + 1, seed + 2 per request
SUSTAINED_DERATE = 0.04  # replay only: a program's synthetic sustained loss, up to 4 %


def _requests(problem: Problem, programs: Sequence[str], settings: BenchSettings,
              seed: int) -> list[MeasureRequest]:
    from ...ir.text import parse
    return [MeasureRequest.make(parse(p), problem, settings, seed + SEED_STRIDE * i)
            for i, p in enumerate(programs)]


class GridRunner:
    """The GPU: one measuring worker on CUDA device `device_index`, `builders` build
    processes; both live until close(). `settings` are what evaluate() (the tuner's
    calls) times with."""

    def __init__(self, device_index: int = 0, builders: int | None = None,
                 settings: BenchSettings | None = None):
        from ..measure.measure import BuilderPool, DeviceRunner
        self._runner = DeviceRunner(devices=[device_index])
        self._builders = BuilderPool(builders)
        self.settings = settings
        info = self._runner.info()
        self.device = info.get("device", f"cuda:{device_index}")
        self.sm = info.get("sm")
        self.archs = archs_for_sm(self.sm)

    def build(self, jobs: Sequence[tuple[str, Problem]], deadline: float | None,
              on_built: Callable[[str, str | None, float], None]) -> int:
        """Build each (program text, a problem it is planned for) in parallel (the artifact
        cache keeps them for every later request); `on_built(program, failure message or
        None, build seconds)` as each finishes. Stops waiting at `deadline` (monotonic
        seconds); returns how many finished."""
        futures = {self._builders.submit(_requests(problem, [text], BenchSettings(), 0)[0],
                                         self.sm): text for text, problem in jobs}
        finished = 0
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for done in as_completed(futures, timeout=timeout):
                built = done.result()
                failure = None if built.failure is None else \
                    f"{built.failure.kind}: {built.failure.message}"
                on_built(futures[done], failure, built.build_s)
                finished += 1
        except FutureTimeout:
            for f in futures:
                f.cancel()
        return finished

    def measure_groups(self, groups: Sequence[tuple[Problem, Sequence[str]]],
                       settings: BenchSettings, on_group: OnGroup, seed: int = 0) -> None:
        """Time every (problem, programs) group; on_group(problem, its Results in order)
        as each problem's last result lands."""
        from ..measure.measure import measure
        requests, owner = [], []
        for g, (problem, programs) in enumerate(groups):
            requests += _requests(problem, programs, settings, seed)
            owner += [g] * len(programs)
        waiting = {g: len(programs) for g, (_, programs) in enumerate(groups)}
        landed: dict[int, dict[int, Result]] = {g: {} for g in waiting}
        start = {g: owner.index(g) for g in waiting if waiting[g]}

        def on_results(indices: list[int], results: list[Result]) -> None:
            for i, r in zip(indices, results):
                landed[owner[i]][i - start[owner[i]]] = r
            for g in {owner[i] for i in indices}:
                if len(landed[g]) == waiting[g]:
                    on_group(groups[g][0], [landed[g][j] for j in range(waiting[g])])
        if requests:
            measure(requests, target_sm=self.sm, builders=self._builders,
                    runner=self._runner, progress=False, on_results=on_results)

    def evaluate(self, programs, problem: Problem) -> list[Result]:
        """The tuner's runner protocol: search.measure.env.evaluate on this runner's pools."""
        from ..measure.env import evaluate
        return evaluate(programs, problem, device_runner=self._runner,
                        builders=self._builders, settings=self.settings, target_sm=self.sm)

    def close(self) -> None:
        self._builders.close()
        self._runner.close()


class ReplayGridRunner:
    """GridRunner's surface over a search.measure.replay.ReplayRunner: no builds, answers from
    records or the synthetic model (`replay.delay_s` per program, to test kills)."""

    def __init__(self, replay):
        self.replay = replay
        self.device, self.archs = replay.device, replay.archs

    def build(self, jobs, deadline, on_built) -> int:
        """Nothing to build: every job 'finishes' at once."""
        for text, _ in jobs:
            on_built(text, None, 0.0)
        return len(jobs)

    def measure_groups(self, groups, settings: BenchSettings, on_group: OnGroup,
                       seed: int = 0) -> None:
        for problem, programs in groups:
            results = self.replay.evaluate([_parse(p) for p in programs], problem)
            if "sustained" in settings.protocols:
                results = [_synthetic_sustained(r) for r in results]
            on_group(problem, results)

    def evaluate(self, programs, problem: Problem) -> list[Result]:
        return self.replay.evaluate(programs, problem)

    def close(self) -> None:
        self.replay.close()


def _parse(text: str):
    from ...ir.text import parse
    return parse(text)


def _synthetic_sustained(r: Result) -> Result:
    """A replayed result with sustained figures: the kernel time slowed by a deterministic
    0-4 % per program (cuBLAS by 2 %), so the order under load differs from the short one."""
    from ..measure.replay import _unit
    if not r.ok or r.kernel_us is None or r.cublas_us is None:
        return r
    return replace(r, sustained_us=r.kernel_us * (1 + SUSTAINED_DERATE * _unit("sustained",
                                                                              r.program)),
                   cublas_sustained_us=r.cublas_us * (1 + SUSTAINED_DERATE / 2))
