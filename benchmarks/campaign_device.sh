#!/usr/bin/env bash
# One GPU-machine call of a campaign (benchmarks/README.md, "campaign_device.sh"): runs
# `gemmforge campaign` for SECONDS, then leaves the store (checkpointed into one file), its log
# and summary in $OUT for the next call. The build caches stay behind (~150 MB each, over
# what comes back): a call rebuilds its programs in about 50 s on 16 cores.
#   bash benchmarks/campaign_device.sh .carry/campaign/h100.db 480 [campaign options...]
# Carry .whl (optuna, SQLAlchemy, ...) and the store's folder; gunzip $OUT/h100.db.gz into that
# folder before the next call.
set -u
store=$1 seconds=$2
shift 2
source benchmarks/device_setup.sh
gemmforge campaign --storage "$store" --max-seconds "$seconds" "$@" >"$OUT/summary.json" \
  2>"$OUT/campaign.log"
echo "campaign exit $?"
python3 - "$store" <<'PY'
import sqlite3, sys
sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
PY
gzip -c "$store" >"$OUT/$(basename "$store").gz"  # 22 MB raw, over the 16 MiB a file that comes back
tail -n 15 "$OUT/campaign.log"
cat "$OUT/summary.json"
