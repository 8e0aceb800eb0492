#!/usr/bin/env bash
# One GPU-machine call for LazyMAR under whole-step CUDA graphs (issue #7, helper "graphs"): build
# the CLI and the GPU tests from a snapshot, run the MAR graph / LazyMAR / DiffLoss GPU tests,
# then `bench mar` MAR-B baseline vs LazyMAR with --compare-hook-graphs (LazyMAR timed again with
# its transformer eager, the previous path, in the same process), each under its own timeout.
# It is tools/device/lead_verify.sh with these defaults (its log: lead_verify.log).
# Call (snapshot as in common.md; carry [$S, .device/deps-x]):
#   cd $S && mkdir -p .device && ln -sfn ../../.device/deps-x .device/deps &&
#   DEADLINE_S=300 bash tools/device/lazymar_graphs.sh
# Env: DEADLINE_S (stop starting work), GTEST_FILTER, MAR_RUNS ("model:batch:methods:repeat ...";
# each JSON is tagged with its last method's name).
set -uo pipefail
runs=()
for run in ${MAR_RUNS:-mar_base:1:baseline,lazymar:3 mar_base:16:baseline,lazymar:1}; do
  IFS=: read -r M B METH R <<< "$run"
  runs+=("$M:$B:$METH:$R:$(basename "${METH##*,}" .json)::--compare-hook-graphs")
done
DEADLINE_S=${DEADLINE_S:-300} BUILD=${BUILD:-/tmp/build-lg} \
  GTEST_FILTER="${GTEST_FILTER:-MarGraph*:*LazyMar*:HeadMlp*:KernelsDiffLoss*}" \
  MAR_RUNS="${runs[*]}" exec bash "$(dirname "$0")/lead_verify.sh"
