#!/usr/bin/env bash
# Session 18: per-item overhead vs list fragmentation (synthetic single-run lists), H100.
cd "$(dirname "$0")"
bash ../../tools/bench/probe_variants.sh build . base
for r in 1 2 3; do
  for cfg in "" "VARSCOPE_PROBE_LISTS=lists/last_first.txt" "VARSCOPE_PROBE_LISTS=lists/lf_b.txt" \
             "VARSCOPE_PROBE_LISTS=lists/lf_k1.txt" "VARSCOPE_PROBE_LISTS=lists/lf_sinks_desc.txt" \
             "VARSCOPE_PROBE_LISTS=lists/lf_k1_k2.txt" "VARSCOPE_PROBE_LISTS=lists/lf_m8.txt"; do
    tag=$(echo "${cfg:-csla}" | tr ':= /.' '_____')
    extra=--no-check; [ "$r" = 1 ] && extra=""
    env $cfg timeout 120 ./bin_base --impls c --iters 30 $extra > "log_${tag}_$r.txt" 2>&1
    printf "round %s %-32s rc=%s " "$r" "${cfg:-csla lists}" $?
    grep -v -E "^(modrun|lists from)" "log_${tag}_$r.txt" | grep -A1 -E "^(infinity-8b-1024 block 64|dense block 64|infinity-8b-1024 block 128|var-d30-512 block 64)" | grep "csla impl" | awk '{printf "%s ", $5}'
    grep -E "checks:" "log_${tag}_$r.txt" | tr '\n' ' '
    echo
  done
done
