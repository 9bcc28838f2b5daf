"""Builder pool and GPU runner: turn MeasureRequests into Results, surviving any failure.

    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:
        results = measure(requests, builders=builders, runner=runner)

Builds run in CPU worker processes (`python -m search.worker build`), several at once, each
with a timeout; measurements run in one worker process per GPU (`... run`). Both talk
JSON lines over pipes (search.worker has the protocol), so only plain records cross the
process boundary. A worker that dies (abort, illegal address, a CUDA error it reports
and exits on) or that doesn't answer in time is killed with its whole process group
(nvcc included), its request becomes a `runtime` or `timeout` Result, and the next request
gets a fresh worker: a batch always finishes, with one Result per request, in order.

Workers start lazily (on their first request) and inherit the environment of that moment
(GEMMFORGE_NVCC, GEMMFORGE_CACHE_DIR, ...). Keep pools alive across batches: a GPU worker
pays torch import and CUDA context creation (seconds) once.
"""
from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Sequence

from search.records import ArtifactRecord, MeasureRequest, Result, replace

DEFAULT_BUILDER = "search.worker:build_one"
DEFAULT_RUNNER = "search.bench:run_request"
STARTUP_TIMEOUT_S = 300.0  # a GPU worker imports torch and creates a CUDA context
BUILD_TIMEOUT_MARGIN_S = 60.0  # on top of nvcc's own limit, for lowering and start-up


