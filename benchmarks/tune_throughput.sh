#!/usr/bin/env bash
# Issue 5's throughput figure: candidates measured per GPU-second on small shapes, one GPU.
#   [BATCH=8] bash benchmarks/tune_throughput.sh [CONCURRENT...]     (default: 1 4 8)
# Shapes: 16 of the 168 grid shapes with 2mnk <= 2e8, drawn with random.Random(7); Triton
# candidates (builds in 16 CPU processes overlap the measurements), budget 16 per shape,
# a fresh SQLite study file per run, so every candidate is built and measured.
set -uo pipefail
BATCH=${BATCH:-8}
cd "$(dirname "$0")/.."
SHAPES=128x8192x64,64x2048x256,256x512x64,12288x64x64,64x128x256,64x256x64,1024x128x64,64x256x4096,256x128x512,2048x64x256,64x128x1024,512x1024x64,128x64x8192,64x64x16384,64x256x1024,512x64x64
for c in "${@:-1 4 8}"; do
  for n in $c; do
    db=$(mktemp -u /tmp/gemmforge-throughput-XXXX).db
    echo "=== --concurrent $n --batch $BATCH"
    python3 -m gemmforge.cli tune --shapes "$SHAPES" --budget 16 --backends triton \
      --storage "sqlite:///$db" --report "tune_throughput_c${n}_b$BATCH" --quiet --concurrent "$n" --batch "$BATCH" \
      | tail -4
    rm -f "$db"
  done
done
