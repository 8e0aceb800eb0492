#!/usr/bin/env bash
# ncu + SASS of the sm90 CSLA schedules at SparVAR's Table-1 shape (block 64), from a probe binary
# (tools/bench/csla_sm90_probe.cu, built with nvcc for sm_90a). One launch per schedule under ncu
# (probe --profile), metric lines only; then the opcode histogram of each schedule's d128 kernel.
#   PROBE=path/to/probe IMPLS=678 OUT=dir tools/bench/csla_sm90_ncu.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
PROBE=${PROBE:-./probe}
IMPLS=${IMPLS:-678}
mkdir -p "$OUT"
nvidia-smi -L
timeout 240 ncu --clock-control none --kernel-name regex:sm90 --print-details all \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section SchedulerStats --section WarpStateStats --section InstructionStats \
  --section LaunchStats --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum \
  "$PROBE" --profile --impls "$IMPLS" > "$OUT/ncu_raw.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_:<> ]*(kernel|Kernel)|Stall|stall_|Duration|Elapsed Cycles|Issue Active|Pipe .* Active|Throughput|Warp Cycles Per Issued|Stall|Achieved Occupancy|Registers|Executed Ipc|pipe_xu|pipe_shared|wavefronts|inst_executed.sum|Eligible|No Eligible|Active Warps" \
  "$OUT/ncu_raw.txt" | grep -v "^ *-" > "$OUT/ncu.txt"
cat "$OUT/ncu.txt" | cut -c1-150
for f in $(cuobjdump -sass "$PROBE" 2>/dev/null | grep -oE "Function : _ZN[^ ]*(ws_kernel|ws_wide_kernel|attention_kernel)ILi128E[^ ]*" | awk '{print $3}' | sort -u); do
  cuobjdump -sass -fun "$f" "$PROBE" > /tmp/k.sass 2>/dev/null
  echo "== $f: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' /tmp/k.sass) instructions"
  grep -oE '^ +/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_]+' /tmp/k.sass | awk '{print $NF}' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '
  echo
  case "$f" in *ws_kernel*Lb1ELi1E*|*ws_wide*) cp /tmp/k.sass "$OUT/$(echo "$f" | grep -oE 'ws_(wide_)?kernel').sass" ;; esac
done > "$OUT/sass_hist.txt" 2>&1
cut -c1-400 "$OUT/sass_hist.txt"
