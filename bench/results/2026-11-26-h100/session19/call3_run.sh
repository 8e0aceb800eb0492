#!/usr/bin/env bash
# Session 19 call 3: is the mid-kernel SM clock drop of the sparse kernel a power response?
cd "$(dirname "$0")"
bash tools/bench/probe_variants.sh build . base clk 2>&1 | tail -3
for mode in default sleep5ms noflush; do
  envs=""; [ $mode = sleep5ms ] && envs="TRACE_SLEEP_US=5000"; [ $mode = noflush ] && envs="TRACE_NOFLUSH=1"
  env $envs timeout 120 ./bin_clk --impls c --trace trace_$mode.csv > log_trace_$mode.txt 2>&1; echo "== trace $mode rc=$?"
  python3 clk_summary.py trace_$mode.csv
done
nvidia-smi -q -d PERFORMANCE | grep -A6 'Event Reasons Counters' > perf_before.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader -lms 20 > smi.csv 2>&1 &
SMI=$!
timeout 200 ./bin_base --impls c --dense --iters 1500 --no-check > log_long.txt 2>&1; echo "long rc=$?"
kill $SMI; sleep 0.2
nvidia-smi -q -d PERFORMANCE | grep -A6 'Event Reasons Counters' > perf_after.txt
paste perf_before.txt perf_after.txt
grep -E 'block 64|dense|csla impl' log_long.txt | head -12
python3 - <<'PY'
import csv
rows=[r for r in csv.reader(open('smi.csv')) if len(r)>=5]
clk=[float(r[1].split()[0]) for r in rows]; pw=[float(r[2].split()[0]) for r in rows]
print('smi samples',len(rows),'clock MHz min/median/max',min(clk),sorted(clk)[len(clk)//2],max(clk),'power W max',max(pw),'limit',rows[0][3],'temp',rows[-1][4])
print('top power samples', sorted(zip(pw,clk))[-8:])
PY
gzip -k trace_*.csv
mkdir -p "$OUT" && cp trace_*.csv.gz smi.csv "$OUT/" && tar czf "$OUT/s19_call3_logs.tgz" log_*.txt perf_*.txt
