"""Supervised worker processes: start, talk JSON lines, time out, kill, restart.

    worker = Worker(["run", "gemmforge.search.measure.bench:run_request", "0"])
    reply = worker.call({"request": ...}, timeout_s=120)   # raises WorkerError

A Worker is one `python -m gemmforge.search.measure.worker` process (search.measure.worker has the protocol) leading its
own process group, so killing it kills everything it started (nvcc included). A Pool shares
several workers among threads, one job per worker at a time. search.measure.measure builds its
BuilderPool and DeviceRunner on these.
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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from ...compiler.child import python_module

STARTUP_TIMEOUT_S = 300.0  # a GPU worker imports torch and creates a CUDA context


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


class Worker:
    """One supervised `python -m gemmforge.search.measure.worker` process, used by one thread at a time."""

    def __init__(self, args: list[str], startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.args, self.startup_timeout_s = args, startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.groups = False  # whether the worker times groups (search.measure.worker's run_group)
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
                python_module("gemmforge.search.measure.worker", *self.args), stdin=subprocess.PIPE,
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
        self.groups = bool(hello.get("groups"))

    def call(self, message: dict, timeout_s: float) -> dict:
        """Send one request and wait up to `timeout_s` for its reply; raise WorkerError.
        A worker may report progress first ({"progress": ...} lines, as a group does after
        each step): each report gives it `timeout_s` again. A reply marked "exiting" (the
        worker stops after an error) reaps the process."""
        with self.lock:
            self.start()
            try:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise WorkerError("runtime", f"worker {self.pid} died ({self._reap()})") \
                    from None
            reply = self._read(timeout_s, "working")
            while "progress" in reply:
                reply = self._read(timeout_s, f"working, after {reply['progress']}")
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
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker leads its own process group
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


class Pool:
    """Workers shared by a thread pool: each job borrows an idle worker for its duration."""

    def __init__(self, workers: list[Worker]):
        self.workers = workers
        self._idle: queue.LifoQueue[Worker] = queue.LifoQueue()  # reuse warm workers first
        for w in workers:
            self._idle.put(w)
        self._executor = ThreadPoolExecutor(len(workers), thread_name_prefix="gemmforge-worker")

    def submit(self, job: Callable[[Worker], object]) -> Future:
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


class Supervised:
    """What BuilderPool and DeviceRunner share: a Pool of workers, closed on exit."""

    _pool: Pool

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
