"""The program text one backend can make legal, field by field: a grammar for constrained
decoding of the text form (the compact prompt's one-line reply).

    g = grammar("cuda_wgmma", Arch.SM90A, Layout.NN, Accum.F32)
    s = g.step(("cuda_wgmma", "sm_90a"), "128x128x64")   # a state, or None if not offered
    g.prefix_ok(s, "w1")                                   # some next token starts so
    g.accepts("cuda_wgmma sm_90a 128x128x64 w1x2 s4 sw128 row/4 pred k1 dp c1x1 nows tma")

A program's text is its fields' tokens in field order (ir.text), the optional ones left
out at their defaults. A *state* is the tuple of the tokens chosen so far, "" standing
for an optional field left out. Which token may come next is decided in two steps:

  1. the field's *domain*: the tokens of the values the IR accepts for the field
     (ir.schema's ranges, the backend's declared `allowed` values and stage limit); for
     the fields other than tile, warps and stages, less the values that ir.verify blames
     on the field itself from every one of a set of legal anchor programs
     (`field_domains`; the same narrowing tightens the JSON Schema of the LLM's JSON
     replies, ir.schema.backend_schema). Tile, warps and stages keep every IR value: a
     tile illegal beside one warp layout is legal beside another, so probing them one at a
     time from anchors would drop legal values (it dropped bm=64 for cuda_wgmma);
  2. *viability*: the token is offered only if the state it makes can still end in a
     program that ir.verify accepts for the problem class (layout, accumulator; an
     aligned shape, the most permissive), searched over a few completions of the later
     fields (`COMPLETIONS`: each field's cheapest values, e.g. the three fewest stages,
     one cluster, no split-K), memoized per state.

Step 2 searches a subset of the completions, so it could, in principle, drop a token that
only an unusual completion makes legal; tests/test_grammar.py checks on programs sampled
legal from ir.space, across backends and shapes, that every one is accepted. ir.verify
stays the judge: a constrained reply is still verified against its problem (whose shape
may rule out, say, predicated TMA rows).
"""
from __future__ import annotations

import functools
import random

from .program import (
    MAX_CLUSTER, MAX_RASTER_GROUP, MAX_SPLIT_K, MAX_STAGES, MAX_WARPS_PER_DIM, TILE_EXTRAS,
    TILE_LIMITS, Accum, Arch, Cluster, Epilogue, IRError, L2Hint, Layout, Padding,
    Problem, Program, Raster, RasterOrder, Reduction, Schedule, SplitK, Swizzle, Tile,
    WarpSpec, Warps,
)
from .text import field_token, parse

FIELDS = ("backend", "arch", "tile", "warps", "stages", "swizzle", "raster", "padding",
          "split_k", "schedule", "cluster", "warp_spec", "epilogue", "l2_hint", "swap_ab",
          "pdl")
"""Program fields in text order; the last three are optional tokens."""
REQUIRED = 13
WARPS_AT = FIELDS.index("warps")
ANCHOR_SAMPLES = 24  # random legal programs besides ir.space's probing bases
LEAF_BUDGET = 1500  # whole programs one viability question may check (see viable())
UNPROBED = ("backend", "arch", "tile", "warps", "stages")  # domains left whole (see above)
ALIGNED = 4096  # the class's shape: every dimension aligned for TMA rows and vectors
COMPLETIONS = {"stages": 3, "raster": 1, "padding": 1, "split_k": 1, "cluster": 1,
               "l2_hint": 1, "pdl": 1}
"""Per later field, how many of its domain's first (cheapest) values the viability search
tries; a field not listed tries its whole domain."""


def _pow2s(lo: int, hi: int) -> list[int]:
    return [1 << i for i in range(hi.bit_length()) if lo <= 1 << i <= hi]


def ir_values(be, arch: Arch) -> dict[str, list]:
    """Every value the IR (and the backend's declared limits) accepts, per field; the
    cheapest first where the order matters to the viability search."""
    sides = {n: sorted(set(_pow2s(lo, hi)) | ({v for v in TILE_EXTRAS if lo <= v <= hi}
                                               if n != "bk" else set()))
             for n, (lo, hi) in TILE_LIMITS.items()}
    warps = _pow2s(1, MAX_WARPS_PER_DIM)
    sizes = _pow2s(1, MAX_CLUSTER)
    splits = [SplitK(1)] + [SplitK(s, r) for s in range(2, MAX_SPLIT_K + 1)
                            for r in Reduction]
    values = {
        "backend": [be.name], "arch": [arch],
        "tile": [Tile(m, n, k) for m in sides["bm"] for n in sides["bn"] for k in sides["bk"]],
        "warps": [Warps(m, n) for m in warps for n in warps],
        "stages": list(range(1, min(be.max_stages, MAX_STAGES) + 1)),
        "swizzle": list(Swizzle),
        "raster": [Raster(o, g) for g in range(1, MAX_RASTER_GROUP + 1) for o in RasterOrder],
        "padding": [Padding.PAD_OPERANDS, Padding.PREDICATE],
        "split_k": splits,
        "schedule": list(Schedule),
        "cluster": [Cluster(m, n) for m in sizes for n in sizes],
        "warp_spec": list(WarpSpec), "epilogue": list(Epilogue),
        "l2_hint": list(L2Hint), "swap_ab": [False, True], "pdl": [False, True],
    }
    for fld, allowed in be.allowed.items():
        values[fld] = [v for v in values[fld] if v in allowed]
    return values


def class_problem(layout: Layout, acc: Accum) -> Problem:
    """The problem a grammar is checked against: aligned, so no shape rule narrows it."""
    return Problem(ALIGNED, ALIGNED, ALIGNED, layout, acc)


def anchors(backend: str, arch: Arch, problem: Problem) -> list[Program]:
    """Legal programs to probe single fields from: ir.space's bases, and random legal
    draws from the backend's space (seeded)."""
    from .space import Space, _bases
    from .verify import check
    from . import capabilities
    be = capabilities.table.get(backend)
    out = {p: None for p in _bases(be, arch) if check(p, problem) is None}
    space, rng = Space.build([arch], [backend]), random.Random(0)
    for _ in range(ANCHOR_SAMPLES):
        try:
            out.setdefault(space.sample_legal(problem, rng), None)
        except ValueError:
            break
    return list(out)


def _blamed(reason: str | None, fld: str) -> bool:
    return bool(reason) and reason.split(":")[0].split(".")[0] == fld


@functools.lru_cache(maxsize=None)
def field_domains(backend: str, arch: Arch, layout: Layout = Layout.NN,
                  acc: Accum = Accum.F32) -> dict[str, tuple]:
    """Per field, the IR values kept for `backend` on `arch` for the class: those that
    ir.verify does not blame on the field itself from at least one anchor program (every
    IR value where no anchor is legal: nothing is narrowed then)."""
    from . import capabilities
    from .verify import check
    be = capabilities.table.get(backend)
    problem = class_problem(layout, acc)
    bases = anchors(backend, arch, problem)
    out = {}
    for fld, values in ir_values(be, arch).items():
        out[fld] = tuple(values) if fld in UNPROBED or not bases else tuple(v for v in values if any(
            not _blamed(check(_with(b, fld, v), problem), fld) for b in bases))
    return out


def _with(program: Program, fld: str, value) -> Program:
    try:
        return program.replace(**{fld: value})
    except IRError:  # a field value this program can't hold at all: blame it there
        return program


