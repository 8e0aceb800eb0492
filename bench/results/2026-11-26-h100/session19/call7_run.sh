#!/usr/bin/env bash
# Session 19 call 7: upper bounds of energy cuts. halfl2: odd key blocks' tiles not copied (half the
# L2-to-SM bytes); nodram: every head reads head 0's K/V (K/V DRAM traffic ~0). Results wrong on
# purpose (no checks). Traces give the SM clock through a launch and cycles per tile.
cd "$(dirname "$0")"
bash tools/bench/probe_variants.sh build . base halfl2 nodram 2>&1 | tail -3
for r in 1 2 3; do for v in base halfl2 nodram; do
  timeout 120 ./bin_$v --impls c --iters 30 --no-check > log_${v}_$r.txt 2>&1
  printf "round %s %-7s rc=%s " $r $v $?
  grep -A1 -E "^(infinity-8b-1024 block 64|infinity-8b-1024 block 128)" log_${v}_$r.txt | grep "csla impl" | awk '{printf "%s ", $5}'; echo
done; done
for v in base halfl2 nodram; do
  timeout 120 ./bin_$v --impls c --trace trace_$v.csv > log_trace_$v.txt 2>&1; echo "== trace $v rc=$?"
  python3 tools/bench/csla_trace_summary.py trace_$v.csv > sum_$v.txt 2>&1
  grep -E "^(sparse|dense)|tile loop|later items|waits" sum_$v.txt | sed -n '1,4p;9,12p'
done
mkdir -p "$OUT" && tar czf "$OUT/s19_call7.tgz" log_*.txt sum_*.txt && gzip -c trace_base.csv > "$OUT/trace_base.csv.gz"
