#!/usr/bin/env bash
# Session 19: producer touches the next item's count/list early (pf) vs base; per-item traces.
cd "$(dirname "$0")"
bash tools/bench/probe_variants.sh build . base pf trace pftrace 2>&1 | tail -8
bash tools/bench/probe_variants.sh rounds . "base pf" c 3
for v in trace pftrace; do
  timeout 120 ./bin_$v --impls c --trace trace_$v.csv > log_trace_$v.txt 2>&1; echo "trace $v rc=$?"
  python3 tools/bench/csla_trace_summary.py trace_$v.csv 2>&1 | grep -A8 '^sparse schedule 12 run [01]' | head -20
done
gzip -k trace_*.csv
mkdir -p "$OUT" && tar czf "$OUT/s19_call1_logs.tgz" log_*.txt obj_*/link.log && cp trace_*.csv.gz "$OUT/"
