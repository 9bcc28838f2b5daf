"""ir.grammar (the program text a backend can make legal, field by field), the JSON Schema
narrowed the same way (ir.schema.backend_schema) and policy.constrained (the logits
processor that makes an LLM write only what the grammar offers), on the CPU."""
from __future__ import annotations

import random

import jsonschema
import pytest

from gemmforge.ir import capabilities
from gemmforge.ir.grammar import grammar
from gemmforge.ir.knobs import KNOBS, with_knob
from gemmforge.ir.program import Accum, Arch, IRError, Layout
from gemmforge.ir.schema import backend_schema, to_json
from gemmforge.ir.space import Space, _bases, variant
from gemmforge.ir.text import parse, parse_problem
from gemmforge.ir.verify import check

SHAPES = ("4096x4096x4096", "64x256x64", "1000x4096x333", "8x8192x512 nt", "256x128x512 nn f16")
WALK = 12  # legal programs per (backend, arch, shape), by a random walk through the space
WGMMA = "cuda_wgmma sm_90a 128x128x64 w1x2 s4 sw128 row/4 pred k1 persistent c2x1 coop tma"


def _variants():
    return [(name, arch) for name in capabilities.table.names()
            for arch in capabilities.table.get(name).archs]


def legal_walk(backend: str, arch: Arch, problem, rng: random.Random, n: int = WALK):
    """`n` programs legal for `problem`, from ir.space's probing bases by random one-knob
    changes (each kept only while legal): a sample of the legal part of the space."""
    var = variant(backend, arch)
    at = [p for p in _bases(capabilities.table.get(backend), arch) if check(p, problem) is None]
    out: dict = {}
    for _ in range(n * 40):
        if not at or len(out) >= n:
            break
        knob = rng.choice([k for k in KNOBS if var.searched(k)])
        try:
            nxt = with_knob(rng.choice(at), knob, rng.choice(var.choices(knob)))
        except Exception:  # noqa: BLE001  (an IR value this program can't hold)
            continue
        if check(nxt, problem) is None:
            at.append(nxt)
            out[nxt] = None
    return list(out) + at[:2]


@pytest.fixture(scope="module")
def legal_programs():
    rng = random.Random(0)
    out = []
    for shape in SHAPES:
        problem = parse_problem(shape)
        for backend, arch in _variants():
            out.extend((p, problem) for p in legal_walk(backend, arch, problem, rng))
    return out


def test_the_grammar_accepts_every_sampled_legal_program(legal_programs):
    assert len({p.backend for p, _ in legal_programs}) >= 4
    missed = [(str(p), str(pr)) for p, pr in legal_programs
              if not grammar(p.backend, p.arch, pr.layout, pr.acc).accepts(str(p))]
    assert not missed


def test_the_narrowed_json_schema_accepts_every_sampled_legal_program(legal_programs):
    for p, pr in legal_programs:
        jsonschema.validate(to_json(p), backend_schema(p.backend, p.arch, pr.layout, pr.acc))


def test_the_narrowed_json_schema_refuses_what_the_backend_never_accepts():
    schema = backend_schema("cuda_wgmma", Arch.SM90A)
    good = to_json(parse(WGMMA))
    jsonschema.validate(good, schema)
    for fld, value in (("swizzle", "64B"), ("swap_ab", True), ("epilogue", "smem"),
                       ("backend", "triton")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, fld: value}, schema)
    nt = backend_schema("cuda_wgmma", Arch.SM90A, Layout.NT, Accum.F32)
    jsonschema.validate({**good, "swap_ab": True}, nt)  # swap_ab serves layout nt


@pytest.mark.parametrize("text", [
    # the verify reasons counted in the 45-step run's training completions
    WGMMA.replace("s4", "s12"),                                  # shared memory
    WGMMA.replace("s4", "s1"),                                   # the TMA ring's 2 stages
    WGMMA.replace("coop", "pingpong"),                           # ping-pong owns a tile: w1x1
    WGMMA.replace("w1x2", "w4x1"),                               # bm % (wm x 64)
    WGMMA.replace("w1x2", "w1x4"),                               # nn: a warpgroup's 64 columns
    WGMMA.replace("128x128x64 w1x2", "256x128x64 w1x1"),         # accumulator registers
    WGMMA.replace("128x128x64", "128x128x32"),                   # a 128-byte swizzled row
    # and its text errors
    WGMMA.replace("coop", "cox"), WGMMA.replace("persistent", "persistence"),
    WGMMA.replace("tma", "redirect"), WGMMA.replace("row/4", "pred"),
    WGMMA.replace(" tma", ""), WGMMA + " tma", WGMMA.replace("c2x1", "c3x1"),
])
def test_the_grammar_refuses_the_illegal_programs_the_policy_wrote(text):
    g = grammar("cuda_wgmma", Arch.SM90A)
    assert g.accepts(WGMMA) and not g.accepts(text)
    try:
        program = parse(text)
    except IRError:
        return  # not even program text
    assert check(program, parse_problem("4096x4096x4096")) is not None


