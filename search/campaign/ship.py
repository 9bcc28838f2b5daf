"""Build the shipped file (dispatch.shipped) from confirmation CSVs (`gemmforge ship`).

    gemmforge ship --from confirm_a.csv confirm_b.csv confirm_c.csv \
        --device-class h100 --command "gemmforge campaign --incumbents shipped ..."

Input: CSVs with the results-file columns (search.measure.report.COLUMNS; at least m, n, k, device,
program, kernel_us, cublas_us; layout nn, acc f32 and dtype f16 where absent), one row per (shape,
program) reading. A row counts only if it passed the correctness gate as far as the CSV
says: `status` ok where that column exists, `rel_err` within search.measure.gate.tolerance where
measured, and every gate column (GATE_COLUMNS, e.g. a campaign's post-timing re-gate) true
where present. Rows of a replayed or synthetic device, or of another class than
--device-class, outside --shape-classes (a round that re-timed rows it was not aimed at:
they keep the confirmation of the round that was) or outside --shapes (a round whose changes
were confirmed at some shapes only: the others keep their shipped rows), are refused too.
Per (device class, layout, acc, dtype, shape), the program with the highest median speedup over its
readings ships (ties: more readings), with the medians of its figures. What that speedup is
(rank_by, `--rank-by`): "auto" (the default) takes the most user-like protocol every reading
of the shape measured: sustained (sustained_us and cublas_sustained_us, seconds under the
power cap: the large class), else after (cublas_after_us / after_us, each launch after another
kernel: a pdl program's overlap of its own previous launch does not count), else the kernel
protocol's; "kernel" skips the after figures; "after" ranks by them alone and refuses rows
without them. Rows already in
the output file for other keys stay; keys in the input are replaced. The file is written
whole and renamed into place.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import math
import statistics
import subprocess
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from ...ir.program import IRError, Problem
from ...dispatch.devices import device_class
from ..measure.shapes import shape_class
from ...dispatch.shipped import CUBLAS, FIGURES, FORMAT, ShippedFile, ShippedRow, read

GATE_COLUMNS = ("gate", "regate", "gate_ok", "regate_ok")
"""Columns that, where a CSV has them and they are not empty, must say the program passed
(true, ok, pass, passed, 1, yes)."""
PASSED = {"true", "ok", "pass", "passed", "1", "yes"}


RANKINGS = ("auto", "kernel", "after")
"""What picks a key's program: auto, the sustained ratio where every reading has it, else the
after protocol's, else the kernel protocol's; kernel, the same without the after step;
after, the after protocol's alone."""


def refusal(row: dict, want_class: str | None,
            shape_classes: frozenset[str] | None = None,
            shapes: frozenset[tuple[int, int, int]] | None = None,
            rank_by: str = "auto") -> str | None:
    """Why a CSV row can't count as a confirmed reading (None: it can); `shape_classes`:
    the classes (search.measure.shapes.CLASSES) whose rows may ship, None for all; `shapes`: the
    (m, n, k) whose rows may ship, None for all; rank_by "after": a row needs its after
    figures."""
    if (row.get("status") or "ok") != "ok":
        return f"status {row.get('status')}"
    for name in GATE_COLUMNS:
        value = (row.get(name) or "").strip().lower()
        if value and value not in PASSED:
            return f"{name} not passed"
    try:
        problem = _problem(row)
        kernel, cublas = float(row["kernel_us"]), float(row["cublas_us"])
    except (KeyError, TypeError, ValueError, IRError):
        return "missing or bad shape or times"
    if not (kernel > 0 and cublas > 0 and math.isfinite(kernel) and math.isfinite(cublas)):
        return "missing or bad shape or times"
    if (row.get("rel_err") or "") != "":
        from ..measure.gate import tolerance
        if not float(row["rel_err"]) <= tolerance(problem):
            return "rel_err over the gate's tolerance"
    cls = device_class(row.get("device"))
    if cls is None:
        return "not measured on a GPU (replayed, synthetic or unnamed device)"
    if want_class is not None and cls != want_class:
        return f"device class {cls}, not {want_class}"
    if shape_classes is not None and shape_class(problem) not in shape_classes:
        return f"shape class {shape_class(problem)}, not in {','.join(sorted(shape_classes))}"
    if shapes is not None and (problem.m, problem.n, problem.k) not in shapes:
        return "shape not in --shapes"
    if rank_by == "after" and _after(row) is None:
        return "no after_us and cublas_after_us to rank by"
    from ...ir.text import parse
    from ...ir.verify import check
    try:
        reason = check(parse(row["program"]), problem)
    except (KeyError, IRError) as e:
        return f"bad program: {e}"
    return f"program illegal here: {reason}" if reason else None


