"""Heavy tier, offline engine: vllm.LLM (CPU build) samples programs under the reply
schema; every completion is schema-valid, every returned program verifies, and the
policy drives a tuner run on the replay runner."""
from __future__ import annotations

import os

import pytest

from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from llm_workload import ARCH, PROBLEMS, run, seeded_lineage
from gemmforge.policy.dataset import read_rows
from gemmforge.policy.llm import LLMPolicy

pytestmark = pytest.mark.skipif(os.environ.get("GEMMFORGE_LLM_TIER") != "1",
                                reason="heavy LLM tier: set GEMMFORGE_LLM_TIER=1")


def test_offline_engine_proposes_schema_valid_verified_programs(engine_sampler, report,
                                                                tmp_path):
    lineage = seeded_lineage()
    policy = LLMPolicy(sampler=engine_sampler, lineage=lineage, seed=0,
                       dataset=tmp_path / "llm.jsonl")
    stats = run(policy)
    report["offline_engine"] = stats
    assert stats["completions"] >= 3 * len(PROBLEMS)
    # structured outputs: what comes back is JSON of the reply schema, every time
    assert stats["schema_valid_fraction"] == 1.0, stats["failure_kinds"]
    for problem in PROBLEMS:
        for text in stats["returned"][str(problem)]:
            assert check(parse(text), problem) is None
    assert sum(len(v) for v in stats["returned"].values()) >= 1, stats
    failed_rows = read_rows(tmp_path / "llm.jsonl")  # failed proposals are rows at once
    assert all(r["program"] is None and r["error"] for r in failed_rows)


def test_llm_policy_enters_a_tuner_run_on_the_replay_runner(engine_sampler, report, tmp_path):
    tuner_mod = pytest.importorskip("gemmforge.search.tune.tuner")
    from gemmforge.search.measure.replay import ReplayRunner
    problem = PROBLEMS[0]
    policy = LLMPolicy(sampler=engine_sampler, seed=1, dataset=tmp_path / "tune.jsonl",
                       max_n=4, rounds=1)
    settings = tuner_mod.TuneSettings(budget=tuner_mod.Budget(trials=12), batch=4,
                                      policy_share=1.0, seed=0, backends=("cuda_mma",))
    tuner = tuner_mod.Tuner(ReplayRunner(archs=(ARCH,)), policy, ":memory:", settings)
    outcome = tuner.tune(problem)
    study = tuner.study(problem)
    measured = [t for t in study.trials if t.user_attrs.get("measured")]
    by_llm = [t for t in measured if t.user_attrs.get("source") == "llm"]
    rows = [r for r in read_rows(tmp_path / "tune.jsonl") if r["program"]]
    report["tuner_replay"] = {
        "measured": outcome.measured, "llm_trials": len(by_llm),
        "best": outcome.best.program if outcome.best else None,
        "best_ratio": outcome.best_ratio, "best_source": outcome.source,
        "dataset_rows_with_reward": len(rows), "policy": policy.stats()}
    assert outcome.measured == 12
    assert by_llm, "no LLM proposal entered the study"
    assert {r["program"] for r in rows} <= {t.user_attrs["program"] for t in by_llm}
    assert all(r["reward"] == pytest.approx(next(
        t.value for t in by_llm if t.user_attrs["program"] == r["program"])) for r in rows)
    assert len(policy.lineage) >= outcome.measured  # it observed every result
