#!/usr/bin/env bash
# Session 20: generate-mar on CUDA, printing progress (not --quiet), with and without the head
# caches: cuda_graphs in the timings JSON (the step printer takes no records since ae93055).
CLI=/tmp/build/app/cli/varscope-cli
for extra in "" "--head-cfg-period 2"; do
  rm -f /tmp/mar.safetensors /tmp/mar_t.json
  timeout 200 $CLI generate-mar --random mar_base --num-iter 16 --cfg 3 --device cuda --seed 1 \
    --tokens-out /tmp/mar.safetensors --timings-json /tmp/mar_t.json --repeat 2 $extra > /tmp/mar.log 2>&1
  echo "generate-mar $extra rc=$? $(python3 -c 'import json;d=json.load(open("/tmp/mar_t.json"));print("cuda_graphs", d.get("cuda_graphs"), "total_ms", d.get("total_ms", d.get("totals_ms")))' 2>&1)"
  grep -E "total" /tmp/mar.log | tail -2
done
