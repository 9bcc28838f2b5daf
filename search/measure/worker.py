"""The worker process behind search.measure.measure: one JSON request per line in, one reply out.

    python -m gemmforge.search.measure.worker build search.measure.worker:build_one
    python -m gemmforge.search.measure.worker run search.measure.bench:run_request 0

The last argument of `run` is the CUDA device index. SPEC names the function that does the
work, as "package.module:function" or "/path/to/file.py:function": that is how tests inject
fake builders and fake kernel runners that crash, hang, raise or answer wrongly. If SPEC's
module defines `setup(device) -> dict`, a run worker calls it once at start and reports
what it returns (the device's "sm" and name); `healthy() -> bool`, if defined, is asked
after a wrong answer whether the process can go on.

Groups: if SPEC's module also defines `run_group(requests, artifacts) -> [Result]`
(search.measure.bench does), a run worker takes several requests of one problem in one message
and times them together; the ready line says so ("groups": true).

Protocol. The worker first writes {"ready": pid, "info": {...}, "groups": bool} (or
{"setup_error": text} and exits). Then, per request line:
  build: {"request": MeasureRequest, "target_sm": int | null}
         -> {"artifact": ArtifactRecord, "build_s": s} | {"failure": kind, "message": text}
  run:   {"request": MeasureRequest, "artifact": ArtifactRecord} -> {"result": Result}
         {"requests": [MeasureRequest], "artifacts": [ArtifactRecord]}
         -> {"progress": text} lines (one per step of the group), then
            {"results": [Result]} | {"group_error": text} (then the worker exits)
Replies travel on the process's original stdout; fd 1 is pointed at stderr at start, so a
stray print (or a kernel's printf) can't corrupt the protocol. After any exception in a run
(a CUDA error poisons the context) and after a wrong answer that leaves the worker
unhealthy, the worker sends its reply and exits with EXIT_AFTER_ERROR; the parent starts a
fresh one. Nothing but JSON crosses the process boundary.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from ...compiler.values import BuildError
from ...ir.program import IRError
from .gate import GateFailure
from .records import ArtifactRecord, MeasureRequest, Result

EXIT_AFTER_ERROR = 3
"""Exit status of a worker that stopped on purpose after an error it can't recover from."""


def resolve(spec: str):
    """(module, function) named by "module:function" or "/path/file.py:function"."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"{spec!r} is not of the form module:function or file.py:function")
    if where.endswith(".py"):
        module_name = f"_gemmforge_hook_{Path(where).stem}"
        loader_spec = importlib.util.spec_from_file_location(module_name, where)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return module, getattr(module, name)


def build_one(request: MeasureRequest, target_sm: int | None) -> ArtifactRecord:
    """Verify, lower and build `request`'s program (backends.pipeline.compile) for a device
    of compute capability `target_sm` (None: the program's own arch). Raises ir.IRError
    (VerifyError included) or compiler.values.BuildError."""
    from ...compiler.values import Target
    from ...backends.pipeline import compile as compile_program
    from ...ir.text import parse
    artifact = compile_program(parse(request.program), request.problem(), Target(target_sm))
    return ArtifactRecord.from_artifact(artifact)


def _failure_text(e: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-4))
    return f"{type(e).__name__}: {e}\n{tb[-3000:]}"


def handle_build(builder, module, msg: dict) -> tuple[dict, bool]:
    """Run one build; map ir.IRError to invalid, a BuildError to compile (timeout when the
    toolchain ran out of time), anything else to compile with its traceback."""
    request, start = MeasureRequest.from_dict(msg["request"]), time.perf_counter()
    try:
        artifact = builder(request, msg.get("target_sm"))
    except IRError as e:
        return {"failure": "invalid", "message": str(e)}, False
    except BuildError as e:
        timed_out = isinstance(e.__context__, subprocess.TimeoutExpired)
        return {"failure": "timeout" if timed_out else "compile", "message": str(e)}, False
    except Exception as e:  # a lowering bug: report it, keep building others
        return {"failure": "compile", "message": _failure_text(e)}, False
    return {"artifact": artifact.to_dict(), "build_s": time.perf_counter() - start}, False


def handle_run(runner, module, msg: dict) -> tuple[dict, bool]:
    """Run one measurement; a GateFailure is `wrong`, any other exception `runtime` (and the
    worker exits: its CUDA context may be poisoned)."""
    if "requests" in msg:
        return _handle_group(module, msg)
    request = MeasureRequest.from_dict(msg["request"])
    artifact = ArtifactRecord.from_dict(msg["artifact"])
    try:
        result = runner(request, artifact)
    except GateFailure as e:
        still_ok = _healthy(module)
        note = "" if still_ok else "\n(the CUDA context failed its health check; worker restarts)"
        return {"result": Result.failure(request, "wrong", str(e) + note).to_dict()}, not still_ok
    except Exception as e:
        message = _failure_text(e) + f"\n(worker {os.getpid()} exits; the next request gets a " \
                                     "fresh one)"
        return {"result": Result.failure(request, "runtime", message).to_dict()}, True
    return {"result": result.to_dict()}, False


def _handle_group(module, msg: dict) -> tuple[dict, bool]:
    """Run one group through the module's run_group, reporting each step it finishes
    (run_group's `progress` callback) so the parent's timeout applies per step, not to the
    whole group. Any exception fails the whole group (and the worker exits): the parent
    then measures its requests one by one, which tells the request at fault from the
    others."""
    requests = [MeasureRequest.from_dict(d) for d in msg["requests"]]
    artifacts = [ArtifactRecord.from_dict(d) for d in msg["artifacts"]]
    try:
        results = module.run_group(requests, artifacts,
                                   progress=lambda step: _send(_REPLIES, {"progress": step}))
    except Exception as e:
        return {"group_error": _failure_text(e) + f"\n(worker {os.getpid()} exits)"}, True
    return {"results": [r.to_dict() for r in results]}, False


def _healthy(module) -> bool:
    """The runner module's own health check (True when it has none; False if it raises)."""
    check = getattr(module, "healthy", None)
    try:
        return bool(check()) if check else True
    except Exception:
        return False


_HANDLERS = {"build": handle_build, "run": handle_run}
_REPLIES = sys.stdout  # the protocol's stream; main() points it at the original stdout


def _send(out, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _start(role: str, spec: str, device: int | None, out):
    """Resolve the handler and run the module's setup; send the ready line. Returns the
    handler and its module, or None after sending a setup_error."""
    try:
        module, fn = resolve(spec)
        setup = getattr(module, "setup", None)
        info = setup(device) if role == "run" and setup and device is not None else {}
    except Exception as e:
        _send(out, {"setup_error": _failure_text(e)})
        return None
    groups = role == "run" and callable(getattr(module, "run_group", None))
    _send(out, {"ready": os.getpid(), "info": info or {}, "groups": groups})
    return fn, module


def main(argv: list[str] | None = None) -> int:
    """Serve requests on stdin until it closes (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3) or argv[0] not in _HANDLERS:
        print("usage: python -m gemmforge.search.measure.worker {build|run} SPEC [DEVICE]", file=sys.stderr)
        return 2
    role, spec = argv[0], argv[1]
    device = int(argv[2]) if len(argv) == 3 else None
    global _REPLIES
    out = _REPLIES = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    started = _start(role, spec, device, out)
    if started is None:
        return 1
    fn, module = started
    for line in sys.stdin:
        reply, exit_after = _HANDLERS[role](fn, module, json.loads(line))
        _send(out, {**reply, "exiting": True} if exit_after else reply)
        if exit_after:
            sys.stderr.flush()
            os._exit(EXIT_AFTER_ERROR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
