#!/usr/bin/env bash
# Trains the embedded emoji models on the GPU machine with the project's own CLI.
#   STAGE=vqvae  -> trains the VQVAE (resources/training/emoji-vqvae.json)
#   STAGE=var    -> trains the VAR on resources/models/emoji-vqvae.safetensors
#                   (VAR_CONFIG picks the config, default resources/training/emoji-var.json;
#                   emoji-var-d16.json grows the shipped d8 model to 16 blocks: INIT=<d8 file>)
#   STAGE=klvae  -> trains MAR's KL VAE (resources/training/emoji-klvae.json); without STEPS,
#                   a 60-step probe sizes the cosine schedule to MAX_SECONDS
#   STAGE=mar    -> trains the MAR (resources/training/emoji-mar.json) on the latents of
#                   resources/models/emoji-klvae.safetensors; same probe without STEPS
#   STAGE=infinity -> the embedded text-to-image transformer and its T5 on the shipped BSQ VAE and
#                   tokenizer (INF_CONFIG, default resources/training/emoji-infinity.json; INIT and
#                   INIT_T5 fine-tune: the later phases), then its prompt following on the held-out
#                   phrasings (eval-prompts, cfg 4, seeds 0-3; EVAL_TRAIN=1: the 128 training
#                   phrasings too); the T5 folder and those results come back as one tar
#                   (emoji-infinity-run.tar), an export over 16 MiB as shards; EVAL=0 skips the
#                   judging (the first calls of a run that spans several)
#   STAGE=emoji-features -> the eval metrics' emoji feature network
#                   (resources/training/emoji-features.json), then its cross-style check
#                   (emoji-features-google-only.json: trained on google, heldout_accuracy on
#                   twitter), copied out as emoji-emoji-features-google-only.* beside it
# Needs (git-ignored, carried): .device/deps and .device/data/emoji64.safetensors.xz (or .gz)
# (varscope-cli pack-emoji output; xz -9 is 15 MB vs gzip's 23 MB, which matters under the 64 MiB
# upload once the shipped models are tracked). MAX_SECONDS caps the training wall time;
# INIT/LR continue from earlier weights (var and mar). CALL_SECONDS (instead of MAX_SECONDS):
# the whole command's wall budget; MAX_SECONDS becomes what is left after the build minus
# RESERVE (default 75 s for the final evaluations, export and copies).
# Upload budget: the tracked models (~54 MB) + data (15 MB) exceed 64 MiB, so for a training call
# take the models that stage does not read out of the index for the call only
#   git rm --cached -q resources/models/emoji-var.safetensors ...; list them in .git/info/exclude
# and afterwards `git reset -q -- <them>` and drop the exclude lines (session 4 did this for MAR).
set -uo pipefail
OUT=${OUT:-/tmp/out}
STAGE=${STAGE:-vqvae}
mkdir -p "$OUT"
exec > >(tee "$OUT/train_${STAGE}.log") 2>&1
nvidia-smi -L
if [ -f .device/data/emoji64.safetensors.xz ]; then
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    .device/data/emoji64.safetensors.xz /tmp/emoji64.safetensors || exit 1
else
  gunzip -c .device/data/emoji64.safetensors.gz > /tmp/emoji64.safetensors || exit 1
fi
cmake -S . -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_BUILD_TESTS=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" >/dev/null || exit 1
ninja -C /tmp/build varscope-cli | tail -2 || exit 1
CLI=/tmp/build/app/cli/varscope-cli
if [ -n "${CALL_SECONDS:-}" ]; then
  MAX_SECONDS=$(( CALL_SECONDS - SECONDS - ${RESERVE:-75} ))
  echo "build took ${SECONDS} s; MAX_SECONDS=$MAX_SECONDS"
  [ "$MAX_SECONDS" -gt 30 ] || { echo "no time left to train"; exit 1; }
fi
# RUN_DIR: a run folder that outlives the call while the machine stays warm (a git-ignored path
# in the repo, e.g. build-dev/runs/p7): the next call resumes there (phase 7 spans three calls).
RUN=${RUN_DIR:-/tmp/runs/$STAGE}
if [ "$STAGE" = vqvae ]; then
  $CLI train vqvae --config resources/training/emoji-vqvae.json --data /tmp/emoji64.safetensors \
    --out "$RUN" ${MAX_SECONDS:+--max-seconds $MAX_SECONDS} 2>&1 | grep -v '^ ' | tail -40
