"""The LLM policy's dataset: one JSONL row per (prompt, completion, reward).

Rows are what RL and SFT trainers read (docs/llm_finetune.md has the recipes):

| field | type | meaning |
| --- | --- | --- |
| prompt | list of {"role", "content"} | the chat prompt (TRL's "conversational" form) |
| completion | list of one {"role": "assistant", "content"} | the model's raw reply |
| program | str or null | canonical text of the program the reply gave; null if it gave none |
| reward | float | log(cuBLAS time / kernel time); -5 for a failure (illegal, wrong, crashed) |
| error | str | why the reply gave no program or the program failed ("" if none) |
| problem | str | "MxNxK layout acc", as ir.text.parse_problem reads it |
| arch | str | sm_80 or sm_90a |
| model | str | the model directory or server URL that wrote the completion |
| timestamp | str | ISO 8601, UTC |
| key | str or null | the program's content hash (ir.Program.key) |
| schema_version | int | version of the Program JSON form (ir.schema.SCHEMA_VERSION) |
| adapter | str or null | the LoRA adapter that wrote the completion ("NAME@HASH", policy.samplers.adapter_id); null for the base model |

TRL's GRPOTrainer needs `prompt` and passes every other column to reward functions as
keyword arguments (lists, one entry per completion): `problem` and `arch` are what
`make_reward_fn` scores with. SFTTrainer takes `prompt` + `completion` (prompt-completion
form, loss on the completion only). verl wants parquet with `prompt` as chat messages: see
the doc.

Writes are append-only and crash-safe: each row is one `os.write` of a whole line to a
file opened with O_APPEND, then fsync, so a crash leaves at worst a torn last line, which
`read_rows` skips.
"""
from __future__ import annotations

import json
import math
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..ir.program import Arch, Problem, Program
from ..ir.schema import SCHEMA_VERSION
from .prompts import FAILED_REWARD, Prompt

FIELDS = ("prompt", "completion", "program", "reward", "error", "problem", "arch", "model",
          "timestamp", "key", "schema_version", "adapter")


def make_row(prompt: Prompt, completion: str, program: Program | None, reward: float,
             problem: Problem, arch: Arch, model: str, error: str = "",
             adapter: str | None = None) -> dict:
    """One dataset row (see the module docstring for the fields)."""
    return {
        "prompt": prompt.messages(),
        "completion": [{"role": "assistant", "content": completion}],
        "program": None if program is None else str(program),
        "reward": float(reward),
        "error": error,
        "problem": str(problem),
        "arch": Arch(arch).value,
        "model": model,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "key": None if program is None else program.key,
        "schema_version": SCHEMA_VERSION,
        "adapter": adapter,
    }


class DatasetWriter:
    """Appends rows to a JSONL file; safe across threads and processes, durable per row."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, row: dict) -> None:
        """Write `row` as one line: a single O_APPEND write, then fsync."""
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise ValueError(f"dataset row lacks {', '.join(missing)}")
        if not math.isfinite(row["reward"]):
            raise ValueError(f"reward: {row['reward']} is not finite")
        line = (json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):  # a regular file takes it whole; say so if not
                    raise OSError(f"{self.path}: short write ({written} of {len(line)} B)")
                os.fsync(fd)
            finally:
                os.close(fd)

    def extend(self, rows: Iterable[dict]) -> None:
        """Append each row (each durable on its own)."""
        for row in rows:
            self.append(row)


def read_rows(path: str | Path) -> list[dict]:
    """Every complete row of the file, in order; a torn or garbled line is skipped."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # the last write was cut short
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def top_rows(rows: Sequence[dict], per_problem: int = 1, min_reward: float = 0.0) -> list[dict]:
    """For SFT: the `per_problem` best rows of each problem with reward >= `min_reward`
    (0 = as fast as cuBLAS), one row per distinct program, best first."""
    by_problem: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row.get("program") and row["reward"] >= min_reward:
            by_problem.setdefault((row["problem"], row["arch"]), []).append(row)
    picked = []
    for group in by_problem.values():
        seen = set()
        for row in sorted(group, key=lambda r: (-r["reward"], r["program"])):
            if row["program"] not in seen and len(seen) < per_problem:
                seen.add(row["program"])
                picked.append(row)
    return sorted(picked, key=lambda r: (-r["reward"], r["problem"]))


def grpo_prompts(rows: Sequence[dict]) -> list[dict]:
    """For GRPO: one {"prompt", "problem", "arch"} record per distinct prompt."""
    seen, out = set(), []
    for row in rows:
        marker = json.dumps(row["prompt"], sort_keys=True)
        if marker not in seen:
            seen.add(marker)
            out.append({"prompt": row["prompt"], "problem": row["problem"], "arch": row["arch"]})
    return out


Scorer = Callable[[list[Program], Problem], list[float]]


def _text(completion) -> str:
    """A completion as TRL passes it: a string, or a list of one message dict."""
    if isinstance(completion, list):
        return completion[-1].get("content", "") if completion else ""
    return str(completion)


def make_reward_fn(score: Scorer) -> Callable[..., list[float]]:
    """A TRL reward function: parse and verify each completion (policy.replies.parse_reply),
    score the legal programs of each problem in one batch with `score(programs, problem)`
    (e.g. search.measure.env.evaluate + reward), and give FAILED_REWARD to the rest."""
    from ..ir.text import parse_problem
    from .replies import parse_reply

    def reward_fn(completions, problem, arch, **_) -> list[float]:
        rewards = [FAILED_REWARD] * len(completions)
        legal: dict[str, list[tuple[int, Program]]] = {}
        for i, (completion, prob, ar) in enumerate(zip(completions, problem, arch)):
            proposal = parse_reply(_text(completion), parse_problem(prob), Arch(ar))
            if proposal.ok:
                legal.setdefault(prob, []).append((i, proposal.program))
        for prob, items in legal.items():
            scores = score([p for _, p in items], parse_problem(prob))
            for (i, _), value in zip(items, scores):
                rewards[i] = max(FAILED_REWARD, float(value))
        return rewards

    reward_fn.__name__ = "gemmforge_speedup"
    return reward_fn
