"""gemmforge.model_layers, what `gemmforge tune --model` tunes: the linear layers of Llama-,
Qwen2-, Mistral- and Gemma-class config.json files (their 7-9B models' dimensions, in
tests/data/model_configs) read with transformers or without it, a module:function model,
and the bad input."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gemmforge.cli import main
from gemmforge.errors import UsageError
from gemmforge.model_layers import LayerShape, config_layers, model_layers, model_problems

CONFIGS = Path(__file__).parent / "data" / "model_configs"
L = LayerShape
EXPECTED = {  # the layers each model's published config gives, biased ones marked
    "llama-3.1-8b.json": [L(1024, 4096), L(4096, 4096), L(4096, 14336), L(14336, 4096),
                          L(128256, 4096)],
    "mistral-7b-v0.3.json": [L(1024, 4096), L(4096, 4096), L(4096, 14336), L(14336, 4096),
                             L(32768, 4096)],
    # q, k and v carry a bias; o has none but q's shape, which counts as biased (as patch
    # prepares it: the bias twin serves both)
    "qwen2-7b.json": [L(512, 3584, True), L(3584, 3584, True), L(3584, 18944),
                      L(18944, 3584), L(152064, 3584)],
    # head_dim 256, not hidden / heads = 192: q, k and v are 4096 wide; lm_head runs on
    # the tied embedding's weight
    "gemma-7b.json": [L(3072, 4096), L(3072, 24576), L(4096, 3072), L(24576, 3072),
                      L(256000, 3072)],
}


@pytest.fixture(params=["installed", "absent"])
def transformers_state(request, monkeypatch):
    """Each test twice: with transformers as installed (skipped where it is not), and as if
    it were not installed (an import of it fails)."""
    if request.param == "installed":
        pytest.importorskip("transformers")
    else:
        monkeypatch.setitem(sys.modules, "transformers", None)
    return request.param


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_config_file_gives_its_layers(name, transformers_state):
    assert model_layers(str(CONFIGS / name)) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_folder_holding_config_json_gives_the_same(name, tmp_path, transformers_state):
    shutil.copy(CONFIGS / name, tmp_path / "config.json")
    assert model_layers(str(tmp_path)) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_rules_match_the_model_transformers_builds(name, tmp_path):
    """Where transformers is installed: the model it builds from the config (meta device)
    has exactly the layers the rules read off the config."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import torch
    from gemmforge.model_layers import linear_layers
    shutil.copy(CONFIGS / name, tmp_path / "config.json")
    config = transformers.AutoConfig.from_pretrained(str(tmp_path))
    config.num_hidden_layers = 1  # the same layers, fewer of them
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert linear_layers(model) == EXPECTED[name]


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "gemma"])
def test_a_model_type_name_gives_the_layers_of_its_default_model(name):
    """Where transformers is installed: a family's name reads its default config by the
    rules, with the layers of the default model transformers builds."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from gemmforge.model_layers import linear_layers, load_model
    assert model_layers(name) == linear_layers(load_model(name))


def test_problems_per_layer_and_token_bucket():
    problems = model_problems(str(CONFIGS / "qwen2-7b.json"), (1, 16, 77))
    assert len(problems) == 5 * 3 and {p.m for p in problems} == {1, 16, 128}
    assert {(p.n, p.k) for p in problems} == {(s.n, s.k) for s in EXPECTED["qwen2-7b.json"]}
    assert {str(p.layout) for p in problems} == {"nt"}


def test_the_config_decides_biases_and_head_dim():
    base = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "vocab_size": 1000}
    assert config_layers(base) == [L(64, 64), L(64, 128), L(128, 64), L(1000, 64)]
    biased = config_layers({**base, "attention_bias": True, "num_key_value_heads": 2,
                            "head_dim": 8})
    assert biased == [L(16, 64, True), L(32, 64, True), L(64, 32, True), L(64, 128),
                      L(128, 64), L(1000, 64)]
    assert config_layers({**base, "mlp_bias": True})[1:3] == [L(64, 128, True), L(128, 64, True)]
    gemma = config_layers({**base, "model_type": "gemma"})  # Gemma's default head_dim: 256
    assert L(1024, 64) in gemma and L(64, 1024) in gemma
    assert config_layers({**base, "model_type": "bert"}) is None  # not a family read here
    with pytest.raises(UsageError, match="no intermediate_size, vocab_size"):
        config_layers({k: v for k, v in base.items()
                       if k not in ("intermediate_size", "vocab_size")}, "x")


def test_without_transformers_a_name_is_refused_and_a_path_is_read(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UsageError, match="a model type name needs the transformers package"):
        model_layers("llama")
    assert main(["tune", "--model", "llama", "--replay", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert "needs the transformers package" in err and "Traceback" not in err


def test_model_layers_from_a_module_function():
    pytest.importorskip("torch")
    from gemmforge.model_layers import linear_shapes, load_model
    model = load_model("torch.nn:Transformer")
    assert next(model.parameters()).device.type == "meta"  # nothing allocated
    assert linear_shapes(model) == [(512, 512), (512, 2048), (2048, 512)]
    assert model_layers("torch.nn:Transformer") == [L(512, 512, True), L(512, 2048, True),
                                                     L(2048, 512, True)]
    problems = model_problems("torch.nn:Transformer", (1, 16, 77))
    assert len(problems) == 9 and {p.m for p in problems} == {1, 16, 128}


def test_model_layers_from_a_transformers_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    from gemmforge.model_layers import linear_shapes, load_model
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    config.save_pretrained(tmp_path)
    expected = [(128, 256), (256, 256), (256, 512), (512, 256), (1000, 256)]
    assert linear_shapes(load_model(str(tmp_path / "config.json"))) == expected
    assert [(s.n, s.k) for s in model_layers(str(tmp_path / "config.json"))] == expected


@pytest.mark.parametrize("argv, message", [
    (["--model", "torch.nn:Transformer", "--shapes", "64x64x64"], "give one of them"),
    (["--tokens", "16", "--shapes", "64x64x64"], "--tokens needs --model"),
    (["--model", "torch.nn:Transformer", "--tokens", "0,16"], "--tokens: '0,16' is not"),
    (["--model", "torch.nn:NoSuchThing"], "can't import 'NoSuchThing'"),
    (["--model", "os:getcwd"], "returned str, not a torch.nn.Module"),
    (["--model", "no/such/config.json"], "no such file or folder"),
    (["--model", str(CONFIGS)], "can't read"),
    ([], "give --shapes or --model"),
])
def test_tune_model_bad_input(capsys, argv, message):
    pytest.importorskip("torch")
    assert main(["tune", *argv, "--replay", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
