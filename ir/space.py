"""The enumerable space of programs a search may try, per backend and arch, and its optuna form.

A program is a point in a product of *knobs*: the scalar parts of the IR fields
(`tile.bm`, `warps.wn`, `swizzle`, `split_k.reduction`, ...; `ir.knobs` names them and reads,
sets and assembles them). For one (backend, arch) a `Variant` holds the values each knob may
take:

  - tile, warps, stages: powers of two from the backend's instruction shape (`mma_shape`;
    its narrower side for bm and bn where the backend takes swap_ab) up to PRACTICAL_TILE
    (tiles) with the backend's `tile_extras`, MAX_WARPS_PER_DIM (warps), and 1 up to the
    backend's `max_stages`;
  - every other knob: the IR's values that `ir.verify` accepts for this backend and arch,
    found by probing a legal program with one knob changed. So a backend's `allowed` and the
    arch rules (clusters, warp specialization and the TMA epilogue only on sm_90a) shape the
    space without a second copy of those rules here.

The fusion fields (ir.program.FUSION_FIELDS: bias) are no knobs: they say what a kernel
computes, so every point of the space leaves them at their defaults.

The space is conditional where the IR is: `split_k.reduction` exists only when
`split_k.slices` > 1, a knob with one legal value is fixed (not searched), and the
backend and arch are knobs themselves when a `Space` holds several. Cross-knob rules
(divisibility, shared memory, registers, a problem's edges) are left to `ir.verify`: a
point of the space may still be illegal, and the tuner records it as a failed trial with
verify's reason.

Optuna form: `Space.distributions()` gives one CategoricalDistribution per parameter and
`Space.suggest(trial)` samples a Program define-by-run. Parameter names are
"backend", "<backend>:arch" and "<backend>:<knob>", or "<backend>@<arch>:<knob>" where a
knob's values differ between the backend's archs (optuna needs one distribution per name).
`Space.params(program)` is the inverse, for `study.enqueue_trial`.
"""
from __future__ import annotations

import functools
import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from . import capabilities
from .knobs import KNOBS, assemble, ir_value, knob_value, with_knob
from .program import (
    DEFAULTS, MAX_CLUSTER, MAX_RASTER_GROUP, MAX_SPLIT_K, MAX_STAGES, MAX_WARPS_PER_DIM,
    TILE_LIMITS, Arch, Problem, Program, Reduction, Tile, Warps,
)

PRACTICAL_TILE = 256
"""Largest tile.bm / tile.bn searched (the IR allows 512; such tiles overflow the register
budget of every backend with fewer than 8x8 warps)."""
PRACTICAL_BK = 256
"""Largest tile.bk searched: the skinny decode programs (8x64x256 and 16x64x256, swapped, five
stages) stream their weights in 256-deep k-tiles, and a search must be able to find what ships."""
_SHAPE_KNOBS = ("tile.bm", "tile.bn", "tile.bk", "warps.wm", "warps.wn", "stages")
_SEP, _AT = ":", "@"
REPAIRS = 40  # sample_legal: redraws of the blamed parameters before a fresh draw


def _reason_names(reason: str, knob: str) -> bool:
    """Whether a verify `reason` ("field: ...") is about `knob`: the field it names, a
    part of that field, or a knob its message names (e.g. "tile.bm: 224 is not a
    multiple of warps.wm x ...": tile.bm and warps.wm)."""
    field, _, message = reason.partition(":")
    return knob == field or knob.startswith(field + ".") or \
        re.search(rf"(?<![\w.]){re.escape(knob)}(?![\w])", message) is not None


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(1 << e for e in range(hi.bit_length()) if lo <= 1 << e <= hi)


def _candidates(knob: str, backend) -> tuple:
    """Every IR value worth listing for `knob` before legality filtering."""
    mm, mn, mk = backend.mma_shape
    lo = {"tile.bm": mm, "tile.bn": mn, "tile.bk": mk}
    if True in backend.allowed.get("swap_ab", ()):  # either side may be the MMA's narrow one
        lo.update({"tile.bm": min(mm, mn), "tile.bn": min(mm, mn)})
    if knob in lo:
        tile_lo = max(lo[knob], TILE_LIMITS[knob[5:]][0])
        hi = PRACTICAL_BK if knob == "tile.bk" else PRACTICAL_TILE
        extras = () if knob == "tile.bk" else backend.tile_extras  # (192 for cute_cpp)
        return tuple(sorted({*_pow2(tile_lo, hi), *(v for v in extras if tile_lo <= v <= hi)}))
    ints = {"warps.wm": _pow2(1, MAX_WARPS_PER_DIM), "warps.wn": _pow2(1, MAX_WARPS_PER_DIM),
            "stages": tuple(range(1, min(backend.max_stages, MAX_STAGES) + 1)),
            "raster.group": _pow2(1, MAX_RASTER_GROUP),
            "split_k.slices": tuple(range(1, MAX_SPLIT_K + 1)),
            "cluster.cm": _pow2(1, MAX_CLUSTER), "cluster.cn": _pow2(1, MAX_CLUSTER)}
    if knob in ints:
        return ints[knob]
    default = knob_value(DEFAULTS, knob)
    if isinstance(default, bool):
        return (False, True)
    enum_type = type(ir_value(knob, default))
    return tuple(m.value for m in enum_type)


