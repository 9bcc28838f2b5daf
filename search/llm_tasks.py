"""The LLM policy's RL tasks: which shapes train, which are held out, what each prompt shows,
and the reward a completion earns, all answered from recorded GPU measurements.

    model = ReplayReward()                                    # search.replay_reward
    split = split_shapes(model)                               # train / held-out problems
    tasks = make_tasks(split.train, held_out_free(model, split), pool=prompt_pool())
    reward_fn = make_replay_reward_fn(model)                  # a TRL reward function

A task is one prompt (policy.prompts.build_prompt) for one problem on sm_90a, with a
lineage of EXAMPLES programs drawn from the measured programs (any shape's), each scored
by the replay reward on this problem: the contrastive examples the prompt shows, as a
search would have measured them. Held-out prompts are scored by a model that excludes
the held-out shapes, so no held-out measurement reaches a prompt.

The reward is search.env.reward of the replayed (or estimated) Result; a reply with no
legal program gets FAILED_REWARD (policy.dataset.make_reward_fn), and so does a program
the prompt already lists (`shown`): a search skips programs it has measured, so a copy
earns nothing there either. A legal program that another completion of the same prompt
gave first earns at most REPEAT_REWARD: a search measures it once, so the repeat adds
nothing, but it is still legal, so it stays just above a failure (this is the training's
shaping; the ratio part is policy.reward's, unchanged). It sits near the failure, not
halfway: a completion that repeats the group's program must pay less than one that tries
a new program, legal or not, unless new programs are legal less than NEW_PROGRAM_BREAK_EVEN
of the time (at WORST_REWARD / 2 the break-even was 1 in 2, and a 31-step run learned to
write one or two programs a prompt: benchmarks/NOTES.md, issue 24).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse, parse_problem
from gemmforge.policy.dataset import make_reward_fn
from gemmforge.policy.lineage import Lineage
from gemmforge.policy.prompts import FAILED_REWARD, PromptConfig, build_prompt
from gemmforge.policy.reward import WORST_REWARD
from gemmforge.search.replay_reward import ReplayReward

GRID = Path(__file__).with_name("data") / "grid_1000.txt"
HELD_OUT_FILE = Path(__file__).with_name("data") / "llm_held_out.txt"
"""The held-out shapes, one a line: the 30 measured grid shapes evenly spaced in FLOPs
order that the split chose when benchmarks/results alone fed the replay data (7,050 rows,
214 training shapes). Fixed in this file since the campaign stores joined the data (most
grid shapes are measured now): every run, evaluation and live reading since the
fourteenth session holds out the same 30."""
HELD_OUT = 30
PROMPT_POOL_FILE = Path(__file__).with_name("data") / "llm_prompt_pool.txt"
"""The programs the train-llm and evaluation prompts draw their examples from, one a line:
the 122 cuda_wgmma sm_90a programs benchmarks/results measured at the training shapes (the
pool while those CSVs alone fed the replay data). Fixed since the campaign stores joined
(1,097 programs): with every measured program as the pool, the 85-step adapter's held-out
prompts showed other examples and its replayed within-5 % count fell 16 -> 5 of 30 on
either data file (benchmarks/NOTES.md, issue 24, eighteenth session); the stores change the
reward, these keep the prompts."""
EXAMPLES = 4
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


def seeded_lineage(problem: Problem, model: ReplayReward, rng: random.Random,
                   examples: int = EXAMPLES, config: PromptConfig = CONFIG,
                   pool: Sequence[str] | None = None) -> Lineage:
    """A lineage of `examples` programs of `pool` (default: every program `model` measured;
    sm_90a, of the config's backends, legal here), each with its replayed or estimated
    reward on `problem`."""
    from gemmforge.ir.verify import check
    pool = [text for text in (model.programs() if pool is None else sorted(pool))
            if text.split()[1] == ARCH.value
            and (not config.backends or text.split()[0] in config.backends)]
    rng.shuffle(pool)
    lineage = Lineage()
    for text in pool:
        program = parse(text)
        if check(program, problem):
            continue
        lineage.add(program, source="measured", problem=str(problem),
                    reward=model.score([program], problem)[0])
        if len(lineage.measured(str(problem))) >= examples:
            break
    return lineage


def make_tasks(problems: Sequence[Problem], model: ReplayReward, *, per_problem: int = 1,
               seed: int = 0, examples: int = EXAMPLES, config: PromptConfig = CONFIG,
               pool: Sequence[str] | None = None) -> list[dict]:
    """GRPO rows: {"prompt": chat messages (Prompt.chat: ending in the assistant turn's
    reply prefix, which TRL continues), "reply_prefix", "problem", "arch", "shown": JSON
    list of the programs the prompt lists}, `per_problem` prompts (different examples, drawn
    from `pool`: seeded_lineage) per problem."""
    rng = random.Random(seed)
    rows = []
    for problem in problems:
        for _ in range(per_problem):
            lineage = seeded_lineage(problem, model, rng, examples, config, pool)
            prompt = build_prompt(problem, ARCH, lineage, config)
            shown = sorted(str(p) for p, _ in lineage.measured(str(problem)))
            rows.append({"prompt": prompt.chat(), "reply_prefix": prompt.reply_prefix,
                         "problem": str(problem),
                         "arch": ARCH.value, "shown": json.dumps(shown)})
    return rows


def make_replay_reward_fn(model: ReplayReward):
    """A TRL reward function: search.env.reward of each reply's program replayed by
    `model`, the reply being the row's `reply_prefix` and the completion; FAILED_REWARD
    for no legal program or a program the prompt lists (`shown`); REPEAT_REWARD for a
    legal program an earlier completion of the same prompt gave (the first keeps its
    reward)."""
    from gemmforge.policy.dataset import _text
    from gemmforge.policy.replies import parse_reply
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
