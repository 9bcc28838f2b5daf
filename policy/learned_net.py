"""The learned policy's model: an autoregressive distribution over programs for a shape.

    model = ProgramModel(space, hidden=96)
    picks, logp, entropy, _ = model.walk([problem] * 16, Arch.SM90A)       # 16 samples
    model.log_prob([problem], [program]); model.beam(problem, Arch.SM90A, 32)

Shape features (`features`: log2 m, n, k, their sum and ratios, the CTA count of a
128x128 tile over the arch's SMs, one-hot arch, layout, accumulator) -> an MLP -> the
initial state of a GRU that walks STEPS: the backend, then each knob of `ir.knobs.KNOBS`
in order (swap_ab -> tile -> warps -> ... -> l2_hint). At each step a head scores the
knob's values (the union over the space's backends, masked to the chosen backend's
values; a knob that is inactive, such as split_k.reduction with one slice, or fixed, has
one value and costs no probability). The choice's embedding plus features derived from
the choices so far on the shape (`derived`: CTAs, waves, tile padding, K steps, shared
memory, warp tiling and threads against the arch's limits) advances the state, so later
fields are conditioned on earlier ones and on how they tile this shape.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..ir.arch import ACCUM_REG_BUDGET, LIMITS
from ..ir.devices import ARCH_DEFAULT
from ..ir.knobs import KNOBS, assemble, knob_value
from ..ir.program import DEFAULTS, Accum, Arch, IRError, Layout, Problem, Program
from ..ir.space import Space, Variant

LOG2_SCALE = 14.0            # log2 of the largest grid dimension (16384)
STEPS = ("backend",) + KNOBS
SMS = {arch: facts.sms for arch, facts in ARCH_DEFAULT.items()}  # multiprocessors: A100; H100 / H200
_AT = {k: STEPS.index(k) for k in ("tile.bm", "tile.bn", "tile.bk", "warps.wm", "warps.wn",
                                    "stages", "split_k.slices", "swap_ab")}


def features(problem: Problem, arch: Arch) -> list[float]:
    """The model's input: log2 m, n, k, sqrt(m n), k over sqrt(m n), m over n (/14), log2
    of 128x128 CTAs per SM (/8), then one-hot arch, layout and accumulator."""
    lm, ln, lk = (math.log2(x) for x in (problem.m, problem.n, problem.k))
    ctas = math.ceil(problem.m / 128) * math.ceil(problem.n / 128)
    return [lm / LOG2_SCALE, ln / LOG2_SCALE, lk / LOG2_SCALE, (lm + ln) / (2 * LOG2_SCALE),
            (lk - (lm + ln) / 2) / LOG2_SCALE, (lm - ln) / LOG2_SCALE,
            math.log2(ctas / SMS[arch]) / 8,
            *(float(arch == a) for a in Arch), *(float(problem.layout == x) for x in Layout),
            *(float(problem.acc == x) for x in Accum)]


N_FEATURES = len(features(Problem(1, 1, 1), Arch.SM80))
N_DERIVED = 12


def derived(dims: torch.Tensor, limits: torch.Tensor, units: torch.Tensor,
            vals: torch.Tensor) -> torch.Tensor:
    """[B, N_DERIVED] features of the choices so far on the shape, 0 where a value they
    need is not chosen yet: log2 CTAs, log2 waves, last-wave fill, tile padding
    efficiency, log2 K steps per slice, K padding efficiency, shared memory per stage and
    in all over the limit, log2 of the tile over warps x instruction (M, N; N, M with
    swap_ab, which the walk picks before the tile), threads over
    the limit, accumulators per thread over ACCUM_REG_BUDGET. `dims` [B, 3]: m, n, k;
    `limits` [B, 3]: SMs, shared memory bytes, threads per CTA; `units` [backends, 3]: the
    instruction's M and N and threads per warp unit; `vals` [B, S]: each step's numeric
    value (the backend's index at step 0; NaN: not chosen yet)."""
    m, n, k = dims.unbind(1)
    sms, smem, threads = limits.unbind(1)
    bm, bn, bk, wm, wn, st, sl, sw = (vals[:, i] for i in _AT.values())
    picked = vals[:, 0].nan_to_num(0.0).long()
    um, un, ut = torch.where(vals[:, :1].isnan(), math.nan, units[picked]).unbind(1)
    swapped = sw.nan_to_num(0.0) > 0.5  # swap_ab: bm meets the instruction's N, bn its M
    um, un = torch.where(swapped, un, um), torch.where(swapped, um, un)
    slices = torch.where(sl.isnan(), torch.ones_like(sl), sl)
    tm, tn = torch.ceil(m / bm), torch.ceil(n / bn)
    waves = tm * tn * slices / sms
    stage = (bm + bn) * bk * 2 / smem
    out = torch.stack([torch.log2(tm * tn) / LOG2_SCALE, torch.log2(waves) / 8,
                       waves / torch.ceil(waves), m * n / (tm * bm * tn * bn),
                       torch.log2(torch.ceil(k / slices / bk)) / 8,
                       k / (torch.ceil(k / bk) * bk), stage, st * stage,
                       torch.log2(bm / (wm * um)) / 4, torch.log2(bn / (wn * un)) / 4,
                       wm * wn * ut / threads, bm * bn / (wm * wn * ut) / ACCUM_REG_BUDGET],
                      dim=1)
    return out.nan_to_num(0.0, posinf=0.0, neginf=0.0)


class Vocab:
    """Per step, the values the model chooses among, and the masks of allowed ones."""

    def __init__(self, space: Space):
        from ..backends import registry
        self.variants = {(v.backend, v.arch): v for v in space.variants}
        self.values = [tuple(space.backends)] + [
            tuple(dict.fromkeys([knob_value(DEFAULTS, k)] + [c for v in space.variants
                                                             for c in v.choices(k)]))
            for k in KNOBS]
        self.index = [{v: i for i, v in enumerate(vs)} for vs in self.values]
        self.numeric = [torch.arange(len(self.values[0]), dtype=torch.float32)] + [
            torch.tensor([float(v) if isinstance(v, int) else math.nan for v in vs])
            for vs in self.values[1:]]
        self.units = torch.tensor([[*registry.get(b).mma_shape[:2], registry.get(b).unit_threads]
                                   for b in self.values[0]], dtype=torch.float32)
        self._masks: dict[tuple, torch.Tensor] = {}

    def mask(self, step: int, problem: Problem, arch: Arch, chosen: dict) -> torch.Tensor:
        """Bool [values of step]: the backends serving `problem` on `arch`; a knob's values
        in the chosen backend's variant, or only its default where it is inactive."""
        if step == 0:
            key = (0, arch, problem.layout, problem.acc)
        else:
            key = (step, chosen["backend"], arch, Variant.active(STEPS[step], chosen))
        if key not in self._masks:
            self._masks[key] = self._build(key)
        return self._masks[key]

    def _build(self, key: tuple) -> torch.Tensor:
        from ..backends import registry
        if key[0] == 0:
            _, arch, layout, acc = key
            ok = {b for b, a in self.variants if a == arch and layout in registry.get(b).layouts
                  and acc in registry.get(b).accumulators}
            return torch.tensor([b in ok for b in self.values[0]])
        step, backend, arch, active = key
        knob = STEPS[step]
        allowed = self.variants[(backend, arch)].choices(knob) if active \
            else (knob_value(DEFAULTS, knob),)
        return torch.tensor([v in allowed for v in self.values[step]])

    def encode(self, program: Program) -> list[int]:
        """The program's value index per step (inactive knobs: their default). Raises
        ValueError for a program outside the space."""
        var = self.variants.get((program.backend, program.arch))
        if var is None or not var.contains(program):
            raise ValueError(f"{program} is outside the policy's space")
        knobs = var.knobs_of(program)
        return [self.index[0][program.backend]] + [
            self.index[i + 1][knobs.get(k, knob_value(DEFAULTS, k))] for i, k in enumerate(KNOBS)]

    def decode(self, arch: Arch, picks: Sequence[int]) -> Program | None:
        """The program a row of value indices stands for (None if malformed)."""
        values = {k: self.values[i + 1][p] for i, (k, p) in enumerate(zip(KNOBS, picks[1:]))}
        try:
            return assemble(self.values[0][picks[0]], arch, values)
        except (IRError, ValueError):
            return None


class ProgramModel(nn.Module):
    """The MLP, the GRU and one head and one embedding per step, over `Vocab(space)`."""

    def __init__(self, space: Space, hidden: int):
        super().__init__()
        self.vocab = Vocab(space)
        sizes = [len(v) for v in self.vocab.values]
        self.body = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh())
        self.embed = nn.ModuleList(nn.Embedding(s, hidden) for s in sizes)
        self.derive = nn.Linear(N_DERIVED, hidden)
        self.cell = nn.GRUCell(hidden, hidden)
        self.heads = nn.ModuleList(nn.Linear(hidden, s) for s in sizes)

    def _start(self, problems: Sequence[Problem], arch: Arch):
        """Initial state, (shape dims, the arch's limits) and no values chosen yet."""
        x = torch.tensor([features(p, arch) for p in problems])
        dims = torch.tensor([[p.m, p.n, p.k] for p in problems], dtype=torch.float32)
        lim = LIMITS[arch]
        limits = torch.tensor([[SMS[arch], lim.max_smem_per_block, lim.max_threads_per_block]],
                              dtype=torch.float32).expand(len(problems), 3)
        return self.body(x), (dims, limits), torch.full((len(problems), len(STEPS)), math.nan)

    def _advance(self, step: int, state, shape, vals, choice: torch.Tensor):
        """The state and values after choosing `choice` [B] at `step`."""
        vals = vals.clone()
        vals[:, step] = self.vocab.numeric[step][choice]
        inp = self.embed[step](choice) + self.derive(derived(*shape, self.vocab.units, vals))
        return self.cell(inp, state), vals

    def _logp(self, step: int, state, problems, arch, chosen: list[dict]) -> torch.Tensor:
        mask = torch.stack([self.vocab.mask(step, p, arch, c) for p, c in zip(problems, chosen)])
        return torch.log_softmax(self.heads[step](state).masked_fill(~mask, -math.inf), dim=-1)

    def walk(self, problems: Sequence[Problem], arch: Arch, forced: torch.Tensor | None = None,
             generator: torch.Generator | None = None):
        """Walk STEPS for a batch, sampling (`forced` None) or following `forced` [B, S].
        Returns (picks [B, S], log-probability [B], mean entropy per step [B], the
        backend step's log-probability [B])."""
        state, shape, vals = self._start(problems, arch)
        chosen: list[dict] = [{} for _ in problems]
        picks, total, entropy = [], torch.zeros(len(problems)), torch.zeros(len(problems))
        backend_logp = total
        for step, name in enumerate(STEPS):
            logp = self._logp(step, state, problems, arch, chosen)
            choice = forced[:, step] if forced is not None else torch.multinomial(
                logp.exp(), 1, generator=generator)[:, 0]
            taken = logp.gather(1, choice[:, None])[:, 0]
            if step == 0:
                backend_logp = taken
            total = total + taken
            entropy = entropy - (logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1) / len(STEPS)
            for c, i in zip(chosen, choice.tolist()):
                c[name] = self.vocab.values[step][i]
            picks.append(choice)
            state, vals = self._advance(step, state, shape, vals, choice)
        return torch.stack(picks, dim=1), total, entropy, backend_logp

    def log_prob(self, problems: Sequence[Problem], programs: Sequence[Program]) -> torch.Tensor:
        """Log-probability [B] of each program for its problem (one arch for all)."""
        forced = torch.tensor([self.vocab.encode(p) for p in programs])
        return self.walk(problems, programs[0].arch, forced)[1]

    def backends(self, problem: Problem, arch: Arch) -> dict[str, float]:
        """The backend step's distribution: backend -> probability (the allowed ones)."""
        with torch.no_grad():
            state, _, _ = self._start([problem], arch)
            probs = self._logp(0, state, [problem], arch, [{}])[0].exp().tolist()
        return {b: p for b, p in zip(self.vocab.values[0], probs) if p > 0}

    def beam(self, problem: Problem, arch: Arch, width: int,
             backend: str | None = None) -> list[Program]:
        """The `width` most probable programs (of `backend`, if given) by beam search over
        STEPS, most probable first (not verified)."""
        with torch.no_grad():
            state, shape, vals = self._start([problem], arch)
            chosen, score = [{}], torch.zeros(1)
            for step, name in enumerate(STEPS):
                logp = self._logp(step, state, [problem] * len(chosen), arch, chosen)
                if step == 0 and backend is not None:
                    keep = torch.tensor([b == backend for b in self.vocab.values[0]])
                    logp = logp.masked_fill(~keep, -math.inf)
                total = (score[:, None] + logp).flatten()
                top = total.topk(min(width, int(total.isfinite().sum())))
                rows, choice = top.indices // logp.shape[1], top.indices % logp.shape[1]
                score, state, vals = top.values, state[rows], vals[rows]
                shape = tuple(t[rows] for t in shape)
                chosen = [dict(chosen[r], **{name: self.vocab.values[step][c]})
                          for r, c in zip(rows.tolist(), choice.tolist())]
                state, vals = self._advance(step, state, shape, vals, choice)
        rows = [[self.vocab.index[i][c[name]] for i, name in enumerate(STEPS)] for c in chosen]
        return [p for p in (self.vocab.decode(arch, r) for r in rows) if p is not None]
