"""Kernel records of back-to-back calls on one stream, read as a timeline: per call its
period (start to next start), busy time (first CTA in to last out), gap (to the next call's
start; negative where the next call's CTAs started early, as with pdl) and tail (what the
call adds once the one before has finished); and the job lists and pdl twins that
benchmarks/launch_timeline.py times."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

SKIP_HEAD, SKIP_TAIL = 2, 1  # calls left out at each end of a replay: warm-up and drain


def read_jobs(spec: str) -> list[tuple[str, str]]:
    """(shape, program text) per line of @FILE, or of a ';'-separated list."""
    text = Path(spec[1:]).read_text() if spec.startswith("@") else spec.replace(";", "\n")
    jobs = []
    for line in text.splitlines():
        line = line.partition("#")[0].strip()
        if line:
            shape, _, program = line.partition(" ")
            jobs.append((shape, program.strip()))
    if not jobs:
        raise ValueError(f"--jobs: no jobs in {spec!r}")
    return jobs


def pdl_twin(text: str) -> str:
    """The program text with its `pdl` token toggled."""
    words = text.split()
    return " ".join(w for w in words if w != "pdl") if "pdl" in words else text + " pdl"


def calls_of(prof, launches: int, replays: int, is_spacer) -> list[list[tuple[float, float]]]:
    """Per replay, (start, end) in µs of each call (its kernels together: split-K runs a
    reduce after), in order."""
    import torch
    records = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and not is_spacer(e.name))
    per_call, rest = divmod(len(records), launches * replays)
    if not per_call or rest:
        raise RuntimeError(f"{len(records)} kernel records for {replays} x {launches} calls")
    calls = [(records[i][0], max(e for _, e in records[i:i + per_call]))
             for i in range(0, len(records), per_call)]
    return [calls[r * launches:(r + 1) * launches] for r in range(replays)]


def timeline(calls: list[list[tuple[float, float]]]) -> dict[str, float]:
    """Medians of period, busy, gap and tail over the calls past the head, before the tail."""
    out: dict[str, list[float]] = {"period": [], "busy": [], "gap": [], "tail": []}
    for replay in calls:
        for i in range(SKIP_HEAD, len(replay) - SKIP_TAIL):
            (s0, e0), (s1, e1), (_, before) = replay[i], replay[i + 1], replay[i - 1]
            out["period"].append(s1 - s0)
            out["busy"].append(e0 - s0)
            out["gap"].append(s1 - e0)
            out["tail"].append(e0 - max(s0, before))
    return {k: statistics.median(v) for k, v in out.items()}


def twin_summary(rows: list[dict]) -> str:
    """Geomeans over the shapes of cuBLAS's time / ours for the listed programs (contender pN)
    and for their pdl twins (pN~), back to back (event) and after another kernel (after)."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        kind = "cublas" if r["contender"] == "cublas" else (
            "twins" if r["contender"].endswith("~") else "listed")
        by.setdefault(r["shape"], {}).setdefault(kind, r)
    lines = []
    for kind in ("listed", "twins"):
        shapes = [s for s, k in by.items() if kind in k and "cublas" in k]
        cells = []
        for col in ("event", "after"):
            logs = [math.log(by[s]["cublas"][col] / by[s][kind][col]) for s in shapes
                    if by[s][kind][col] > 0 and by[s]["cublas"][col] > 0]
            if logs:
                cells.append(f"{col} {math.exp(sum(logs) / len(logs)):.3f}x ({len(logs)})")
        if cells:
            lines.append(f"cuBLAS / ours, {kind}: " + ", ".join(cells))
    return "\n".join(lines)
