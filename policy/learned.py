"""The learned policy: a torch model from shape features to a distribution over programs.

    policy = LearnedPolicy(archs=(Arch.SM90A,))
    policy.train(train_problems, ReplayRunner(), steps=300)      # or a GPU runner
    policy.propose(Problem(1000, 4096, 333), Arch.SM90A, 4)      # shapes it never saw
    policy.observe(problem, program, reward)                     # then propose again
    policy.save(path); LearnedPolicy.load(path)

Model (policy/learned_net.py): shape features -> an autoregressive distribution over the
backend and each knob of `ir.knobs.KNOBS` (swap_ab -> tile -> warps -> stages -> ...), each field
conditioned on the earlier ones and on how they tile the shape.

Training (`train`): group-relative policy gradient (GRPO-style, no critic) with expert
iteration. Each step, for `shapes_per_step` training shapes, a group: `group` programs
sampled from the model, plus the `elites` best programs measured so far for the shape
and each backend's best (its "leader"). Beside the model's samples, a lineage search runs
on every training shape (policy/learned_search.py: the heuristic's programs seed one
lineage each, `climbs` new edits of each lineage's best per visit), all measured through
the runner, so the elites include what the model alone would not reach. Loss per group:
  -mean(advantage x log-prob)  advantage = the centred rank of the reward in the group
                               ("rank": an illegal program, INVALID_REWARD, is simply last
                               instead of squashing the working ones' spread) or its
                               z-score ("zscore");
  - entropy weight x entropy   annealed from `entropy_weight` to 0;
  + imitation x (mean -log-prob of the elites + mean -log-prob given the backend of each
                 leader within LEADER_SPAN of the best: per-backend modes worth trying).
Adam, the learning rate cosine-decayed to MIN_LR_FRACTION; then `distill_steps` of the
imitation term alone on each shape's best and leaders (expert iteration's last fit).
`observe()` keeps every result per shape and, every `update_every` results (None: never,
as the held-out benchmark runs it), runs `update()` on the kept groups.

Proposals (`propose`), n at a time. Before any result for the shape: the mode of each
backend the model gives at least BACKEND_FLOOR (most likely backend first), then a beam
search over the whole model. After results, a refinement on top of the model: the legal
edits of the best measured program (one knob, with the warps and stages a tile edit
needs), round-robin over knobs (the least proposed for the shape first), most probable
first within a knob; then the same list as before. A program already measured for the
shape is never proposed again; samples, then the heuristic policy, top up.
"""
from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from ..ir.knobs import KNOBS
from ..ir.program import Arch, Problem, Program
from ..ir.space import Space, Variant
from ..ir.verify import check
from .heuristic import HeuristicPolicy
from .learned_net import ProgramModel
from .learned_search import ShapeSearch, apply, edits, heuristic_seeds
from .reward import INVALID_REWARD

CHECKPOINT_VERSION = 2
BEAM_WIDTH = 32
SAMPLE_ROUNDS = 4
BACKEND_FLOOR = 0.05         # the first proposals hold each backend this likely
LEADER_SPAN = math.log(2)    # a backend within 2x of a shape's best is imitated too
MIN_LR_FRACTION = 0.1        # the cosine schedule ends at this fraction of `lr`


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


