"""How well policy.wave_fit's model ranks the programs a campaign measured at each shape.

    python3 benchmarks/wave_fit_check.py STORE.db [STORE.db ...]
    python3 benchmarks/wave_fit_check.py --winners REPORT.csv [...] --before SHIPPED.json

Per shape of the stores' portfolio passes with 1e8 <= 2mnk < 1e11 (the model's range), over
the cooperative data-parallel cuda_wgmma programs in clusters of one (the forms the model
describes: it knows tiles and splits, not the producer's form, the schedule or multicast),
with at least MIN_PROGRAMS of them measured: the rank correlation of the model's time with
the measured kernel time, and the "pick cost", the measured time of the program the model
ranks first over the best measured time. Printed: the shapes, the median correlation, and
the geomean and median pick cost. Read-only: the stores are opened as such.

With --winners: the rows of campaign reports whose program differs from the one the shipped
file `--before` held for that (device class, layout, shape), counted by kind: a wave-fit
program (among policy.heuristic's wave-fit proposals at the shape) in one K slice with tiles
of powers of two or off them, or split (by reduction and slices); or another proposal.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from gemmforge.ir.program import Schedule, WarpSpec
from gemmforge.ir.text import parse, parse_problem
from gemmforge.policy import wave_fit
from gemmforge.search.measure.campaign_store import read_only_rows
from gemmforge.search.campaign.grid_report import geomean

MIN_PROGRAMS = 4


def modelled(p) -> bool:
    """Whether the model describes this Program: cuda_wgmma, cooperative, data-parallel, c1x1."""
    return (p.backend == "cuda_wgmma" and p.warp_spec == WarpSpec.COOPERATIVE
            and p.schedule == Schedule.DATA_PARALLEL and p.cluster.size == 1)


def readings(rows) -> dict[str, list[tuple[float, float]]]:
    """Problem text -> [(predicted s, measured kernel us)] from read_only_rows' tuples (ok
    portfolio readings of modelled programs in the model's range; a program's first reading)."""
    out: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for problem_text, _, text, status, _, result in rows:
        problem = parse_problem(problem_text)
        if status != "ok" or not wave_fit.MIN_FLOPS <= problem.flops < wave_fit.MAX_FLOPS \
                or text in out[problem_text]:
            continue
        p = parse(text)
        if not modelled(p):
            continue
        predicted = wave_fit.predicted_seconds(problem, p.tile.bm, p.tile.bn,
                                               p.split_k.slices, p.split_k.reduction,
                                               swap_ab=p.swap_ab)
        out[problem_text][text] = (predicted, json.loads(result)["kernel_us"])
    return {k: list(v.values()) for k, v in out.items() if len(v) >= MIN_PROGRAMS}


def _ranks(values) -> np.ndarray:
    """Average ranks (ties share their mean rank), for a Spearman correlation."""
    values = np.asarray(values, dtype=float)
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a, b) -> float | None:
    """Rank correlation of a and b; None where either is constant."""
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def agreement(by_shape: dict[str, list[tuple[float, float]]]) -> dict[str, float | int | None]:
    """The figures the module doc names, over `readings`' shapes."""
    correlations, costs = [], []
    for pairs in by_shape.values():
        predicted, measured = zip(*pairs)
        rho = spearman(predicted, measured)
        if rho is not None:
            correlations.append(rho)
        first = min(range(len(pairs)), key=lambda i: (predicted[i], measured[i]))
        costs.append(measured[first] / min(measured))
    return {"shapes": len(by_shape),
            "median_correlation": statistics.median(correlations) if correlations else None,
            "pick_cost_geomean": geomean(costs), "pick_cost_median":
                statistics.median(costs) if costs else None}


def kind(program_text: str, problem, wave_fit_texts: set[str]) -> str:
    """A changed winner's kind (the --winners table's rows)."""
    if program_text not in wave_fit_texts:
        return "other proposal"
    p = parse(program_text)
    if p.split_k.slices > 1:
        return f"wave-fit, split k{p.split_k.slices} {p.split_k.reduction}"
    pow2 = all(v & (v - 1) == 0 for v in (p.tile.bm, p.tile.bn))
    return "wave-fit, one slice, " + ("power-of-two tile" if pow2 else "tile off the powers of two")


def winners(reports: list[Path], before: Path) -> dict[str, int]:
    """Kind -> count over the reports' changed rows (module doc), and "changed"."""
    from gemmforge.backends import registry
    from gemmforge.ir.program import Arch, Layout, Problem
    from gemmforge.policy.heuristic import wave_fit_programs
    from gemmforge.dispatch.devices import device_class
    from gemmforge.search.measure.report import read_csv
    old = {(r["device_class"], r["layout"], r["m"], r["n"], r["k"]): r["program"]
           for r in json.loads(before.read_text())["rows"]}
    counts: dict[str, int] = defaultdict(int)
    for report in reports:
        for r in read_csv(report):
            key = (device_class(r.device), str(r.layout), r.m, r.n, r.k)
            if not r.ok or old.get(key) in (None, r.program):
                continue
            problem = Problem(r.m, r.n, r.k, Layout(str(r.layout)))
            fits = {str(p) for p in wave_fit_programs(
                registry.get("cuda_wgmma"), Arch.SM90A, problem)}
            counts["changed"] += 1
            counts[kind(r.program, problem, fits)] += 1
    return dict(counts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", nargs="*", type=Path, help="campaign stores (read-only)")
    ap.add_argument("--winners", nargs="+", type=Path, help="campaign report CSVs")
    ap.add_argument("--before", type=Path, help="--winners: the shipped file before them")
    args = ap.parse_args(argv)
    if args.winners:
        if args.before is None or not args.before.is_file():
            print("--winners needs --before: the shipped file the round started from",
                  file=sys.stderr)
            return 2
        counts = winners(args.winners, args.before)
        for name, n in sorted(counts.items(), key=lambda kv: (kv[0] != "changed", kv[0])):
            print(f"{n:5d}  {name}")
    for store in args.stores:
        if not store.is_file():
            print(f"{store}: no such store", file=sys.stderr)
            return 2
        figures = agreement(readings(read_only_rows(store, passes=("portfolio",))))
        if not figures["shapes"]:
            print(f"{store}: no shape with {MIN_PROGRAMS} modelled programs in 1e8..1e11")
            continue
        rho = figures["median_correlation"]
        print(f"{store}: {figures['shapes']} shapes, median rank correlation "
              f"{'n/a' if rho is None else f'{rho:.2f}'}, pick cost "
              f"{figures['pick_cost_geomean']:.3f} geomean, {figures['pick_cost_median']:.3f} median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
