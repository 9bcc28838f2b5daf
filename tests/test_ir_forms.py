"""Text and JSON forms round-trip exactly; the JSON Schema matches what the IR accepts."""
import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemmforge.backends import registry
from gemmforge.ir import IRError, from_json, parse, parse_problem, program_schema, to_json, to_text
from gemmforge.ir.program import Problem, Program
from gemmforge.ir.schema import checked_in_schema
from gemmforge.ir.verify import check
from strategies import programs

EXAMPLE = "cuda_mma sm_80 128x128x32 w2x2 s3 sw128 row/8 pred k4a dp c1x1 nows direct"


@given(programs())
def test_text_round_trip(p):
    text = to_text(p)
    assert parse(text) == p
    assert to_text(parse(text)) == text
    assert len(text.split()) == 13 + (p.l2_hint.value != "none") + p.swap_ab + p.pdl + p.bias


@given(programs())
def test_json_round_trip_and_schema(p):
    obj = to_json(p)
    assert from_json(obj) == p
    assert from_json(json.dumps(obj)) == p
    jsonschema.validate(obj, program_schema(None))
    if p.backend in registry.names():
        jsonschema.validate(obj, checked_in_schema())


@settings(suppress_health_check=[HealthCheck.filter_too_much], max_examples=60)
@given(programs(tuple(registry.names())))
def test_legal_programs_round_trip_with_same_verdict(p):
    verdict = check(p)
    assert check(parse(to_text(p))) == verdict
    assert check(from_json(to_json(p))) == verdict


def test_checked_in_schema_is_current():
    assert checked_in_schema() == program_schema(registry.names()), \
        "run: gemmforge schema --write"


def test_key_and_name_follow_content():
    p = parse(EXAMPLE)
    assert p.key == parse(EXAMPLE).key
    assert p.replace(stages=4).key != p.key
    assert p.name.startswith("gf_cuda_mma_sm80_128x128x32_w2x2_s3_")
    assert p.name.endswith(p.key[:8])


