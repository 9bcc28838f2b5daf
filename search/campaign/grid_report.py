"""The grid report: one row per grid shape from a campaign's store, by FLOP decade, beside
CUDA-L2's published H100 ratios.

    paths = write_grid_report(campaign, "grid_h100", Path("benchmarks/results"), command)

Writes, under the folder:
  NAME.csv ......... one row per shape measured so far (1,000 once the campaign is through;
                     with `shipped`, the grid shapes the campaign lacks come from the shipped
                     file's confirmations for its device class, marked source "shipped"):
                     the results-file columns (search.measure.report.COLUMNS: kernel, cold, call and
                     after times, each with cuBLAS's in the same group, sustained for the
                     large class) of the shape's confirmed winner, plus shape_class,
                     confirmed, regate ("ok": passed the gate after timing; "not confirmed":
                     the best unconfirmed reading, so `gemmforge ship` refuses it),
                     selected_by (sustained, after, kernel+cold or kernel:
                     selection.selection_ratio; a shipped row: what ship ranked it by),
                     cold/sustained ratios and CUDA-L2's published ratios at the shape.
                     `gemmforge ship --from NAME.csv` reads it as is.
  NAME_decades.csv . per FLOP decade (2mnk) and overall: shapes, geomeans of our kernel,
                     cold, call and sustained ratios to cuBLAS, the lowest kernel ratio,
                     and CUDA-L2's published offline/server geomeans over the same shapes.
  NAME.png ......... the per-shape kernel ratios by decade and the decade geomeans, ours
                     beside CUDA-L2's.
Protocol differences (DESIGN.md, "Measurement"): CUDA-L2 publishes one Python call plus
synchronize per timing (host overhead included; "server": calls at random intervals),
measured on their machine against their torch.matmul and cuBLAS; several of their
"fp32-accumulate" kernels accumulate in fp16. Ours: kernel time in CUDA graphs (L2 warm),
cold (L2 cold) and call (Python call + sync), each against cuBLAS (best of NN and TN)
timed interleaved in the same process. Compare our call ratio with their offline ratio
over torch.matmul; our kernel ratio has no published counterpart.
"""
from __future__ import annotations

import csv
import gzip
import math
import statistics
import zlib
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..measure.selection import selected_by
from ..measure.shapes import shape_class
from ..measure.records import Result
from ..measure.report import decade_exponent, write_csv

CUDA_L2 = Path(__file__).parents[1] / "data" / "cuda_l2_h100.csv.gz"
L2_COLUMNS = ("offline_vs_cublas", "offline_vs_torch", "server_vs_cublas", "server_vs_torch")


@lru_cache(maxsize=1)
def cuda_l2() -> dict[tuple[int, int, int], dict[str, float]]:
    """CUDA-L2's published H100 ratios by (m, n, k) (search/data/cuda_l2_h100.csv.gz)."""
    with gzip.open(CUDA_L2, "rt", newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(int(r["m"]), int(r["n"]), int(r["k"])): {c: float(r[c]) for c in L2_COLUMNS}
                for r in rows}


def shape_rows(campaign) -> list[tuple[Result, dict]]:
    """Per shape with an ok measurement: (its winner or best unconfirmed Result, the
    report's extra columns)."""
    out = []
    for problem in campaign.problems:
        winner = campaign.winner(problem)
        best = winner or next(iter(campaign.measured_best(problem)), None)
        if best is None:
            continue
        published = cuda_l2().get((problem.m, problem.n, problem.k), {})
        out.append((best, {
            "shape_class": shape_class(problem), "confirmed": winner is not None,
            "source": "campaign",
            "regate": "ok" if winner is not None else "not confirmed",
            "selected_by": selected_by(problem, best),
            "cold_speedup": best.cold_speedup,
            "sustained_speedup": best.sustained_speedup,
            **{f"cuda_l2_{c}": published.get(c) for c in L2_COLUMNS}}))
    return out


def shipped_rows(problems, device_class: str, device: str,
                 shipped=None) -> list[tuple[Result, dict]]:
    """Rows for `problems` from the shipped file's `device_class` confirmations (regate
    "shipped": `gemmforge ship` refuses them, so they never ship twice), their command
    in the extra columns."""
    from ...dispatch.shipped import shipped as default_shipped
    shipped = shipped or default_shipped()
    out = []
    for problem in problems:
        row = shipped.exact(device_class, problem)
        if row is None:
            continue
        f = row.figures
        result = Result(row.program_text, problem.m, problem.n, problem.k, str(problem.layout),
                        str(problem.acc), device=device, **{
                            k: f.get(k) for k in ("kernel_us", "cublas_us", "cold_us",
                                                  "cublas_cold_us", "call_us", "cublas_call_us",
                                                  "sustained_us", "cublas_sustained_us",
                                                  "after_us", "cublas_after_us")},
                        paired_speedup=row.speedup)  # the shipped ratio: a median of readings
        published = cuda_l2().get((problem.m, problem.n, problem.k), {})
        out.append((result, {
            "shape_class": shape_class(problem), "confirmed": True, "source": "shipped",
            "regate": "shipped", "selected_by": _ranked_by(result),
            "cold_speedup": result.cold_speedup,
            "sustained_speedup": result.sustained_speedup,
            **{f"cuda_l2_{c}": published.get(c) for c in L2_COLUMNS},
            "command": row.measured.get("command", "")}))
    return out


