#!/usr/bin/env bash
# Issue 5's GPU tuning runs (one GPU): 20 grid shapes, then 8 small shapes for throughput.
#   bash benchmarks/tune_gpu.sh [STORAGE_URL]      (default: sqlite under $OUT or ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
DB=${1:-sqlite:///$(realpath "$OUT")/tune.db}
python3 -m gemmforge.cli tune --shapes sample:20:0 --budget 8 --backends triton \
  --storage "$DB" --report tune_sample20 --quiet
python3 -m gemmforge.cli tune --budget 12 --backends triton --storage "$DB" --report tune_small \
  --quiet --shapes 64x64x64,64x128x256,128x64x512,256x256x64,128x128x128,64x256x128,256x64x256,512x64x64
