#!/usr/bin/env bash
# One device call for the embedded emoji VAR (issue #3): builds varscope-cli, trains
# resources/training/emoji-var-d16.json (the shipped d8 model grown to 16 blocks, EMA, bf16
# autocast, int8 export, cosine sized to the time left) and, while the GPU trains, builds the CPU
# tests and runs the ones this touches. Run from a snapshot whose .device/{deps,data} are carried
# (data: .device/data/emoji64.safetensors.xz, from pack-emoji, xz -9).
#   CALL_SECONDS  wall budget of the whole command (default 560); training gets what the build
#                 leaves minus RESERVE (default 75 s: tokenising, evaluations, export, copies)
#   INIT          weights to start from (default the shipped d8 file); LR overrides the config
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } | tee "$OUT/device.txt"
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  .device/data/emoji64.safetensors.xz /tmp/emoji64.safetensors || exit 1
cmake -S . -B /tmp/b -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" >/dev/null || exit 1
ninja -C /tmp/b varscope-cli | tail -2 || exit 1
MAX=$(( ${CALL_SECONDS:-560} - SECONDS - ${RESERVE:-75} ))
echo "cli built at ${SECONDS} s; training for $MAX s"
[ "$MAX" -gt 30 ] || { echo "no time left to train"; exit 1; }
/tmp/b/app/cli/varscope-cli train var --config resources/training/emoji-var-d16.json \
  --data /tmp/emoji64.safetensors --vae resources/models/emoji-vqvae.safetensors \
  --init "${INIT:-resources/models/emoji-var.safetensors}" ${LR:+--lr $LR} --out /tmp/run \
  --max-seconds "$MAX" > "$OUT/train.log" 2>&1 &
TRAIN=$!
# The CPU tests build on the cores the training loop leaves free.
( nice ninja -C /tmp/b -j 12 varscope_tests > /tmp/tests_build.log 2>&1 || { tail -30 /tmp/tests_build.log; exit 1; }
  nice /tmp/b/tests/varscope_tests --gtest_filter='QuantInt8*:VarTrainUtils*:Training*:Checkpoint*:EmbeddedModel*:ModuleBinding*' ) \
  > "$OUT/tests.log" 2>&1
echo "tests rc $? at ${SECONDS} s"
wait $TRAIN
echo "train rc $? at ${SECONDS} s"
grep -v '^ ' "$OUT/train.log" | grep -v '"step"' | tail -20
grep '"step"' "$OUT/train.log" | awk 'NR % 10 == 1' | cut -c1-200
tail -3 "$OUT/tests.log"
cp /tmp/run/export-fp16.safetensors "$OUT/emoji-var.safetensors"
cp /tmp/run/export-raw-fp16.safetensors "$OUT/emoji-var-raw.safetensors"
cp /tmp/run/log.jsonl "$OUT/log-var.jsonl"
cp /tmp/run/report.json "$OUT/report-var.json"
ls -la "$OUT"
