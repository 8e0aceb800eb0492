#!/usr/bin/env bash
# Issue #34's scaling check on a machine with several GPUs: the same eval job on 1 GPU and on N
# (torchrun, one process per GPU), each from a clean output folder, wall time of the whole job
# (model set-up included) and whether the results equal (every number but the timings).
# Call (2-GPU machine; carry the device deps as tools/device/lead_verify.sh says):
#   BUILD=/tmp/b NGPU=2 bash tools/device/eval_scaling.sh [MANIFEST]
# MANIFEST defaults to tools/device/configs/eval_scale_d16.json (VAR-d16 random weights, 256^2,
# bf16, batch 64, 12,000 images per config, baseline + skip2). Session 30 ran it before the eval
# job's out-of-memory retry: both runs stopped out of memory (bench/results/2026-11-29-h200/session30);
# session 31, with the retry: neither finished within 120 s, and only torchrun's traceback was kept
# (so each run's whole output now goes to $OUT/scale_log_N.txt.gz). Give each run 300 s or more.
# Session 32 found why (no GPU): baseline and skip2 alternated between four graph sets (batches of
# 64 and the seeds' last 58), one more than the graph cache keeps; shards of one shape now run
# together and the progress lines count the runs that captured graphs. Session 33 (2x H200): 130 s
# of job time on 1 GPU, 67 s on 2 (1.94x), same metrics, 2 captures per rank past the warm-up;
# result.json now carries the job's own rate (`job`), compared below.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=${1:-tools/device/configs/eval_scale_d16.json}
CLI=${BUILD:-/tmp/b}/app/cli/varscope-cli
NGPU=${NGPU:-2}
for n in 1 "$NGPU"; do
  rm -rf /tmp/scale-$n; S=$(date +%s.%N)
  timeout "${SCALE_TIMEOUT:-300}" torchrun --no-python --nproc-per-node $n --master-port $((29500 + n)) \
    "$CLI" eval "$M" --out /tmp/scale-$n > /tmp/scale_$n.txt 2>&1
  rc=$?; E=$(date +%s.%N)
  echo "gpus=$n rc=$rc wall_s=$(python3 -c "print(round($E - $S, 2))")"
  grep -v "shard [0-9]*/" /tmp/scale_$n.txt | grep -v "^ \|^Traceback\|^  File\|^torch\.\|^=\+$" | tail -12
  grep "shard [0-9]*/" /tmp/scale_$n.txt | tail -"$n"  # each rank's last progress line (graph captures)
  gzip -c /tmp/scale_$n.txt > "$OUT/scale_log_$n.txt.gz"  # the job's own output, kept whole
  cp /tmp/scale-$n/result.json "$OUT/scale_result_$n.json" 2>/dev/null
done | tee "$OUT/scale.txt"
python3 - "$NGPU" <<'PY' | tee -a "$OUT/scale.txt"
import json, sys
n = sys.argv[1]
a, b = (json.load(open(f"/tmp/scale-{k}/result.json")) for k in ("1", n))
drop = ("images_per_s", "speedup", "latency_ms_per_image", "peak_memory_bytes")
strip = lambda r: [{k: v for k, v in c.items() if k not in drop} for c in r["configs"]]
print(f"same metrics 1 vs {n} GPUs:", strip(a) == strip(b))
ja, jb = a.get("job"), b.get("job")  # the job's own throughput (results written after session 33)
if ja and jb:
    print(f"job images/s: 1 GPU {ja['images_per_s']:.1f}, {n} GPUs {jb['images_per_s']:.1f}:"
          f" {jb['images_per_s'] / ja['images_per_s']:.3f}x")
PY
