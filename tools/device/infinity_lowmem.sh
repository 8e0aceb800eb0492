#!/usr/bin/env bash
# Issue #32's low-memory check: Infinity-8B (random weights), 1024^2, bf16, batch 1, the T5
# offload, with a random flan-t5-xl-shaped T5 folder made on the machine (Hugging Face
# transformers there), each run's GPU memory sampled by nvidia-smi every 200 ms (what the card
# must hold: the process's context, caching allocator and graph pools). One run per accelerator
# argument, in parallel on GPUs 0, 1, ... (one GPU each; fewer GPUs: in turn).
#   BUILD=/tmp/b bash tools/device/infinity_lowmem.sh "" ams_kv
# LOWMEM_GPUS: the GPUs to use (default all, e.g. "1" while GPU 0 trains).
# LOWMEM_EXTRA: more generate flags for every run, e.g. "--stream-blocks 21" (the exact run's
# block streaming: 21 of 40 blocks, ~0.39 GB each in bf16, cover its ~7.3 GB over 24 GiB);
# LOWMEM_TAG: a suffix of the runs' file names.
# Session 30 (bench/results/2026-11-29-h200/session30): 36.65 GiB, 26.55 with AMS-KV, before the
# release of the sampler's graphs ahead of the decode.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CLI=${BUILD:-/tmp/b}/app/cli/varscope-cli
[ -f /tmp/t5xl/config.json ] || python3 - <<'PY'
import torch
from transformers import T5Config, T5EncoderModel
c = T5Config(vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_heads=32,
             relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
             layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", is_encoder_decoder=False)
torch.manual_seed(0)
with torch.device("cuda"):
    T5EncoderModel(c).save_pretrained("/tmp/t5xl", max_shard_size="2GB")
PY
cp resources/models/emoji-t2i-t5/spiece.model /tmp/t5xl/
read -r -a GPUS <<< "${LOWMEM_GPUS:-$(seq -s ' ' 0 $(( $(nvidia-smi -L | wc -l) - 1 )))}"
NG=${#GPUS[@]}
run() {  # gpu accel
  local gpu=$1 accel=$2 tag=${2:-base}${LOWMEM_TAG:-}
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -i "$gpu" -lms 200 > "$OUT/lowmem_$tag.csv" &
  local sp=$!
  CUDA_VISIBLE_DEVICES=$gpu timeout "${LOWMEM_TIMEOUT:-240}" "$CLI" generate --random 8b --t5 /tmp/t5xl --t5-offload \
    --device cuda --precision bf16 --prompt "a red fox in the snow" --seed 0 ${accel:+--accel $accel} ${LOWMEM_EXTRA:-} \
    -o /tmp/fox_$tag.ppm --force > /tmp/gen_$tag.txt 2>&1
  echo "$tag rc=$?"; kill $sp
  python3 -c "
import csv
v = [float(r[1].split()[0]) for r in csv.reader(open('$OUT/lowmem_$tag.csv')) if len(r) > 1]
print('$tag peak MiB', max(v), '=', round(max(v) / 1024, 2), 'GiB')"
}
i=0
for a in "$@"; do
  run "${GPUS[$((i % NG))]}" "$a" &
  i=$((i + 1)); (( i % NG == 0 )) && wait
done
wait
