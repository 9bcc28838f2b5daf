"""The LLM policy's RL tasks: which shapes train, which are held out, what each prompt shows,
and the reward a completion earns, all answered from recorded GPU measurements.

    model = ReplayReward()                                    # search.learn.replay_reward
    split = split_shapes(model)                               # train / held-out problems
    tasks = make_tasks(stratified_problems(split.train), held_out_free(model, split),
                       pool=prompt_pool())                    # training prompts
    reward_fn = make_replay_reward_fn(model)                  # a TRL reward function

A task is one prompt (policy.prompts.build_prompt) for one problem on sm_90a, with a
lineage of EXAMPLES programs of the prompt pool, each scored by the replay reward on this
problem: the contrastive examples the prompt shows, as a search would have measured them.
NEAR_EXAMPLES of them are the pool's best measured programs at the nearest other shapes of
the problem's FLOP decade (PoolReadings: programs that suit its size, as a tune's lineage
at a shape starts with the heuristic's proposals for it), the rest drawn at random. Held-out
prompts are scored by a model that excludes the held-out shapes, and their neighbours are
training shapes, so no held-out measurement reaches a prompt. Training prompts are drawn
stratified by size (stratified_problems: LARGE_SHARE of them at shapes of LARGE_FLOPS or
more, where 23 of the 30 held-out shapes are, though 838 of the 1,002 training shapes are
below).

The reward is search.measure.env.reward of the replayed (or estimated) Result; a reply with no
legal program gets FAILED_REWARD (policy.dataset.make_reward_fn), and so does a program
the prompt already lists (`shown`): a search skips programs it has measured, so a copy
earns nothing there either. A legal program that another completion of the same prompt
gave first earns at most REPEAT_REWARD: a search measures it once, so the repeat adds
nothing, but it is still legal, so it stays just above a failure (this is the training's
shaping; the ratio part is policy.reward's, unchanged). It sits near the failure, not
halfway: a completion that repeats the group's program must pay less than one that tries
a new program, legal or not, unless new programs are legal less than NEW_PROGRAM_BREAK_EVEN
of the time (at WORST_REWARD / 2 the break-even was 1 in 2, and a 31-step run learned to
write one or two programs a prompt: benchmarks/NOTES.md).
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...ir.program import Arch, Problem
from ...ir.text import parse, parse_problem
from ...policy.dataset import make_reward_fn
from ...policy.lineage import Lineage
from ...policy.prompts import FAILED_REWARD, PromptConfig, build_prompt
from ...policy.reward import WORST_REWARD
from .replay_reward import ReplayReward

GRID = Path(__file__).parents[1] / "data" / "grid_1000.txt"
HELD_OUT_FILE = Path(__file__).parents[1] / "data" / "llm_held_out.txt"
"""The held-out shapes, one a line: the 30 measured grid shapes evenly spaced in FLOPs
order that the split chose when benchmarks/results alone fed the replay data (7,050 rows,
214 training shapes). Fixed in this file since the campaign stores joined the data (most
grid shapes are measured now): every run, evaluation and live reading holds out
the same 30."""
HELD_OUT = 30
PROMPT_POOL_FILE = Path(__file__).parents[1] / "data" / "llm_prompt_pool.txt"
"""The programs the train-llm and evaluation prompts draw their examples from, one a line:
the 122 cuda_wgmma sm_90a programs benchmarks/results measured at the training shapes (the
pool while those CSVs alone fed the replay data). Fixed since the campaign stores joined
(1,097 programs): with every measured program as the pool, the 85-step adapter's held-out
prompts showed other examples and its replayed within-5 % count fell 16 -> 5 of 30 on
either data file (benchmarks/NOTES.md); the stores change the
reward, these keep the prompts. It also holds, after those 122,
the small-tile programs: each training shape's best measured cuda_wgmma sm_90a program
(held_out_free's replay, so never a held-out reading) whose tile has a side of SMALL_SIDE or
less, that the 122 lacked (small_tile_bests; the 122 held 7 such programs, and the adapter
proposed 128-wide tiles at the held-out shapes below 1e10 FLOPs)."""
SMALL_SIDE = 64
EXAMPLES = 4
NEAR_EXAMPLES = 2  # of EXAMPLES: the best pool programs at the nearest shapes of the decade
LARGE_FLOPS = 1e11
LARGE_SHARE = 0.4  # of training prompts at shapes of LARGE_FLOPS or more (train-llm's default)
NEW_PROGRAM_BREAK_EVEN = 0.2
REPEAT_REWARD = WORST_REWARD * (1 - NEW_PROGRAM_BREAK_EVEN)  # -4.0
TEMPERATURE = 0.8  # sampling temperature in training and evaluation (LLMPolicy's default)
GENERATIONS = 8  # completions per training prompt: the evaluation's samples per shape
ARCH = Arch.SM90A
CONFIG = PromptConfig(backends=("cuda_wgmma",), reply="text")
"""What the training prompts offer: one backend, the one most measured (and the fastest on
Hopper), in the compact prompt that asks for one line of program text (~300 prompt tokens
and <= 64 reply tokens, against ~900 and ~200 for the full prompt's JSON reply);
`gemmforge tune --policy llm --backends cuda_wgmma --llm-reply text` prompts the same way."""


@dataclass(frozen=True)
class Split:
    """Training and held-out problems; they never share a shape."""

    train: tuple[Problem, ...]
    held_out: tuple[Problem, ...]


def grid_problems(path: Path = GRID) -> set[Problem]:
    """The 1,000-shape grid (nn, f32)."""
    return {parse_problem(line.strip()) for line in path.read_text().splitlines()
            if line.strip()}


def held_out_problems(path: Path = HELD_OUT_FILE) -> tuple[Problem, ...]:
    """The held-out shapes of HELD_OUT_FILE, in its order (FLOPs)."""
    return tuple(parse_problem(line.strip()) for line in path.read_text().splitlines()
                 if line.strip())


def split_shapes(model: ReplayReward) -> Split:
    """Held out: the shapes of HELD_OUT_FILE; train: every other shape `model` measured
    of the training kind (sm_90a rows, nn, f32: one grammar constrains the prompts)."""
    held = held_out_problems()
    train = tuple(p for p in model.problems() if p not in set(held)
                  and (str(p.layout), str(p.acc)) == ("nn", "f32") and _has_arch(model, p))
    return Split(train, held)


def held_out_free(model: ReplayReward, split: Split) -> ReplayReward:
    """`model` less every measurement at a held-out shape (neither replayed nor a
    neighbour of an estimate): the reward training scores with and the held-out prompts'
    examples are scored with."""
    return ReplayReward(device=model.device, rows=model.rows, exclude=split.held_out)


def _has_arch(model: ReplayReward, problem: Problem) -> bool:
    return any(r.program.split()[1] == ARCH.value for r in model.at(problem))


def prompt_pool(path: Path = PROMPT_POOL_FILE) -> tuple[str, ...]:
    """The programs of PROMPT_POOL_FILE, sorted."""
    return tuple(sorted(line.strip() for line in path.read_text().splitlines() if line.strip()))


def flop_decade(problem: Problem) -> int:
    """The problem's FLOP class: floor(log10(2mnk))."""
    return math.floor(math.log10(problem.flops))


def tile_side(text: str) -> int:
    """The shorter side (bm or bn) of a program text's tile."""
    bm, bn, _ = map(int, text.split()[2].split("x"))
    return min(bm, bn)


def small_tile_bests(model: ReplayReward, problems: Sequence[Problem]) -> list[str]:
    """Of `problems`, the best measured cuda_wgmma sm_90a program at each whose tile has a
    side of SMALL_SIDE or less, sorted, once each: the pool's small-tile programs."""
    bests = set()
    for problem in problems:
        rows = [r for r in model.at(problem) if r.program.startswith("cuda_wgmma sm_90a ")]
        best = max(rows, key=lambda r: (r.speedup, r.program), default=None)
        if best is not None and tile_side(best.program) <= SMALL_SIDE:
            bests.add(best.program)
    return sorted(bests)


class PoolReadings:
    """The pool's programs as `model` measured them, shape by shape, for the NEAR_EXAMPLES
    of a prompt: the best pool programs at the nearest other shapes of its FLOP decade."""

    def __init__(self, model: ReplayReward, pool: Sequence[str]):
        programs = set(pool)
        self.best_first: dict[Problem, list[str]] = {}
        for problem in model.problems():
            rows = [r for r in model.at(problem) if r.program in programs]
            if rows:
                rows.sort(key=lambda r: (-r.speedup, r.program))
                self.best_first[problem] = [r.program for r in rows]

    def nearest(self, problem: Problem) -> list[Problem]:
        """The other measured shapes of `problem`'s decade and class, nearest first (log2
        distance over m, n, k; ties by text)."""
        def distance(other: Problem) -> float:
            return sum(math.log2(a / b) ** 2 for a, b in zip(
                (problem.m, problem.n, problem.k), (other.m, other.n, other.k)))
        same = [p for p in self.best_first if p != problem
                and flop_decade(p) == flop_decade(problem)
                and (p.layout, p.acc) == (problem.layout, problem.acc)]
        return sorted(same, key=lambda p: (distance(p), str(p)))

    def near_programs(self, problem: Problem, count: int = NEAR_EXAMPLES) -> list[str]:
        """`count` programs legal at `problem`: the best of each nearest shape in turn (its
        next best where that is taken or illegal here)."""
        from ...ir.verify import check
        out: list[str] = []
        for shape in self.nearest(problem):
            if len(out) >= count:
                break
            pick = next((t for t in self.best_first[shape]
                         if t not in out and check(parse(t), problem) is None), None)
            if pick is not None:
                out.append(pick)
        return out


def seeded_lineage(problem: Problem, model: ReplayReward, rng: random.Random,
                   examples: int = EXAMPLES, config: PromptConfig = CONFIG,
                   pool: Sequence[str] | None = None,
                   readings: PoolReadings | None = None) -> Lineage:
    """A lineage of `examples` programs of `pool` (default: every program `model` measured;
    sm_90a, of the config's backends, legal here), each with its replayed or estimated
    reward on `problem`: first `readings`' near_programs for `problem` (none without
    `readings`), then programs drawn at random."""
    from ...ir.verify import check
    pool = [text for text in (model.programs() if pool is None else sorted(pool))
            if text.split()[1] == ARCH.value
            and (not config.backends or text.split()[0] in config.backends)]
    near = readings.near_programs(problem, min(NEAR_EXAMPLES, examples)) if readings else []
    near = [text for text in near if text in pool]
    rest = [text for text in pool if text not in near]
    rng.shuffle(rest)
    lineage = Lineage()
    for text in near + rest:
        program = parse(text)
        if check(program, problem):
            continue
        lineage.add(program, source="measured", problem=str(problem),
                    reward=model.score([program], problem)[0])
        if len(lineage.measured(str(problem))) >= examples:
            break
    return lineage


def stratified_problems(problems: Sequence[Problem], seed: int = 0,
                        large_share: float = LARGE_SHARE) -> list[Problem]:
    """As many problems as `problems` holds, `large_share` of them (rounded) at shapes of
    LARGE_FLOPS or more and the rest below, each class cycled through in a seeded order (a
    shape comes up once more only after every shape of its class has): the training
    prompts' shapes. `problems` as given when it lacks either class."""
    large = sorted((p for p in problems if p.flops >= LARGE_FLOPS), key=str)
    small = sorted((p for p in problems if p.flops < LARGE_FLOPS), key=str)
    if not large or not small:
        return list(problems)
    rng = random.Random(seed)
    rng.shuffle(large)
    rng.shuffle(small)
    n_large = round(large_share * len(problems))
    return ([large[i % len(large)] for i in range(n_large)]
            + [small[i % len(small)] for i in range(len(problems) - n_large)])


def seed_examples(lineage: Lineage, problems: Sequence[Problem], *,
                  model: ReplayReward | None = None, seed: int = 0,
                  config: PromptConfig = CONFIG) -> None:
    """Add to `lineage`, at each of `problems`, the examples a train-llm prompt shows there
    (seeded_lineage over the prompt pool: NEAR_EXAMPLES best at the nearest shapes of its
    FLOP decade, the rest at random), each with its replayed or estimated reward there and
    source "replayed": `gemmforge tune --policy llm --llm-examples replay` starts every
    shape's lineage from the kind of prompt an adapter from train-llm trained on. `model`:
    the replay data (default: the package's file)."""
    model = model if model is not None else ReplayReward()
    pool = prompt_pool()
    readings = PoolReadings(model, pool)
    rng = random.Random(seed)
    for problem in problems:
        shown = seeded_lineage(problem, model, rng, config=config, pool=pool, readings=readings)
        for program, reward in shown.measured(str(problem)):
            lineage.add(program, source="replayed", problem=str(problem), reward=reward)


def make_tasks(problems: Sequence[Problem], model: ReplayReward, *, per_problem: int = 1,
               seed: int = 0, examples: int = EXAMPLES, config: PromptConfig = CONFIG,
               pool: Sequence[str] | None = None) -> list[dict]:
    """GRPO rows: {"prompt": chat messages (Prompt.chat: ending in the assistant turn's
    reply prefix, which TRL continues), "reply_prefix", "problem", "arch", "shown": JSON
    list of the programs the prompt lists}, `per_problem` prompts (different examples, drawn
    from `pool`: seeded_lineage, with the pool's readings near each problem when a pool is
    given) per problem."""
    rng = random.Random(seed)
    readings = PoolReadings(model, pool) if pool is not None else None
    rows = []
    for problem in problems:
        for _ in range(per_problem):
            lineage = seeded_lineage(problem, model, rng, examples, config, pool, readings)
            prompt = build_prompt(problem, ARCH, lineage, config)
            shown = sorted(str(p) for p, _ in lineage.measured(str(problem)))
            rows.append({"prompt": prompt.chat(), "reply_prefix": prompt.reply_prefix,
                         "problem": str(problem),
                         "arch": ARCH.value, "shown": json.dumps(shown)})
    return rows


def make_replay_reward_fn(model: ReplayReward):
    """A TRL reward function: search.measure.env.reward of each reply's program replayed by
    `model`, the reply being the row's `reply_prefix` and the completion; FAILED_REWARD
    for no legal program or a program the prompt lists (`shown`); REPEAT_REWARD for a
    legal program an earlier completion of the same prompt gave (the first keeps its
    reward)."""
    from ...policy.dataset import _text
    from ...policy.replies import parse_reply
    base = make_reward_fn(model.score)

    def reward_fn(completions, problem, arch, shown=None, reply_prefix=None,
                  **kw) -> list[float]:
        prefixes = reply_prefix or [""] * len(completions)
        replies = [pre + _text(c) for pre, c in zip(prefixes, completions)]
        rewards = base(replies, problem, arch, **kw)
        listed = shown or ["[]"] * len(replies)
        seen = set()
        for i, (reply, prob, ar) in enumerate(zip(replies, problem, arch)):
            if rewards[i] <= FAILED_REWARD:
                continue
            program = str(parse_reply(reply, parse_problem(prob), Arch(ar)).program)
            if program in json.loads(listed[i]):
                rewards[i] = FAILED_REWARD
            elif (prob, listed[i], program) in seen:
                rewards[i] = min(rewards[i], REPEAT_REWARD)
            seen.add((prob, listed[i], program))
        return rewards

    reward_fn.__name__ = "gemmforge_replayed_speedup"
    return reward_fn
