"""Issue 21 offline: the resolver's rules for a shape the shipped file lacks, replayed on
recorded GPU measurements (no GPU; nothing is timed here).

    python3 benchmarks/off_grid_rule.py --off-grid .carry/campaign/off_grid_h100.db \
        --grid .carry/campaign/rerun_h100.db [--device-class h100] [--csv off_grid_rule.csv] \
        [--reach 1.0] [--model dispatch/data/ranker_h100.json] [--folds 5]
    python3 benchmarks/off_grid_rule.py --grid .carry/campaign/small_nt_h100.db \
        --grid .carry/campaign/llm_nt_h100.db          # layout nt: leave-one-out over both

Three rules of dispatch.choice: `nearest` (the nearest shipped shape's program within one
octave, the rule before the wave rule), `waves` (every shipped neighbour within one
octave, its measured time carried to the shape by its waves of tiles, dispatch.waves; the
shortest predicted time wins) and `learned` (every distinct shipped program of the class
usable at the shape, ranked by dispatch.ranker's model; where the wave rule's pick is not a
shipped neighbour, that pick). A pick is scored at a shape by the campaign store's portfolio
pass there (every program of a shape timed in one group beside cuBLAS, one reading each,
kernel protocol): the pick's recorded cuBLAS ratio over the best recorded ratio of that pass
(the reference: what tuning the shape itself found, up to one pass's noise). A pick the
pass did not time is counted as untimed, never given a value; a pick that failed there
scores 0.

  (a) off grid: each shape of --off-grid (30 model shapes, ~90 programs each), resolved
      from the package's shipped file as `matmul` would (dispatch.choice.resolve, shipped
      file alone; the learned rule with --model, default the package's model file of the
      shapes' layout);
  (b) leave one out on the grid: each shape of --grid (the grid campaign's store, ~130
      programs a shape; repeated, several stores read as one, as search.learn.ranker_train does:
      the nt stores) with a shipped row of the class, resolved from the shipped file
      without that shape's rows (dispatch.choice.shipped_candidates, else the heuristic's);
      the learned rule's model trained on --grid without the shape's fold (--folds
      grouped folds of shapes, search.learn.ranker_train.fold_models: five models trained here,
      minutes of CPU).

Prints per evaluation and rule: shapes, picks timed (coverage), geomean of the fraction,
how many reach 0.95, and the same on the shapes where every rule's pick was timed.
`--reach` replaces the resolver's one octave (dispatch.choice.MAX_DISTANCE) for every rule.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

from gemmforge.ir.program import Arch
from gemmforge.dispatch import ranker
from gemmforge.dispatch.choice import (MAX_DISTANCE, RULES, learned_pick, pick, resolve,
                                     shipped_candidates)
from gemmforge.dispatch.devices import lookup_classes, multiprocessors
from gemmforge.search.learn.ranker_train import dataset, fold_models, merged_readings, model_json
from gemmforge.dispatch.shipped import ShippedFile, shipped

TARGET = 0.95
ARCH = Arch.SM90A


def portfolio(*paths) -> dict:
    """{problem: {program text: cuBLAS ratio, 0.0 failed}} of the stores, read-only."""
    return merged_readings(paths)


def _heuristic(problem):
    from gemmforge.policy.heuristic import default_program
    return default_program(problem, ARCH)


def off_grid_picks(readings: dict, cls: str, reach: float = MAX_DISTANCE,
                   model=None) -> dict:
    """{rule: {problem: program text}} as resolve serves each shape from the shipped file
    (the learned rule with `model`, None: the package's model file)."""
    return {rule: {p: str(resolve(p, ARCH, cls, use_tuned=False, rule=rule,
                                  max_distance=reach, model=model).program)
                   for p in readings} for rule in RULES}


def leave_one_out_picks(readings: dict, cls: str, reach: float = MAX_DISTANCE,
                        folds: int = 5, seed: int = 0) -> dict:
    """{rule: {problem: program text}} for each shape with a shipped row of `cls`, resolved
    from the shipped file without that shape's rows; the learned rule's model trained on
    `readings` without the shape's fold (search.learn.ranker_train.fold_models)."""
    book, classes = shipped(), lookup_classes(cls)
    models = _fold_rankers(readings, cls, folds, seed) if "learned" in RULES else {}
    out: dict = {rule: {} for rule in RULES}
    for p in readings:
        if book.exact(cls, p) is None:
            continue
        held_out = ShippedFile([r for r in book.rows if r.problem != p])
        found = shipped_candidates(p, ARCH, classes, held_out, reach)
        for rule in RULES:
            choice = (pick(p, found, classes, "waves" if rule == "learned" else rule)
                      if found else None)
            if choice is not None and rule == "learned" and p in models:
                choice = learned_pick(p, choice, held_out, model=models[p])
            out[rule][p] = str(choice.program if choice else _heuristic(p))
    return out


def _fold_rankers(readings: dict, cls: str, folds: int, seed: int) -> dict:
    """{problem: the dispatch.ranker.Ranker trained without its fold}, through the file form."""
    data = dataset(readings, multiprocessors(cls))
    layout = str(data[5][0].layout)
    out = {}
    for model, held, seen, trained in fold_models(data, folds, seed):
        ranked = ranker.from_json(model_json(model, cls, layout, seen, {"shapes": trained},
                                             data[0]))
        out.update({data[5][i]: ranked for i in held})
    return out


def fractions(readings: dict, picks: dict) -> dict:
    """{problem: fraction of the best recorded ratio, or None where the pick was untimed
    (or nothing there measured ok)}."""
    out = {}
    for p, text in picks.items():
        timed = readings[p]
        best = max(timed.values(), default=0.0)
        out[p] = timed[text] / best if text in timed and best > 0 else None
    return out


def summary(fr: dict, shapes) -> str:
    values = [fr[p] for p in shapes if fr[p] is not None]
    geo = math.exp(statistics.fmean(math.log(max(v, 1e-3)) for v in values)) if values else 0
    return (f"timed {len(values)}/{len(shapes)}, geomean {geo:.3f}, "
            f">= {TARGET}: {sum(v >= TARGET for v in values)}")


def report(name: str, readings: dict, picks: dict, rows: list) -> None:
    frs = {rule: fractions(readings, picks[rule]) for rule in RULES}
    shapes = list(picks[RULES[0]])
    common = [p for p in shapes if all(frs[r][p] is not None for r in RULES)]
    print(f"{name}: {len(shapes)} shapes, {len(common)} with every rule's pick timed")
    for rule in RULES:
        print(f"  {rule:8s} all: {summary(frs[rule], shapes)}; "
              f"common: {summary(frs[rule], common)}")
    for p in shapes:
        rows.append({"evaluation": name, "problem": str(p),
                     **{f"{r}_program": picks[r][p] for r in RULES},
                     **{f"{r}_fraction": frs[r][p] for r in RULES}})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--off-grid", help="the off-grid shapes' campaign store (sqlite file)")
    ap.add_argument("--grid", action="append",
                    help="the grid campaign's store, for leave-one-out (repeat: several "
                         "stores of one layout, read as one)")
    ap.add_argument("--device-class", default="h100", help="the class both stores measured")
    ap.add_argument("--csv", help="write one row per shape and evaluation here")
    ap.add_argument("--reach", type=float, default=MAX_DISTANCE,
                    help="octaves a neighbour may lie from the shape (default: the resolver's)")
    ap.add_argument("--model", help="the learned rule's model file off the grid (default: "
                                    "the package's)")
    ap.add_argument("--folds", type=int, default=5,
                    help="grouped folds of the learned rule's models for leave-one-out")
    args = ap.parse_args(argv)
    rows: list = []
    if args.off_grid:
        readings = portfolio(args.off_grid)
        layouts = sorted({p.layout.value for p in readings})
        # without --model, resolve loads the package's model of each shape's layout
        model = ranker.read(args.model) if args.model else None
        if model is None and any(ranker.load(layout=lay) is None for lay in layouts):
            print("off-grid: no model file of the layout: the learned rule is the wave rule",
                  file=sys.stderr)
        report("off-grid", readings,
               off_grid_picks(readings, args.device_class, args.reach, model), rows)
    if args.grid:
        readings = portfolio(*args.grid)
        report("leave-one-out", readings,
               leave_one_out_picks(readings, args.device_class, args.reach, args.folds),
               rows)
    if args.csv and rows:
        with Path(args.csv).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
