#!/usr/bin/env bash
# Session 20, calls 2, 4, 5 and 6: build the probe variants src_<v> beside this script, time them
# in three alternated rounds (checks in round 1; call 4 checked base only, its variants being wrong
# on purpose), then trace each; the logs go to $OUT/s20_call<N>.tgz.
#   call 2: variants_run.sh 2 "base poly4 poly8 poly16"
#   call 4: variants_run.sh 4 "base noffma noadd" base
#   call 5: variants_run.sh 5 "base tcsum"
#   call 6: variants_run.sh 6 "base late lateb late2"
cd "$(dirname "$0")"
N=${1:?call number}
V=${2:?variants}
CHECKED=${3:-$V}  # the variants checked in round 1
bash tools/bench/probe_variants.sh build . $V 2>&1 | tail -4
for r in 1 2 3; do for v in $V; do
  extra="--no-check"
  [ $r = 1 ] && [[ " $CHECKED " == *" $v "* ]] && extra=""
  timeout 100 ./bin_$v --impls c --dense --iters 30 $extra > log_${v}_$r.txt 2>&1
  printf "round %s %-7s rc=%s " $r $v $?
  grep -A1 -E "^(infinity-8b-1024 block 64|dense block 64|infinity-8b-1024 block 128|var-d30-512 block 64)" log_${v}_$r.txt | grep "csla impl" | awk '{printf "%s ", $5}'
  grep -E "checks:" log_${v}_$r.txt | tr '\n' ' '; echo
done; done
for v in $V; do
  timeout 60 ./bin_$v --impls c --no-check --trace trace_$v.csv > log_trace_$v.txt 2>&1
  python3 tools/bench/csla_trace_summary.py trace_$v.csv > sum_$v.txt 2>&1
  echo "== trace $v"; grep -A12 "^sparse schedule 12 run 1" sum_$v.txt | grep -E "span|tile loop"
done
mkdir -p "$OUT" && tar czf "$OUT/s20_call$N.tgz" log_*.txt sum_*.txt
