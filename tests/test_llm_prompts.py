"""The LLM policy on CPU, no model: prompts, reply parsing and verification, the policy
loop with a canned sampler, and the OpenAI-compatible client against a fake server."""
from __future__ import annotations

import json

import jsonschema
import pytest

from gemmforge.ir import Arch, parse_problem, to_json
from gemmforge.policy.base import Policy
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.policy.lineage import Lineage
from gemmforge.policy.llm import LLMPolicy, from_cli, parse_reply, reply_schema
from gemmforge.policy.prompts import FAILED_REWARD, PromptConfig, build_prompt, pick_examples
from gemmforge.policy.samplers import OpenAISampler, SamplerError, VLLMSampler

from fake_llm import DEAD_URL, MODEL, FakeLLM  # tests/fake_llm.py

PROBLEM = parse_problem("1000x4096x333 nn f32")
ARCH = Arch.SM90A


def legal_programs(n: int, problem=PROBLEM, arch=ARCH):
    programs = HeuristicPolicy().propose(problem, arch, n)
    assert len(programs) == n
    return programs


def seeded_lineage(order=None) -> Lineage:
    """Six measured programs (rewards 0.3 down to -0.45) and one failure."""
    programs = legal_programs(6)
    rows = [(p, 0.3 - 0.15 * i) for i, p in enumerate(programs)]
    rows.append((programs[0].replace(stages=2), FAILED_REWARD))
    lineage = Lineage()
    for p, r in (rows if order is None else [rows[i] for i in order]):
        lineage.add(p, source="heuristic", problem=str(PROBLEM), reward=r)
    return lineage


def reply(program, analysis="the 128-wide tile fills more SMs") -> str:
    return json.dumps({"analysis": analysis, "program": to_json(program)})


# -- prompts ---------------------------------------------------------------------------

def test_prompt_states_the_problem_and_the_hardware():
    text = build_prompt(PROBLEM, ARCH).text()
    for fact in ("m=1000", "n=4096", "k=333", "layout nn", "f32 accumulator",
                 f"{PROBLEM.flops:.3e}", "FLOP/byte", "132 SMs", "232448 B", "wgmma",
                 "63-65%"):
        assert fact in text, fact
    a100 = build_prompt(PROBLEM, Arch.SM80).text()
    assert "108 SMs" in a100 and "166912 B" in a100 and "no wgmma" in a100


def test_prompt_lists_backends_with_their_legal_values():
    from gemmforge.backends import registry
    text = build_prompt(PROBLEM, ARCH).user
    for be in registry.all():
        assert f"- {be.name}: {be.instruction}" in text
    assert 'schedule: must be "data_parallel"' in text


def test_prompt_shows_best_and_worst_with_speedups_and_asks_for_analysis():
    lineage = seeded_lineage()
    best, worst = lineage.best(1)[0][0], lineage.worst(1)[0][0]
    prompt = build_prompt(PROBLEM, ARCH, lineage)
    assert f"[best] {best}  ->  1.350x cuBLAS (reward +0.300)" in prompt.user
    assert f"[worst] {worst}  ->  FAILED" in prompt.user
    assert json.dumps(to_json(best)) in prompt.user  # the best one, in the reply's form
    assert '"analysis"' in prompt.user and "why the faster one is faster" in prompt.user
    assert prompt.parent == best
    assert [m["role"] for m in prompt.messages()] == ["system", "user"]


def test_prompt_is_deterministic_whatever_order_the_lineage_saw():
    a = build_prompt(PROBLEM, ARCH, seeded_lineage())
    b = build_prompt(PROBLEM, ARCH, seeded_lineage())
    c = build_prompt(PROBLEM, ARCH, seeded_lineage(order=[6, 3, 1, 5, 0, 2, 4]))
    assert a == b == c