def _blames(reason: str | None, knob: str) -> bool:
    """True if verify's `reason` names the IR field that `knob` belongs to."""
    return bool(reason) and reason.split(":")[0].split(".")[0] == knob.split(".")[0]


def _repair(program: Program, backend, frozen: str = "", steps: int = 4) -> Program:
    """Greedily change the knobs of the field verify blames (never `frozen`), one at a time,
    until the program is legal or no single change moves the blame elsewhere."""
    from .verify import check
    for _ in range(steps):
        reason = check(program)
        knobs = [k for k in KNOBS if k != frozen and _blames(reason, k)]
        if not knobs:
            return program
        fixes = (with_knob(program, k, v) for k in knobs for v in _candidates(k, backend))
        better = next((p for p in fixes if not _blames(check(p), knobs[0])), None)
        if better is None:
            return program
        program = better
    return program


def _first_base(backend, arch: Arch) -> Program:
    """A legal program with default fields where one exists: a few tile/warps/stages
    shapes, each repaired greedily; else the first (illegal) candidate."""
    from .verify import check
    mm, mn, mk = backend.mma_shape
    tiles = [(max(128, mm), max(128, mn), max(32, mk)), (max(128, mm), max(128, mn), 64),
             (max(64, mm), max(64, mn), max(32, mk))]
    warps, first = [(2, 2), (1, 1), (2, 1), (1, 2), (2, 4), (4, 2), (1, 4), (4, 1)], None
    for (tile, w), stages in itertools.product(itertools.product(tiles, warps), (3, 4, 2)):
        p = _repair(Program(backend=backend.name, arch=arch, tile=Tile(*tile),
                            warps=Warps(*w), stages=stages), backend)
        if check(p) is None:
            return p
        first = first or p
    return first


def _bases(backend, arch: Arch) -> list[Program]:
    """Legal programs to probe knobs from: the first base, and each one-knob change of it
    repaired around that knob (so a value legal only beside others, like a warp
    specialization that wants its own warps, gets a base of its own)."""
    from .verify import check
    first = _first_base(backend, arch)
    out = {first: None}
    for knob in KNOBS:
        if knob in _SHAPE_KNOBS:
            continue
        for value in _candidates(knob, backend):
            p = _repair(with_knob(first, knob, value), backend, frozen=knob)
            if p not in out and check(p) is None:
                out[p] = None
    return list(out)


def _legal_values(knob: str, backend, bases: list[Program]) -> tuple:
    """The candidates of `knob` that verify doesn't blame on the knob itself from at least
    one base (lenient: cross-field rules are left to verify at tuning time)."""
    from .verify import check
    return tuple(v for v in _candidates(knob, backend)
                 if any(not _blames(check(with_knob(b, knob, v)), knob) for b in bases))


