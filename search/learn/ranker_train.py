"""Train dispatch.ranker's model on a campaign store's portfolio readings.

    python3 -m gemmforge.search.learn.ranker_train --store .carry/campaign/rerun_h100.db \
        --store .carry/campaign/ragged_nn_h100.db --store .carry/campaign/ragged_nn_b_h100.db \
        --out dispatch/data/ranker_h100.json.gz [--device-class h100] [--seed 0] [--folds 5]
    python3 -m gemmforge.search.learn.ranker_train --store .carry/campaign/small_nt_h100.db \
        --store .carry/campaign/llm_nt_h100.db --store .carry/campaign/ragged_nt_h100.db \
        --out dispatch/data/ranker_h100_nt.json.gz

A campaign's portfolio pass times every program of a shape in one group beside cuBLAS
(search.measure.campaign_store; one reading each, kernel protocol). Each reading that passed is one
training row: the features of the program at the shape (dispatch.ranker.features) and, as
the target, its log cuBLAS ratio minus the shape's best (the log of its fraction of what
tuning the shape found, <= 0), weighted by exp(WEIGHT_SLOPE x target) so that the
programs near a shape's best, the ones a ranking must order, count most. The model is
scikit-learn's HistGradientBoostingRegressor (scikit-learn: the `search` extra; the file it
writes needs only numpy), seeded, its trees written out node by node.

With --folds F > 1 it first scores the model F times, trained without one fold of shapes
(grouped by shape) each time: at each held-out shape the program it ranks first among the
store's programs seen at dispatch.choice.min_trained_shapes() of its training shapes or more
over the best reading there. That figure, with the command, the stores, rows and shapes, is
recorded in the file ("trained"); the resolver's live figures are in benchmarks/NOTES.md,
Off the grid: the resolver's rules.

Several --store files are read as one (a program read at one shape in two stores keeps its
best reading). Constraints: reads the stores read-only; layout and accumulator: the stores'
shapes' (nn, f32 for the grid campaign), one layout per model file; the same stores, seed and
scikit-learn version write the same file.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from ...ir.program import Problem
from ...dispatch import ranker
from ...dispatch.ranker import FEATURES, FORMAT, features

WEIGHT_SLOPE = 4.0
LEAF_SCALE = 1e-6  # a leaf's value is written as an integer count of these: the file stays small
PARAMS = {"max_iter": 200, "learning_rate": 0.1, "max_leaf_nodes": 63, "min_samples_leaf": 20}
"""HistGradientBoostingRegressor's settings: chosen by grouped 5-fold scores on the grid
store alone (benchmarks/NOTES.md, Off the grid: the resolver's rules), sized so the file stays
a few hundred KB."""


def readings(path: str | Path) -> dict:
    """{problem: {program text: cuBLAS ratio, 0.0 where it failed}} of a campaign store's
    portfolio pass (campaign_store.read_only_rows; a program read twice keeps its best)."""
    from ..measure.campaign_store import read_only_rows
    from ..measure.shapes import parse_shapes
    out: dict = {}
    for problem, _, text, status, speedup, _ in read_only_rows(path, ("portfolio",)):
        shape, layout, acc = problem.split()
        key = parse_shapes(shape, layout, acc)[0]
        ratio = speedup if status == "ok" and speedup else 0.0
        out.setdefault(key, {})[text] = max(ratio, out.get(key, {}).get(text, 0.0))
    return out


def merged_readings(paths) -> dict:
    """readings() of several stores as one: a program read at one shape in two keeps its best."""
    out: dict = {}
    for path in paths:
        for problem, timed in readings(path).items():
            into = out.setdefault(problem, {})
            for text, ratio in timed.items():
                into[text] = max(ratio, into.get(text, 0.0))
    return out


def dataset(store: dict, sms: int) -> tuple:
    """(X [rows, FEATURES], target, weight, shape index per row, program text per row,
    shapes): one row per reading that passed, shapes in text order (module doc)."""
    from ...ir.text import parse
    shapes = sorted(store, key=str)
    programs: dict = {}
    x, target, group, texts = [], [], [], []
    for i, problem in enumerate(shapes):
        ok = {t: r for t, r in store[problem].items() if r > 0}
        if not ok:
            continue
        best = math.log(max(ok.values()))
        for text, ratio in sorted(ok.items()):
            program = programs.setdefault(text, parse(text))
            x.append(features(program, problem, sms))
            target.append(math.log(ratio) - best)
            group.append(i)
            texts.append(text)
    target_a = np.array(target)
    return (np.array(x, dtype=np.float64).reshape(len(target), len(FEATURES)), target_a,
            np.exp(WEIGHT_SLOPE * target_a), np.array(group), texts, shapes)


def box(shapes) -> dict:
    """{"m": [least, most], "n": ..., "k": ...} over the training `shapes` (Ranker.covers)."""
    return {d: [min(getattr(p, d) for p in shapes), max(getattr(p, d) for p in shapes)]
            for d in ("m", "n", "k")}


def fit(x: np.ndarray, target: np.ndarray, weight: np.ndarray, seed: int,
        params: dict = PARAMS):
    """A HistGradientBoostingRegressor of `params` fitted to the rows."""
    from ...compiler.extras import require
    require("sklearn")
    from sklearn.ensemble import HistGradientBoostingRegressor
    model = HistGradientBoostingRegressor(**params, random_state=seed)
    return model.fit(x, target, sample_weight=weight)


def folds(groups: np.ndarray, count: int) -> list[np.ndarray]:
    """`count` folds of row indices, whole shapes to a fold (shape i goes to fold i % count,
    in the dataset's text order of shapes)."""
    return [np.flatnonzero(groups % count == f) for f in range(count)]


def fold_models(data: tuple, count: int, seed: int, params: dict = PARAMS) -> list[tuple]:
    """[(model, held-out shape indices, programs' training shape counts, training shapes)]
    per fold."""
    x, target, weight, groups, texts, _ = data
    out = []
    for held in folds(groups, count):
        train = np.setdiff1d(np.arange(len(target)), held)
        seen = Counter(texts[i] for i in train)
        out.append((fit(x[train], target[train], weight[train], seed, params),
                    sorted(set(groups[held].tolist())), seen, len(set(groups[train].tolist()))))
    return out


def validate(store: dict, data: tuple, models: list[tuple], sms: int) -> dict:
    """Per held-out shape, the fraction of its best reading that the fold model's first
    choice reads, among the shape's timed programs seen at dispatch.choice.min_trained_shapes()
    of the fold's training shapes or more: their geomean, how many reach 0.95, shapes."""
    from ...ir.text import parse
    from ...dispatch.choice import min_trained_shapes
    shapes, fractions = data[5], []
    for model, held, seen, trained in models:
        floor = min_trained_shapes(trained)
        for i in held:
            timed = {t: r for t, r in store[shapes[i]].items() if r > 0}
            ranked = sorted(t for t in timed if seen[t] >= floor)
            if not ranked:
                continue
            x = np.array([features(parse(t), shapes[i], sms) for t in ranked])
            first = ranked[int(model.predict(x).argmax())]
            fractions.append(timed[first] / max(timed.values()))
    geo = math.exp(float(np.mean(np.log(fractions)))) if fractions else None
    return {"folds": len(models), "shapes": len(fractions),
            "geomean": None if geo is None else round(geo, 4),
            "at_0.95": sum(f >= 0.95 for f in fractions)}


def trees_json(model, x: np.ndarray) -> tuple[float, list[list]]:
    """(base, trees) of a fitted HistGradientBoostingRegressor in dispatch.ranker's form (its
    module doc): sklearn lays a tree's nodes out depth first, so a node's left child is the
    next node; leaf values (the learning rate already in them) in units of LEAF_SCALE;
    thresholds written short where that splits the rows `x` as the exact one does
    (short_threshold)."""
    base = float(np.ravel(model._baseline_prediction)[0])
    columns = [np.unique(x[:, f]) for f in range(x.shape[1])]
    out = []
    for (predictor,) in model._predictors:
        nodes, tree = predictor.nodes, []
        for i, node in enumerate(nodes):
            if node["is_leaf"]:
                tree.append(int(round(float(node["value"]) / LEAF_SCALE)))
                continue
            if int(node["left"]) != i + 1:
                raise ValueError(f"scikit-learn's tree layout changed: node {i}'s left child "
                                 f"is {int(node['left'])}")
            f = int(node["feature_idx"])
            tree.append([f, short_threshold(float(node["num_threshold"]), columns[f]),
                         int(node["right"])])
        out.append(tree)
    return base, out


def short_threshold(threshold: float, values: np.ndarray) -> float:
    """`threshold` in the fewest significant digits (7 or more) that send every one of the
    sorted `values` the same way (<= or >): a binned threshold may equal a value, which a
    rounded-down threshold would send right."""
    below = values[values <= threshold]
    low = below[-1] if below.size else -math.inf
    above = values[values > threshold]
    high = above[0] if above.size else math.inf
    for digits in range(7, 17):
        short = float(f"{threshold:.{digits}g}")
        if low <= short < high:
            return short
    return threshold


def model_json(model, device_class: str, layout: str, programs: Counter,
               trained: dict, x: np.ndarray) -> dict:
    """The model file's content (dispatch.ranker's FORMAT); `x`: the rows its thresholds must
    split as scikit-learn's do (trees_json)."""
    base, trees = trees_json(model, x)
    return {"format": FORMAT, "device_class": device_class, "layout": layout,
            "features": list(FEATURES), "base": base, "leaf_scale": LEAF_SCALE,
            "programs": dict(sorted(programs.items())), "trained": trained, "trees": trees}


def main(argv=None) -> int:
    from ...dispatch.devices import multiprocessors
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, action="append",
                    help="a campaign store (sqlite file); repeat it to train on several")
    ap.add_argument("--out", required=True, help="the model file to write")
    ap.add_argument("--device-class", default="h100", help="the class the store measured")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5,
                    help="grouped folds to validate with first (1: none)")
    ap.add_argument("--trees", type=int, default=PARAMS["max_iter"],
                    help="boosting rounds (one tree each)")
    args = ap.parse_args(argv)
    params = {**PARAMS, "max_iter": args.trees}
    sms = multiprocessors(args.device_class)
    store = merged_readings(args.store)
    data = dataset(store, sms)
    layouts = {str(p.layout) for p in data[5]}
    if len(layouts) != 1:
        raise SystemExit(f"{', '.join(args.store)}: shapes of layouts {sorted(layouts)}; "
                         "one per model")
    validation = (validate(store, data, fold_models(data, args.folds, args.seed, params), sms)
                  if args.folds > 1 else None)
    model = fit(data[0], data[1], data[2], args.seed, params)
    command = " ".join(["python3 -m gemmforge.search.learn.ranker_train",
                        *(argv if argv is not None else sys.argv[1:])])
    trained = {"command": command, "store": " + ".join(Path(s).name for s in args.store),
               "rows": len(data[1]), "shapes": len(data[5]), "seed": args.seed, "params": params,
               "weight_slope": WEIGHT_SLOPE, "sklearn": _sklearn_version(),
               "validation": validation, "box": box(data[5])}
    content = model_json(model, args.device_class, layouts.pop(), Counter(data[4]), trained,
                         data[0])
    walked = ranker.from_json(content).trees.predict(data[0])
    if not np.allclose(walked, model.predict(data[0]), atol=2e-4):  # leaves rounded
        raise SystemExit("the written trees do not reproduce scikit-learn's predictions "
                         f"(scikit-learn {_sklearn_version()}: its tree layout changed?)")
    text = (json.dumps(content, separators=(",", ":")) + "\n").encode()
    out = Path(args.out)
    out.write_bytes(gzip.compress(text, mtime=0) if out.suffix == ".gz" else text)
    print(f"wrote {args.out}: {len(data[1])} readings of {len(data[5])} shapes; "
          f"validation {validation}")
    return 0


def _sklearn_version() -> str:
    import sklearn
    return sklearn.__version__


if __name__ == "__main__":
    sys.exit(main())
