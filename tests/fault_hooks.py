"""Fault-injecting stand-ins for the kernel runner and the builder, for CPU tests.

Workers load them by file path (search.measure.worker's "/path/fault_hooks.py:run"), so they
really run inside a worker process, and what they do to it is real: os.abort() and
os._exit() kill it, time.sleep() hangs it. Which fault happens is chosen by the request's
m (a real-looking Problem needs no extra field), or by its seed where it is seed_for(code)
(the requests of a group share m). run_group times a group the way
search.measure.bench.run_group does, as far as faults go: a wrong output fails its request, any
other fault the whole group; its ok Results carry the flag "group of N". The OK and
WRONG paths run the real correctness gate (search.measure.gate) on CPU with a fake kernel written
in torch; QUICK_OK skips it (no torch import: cheaper where a test only needs an ok
answer).
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gemmforge.search.measure import gate
from gemmforge.search.measure.records import ArtifactRecord, Result, replace

OK, ABORT, EXIT, HANG, RAISE, CUDA_ERROR, WRONG, UNWRITTEN, SPAWN, QUICK_OK, SLOW_OK = \
    range(11, 22)
SLOW_S = 0.8  # how long a SLOW_OK request takes
FAKE_KERNEL_US, FAKE_CUBLAS_US = 10.0, 12.0


def setup(device: int) -> dict:
    """Like search.measure.bench.setup, without CUDA, and light: a worker that only crashes never
    imports torch (the first gate run does), so restarts stay cheap."""
    return {"sm": 90, "device": f"fake device {device}"}


def healthy() -> bool:
    return True


def _correct(a, b, out):
    out.copy_(gate.reference(a, b, "nn").half())


def _drops_last_k(a, b, out):  # the bug of a kernel that skips its last K step
    out.copy_((a[:, :-1].float() @ b[:-1].float()).half())


def _skips_last_row(a, b, out):
    out[:-1].copy_(gate.reference(a, b, "nn")[:-1].half())


SEED_BASE = 100_000
"""seed_for(code) = SEED_BASE + code: far above the seeds evaluate() hands out (seed + 3 i)."""


def seed_for(code: int) -> int:
    """The seed that makes a request behave as fault `code` whatever its m."""
    return SEED_BASE + code


def behaviour(request) -> int:
    """The fault code of a request: its seed's (seed_for), else its m's."""
    code = request.seed - SEED_BASE
    return code if OK <= code <= SLOW_OK else request.m


def run(request, artifact: ArtifactRecord) -> Result:
    """The fake kernel runner: behaviour by request.m or seed (see the constants above)."""
    m = behaviour(request)
    if m == ABORT:
        os.abort()
    if m == EXIT:
        os._exit(7)
    if m == HANG:
        time.sleep(3600)
    if m == SLOW_OK:
        time.sleep(SLOW_S)
    if m == RAISE:
        raise ValueError("injected failure")
    if m == CUDA_ERROR:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    kernel = {WRONG: _drops_last_k, UNWRITTEN: _skips_last_row}.get(m, _correct)
    err = 0.0 if m in (QUICK_OK, SLOW_OK) else gate.gate(kernel, request.problem(), device="cpu",
                                              seed=request.seed)
    return Result.for_request(request, device="fake", rel_err=err, kernel_us=FAKE_KERNEL_US,
                              cublas_us=FAKE_CUBLAS_US, message=f"pid {os.getpid()}")


def run_group(requests, artifacts, progress=None) -> list[Result]:
    results = []
    for i, (request, artifact) in enumerate(zip(requests, artifacts)):
        try:
            r = run(request, artifact)
            results.append(replace(r, flags=(*r.flags, f"group of {len(requests)}")))
        except gate.GateFailure as e:
            results.append(Result.failure(request, "wrong", str(e)))
        if progress is not None:
            progress(f"request {i}")
    return results


def build(request, target_sm) -> ArtifactRecord:
    """The fake builder: hangs when m == HANG; when m == SPAWN starts a child that would
    outlive it (like a stuck nvcc), writes the child's pid to $FAULT_HOOKS_PIDFILE and
    hangs; else returns a record of no real file."""
    if request.m == SPAWN:
        child = subprocess.Popen(["sleep", "600"])
        Path(os.environ["FAULT_HOOKS_PIDFILE"]).write_text(str(child.pid))
    if request.m in (HANG, SPAWN):
        time.sleep(3600)
    return ArtifactRecord(f"fake{request.m}", "fake", "/nonexistent", request.program,
                          request.layout, request.acc, {"target_sm": target_sm})
