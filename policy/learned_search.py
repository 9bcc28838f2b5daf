"""Search around measured programs, for the learned policy: edits and per-shape lineages.

    changes = edits(variant, program)          # [{"tile.bn": 256, "stages": 4}, ...]
    apply(variant, program, changes[0])        # the edited Program (not verified)
    search = ShapeSearch(problem, variants, runner, rng)
    search.seed(heuristic_seeds(variants, problems, arch)); search.climb(1)

An edit changes one knob of a program inside its variant, with the companion changes a
tile edit may need to stay legal (the warps scaled with the tile, another stage count);
a knob the edit makes inactive (split-K under stream-K) goes back to its default.

`ShapeSearch` is what training has measured on one shape, as lineages (the idea of
policy/lineage.py): every program belongs to the lineage of the seed it descends from,
or to the model's samples. `climb` measures edits of each lineage's best program: its
single edits while some are unmeasured (round-robin over the knobs, so a knob with
many values or companions doesn't crowd out the rest), then random compositions of
edits (knobs legal only together, such as stream-K with a cooperative kernel and its
warps). Climbing every lineage, not only the leader, finds each backend's own optimum:
stream-K on a cooperative CUTLASS kernel wins long-K shapes from a seed far behind.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from ..ir.knobs import KNOBS, assemble, knob_value
from ..ir.program import DEFAULTS, Arch, IRError, Problem, Program
from ..ir.space import Variant
from ..ir.verify import check
from .reward import INVALID_REWARD, reward

SEEDS_PER_BACKEND = 3        # heuristic programs that start a shape's lineages, per backend
MAX_COMPOSED = 6             # most edits composed into one


def edits(var: Variant, program: Program) -> list[dict]:
    """The knob changes one edit away from `program` in its variant."""
    knobs = var.knobs_of(program)
    return [{knob: value, **extra} for knob in KNOBS if var.searched(knob)
            for value in var.choices(knob) if value != knobs.get(knob)
            for extra in _companions(var, knobs, knob, value)]


def _companions(var: Variant, knobs: dict, knob: str, value) -> list[dict]:
    """Nothing; for a tile edit also the warps scaled with the tile (the warp tile, which
    the tile's legality hangs on, is kept) and every other stage count (shared memory
    grows with the tile)."""
    if not knob.startswith("tile."):
        return [{}]
    warp = {"tile.bm": "warps.wm", "tile.bn": "warps.wn"}.get(knob)
    scaled = knobs[warp] * value // knobs[knob] if warp else None
    warps = [{}] + ([{warp: scaled}] if warp and scaled in var.choices(warp) else [])
    stages = [{}] + [{"stages": s} for s in var.choices("stages") if s != knobs["stages"]]
    return [{**w, **s} for w in warps for s in stages]


def apply(var: Variant, program: Program, change: Mapping) -> Program | None:
    """`program` with the knob values of `change`, and every knob the change makes
    inactive back at its default; None if that is malformed."""
    values = {**var.knobs_of(program), **change}
    chosen: dict = {}
    for knob in KNOBS:
        if knob in values:
            chosen[knob] = values[knob] if var.active(knob, chosen) \
                else knob_value(DEFAULTS, knob)
    try:
        return assemble(var.backend, var.arch, chosen)
    except (IRError, ValueError):
        return None


def heuristic_seeds(variants: Mapping, problems: Sequence[Problem],
                    arch: Arch) -> dict[str, list[Program]]:
    """Per backend of `variants` on `arch`, the heuristic's first SEEDS_PER_BACKEND legal
    proposals for each of `problems`, pooled (a program legal on one shape is mostly
    legal on another, so a shape with too few of its own borrows others')."""
    from .heuristic import HeuristicPolicy
    seeds: dict[str, list[Program]] = {}
    for backend, a in variants:
        if a != arch:
            continue
        pool = seeds.setdefault(backend, [])
        for problem in problems:
            found = HeuristicPolicy(backend).propose(problem, arch, SEEDS_PER_BACKEND)
            pool += [p for p in found if variants[(backend, a)].contains(p) and p not in pool]
    return seeds


class ShapeSearch:
    """The measured programs of one shape, by lineage (see the module docstring).
    `known`: program -> reward (INVALID_REWARD if illegal); `root`: program -> lineage."""

    def __init__(self, problem: Problem, variants: Mapping, runner, rng: random.Random,
                 compose: float = 0.5):
        self.problem, self.variants, self.runner, self.rng = problem, variants, runner, rng
        self.compose = compose           # chance of composing one more edit
        self.known: dict[Program, float] = {}
        self.root: dict[Program, object] = {}
        self._todo: dict[object, list] = {}

    def seed(self, seeds: Mapping[str, Sequence[Program]]) -> None:
        """Measure, per backend, the first SEEDS_PER_BACKEND of `seeds` legal here, each
        the root of its own lineage."""
        for programs in seeds.values():
            legal = [p for p in programs if check(p, self.problem) is None]
            for p in legal[:SEEDS_PER_BACKEND]:
                self.measure([p], p)

    def measure(self, programs: Sequence[Program | None], root) -> list[float]:
        """Rewards of `programs` (None: undecodable), measuring the legal ones not yet
        known (once each); new ones join lineage `root`."""
        todo = [p for p in dict.fromkeys(programs) if p is not None and p not in self.known]
        legal = [p for p in todo if check(p, self.problem) is None]
        self.known.update({p: INVALID_REWARD for p in todo})
        results = self.runner.evaluate(legal, self.problem) if legal else []
        self.known.update(zip(legal, map(reward, results)))
        for p in legal:
            self.root.setdefault(p, root)
        return [INVALID_REWARD if p is None else self.known[p] for p in programs]

    def elites(self, count: int) -> list[Program]:
        """The `count` best working programs measured here."""
        ok = [p for p, r in self.known.items() if r > INVALID_REWARD]
        return sorted(ok, key=self.known.get, reverse=True)[:count]

    def leaders(self) -> list[Program]:
        """The best working program measured here of each backend."""
        best: dict[str, Program] = {}
        for p in self.elites(len(self.known)):
            best.setdefault(p.backend, p)
        return list(best.values())

    def climb(self, count: int) -> None:
        """Measure up to `count` new legal programs near each lineage's best."""
        best: dict = {}
        for p, root in self.root.items():
            if root not in best or self.known[p] > self.known[best[root]]:
                best[root] = p
        for root, start in best.items():
            self.measure(self._near(root, start, count), root)

    def _near(self, root, start: Program, count: int) -> list[Program]:
        """Up to `count` unmeasured legal programs one edit from `start` (in a random order
        kept per lineage), then compositions of edits once every single one is known."""
        var = self.variants[(start.backend, start.arch)]
        todo = self._todo.get(root)
        if todo is None or todo[0] != start:
            todo = self._todo[root] = [start, self._order(edits(var, start)), 0]
        changes, found = todo[1], []
        while len(found) < count and todo[2] < len(changes):
            self._consider(apply(var, start, changes[todo[2]]), found)
            todo[2] += 1
        for _ in range(8 * count if changes else 0):
            if len(found) == count:
                break
            change = dict(self.rng.choice(changes))
            while self.rng.random() < self.compose and len(change) < MAX_COMPOSED:
                change = {**self.rng.choice(changes), **change}
            self._consider(apply(var, start, change), found)
        return found

    def _order(self, changes: list[dict]) -> list[dict]:
        """`changes` round-robin over the knob each one edits (knobs and, per knob, the
        changes in random order), so every knob is tried once before any twice."""
        by_knob: dict[str, list[dict]] = {}
        for change in changes:
            by_knob.setdefault(next(iter(change)), []).append(change)
        queues = list(by_knob.values())
        self.rng.shuffle(queues)
        for queue in queues:
            self.rng.shuffle(queue)
        longest = max(map(len, queues), default=0)
        return [q[i] for i in range(longest) for q in queues if i < len(q)]

    def _consider(self, program: Program | None, found: list) -> None:
        if program is None or program in self.known or program in found:
            return
        if check(program, self.problem) is None:
            found.append(program)
        else:
            self.known[program] = INVALID_REWARD