def test_examples_are_best_worst_then_neighbours_without_repeats():
    examples = pick_examples(seeded_lineage(), PROBLEM, PromptConfig(best=1, worst=1,
                                                                       neighbours=2))
    labels = [label for label, _, _ in examples]
    assert labels == ["best", "worst", "neighbour of the best", "neighbour of the best"]
    assert len({p for _, p, _ in examples}) == 4
    assert pick_examples(Lineage(), PROBLEM, PromptConfig()) == []
    assert "None measured yet" in build_prompt(PROBLEM, ARCH, Lineage()).user


def test_prompt_lists_programs_to_avoid():
    avoid = legal_programs(2)
    text = build_prompt(PROBLEM, ARCH, avoid=avoid).user
    assert "do not repeat" in text and all(str(p) in text for p in avoid)


def test_failed_reward_matches_the_search_floor():
    from gemmforge.search.measure.env import WORST_REWARD
    assert FAILED_REWARD == WORST_REWARD


# -- reply schema and parsing ----------------------------------------------------------

def test_reply_schema_accepts_a_legal_reply_and_narrows_each_backend():
    schema = reply_schema(PROBLEM, ARCH)
    jsonschema.Draft202012Validator.check_schema(schema)
    good = json.loads(reply(legal_programs(1)[0]))
    jsonschema.validate(good, schema)
    bad = json.loads(reply(legal_programs(1)[0].replace(arch=Arch.SM80)))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)  # the arch is fixed to the one asked for
    clustered = json.loads(reply(legal_programs(1)[0]))
    clustered["program"]["cluster"] = {"cm": 2, "cn": 1}  # cuda_mma fixes cluster to 1x1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(clustered, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"program": good["program"]}, schema)  # analysis is required


def test_a_valid_reply_becomes_a_verified_program():
    program = legal_programs(1)[0]
    proposal = parse_reply(reply(program), PROBLEM, ARCH)
    assert proposal.ok and proposal.program == program and proposal.reason == ""
    assert proposal.analysis.startswith("the 128-wide")
    bare = parse_reply(json.dumps(to_json(program)), PROBLEM, ARCH)  # no wrapper
    fenced = parse_reply("```json\n" + reply(program) + "\n```", PROBLEM, ARCH)
    assert bare.program == fenced.program == program


@pytest.mark.parametrize("text, reason", [
    ('{"analysis": "x", "program": {"version": 1', "reply: not valid JSON"),
    ("[1, 2]", "reply: expected a JSON object"),
    ('{"analysis": "x"}', "reply: no 'program' object"),
])
def test_unparsable_replies_are_failed_proposals(text, reason):
    proposal = parse_reply(text, PROBLEM, ARCH)
    assert not proposal.ok and proposal.reason.startswith(reason)
    assert proposal.raw_text == text


def test_schema_violations_and_illegal_programs_are_failed_proposals():
    program = legal_programs(1)[0]
    obj = json.loads(reply(program))
    obj["program"]["stages"] = 99
    assert parse_reply(json.dumps(obj), PROBLEM, ARCH).reason.startswith("schema: stages")
    wrong_arch = parse_reply(reply(program.replace(arch=Arch.SM80)), PROBLEM, ARCH)
    assert wrong_arch.reason == "arch: asked for sm_90a, got sm_80"
    too_big = program.replace(tile=program.tile.__class__(256, 256, 64), stages=8)
    illegal = parse_reply(reply(too_big), PROBLEM, ARCH)
    assert not illegal.ok and illegal.reason.startswith("verify: ")


# -- the policy loop, with a canned sampler ---------------------------------------------

class CannedSampler:
    """Returns the next canned batch for each request; records what it was asked."""

    def __init__(self, *batches):
        self.batches, self.calls = list(batches), []

    def sample(self, prompt, schema, n, *, temperature, max_tokens, seed):
        self.calls.append({"prompt": prompt, "schema": schema, "n": n, "seed": seed})
        if not self.batches:
            raise SamplerError("no more canned replies")
        return self.batches.pop(0)[:n]


