#!/usr/bin/env bash
# One GPU-machine call: run the named parts, logs under $OUT (the device tool's folder,
# or ./gpu-out elsewhere). Parts: tests:<file-glob> | bench:<script args> | cli:<gemmforge
# args> | sh:<script args> | env:NAME=VALUE (set for the parts after it). Example:
#   bash benchmarks/gpu_call.sh "tests:tests/gpu/test_cuda_gpu.py" "bench:benchmarks/check_shipped.py"
# At the end, the logs and every result file written meanwhile are packed into
# $OUT/call.tgz (the device tool returns few files; unpack with tar xzf).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMMFORGE_NVCC_THREADS=2
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/device.txt"
status=0; index=0
for part in "$@"; do
  # the part's number first: two parts with the same first 60 characters keep both logs
  index=$((index + 1))
  kind=${part%%:*}; arg=${part#*:}; tag=${index}_$(echo "$arg" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
  echo "=== $part"
  case "$kind" in
    tests) python3 -m pytest -m gpu $arg -q --tb=short -p no:cacheprovider >"$OUT/t_$tag.log" 2>&1
           rc=$?; tail -3 "$OUT/t_$tag.log"; grep -E "^(FAILED|ERROR)" "$OUT/t_$tag.log" | head -20;;
    bench) python3 $arg >"$OUT/b_$tag.log" 2>&1; rc=$?; tail -40 "$OUT/b_$tag.log";;
    cli) python3 -m gemmforge.cli $arg >"$OUT/c_$tag.log" 2>&1; rc=$?; tail -25 "$OUT/c_$tag.log";;
    sh) bash $arg >"$OUT/s_$tag.log" 2>&1; rc=$?; tail -25 "$OUT/s_$tag.log";;
    env) export "$arg"; rc=0;;
    *) echo "unknown part $part"; rc=2;;
  esac
  [ $rc -ne 0 ] && status=$rc
done
find benchmarks/results -newer "$OUT/device.txt" -type f -exec cp {} "$OUT/" \; 2>/dev/null
(cd "$OUT" && tar czf call.tgz --exclude call.tgz --exclude '*.db' ./* \
  && find . -maxdepth 1 -type f ! -name call.tgz ! -name device.txt -delete)
exit $status
