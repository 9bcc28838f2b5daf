"""The LLM policy's JSONL dataset: rows, crash-safe appends, and the trainer adapters."""
from __future__ import annotations

import json
import threading

import pytest

from gemmforge.ir import Arch, parse_problem, to_json
from gemmforge.policy.dataset import (
    FIELDS, DatasetWriter, grpo_prompts, make_reward_fn, make_row, read_rows, top_rows,
)
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.policy.prompts import FAILED_REWARD, build_prompt

PROBLEM = parse_problem("1000x4096x333 nn f32")
OTHER = parse_problem("64x64x4096 nt f16")
ARCH = Arch.SM90A


def programs(n, problem=PROBLEM):
    return HeuristicPolicy().propose(problem, ARCH, n)


def row(program, reward, problem=PROBLEM, error=""):
    completion = "" if program is None else json.dumps({"analysis": "",
                                                        "program": to_json(program)})
    return make_row(build_prompt(problem, ARCH), completion, program, reward, problem, ARCH,
                    "smollm2", error)


def test_rows_have_the_fields_trainers_read():
    p = programs(1)[0]
    r = row(p, 0.25)
    assert set(r) == set(FIELDS)
    assert r["prompt"][0]["role"] == "system" and r["prompt"][1]["role"] == "user"
    assert r["completion"] == [{"role": "assistant", "content": r["completion"][0]["content"]}]
    assert r["program"] == str(p) and r["key"] == p.key and r["reward"] == 0.25
    assert r["problem"] == "1000x4096x333 nn f32" and r["arch"] == "sm_90a"
    assert r["timestamp"].endswith("+00:00")
    failed = row(None, FAILED_REWARD, error="reply: not valid JSON")
    assert failed["program"] is None and failed["key"] is None


def test_append_and_read_back(tmp_path):
    path = tmp_path / "sub" / "rows.jsonl"
    writer = DatasetWriter(path)
    rows = [row(p, 0.1 * i) for i, p in enumerate(programs(3))]
    writer.extend(rows)
    assert read_rows(path) == rows
    DatasetWriter(path).append(rows[0])  # a second writer appends, never truncates
    assert len(read_rows(path)) == 4


def test_a_torn_last_line_and_a_garbled_line_are_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    writer = DatasetWriter(path)
    good = row(programs(1)[0], 0.3)
    writer.append(good)
    with open(path, "a") as f:
        f.write("{not json}\n")
    writer.append(good)
    with open(path, "a") as f:
        f.write('{"prompt": [{"role": "us')  # a crash in the middle of a write
    assert read_rows(path) == [good, good]


def test_concurrent_appends_stay_whole_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    writer = DatasetWriter(path)
    rows = [row(p, 0.01 * i) for i, p in enumerate(programs(6))]

    def work():
        for r in rows:
            writer.append(r)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = read_rows(path)
    assert len(got) == 24 and all(r in rows for r in got)


def test_bad_rows_are_refused(tmp_path):
    writer = DatasetWriter(tmp_path / "rows.jsonl")
    with pytest.raises(ValueError, match="lacks"):
        writer.append({"prompt": []})
    with pytest.raises(ValueError, match="finite"):
        writer.append(row(programs(1)[0], float("nan")))


def test_top_rows_pick_the_best_distinct_programs_per_problem():
    ps, qs = programs(3), programs(2, OTHER)
    rows = [row(ps[0], 0.2), row(ps[1], 0.5), row(ps[1], 0.4), row(ps[2], -0.1),
            row(None, FAILED_REWARD, error="verify: ..."), row(qs[0], 0.05, OTHER),
            row(qs[1], 0.01, OTHER)]
    top = top_rows(rows, per_problem=2)
    assert [(r["program"], r["reward"]) for r in top] == [
        (str(ps[1]), 0.5), (str(ps[0]), 0.2), (str(qs[0]), 0.05), (str(qs[1]), 0.01)]
    assert top_rows(rows, per_problem=1, min_reward=0.3) == [rows[1]]


def test_grpo_prompts_are_distinct_with_their_problem():
    ps = programs(2)
    records = grpo_prompts([row(ps[0], 0.1), row(ps[1], 0.2), row(ps[0], 0.1, OTHER)])
    assert [(r["problem"], r["arch"]) for r in records] == [
        (str(PROBLEM), "sm_90a"), (str(OTHER), "sm_90a")]
    assert set(records[0]) == {"prompt", "problem", "arch"}


def test_reward_fn_scores_legal_completions_in_one_batch_per_problem():
    ps = programs(2)
    calls = []

    def score(progs, problem):
        calls.append((progs, problem))
        return [0.7 + i for i in range(len(progs))]
    reward_fn = make_reward_fn(score)
    good = [{"role": "assistant", "content": row(ps[0], 0)["completion"][0]["content"]}]
    plain = row(ps[1], 0)["completion"][0]["content"]  # a standard (string) completion
    rewards = reward_fn(completions=[good, "not json", plain], problem=[str(PROBLEM)] * 3,
                        arch=["sm_90a"] * 3, prompts=None)
    assert rewards == [0.7, FAILED_REWARD, 1.7]
    assert calls == [([ps[0], ps[1]], PROBLEM)]
    assert reward_fn.__name__ == "gemmforge_speedup"