def test_propose_returns_distinct_new_legal_programs_and_records_failures():
    lineage = seeded_lineage()
    measured = lineage.best(1)[0][0]
    fresh = legal_programs(8)[6:]
    batch = [reply(fresh[0]), "not json", reply(fresh[0]), reply(measured),
             reply(fresh[0].replace(stages=8, tile=fresh[0].tile.__class__(256, 256, 64)))]
    sampler = CannedSampler(batch, [reply(fresh[1])])
    policy = LLMPolicy(sampler=sampler, lineage=lineage, oversample=3, seed=7)
    assert isinstance(policy, Policy)
    out = policy.propose(PROBLEM, ARCH, n=2)
    assert out == [fresh[0], fresh[1]]
    assert sampler.calls[0]["n"] == 6 and sampler.calls[1]["n"] == 3
    assert str(fresh[0]) in sampler.calls[1]["prompt"].user  # round 2 says: don't repeat
    assert sampler.calls[1]["seed"] - sampler.calls[0]["seed"] >= 1 << 16
    reasons = [p.reason.split(":")[0] for p in policy.proposals if not p.ok]
    assert reasons == ["reply", "verify"]
    stats = policy.stats()
    assert (stats["proposals"], stats["legal"], stats["distinct"]) == (6, 4, 3)


def test_a_sampler_failure_is_a_failed_proposal_not_a_crash():
    policy = LLMPolicy(sampler=CannedSampler())
    assert policy.propose(PROBLEM, ARCH, n=0) == [] and policy.proposals == []
    assert policy.propose(PROBLEM, ARCH, n=2) == []
    assert policy.proposals[-1].reason.startswith("sampler: no more canned replies")


def test_observe_links_the_child_to_the_best_shown_and_writes_a_row(tmp_path):
    from gemmforge.policy.dataset import read_rows
    lineage = seeded_lineage()
    best = lineage.best(1)[0][0]
    fresh = legal_programs(7)[6]
    path = tmp_path / "llm.jsonl"
    policy = LLMPolicy(sampler=CannedSampler([reply(fresh), "{oops"]), lineage=lineage,
                       dataset=path, oversample=2)
    assert policy.propose(PROBLEM, ARCH, n=1) == [fresh]
    policy.observe(PROBLEM, fresh, 0.42)
    assert lineage.graph.has_edge(str(best), str(fresh))
    assert lineage.graph.nodes[str(fresh)]["reward"] == 0.42
    failed, observed = read_rows(path)
    assert failed["program"] is None and failed["reward"] == FAILED_REWARD
    assert failed["error"].startswith("reply: not valid JSON")
    assert observed["program"] == str(fresh) and observed["reward"] == 0.42
    assert observed["completion"][0]["content"] == reply(fresh)
    policy.observe(PROBLEM, best, 0.5)  # someone else's program: lineage only
    assert len(read_rows(path)) == 2


def test_from_cli_picks_the_sampler(tmp_path):
    server = from_cli(url="http://127.0.0.1:9/v1", model="smol")
    assert isinstance(server.sampler, OpenAISampler) and server.sampler.model == "smol"
    local = from_cli(model=str(tmp_path))
    assert isinstance(local.sampler, VLLMSampler)  # the engine starts on first use
    with pytest.raises(ValueError, match="--llm-url"):
        from_cli()
    with pytest.raises(ValueError, match="not a directory"):
        from_cli(model=str(tmp_path / "missing"))


# -- the OpenAI-compatible path, against a fake server on 127.0.0.1 ----------------------

@pytest.fixture
def server():
    """start(texts) -> a tests/fake_llm.FakeLLM answering `texts`, closed after the test."""
    servers = []

    def start(texts):
        servers.append(FakeLLM("texts", texts=texts))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


