#!/usr/bin/env bash
# One GPU-machine call of `gemmforge bench` over a long shape list, in chunks: each chunk's CSV
# lands in $OUT as it finishes (a call that runs out of time still brings back the chunks done),
# then all of them are joined into $OUT/NAME.csv. Used for the thirty-fourth and thirty-fifth
# sessions' rounds (benchmarks/README.md, "pdl_after_h200_s34", "under_after_h200_s35").
#   bash benchmarks/bench_chunks.sh LIST LAYOUT CHUNK NAME [bench options...]
#   bash benchmarks/bench_chunks.sh benchmarks/shapes/no_call_nn_h200.txt nn 150 calls_nn_h200_s35 \
#     --chosen --protocols kernel,cold,call,after --rounds 3
set -u
list=$1 layout=$2 size=$3 name=$4
shift 4
source benchmarks/device_setup.sh
work=$(mktemp -d)  # a warm machine keeps /tmp: never reuse an earlier call's chunks
grep -v '^#' "$list" | grep -v '^[[:space:]]*$' | split -d -l "$size" - "$work/chunk_"
for chunk in "$work"/chunk_*; do
  part=${name}_$(basename "$chunk" | sed 's/chunk_/c/')
  gemmforge bench --shapes "@$chunk" --layout "$layout" --name "$part" --report-dir "$OUT" "$@" \
    >"$work/$part.log" 2>&1
  echo "$part exit $? $(grep -m1 'measured' "$work/$part.log")"
  rm -f "$OUT/$part.png"
done
python3 - "$OUT" "$name" <<'PY'
import csv, glob, sys
out, name = sys.argv[1], sys.argv[2]
parts = sorted(glob.glob(f"{out}/{name}_c*.csv"))
rows = [row for p in parts for row in csv.DictReader(open(p))]
if rows:
    with open(f"{out}/{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
print(f"{name}.csv: {len(rows)} rows from {len(parts)} chunks")
PY
