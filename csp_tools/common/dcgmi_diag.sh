#!/usr/bin/env bash
# GPU diagnostics (NVIDIA DCGM `dcgmi diag`) on every node of this job, as a Slurm batch job.
#
#   sbatch -p <partition> -w <node list> -o <job log file> csp_tools/<cloud>/dcgmi_diag.sh
#
# Each node writes its full dcgmi output to dcgmi-<node>.log in CV_LOG_DIR
# (default: the folder sbatch was run from) and prints one verdict line,
#   CV_RESULT dcgm <node> PASS|FAIL <failed tests>
# The job exits non-zero when any node fails. Settings (environment):
#   CV_DCGM_LEVEL=3   dcgmi diag run level: 1 quick (seconds), 2 medium (about
#                     2 minutes), 3 long (about 15-30 minutes), 4 extended
#SBATCH --job-name=cluster-validation-dcgm
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=01:00:00
set -euo pipefail

# Slurm runs a copy of this file from its spool folder, so $0 does not tell
# where the tools are; cluster_validation.sh passes the folder, and a manual
# sbatch is found through the path Slurm recorded for the job.
if [[ -z ${CV_CLOUD_DIR:-} ]]; then
  script=${BASH_SOURCE[0]}
  if [[ -n ${SLURM_JOB_ID:-} ]]; then
    script=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=//p')
    script=${script%" $*"}
  fi
  CV_CLOUD_DIR=$(cd "$(dirname "$script")" && pwd)
fi
# shellcheck source=csp_tools/common/lib.sh
source "$CV_CLOUD_DIR/../common/lib.sh"
cv_load_cloud "$CV_CLOUD_DIR"

level=${CV_DCGM_LEVEL:-3}
log_dir=${CV_LOG_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}
[[ $level =~ ^[1-4]$ ]] || { cv_log "CV_DCGM_LEVEL must be 1, 2, 3 or 4, got '$level'"; exit 2; }
mkdir -p "$log_dir"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
# One task per node; each runs its node's diagnostics and prints its verdict.
# shellcheck disable=SC2016  # $1.. belong to the inner shell
srun --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" --kill-on-bad-exit=0 \
  bash -c 'source "$1" && cv_dcgm_on_node "$2" "$3"' cv-dcgm \
  "$CV_COMMON_DIR/lib.sh" "$level" "$log_dir" | tee "$results"

# A node whose task died prints nothing; name it rather than pass silently.
failed=0
while read -r node; do
  if ! grep -q "^CV_RESULT dcgm $node " "$results"; then
    echo "CV_RESULT dcgm $node FAIL no result: the diagnostics task on this node did not finish"
    failed=1
  fi
done < <(cv_expand_nodelist "$SLURM_JOB_NODELIST")
grep -q '^CV_RESULT dcgm [^ ]* FAIL' "$results" && failed=1
exit "$failed"