class LearnedPolicy:
    """A Policy (policy.base) backed by `ProgramModel`. `space` defaults to every
    registered backend on `archs`; `seed` fixes initialisation, sampling and training."""

    name = "learned"

    def __init__(self, space: Space | None = None, archs: Sequence[Arch] = (Arch.SM90A,),
                 backends: Sequence[str] | None = None, hidden: int = 96, lr: float = 3e-3,
                 seed: int = 0, update_every: int | None = 32, entropy_weight: float = 0.02,
                 advantage: str = "rank", imitation: float = 2.0, elites: int = 4,
                 beam_width: int = BEAM_WIDTH, distill_steps: int = 800):
        self.space = space or Space.build(archs, backends)
        self.hidden, self.lr, self.seed = hidden, lr, seed
        self.update_every, self.entropy_weight = update_every, entropy_weight
        self.advantage, self.imitation, self.elites = advantage, imitation, elites
        self.beam_width, self.distill_steps = beam_width, distill_steps
        torch.manual_seed(seed)
        self.model = ProgramModel(self.space, hidden)
        self.vocab = self.model.vocab
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.fallback = HeuristicPolicy()
        self.seen: dict[tuple, dict[Program, float]] = defaultdict(dict)
        self._tried: dict[tuple, Counter] = defaultdict(Counter)  # knobs proposed per shape
        self._new = 0

    # -- the distribution ------------------------------------------------------------
    def log_prob(self, problems: Sequence[Problem], programs: Sequence[Program]) -> torch.Tensor:
        """Log-probability of each program for its problem (all programs on one arch)."""
        return self.model.log_prob(problems, programs)

    def sample(self, problem: Problem, arch: Arch, count: int) -> list[Program]:
        """`count` programs drawn from the model (not verified; may repeat)."""
        with torch.no_grad():
            picks = self.model.walk([problem] * count, arch, generator=self.generator)[0]
        programs = [self.vocab.decode(arch, row) for row in picks.tolist()]
        return [p for p in programs if p is not None]

    def beam(self, problem: Problem, arch: Arch, width: int | None = None) -> list[Program]:
        """The most probable programs (beam search), best first; not verified."""
        return self.model.beam(problem, arch, width or self.beam_width)

    def mode(self, problem: Problem, arch: Arch) -> Program | None:
        """The most probable program the beam finds."""
        found = self.beam(problem, arch, 1)
        return found[0] if found else None

    # -- the Policy protocol ---------------------------------------------------------
    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        """Up to `n` distinct legal programs not yet measured for the shape, best first."""
        with _one_thread():
            return self._propose(problem, arch, n)

    def _propose(self, problem: Problem, arch: Arch, n: int) -> list[Program]:
        if arch not in {v.arch for v in self.space.variants} or \
                not self.vocab.mask(0, problem, arch, {}).any():
            return self.fallback.propose(problem, arch, n)
        seen = self.seen.get((problem, arch), {})
        found: list[Program] = []
        knob_of: dict[Program, tuple] = {}

        def add(programs) -> None:
            found.extend(p for p in dict.fromkeys(programs) if p not in seen
                         and p not in found and check(p, problem) is None)

        add(self._refined(problem, arch, seen, knob_of) + self._modes(problem, arch)
            + self.beam(problem, arch))
        for _ in range(SAMPLE_ROUNDS):
            if len(found) >= n:
                break
            add(self.sample(problem, arch, max(32, 4 * n)))
        if len(found) < n:
            add(self.fallback.propose(problem, arch, n + len(found) + len(seen)))
        for p in found[:n]:
            self._tried[(problem, arch)][knob_of.get(p)] += 1
        return found[:n]

    def _modes(self, problem: Problem, arch: Arch) -> list[Program]:
        """The most probable legal program of each backend the model gives at least
        BACKEND_FLOOR, most probable backend first: the beam's joint mode favours a
        backend whose knobs the model is sure of, not the backend it thinks best."""
        probs = self.model.backends(problem, arch)
        out = []
        for backend in sorted((b for b in probs if probs[b] >= BACKEND_FLOOR), key=probs.get,
                              reverse=True):
            out += [p for p in self.model.beam(problem, arch, self.beam_width, backend)
                    if check(p, problem) is None][:1]
        return out

    def _refined(self, problem: Problem, arch: Arch, seen: dict, knob_of: dict) -> list:
        """The legal unmeasured edits of the best measured program, round-robin over the
        knob each edits: the knobs proposed least often for the shape first (then the one
        whose best edit is most probable), per knob the most probable first. So a model
        sure of a knob still gets the knob's alternatives tried, and a new best that the
        noise of a knob that hardly matters brought doesn't restart the same knobs.
        Records each edit's (backend, knob) in `knob_of`."""
        ok = [p for p, r in seen.items() if r > INVALID_REWARD]
        if not ok:
            return []
        base = max(ok, key=seen.get)
        var = self.vocab.variants[(base.backend, arch)]
        near: dict[Program, tuple] = {}
        for change in edits(var, base):
            p = apply(var, base, change)
            if p is not None and p not in seen and p not in near and check(p, problem) is None:
                near[p] = (base.backend, next(iter(change)))
        if not near:
            return []
        with torch.no_grad():
            logp = self.log_prob([problem] * len(near), list(near)).tolist()
        by_knob: dict[tuple, list[Program]] = {}
        for _, p in sorted(zip(logp, near), key=lambda x: -x[0]):
            by_knob.setdefault(near[p], []).append(p)
        tried = self._tried[(problem, arch)]
        queues = sorted(by_knob.values(), key=lambda q: tried[near[q[0]]])  # stable
        knob_of.update(near)
        return [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Keep one result; every `update_every` new ones, one update on all kept groups."""
        if not self.space.contains(program):
            return
        self.seen[(problem, program.arch)][program] = reward
        self._new += 1
        if self.update_every and self._new >= self.update_every:
            self._new = 0
            groups = [(p, a, list(rows), list(rows.values()))
                      for (p, a), rows in self.seen.items() if len(rows) >= 2]
            if groups:
                self.update(groups)

    # -- learning --------------------------------------------------------------------
    def update(self, groups: Sequence[tuple], entropy_weight: float | None = None) -> float:
        """One step on groups of (problem, arch, programs, rewards); returns the loss."""
        with _one_thread():
            losses = []
            for arch in dict.fromkeys(a for _, a, _, _ in groups):
                mine = [g for g in groups if g[1] == arch]
                problems = [p for p, _, progs, _ in mine for _ in progs]
                programs = [x for _, _, progs, _ in mine for x in progs]
                forced = torch.tensor([self.vocab.encode(x) for x in programs])
                _, logp, entropy, backend_logp = self.model.walk(problems, arch, forced)
                loss = self._loss(logp, entropy, entropy_weight, mine) + self.imitation * \
                    self._imitation(logp, backend_logp, mine, self.elites)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(float(loss.detach()))
            return sum(losses) / len(losses)

    def _loss(self, logp, entropy, weight, groups) -> torch.Tensor:
        """-mean(advantage x logp) - weight x mean entropy (the policy-gradient part)."""
        advantages = torch.cat([_advantages(g[3], self.advantage) for g in groups])
        weight = self.entropy_weight if weight is None else weight
        return -(advantages * logp).mean() - weight * entropy.mean()

    @staticmethod
    def _imitation(logp, backend_logp, groups, top: int) -> torch.Tensor:
        """mean(-logp) of each group's `top` best working members, plus mean(-logp
        given the backend) of each backend's best member within LEADER_SPAN of the
        group's best: the model learns the best program of each contending backend, so
        its per-backend modes are worth proposing, without moving the backend step."""
        elite, leader, start = [], [], 0
        for _, _, programs, rewards in groups:
            order = sorted(range(len(rewards)), key=lambda i: -rewards[i])
            ok = [i for i in order if rewards[i] > INVALID_REWARD]
            elite += [start + i for i in ok[:top]]
            firsts = {programs[i].backend: i for i in reversed(ok)}
            leader += [start + i for i in firsts.values()
                       if rewards[i] >= rewards[ok[0]] - LEADER_SPAN]
            start += len(rewards)
        if not elite:
            return torch.zeros(())
        return -logp[elite].mean() - (logp - backend_logp)[leader].mean()

    def train(self, problems: Sequence[Problem], runner, steps: int = 300, group: int = 16,
              shapes_per_step: int = 8, arch: Arch | None = None, climbs: int = 1) -> list[float]:
        """GRPO with expert iteration over `steps` (see the module docstring), measuring
        through `runner.evaluate` (each program once per shape). Returns each step's mean
        reward of the model's samples."""
        with _one_thread():
            arch = arch or self.space.variants[0].arch
            rng, history = random.Random(self.seed), []
            shapes = list(dict.fromkeys(problems))
            seeds = heuristic_seeds(self.vocab.variants, shapes, arch)
            searches = {p: ShapeSearch(p, self.vocab.variants, runner, rng) for p in shapes}
            for search in searches.values():
                search.seed(seeds)
            for step in range(steps):
                chosen = rng.sample(shapes, min(shapes_per_step, len(shapes)))
                groups, rewards = self._groups([searches[p] for p in chosen], arch, group, climbs)
                done = step / max(1, steps - 1)
                self._set_lr(MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * (1 + math.cos(
                    math.pi * done)) / 2)
                self.update(groups, self.entropy_weight * (1 - done))
                history.append(sum(rewards) / len(rewards))
            self._distill(list(searches.values()), arch)
            self._set_lr(1.0)
            return history

    def _distill(self, searches: list[ShapeSearch], arch: Arch) -> None:
        """`distill_steps` steps, at the full learning rate, of imitation alone of the
        best program the search found on each shape (and, given the backend, of each
        contending backend's best): expert iteration's last fit."""
        groups = []
        for s in searches:
            best = list(dict.fromkeys(s.elites(1) + s.leaders()))
            groups.append((s.problem, arch, best, [s.known[p] for p in best]))
        problems = [g[0] for g in groups for _ in g[2]]
        forced = torch.tensor([self.vocab.encode(p) for g in groups for p in g[2]])
        self._set_lr(1.0)
        for _ in range(self.distill_steps if len(forced) else 0):
            _, logp, _, backend_logp = self.model.walk(problems, arch, forced)
            loss = self._imitation(logp, backend_logp, groups, 1)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    def _groups(self, searches: list[ShapeSearch], arch: Arch, group: int, count: int):
        """One step's groups (samples + elites per shape) and the samples' rewards."""
        with torch.no_grad():
            picks = self.model.walk([s.problem for s in searches for _ in range(group)], arch,
                                    generator=self.generator)[0]
        sampled = [self.vocab.decode(arch, row) for row in picks.tolist()]
        groups, rewards = [], []
        for i, search in enumerate(searches):
            mine = sampled[i * group:(i + 1) * group]
            rewards += search.measure(mine, "model")
            search.climb(count)
            members = [p for p in mine if p is not None] + list(dict.fromkeys(
                search.elites(self.elites) + search.leaders()))
            groups.append((search.problem, arch, members, [search.known[p] for p in members]))
        return groups, rewards

    def _set_lr(self, fraction: float) -> None:
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = self.lr * fraction

    # -- checkpoints -----------------------------------------------------------------
    def save(self, path: Path | str) -> Path:
        """torch.save of the weights, the space (the vocabularies) and the settings;
        written to a temporary name and renamed into place."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save({"version": CHECKPOINT_VERSION, "state": self.model.state_dict(),
                    "space": [[v.backend, v.arch.value, [list(c) for c in v.values]]
                              for v in self.space.variants],
                    "hidden": self.hidden, "lr": self.lr, "seed": self.seed,
                    "knobs": list(KNOBS)}, tmp)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path | str, **kwargs) -> LearnedPolicy:
        """A policy restored from `save()`: same vocabulary, same weights."""
        data = torch.load(Path(path), weights_only=True)
        if data.get("version") != CHECKPOINT_VERSION or data.get("knobs") != list(KNOBS):
            raise ValueError(f"{path}: checkpoint version {data.get('version')} or knobs "
                             f"differ from this gemmforge's ({CHECKPOINT_VERSION}); retrain")
        space = Space([Variant(b, Arch(a), tuple(tuple(c) for c in values))
                       for b, a, values in data["space"]])
        policy = cls(space=space, hidden=data["hidden"], lr=data["lr"], seed=data["seed"],
                     **kwargs)
        policy.model.load_state_dict(data["state"])
        return policy


def _advantages(rewards: list[float], kind: str) -> torch.Tensor:
    """Group-relative advantages: "rank": the centred rank in [-1, 1] (ties share one);
    "zscore": (reward - mean) / std."""
    r = torch.tensor(rewards, dtype=torch.float32)
    if len(rewards) < 2:
        return torch.zeros_like(r)
    if kind == "zscore":
        return (r - r.mean()) / (r.std() + 1e-6)
    below = (r[None, :] < r[:, None]).sum(1).float()
    ties = (r[None, :] == r[:, None]).sum(1).float()
    return 2 * (below + (ties - 1) / 2) / (len(rewards) - 1) - 1


def checkpoint_refusal(path: Path | str) -> str | None:
    """Why the file at `path` is not a checkpoint this gemmforge loads (a phrase following
    the path), or None when LearnedPolicy.load would read it."""
    import warnings
    try:
        with warnings.catch_warnings():  # torch warns about what it then refuses
            warnings.simplefilter("ignore")
            data = torch.load(Path(path), weights_only=True)
    except Exception as e:  # torch raises many kinds on a file of another kind
        return f"is not a learned-policy checkpoint (torch.load: {type(e).__name__})"
    if not isinstance(data, dict):
        return "is not a learned-policy checkpoint (not a dict of tensors)"
    if data.get("version") != CHECKPOINT_VERSION or data.get("knobs") != list(KNOBS):
        return (f"has checkpoint version {data.get('version')} or knobs that differ from this "
                f"gemmforge's ({CHECKPOINT_VERSION}); retrain it (gemmforge train-policy)")
    return None


def default_checkpoint() -> Path:
    """<user cache dir>/gemmforge/learned_policy.pt"""
    import platformdirs
    return Path(platformdirs.user_cache_dir("gemmforge")) / "learned_policy.pt"