class WorkerError(Exception):
    """A worker failed to answer: `kind` is "timeout" (killed after its limit) or "runtime"
    (died, or its setup failed)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _child_env() -> dict[str, str]:
    """The environment of a worker: ours, with our sys.path so it imports what we import."""
    paths = [p or os.getcwd() for p in sys.path]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


class _Worker:
    """One supervised `python -m search.worker` process, used by one thread at a time."""

    def __init__(self, args: list[str], startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.args, self.startup_timeout_s = args, startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.starts = 0
        self.lock = threading.RLock()  # one request at a time per process
        self._buf = b""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Start the process if it isn't running; raise WorkerError if its setup fails."""
        if self.proc is not None:
            if self._peek() is None:
                return
            self.kill()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "search.worker", *self.args], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, start_new_session=True, env=_child_env())
        except OSError as e:
            self.proc = None
            raise WorkerError("runtime", f"can't start a worker: {e}") from None
        self._buf = b""
        self.starts += 1
        hello = self._read(self.startup_timeout_s, "starting")
        if "setup_error" in hello:
            self.kill()
            raise WorkerError("runtime", f"worker setup failed: {hello['setup_error']}")
        self.info = hello.get("info", {})

    def call(self, message: dict, timeout_s: float) -> dict:
        """Send one request and wait up to `timeout_s` for its reply; raise WorkerError.
        A reply marked "exiting" (the worker stops after an error) reaps the process."""
        with self.lock:
            self.start()
            try:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise WorkerError("runtime", f"worker {self.pid} died ({self._reap()})") \
                    from None
            reply = self._read(timeout_s, "working")
            if reply.get("exiting"):
                self._reap()
            return reply

    def _read(self, timeout_s: float, doing: str) -> dict:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pid = self.pid
                self.kill()
                raise WorkerError("timeout", f"worker {pid} gave no answer within "
                                             f"{timeout_s:g} s ({doing}); killed")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    pid = self.pid
                    raise WorkerError("runtime", f"worker {pid} died while {doing} "
                                                 f"({self._reap()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
            if isinstance(reply, dict):
                return reply
        except ValueError:
            pass
        pid = self.pid
        self.kill()
        raise WorkerError("runtime", f"worker {pid} sent a garbled reply: {line[:200]!r}")

    def _peek(self) -> int | None:
        """The exit status (negative: the signal) once the process has ended, else None.
        It doesn't reap: until kill() does, the pid still names the worker's process group,
        so killing the group can only reach processes this worker started."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _reap(self) -> str:
        """Wait (up to 30 s) for the ending process, kill what is left of its group, and
        say how it ended."""
        deadline = time.monotonic() + 30
        while (code := self._peek()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.kill()
        return _describe_exit(code)

    def kill(self) -> None:
        """Kill the worker and every process it started; the next call starts a fresh one."""
        if self.proc is None:
            return
        if self.proc.returncode is None:  # not reaped yet: the group id is still ours
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker leads its own session
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()

    def close(self) -> None:
        """Let the worker finish (stdin closes) and reap it; kill it if it lingers."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class _Pool:
    """Workers shared by a thread pool: each job borrows an idle worker for its duration."""

    def __init__(self, workers: list[_Worker]):
        self.workers = workers
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()  # reuse warm workers first
        for w in workers:
            self._idle.put(w)
        self._executor = ThreadPoolExecutor(len(workers), thread_name_prefix="gemmforge-worker")

    def submit(self, job: Callable[[_Worker], object]) -> Future:
        return self._executor.submit(self._run, job)

    def _run(self, job):
        worker = self._idle.get()
        try:
            return job(worker)
        finally:
            self._idle.put(worker)

    @property
    def restarts(self) -> int:
        """How many times a worker was started again after its first start."""
        return sum(max(w.starts - 1, 0) for w in self.workers)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for w in self.workers:
            w.close()


class _Supervised:
    """What BuilderPool and DeviceRunner share: a _Pool of workers, closed on exit."""

    _pool: _Pool

    @property
    def restarts(self) -> int:
        """How many times a worker was started again (after a crash, hang or CUDA error)."""
        return self._pool.restarts

    def close(self) -> None:
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass(frozen=True)
class Built:
    """What building one request gave: an artifact, or a failed Result; seconds spent."""

    artifact: ArtifactRecord | None
    failure: Result | None
    build_s: float


class BuilderPool(_Supervised):
    """Parallel builds in `workers` CPU processes (default: the CPU count). A build running
    past `timeout_s` (default: GEMMFORGE_BUILD_TIMEOUT + 60 s) is killed with its nvcc and
    becomes a `timeout` failure. `builder` names the build function (search.worker)."""

    def __init__(self, workers: int | None = None, timeout_s: float | None = None,
                 builder: str = DEFAULT_BUILDER):
        from compiler.knobs import knobs
        self.timeout_s = timeout_s or knobs().build_timeout_s + BUILD_TIMEOUT_MARGIN_S
        count = workers or os.cpu_count() or 1
        self._pool = _Pool([_Worker(["build", builder]) for _ in range(count)])

    def submit(self, request: MeasureRequest, target_sm: int | None) -> Future:
        """Build `request` for compute capability `target_sm` (None: the program's own
        arch); the Future holds a `Built`."""
        return self._pool.submit(lambda w: self._build(w, request, target_sm))

    def _build(self, worker: _Worker, request: MeasureRequest, target_sm) -> Built:
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



class DeviceRunner(_Supervised):
    """One measuring worker process per CUDA device in `devices`. `runner` names the
    function a worker runs per request (default search.bench:run_request; tests inject
    fakes). Each request may take request.settings.timeout_s seconds."""

    def __init__(self, devices: Sequence[int] = (0,), runner: str = DEFAULT_RUNNER,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self._pool = _Pool([_Worker(["run", runner, str(d)], startup_timeout_s)
                            for d in devices])

    def submit(self, request: MeasureRequest, artifact: ArtifactRecord,
               build_s: float | None = None) -> Future:
        """Measure `request` with its built `artifact`; the Future holds a Result."""
        return self._pool.submit(lambda w: self._run(w, request, artifact, build_s))

    @staticmethod
    def _run(worker: _Worker, request, artifact, build_s) -> Result:
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



def measure(requests: Sequence[MeasureRequest], *, target_sm: int | None = None,
            builders: BuilderPool | None = None, runner: DeviceRunner | None = None,
            progress: bool = True) -> list[Result]:
    """Build and measure every request; one Result per request, in order. Builds run in
    parallel and each measurement starts as soon as its build is done. `target_sm`
    defaults to the runner's device. Pools passed in stay open; pools made here close.
    Raises WorkerError only when asking the runner for its device fails (no GPU, a broken
    driver): that is no program's fault, so it is not dressed up as a failed Result."""
    from tqdm import tqdm
    own_builders, own_runner = builders is None, runner is None
    builders, runner = builders or BuilderPool(), runner or DeviceRunner()
    try:
        target_sm = target_sm if target_sm is not None else runner.target_sm
        results: list[Result | None] = [None] * len(requests)
        with tqdm(total=len(requests), desc="measure", disable=not progress) as bar:
            builds = {builders.submit(r, target_sm): i for i, r in enumerate(requests)}
            runs = {}
            for done in as_completed(builds):
                i, built = builds[done], done.result()
                if built.failure is not None:
                    results[i] = built.failure
                    bar.update()
                else:
                    runs[runner.submit(requests[i], built.artifact, built.build_s)] = i
            for done in as_completed(runs):
                results[runs[done]] = done.result()
                bar.update()
        return results
    finally:
        if own_builders:
            builders.close()
        if own_runner:
            runner.close()
