"""The LLM policy's evaluation on held-out shapes: proposals sampled from a prompt (one
round, or two with the second told the first's programs), each shape's legal and distinct
counts and best replayed ratio, and a stage's figures over its shapes. benchmarks/llm_rl.py
is the command line over it (docs/llm_finetune.md)."""
from __future__ import annotations

import csv
import json
import math
import random
import time
from pathlib import Path

from ...ir.space import Space
from ...policy.llm import parse_reply
from ...policy.prompts import Prompt
from ..measure.env import WORST_REWARD
from .llm_tasks import ARCH, TEMPERATURE
from .replay_reward import ReplayReward, is_estimated

STAGE_FIELDS = ("stage", "legal_fraction", "distinct_fraction", "best_of_8_ratio",
                "within_5pct_of_tuned", "within_5pct_unlisted", "estimated_fraction", "shapes", "completions",
                "seconds_per_shape", "adapter")
SHAPE_FIELDS = ("stage", "problem", "legal", "distinct", "best_ratio", "tuned_ratio",
                "best_program", "best_estimated", "best_unlisted_ratio", "illegal_reasons")
EVAL_SEED = 1234


def _prompt(row: dict) -> Prompt:
    system, user = (m["content"] for m in row["prompt"][:2])
    return Prompt(system, user, reply_prefix=row["reply_prefix"])


def llm_proposals(sampler, row: dict, problem, samples: int, max_tokens: int,
                  grammar=None) -> list:
    """The Proposals (policy.replies: a verified program, or None and the reason) of
    `samples` one-line replies, sampled as train-llm samples: the compact prompt, its
    reply prefix, TEMPERATURE, and, with `grammar`, every token constrained to it."""
    extra = {"grammar": grammar} if grammar is not None else {}
    texts = sampler.sample(_prompt(row), None, samples, temperature=TEMPERATURE,
                           max_tokens=max_tokens, seed=EVAL_SEED, **extra)
    return [parse_reply(t, problem, ARCH) for t in texts]


def two_rounds(sampler, task: dict, problem, args, rules=None) -> list:
    """`samples` Proposals in two rounds of half, as `tune --policy llm` proposes
    (policy.llm.LLMPolicy.propose): the second round's prompt lists the first round's
    legal programs as already proposed (policy.prompts.compact_prompt's `avoid`)."""
    from ...policy.prompts import build_prompt
    from .llm_tasks import CONFIG
    first_n = args.samples // 2
    first = llm_proposals(sampler, task, problem, first_n, args.max_tokens, rules)
    avoid = [p.program for p in first if p.ok]
    prompt = build_prompt(problem, ARCH, task["lineage"], CONFIG, avoid=avoid)
    row = dict(task, prompt=prompt.chat(), reply_prefix=prompt.reply_prefix)
    extra = {"grammar": rules} if rules is not None else {}
    texts = sampler.sample(_prompt(row), None, args.samples - first_n, temperature=TEMPERATURE,
                           max_tokens=args.max_tokens, seed=EVAL_SEED + 1, **extra)
    return first + [parse_reply(t, problem, ARCH) for t in texts]


def with_lineages(tasks: list[dict], problems, model: ReplayReward, seed: int,
                  pool=None) -> list[dict]:
    """The tasks (make_tasks, one per problem) with the lineage each prompt was built
    from (drawn again from the same seed), for a second round's prompt."""
    from ...policy.prompts import build_prompt
    from .llm_tasks import CONFIG, PoolReadings, seeded_lineage
    rng = random.Random(seed)
    readings = PoolReadings(model, pool) if pool is not None else None
    out = []
    for task, problem in zip(tasks, problems):
        lineage = seeded_lineage(problem, model, rng, pool=pool, readings=readings)
        assert build_prompt(problem, ARCH, lineage, CONFIG).chat() == task["prompt"]
        out.append(dict(task, lineage=lineage))
    return out


def reason_key(reason: str) -> str:
    """A failure reason's class and field ("verify: stages", "text: epilogue")."""
    return ":".join(reason.split(":")[:2]).strip()


def reason_counts(reasons: list[str]) -> str:
    """'KEY xN; ...' of failure reasons, the commonest first."""
    from collections import Counter
    return "; ".join(f"{k} x{n}" for k, n in Counter(map(reason_key, reasons)).most_common())


def random_programs(problem, samples: int, rng: random.Random) -> list:
    space = Space.build([ARCH])
    return [space.sample_legal(problem, rng) for _ in range(samples)]


