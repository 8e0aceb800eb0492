#!/usr/bin/env bash
# One GPU-machine run for issue #6's batch-1 work (CUDA graphs): build the CLI and the GPU tests
# from a clean snapshot, run the GPU tests (graph == eager tokens among them), compare with the
# official VAR sampler (tools/parity/var_speed.py: d16/d30, batch 1/16, fp32/bf16, same weights
# and tokens), then `bench e2e` for the baseline (graphs on, and eager) vs the accelerators at the
# 256px schedule. Results land in $OUT.
# Needs (carried): .device/deps (packaging/device-deps.sh), .device/varref (a local copy of the
# official code's models/ and dist.py, never committed); SRC = a `git archive` snapshot.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/graphs_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
ROOT=$PWD
[ -d "$SRC/resources/models" ] || { rm -rf "$SRC/resources"; ln -s "$ROOT/resources" "$SRC/resources"; }
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$ROOT/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C /tmp/build -j16 varscope-cli varscope_gpu_tests > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
stamp built
# The two ceilings (METHOD.md): device-to-device copy bandwidth and a large bf16 / fp32 GEMM rate.
python3 - <<'PY'
import torch
def t(fn, n=10):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3
a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
print(f"ceiling: copy {2 * a.numel() / t(lambda: b.copy_(a)) / 1e12:.2f} TB/s (read + write)")
for dt in (torch.bfloat16, torch.float32):
    x = torch.randn(8192, 8192, device="cuda", dtype=dt); y = torch.randn_like(x)
    print(f"ceiling: {dt} GEMM {2 * 8192**3 / t(lambda: x @ y) / 1e12:.0f} TFLOP/s")
PY
/tmp/build/tests/varscope_gpu_tests > "$OUT/gpu_tests_graphs.log" 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/gpu_tests_graphs.log" | head -20
stamp tested
CLI=/tmp/build/app/cli/varscope-cli
PYTHONUNBUFFERED=1 timeout ${SPEED_TIMEOUT:-330} python3 "$SRC/tools/parity/var_speed.py" \
  --official "$ROOT/.device/varref" --cli "$CLI" --work /tmp/speed --out "$OUT/var_speed.json" \
  --depths ${DEPTHS:-16,30} --batches ${BATCHES:-1,16} 2>&1 | grep -v "^+ "
stamp speed
P256=1,2,3,4,5,6,8,10,13,16
$CLI bench e2e --random 30 --patch-nums $P256 --device cuda --precision bf16 --class 207 --seed 0 \
  --methods "${E2E_METHODS:-baseline;baseline@eager;skip;fastvar;sparvar;lazyvar;ams_kv;sparvar+skip;fastvar+ams_kv}" \
  --warmup 2 --repeat 5 --json "$OUT/e2e_d30_256_b1_bf16_graphs.json" 2>&1 | tail -13
stamp e2e-256
