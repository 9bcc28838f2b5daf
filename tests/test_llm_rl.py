"""The LLM RL plumbing on the CPU: tasks, the replayed reward function, the step log, adapters.

None of it needs trl, peft or vllm; the GRPO run itself is exercised where they are
installed (test_train_llm_smoke, skipped otherwise)."""
from __future__ import annotations

import csv
import importlib.util
import json
import math

import pytest

from gemmforge.ir import Arch, parse, parse_problem, to_json
from gemmforge.policy.llm import LLMPolicy, from_cli
from gemmforge.policy.prompts import FAILED_REWARD
from gemmforge.policy.samplers import (
    OpenAISampler, TransformersSampler, VLLMSampler, adapter_id, adapter_name, adapter_rank)
from gemmforge.search.learn.llm_tasks import (
    HELD_OUT, grid_problems, held_out_free, make_replay_reward_fn, make_tasks, seeded_lineage,
    split_shapes)
from gemmforge.search.learn.llm_train import StepLog
from gemmforge.search.learn.replay_reward import Measured, ReplayReward, is_estimated

WGMMA = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
PROBLEM = parse_problem("4096x4096x4096")


def _model():
    a, b = str(parse(WGMMA)), str(parse(WGMMA.replace("s4", "s3")))
    return ReplayReward(rows=[Measured(PROBLEM, a, 1.05, 100.0, 105.0, 3),
                              Measured(PROBLEM, b, 0.90, 110.0, 99.0, 1)])


def _reply(text):
    return json.dumps({"analysis": "x", "program": to_json(parse(text))})


def test_held_out_shapes_are_grid_shapes_apart_from_training(split):
    assert len(split.held_out) == HELD_OUT and len(set(split.held_out)) == HELD_OUT
    assert set(split.held_out) <= grid_problems()
    assert not set(split.held_out) & set(split.train)
    assert len(split.train) > 100


def test_training_shapes_are_one_problem_class():
    model = ReplayReward(rows=[Measured(PROBLEM, str(parse(WGMMA)), 1.0, 10.0, 10.0, 1),
                               Measured(parse_problem("4096x4096x4096 nt f32"),
                                        str(parse(WGMMA)), 1.0, 10.0, 10.0, 1)])
    assert split_shapes(model).train == (PROBLEM,)  # nt readings never prompt training


def test_no_held_out_reading_reaches_the_training_reward(full, split):
    model = held_out_free(full, split)
    reward_fn = make_replay_reward_fn(model)
    for problem in split.held_out:
        assert full.at(problem) and not model.at(problem)  # measured, and left out
    for problem in split.held_out[::5]:
        measured = sorted(full.at(problem), key=lambda r: -r.speedup)[:2]
        for row in measured:
            result = model.result(row.program, problem)
            assert is_estimated(result)
            _, near = model.estimate(parse(row.program), problem)
            assert not {r.problem for r in near} & set(split.held_out)
            reply = row.program.split(" ", 2)[2]  # what follows the reply prefix
            got = reward_fn([reply], [str(problem)], ["sm_90a"], shown=["[]"],
                            reply_prefix=[" ".join(row.program.split()[:2]) + " "])
            assert got == pytest.approx([model.score([row.program], problem)[0]])


def test_tasks_never_use_held_out_measurements(full, split):
    model = held_out_free(full, split)
    assert not set(model.problems()) & set(split.held_out)
    tasks = make_tasks(split.held_out[:2], model, seed=3)
    assert [t["problem"] for t in tasks] == [str(p) for p in split.held_out[:2]]
    for task in tasks:
        shown = json.loads(task["shown"])
        assert len(shown) == 4 and all(s in task["prompt"][1]["content"] for s in shown)
        assert task["arch"] == "sm_90a" and task["prompt"][0]["role"] == "system"
    assert make_tasks(split.held_out[:2], model, seed=3) == tasks  # deterministic


def test_seeded_lineage_holds_legal_programs_with_their_rewards(full, split):
    import random
    model = held_out_free(full, split)
    problem = max(split.train, key=lambda p: p.flops)
    lineage = seeded_lineage(problem, model, random.Random(0), examples=3)
    rows = lineage.measured(str(problem))
    assert len(rows) == 3
    for program, reward in rows:
        assert reward == pytest.approx(model.score([program], problem)[0])


