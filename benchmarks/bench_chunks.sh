#!/usr/bin/env bash
# `gemmforge bench` over a long shape list in chunks, resumable across GPU-machine calls. After
# each chunk, every CSV so far (and each chunk's log) is packed into the one file $OUT/NAME.tgz,
# so a call that runs out of time still brings back the chunks done (the device returns few
# files: one archive, not one file a chunk). With DONE=<folder> (the archives of earlier calls
# unpacked there and carried), chunks whose CSV is already in it are not run again. At the end
# the chunks are joined into NAME.csv inside the archive (benchmarks/README.md: re-timing the
# shipped file).
#   bash benchmarks/bench_chunks.sh LIST LAYOUT CHUNK NAME [bench options...]
#   DONE=.carry/retime bash benchmarks/bench_chunks.sh benchmarks/shapes/below_large_nn.txt nn 150 \
#     retime_nn_h200 --chosen --twins pdl --protocols kernel,cold,call,after --rounds 3
#   (here, between calls: tar xzf <the returned NAME.tgz> -C .carry/retime, then carry .carry/retime)
set -u
if (( $# < 4 )); then
  echo "usage: bench_chunks.sh LIST LAYOUT CHUNK NAME [bench options...]" >&2
  exit 2
fi
list=$1 layout=$2 size=$3 name=$4
shift 4
[[ -f "$list" ]] || { echo "bench_chunks: no list $list" >&2; exit 2; }
source benchmarks/device_setup.sh
work=$(mktemp -d)  # a warm machine keeps /tmp: never reuse an earlier call's chunks
mkdir -p "$work/$name"
grep -v '^#' "$list" | grep -v '^[[:space:]]*$' | split -d -l "$size" - "$work/chunk_"
pack() { tar czf "$OUT/$name.tgz" -C "$work" "$name"; }
for chunk in "$work"/chunk_*; do
  part=${name}_$(basename "$chunk" | sed 's/chunk_/c/')
  if [[ -n "${DONE:-}" && -s "$DONE/$name/$part.csv" ]]; then
    cp "$DONE/$name/$part.csv" "$work/$name/"
    echo "$part done in an earlier call"
    continue
  fi
  gemmforge bench --shapes "@$chunk" --layout "$layout" --name "$part" --report-dir "$work/$name" "$@" \
    >"$work/$name/$part.log" 2>&1
  echo "$part exit $? $(grep -m1 'measured' "$work/$name/$part.log")"
  rm -f "$work/$name/$part.png"
  pack
done
python3 - "$work/$name" "$name" <<'PY'
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
pack