def test_chat_requests_carry_the_json_schema_response_format(server):
    program = legal_programs(7)[6]
    fake = server([reply(program), "garbage"])
    policy = LLMPolicy(url=fake.url, temperature=0.5, max_tokens=300, seed=3)
    assert policy.propose(PROBLEM, ARCH, n=1) == [program]
    path, body = fake.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == MODEL
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == reply_schema(PROBLEM, ARCH)
    assert body["response_format"]["json_schema"]["name"]
    assert "guided_json" not in body and "structured_outputs" not in body
    assert (body["n"], body["temperature"], body["max_tokens"], body["seed"]) == (2, 0.5, 300, 3)
    assert body["messages"][1]["content"].startswith("## Problem")
    assert [p.ok for p in policy.proposals] == [True, False]


def test_completions_endpoint_sends_the_prompt_text(server):
    program = legal_programs(7)[6]
    fake = server([reply(program)])
    sampler = OpenAISampler(fake.url + "/v1", model="smollm2", api="completions")
    policy = LLMPolicy(sampler=sampler, oversample=1)
    assert policy.propose(PROBLEM, ARCH, n=1) == [program]
    path, body = fake.requests[0]
    assert path == "/v1/completions" and body["prompt"].endswith("Reply (JSON):\n")
    assert body["response_format"]["json_schema"]["schema"] == reply_schema(PROBLEM, ARCH)


def test_an_http_error_is_a_failed_proposal():
    with FakeLLM("http500") as fake:
        policy = LLMPolicy(url=fake.url, model="smollm2")
        assert policy.propose(PROBLEM, ARCH, n=1) == []
    assert policy.proposals[-1].reason.startswith("sampler: ") and "HTTP 500" in \
        policy.proposals[-1].reason
    unreachable = LLMPolicy(url=DEAD_URL, model="x")
    assert unreachable.propose(PROBLEM, ARCH) == []
    assert unreachable.proposals[-1].reason.startswith("sampler: ")


# -- the compact prompt and one-line text replies ----------------------------------------

TEXT = PromptConfig(backends=("cuda_wgmma",), reply="text")


def wgmma_lineage() -> Lineage:
    """Three legal cuda_wgmma programs for PROBLEM, measured at 1.02x, 0.95x and 0.90x."""
    from gemmforge.ir import parse
    base = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
    lineage = Lineage()
    for text, speed in ((base, 1.02), (base.replace("s4", "s3"), 0.95),
                        (base.replace("s4", "s2"), 0.90)):
        import math
        lineage.add(parse(text), source="measured", problem=str(PROBLEM),
                    reward=math.log(speed))
    return lineage


def test_compact_prompt_lists_rules_and_measured_programs_fastest_first():
    prompt = build_prompt(PROBLEM, ARCH, wgmma_lineage(), TEXT)
    lines = prompt.user.splitlines()
    assert "m=1000 n=4096 k=333" in lines[0]
    assert any(line.startswith("cuda_wgmma rules: bm a multiple of 64*wm") for line in lines)
    speeds = [line.rsplit(" -> ", 1)[1] for line in lines if " -> " in line]
    assert speeds == ["1.020x", "0.950x", "0.900x"]
    assert prompt.reply_prefix == "cuda_wgmma sm_90a"
    assert prompt.chat()[-1] == {"role": "assistant", "content": "cuda_wgmma sm_90a"}
    assert prompt.messages() == prompt.chat()[:2]
    assert prompt.text().endswith("Reply:\ncuda_wgmma sm_90a")
    assert len(prompt.user) < len(build_prompt(PROBLEM, ARCH, wgmma_lineage()).user) / 2
    assert build_prompt(PROBLEM, ARCH, wgmma_lineage(), TEXT) == prompt  # deterministic


def test_compact_prompt_has_no_reply_prefix_with_several_backends():
    prompt = build_prompt(PROBLEM, ARCH, None, PromptConfig(reply="text"))
    assert prompt.reply_prefix == "" and prompt.chat() == prompt.messages()
    assert prompt.user.count(" rules: ") > 1
    with pytest.raises(ValueError, match="reply"):
        PromptConfig(reply="yaml")