def _ranked_by(result: Result) -> str:
    """The figure `gemmforge ship` ranked a shipped row by (search.campaign.ship, rank_by auto)."""
    return ("sustained" if result.sustained_speedup else "after" if result.after_speedup
            else "kernel")


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(statistics.fmean(map(math.log, xs))) if xs else None


def decade(flops: float) -> str:
    """The FLOP decade a shape's 2mnk falls in, as the report names it ("1e11")."""
    return f"1e{decade_exponent(flops)}"


def decade_rows(rows: list[tuple[Result, dict]]) -> list[dict]:
    """Per FLOP decade, then "all": counts, our geomeans, CUDA-L2's over the same shapes."""
    groups: dict[str, list] = defaultdict(list)
    for r, extra in rows:
        groups[decade(r.flops)].append((r, extra))
    out = []
    for name, group in [*sorted(groups.items(), key=lambda g: int(g[0][2:])), ("all", rows)]:
        results = [r for r, _ in group]
        line = {"decade": name, "shapes": len(group),
                "confirmed": sum(bool(e["confirmed"]) for _, e in group),
                "kernel": geomean(r.speedup for r in results),
                "kernel_min": min((r.speedup for r in results), default=None),
                "cold": geomean(e["cold_speedup"] for _, e in group),
                "call": geomean(r.call_speedup for r in results),
                "sustained": geomean(e["sustained_speedup"] for _, e in group)}
        for c in L2_COLUMNS:
            line[f"cuda_l2_{c}"] = geomean(e[f"cuda_l2_{c}"] for _, e in group)
        out.append(line)
    return out


def write_rows(lines: list[dict], path: Path, columns: Sequence[str] = ()) -> Path:
    """`lines` as a CSV at `path` (floats to 4 decimals; written whole or not at all):
    `columns`, else the first line's keys."""
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(columns or lines[0]))
        writer.writeheader()
        writer.writerows({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in l.items()}
                         for l in lines)
    tmp.replace(path)
    return path


def markdown(lines: list[dict]) -> str:
    """The decade table as Markdown (for README): ours and CUDA-L2's published ratios."""
    def f(v):
        return "-" if v is None else f"{v:.3f}"
    head = ("| 2mnk | shapes | kernel | min | cold | call | sustained | CUDA-L2 offline "
            "vs cuBLAS | vs torch |\n|---|---|---|---|---|---|---|---|---|")
    body = [f"| {l['decade']} | {l['shapes']} | {f(l['kernel'])} | {f(l['kernel_min'])} | "
            f"{f(l['cold'])} | {f(l['call'])} | {f(l['sustained'])} | "
            f"{f(l['cuda_l2_offline_vs_cublas'])} | {f(l['cuda_l2_offline_vs_torch'])} |"
            for l in lines]
    return "\n".join([head, *body])


def plot(rows: list[tuple[Result, dict]], lines: list[dict], path: Path, title: str) -> Path:
    """Left: each shape's kernel ratio by decade; right: decade geomeans beside CUDA-L2's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    decades = [l for l in lines if l["decade"] != "all"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    index = {l["decade"]: i for i, l in enumerate(decades)}
    for r, _ in rows:
        x = index[decade(r.flops)]
        jitter = zlib.crc32(f"{r.m}x{r.n}x{r.k}".encode()) % 100 / 100 - 0.5
        left.scatter(x + 0.5 * jitter, r.speedup, s=6,
                     color="tab:blue")
    series = (("kernel", "ours, kernel"), ("call", "ours, call"),
              ("cuda_l2_offline_vs_cublas", "CUDA-L2 offline vs cuBLAS"),
              ("cuda_l2_offline_vs_torch", "CUDA-L2 offline vs torch"))
    width = 0.8 / len(series)
    for j, (key, label) in enumerate(series):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(decades))]
        right.bar(xs, [l[key] or 0 for l in decades], width, label=label)
    for ax in (left, right):
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(decades)), [l["decade"] for l in decades])
        ax.set_xlabel("FLOPs (2mnk), by decade")
    left.set_yscale("log")
    left.set_ylabel("ratio to cuBLAS, kernel time (higher is better)")
    right.set_ylabel("geomean ratio")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_grid_report(campaign, name: str, folder: Path, command: str = "",
                      fill: list[tuple[Result, dict]] = ()) -> list[Path]:
    """Write NAME.csv, NAME_decades.csv and NAME.png under `folder`; print the Markdown
    decade table. `fill`: rows for shapes the campaign lacks (shipped_rows), after its own;
    campaign None: the report of `fill` alone.
    Returns the paths written."""
    rows = ([] if campaign is None else
            [(r, {**e, "command": command}) for r, e in shape_rows(campaign)])
    have = {(r.m, r.n, r.k) for r, _ in rows}
    rows += [(r, e) for r, e in fill if (r.m, r.n, r.k) not in have]
    if not rows:
        raise ValueError("nothing measured ok yet: no report")
    folder.mkdir(parents=True, exist_ok=True)
    extra = [e for _, e in rows]
    table = write_csv([r for r, _ in rows], name, folder, extra)
    lines = decade_rows(rows)
    decades = write_rows(lines, folder / f"{name}_decades.csv")
    devices = sorted({r.device for r, _ in rows})
    png = plot(rows, lines, folder / f"{name}.png",
               f"{len(rows)} grid shapes ({sum(l['confirmed'] for l in lines[-1:])} confirmed)"
               f"; {', '.join(devices)}")
    print(markdown(lines))
    return [table, decades, png]