def test_reward_fn_replays_legal_replies_and_floors_the_rest():
    fn = make_replay_reward_fn(_model())
    illegal = WGMMA.replace("128x128x64", "256x256x128").replace("s4", "s8")
    completions = [[{"role": "assistant", "content": _reply(WGMMA)}], "not json",
                   _reply(illegal), _reply(WGMMA.replace("s4", "s3"))]
    problems, archs = [str(PROBLEM)] * 4, ["sm_90a"] * 4
    rewards = fn(completions, problems, archs)
    assert rewards[0] == pytest.approx(math.log(1.05))
    assert rewards[1] == rewards[2] == FAILED_REWARD
    assert rewards[3] == pytest.approx(math.log(0.90))
    shown = [json.dumps([str(parse(WGMMA))])] * 4  # a copy of a listed program earns nothing
    assert fn(completions, problems, archs, shown=shown)[0] == FAILED_REWARD
    assert fn(completions, problems, archs, shown=shown)[3] == pytest.approx(math.log(0.90))


def test_reward_fn_reads_the_reply_prefix_and_marks_repeats_down():
    from gemmforge.search.learn.llm_tasks import REPEAT_REWARD
    fn = make_replay_reward_fn(_model())
    prefix = "cuda_wgmma sm_90a"
    rest = WGMMA[len(prefix):]
    other = WGMMA.replace("s4", "s3")[len(prefix):]
    completions = [[{"role": "assistant", "content": rest}], rest, other, " garbage"]
    rewards = fn(completions, [str(PROBLEM)] * 4, ["sm_90a"] * 4, reply_prefix=[prefix] * 4,
                 shown=["[]"] * 4)
    assert rewards[0] == pytest.approx(math.log(1.05))
    assert rewards[1] == REPEAT_REWARD and FAILED_REWARD < REPEAT_REWARD < math.log(0.9)
    assert rewards[2] == pytest.approx(math.log(0.90)) and rewards[3] == FAILED_REWARD
    other_prompt = fn(completions[:2], [str(PROBLEM)] * 2, ["sm_90a"] * 2,
                      reply_prefix=[prefix] * 2, shown=["[]", '["x"]'])
    assert other_prompt[1] == pytest.approx(math.log(1.05))  # another prompt's group


def test_training_tasks_are_compact_prompts_that_start_the_reply():
    model = _model()
    tasks = make_tasks([PROBLEM], model, seed=0)
    assert tasks[0]["reply_prefix"] == "cuda_wgmma sm_90a"
    assert tasks[0]["prompt"][-1] == {"role": "assistant", "content": "cuda_wgmma sm_90a"}
    assert "Reply with one new program line" in tasks[0]["prompt"][1]["content"]


def test_step_log_writes_one_row_per_step(tmp_path):
    log = StepLog(tmp_path / "steps.csv")
    log.add([0.1, FAILED_REWARD, 0.1, -0.3], ["a", None, "a", "b"])
    log.write(1)
    log.add([FAILED_REWARD] * 2, [None, None])
    log.write(2)
    rows = list(csv.DictReader((tmp_path / "steps.csv").open()))
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["legal_fraction"]) == 0.75
    assert float(rows[0]["distinct_fraction"]) == 0.5
    assert float(rows[0]["reward_mean"]) == pytest.approx((0.2 - 5.3) / 4)
    assert float(rows[1]["legal_fraction"]) == 0.0