def _problem(row: dict) -> Problem:
    return Problem(int(row["m"]), int(row["n"]), int(row["k"]), row.get("layout") or "nn",
                   row.get("acc") or "f32", row.get("dtype") or "f16")


def _speedup(row: dict) -> float:
    value = row.get("speedup") or ""
    return float(value) if value else float(row["cublas_us"]) / float(row["kernel_us"])


def read_readings(paths: list[Path], want_class: str | None,
                  shape_classes: frozenset[str] | None = None,
                  shapes: frozenset[tuple[int, int, int]] | None = None, rank_by: str = "auto"):
    """{(class, problem): {program: [row, ...]}} of the rows that count, and a Counter of
    why the others were refused."""
    readings: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    refused: Counter = Counter()
    for path in paths:
        opener = gzip.open if str(path).endswith(".gz") else open  # results kept gzipped
        with opener(path, "rt", newline="") as f:
            for row in csv.DictReader(f):
                why = refusal(row, want_class, shape_classes, shapes, rank_by)
                if why:
                    refused[why] += 1
                    continue
                from ...ir.text import parse
                key = (device_class(row["device"]), _problem(row))
                readings[key][str(parse(row["program"]))].append(row)
    return readings, refused


def _median(rows: list[dict], name: str) -> float | None:
    values = [float(r[name]) for r in rows if (r.get(name) or "") != ""]
    return statistics.median(values) if values else None


def _protocol_ratio(row: dict, name: str) -> float | None:
    """cuBLAS/ours of protocol `name` (its `<name>_us` and `cublas_<name>_us`), where the
    row measured it."""
    ours, theirs = row.get(f"{name}_us") or "", row.get(f"cublas_{name}_us") or ""
    if ours == "" or theirs == "" or not float(ours) > 0:
        return None
    return float(theirs) / float(ours)


def _sustained(row: dict) -> float | None:
    """cuBLAS/kernel under sustained load, where the row measured it."""
    return _protocol_ratio(row, "sustained")


def _after(row: dict) -> float | None:
    """cuBLAS/ours after another kernel, where the row measured it."""
    return _protocol_ratio(row, "after")


def _ratio(by_program: dict[str, list[dict]], rank_by: str = "auto"):
    """The ratio a key's programs are ranked by (RANKINGS' rank_by): a protocol counts where
    every reading of every program of the key has it."""
    def everywhere(ratio) -> bool:
        return all(ratio(r) is not None for rows in by_program.values() for r in rows)
    if rank_by == "after":
        return _after
    if everywhere(_sustained):
        return _sustained
    if rank_by == "auto" and everywhere(_after):
        return _after
    return _speedup


def _rank(by_program: dict[str, list[dict]], rank_by: str = "auto"):
    """The ranking of a key's programs: the median of _ratio over each program's readings;
    ties: more readings."""
    ratio = _ratio(by_program, rank_by)
    return lambda item: (statistics.median(ratio(r) for r in item[1]), len(item[1]))


