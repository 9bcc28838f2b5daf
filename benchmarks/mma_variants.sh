#!/usr/bin/env bash
# A/B of cuda_mma template details on the GPU: emit the standalone file of a program, derive
# variants by editing the generated source, build each with plain nvcc and run its self-test
# (which checks the answer and times 20 launches) at two sizes.
#   bash benchmarks/mma_variants.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT/mma"
GENCODE="-gencode=arch=compute_80,code=sm_90"
for prog in "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct" \
            "cuda_mma sm_80 128x256x64 w2x4 s3 sw128 row/8 pred k1 dp c1x1 nows direct"; do
  cu=$(python3 -m gemmforge.cli emit --shape 8192x8192x8192 --arch sm_80 --program "$prog" -o "$OUT/mma" | tail -1)
  base=${cu%.cu}
  # variant "free": the mma asm without volatile, so the compiler may schedule it freely
  sed 's/asm volatile("mma.sync/asm("mma.sync/' "$cu" > "${base}_free.cu"
  for v in "" _free; do
    nvcc -O3 -std=c++17 -DNDEBUG $GENCODE -DGEMMFORGE_STANDALONE_MAIN -o "${base}${v}" "${base}${v}.cu" &
  done
done
wait
for exe in $(ls "$OUT"/mma/gf_* | grep -v '\.cu$'); do
  for size in "4096 4096 4096" "8192 8192 8192"; do
    echo "$(basename "$exe") $("$exe" $size | tail -1)"
  done
done
