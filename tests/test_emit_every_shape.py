"""`gemmforge emit --arch sm_90a` serves every shape of the shipped file, of every GPU class
and layout: where the shipped winner's backend can't write a standalone file (Triton) the
best program of a backend that can serves, and the provenance line says so. Emitted names
carry the layout and accumulator; a different file of the same name is never replaced
silently. Lowering only here; tests/test_emit_builds.py (the nvcc tier) builds every distinct
file."""
import contextlib
import io
import json
from pathlib import Path

import pytest

from gemmforge.backends import registry
from gemmforge.cli import main
from gemmforge.emit import choose_program, emit, file_name, unemittable
from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.verify import verify
from gemmforge.dispatch import tuned as database
from gemmforge.dispatch.shipped import DEFAULT_PATH, text

ROWS = json.loads(text(DEFAULT_PATH))["rows"]
GROUPS = sorted({(r["device_class"], r["layout"], r["acc"]) for r in ROWS})


@pytest.fixture(autouse=True)
def no_tuned_database(monkeypatch):
    """The shipped file alone: a tuned database of this machine must not decide."""
    monkeypatch.setattr(database, "tuned_candidates", lambda *a, **k: [])


def _problem(row) -> Problem:
    return Problem(row["m"], row["n"], row["k"], row["layout"], row["acc"])


@pytest.mark.parametrize("group", GROUPS, ids=["-".join(g) for g in GROUPS])
def test_every_shipped_shape_emits(group):
    """Every row's shape resolves to a legal program of an emitting backend; each distinct
    (program, layout, acc) is lowered to its standalone file once (the self-test shape is
    the only difference between shapes that share one)."""
    rows = [r for r in ROWS if (r["device_class"], r["layout"], r["acc"]) == group]
    assert len(rows) >= 100
    lowered, swapped = {}, 0
    for row in rows:
        problem = _problem(row)
        program, line = choose_program(problem, Arch.SM90A, None, row["device_class"])
        assert program.backend not in unemittable(), (problem, line)
        verify(program, problem)
        if row["program"].split()[0] in unemittable():
            swapped += 1
            assert "can't emit a standalone .cu file" in line, line
        lowered.setdefault((program, problem.layout, problem.acc), problem)
    for (program, layout, acc), problem in lowered.items():
        text = registry.get(program.backend).standalone(program, problem)
        assert f'extern "C" int gemmforge_launch_{layout.value}_{acc.value}(' in text
        assert file_name(program, problem) in text  # the header's build commands name it
    if group[0] in ("h100", "h200") and group[1] == "nn":
        assert swapped > 50, "the shipped nn grid has Triton winners to swap"


def _emit(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["emit", "--arch", "sm_90a", *argv])
    return code, out.getvalue(), err.getvalue()


def test_the_readme_shape_emits_and_says_why_its_program_changed(tmp_path):
    code, out, err = _emit("--shape", "1000x4096x333", "-o", str(tmp_path))
    assert code == 0, err
    path = Path(out.splitlines()[1])
    assert path.name.endswith("_nn_f32.cu") and path.exists()
    assert "instead of the shipped" in err and "triton can't emit" in err


def test_nn_and_nt_of_one_program_are_two_files(tmp_path):
    program = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 dp c1x1 coop tma"
    paths = []
    for layout in ("nn", "nt"):
        code, out, err = _emit("--shape", "1024x1024x1024", "--layout", layout,
                               "--program", program, "-o", str(tmp_path))
        assert code == 0, err
        paths.append(Path(out.splitlines()[1]))
    assert paths[0] != paths[1] and all(p.exists() for p in paths)
    assert [p.name[-10:] for p in paths] == ["_nn_f32.cu", "_nt_f32.cu"]
    assert "gemmforge_launch_nt_f32" in paths[1].read_text()


def test_another_file_of_the_same_name_is_refused_then_replaced_with_force(tmp_path):
    program = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 dp c1x1 coop tma"
    args = ("--program", program, "-o", str(tmp_path))
    assert _emit("--shape", "1024x1024x1024", *args)[0] == 0
    assert _emit("--shape", "1024x1024x1024", *args)[0] == 0  # the same text: fine
    code, _, err = _emit("--shape", "2048x1024x1024", *args)
    assert code == 2 and "--force" in err and len(err.strip().splitlines()) == 1
    [path] = tmp_path.glob("*.cu")
    assert "2048" not in path.read_text().split("int main")[1][:200]
    assert _emit("--shape", "2048x1024x1024", *args, "--force")[0] == 0


def test_a_given_triton_program_is_refused_naming_the_emitters(tmp_path):
    code, _, err = _emit("--shape", "1024x1024x1024", "-o", str(tmp_path), "--program",
                         "triton sm_90a 128x128x64 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct")
    assert code == 2 and "cuda_wgmma" in err and "triton can't emit" in err
