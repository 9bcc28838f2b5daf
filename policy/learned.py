"""The learned policy: a small torch model from shape features to a distribution over programs.

    policy = LearnedPolicy(archs=(Arch.SM90A, Arch.SM80))
    policy.train(train_problems, ReplayRunner(), steps=60)       # or a GPU runner
    policy.propose(Problem(1000, 4096, 333), Arch.SM90A, 8)      # shapes it never saw
    policy.save(path); LearnedPolicy.load(path)

Model: features (log2 m, n, k scaled by 1/14, one-hot arch, layout, accumulator) -> an MLP
-> one categorical head per parameter of an `ir.space.Space` (the backend, each backend's
arch, each searched knob, with the backend's legal values as the vocabulary). The
distribution factorises: a program's log-probability is the sum over the parameters it
uses (a conditional knob, such as split_k.reduction with one slice, is left out). The
backend and arch heads are masked to what can serve the problem on the asked arch.

Training is group-relative policy gradient (GRPO-style, no critic): for each shape a group
of programs with measured rewards (log(cublas_us / kernel_us)); advantage = reward - group
mean (divided by the group's std unless `normalize=False`); loss = -mean(advantage x
log-prob) - entropy_weight x entropy. `train()` samples the groups on-policy through a
runner; `observe()` buffers the tuner's results and runs `update()` on them every
`update_every` observations. Programs that fail ir.verify score INVALID_VALUE.

Proposals: the mode (argmax per head) and samples, verified, de-duplicated, most probable
first; topped up from the heuristic policy when fewer than n legal ones come out.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ir.program import Accum, Arch, Layout, Problem, Program
from ir.space import KNOBS, Space, Variant
from ir.verify import check
from policy.heuristic import HeuristicPolicy

LOG2_SCALE = 14.0            # log2 of the largest grid dimension (16384)
INVALID_VALUE = -6.0         # reward of a program that fails verify (below every failure)
CHECKPOINT_VERSION = 1
SAMPLE_ROUNDS = 4


@contextmanager
def _one_thread():
    """Run torch on one intra-op thread: the model is tiny, and thread hand-offs cost far
    more than its arithmetic (40x slower on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def features(problem: Problem, arch: Arch) -> list[float]:
    """The model's input: log2 m, n, k (/14), then one-hot arch, layout and accumulator."""
    return [math.log2(problem.m) / LOG2_SCALE, math.log2(problem.n) / LOG2_SCALE,
            math.log2(problem.k) / LOG2_SCALE,
            *(float(arch == a) for a in Arch), *(float(problem.layout == x) for x in Layout),
            *(float(problem.acc == x) for x in Accum)]


N_FEATURES = len(features(Problem(1, 1, 1), Arch.SM80))


class _Net(nn.Module):
    def __init__(self, sizes: Sequence[int], hidden: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh())
        self.heads = nn.ModuleList(nn.Linear(hidden, s) for s in sizes)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.body(x)
        return [head(h) for head in self.heads]


def _space_to_data(space: Space) -> list:
    return [[v.backend, v.arch.value, [list(c) for c in v.values]] for v in space.variants]


def _space_from_data(data: list) -> Space:
    return Space([Variant(b, Arch(a), tuple(tuple(c) for c in values)) for b, a, values in data])


class LearnedPolicy:
    """A Policy (policy.base) backed by the model above. `space` defaults to every
    registered backend on `archs`; `seed` fixes initialisation and sampling."""

    name = "learned"

    def __init__(self, space: Space | None = None, archs: Sequence[Arch] = (Arch.SM90A,),
                 backends: Sequence[str] | None = None, hidden: int = 64, lr: float = 3e-3,
                 seed: int = 0, update_every: int = 32, entropy_weight: float = 0.01,
                 normalize: bool = True):
        self.space = space or Space.build(archs, backends)
        self.params = list(self.space.distributions().items())  # (name, distribution)
        self.hidden, self.lr, self.seed = hidden, lr, seed
        self.update_every, self.entropy_weight, self.normalize = \
            update_every, entropy_weight, normalize
        torch.manual_seed(seed)
        self._sizes = [len(d.choices) for _, d in self.params]
        self._head = {name: h for h, (name, _) in enumerate(self.params)}
        self._choice = [{c: i for i, c in enumerate(d.choices)} for _, d in self.params]
        self._masks: dict[tuple, torch.Tensor] = {}
        self.net = _Net(self._sizes, hidden)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.fallback = HeuristicPolicy()
        self._buffer: dict[tuple, dict[str, float]] = defaultdict(dict)
        self._new = 0

    # -- the distribution ------------------------------------------------------------
    def _mask(self, problem: Problem, arch: Arch) -> torch.Tensor:
        """0 for allowed values and -inf for the rest, all heads concatenated: the backend
        head allows what serves the problem on `arch`, each arch head only `arch`."""
        key = (problem.layout, problem.acc, arch)
        if key not in self._masks:
            from backends import registry
            ok = {v.backend for v in self.space.variants if v.arch == arch
                  and problem.layout in registry.get(v.backend).layouts
                  and problem.acc in registry.get(v.backend).accumulators}
            allowed = []
            for name, dist in self.params:
                if name == "backend":
                    allowed += [c in ok for c in dist.choices]
                elif name.endswith(":arch"):
                    allowed += [c == arch.value for c in dist.choices]
                else:
                    allowed += [True] * len(dist.choices)
            self._masks[key] = torch.tensor([0.0 if a else -math.inf for a in allowed])
        return self._masks[key]

    def _log_softmax(self, problems: Sequence[Problem], archs: Sequence[Arch]) -> list:
        """Per head, the [batch, values] log-probabilities for each (problem, arch)."""
        x = torch.tensor([features(p, a) for p, a in zip(problems, archs)])
        mask = torch.stack([self._mask(p, a) for p, a in zip(problems, archs)])
        logits = torch.cat(self.net(x), dim=-1) + mask
        return [torch.log_softmax(part, dim=-1) for part in logits.split(self._sizes, dim=-1)]

    def _program(self, picks: list) -> Program | None:
        values = {name: dist.choices[i] for (name, dist), i in zip(self.params, picks)}
        try:
            return self.space.program(values)
        except (ValueError, KeyError):
            return None

    def log_prob(self, problems: Sequence[Problem], programs: Sequence[Program]) -> torch.Tensor:
        """Log-probability of each program for its problem (on the program's arch): the
        sum over the parameters the program uses."""
        return self._gather(self._log_softmax(problems, [p.arch for p in programs]), programs)

    def _gather(self, logps: list, programs: Sequence[Program]) -> torch.Tensor:
        index = torch.full((len(programs), len(self.params)), -1, dtype=torch.long)
        for b, program in enumerate(programs):
            for name, value in self.space.params(program).items():
                h = self._head[name]
                index[b, h] = self._choice[h][value]
        total = torch.zeros(len(programs))
        for h, lp in enumerate(logps):
            used = index[:, h] >= 0
            if used.any():
                picked = lp.gather(1, index[:, h].clamp(min=0).unsqueeze(1)).squeeze(1)
                total = total + torch.where(used, picked, torch.zeros_like(picked))
        return total

    def sample(self, problem: Problem, arch: Arch, count: int) -> list[Program]:
        """`count` programs drawn from the model (not verified; may repeat)."""
        with torch.no_grad():
            logps = self._log_softmax([problem], [arch])
            picks = [torch.multinomial(lp[0].exp(), count, replacement=True,
                                       generator=self.generator).tolist() for lp in logps]
        programs = [self._program([p[i] for p in picks]) for i in range(count)]
        return [p for p in programs if p is not None]

    def mode(self, problem: Problem, arch: Arch) -> Program | None:
        """The most probable value of every head, as one program."""
        with torch.no_grad():
            logps = self._log_softmax([problem], [arch])
        return self._program([int(lp[0].argmax()) for lp in logps])

    # -- the Policy protocol ---------------------------------------------------------
    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        """Up to `n` distinct legal programs, most probable first (heuristic top-up)."""
        with _one_thread():
            return self._propose(problem, arch, n)

    def _propose(self, problem: Problem, arch: Arch, n: int) -> list[Program]:
        if arch not in {v.arch for v in self.space.variants}:
            return self.fallback.propose(problem, arch, n)
        found: list[Program] = []
        candidates = [self.mode(problem, arch)]
        for _ in range(SAMPLE_ROUNDS):
            for p in candidates:
                if p is not None and p not in found and check(p, problem) is None:
                    found.append(p)
            if len(found) >= 2 * n:
                break
            candidates = self.sample(problem, arch, max(32, 8 * n))
        if found:
            with torch.no_grad():
                logp = self.log_prob([problem] * len(found), found).tolist()
            found = [p for _, p in sorted(zip(logp, found), key=lambda x: -x[0])]
        found = found[:n]
        for p in self.fallback.propose(problem, arch, n + len(found)):
            if len(found) >= n:
                break
            if p not in found:
                found.append(p)
        return found

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Buffer one result; every `update_every` new ones, one update on the buffer's groups."""
        if not self.space.contains(program):
            return
        self._buffer[(problem, program.arch)][str(program)] = reward
        self._new += 1
        if self._new >= self.update_every:
            self._new = 0
            from ir.text import parse
            groups = [(p, a, [parse(t) for t in rows], list(rows.values()))
                      for (p, a), rows in self._buffer.items() if len(rows) >= 2]
            if groups:
                self.update(groups)

    # -- learning --------------------------------------------------------------------
    def update(self, groups: Sequence[tuple]) -> float:
        """One GRPO step on groups of (problem, arch, programs, rewards); returns the loss."""
        with _one_thread():
            return self._update(groups)

    def _update(self, groups: Sequence[tuple]) -> float:
        problems, programs, advantages = [], [], []
        for problem, _arch, progs, rewards in groups:
            r = torch.tensor(rewards, dtype=torch.float32)
            adv = r - r.mean()
            if self.normalize and len(rewards) > 1:
                adv = adv / (r.std() + 1e-6)
            problems += [problem] * len(progs)
            programs += list(progs)
            advantages.append(adv)
        adv = torch.cat(advantages)
        logps = self._log_softmax(problems, [p.arch for p in programs])
        logp = self._gather(logps, programs)
        entropy = torch.stack([-(lp.exp() * lp.nan_to_num(neginf=0.0)).sum(-1).mean()
                               for lp in logps]).mean()
        loss = -(adv * logp).mean() - self.entropy_weight * entropy
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def train(self, problems: Sequence[Problem], runner, steps: int = 60, group: int = 16,
              shapes_per_step: int = 8, arch: Arch | None = None) -> list[float]:
        """On-policy GRPO: each step samples `group` programs for `shapes_per_step` of
        `problems`, measures the legal ones with `runner.evaluate`, and updates. Returns
        the mean reward of each step's samples."""
        with _one_thread():
            return self._train(problems, runner, steps, group, shapes_per_step,
                               arch or self.space.variants[0].arch)

    def _train(self, problems, runner, steps, group, shapes_per_step, arch) -> list[float]:
        from search.env import reward
        rng = random.Random(self.seed)
        history = []
        for _ in range(steps):
            groups, rewards_all = [], []
            for problem in rng.sample(list(problems), min(shapes_per_step, len(problems))):
                progs = self.sample(problem, arch, group)
                legal = [p for p in progs if check(p, problem) is None]
                measured = iter(runner.evaluate(legal, problem) if legal else [])
                rewards = [reward(next(measured)) if check(p, problem) is None
                           else INVALID_VALUE for p in progs]
                groups.append((problem, arch, progs, rewards))
                rewards_all += rewards
            self._update(groups)
            history.append(sum(rewards_all) / len(rewards_all))
        return history

    # -- checkpoints -----------------------------------------------------------------
    def save(self, path: Path | str) -> Path:
        """torch.save of the weights, the space (the vocabularies) and the settings;
        written to a temporary name and renamed into place."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save({"version": CHECKPOINT_VERSION, "state": self.net.state_dict(),
                    "space": _space_to_data(self.space), "hidden": self.hidden,
                    "lr": self.lr, "seed": self.seed, "knobs": list(KNOBS)}, tmp)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path | str, **kwargs) -> "LearnedPolicy":
        """A policy restored from `save()`: same vocabulary, same weights."""
        data = torch.load(Path(path), weights_only=True)
        if data.get("version") != CHECKPOINT_VERSION or data.get("knobs") != list(KNOBS):
            raise ValueError(f"{path}: checkpoint version {data.get('version')} or knobs "
                             f"differ from this gemmforge's ({CHECKPOINT_VERSION}); retrain")
        policy = cls(space=_space_from_data(data["space"]), hidden=data["hidden"],
                     lr=data["lr"], seed=data["seed"], **kwargs)
        policy.net.load_state_dict(data["state"])
        return policy


def default_checkpoint() -> Path:
    """<user cache dir>/gemmforge/learned_policy.pt"""
    import platformdirs
    return Path(platformdirs.user_cache_dir("gemmforge")) / "learned_policy.pt"