def test_a_text_reply_becomes_a_verified_program():
    program = legal_programs(1)[0]
    assert parse_reply(str(program), PROBLEM, ARCH).program == program
    annotated = parse_reply(f"\n`{program}` -> 1.2x\nmore text", PROBLEM, ARCH)
    assert annotated.program == program
    garbage = parse_reply(f"{program} and then some", PROBLEM, ARCH)
    assert not garbage.ok and garbage.reason.startswith("text: ")
    too_deep = parse_reply(str(program).replace(f" s{program.stages} ", " s99 "), PROBLEM, ARCH)
    assert too_deep.reason.startswith("text: stages: 99 is outside")
    assert parse_reply("{}", PROBLEM, ARCH, "text").reason.startswith("text: ")
    assert parse_reply("nope", PROBLEM, ARCH, "json").reason.startswith("reply: not valid")


def test_text_replies_are_sampled_unconstrained_with_the_prefix(server):
    from gemmforge.ir import parse
    program = parse("cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 padop k1 persistent "
                    "c1x1 coop tma")
    fake = server([str(program)[len("cuda_wgmma sm_90a"):], " nonsense"])
    policy = LLMPolicy(url=fake.url, config=TEXT, lineage=wgmma_lineage(), seed=1)
    assert policy.propose(PROBLEM, ARCH, n=1) == [program]
    path, body = fake.requests[0]
    assert "response_format" not in body and body["stop"] == ["\n"]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["messages"][-1] == {"role": "assistant", "content": "cuda_wgmma sm_90a"}
    assert body["max_tokens"] == 64
    assert [p.reason.split(":")[0] for p in policy.proposals] == ["", "text"]
    assert from_cli(url=fake.url, reply="text").config.reply == "text"


def test_line_stop_ids_are_the_end_tokens_and_every_newline_token():
    from gemmforge.policy.samplers import line_stop_ids

    class Tokenizer:
        eos_token_id = 0
        vocab = ["<eos>", "a", "\n", "b\n", "c", ".\n\n"]

        def __len__(self):
            return len(self.vocab)

        def decode(self, ids, skip_special_tokens=False):
            return "".join(self.vocab[i] for i in ids)

    class Config:
        eos_token_id = [4]

    assert line_stop_ids(Tokenizer(), Config()) == [0, 2, 3, 4, 5]
    assert line_stop_ids(Tokenizer()) == [0, 2, 3, 5]


def test_tune_llm_examples_replay_starts_the_prompt_with_the_training_examples(server):
    """`tune --policy llm --llm-examples replay`: the first prompt at a shape already lists
    the examples a train-llm prompt shows there (search.learn.llm_tasks.seed_examples: the pool's
    programs with their replayed ratios); without the flag it lists none."""
    from gemmforge.cli import main
    from gemmforge.search.learn.llm_tasks import EXAMPLES

    def first_prompt(*extra):
        fake = server(["64x64x64 w1x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct"])
        code = main(["tune", "--shapes", "64x256x64", "--replay", "synthetic", "--storage",
                     ":memory:", "--quiet", "--report", "", "--budget", "2", "--batch", "2",
                     "--backends", "cuda_wgmma", "--policy", "llm", "--llm-url", fake.url,
                     "--llm-reply", "text", *extra])
        assert code == 0
        return "\n".join(m["content"] for m in fake.requests[0][1]["messages"]
                         if m["role"] == "user")
    listed = [line for line in first_prompt("--llm-examples", "replay").splitlines()
              if line.startswith("cuda_wgmma sm_90a ") and " -> " in line]
    assert len(listed) == EXAMPLES
    assert not [line for line in first_prompt().splitlines() if " -> " in line]


def test_llm_examples_needs_the_llm_policy(capsys):
    from gemmforge.cli import main
    code = main(["tune", "--shapes", "64x64x64", "--replay", "synthetic", "--storage",
                 ":memory:", "--llm-examples", "replay"])
    assert code == 2 and "--llm-examples: replay needs --policy llm" in capsys.readouterr().err
