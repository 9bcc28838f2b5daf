#!/usr/bin/env bash
# One GPU-machine call of the grid campaign (benchmarks/README.md, "grid_h100"): restores the
# build caches that travel beside the store, runs `gemmforge campaign` for SECONDS, then leaves
# the store (checkpointed into one file) and the caches in $OUT for the next call.
#   bash benchmarks/campaign_device.sh .carry/campaign/h100.db 480 [campaign options...]
# Carry .whl (optuna, SQLAlchemy, ...) and the store's folder; copy $OUT's files back into that
# folder before the next call.
set -u
store=$1 seconds=$2
shift 2
here=$(dirname "$store")
source benchmarks/device_setup.sh
export GEMMFORGE_CACHE_DIR=/tmp/gf_cache TRITON_CACHE_DIR=/tmp/triton_cache
for cache in gf_cache triton_cache; do
  if [ -f "$here/$cache.tar" ]; then tar -xf "$here/$cache.tar" -C /tmp; fi
done
gemmforge campaign --storage "$store" --max-seconds "$seconds" "$@" >"$OUT/summary.json" \
  2>"$OUT/campaign.log"
echo "campaign exit $?"
python3 - "$store" <<'PY'
import sqlite3, sys
sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
PY
cp "$store" "$OUT/"
for cache in gf_cache triton_cache; do
  [ -d "/tmp/$cache" ] && tar -cf "$OUT/$cache.tar" -C /tmp "$cache"
done
ls -la "$OUT"
tail -n 15 "$OUT/campaign.log"
cat "$OUT/summary.json"