@pytest.mark.parametrize("text, message", [
    ("cuda_mma sm_80 128x128x32", "expected 13 tokens"),
    (EXAMPLE.replace("128x128x32", "128x100x32"),
     "tile.bn: 100 is not a power of two, nor a multiple of 8 up to 256"),
    (EXAMPLE.replace("128x128x32", "264x128x32"), "tile.bm: 264 is not a power of two"),
    (EXAMPLE.replace("128x128x32", "128x128x192"), "tile.bk: 192 is not a power of two"),
    (EXAMPLE.replace("w2x2", "w2-2"), "warps: 'w2-2' is not of the form wWMxWN"),
    (EXAMPLE.replace("sm_80", "sm_70"), "arch: 'sm_70' is not one of sm_80, sm_90a"),
    (EXAMPLE.replace("s3", "s17"), "stages: 17 is outside 1..16"),
    (EXAMPLE.replace("sw128", "sw256"), "swizzle: 'sw256' is not one of"),
    (EXAMPLE.replace("k4a", "k1a"), "split_k.reduction: must be 'workspace'"),
    (EXAMPLE.replace("k4a", "k17"), "split_k.slices: 17 is outside 1..16"),
    (EXAMPLE.replace("row/8", "diag/8"), "raster: 'diag/8' is not of the form"),
    (EXAMPLE.replace("cuda_mma", "CUDA!"), "backend: 'CUDA!' is not a backend name"),
    (EXAMPLE + " l2last", "'l2last' is not an optional token"),
    (EXAMPLE.replace("k4a", "k4r"), "split_k: 'k4r' is not of the form kN, kNa, kNi or kNc"),
    (EXAMPLE + " l2first x", "'x' is not an optional token"),
    (EXAMPLE + " swap l2first", "'l2first' is not an optional token, or is out of place"),
    (EXAMPLE + " swap swap", "'swap' is not an optional token, or is out of place"),
    (EXAMPLE + " l2first swap pdl bias x", "expected 13 tokens and the optional ones set"),
    (EXAMPLE + " bias pdl", "'pdl' is not an optional token, or is out of place"),
    (EXAMPLE + " pdl swap", "'swap' is not an optional token, or is out of place"),
])
def test_text_errors_name_the_field(text, message):
    with pytest.raises(IRError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


@pytest.mark.parametrize("obj, message", [
    ("{not json", "not valid JSON"),
    ({"version": 1}, "'backend' is a required property"),
    ({**to_json(parse(EXAMPLE)), "version": 2}, "version: 1 was expected"),
    ({**to_json(parse(EXAMPLE)), "stages": 0}, "stages: 0 is less than the minimum of 1"),
    ({**to_json(parse(EXAMPLE)), "tile": {"bm": 128, "bn": 128}}, "'bk' is a required property"),
    ({**to_json(parse(EXAMPLE)), "extra": 1}, "Additional properties are not allowed"),
    ({**to_json(parse(EXAMPLE)), "swap_ab": "yes"}, "swap_ab: 'yes' is not of type 'boolean'"),
])
def test_json_errors_name_the_field(obj, message):
    with pytest.raises(IRError, match=message):
        from_json(obj)


def test_l2_hint_is_a_fourteenth_token_only_when_set():
    """The field came after the others: texts and JSON written before it still parse, to
    the default; set, it is the one extra token (and a JSON property)."""
    plain = parse(EXAMPLE)
    assert plain.l2_hint.value == "none" and to_text(plain) == EXAMPLE
    hinted = parse(EXAMPLE + " l2first")
    assert hinted.l2_hint.value == "stream_first" and to_text(hinted) == EXAMPLE + " l2first"
    assert hinted != plain and hinted.key != plain.key
    old = to_json(plain)
    del old["l2_hint"]
    assert from_json(old) == plain
    assert from_json(to_json(hinted)) == hinted
    with pytest.raises(IRError, match="l2_hint"):
        from_json({**old, "l2_hint": "evict_last"})


def test_small_problem_fields_appear_only_when_set():
    """swap_ab (token `swap`, after l2first), split-K in the kernel (`kSi`), tiles in steps
    of 8 and up to 16 stages: earlier texts and JSON keep their meaning, the new values
    round-trip in both forms."""
    plain = parse(EXAMPLE)
    assert not plain.swap_ab and plain.mma_mn == (128, 128)
    old = to_json(plain)
    del old["swap_ab"], old["l2_hint"]
    assert from_json(old) == plain
    text = EXAMPLE.replace("128x128x32", "40x128x32").replace("s3", "s16").replace(
        "k4a", "k4i") + " l2first swap"
    small = parse(text)
    assert small.swap_ab and small.split_k.reduction.value == "inkernel"
    assert small.tile.extras == (40,) and small.stages == 16 and small.mma_mn == (128, 40)
    assert to_text(small) == text and from_json(to_json(small)) == small
    assert to_json(small)["swap_ab"] is True
    assert to_text(small.replace(l2_hint=plain.l2_hint)).endswith("direct swap")


def test_pdl_is_the_last_optional_token_and_json_key():
    plain = parse(EXAMPLE)
    assert plain.pdl is False and "pdl" not in to_text(plain)
    old = to_json(plain)
    del old["pdl"]
    assert from_json(old) == plain
    launched = parse(EXAMPLE + " l2first swap pdl")
    assert launched.pdl and launched.swap_ab and to_text(launched).endswith("swap pdl")
    assert to_json(launched)["pdl"] is True and from_json(to_json(launched)) == launched
    with pytest.raises(IRError, match="pdl: expected true or false"):
        plain.replace(pdl="yes")


def test_bias_is_the_last_optional_token_and_json_key():
    plain = parse(EXAMPLE)
    assert plain.bias is False and "bias" not in to_text(plain)
    old = to_json(plain)
    del old["bias"]
    assert from_json(old) == plain  # JSON written before the field: no bias
    fused = parse(EXAMPLE + " swap pdl bias")
    assert fused.bias and fused.pdl and to_text(fused).endswith("swap pdl bias")
    assert fused == plain.replace(swap_ab=True, pdl=True, bias=True)
    assert to_json(fused)["bias"] is True and from_json(to_json(fused)) == fused
    assert fused.key != fused.replace(bias=False).key  # a bias twin is another kernel
    with pytest.raises(IRError, match="bias: expected true or false"):
        plain.replace(bias=1)


@pytest.mark.parametrize("text, expected", [
    ("1000x4096x333", Problem(1000, 4096, 333)),
    ("17x33x65 nt f16", Problem(17, 33, 65, "nt", "f16")),
])
def test_parse_problem(text, expected):
    assert parse_problem(text) == expected


@pytest.mark.parametrize("text, message", [
    ("1000x4096", "shape: '1000x4096' is not of the form MxNxK"),
    ("0x4x4", "m: 0 is outside"),
    ("4x4x4 tn", "layout: 'tn' is not one of nn, nt"),
    ("4x4x4 nn bf16", "acc: 'bf16' is not one of f32, f16"),
])
def test_problem_errors(text, message):
    with pytest.raises(IRError, match=message):
        parse_problem(text)


def test_program_is_frozen_and_validates_replacements():
    p = parse(EXAMPLE)
    with pytest.raises(AttributeError):
        p.stages = 4
    with pytest.raises(IRError, match="stages"):
        p.replace(stages=0)
    with pytest.raises(IRError, match="tile: expected a Tile"):
        Program("cuda_mma", tile=(128, 128, 32))


@given(st.text(max_size=80))
def test_parse_never_raises_anything_but_irerror(text):
    try:
        parse(text)
    except IRError:
        pass
