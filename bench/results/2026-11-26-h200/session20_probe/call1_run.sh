#!/usr/bin/env bash
# Session 20 call 1: upper bounds of the softmax's share at the power limit. nomufu: P = the
# exponent (no MUFU); nosm: P = S (no softmax arithmetic); pconst: P = 0.25 (still PV operands).
# Results wrong on purpose (no checks but base's). Traces: SM clock and cycles per tile.
cd "$(dirname "$0")"
V="base nomufu nosm pconst"
bash tools/bench/probe_variants.sh build . $V 2>&1 | tail -4
timeout 100 ./bin_base --impls c --iters 30 > log_check_base.txt 2>&1; echo "base checks rc=$?"; grep -E "checks:" log_check_base.txt
for r in 1 2 3; do for v in $V; do
  timeout 60 ./bin_$v --impls c --dense --iters 30 --no-check > log_${v}_$r.txt 2>&1
  printf "round %s %-7s rc=%s " $r $v $?
  grep -A1 -E "^(infinity-8b-1024 block 64|dense block 64|infinity-8b-1024 block 128)" log_${v}_$r.txt | grep "csla impl" | awk '{printf "%s ", $5}'; echo
done; done
for v in base nomufu nosm pconst; do
  timeout 60 ./bin_$v --impls c --no-check --trace trace_$v.csv > log_trace_$v.txt 2>&1; echo "== trace $v rc=$?"
  python3 tools/bench/csla_trace_summary.py trace_$v.csv > sum_$v.txt 2>&1
  grep -E "^(sparse|dense)|tile loop|clock|cycles" sum_$v.txt | head -8
done
mkdir -p "$OUT" && tar czf "$OUT/s20_call1.tgz" log_*.txt sum_*.txt obj_*/link.log