def best_rows(readings, measured: dict, rank_by: str = "auto") -> list[ShippedRow]:
    """Per key the best program by _rank, with the medians of its readings' figures; where
    even the best reads slower than cuBLAS by that ratio, a cuBLAS row (program CUBLAS: the
    runtime calls cuBLAS there), keeping the best program's figures as the evidence."""
    out = []
    for (cls, problem), by_program in readings.items():
        program, rows = max(sorted(by_program.items()), key=_rank(by_program, rank_by))
        speedups = [_speedup(r) for r in rows]
        figures = {name: _median(rows, name) for name in FIGURES}
        figures.update(speedup=statistics.median(speedups), min_speedup=min(speedups))
        ratio = _ratio(by_program, rank_by)
        if statistics.median(ratio(r) for r in rows) < 1.0:
            program = CUBLAS
        out.append(ShippedRow(cls, problem, program, figures, len(rows), measured))
    return out


def provenance(paths: list[Path], command: str) -> dict:
    """The measurement record: command, files, the commit and date that added them (git,
    where the files are in a repository; else their modification date), devices."""
    commits = [_git_commit(p) for p in paths]
    dates = [c[1] for c in commits if c[1]] or [
        datetime.fromtimestamp(Path(p).stat().st_mtime, timezone.utc).date().isoformat()
        for p in paths]
    return {"command": command, "files": [_display(p) for p in paths],
            "commit": ",".join(sorted({c[0] for c in commits if c[0]})), "date": max(dates)}


def _display(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return Path(path).name


def _git_commit(path: Path) -> tuple[str, str]:
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", Path(path).name],
                             cwd=Path(path).resolve().parent, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "", ""
    parts = out.stdout.split()
    return (parts[0], parts[1]) if out.returncode == 0 and len(parts) == 2 else ("", "")


def merge(old: ShippedFile, new: list[ShippedRow], measured_id: str) -> dict:
    """The JSON document: `old`'s rows for keys `new` lacks, then `new`'s, sorted."""
    keys = {(r.device_class, r.problem) for r in new}
    kept = [(r, _measured_id(r.measured)) for r in [*old.rows, *old.cublas_rows]
            if (r.device_class, r.problem) not in keys]
    rows = kept + [(r, measured_id) for r in new]
    rows.sort(key=lambda x: (x[0].device_class, str(x[0].problem.layout), str(x[0].problem.acc),
                             str(x[0].problem.dtype),
                             x[0].problem.flops, x[0].problem.m, x[0].problem.n))
    measurements = {mid: r.measured for r, mid in rows}
    return {"format": FORMAT, "measurements": dict(sorted(measurements.items())),
            "rows": [r.to_json(mid) for r, mid in rows]}


def _measured_id(measured: dict) -> str:
    text = "\n".join([measured.get("command", ""), *measured.get("files", [])])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def write(document: dict, path: Path) -> None:
    """Write the document with one row per line, atomically; gzip-compressed where the
    name ends in .gz (dispatch.shipped.text reads both)."""
    rows = ",\n".join("    " + _dumps(r) for r in document["rows"])
    head = {k: v for k, v in document.items() if k != "rows"}
    text = _dumps(head, indent=1)[:-1].rstrip() + ',\n "rows": [\n' + rows + "\n ]\n}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    if path.suffix == ".gz":  # mtime 0: the same rows give the same bytes
        tmp.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    else:
        tmp.write_text(text)
    tmp.replace(path)


def _dumps(value, indent=None) -> str:
    import json
    return json.dumps(value, indent=indent, sort_keys=indent is not None, allow_nan=False)


def ship(paths: list[Path], out: Path, command: str, want_class: str | None = None,
         shape_classes: frozenset[str] | None = None,
         shapes: frozenset[tuple[int, int, int]] | None = None, rank_by: str = "auto"):
    """Build `out` from the CSVs at `paths`; returns (rows shipped, refusal Counter)."""
    if rank_by not in RANKINGS:
        raise ValueError(f"rank_by {rank_by!r}: one of {', '.join(RANKINGS)}")
    measured = provenance(paths, command)
    readings, refused = read_readings(paths, want_class, shape_classes, shapes, rank_by)
    measured["devices"] = sorted({r["device"] for by in readings.values()
                                  for rows in by.values() for r in rows})
    new = best_rows(readings, measured, rank_by)
    old = read(out) if out.exists() else ShippedFile([], out)
    write(merge(old, new, _measured_id(measured)), out)
    return new, refused
