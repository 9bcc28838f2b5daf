#!/usr/bin/env bash
# What limits a kernel, from counters: for each shape, the tensor pipe's activity and
# the SM clock of one launch of cuBLAS (torch.matmul NN) and of a gemmforge program, under
# Nsight Compute (ncu). Where both kernels keep the tensor pipe about equally busy per
# clock, the rest of the difference is clock (power), not the kernel.
#
#   bash benchmarks/ncu_tensor_pipe.sh OUT_DIR "MxNxK|program text" ... [@FILE]
#
# @FILE: one "MxNxK|program text" job per line (# comments). Each run profiles the third launch of the GEMM's
# own kernel, picked by name (cuBLAS's nvjet/gemm kernels; CUTLASS's GemmUniversal for
# cute_cpp, kernel_cutlass for cute_dsl, gf_ for triton), so stream-K's workspace resets
# and the check's kernels are not counted.
#
# Metrics are taken from the first of each candidate list that this ncu knows
# (--query-metrics); names differ between ncu releases. Needs access to the GPU's
# performance counters; where that is refused, ncu's error is printed and the script
# goes on. ncu replays a kernel several times to collect its counters (--cache-control
# all, --clock-control none: caches flushed before each replay, clocks left as they are).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUT_DIR}; shift
mkdir -p "$out"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then echo "ncu: not found"; exit 0; fi
"$NCU" --version | tail -1
known=$("$NCU" --query-metrics --chip gh100 2>/dev/null | awk '{print $1}')
pick() {  # the first candidate this ncu lists (by base name), with its suffix
  for m in "$@"; do base=${m%%.*}; if grep -qx "$base" <<<"$known"; then echo "$m"; return; fi; done
}
metrics=$(IFS=,; echo "$(pick sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
  sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active \
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active)","\
"$(pick sm__cycles_elapsed.avg.per_second)","\
"$(pick gpu__time_duration.sum)","\
"$(pick sm__throughput.avg.pct_of_peak_sustained_elapsed)","\
"$(pick dram__throughput.avg.pct_of_peak_sustained_elapsed)","\
"$(pick dram__bytes_read.sum)","$(pick dram__bytes_write.sum)","\
"$(pick lts__t_sector_hit_rate.pct)")
metrics=$(sed 's/,,*/,/g; s/^,//; s/,$//' <<<"$metrics${NCU_EXTRA:+,$NCU_EXTRA}")  # NCU_EXTRA: more, comma-separated
echo "metrics: $metrics"
jobs=()
for arg in "$@"; do
  if [ "${arg:0:1}" = @ ]; then mapfile -t -O "${#jobs[@]}" jobs < <(grep -v '^#' "${arg:1}" | grep .)
  else jobs+=("$arg"); fi
done
kernel_filter() {  # who, program text
  case "$1:${2%% *}" in
    cublas:*) echo "regex:nvjet|gemm|xmma";;
    *:cute_cpp) echo "regex:GemmUniversal";;
    *:cute_dsl) echo "regex:kernel_cutlass";;
    *:triton) echo "regex:^gf_";;
    *) echo "regex:^(?!.*(elementwise|distribution|reduce)).*$";;
  esac
}
# The profiled process: one GEMM run --calls times (a gemmforge program, or cuBLAS through
# torch.matmul NN without --program), after the two randn kernels that draw the operands,
# then one check against torch.matmul. Artifacts come from the usual build cache.
read -r -d '' RUN_GEMM <<'PY'
import argparse
import torch
from gemmforge.ir import parse, parse_problem
ap = argparse.ArgumentParser()
ap.add_argument("--shape", required=True)
ap.add_argument("--program")
ap.add_argument("--calls", type=int, default=10)
args = ap.parse_args()
problem = parse_problem(args.shape)
a = torch.randn(problem.m, problem.k, device="cuda", dtype=torch.float16)
b = torch.randn(problem.k, problem.n, device="cuda", dtype=torch.float16)
c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
gemm = lambda: torch.matmul(a, b, out=c)
if args.program:
    from gemmforge.backends.pipeline import compile_and_load
    kernel = compile_and_load(parse(args.program), problem)
    gemm = lambda: kernel(a, b, out=c)
for _ in range(args.calls):
    gemm()
torch.cuda.synchronize()
torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=1.0)
PY

n=0
for job in "${jobs[@]}"; do
  n=$((n + 1))  # the job's number in the CSV names: two programs at one shape keep both
  shape=${job%%|*}; program=${job#*|}
  for who in ${NCU_WHO:-cublas gemmforge}; do  # NCU_WHO=gemmforge: ours only
    args=(--shape "$shape" --calls 4)
    [ "$who" = gemmforge ] && args+=(--program "$program")
    tag="${n}_${shape}_${who}"
    "$NCU" --metrics "$metrics" --launch-skip 2 --launch-count 1 --clock-control none \
      --kernel-name-base demangled \
      --kernel-name "$(kernel_filter "$who" "$program")" \
      --csv --print-units base python3 -c "$RUN_GEMM" "${args[@]}" \
      >"$out/ncu_$tag.csv" 2>"$out/ncu_$tag.err"
    rc=$?
    if [ "$who" = cublas ]; then echo "== $shape $who (rc $rc)"
    else echo "== $shape $who (rc $rc) $program"; fi
    python3 - "$out/ncu_$tag.csv" <<'PY'
import csv, sys
for row in csv.reader(open(sys.argv[1])):
    if row and row[0].isdigit():  # ID, ..., Kernel Name (5th), ..., Metric Name, Unit, Value
        print(f"  {row[-3]} = {row[-1]}   [{row[4][:50]}]")
PY
    grep -iE "error|ERR_" "$out/ncu_$tag.err" | head -3
  done
done
