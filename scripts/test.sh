#!/usr/bin/env bash
# Set up a virtual environment and run the CPU test tier (README: "Run the tests").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch 2.13.0 is the CPU build these machines keep on disk; an unpinned torch pulls CUDA
python -m pip install -q "torch==2.13.0" -e ".[triton,search,test]"
python -m pytest -q -m "not gpu" "$@"
