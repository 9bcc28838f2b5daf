"""benchmarks/model_forward.py's CPU side, run as its users run it (a subprocess, `--plan`):
one row per (model, T, mode, tuned) over eager, graph and compile; the families' dimensions
are the published 7-9B models' (their layer shapes equal those of the config.json files in
tests/data/model_configs); bad input is refused with one line before anything runs."""
import json
import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest

from gemmforge.model_layers import config_layers

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "model_forward.py"
CONFIGS = ROOT / "tests" / "data" / "model_configs"
PUBLISHED = {"llama": "llama-3.1-8b.json", "qwen2": "qwen2-7b.json",
             "mistral": "mistral-7b-v0.3.json", "gemma": "gemma-7b.json"}


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--plan", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def _lines(out: str, tag: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(tag + " ")]


def test_one_row_per_model_tokens_mode_and_tuned():
    done = _plan("--tokens", "1,16,4096", "--tuned", "yes")
    assert done.returncode == 0, done.stderr
    rows = [tuple(r.split(",")) for r in _lines(done.stdout, "row")]
    assert rows == [(m, t, mode, "yes") for m, t, mode in
                    product(("llama", "qwen2", "mistral", "gemma"), ("1", "16", "4096"),
                            ("eager", "graph", "compile"))]
    assert _lines(_plan("--models", "gemma", "--tokens", "64", "--modes", "compile").stdout,
                  "row") == ["gemma,64,compile,no"]


def test_the_families_have_the_published_models_layers():
    done = _plan()
    assert done.returncode == 0, done.stderr
    layers = dict(line.split(": ", 1) for line in _lines(done.stdout, "layers"))
    assert sorted(layers) == sorted(PUBLISHED)
    for family, name in PUBLISHED.items():
        published = config_layers(json.loads((CONFIGS / name).read_text()))
        assert layers[family].split() == [str(s).replace(" ", "+") for s in published], family


def test_the_configs_it_writes_are_what_tune_model_reads(tmp_path):
    done = _plan("--models", "qwen2,gemma", "--configs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    from gemmforge.model_layers import model_layers
    for family in ("qwen2", "gemma"):
        published = config_layers(json.loads((CONFIGS / PUBLISHED[family]).read_text()))
        assert model_layers(str(tmp_path / f"{family}.json")) == published


@pytest.mark.parametrize("args, message", [
    (("--models", "llama,gpt2"), "model 'gpt2'"),
    (("--modes", "eager,jit"), "mode 'jit'"),
    (("--tuned", "maybe"), "--tuned 'maybe'"),
    (("--tokens", "1,x"), "--tokens '1,x'"),
    (("--tokens", "0,16"), "token count 0"),
    (("--layers", "0"), "--layers, --rounds and --iters must be >= 1"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = _plan(*args)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout
