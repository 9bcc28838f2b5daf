source benchmarks/device_setup.sh >/dev/null 2>&1
P=benchmarks/programs
timeout 150 gemmforge tune --quick --shapes @benchmarks/shapes/off_grid_models.txt --storage sqlite:///.carry/campaign/quick_h100.db > $OUT/quick.log 2>&1; echo "quick rc $?"; tail -3 $OUT/quick.log
timeout 100 python3 benchmarks/off_grid.py --storage .carry/campaign/off_grid_h100.db --tuned sqlite:///.carry/campaign/quick_h100.db --name off_grid_quick_h100 --report-dir $OUT 2>&1 | grep -v "it/s" | tail -3
timeout 360 gemmforge campaign --storage .carry/campaign/small_nt_h100.db --max-seconds 340 --shapes @benchmarks/shapes/small_medium_sample.txt --layout nt --per-backend 6 --per-shape 60 --search-budget 0 --top 3 --quiet --portfolio all=$P/small_portfolio_pdl_v21.txt --portfolio all=$P/small_portfolio_v18.txt --portfolio all=$P/grid_pdl_v20.txt --portfolio all=$P/grid_pdl_triton_v21.txt > $OUT/small_nt.json 2> $OUT/small_nt.log; echo "campaign rc $?"; python3 -c "import json;d=json.load(open('$OUT/small_nt.json'));print(d['confirmed'],d['stopped'],d['this_run'])"
python3 -c "import sqlite3,glob;[sqlite3.connect(p).execute('PRAGMA wal_checkpoint(TRUNCATE)').close() for p in glob.glob('.carry/campaign/*.db')]"
tar czf $OUT/stores.tgz .carry/campaign