elif [ "$STAGE" = klvae ] || [ "$STAGE" = mar ]; then
  KCFG=resources/training/emoji-$STAGE.json
  [ "$STAGE" = mar ] && VAE_ARG="--vae resources/models/emoji-klvae.safetensors" || VAE_ARG=
  if [ -z "${STEPS:-}" ] && [ -n "${MAX_SECONDS:-}" ]; then
    $CLI train $STAGE --config $KCFG --data /tmp/emoji64.safetensors $VAE_ARG --out /tmp/runs/probe --steps 60 >/dev/null 2>&1
    STEPS=$(python3 -c "import json; l=[json.loads(x) for x in open('/tmp/runs/probe/log.jsonl') if '\"step\"' in x]; print(int(0.95*$MAX_SECONDS*(l[-1]['step']-l[0]['step'])/(l[-1]['seconds']-l[0]['seconds'])))")
    echo "probe: $STEPS steps fit in $MAX_SECONDS s"
  fi
  $CLI train $STAGE --config $KCFG --data /tmp/emoji64.safetensors $VAE_ARG --out "$RUN" \
    ${MAX_SECONDS:+--max-seconds $MAX_SECONDS} ${STEPS:+--steps $STEPS} ${INIT:+--init $INIT} ${LR:+--lr $LR} \
    2>&1 | grep -v '^ ' | tail -60
elif [ "$STAGE" = emoji-features ]; then
  for CFG in emoji-features emoji-features-google-only; do
    $CLI train emoji-features --config resources/training/$CFG.json --data /tmp/emoji64.safetensors \
      --out /tmp/runs/$CFG ${MAX_SECONDS:+--max-seconds $MAX_SECONDS} ${STEPS:+--steps $STEPS} \
      2>&1 | grep -v '^ ' | tail -30
  done
  RUN2=/tmp/runs/emoji-features-google-only
  cp "$RUN2/export-fp16.safetensors" "$OUT/emoji-emoji-features-google-only.safetensors"
  cp "$RUN2/log.jsonl" "$OUT/log-emoji-features-google-only.jsonl"
  cp "$RUN2/report.json" "$OUT/report-emoji-features-google-only.json"
elif [ "$STAGE" = infinity ]; then
  M=resources/models
  $CLI train infinity --config ${INF_CONFIG:-resources/training/emoji-infinity.json} \
    --data /tmp/emoji64.safetensors --vae $M/emoji-t2i-bsq-vae.safetensors \
    --tokenizer $M/emoji-t2i-t5/spiece.model --run-dir "$RUN" --device cuda \
    ${MAX_SECONDS:+--max-seconds $MAX_SECONDS} ${STEPS:+--steps $STEPS} ${INIT:+--init $INIT} \
    ${INIT_T5:+--init-t5 $INIT_T5} 2>&1 | grep -v '^ ' | tail -60
  cp $M/emoji-t2i-t5/spiece.model "$RUN/t5-fp16/" 2>/dev/null
  # EVAL=0: a call in the middle of a run spanning several calls judges nothing (its time trains).
  [ "${EVAL:-1}" = 0 ] && SETS= || SETS="heldout ${EVAL_TRAIN:+train}"
  for SET in $SETS; do  # EVAL_TRAIN: session 41's pair of phrasing sets
    $CLI eval-prompts --data /tmp/emoji64.safetensors --infinity "$RUN/export-fp16.safetensors" \
      --vae $M/emoji-t2i-bsq-vae.safetensors --t5 "$RUN/t5-fp16" --device cuda --prompts-per-batch 64 \
      --phrasings $SET -o /tmp/pf-$SET 2>&1 | tail -4
    cp /tmp/pf-$SET/prompt_following.json "$RUN/prompt_following-$SET.json"
  done
  # One tar for the T5 folder and the judgements: with a sharded export, separate files would
  # pass the 8 files that come back.
  tar -C "$RUN" -cf "$OUT/emoji-infinity-run.tar" t5-fp16 $(for SET in $SETS; do echo prompt_following-$SET.json; done)
else
  $CLI train var --config ${VAR_CONFIG:-resources/training/emoji-var.json} --data /tmp/emoji64.safetensors \
    --vae resources/models/emoji-vqvae.safetensors --out "$RUN" ${MAX_SECONDS:+--max-seconds $MAX_SECONDS} \
    ${INIT:+--init $INIT} ${LR:+--lr $LR} ${STEPS:+--steps $STEPS} \
    2>&1 | grep -v '^ ' | tail -60
fi
# A file comes back only up to 16 MiB: shard writes an export that fits as one file, a larger one
# (a deeper transformer) as the index and shards it ships as.
$CLI shard "$RUN/export-fp16.safetensors" -o "$OUT/emoji-$STAGE.safetensors" --max-mib 16
[ -f "$RUN/export-raw-fp16.safetensors" ] && cp "$RUN/export-raw-fp16.safetensors" "$OUT/emoji-$STAGE-raw.safetensors"
cp "$RUN/log.jsonl" "$OUT/log-$STAGE.jsonl"
cp "$RUN/report.json" "$OUT/report-$STAGE.json"
ls -la "$OUT"