def test_a_refused_field_is_refused_where_it_is_written():
    g = grammar("cuda_wgmma", Arch.SM90A)
    state = ("cuda_wgmma", "sm_90a")
    assert g.prefix_ok(state, "128x1") and not g.prefix_ok(state, "128x13")
    state = g.step(state, "128x128x64")
    state = g.step(state, "w1x1")
    assert g.step(state, "s12") is None and g.step(state, "s4") is not None


class CharTokenizer:
    """One token per character of a small alphabet, a newline token and an end token."""

    def __init__(self, alphabet: str):
        self.chars = list(dict.fromkeys(alphabet + " ->.0123456789x\n"))
        self.eos_token_id = len(self.chars)

    def __len__(self):
        return len(self.chars) + 1

    def decode(self, ids, skip_special_tokens=True):
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return "".join(self.chars[i] for i in ids if i != self.eos_token_id)


@pytest.mark.parametrize("seed", range(3))
def test_constrained_decoding_writes_legal_programs_from_noise(seed):
    torch = pytest.importorskip("torch")
    from gemmforge.policy.constrained import TextConstraint
    g = grammar("cuda_wgmma", Arch.SM90A)
    alphabet = "".join(sorted({c for f in g.tokens for t in f for c in t}))
    tok = CharTokenizer(alphabet)
    constraint = TextConstraint(g, tok, "cuda_wgmma sm_90a", top_k=8)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.zeros((2, 3), dtype=torch.long)  # two rows of a 3-token "prompt"
    done = [False, False]
    for _ in range(120):
        scores = constraint(ids, torch.randn((2, len(tok)), generator=gen))
        nxt = torch.multinomial(torch.softmax(scores, -1), 1, generator=gen)
        for row in range(2):
            done[row] = done[row] or nxt[row, 0].item() in constraint.end_ids
        ids = torch.cat([ids, nxt], 1)
        if all(done):
            break
    assert all(done)
    for row in range(2):
        text = "cuda_wgmma sm_90a" + tok.decode(ids[row, 3:]).split("\n")[0]
        program = parse(text.split(" -> ")[0])
        assert check(program, parse_problem("4096x4096x4096")) is None, text


def test_constrain_generate_adds_the_processor_to_every_call():
    pytest.importorskip("transformers")
    from gemmforge.policy.constrained import TextConstraint, constrain_generate

    class Model:
        def generate(self, *args, **kwargs):
            return kwargs

    model = Model()
    tok = CharTokenizer("abc")
    constrain_generate(model, grammar("cuda_wgmma", Arch.SM90A), tok, "cuda_wgmma sm_90a")
    first, second = model.generate(max_new_tokens=3), model.generate(logits_processor=[])
    (a,), (b,) = first["logits_processor"], second["logits_processor"]
    assert isinstance(a, TextConstraint) and isinstance(b, TextConstraint) and a is not b


def test_the_llm_policy_samples_text_replies_under_the_grammar():
    from gemmforge.policy.llm import LLMPolicy
    from gemmforge.policy.prompts import PromptConfig

    class Sampler:
        takes_grammar = True
        calls: list = []

        def sample(self, prompt, schema, n, **kwargs):
            self.calls.append(kwargs.get("grammar"))
            return [prompt.reply_prefix + WGMMA.split("sm_90a")[1]] * n

    sampler = Sampler()
    policy = LLMPolicy(sampler=sampler, config=PromptConfig(backends=("cuda_wgmma",),
                                                            reply="text"))
    assert policy.propose(parse_problem("4096x4096x4096"), Arch.SM90A, n=1) == [parse(WGMMA)]
    (used, *_) = sampler.calls
    assert used is grammar("cuda_wgmma", Arch.SM90A, Layout.NN, Accum.F32)
    Sampler.takes_grammar = False  # a sampler that can't take one samples freely
    policy.propose(parse_problem("2048x4096x4096"), Arch.SM90A, n=1)
    assert sampler.calls[-1] is None