def _adapter(tmp_path, rank=8, weights=b"w1"):
    folder = tmp_path / "my-adapter"
    folder.mkdir(exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


def test_adapter_identity_follows_its_weights(tmp_path):
    folder = _adapter(tmp_path)
    first = adapter_id(folder)
    assert first.startswith("my-adapter@") and adapter_name(folder) == "my-adapter"
    assert adapter_rank(folder) == 8
    _adapter(tmp_path, weights=b"w2")
    assert adapter_id(folder) != first
    with pytest.raises(ValueError, match="adapter_config.json"):
        TransformersSampler(tmp_path, adapter=tmp_path)


def test_samplers_carry_the_adapter(tmp_path):
    folder = _adapter(tmp_path, rank=16)
    model = tmp_path / "base"
    model.mkdir()
    offline = from_cli(model=str(model), adapter=str(folder))
    assert isinstance(offline.sampler, VLLMSampler)
    assert offline.sampler.engine_kwargs["enable_lora"] is True
    assert offline.sampler.engine_kwargs["max_lora_rank"] == 16
    served = from_cli(url="http://127.0.0.1:9/v1", adapter=str(folder))
    assert isinstance(served.sampler, OpenAISampler) and served.sampler.model == "my-adapter"
    local = from_cli(model=str(model), adapter=str(folder), engine="transformers")
    assert isinstance(local.sampler, TransformersSampler) and local.sampler.adapter == folder


class _Canned:
    def __init__(self, texts):
        self.texts = texts

    def sample(self, prompt, schema, n, *, temperature, max_tokens, seed):
        return self.texts[:n]


def test_lineage_and_dataset_record_which_adapter_proposed(tmp_path):
    from gemmforge.policy.dataset import read_rows
    folder = _adapter(tmp_path)
    program = parse(WGMMA)
    policy = LLMPolicy(sampler=_Canned([_reply(WGMMA), "{bad"]), adapter=folder,
                       dataset=tmp_path / "rows.jsonl", oversample=2)
    assert policy.propose(PROBLEM, Arch.SM90A, n=1) == [program]
    policy.observe(PROBLEM, program, 0.05)
    source = policy.lineage.graph.nodes[str(program)]["source"]
    assert source == f"llm:{adapter_id(folder)}"
    rows = read_rows(tmp_path / "rows.jsonl")
    assert [r["adapter"] for r in rows] == [adapter_id(folder)] * 2
    plain = LLMPolicy(sampler=_Canned([_reply(WGMMA)]))
    assert plain.adapter is None and plain.source == "llm"


def test_train_llm_is_a_command():
    from gemmforge.cli import build_parser
    args = build_parser().parse_args(["train-llm", "--model", "m", "--output", "o"])
    assert args.steps >= 1 and args.generations is None  # TrainSettings' default
    from gemmforge.search.learn.llm_train import TrainSettings
    assert TrainSettings().generations == 8  # the evaluation's samples per shape
    tune = build_parser().parse_args(["tune", "--shapes", "64x64x64", "--policy", "llm",
                                      "--llm-model", "m", "--llm-adapter", "a"])
    assert tune.llm_adapter == "a" and tune.llm_engine == "vllm" and tune.llm_reply == "json"
    text = build_parser().parse_args(["tune", "--shapes", "64x64x64", "--policy", "llm",
                                      "--llm-model", "m", "--llm-reply", "text"])
    assert text.llm_reply == "text"
    assert args.learning_rate is None  # left to TrainSettings' default


@pytest.mark.skipif(importlib.util.find_spec("trl") is None
                    or importlib.util.find_spec("peft") is None,
                    reason="trl and peft not installed (the llm-train extra)")
def test_grpo_and_lora_configs_build():
    from gemmforge.search.learn.llm_train import TrainSettings, grpo_config, lora_config
    settings = TrainSettings(steps=3, generations=2)
    config = grpo_config("/tmp/x", settings)
    assert config.num_generations == 2 and config.max_steps == 3 and config.beta == 0.0
    assert lora_config(settings).r == settings.lora_rank


def test_a_prompt_config_can_offer_fewer_backends():
    from gemmforge.policy.llm import reply_schema
    from gemmforge.policy.prompts import PromptConfig, build_prompt
    every = build_prompt(PROBLEM, Arch.SM90A).user
    one = build_prompt(PROBLEM, Arch.SM90A, config=PromptConfig(backends=("cuda_wgmma",))).user
    assert "- triton:" in every and "- triton:" not in one and "- cuda_wgmma:" in one
    assert len(one) < len(every)
    schema = reply_schema(PROBLEM, Arch.SM90A, ("cuda_wgmma",))
    assert schema["properties"]["program"]["properties"]["backend"] == {"const": "cuda_wgmma"}
    policy = from_cli(url="http://127.0.0.1:9/v1", model="m", backends=["cuda_wgmma"])
    assert policy.config.backends == ("cuda_wgmma",)


def _bench():
    from gemmforge.search.learn import llm_eval
    return llm_eval


def test_evaluation_rows_count_legal_distinct_and_the_best_replayed_ratio(tmp_path):
    bench = _bench()
    model = _model()
    a, b = parse(WGMMA), parse(WGMMA.replace("s4", "s3"))
    row = bench.shape_row("trained", PROBLEM, [a, None, a, b], model)
    assert (row["legal"], row["distinct"]) == (3, 2)
    assert row["best_ratio"] == pytest.approx(1.05) and row["tuned_ratio"] == pytest.approx(1.05)
    assert row["best_estimated"] is False
    none = bench.shape_row("base", PROBLEM, [None] * 4, model)
    assert none["best_ratio"] == pytest.approx(math.exp(-5))
    stage = bench.stage_row("trained", [row, none], 4, 10.0)
    assert stage["legal_fraction"] == 3 / 8 and stage["distinct_fraction"] == 2 / 8
    assert stage["best_of_8_ratio"] == pytest.approx(math.sqrt(1.05 * math.exp(-5)))
    assert stage["within_5pct_of_tuned"] == 0.5
    listed = bench.shape_row("trained", PROBLEM, [a, b], model, listed=[str(a)])
    assert listed["best_ratio"] == pytest.approx(1.05)  # the copy of a listed example
    assert listed["best_unlisted_ratio"] == pytest.approx(0.90)
    assert bench.stage_row("trained", [listed], 2, 1.0)["within_5pct_unlisted"] == 0.0
    path = tmp_path / "llm_rl.csv"
    bench.write_csv(path, bench.STAGE_FIELDS, [stage])
    again = dict(stage, stage="random")
    rows = bench.merged(path, [again], {"random"})
    assert [r["stage"] for r in rows] == ["trained", "random"]
    assert row["programs"] == [str(a), str(b)]
    bench.write_csv(tmp_path / "shapes.csv", bench.SHAPE_FIELDS, [row])  # programs left out
    proposals = tmp_path / "proposals.txt"
    bench.write_proposals(proposals, [row, none], "run@abc", "trained_grammar")
    lines = proposals.read_text().splitlines()
    assert "trained_grammar" in lines[0]
    assert lines[1:] == [f"# shape {PROBLEM}", str(a), str(b), f"# shape {PROBLEM}"]
    assert "run@abc" in lines[0]
    assert bench.moving_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert bench.task_backend([{"reply_prefix": "cuda_wgmma sm_90a"}] * 2) == "cuda_wgmma"
    reasons = ["verify: stages: 12 stages of 128x128x64 need", "text: epilogue: 'x' is not",
               "verify: stages: 9 stages"]
    assert bench.shape_row("trained", PROBLEM, [a], model, reasons)["illegal_reasons"] == \
        "verify: stages x2; text: epilogue x1"


def test_evaluation_in_two_rounds_tells_the_second_the_first_rounds_programs():
    from types import SimpleNamespace
    from gemmforge.search.learn.llm_tasks import make_tasks
    bench = _bench()
    model = _model()
    (task,) = bench.with_lineages(make_tasks([PROBLEM], model, seed=5), [PROBLEM], model, 5)
    prompts = []

    class Sampler:
        def sample(self, prompt, schema, n, **kwargs):
            prompts.append(prompt.user)
            return [prompt.reply_prefix + WGMMA.split("sm_90a")[1].replace("s4", "s5")] * n

    args = SimpleNamespace(samples=4, max_tokens=64)
    proposals = bench.two_rounds(Sampler(), task, PROBLEM, args)
    assert len(proposals) == 4 and all(p.ok for p in proposals)
    assert "Already proposed" not in prompts[0] and "Already proposed" in prompts[1]
    assert str(proposals[0].program) in prompts[1]
