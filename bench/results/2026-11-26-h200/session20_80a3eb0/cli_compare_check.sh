#!/usr/bin/env bash
# Session 20: varscope-cli compare on CUDA with the default warm-up: how each side was timed.
CLI=/tmp/build/app/cli/varscope-cli
for acc in '{"skip": {"last_n": 1}}' '{"ams_kv": {"enabled": true}}'; do
  rm -rf /tmp/cmp
  timeout 200 $CLI compare --random 2 --patch-nums 1,2,3,4 --class 1 --seed 2 --device cuda \
    --accel "$acc" -o /tmp/cmp > /tmp/cmp.log 2>&1
  echo "compare $acc rc=$? $(python3 -c 'import json;j=json.load(open("/tmp/cmp/metrics.json"));print("baseline graphs", j["baseline"]["cuda_graphs"], "accelerated graphs", j["accelerated"]["cuda_graphs"], "warmup", j["warmup_runs"], "speedup %.2f" % j["speedup"])' 2>&1)"
  grep -E "eagerly" /tmp/cmp.log
done
