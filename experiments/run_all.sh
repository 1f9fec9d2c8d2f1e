#!/usr/bin/env bash
# Regenerate every figure of the paper-style evaluation: one sweep per experiment of
# conf/experiment/, each into outputs/experiments/NAME/ (figures in its figures/ folder).
# Re-running resumes: only missing points are computed; figures are redrawn.
#   experiments/run_all.sh                 # all experiments
#   experiments/run_all.sh executor.n_jobs=1   # extra overrides go to every sweep
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
for name in capacity_curve small_ratio_tuning max_freq_effect mooncake_fig9 all_policies \
    llama70b_dram_pool cluster_routers engine_fidelity s3fifo_libcachesim; do
  SECONDS=0
  "$PYTHON" -m sweep "+experiment=$name" "$@"
  echo "$name: ${SECONDS} s -> outputs/experiments/$name/figures" >&2
done
