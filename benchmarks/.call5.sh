source benchmarks/device_setup.sh >/dev/null 2>&1
mkdir -p .carry/campaign
timeout 90 pytest -q -m gpu tests/gpu/test_graph_first_use_gpu.py 2>&1 | tail -2
timeout 200 python3 benchmarks/check_shipped.py --name shipped_check_h100 --report-dir $OUT > $OUT/check.log 2>&1; echo "check rc $?"; grep -v "it/s\|cand/s" $OUT/check.log | tail -3
P=benchmarks/programs
timeout 200 gemmforge campaign --storage .carry/campaign/off_grid_h100.db --max-seconds 170 --shapes @benchmarks/shapes/off_grid_models.txt --layout nn --per-backend 6 --per-shape 90 --search-budget 0 --top 3 --quiet --portfolio all=$P/grid_pdl_v20.txt --portfolio all=$P/grid_pdl_triton_v21.txt --portfolio all=$P/small_portfolio_pdl_v21.txt --portfolio all=$P/small_portfolio_v18.txt --portfolio all=$P/grid_nn_v19.txt --portfolio all=$P/grid_nn_v19b.txt --portfolio medium=$P/hopper_population.txt > $OUT/off_grid_campaign.json 2> $OUT/off_grid_campaign.log; echo "campaign rc $?"; python3 -c "import json;d=json.load(open('$OUT/off_grid_campaign.json'));print(d['confirmed'],d['stopped'],d['this_run'])"
timeout 100 python3 benchmarks/off_grid.py --storage .carry/campaign/off_grid_h100.db --name off_grid_h100 --report-dir $OUT 2>&1 | grep -v "it/s" | tail -4
timeout 120 gemmforge tune --quick --shapes @benchmarks/shapes/off_grid_models.txt --storage sqlite:///.carry/campaign/quick_h100.db > $OUT/quick.log 2>&1; echo "quick rc $?"
timeout 100 python3 benchmarks/off_grid.py --storage .carry/campaign/off_grid_h100.db --tuned sqlite:///.carry/campaign/quick_h100.db --name off_grid_quick_h100 --report-dir $OUT 2>&1 | grep -v "it/s" | tail -4
python3 -c "import sqlite3;[sqlite3.connect(p).execute('PRAGMA wal_checkpoint(TRUNCATE)').close() for p in ('.carry/campaign/off_grid_h100.db','.carry/campaign/quick_h100.db')]"
tar czf $OUT/stores.tgz .carry/campaign