@dataclass(frozen=True)
class Variant:
    """The knob values one (backend, arch) accepts: `values[i]` belongs to KNOBS[i]."""

    backend: str
    arch: Arch
    values: tuple[tuple, ...]

    def choices(self, knob: str) -> tuple:
        return self.values[KNOBS.index(knob)]

    def searched(self, knob: str) -> bool:
        """True if `knob` has more than one value here (a fixed knob is not searched)."""
        return len(self.choices(knob)) > 1

    @staticmethod
    def active(knob: str, chosen: Mapping[str, object]) -> bool:
        """Whether `knob` exists given the knobs chosen before it (the IR's conditions:
        no split-K beside stream_k, which divides K itself; a reduction only for slices > 1)."""
        if knob.startswith("split_k") and chosen.get("schedule") == "stream_k":
            return False
        return knob != "split_k.reduction" or int(chosen.get("split_k.slices", 1)) > 1

    def knobs_of(self, program: Program) -> dict[str, object]:
        """Knob -> primitive value for the knobs `program` sets (inactive ones left out)."""
        out: dict[str, object] = {}
        for knob in KNOBS:
            if self.active(knob, out):
                out[knob] = knob_value(program, knob)
        return out

    def contains(self, program: Program) -> bool:
        if (program.backend, program.arch) != (self.backend, self.arch):
            return False
        return all(v in self.choices(k) for k, v in self.knobs_of(program).items())

    def size(self) -> int:
        """How many programs the variant enumerates (well-formed, not all legal)."""
        other = math.prod(len(self.choices(k)) for k in KNOBS
                          if not k.startswith("split_k") and k != "schedule")
        slices = self.choices("split_k.slices")
        many = sum(1 for s in slices if s > 1)
        split = len(slices) - many + many * len(self.choices("split_k.reduction"))
        streamk = sum(1 for s in self.choices("schedule") if s == "stream_k")
        return other * ((len(self.choices("schedule")) - streamk) * split + streamk)

    def programs(self) -> Iterator[Program]:
        """Every program of the variant, in knob order (lazily: there are millions)."""
        for combo in itertools.product(*self.values):
            chosen = dict(zip(KNOBS, combo))
            if any(not self.active(k, chosen) and chosen[k] != knob_value(DEFAULTS, k)
                   for k in ("split_k.slices", "split_k.reduction")):
                continue
            yield assemble(self.backend, self.arch, chosen)


@functools.lru_cache(maxsize=None)
def variant(backend_name: str, arch: Arch) -> Variant:
    """The Variant of a registered backend on `arch` (ValueError if it doesn't emit it)."""
    backend = capabilities.table.get(backend_name)
    if arch not in backend.archs:
        raise ValueError(f"{backend_name} does not emit {arch.value}")
    bases = _bases(backend, arch)
    values = [_candidates(k, backend) if k in _SHAPE_KNOBS else _legal_values(k, backend, bases)
              for k in KNOBS]
    reduction = KNOBS.index("split_k.reduction")
    values[reduction] = values[reduction] or (Reduction.WORKSPACE.value,)
    return Variant(backend_name, arch, tuple(values))


