"""Build search/data/measured_gpu.csv.xz: every GPU measurement the repository has recorded.

    python scripts/build_replay_data.py [-o search/data/measured_gpu.csv.xz] [--store PATH ...]

The shipped file was built with the six H100 campaign stores (copies: the script opens
them read-only):

    python scripts/build_replay_data.py --store .carry/campaign/rerun_h100.db \
        --store .carry/campaign/small_nt_h100.db --store .carry/campaign/llm_nt_h100.db \
        --store .carry/campaign/off_grid_h100.db \
        --store .carry/large/large_sustained_h100.db --store .carry/large/large_c2x1_h100.db

Reads every version of every CSV under benchmarks/results/ in the git history (results
that later commits superseded or removed included: a measurement stays a measurement),
keeps the ok rows with both times, adds every ok reading of each `--store` (a campaign
store, search.measure.campaign_store: its portfolio, search and confirm rounds alike, read with
campaign_store.read_only_rows; the speedup is the paired cuBLAS ratio the store counted,
readings it held implausible are left out), and writes one row per (problem, device,
program):

    m,n,k,layout,acc,device,program,speedup,kernel_us,cublas_us,count

`speedup` is the median over the recorded measurements of Result.speedup (the paired
per-round ratio where recorded, else cublas_us / kernel_us), the times their medians (all
three to DIGITS significant digits),
`count` how many measurements were merged (CSV rows and store readings alike). Programs are rewritten in the current
canonical text; rows whose program no longer parses are dropped (counted on stderr).
search.learn.replay_reward reads the file.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import lzma
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

RESULTS = "benchmarks/results"
FIELDS = ("m", "n", "k", "layout", "acc", "device", "program", "speedup", "kernel_us",
          "cublas_us", "count")
DIGITS = 4  # significant digits of the medians: far inside a reading's spread, file ~1.5 MB
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "search" / "data" / "measured_gpu.csv.xz"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def csv_blobs(repo: Path) -> dict[str, str]:
    """{blob sha: path} of every CSV under benchmarks/results in any commit that touched it."""
    blobs = {}
    for commit in _git(repo, "log", "--all", "--format=%H", "--", RESULTS).split():
        for line in _git(repo, "ls-tree", "-r", commit, "--", RESULTS).splitlines():
            meta, path = line.split("\t", 1)
            if path.endswith(".csv"):
                blobs[meta.split()[2]] = path
    return blobs


def _float(value: str) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 else None


def measurements(repo: Path):
    """Distinct ok measurements: (problem key, device, program text) -> list of
    (speedup, kernel_us, cublas_us). The same row in several file versions counts once."""
    seen, out = set(), {}
    for sha in csv_blobs(repo):
        reader = csv.DictReader(io.StringIO(_git(repo, "cat-file", "-p", sha)))
        if not reader.fieldnames or not {"program", "kernel_us", "cublas_us"} <= set(reader.fieldnames):
            continue
        for row in reader:
            kernel, cublas = _float(row.get("kernel_us")), _float(row.get("cublas_us"))
            if (row.get("status") or "ok") != "ok" or kernel is None or cublas is None:
                continue
            speedup = _float(row.get("paired_speedup")) or cublas / kernel
            problem = (int(row["m"]), int(row["n"]), int(row["k"]), row.get("layout") or "nn",
                       row.get("acc") or "f32")
            marker = (problem, row["device"], row["program"].strip(), row["kernel_us"])
            if marker not in seen:
                seen.add(marker)
                out.setdefault(marker[:3], []).append((speedup, kernel, cublas))
    return out


def store_measurements(path: Path) -> dict:
    """Ok readings of a campaign store: (problem key, device, program text) -> list of
    (speedup, kernel_us, cublas_us), every round of every pass."""
    from gemmforge.search.measure.campaign_store import read_only_rows
    out: dict = {}
    for problem, _, text, status, speedup, result in read_only_rows(path):
        data = json.loads(result)
        kernel, cublas = _float(data.get("kernel_us")), _float(data.get("cublas_us"))
        if status != "ok" or not speedup or kernel is None or cublas is None:
            continue
        shape, layout, acc = problem.split()
        m, n, k = (int(v) for v in shape.split("x"))
        out.setdefault(((m, n, k, layout, acc), data["device"], text), []).append(
            (speedup, kernel, cublas))
    return out


def canonical(text: str) -> str | None:
    """The program's current canonical text, or None if it no longer parses."""
    from gemmforge.ir.program import IRError
    from gemmforge.ir.text import parse
    try:
        return str(parse(text))
    except (IRError, ValueError):
        return None


def build(repo: Path, out: Path, stores: Sequence[Path] = ()) -> int:
    """Write the merged file; returns the number of rows written."""
    merged: dict = {}
    dropped = 0
    texts: dict[str, str | None] = {}
    sources = [("benchmarks/results", measurements(repo))]
    sources += [(str(path), store_measurements(path)) for path in stores]
    for name, found in sources:
        readings = sum(len(v) for v in found.values())
        print(f"{name}: {readings} measurements of {len(found)} (problem, device, program)",
              file=sys.stderr)
        for (problem, device, text), values in found.items():
            if text not in texts:
                texts[text] = canonical(text)
            if texts[text] is None:
                dropped += 1
                continue
            merged.setdefault((problem, device, texts[text]), []).extend(values)
    rows = sorted(merged.items())
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(FIELDS)
    for (problem, device, program), values in rows:
        med = [statistics.median(v[i] for v in values) for i in range(3)]
        writer.writerow([*problem, device, program, *(f"{v:.{DIGITS}g}" for v in med),
                         len(values)])
    out.parent.mkdir(parents=True, exist_ok=True)
    data = buf.getvalue().encode()
    if out.suffix == ".xz":  # xz keeps no time stamp: the same rows, the same bytes
        out.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    else:
        with gzip.GzipFile(out, "wb", mtime=0) as f:  # mtime 0: the same rows, the same bytes
            f.write(data)
    print(f"{out}: {len(rows)} rows, {sum(len(v) for _, v in rows)} measurements, "
          f"{len({r[0] for r, _ in rows})} problems, {len({r[2] for r, _ in rows})} programs, "
          f"{out.stat().st_size} bytes; {dropped} (problem, device, program) dropped: program "
          "no longer parses", file=sys.stderr)
    return len(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--store", type=Path, action="append", default=[],
                    help="a campaign store whose ok readings are merged too (repeatable)")
    args = ap.parse_args(argv)
    build(args.repo, args.out, args.store)


if __name__ == "__main__":
    main()