class TextGrammar:
    """The viable tokens of each field, for one backend, arch and problem class."""

    def __init__(self, backend: str, arch: Arch, layout: Layout = Layout.NN,
                 acc: Accum = Accum.F32):
        self.backend, self.arch, self.layout, self.acc = backend, arch, layout, acc
        self.problem = class_problem(layout, acc)
        domains = field_domains(backend, arch, layout, acc)
        self.value = {f: {field_token(f, v): v for v in domains[f]} for f in FIELDS}
        self.tokens = tuple(tuple(self.value[f]) for f in FIELDS)
        self.swaps = domains["swap_ab"]
        self._viable: dict[tuple, bool] = {}
        self._prefix: dict[tuple, bool] = {}

    def viable(self, state: tuple) -> bool:
        """False only if none of the completions of `state` that COMPLETIONS lets the
        search try passes ir.verify; a search that meets LEAF_BUDGET whole programs first
        answers True (a False is never a guess; a True may be pruned later, at a longer
        state)."""
        hit = self._viable.get(state)
        if hit is None:
            self._leaves = LEAF_BUDGET
            hit = self._search(state)
        return hit

    def _search(self, state: tuple) -> bool:
        hit = self._viable.get(state)
        if hit is not None:
            return hit
        if self._leaves <= 0:
            return True
        if len(state) == WARPS_AT + 1 and not self._shape_ok(state):
            hit = False
        elif len(state) == len(FIELDS):
            self._leaves -= 1
            hit = self._legal(state)
        else:
            tries = self.tokens[len(state)][:COMPLETIONS.get(FIELDS[len(state)])]
            hit = any(self._search(state + (t,)) for t in tries)
        self._viable[state] = hit
        return hit

    def _shape_ok(self, state: tuple) -> bool:
        """ir.verify's tile and warps rules (which read only the tile, the warps and
        swap_ab) pass for some swap_ab of the domain: else no completion can pass."""
        from . import capabilities
        from .verify import _check_shape
        be = capabilities.table.get(self.backend)
        tile, warps = self.value["tile"][state[2]], self.value["warps"][state[3]]
        return any(_check_shape(Program(backend=self.backend, arch=self.arch, tile=tile,
                                        warps=warps, swap_ab=swap), be) is None
                   for swap in self.swaps)

    def _legal(self, state: tuple) -> bool:
        """ir.verify's verdict on a whole state. verify is a conjunction of rules, so the
        cheap ones (fields, shape, the backend's own reason) run first and refuse most
        programs before the shared-memory and register rules build the dataflow graph."""
        from . import capabilities
        from .verify import _check_fields, _check_shape, check
        try:
            program = parse(" ".join(t for t in state if t))
        except IRError:
            return False
        be = capabilities.table.get(self.backend)
        if _check_fields(program, be) or _check_shape(program, be):
            return False
        try:
            if be.supports(program, self.problem):
                return False
        except Exception:  # noqa: BLE001  (a backend may assume the earlier rules passed)
            pass
        return check(program, self.problem) is None

    def step(self, state: tuple, token: str) -> tuple | None:
        """The state after one more text token, or None where the grammar doesn't offer
        it. After the 13 required fields a token may belong to any later optional field,
        those between it and the state left out ("")."""
        for at in self._next_fields(state):
            if token in self.value[FIELDS[len(at)]] and self.viable(at + (token,)):
                return at + (token,)
        return None

    def prefix_ok(self, state: tuple, partial: str) -> bool:
        """True if some offered next token starts with `partial`."""
        return any(self._field_prefix_ok(at, partial) for at in self._next_fields(state))

    def can_end(self, state: tuple) -> bool:
        """True if the text may end after `state` (its optional fields left out)."""
        if len(state) < REQUIRED:
            return False
        return self.viable(state + ("",) * (len(FIELDS) - len(state)))

    def _next_fields(self, state: tuple) -> list[tuple]:
        """The states whose next field the next text token may fill."""
        if len(state) < REQUIRED:
            return [state]
        return [state + ("",) * i for i in range(len(FIELDS) - len(state))]

    def _field_prefix_ok(self, state: tuple, partial: str) -> bool:
        key = state + (partial,)
        hit = self._prefix.get(key)
        if hit is None:
            hit = any(t and t.startswith(partial) and self.viable(state + (t,))
                      for t in self.tokens[len(state)])
            self._prefix[key] = hit
        return hit

    def accepts(self, text: str) -> bool:
        """True if the grammar can produce `text` (a whole program line)."""
        state: tuple | None = ()
        for token in text.split():
            state = self.step(state, token)
            if state is None:
                return False
        return self.can_end(state)


@functools.lru_cache(maxsize=None)
def grammar(backend: str, arch: Arch, layout: Layout = Layout.NN,
            acc: Accum = Accum.F32) -> TextGrammar:
    """The (shared, memoizing) TextGrammar of one backend, arch and problem class."""
    return TextGrammar(backend, arch, layout, acc)