class Space:
    """The union of some Variants: what one study (or one policy) searches.

    Build it with `Space.build(archs, backends, problem)`; `variants` keeps the order given
    (backends sorted by name, archs in the order passed: the preferred arch first).
    """

    def __init__(self, variants: Sequence[Variant]):
        if not variants:
            raise ValueError("an empty space: no backend emits these archs for this problem")
        self.variants = tuple(variants)
        self.backends = tuple(dict.fromkeys(v.backend for v in self.variants))
        self._by_key = {(v.backend, v.arch): v for v in self.variants}
        self._names = self._param_names()

    @classmethod
    def build(cls, archs: Iterable[Arch], backends: Iterable[str] | None = None,
              problem: Problem | None = None) -> "Space":
        """Every registered backend (or those named) on each of `archs` it emits, left out
        where it can't compute `problem`'s layout, accumulator or operand dtype."""
        registry = capabilities.table
        names = sorted(backends) if backends is not None else registry.names()
        out = []
        for name in names:
            be = registry.get(name)
            if problem is not None and (problem.layout not in be.layouts
                                        or problem.acc not in be.accumulators
                                        or problem.dtype not in capabilities.serves_dtypes(be)):
                continue
            out += [variant(name, Arch(a)) for a in archs if Arch(a) in be.archs]
        return cls(out)

    def archs_of(self, backend: str) -> tuple[Arch, ...]:
        return tuple(v.arch for v in self.variants if v.backend == backend)
    def _param_names(self) -> dict[tuple[str, Arch, str], str]:
        """(backend, arch, knob) -> optuna parameter name, for the searched knobs."""
        names = {}
        for backend in self.backends:
            group = [v for v in self.variants if v.backend == backend]
            for knob in KNOBS:
                sets = {v.choices(knob) for v in group if v.searched(knob)}
                for v in group:
                    if v.searched(knob):
                        qualified = f"{backend}{_AT}{v.arch.value}" if len(sets) > 1 else backend
                        names[(backend, v.arch, knob)] = f"{qualified}{_SEP}{knob}"
        return names

    def distributions(self) -> dict:
        """Parameter name -> optuna CategoricalDistribution, for every parameter a trial
        of this space may have."""
        from optuna.distributions import CategoricalDistribution
        out = {}
        if len(self.backends) > 1:
            out["backend"] = CategoricalDistribution(self.backends)
        for backend in self.backends:
            archs = self.archs_of(backend)
            if len(archs) > 1:
                out[f"{backend}{_SEP}arch"] = CategoricalDistribution([a.value for a in archs])
        for (backend, arch, knob), name in self._names.items():
            out[name] = CategoricalDistribution(self._by_key[(backend, arch)].choices(knob))
        return out

    def _choose(self, pick) -> Program:
        """Assemble a program, asking `pick(name, choices)` for each searched parameter."""
        backend = self.backends[0] if len(self.backends) == 1 else pick("backend", self.backends)
        archs = [a.value for a in self.archs_of(backend)]
        arch = Arch(archs[0] if len(archs) == 1 else pick(f"{backend}{_SEP}arch", archs))
        var = self._by_key[(backend, arch)]
        chosen: dict[str, object] = {}
        for knob in KNOBS:
            if not var.active(knob, chosen):
                continue
            name = self._names.get((backend, arch, knob))
            chosen[knob] = pick(name, var.choices(knob)) if name else var.choices(knob)[0]
        return assemble(backend, arch, chosen)

    def suggest(self, trial) -> Program:
        """Sample a program through an optuna trial (define-by-run; enqueued params are
        taken as given). The result is well-formed; ir.verify decides if it is legal."""
        return self._choose(lambda name, choices: trial.suggest_categorical(name, choices))

    def sample(self, rng: random.Random) -> Program:
        """A uniformly random choice per parameter (not necessarily legal)."""
        return self._choose(lambda name, choices: rng.choice(list(choices)))

    def sample_legal(self, problem: Problem, rng: random.Random, tries: int = 1000) -> Program:
        """A random program that passes ir.verify for `problem`: a uniform draw per
        parameter and, while verify refuses it, the parameters of the field it blames and
        of the knobs its reason names drawn again (up to REPAIRS times) before a fresh
        draw; ValueError after `tries`
        fresh draws. (Drawn independently, cuda_wgmma's knobs give no legal program in
        thousands of draws: its tile, warps and stages rules hold jointly.)"""
        from .verify import check
        for _ in range(tries):
            program, picks = self._draw(rng, {})
            for _ in range(REPAIRS):
                reason = check(program, problem)
                if reason is None:
                    return program
                blamed = {name for name in picks
                          if _reason_names(reason, name.split(_SEP)[-1])}
                if not blamed:
                    break
                program, picks = self._draw(rng, {n: v for n, v in picks.items()
                                                  if n not in blamed})
        raise ValueError(f"no legal program for {problem} in {tries} random draws")

    def _draw(self, rng: random.Random, keep: dict) -> tuple[Program, dict]:
        """A program of uniform choices except the parameters `keep` holds (where their
        value is still a choice); with every parameter's value."""
        picks: dict[str, object] = {}

        def pick(name, choices):
            choices = list(choices)
            picks[name] = keep[name] if keep.get(name, self) in choices else rng.choice(choices)
            return picks[name]
        return self._choose(pick), picks

    def program(self, params: Mapping[str, object]) -> Program:
        """The program a complete set of parameters (as `params()` gives) stands for."""
        return self._choose(lambda name, choices: params[name])

    def params(self, program: Program) -> dict[str, object]:
        """Parameter name -> value for `program` (for study.enqueue_trial). Raises
        ValueError naming the knob if the program lies outside the space."""
        var = self._by_key.get((program.backend, program.arch))
        if var is None:
            raise ValueError(f"{program.backend} on {program.arch.value} is not in this space")
        out: dict[str, object] = {}
        if len(self.backends) > 1:
            out["backend"] = program.backend
        if len(self.archs_of(program.backend)) > 1:
            out[f"{program.backend}{_SEP}arch"] = program.arch.value
        for knob, value in var.knobs_of(program).items():
            if value not in var.choices(knob):
                raise ValueError(f"{knob}: {value} is outside the space "
                                 f"({', '.join(map(str, var.choices(knob)))})")
            name = self._names.get((program.backend, program.arch, knob))
            if name:
                out[name] = value
        return out

    def contains(self, program: Program) -> bool:
        var = self._by_key.get((program.backend, program.arch))
        return var is not None and var.contains(program)
    def size(self) -> int:
        """How many programs the space enumerates (well-formed, not all legal)."""
        return sum(v.size() for v in self.variants)
    def programs(self) -> Iterator[Program]:
        """Every program of the space, variant by variant (lazily)."""
        for v in self.variants:
            yield from v.programs()

    def legal(self, problem: Problem) -> Iterator[Program]:
        """Every program of the space that passes ir.verify for `problem` (lazily)."""
        from .verify import check
        return (p for p in self.programs() if check(p, problem) is None)
