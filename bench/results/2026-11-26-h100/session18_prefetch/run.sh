#!/usr/bin/env bash
# Session 18: first-touch L2 prefetch (variant pf) vs base, alternated rounds.
cd "$(dirname "$0")"
bash probe_variants.sh build . base pf
R=${ROUNDS:-3}
for r in $(seq 1 "$R"); do
  for cfg in "base:" "pf:" "pf:VARSCOPE_PF_D=0 VARSCOPE_PF_MODE=1" "pf:VARSCOPE_PF_D=0 VARSCOPE_PF_MODE=2" \
             "pf:VARSCOPE_PF_D=0"; do
    v=${cfg%%:*}; envs=${cfg#*:}
    tag="${v}_$(echo "$envs" | tr ' =' '_-')"
    extra=--no-check; [ "$r" = 1 ] && extra=""
    env $envs timeout 120 "./bin_$v" --impls c --dense --iters 30 $extra > "log_${tag}_$r.txt" 2>&1
    printf "round %s %-40s rc=%s " "$r" "$v $envs" $?
    grep -v "^pf lead" "log_${tag}_$r.txt" | grep -A1 -E "^(infinity-8b-1024 block 64|dense block 64|infinity-8b-1024 block 128|var-d30-512 block 64)" \
        | grep "csla impl" | awk '{printf "%s ", $5}'
    grep -E "checks:" "log_${tag}_$r.txt" | tr '\n' ' '
    echo
  done
done
grep -h "pf lead" log_*_1.txt | sort -u | cut -c1-400