def shape_row(stage: str, problem, programs: list, model: ReplayReward,
              reasons: list[str] = (), listed: list[str] = ()) -> dict:
    """Legal and distinct counts and the best replayed ratio of one shape's samples
    (`reasons`: why the others failed), and the best of those the prompt did not list
    (`listed`: its examples' texts; a copy of one proposes nothing a search lacked)."""
    legal = [p for p in programs if p is not None]
    results = model.evaluate(legal, problem) if legal else []
    best = max(results, key=lambda r: r.speedup or 0.0, default=None)
    ok = best is not None and best.ok
    unlisted = [r.speedup for p, r in zip(legal, results) if r.ok and str(p) not in listed]
    tuned = model.best(problem)
    return {"stage": stage, "problem": str(problem), "legal": len(legal),
            "distinct": len(set(legal)), "programs": list(dict.fromkeys(str(p) for p in legal)),
            "best_ratio": best.speedup if ok else math.exp(WORST_REWARD),
            "tuned_ratio": tuned.speedup if tuned else "",
            "best_program": best.program if ok else "",
            "best_estimated": is_estimated(best) if ok else "",
            "best_unlisted_ratio": max(unlisted, default=math.exp(WORST_REWARD)),
            "illegal_reasons": reason_counts(list(reasons))}


def stage_row(stage: str, rows: list[dict], samples: int, seconds: float,
              adapter: str = "") -> dict:
    n = len(rows)
    total = n * samples
    def within(key: str) -> float:
        return sum(1 for r in rows if r["tuned_ratio"]
                   and r[key] >= 0.95 * r["tuned_ratio"]) / n

    return {"stage": stage, "legal_fraction": sum(r["legal"] for r in rows) / total,
            "distinct_fraction": sum(r["distinct"] for r in rows) / total,
            "best_of_8_ratio": math.exp(sum(math.log(r["best_ratio"]) for r in rows) / n),
            "within_5pct_of_tuned": within("best_ratio"),
            "within_5pct_unlisted": within("best_unlisted_ratio"),
            "estimated_fraction": sum(1 for r in rows if r["best_estimated"] is True) / n,
            "shapes": n, "completions": total, "seconds_per_shape": round(seconds / n, 1),
            "adapter": adapter}


GRAMMAR = "_grammar"  # in a stage name: sample under ir.grammar
ROUNDS = "_rounds"  # in a stage name: two rounds, the second told the first's programs


def _sampler(stage: str, args):
    from ...policy.samplers import TransformersSampler
    adapter = Path(args.run) / "adapter" if stage.startswith("trained") else None
    return TransformersSampler(args.model, adapter=adapter)


def evaluate_stage(stage: str, tasks: list[dict], model: ReplayReward, args) -> tuple:
    """(stage row, shape rows) for one stage."""
    from ...ir.text import parse_problem
    from ...policy.samplers import adapter_id
    from ...ir.grammar import grammar
    sampler = None if stage == "random" else _sampler(stage, args)
    rules = grammar(task_backend(tasks), ARCH) if GRAMMAR in stage else None
    rng = random.Random(EVAL_SEED)
    rows, start = [], time.perf_counter()
    for task in tasks:
        problem = parse_problem(task["problem"])
        reasons = []
        if sampler is None:
            programs = random_programs(problem, args.samples, rng)
        else:
            proposals = (two_rounds(sampler, task, problem, args, rules) if ROUNDS in stage
                         else llm_proposals(sampler, task, problem, args.samples,
                                            args.max_tokens, rules))
            programs = [p.program for p in proposals]
            reasons = [p.reason for p in proposals if not p.ok]
        rows.append(shape_row(stage, problem, programs, model, reasons,
                              json.loads(task["shown"])))
        print(f"{stage} {problem}: legal {rows[-1]['legal']}/{args.samples}, distinct "
              f"{rows[-1]['distinct']}, best {rows[-1]['best_ratio']:.3f}", flush=True)
    adapter = adapter_id(sampler.adapter) if sampler is not None and sampler.adapter else ""
    return stage_row(stage, rows, args.samples, time.perf_counter() - start, adapter), rows


def task_backend(tasks: list[dict]) -> str:
    """The one backend the tasks' reply prefix names (search.learn.llm_tasks.CONFIG)."""
    (backend,) = {t["reply_prefix"].split()[0] for t in tasks}
    return backend


def moving_mean(values: list[float], window: int) -> list[float]:
    """The mean of each value and the up to window - 1 before it."""
    return [sum(values[max(0, i + 1 - window):i + 1]) / (i + 1 - max(0, i + 1 - window))
            for i in range(len(values))]


def write_proposals(path: Path, rows: list[dict], adapter: str, stage: str = "trained") -> None:
    """Each shape's distinct legal proposals under a `# shape PROBLEM` line."""
    lines = [f"# trained policy's proposals (adapter {adapter}, stage {stage}) on the "
             f"held-out shapes, from search.learn.llm_eval; program text, one a line"]
    for row in rows:
        lines.append(f"# shape {row['problem']}")
        lines.extend(row["programs"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def merged(path: Path, rows: list[dict], stages: set[str]) -> list[dict]:
    """The file's rows of other stages, then `rows`: a stage run later replaces its own."""
    if not path.exists():
        return rows
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r["stage"] not in stages] + rows


def write_csv(path: Path, fields, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
