"""A/B of a cuda_wgmma template change as users run it: the chosen (shipped) programs of a
shape list built from an earlier commit's templates and from this checkout's, each timed
beside cuBLAS by `gemmforge bench --chosen`, in alternating runs of one GPU-machine call
(old, new, then new, old, ...) so that drift between runs hits both alike. Rows of other
backends are unchanged code: they show how far a run moves by itself.

    python3 benchmarks/template_ab.py prepare e119dbe .carry/ab/e119dbe    # here (git)
    python3 benchmarks/template_ab.py run .carry/ab/e119dbe --shapes @benchmarks/shapes/after_sample_h200.txt \\
        --layout nn --pairs 2 --name walk_ab_nn --report-dir "$OUT"          # GPU machine, carry .carry/ab
    python3 benchmarks/template_ab.py summary benchmarks/results/template_ab_nn_h200.csv.gz

`run` renders the old builds from the prepared folder (GEMMFORGE_CUDA_WGMMA_TEMPLATES; its
fingerprint keys those builds apart) and writes NAME.csv: bench's columns plus `templates`
(old or new) and `pair`; `summary` prints cuBLAS time / ours, old and new, per backend and
kernel-time class (under or over 30 us), over the rows measured both ways in every pair.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from gemmforge.search.campaign.grid_report import geomean

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_DIR = "backends/cuda_wgmma/templates"
SLOW_US = 30.0  # kernel-time class boundary: the walk and the prologue matter below it


def prepare(commit: str, out: Path) -> int:
    """`commit`'s cuda_wgmma templates into `out`."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, TEMPLATE_DIR], cwd=ROOT,
                             capture_output=True)
    if archive.returncode:
        print(archive.stderr.decode().strip(), file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                target = out / Path(member.name).relative_to(TEMPLATE_DIR)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    print(f"{commit}'s templates in {out}")
    return 0


def run(old: Path, shapes: str, layout: str, pairs: int, name: str, report_dir: Path,
        rounds: int) -> int:
    if not (old / "kernel.cuh.jinja").is_file():
        print(f"{old}: no prepared templates (template_ab.py prepare COMMIT {old})", file=sys.stderr)
        return 2
    report_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            order = ("old", "new") if pair % 2 == 0 else ("new", "old")
            for side in order:
                env = dict(os.environ)
                env.pop("GEMMFORGE_CUDA_WGMMA_TEMPLATES", None)
                if side == "old":
                    env["GEMMFORGE_CUDA_WGMMA_TEMPLATES"] = str(old.resolve())
                part = f"{name}_{side}{pair}"
                done = subprocess.run(
                    ["gemmforge", "bench", "--shapes", shapes, "--layout", layout, "--chosen",
                     "--protocols", "kernel,after", "--rounds", str(rounds), "--name", part,
                     "--report-dir", tmp], env=env, capture_output=True, text=True)
                said = [line for line in done.stdout.splitlines() if "measured ok" in line]
                print(f"{part}: exit {done.returncode}: "
                      f"{said[0] if said else done.stderr.strip()[-300:]}")
                path = Path(tmp) / f"{part}.csv"
                if path.is_file():
                    rows += [{**r, "templates": side, "pair": pair} for r in csv.DictReader(path.open())]
    if not rows:
        print("no run wrote a CSV", file=sys.stderr)
        return 1
    out = report_dir / f"{name}.csv"
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out}")
    return summary(out)


def _ratio(row: dict, protocol: str) -> float:
    ours = float(row["kernel_us" if protocol == "kernel" else f"{protocol}_us"])
    theirs = float(row["cublas_us" if protocol == "kernel" else f"cublas_{protocol}_us"])
    return theirs / ours


def classes(rows: list[dict]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(backend, kernel-time class) -> {"old kernel": [...], "new after": [...], ...}, over the
    shapes that every run measured ok; a shape's class is its first old reading's."""
    ok = [r for r in rows if r["status"] == "ok" and r["after_us"] and r["kernel_us"]]
    runs = {(r["templates"], r["pair"]) for r in ok}
    by_shape: dict[tuple, dict] = {}
    for r in ok:
        by_shape.setdefault((r["m"], r["n"], r["k"]), {})[(r["templates"], r["pair"])] = r
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for readings in by_shape.values():
        if set(readings) != runs:
            continue
        first = readings[min(k for k in readings if k[0] == "old")]
        key = (first["backend"], "under" if float(first["kernel_us"]) < SLOW_US else "over")
        for (side, _), r in readings.items():
            for protocol in ("kernel", "after"):
                out.setdefault(key, {}).setdefault(f"{side} {protocol}", []).append(_ratio(r, protocol))
    return out


def summary(path: Path) -> int:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    table = classes(rows)
    if not table:
        print(f"{path}: no shape measured ok in every run", file=sys.stderr)
        return 1
    old_runs = len({r["pair"] for r in rows if r["templates"] == "old"})
    print("| backend | kernel time | shapes | kernel: old -> new | after another kernel: old -> new |")
    print("| --- | --- | --- | --- | --- |")
    for (backend, cls), ratios in sorted(table.items()):
        cells = []
        for protocol in ("kernel", "after"):
            old, new = geomean(ratios[f"old {protocol}"]), geomean(ratios[f"new {protocol}"])
            cells.append(f"{old:.3f}x -> {new:.3f}x ({(new / old - 1) * 100:+.1f} %)")
        shapes = len(ratios["old kernel"]) // old_runs
        print(f"| {backend} | {cls} {SLOW_US:g} us | {shapes} | {cells[0]} | {cells[1]} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="an earlier commit's templates into a folder (here)")
    p.add_argument("commit")
    p.add_argument("out", type=Path)
    r = sub.add_parser("run", help="alternating bench runs, old and new (GPU machine)")
    r.add_argument("old", type=Path, help="the prepared folder")
    r.add_argument("--shapes", required=True, help="as bench's --shapes (e.g. @list.txt)")
    r.add_argument("--layout", default="nn")
    r.add_argument("--pairs", type=int, default=2)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--name", default="template_ab")
    r.add_argument("--report-dir", type=Path, default=Path("."))
    s = sub.add_parser("summary", help="the table of a run's CSV")
    s.add_argument("csv", type=Path)
    args = ap.parse_args()
    if args.action == "prepare":
        return prepare(args.commit, args.out)
    if args.action == "run":
        if args.pairs < 1:
            ap.error("--pairs: at least 1")
        return run(args.old, args.shapes, args.layout, args.pairs, args.name, args.report_dir,
                   args.rounds)
    return summary(args.csv)


if __name__ == "__main__":
    sys.exit(main())
