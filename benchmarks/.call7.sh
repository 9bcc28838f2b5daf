source benchmarks/device_setup.sh >/dev/null 2>&1
P=benchmarks/programs
timeout 200 gemmforge campaign --storage .carry/campaign/llm_nt_h100.db --max-seconds 180 --shapes @benchmarks/shapes/llm_layers.txt --layout nt --per-backend 6 --per-shape 60 --search-budget 0 --top 3 --quiet --portfolio all=$P/small_portfolio_pdl_v21.txt --portfolio all=$P/small_portfolio_v18.txt --portfolio all=$P/grid_pdl_v20.txt --portfolio all=$P/grid_pdl_triton_v21.txt --portfolio medium=$P/hopper_population.txt > $OUT/llm_nt.json 2> $OUT/llm_nt.log; echo "llm campaign rc $?"; python3 -c "import json;d=json.load(open('$OUT/llm_nt.json'));print(d['confirmed'],d['stopped'],d['this_run'])"
timeout 330 gemmforge campaign --storage .carry/campaign/rerun_h100.db --max-seconds 310 --passes search,confirm --threshold 0.9 --search-budget 16 --quiet > $OUT/rerun_search.json 2> $OUT/rerun_search.log; echo "search rc $?"; python3 -c "import json;d=json.load(open('$OUT/rerun_search.json'));print(d['confirmed'],d['stopped'],d['this_run'])"
python3 -c "import sqlite3,glob;[sqlite3.connect(p).execute('PRAGMA wal_checkpoint(TRUNCATE)').close() for p in glob.glob('.carry/campaign/*.db')]"
tar czf $OUT/stores.tgz .carry/campaign
ls -la $OUT
