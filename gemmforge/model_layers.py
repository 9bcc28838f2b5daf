"""The linear layers of a model, as the problems `gemmforge tune --model` tunes.

    problems = model_problems("llama", tokens=(1, 16, 64, 256, 1024, 4096))
    problems = model_problems("path/to/config.json", tokens=(1, 16))
    problems = model_problems("my_package.models:build", tokens=(64,))
    layers = model_layers("path/to/config.json")     # [LayerShape(n, k, bias), ...]

A model is named by a transformers config (a model type the installed package knows, such as
"llama", "qwen2" or "mistral", with its default dimensions; or a config.json file or the
folder holding one) or by `module:function`, a function returning a torch module. Every
nn.Linear whose (n, k) `gemmforge.patch` could route gives one layout-nt problem per token
bucket of `tokens`.

A config of a decoder family in FAMILIES (Llama, Mistral, Qwen2, Gemma) is read without
building anything, and without transformers where it is not installed (where it is, it fills
the dimensions a config.json leaves at their defaults): per decoder layer q, k, v and o
projections (head_dim from the config, else the family's default, else hidden / heads) and
the gate, up and down projections, then lm_head (vocab x hidden; a model with tied
embeddings still runs it, as an nn.Linear holding the embedding's weight). Any other config
is built with transformers on the meta device (no weights are allocated or loaded), as is
a `module:function` model; a model type name needs transformers.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError
from .ir.program import Accum, Layout, Problem
from .torch_op import bucket

ALIGN = 8  # as gemmforge.patching: n and k multiples of 8


@dataclass(frozen=True, order=True)
class LayerShape:
    """The weight of some nn.Linear layers, n x k; `bias`: one of them has a bias (patch
    then prepares the program's bias twin for the shape, gemmforge.ops.with_bias)."""

    n: int
    k: int
    bias: bool = False

    def __str__(self) -> str:
        return f"{self.n}x{self.k}" + (" bias" if self.bias else "")


@dataclass(frozen=True)
class Family:
    """How a decoder family's config sets its linear layers' biases: each a config key
    (read as a flag, absent: False) or a fixed value; `head_dim`: the family's default
    where the config has none (None: hidden / heads)."""

    qkv_bias: str | bool = False
    o_bias: str | bool = False
    mlp_bias: str | bool = False
    head_dim: int | None = None

    def flag(self, config: dict, field: str | bool) -> bool:
        return bool(config.get(field)) if isinstance(field, str) else field


FAMILIES = {
    "llama": Family("attention_bias", "attention_bias", "mlp_bias"),
    "mistral": Family(),
    "qwen2": Family(qkv_bias=True),  # q, k and v always have one; o and the MLP none
    "gemma": Family("attention_bias", "attention_bias", head_dim=256),
    "gemma2": Family("attention_bias", "attention_bias", head_dim=256),
}
"""The decoder families whose config.json is read directly (model_type -> Family)."""
DIMENSIONS = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")


def config_layers(config: dict, spec: str = "") -> list[LayerShape] | None:
    """The distinct layer shapes of a model of `config` (a config.json's dict), or None
    where its model_type is not in FAMILIES; a UsageError where a dimension is missing."""
    family = FAMILIES.get(config.get("model_type"))
    if family is None:
        return None
    missing = [key for key in DIMENSIONS if not isinstance(config.get(key), int)]
    if missing:
        raise UsageError(f"--model {spec}: the config has no {', '.join(missing)} (a "
                         f"config.json from the model's repository lists them all)")
    hidden, inter, heads, vocab = (config[key] for key in DIMENSIONS)
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or family.head_dim or hidden // heads
    qkv, o, mlp = (family.flag(config, f) for f in (family.qkv_bias, family.o_bias,
                                                     family.mlp_bias))
    weights = [(heads * head_dim, hidden, qkv), (kv * head_dim, hidden, qkv),
               (hidden, heads * head_dim, o), (inter, hidden, mlp), (hidden, inter, mlp),
               (vocab, hidden, False)]
    return _distinct(weights)


def linear_layers(model) -> list[LayerShape]:
    """The distinct layer shapes of `model`'s nn.Linear layers that patch could route."""
    import torch
    return _distinct([(*m.weight.shape, m.bias is not None) for m in model.modules()
                      if isinstance(m, torch.nn.Linear)])


def linear_shapes(model) -> list[tuple[int, int]]:
    """The distinct (n, k) of `model`'s nn.Linear layers that patch could route, sorted."""
    return [(s.n, s.k) for s in linear_layers(model)]


def _distinct(weights) -> list[LayerShape]:
    """(n, k, bias) triples as LayerShapes, one per aligned (n, k) (bias: any of its
    layers has one, as patch prepares them), sorted."""
    biased: dict[tuple[int, int], bool] = {}
    for n, k, bias in weights:
        if n % ALIGN == 0 and k % ALIGN == 0:
            biased[(n, k)] = biased.get((n, k), False) or bool(bias)
    return sorted(LayerShape(n, k, b) for (n, k), b in biased.items())


def model_layers(spec: str) -> list[LayerShape]:
    """The layer shapes of the model `spec` names (module doc)."""
    path = Path(spec)
    if ":" in spec and not path.exists():
        return linear_layers(load_model(spec))
    if path.exists():
        layers = config_layers(_filled(_read_config(path, spec), spec), spec)
        return layers if layers is not None else linear_layers(load_model(spec))
    if path.suffix == ".json" or "/" in spec:
        raise UsageError(f"--model {spec}: no such file or folder")
    transformers = _transformers(spec, "a model type name needs the transformers package "
                                       "(pip install transformers); give a config.json path, "
                                       "or module:function")
    try:
        config = transformers.AutoConfig.for_model(spec)
    except (ValueError, KeyError) as e:
        raise UsageError(f"--model {spec}: not a transformers model type or config file: {e}") from None
    layers = config_layers(config.to_dict(), spec)
    return layers if layers is not None else linear_layers(load_model(spec))


def _read_config(path: Path, spec: str) -> dict:
    """The JSON object of the config file `path` (or of config.json in the folder `path`)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--model {spec}: can't read {file} as JSON: {e}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--model {spec}: {file} holds no JSON object")
    return config


def _filled(config: dict, spec: str) -> dict:
    """`config` of a FAMILIES model with transformers' defaults for what it leaves out,
    where transformers is installed; else as it is."""
    if config.get("model_type") not in FAMILIES:
        return config
    try:
        import transformers
    except ImportError:
        return config
    rest = {key: value for key, value in config.items() if key != "model_type"}
    try:
        return transformers.AutoConfig.for_model(config["model_type"], **rest).to_dict()
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--model {spec}: transformers rejects the config: {e}") from None


def _transformers(spec: str, why: str):
    try:
        import transformers
    except ImportError:
        raise UsageError(f"--model {spec}: {why}") from None
    return transformers


def load_model(spec: str):
    """The torch module `spec` names (module doc), built on the meta device."""
    import torch
    with torch.device("meta"):
        if ":" in spec and not Path(spec).exists():
            return _from_function(spec)
        return _from_config(spec)


def _from_function(spec: str):
    import torch
    module_name, _, attr = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--model {spec}: can't import {attr!r} from {module_name!r}: {e}") from None
    model = function()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--model {spec}: returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _from_config(spec: str):
    transformers = _transformers(spec, "this config needs the transformers package (pip "
                                       "install transformers; without it config.json files of "
                                       f"{', '.join(FAMILIES)} models are read directly), or "
                                       "give module:function")
    path = Path(spec)
    try:
        if path.exists():
            config = (transformers.AutoConfig.from_pretrained(str(path.parent if path.is_file() else path))
                      if path.name == "config.json" or path.is_dir()
                      else transformers.PretrainedConfig.from_json_file(str(path)))
        else:
            config = transformers.AutoConfig.for_model(spec)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--model {spec}: not a transformers model type or config file: {e}") from None
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        try:
            return auto.from_config(config)
        except ValueError:
            continue
    raise UsageError(f"--model {spec}: transformers builds no model for this config")


def model_problems(spec: str, tokens) -> list[Problem]:
    """One layout-nt, fp32-accumulate problem per (n, k) of the model's linear layers and
    token bucket of `tokens` (the bucket's top m: what patch resolves there)."""
    return layer_problems(model_layers(spec), tokens, spec)


def layer_problems(layers: list[LayerShape], tokens, spec: str = "") -> list[Problem]:
    """model_problems for the layer shapes `layers` of the model `spec` (a UsageError for
    none)."""
    if not layers:
        raise UsageError(f"--model {spec}: no nn.Linear layer with n and k multiples of {ALIGN}")
    buckets = sorted({bucket(int(t)) for t in tokens})
    return [Problem(m, s.n, s.k, Layout.NT, Accum.F32) for s in layers for m in buckets]
