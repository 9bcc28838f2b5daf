"""A learned cost model of shipped programs at shapes they were not measured at.

    model = load()                                   # None: no model file, or unreadable
    model.scores(programs, Problem(77, 4096, 4096), sms=132)   # higher: predicted faster

dispatch.choice's "learned" rule ranks every distinct shipped program of a device class that
is usable at a shape by this model and serves the best. The model predicts log(cuBLAS time
/ kernel time) of a program at a shape (its cuBLAS ratio; at one shape cuBLAS is common to
every candidate, so the order is that of predicted kernel time) from the shape, the
program's fields and quantities derived from both (features()): tiles, waves of tiles on the
class's SMs, the last wave's fill, tile and K padding, K steps per slice, slot work
(dispatch.waves) over the ideal, bytes moved per multiply-add. It was trained on campaign
portfolio readings (search.learn.ranker_train: every program of a shape timed in one group beside
cuBLAS): for nn the grid's and those of 300 random layer-like shapes off it (ragged token
counts and model widths, which the grid's powers of two never show; benchmarks/NOTES.md,
Off the grid: the resolver's rules), for nt the sample's, the LLM layers' and 150 such
shapes; never on the shapes it is judged on off the grid.

One model file per layout (a model is trained on one layout's store and refused at another's
shapes): dispatch/data/ranker_h100.json.gz (nn) and ranker_h100_nt.json.gz (nt, x @ W.t()); a
layout without a file has no model (dispatch.choice's learned rule is then the wave rule).
The model file is gzipped JSON, evaluated with numpy alone (no
torch, no scikit-learn, no optuna): gradient-boosted regression trees, each a list of nodes
in depth-first order, plus the command that trained it and its validation figures:

    {"format": "gemmforge-ranker/1", "device_class": "h100", "layout": "nn",
     "features": [names...], "base": float, "leaf_scale": 1e-06,
     "programs": {"<program text>": shapes it was timed at in training, ...},
     "trained": {"command": ..., "store": ..., "rows": ..., "shapes": ..., "seed": ...,
                 "validation": {...}, "box": {"m": [least, most], "n": ..., "k": ...}},
     "trees": [[[feature, threshold, right], ..., leaf, ...], ...]}

A node [feature, threshold, right] sends a row to the next node where its feature is <=
threshold, else to node `right` of the same tree; a node that is a bare integer is a leaf
worth that many leaf_scale. The prediction is base plus one leaf of every tree.
Constraints:
  - the features are the ones named in the file, in that order; a file whose names differ
    from FEATURES is refused (ModelError), so a feature change needs a retrained file;
  - scores are comparable only among programs at one shape.
"""
from __future__ import annotations

import functools
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ir.program import Epilogue, Problem, Program, Schedule, WarpSpec

FORMAT = "gemmforge-ranker/1"
DEFAULT_PATH = Path(__file__).with_name("data") / "ranker_h100.json.gz"  # layout nn's
BACKENDS = ("cuda_wgmma", "triton", "cute_cpp")

FEATURES = (
    # the shape
    "log2_m", "log2_n", "log2_k", "log2_mnk", "m_mod_64", "n_mod_128",
    # the program's fields
    *(f"backend_{b}" for b in BACKENDS), "log2_bm", "log2_bn", "log2_bk", "warps",
    "stages", "log2_split", "persistent", "stream_k", "cluster", "pingpong", "cooperative",
    "epilogue_tma", "swap_ab", "pdl", "raster_group",
    # derived from both
    "log2_tiles", "waves", "log2_waves", "last_wave_fill", "tile_fill", "log2_k_steps",
    "k_fill", "log2_slot_over_ideal", "log2_bytes_per_mac", "log2_tile_bytes",
)


class ModelError(ValueError):
    """The model file is unreadable or not in FORMAT; the message names the file."""


def features(program: Program, problem: Problem, sms: int) -> list[float]:
    """FEATURES of `program` at `problem` on `sms` SMs, as floats (see the module doc)."""
    m, n, k = problem.m, problem.n, problem.k
    t, split = program.tile, program.split_k.slices
    tm, tn = math.ceil(m / t.bm), math.ceil(n / t.bn)
    tiles = tm * tn * split
    stream_k = program.schedule == Schedule.STREAM_K
    waves = max(1.0, tiles / sms) if stream_k else float(math.ceil(tiles / sms))
    k_steps = math.ceil(math.ceil(k / split) / t.bk)
    slot = waves * t.bm * t.bn * k_steps * t.bk
    # operand bytes the tiles read: A once per column of tiles, B once per row of tiles
    bytes_read = 2.0 * k * (m * tn + n * tm) + 2.0 * m * n * (2 * split - 1)
    return [
        math.log2(m), math.log2(n), math.log2(k), math.log2(m * n * k) / 3,
        (m % 64) / 64, (n % 128) / 128,
        *(float(program.backend == b) for b in BACKENDS),
        math.log2(t.bm), math.log2(t.bn), math.log2(t.bk),
        float(program.warps.wm * program.warps.wn), float(program.stages), math.log2(split),
        float(program.schedule == Schedule.PERSISTENT), float(stream_k),
        float(program.cluster.cm * program.cluster.cn),
        float(program.warp_spec == WarpSpec.PINGPONG),
        float(program.warp_spec == WarpSpec.COOPERATIVE),
        float(program.epilogue == Epilogue.TMA), float(program.swap_ab), float(program.pdl),
        float(program.raster.group),
        math.log2(tiles), waves, math.log2(waves), tiles / (sms * math.ceil(tiles / sms)),
        m * n / (tm * t.bm * tn * t.bn), math.log2(k_steps), k / (k_steps * t.bk * split),
        math.log2(slot * sms / (m * n * k)), math.log2(bytes_read / (m * n * k)),
        math.log2((t.bm + t.bn) * t.bk * 2 * program.stages),
    ]


@dataclass(frozen=True)
class Trees:
    """Gradient-boosted regression trees: prediction = base + the sum of one leaf per tree."""

    feature: np.ndarray    # [nodes] int: the feature a node splits on
    threshold: np.ndarray  # [nodes] float
    left: np.ndarray       # [nodes] int: global index of the left child, -1 at a leaf
    right: np.ndarray      # [nodes] int
    value: np.ndarray      # [nodes] float: a leaf's value
    roots: np.ndarray      # [trees] int: each tree's first node
    base: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions for rows `x` [rows, features]: all trees walked at once, level by level."""
        rows = np.arange(x.shape[0])[:, None]
        node = np.broadcast_to(self.roots, (x.shape[0], self.roots.size)).copy()
        while True:
            inner = self.left[node] >= 0
            if not inner.any():
                break
            goes_left = x[rows, self.feature[node]] <= self.threshold[node]
            step = np.where(goes_left, self.left[node], self.right[node])
            node = np.where(inner, step, node)
        return self.base + self.value[node].sum(axis=1)


@dataclass(frozen=True)
class Ranker:
    """A trained model (see the module doc) and what the file says about its training."""

    trees: Trees
    device_class: str
    layout: str
    programs: dict  # {program text: shapes the training store timed it at}
    trained: dict
    path: Path | None = None

    def covers(self, problem: Problem) -> bool:
        """`problem`'s m, n and k each lie within the range of the training shapes' (the
        file's trained["box"]: {"m": [least, most], "n": ..., "k": ...}); False for a file
        without one. dispatch.choice ranks shipped programs with no neighbour near a shape
        only where the model covers it."""
        box = self.trained.get("box")
        if not isinstance(box, dict):
            return False
        try:
            return all(float(box[d][0]) <= getattr(problem, d) <= float(box[d][1])
                       for d in ("m", "n", "k"))
        except (KeyError, TypeError, ValueError, IndexError):
            return False

    def scores(self, programs: list[Program], problem: Problem, sms: int) -> np.ndarray:
        """Predicted log cuBLAS ratio of each of `programs` at `problem` (higher: faster)."""
        x = np.array([features(p, problem, sms) for p in programs], dtype=np.float64)
        return self.trees.predict(x.reshape(len(programs), len(FEATURES)))


def from_json(data: dict, path: Path | None = None) -> Ranker:
    """A Ranker from the parsed file (ModelError where it is not one)."""
    where = f"ranker file {path}" if path else "ranker data"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(f"{where}: not a {FORMAT} file")
    if tuple(data.get("features") or ()) != FEATURES:
        raise ModelError(f"{where}: its features are not this version's (retrain it)")
    try:
        trees = _flatten(data["trees"], float(data["base"]), float(data["leaf_scale"]))
        return Ranker(trees, str(data["device_class"]), str(data["layout"]),
                      {str(t): int(n) for t, n in (data.get("programs") or {}).items()},
                      dict(data.get("trained") or {}), path)
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{where}: bad tree: {e}") from None


def _flatten(trees: list[list], base: float, scale: float) -> Trees:
    """Every tree's nodes in one array each, children as global indices (module doc)."""
    feature, threshold, left, right, value, roots = [], [], [], [], [], []
    for tree in trees:
        offset = len(feature)
        roots.append(offset)
        for i, node in enumerate(tree):
            if isinstance(node, list):  # [feature, threshold, right child]: left is i + 1
                f, t, r = node
                if not i < int(r) < len(tree):
                    raise ValueError(f"node {i}: right child {r} is not a later node")
                feature.append(int(f)), threshold.append(float(t)), value.append(0.0)
                left.append(offset + i + 1), right.append(offset + int(r))
            else:
                feature.append(0), threshold.append(0.0), value.append(float(node) * scale)
                left.append(-1), right.append(-1)
    if not roots or any(not tree for tree in trees):
        raise ValueError("no trees, or an empty one")
    feature_index = np.array(feature, dtype=np.int64)
    if feature_index.min() < 0 or feature_index.max() >= len(FEATURES):
        raise ValueError("a node splits on a feature that does not exist")
    return Trees(feature_index, np.array(threshold, dtype=np.float64),
                 np.array(left, dtype=np.int64), np.array(right, dtype=np.int64),
                 np.array(value, dtype=np.float64), np.array(roots, dtype=np.int64), base)


def read(path: Path | str) -> Ranker:
    """Parse a model file (ModelError naming the file and what is wrong)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"ranker file {path}: {e}") from None
    return from_json(data, path)


def default_path(layout: str = "nn") -> Path:
    """The package's model file for `layout`: DEFAULT_PATH for nn, beside it with the
    layout's name appended for another (ranker_h100_nt.json.gz)."""
    if layout == "nn":
        return DEFAULT_PATH
    base, _, extensions = DEFAULT_PATH.name.partition(".")
    return DEFAULT_PATH.with_name(f"{base}_{layout}.{extensions}")


def load(path: Path | str | None = None, layout: str = "nn") -> Ranker | None:
    """The model at `path` (default: the package's for `layout`), read once per path and
    modification time; None where there is no file or it does not load (the caller falls
    back)."""
    path = Path(path) if path is not None else default_path(layout)
    try:
        return _cached(path, path.stat().st_mtime_ns)
    except (OSError, ModelError):
        return None


@functools.lru_cache(maxsize=4)
def _cached(path: Path, mtime_ns: int) -> Ranker:
    return read(path)
