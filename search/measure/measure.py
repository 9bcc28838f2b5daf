"""Builder pool and GPU runner: turn MeasureRequests into Results, surviving any failure.

    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        results = measure(requests, builders=builders, runner=runner)

Builds run in CPU worker processes (`python -m gemmforge.search.measure.worker build`), several at once, each
with a timeout; measurements run in one worker process per GPU (`... run`). Both talk
JSON lines over pipes (search.measure.worker has the protocol), so only plain records cross the
process boundary. A worker that dies (abort, illegal address, a CUDA error it reports
and exits on) or that doesn't answer in time is killed with its whole process group
(nvcc included), its request becomes a `runtime` or `timeout` Result, and the next request
gets a fresh worker: a batch always finishes, with one Result per request, in order.
Requests of one problem and settings are timed together (BenchSettings.interleave); a
group that fails as a whole is measured again request by request.

Workers start lazily (on their first request) and inherit the environment of that moment
(GEMMFORGE_NVCC, GEMMFORGE_CACHE_DIR, ...). Keep pools alive across batches: a GPU worker
pays torch import and CUDA context creation (seconds) once.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from typing import Callable, Sequence

from .records import ArtifactRecord, MeasureRequest, Result, replace
from .supervisor import STARTUP_TIMEOUT_S, Pool, Supervised, Worker, WorkerError

__all__ = ["BuilderPool", "Built", "DeviceRunner", "WorkerError", "measure"]

DEFAULT_BUILDER = "gemmforge.search.measure.worker:build_one"
DEFAULT_RUNNER = "gemmforge.search.measure.bench:run_request"
BUILD_TIMEOUT_MARGIN_S = 60.0  # on top of nvcc's own limit, for lowering and start-up


@dataclass(frozen=True)
class Built:
    """What building one request gave: an artifact, or a failed Result; seconds spent."""

    artifact: ArtifactRecord | None
    failure: Result | None
    build_s: float


class BuilderPool(Supervised):
    """Parallel builds in `workers` CPU processes (default: the CPU count). A build running
    past `timeout_s` (default: GEMMFORGE_BUILD_TIMEOUT + 60 s) is killed with its nvcc and
    becomes a `timeout` failure. `builder` names the build function (search.measure.worker)."""

    def __init__(self, workers: int | None = None, timeout_s: float | None = None,
                 builder: str = DEFAULT_BUILDER):
        from ...compiler.knobs import knobs
        self.timeout_s = timeout_s or knobs().build_timeout_s + BUILD_TIMEOUT_MARGIN_S
        count = workers or os.cpu_count() or 1
        self._pool = Pool([Worker(["build", builder]) for _ in range(count)])

    def submit(self, request: MeasureRequest, target_sm: int | None) -> Future:
        """Build `request` for compute capability `target_sm` (None: the program's own
        arch); the Future holds a `Built`."""
        return self._pool.submit(lambda w: self._build(w, request, target_sm))

    def _build(self, worker: Worker, request: MeasureRequest, target_sm) -> Built:
        start = time.perf_counter()
        try:
            reply = worker.call({"request": request.to_dict(), "target_sm": target_sm},
                                self.timeout_s)
            elapsed = reply.get("build_s", time.perf_counter() - start)
            if "failure" in reply:
                return Built(None, Result.failure(request, reply["failure"], reply["message"],
                                                  build_s=elapsed), elapsed)
            return Built(ArtifactRecord.from_dict(reply["artifact"]), None, elapsed)
        except WorkerError as e:
            failure = Result.failure(request, e.kind, f"build: {e}")
        except (KeyError, TypeError, ValueError) as e:
            failure = Result.failure(request, "compile", f"build: malformed reply ({e!r})")
        return Built(None, failure, time.perf_counter() - start)

    def build(self, requests: Sequence[MeasureRequest], target_sm: int | None) -> list[Built]:
        """Build all of `requests` in parallel; one Built per request, in order."""
        return [f.result() for f in [self.submit(r, target_sm) for r in requests]]



class DeviceRunner(Supervised):
    """One measuring worker process per CUDA device in `devices`. `runner` names the
    function a worker runs per request (default search.measure.bench:run_request; tests inject
    fakes). Each request may take request.settings.timeout_s seconds."""

    def __init__(self, devices: Sequence[int] = (0,), runner: str = DEFAULT_RUNNER,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self._pool = Pool([Worker(["run", runner, str(d)], startup_timeout_s)
                            for d in devices])

    def submit(self, request: MeasureRequest, artifact: ArtifactRecord,
               build_s: float | None = None) -> Future:
        """Measure `request` with its built `artifact`; the Future holds a Result."""
        return self._pool.submit(lambda w: self._run(w, request, artifact, build_s))

    @staticmethod
    def _run(worker: Worker, request, artifact, build_s) -> Result:
        start = time.perf_counter()
        try:
            reply = worker.call({"request": request.to_dict(), "artifact": artifact.to_dict()},
                                request.settings.timeout_s)
            result = Result.from_dict(reply["result"])
        except (KeyError, TypeError, ValueError) as e:
            result = Result.failure(request, "runtime", f"measure: malformed reply ({e!r})")
        except WorkerError as e:
            result = Result.failure(request, e.kind, f"measure: {e}",
                                    measure_s=time.perf_counter() - start)
        return replace(result, build_s=build_s, key=result.key or artifact.key)

    def submit_group(self, requests: Sequence[MeasureRequest],
                     artifacts: Sequence[ArtifactRecord],
                     build_s: Sequence[float | None]) -> Future:
        """Measure requests of one problem and settings together, timed interleaved (the
        worker's run_group); the Future holds one Result per request, in order. Each step
        of the group (a gate, a calibration, one protocol's rounds for the whole group)
        may take a request's timeout_s: the worker reports every step it finishes. If the
        group fails as a whole (a crash, a hang, a CUDA error) or the worker can't time
        groups, each request is measured alone, so only the one at fault fails; those
        Results carry a flag saying why."""
        return self._pool.submit(lambda w: self._run_group(w, requests, artifacts, build_s))

    @classmethod
    def _run_group(cls, worker: Worker, requests, artifacts, build_s) -> list[Result]:
        why = "one request"
        if len(requests) > 1:
            why = cls._try_group(worker, requests, artifacts)
            if isinstance(why, list):
                return [replace(r, build_s=b, key=r.key or a.key)
                        for r, a, b in zip(why, artifacts, build_s)]
        alone = [cls._run(worker, r, a, b) for r, a, b in zip(requests, artifacts, build_s)]
        if len(requests) == 1:
            return alone
        note = f"timed alone: {why}"
        return [replace(r, flags=(*r.flags, note)) for r in alone]

    @staticmethod
    def _try_group(worker: Worker, requests, artifacts) -> list[Result] | str:
        """The group's Results, or why it wasn't timed as a group."""
        with worker.lock:
            try:
                worker.start()
            except WorkerError as e:
                return f"the worker did not start ({e})"
            if not worker.groups:
                return "the worker does not time groups"
            try:
                reply = worker.call({"requests": [r.to_dict() for r in requests],
                                     "artifacts": [a.to_dict() for a in artifacts]},
                                    max(r.settings.timeout_s for r in requests))
            except WorkerError as e:
                return f"the group's worker failed ({e.kind}): {str(e)[:300]}"
        try:
            results = [Result.from_dict(d) for d in reply["results"]]
        except (KeyError, TypeError, ValueError):
            error = str(reply.get("group_error", reply)).strip() or "no message"
            return f"the group failed: {error.splitlines()[0][:300]}"
        if len(results) != len(requests):
            return f"the group's worker answered {len(results)} results for {len(requests)}"
        return results

    def run(self, pairs: Sequence[tuple[MeasureRequest, ArtifactRecord]]) -> list[Result]:
        """Measure every (request, artifact); one Result per pair, in order."""
        return [f.result() for f in [self.submit(r, a) for r, a in pairs]]

    def info(self) -> dict:
        """What the first device's worker reported at start-up ({"sm": 90, "device": name}
        for the real runner); starts it if needed."""
        worker = self._pool.workers[0]
        with worker.lock:
            worker.start()
            return dict(worker.info)

    @property
    def target_sm(self) -> int | None:
        """Compute capability of the devices (as 90), or None if the runner didn't say."""
        return self.info().get("sm")



def _groups(requests: Sequence[MeasureRequest]) -> list[list[int]]:
    """Indices of the requests timed together: those that share a problem and settings,
    where the settings ask for it (BenchSettings.interleave); the rest alone."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        key = ((r.m, r.n, r.k, r.layout, r.acc, r.dtype, r.settings) if r.settings.interleave
               else (i,))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def measure(requests: Sequence[MeasureRequest], *, target_sm: int | None = None,
            builders: BuilderPool | None = None, runner: DeviceRunner | None = None,
            progress: bool = True,
            on_results: Callable[[list[int], list[Result]], None] | None = None
            ) -> list[Result]:
    """Build and measure every request; one Result per request, in order. Builds run in
    parallel; requests that share a problem and settings are timed together once all of
    their builds are done (BenchSettings.interleave; DeviceRunner.submit_group), any other
    as soon as its build is. `target_sm` defaults to the runner's device. Pools passed in
    stay open; pools made here close. Raises WorkerError only when asking the runner for
    its device fails (no GPU, a broken driver): that is no program's fault, so it is not
    dressed up as a failed Result. `on_results(indices, results)`, if given, is called as
    results land (a failed build alone, a timed group at once), so a caller can store each
    before the batch ends."""
    from tqdm import tqdm
    own_builders, own_runner = builders is None, runner is None
    builders, runner = builders or BuilderPool(), runner or DeviceRunner()
    try:
        target_sm = target_sm if target_sm is not None else runner.target_sm
        results: list[Result | None] = [None] * len(requests)
        with tqdm(total=len(requests), desc="measure", disable=not progress) as bar:
            builds = {builders.submit(r, target_sm): i for i, r in enumerate(requests)}
            group_of = {i: g for g in _groups(requests) for i in g}
            built: dict[int, Built] = {}
            runs = {}
            for done in as_completed(builds):
                i = builds[done]
                built[i] = done.result()
                if built[i].failure is not None:
                    results[i] = built[i].failure
                    bar.update()
                    if on_results is not None:
                        on_results([i], [built[i].failure])
                group = group_of[i]
                if all(j in built for j in group):
                    ready = [j for j in group if built[j].failure is None]
                    if ready:
                        runs[runner.submit_group(
                            [requests[j] for j in ready], [built[j].artifact for j in ready],
                            [built[j].build_s for j in ready])] = ready
            for done in as_completed(runs):
                landed = done.result()
                for j, result in zip(runs[done], landed):
                    results[j] = result
                    bar.update()
                if on_results is not None:
                    on_results(list(runs[done]), list(landed))
        return results
    finally:
        if own_builders:
            builders.close()
        if own_runner:
            runner.close()
