"""The linear layers of a model, as the problems `gemmforge tune --model` tunes.

    problems = model_problems("llama", tokens=(1, 16, 64, 256, 1024, 4096))
    problems = model_problems("path/to/config.json", tokens=(1, 16))
    problems = model_problems("my_package.models:build", tokens=(64,))

A model is named by a transformers config (a model type the installed package knows, such as
"llama", "qwen2" or "mistral", with its default dimensions; or a config.json file or the
folder holding one) or by `module:function`, a function returning a torch module. The model is
built on the meta device (no weights are allocated or loaded); every nn.Linear whose (n, k)
`gemmforge.patch` could route gives one layout-nt problem per token bucket of `tokens`.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from .errors import UsageError
from .ir.program import Accum, Layout, Problem
from .torch_op import bucket

ALIGN = 8  # as gemmforge.patching: n and k multiples of 8


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
    try:
        import transformers
    except ImportError:
        raise UsageError(f"--model {spec}: a config needs the transformers package "
                         "(pip install transformers), or give module:function") from None
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


def linear_shapes(model) -> list[tuple[int, int]]:
    """The distinct (n, k) of `model`'s nn.Linear layers that patch could route, sorted."""
    import torch
    shapes = {tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return sorted((n, k) for n, k in shapes if n % ALIGN == 0 and k % ALIGN == 0)


def model_problems(spec: str, tokens) -> list[Problem]:
    """One layout-nt, fp32-accumulate problem per (n, k) of the model's linear layers and
    token bucket of `tokens` (the bucket's top m: what patch resolves there)."""
    shapes = linear_shapes(load_model(spec))
    if not shapes:
        raise UsageError(f"--model {spec}: no nn.Linear layer with n and k multiples of {ALIGN}")
    buckets = sorted({bucket(int(t)) for t in tokens})
    return [Problem(m, n, k, Layout.NT, Accum.F32) for n, k in shapes for m in buckets]
