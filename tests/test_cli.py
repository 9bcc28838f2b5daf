"""The gemmforge command: emit, verify, schema; bad input gets one line and exit code 2."""
import json
import re

import pytest

from gemmforge.cli import main
from gemmforge.ir import parse, to_json

GOOD = "cuda_simt sm_80 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_emit_with_heuristic_program(tmp_path, capsys):
    code, out, err = run(capsys, "emit", "--shape", "1000x4096x333", "--arch", "sm_80",
                         "-o", str(tmp_path))
    assert code == 0, err
    program_line, path = out.strip().splitlines()
    assert parse(program_line).arch.value == "sm_80"
    text = open(path).read()
    assert "#ifdef GEMMFORGE_STANDALONE_MAIN" in text and "nvcc -O3" in text


@pytest.mark.parametrize("form", ["text", "json", "file"])
def test_emit_with_given_program(tmp_path, capsys, form):
    value = {"text": GOOD, "json": json.dumps(to_json(parse(GOOD)))}.get(form)
    if form == "file":
        (tmp_path / "p.txt").write_text(GOOD + "\n")
        value = f"@{tmp_path / 'p.txt'}"
    code, out, err = run(capsys, "emit", "--shape", "17x33x65", "--layout", "nt", "--arch",
                         "sm_80", "--program", value, "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert out.splitlines()[0] == GOOD


@pytest.mark.parametrize("argv, message", [
    (["emit", "--shape", "1000x4096", "--arch", "sm_80", "-o", "x"],
     "shape: '1000x4096' is not of the form MxNxK"),
    (["emit", "--shape", "8x8x8", "--arch", "sm_75", "-o", "x"], "--arch: 'sm_75' is not one of"),
    (["emit", "--shape", "8x8x8", "--arch", "sm_90a", "--program", GOOD, "-o", "x"],
     "arch: the program is sm_80 but --arch is sm_90a"),
    (["emit", "--shape", "8x8x8", "--arch", "sm_80", "--program", "{oops", "-o", "x"],
     "program JSON: not valid JSON"),
    (["emit", "--shape", "8x8x8", "--arch", "sm_80", "--program", "@/no/such/file", "-o", "x"],
     "--program: no such file: /no/such/file"),
    (["verify", GOOD.replace("c1x1", "c2x2")], "cluster: thread-block clusters need sm_90a"),
    (["verify", "cuda_simt sm_80"], "expected 13 tokens"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_verify_ok(capsys):
    code, out, _ = run(capsys, "verify", GOOD, "--shape", "17x33x65")
    assert code == 0 and out.startswith("ok: ")


def test_schema_prints_the_checked_in_schema(capsys):
    code, out, _ = run(capsys, "schema")
    assert code == 0 and json.loads(out)["title"] == "gemmforge Program"


@pytest.mark.parametrize("argv, message", [
    (["bench", "--shapes", "64x64x64"], "bench: give at least one --program, --backends or --chosen"),
    (["bench", "--shapes", "64x64", "--backends", "cuda_mma"], "--shapes: '64x64' is not of the form"),
    (["bench", "--shapes", "64x64x64", "--program", "@/no/such"], "--program: no such file"),
    (["bench", "--shapes", "64x64x64", "--backends", "cuda_mma", "--sustained-seconds", "0"],
     "--sustained-seconds: 0.0 must be a number > 0"),
    (["bench", "--shapes", "64x64x64", "--backends", "cuda_mma", "--sustained-seconds", "nan"],
     "--sustained-seconds: nan must be a number > 0"),
    (["bench", "--shapes", "64x64x64", "--backends", "cuda_mma", "--sustained-seconds", "inf"],
     "--sustained-seconds: inf must be a number > 0"),
])
def test_bench_bad_input(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_bench_sustained_seconds_reach_the_settings():
    import argparse
    from gemmforge.cli import bench
    args = argparse.Namespace(protocols="kernel,sustained", rounds=3, sustained_seconds=0.25)
    settings = bench._settings(args)
    assert settings.sustained_s == 0.25 and settings.protocols == ("kernel", "sustained")


def test_bench_candidates_are_legal_for_each_shape():
    from gemmforge.ir import Arch, Problem, check
    from gemmforge.cli.bench import candidates
    odd = Problem(17, 33, 65)
    tma = parse("triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 persistent c1x1 nows tma")
    chosen = candidates(odd, [tma, parse(GOOD)], ["cuda_mma"], Arch.SM80)
    assert tma not in chosen and parse(GOOD) in chosen     # TMA needs aligned rows
    assert any(p.backend == "cuda_mma" for p in chosen)
    assert all(check(p, odd) is None for p in chosen)


def test_tune_llm_policy_needs_a_model(capsys):
    code, _, err = run(capsys, "tune", "--shapes", "64x64x64", "--policy", "llm",
                       "--replay", "synthetic", "--storage", ":memory:")
    assert code == 2 and "--policy llm needs --llm-url" in err


@pytest.mark.parametrize("flag, value, said", [
    ("--protocols", "kernel,warp", "--protocols: "),
    ("--protocols", "cold", "must include 'kernel'"),
    ("--concurrent", "0", "--concurrent: 0 must be >= 1"),
])
def test_tune_rejects_bad_measurement_settings(capsys, flag, value, said):
    code, _, err = run(capsys, "tune", "--shapes", "64x64x64", flag, value,
                       "--replay", "synthetic", "--storage", ":memory:")
    assert code == 2 and said in err


def test_tune_replayed_with_concurrent_shapes(capsys, tmp_path):
    code, out, _ = run(capsys, "tune", "--shapes", "64x64x64,128x256x512,256x128x64",
                       "--budget", "4", "--batch", "2", "--concurrent", "3", "--quiet",
                       "--replay", "synthetic", "--storage", ":memory:",
                       "--report-dir", str(tmp_path), "--report", "t")
    assert code == 0
    assert "12 candidates measured" in out and (tmp_path / "t.csv").exists()


def test_train_policy_then_tune_with_it(capsys, tmp_path):
    """train-policy writes a checkpoint tune --policy learned loads, and tune saves back
    what it learned."""
    ckpt = tmp_path / "policy.pt"
    code, out, _ = run(capsys, "train-policy", "--shapes", "sample:4:0", "--steps", "2",
                       "--backends", "triton", "--replay", "synthetic",
                       "--checkpoint", str(ckpt))
    assert code == 0 and f"wrote {ckpt}" in out and ckpt.exists()
    from gemmforge.policy.learned import LearnedPolicy
    assert LearnedPolicy.load(ckpt).vocab.variants
    before = ckpt.stat().st_mtime_ns
    code, out, _ = run(capsys, "tune", "--shapes", "64x128x256", "--budget", "4", "--quiet",
                       "--policy", "learned", "--checkpoint", str(ckpt), "--backends",
                       "triton", "--replay", "synthetic", "--report", "",
                       "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert code == 0 and "4 candidates measured" in out
    assert ckpt.stat().st_mtime_ns > before


@pytest.mark.parametrize("args, said", [
    (["--steps", "0"], "--steps: 0 must be >= 1"),
    (["--backends", "nope"], "--backends: "),
    (["--arch", "sm_70"], "--arch"),
])
def test_train_policy_rejects_bad_input(capsys, tmp_path, args, said):
    code, _, err = run(capsys, "train-policy", "--shapes", "64x64x64", "--replay", "synthetic",
                       "--checkpoint", str(tmp_path / "p.pt"), *args)
    assert code == 2 and said in err and not (tmp_path / "p.pt").exists()


def test_a_missing_extra_names_the_extra_to_install(capsys, monkeypatch, tmp_path):
    """tune without optuna (the [search] extra): one line naming the extra, exit 2."""
    import sys
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` now fails
    code, _, err = run(capsys, "tune", "--shapes", "64x64x64", "--budget", "2", "--quiet",
                       "--replay", "synthetic", "--storage", f"sqlite:///{tmp_path / 's.db'}",
                       "--report", "")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "gemmforge tune: optuna is not installed: pip install 'gemmforge[search]'")


def test_require_names_the_extra(monkeypatch):
    import sys
    from gemmforge.compiler.extras import require
    assert require("json").dumps(1) == "1"
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'gemmforge\[llm\]'"):
        require("vllm")


def test_every_subcommand_comes_from_the_table(capsys):
    from gemmforge.cli import COMMANDS, build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {"emit", "verify", "schema", "tune", "bench", "train-policy",
                                "train-llm", "campaign", "ship"}
    assert len(COMMANDS) == 7


@pytest.mark.parametrize("program", [
    "cuda_mma sm_80 16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 64x64x64 w1x1 s3 sw128 row/8 pred k2 dp c1x1 nows direct",
    "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/1 pred k1 dp c1x1 nows direct",
])
def test_the_emitted_self_test_runs_the_emitted_shape(tmp_path, capsys, program):
    """Its main() without arguments times the shape it was emitted for (not a fixed one)."""
    arch = program.split()[1]
    code, out, err = run(capsys, "emit", "--shape", "264x384x520", "--arch", arch,
                         "--program", program, "-o", str(tmp_path))
    assert code == 0, err
    text = open(out.splitlines()[1]).read()
    assert "M = 264, N = 384, K = 520;" in text


def test_shapes_values_read_the_same_everywhere(tmp_path):
    """arguments.shapes (tune, bench, ...) and search.measure.shapes (campaign) read one syntax:
    a shape file with '#' comments, grid:CLASSES, sample:N:SEED; bad values are one line."""
    from gemmforge import arguments
    from gemmforge.errors import UsageError
    from gemmforge.search.measure.shapes import parse_shapes
    listed = tmp_path / "shapes.txt"
    listed.write_text("# model layers\n1x4096x4096  # decode\n77x6144x4096\n")
    for spec in (f"@{listed}", "grid:small", "sample:7:3", "64x64x64,128x256x512"):
        assert arguments.shapes(spec, "nt") == parse_shapes(spec, "nt")
    assert [p.m for p in arguments.shapes(f"@{listed}")] == [1, 77]
    for spec, said in (("grid:tiny", "unknown class tiny"), ("sample:0", "sample:N[:SEED]"),
                       (f"@{tmp_path / 'none'}", "no such file"), ("", "no shapes")):
        with pytest.raises(UsageError, match=re.escape(said)):
            arguments.shapes(spec)


def test_bench_twins_toggle_each_named_field_where_legal(capsys):
    from dataclasses import replace
    from gemmforge.cli.bench import with_twins
    from gemmforge.ir import Problem, check
    pdl = parse("cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct pdl")
    plain = parse(GOOD)  # cuda_mma sm_80: no pdl there, so no twin
    problem = Problem(64, 64, 64)
    got = with_twins([pdl, plain], ("pdl",), problem)
    assert got == [pdl, plain, replace(pdl, pdl=False)]
    assert all(check(p, problem) is None for p in got)
    assert with_twins(got, ("pdl",), problem) == got  # a twin already listed is not added again
    code, _, err = run(capsys, "bench", "--shapes", "64x64x64", "--chosen", "--twins", "pdl,raster")
    assert code == 2 and "--twins: raster: give a comma list of" in err
