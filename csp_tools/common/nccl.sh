#!/usr/bin/env bash
# NCCL all_reduce_perf across the nodes of this job (normally a pair), as a Slurm batch job.
#
#   sbatch -p <partition> -w <node 1>,<node 2> -o <job log file> csp_tools/<cloud>/nccl.sh
#
# Runs one rank per GPU (srun --mpi=pmix), 1 GiB to 8 GiB messages, and ends
# with a verdict line that compares the average bus bandwidth to a threshold:
#   CV_RESULT nccl <node>,<node> PASS|FAIL busbw=<GB/s> ...
# The job exits non-zero on FAIL. Settings (environment):
#   CV_GPUS_PER_NODE=8          ranks per node
#   CV_BUSBW_THRESHOLD=<cloud>  minimum average bus bandwidth in GB/s (env.sh sets the cloud's default)
#   CV_NCCL_TESTS_DIR           nccl-tests folder built by build-nccl-tests.sh; unset = all_reduce_perf on PATH
#   CV_CONTAINER                run in this container image (pyxis); the cloud folder is mounted at /nccl
#   CV_MPI=pmix                 srun --mpi plugin the nccl-tests MPI build talks to (pmix or pmi2)
#   CV_NCCL_TEST_ARGS           all_reduce_perf arguments (default "-b 1G -e 8G -f 2 -g 1")
#SBATCH --job-name=cluster-validation-nccl
#SBATCH --exclusive
#SBATCH --time=00:20:00
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

gpus=${CV_GPUS_PER_NODE:-8}
threshold=${CV_BUSBW_THRESHOLD:-${CV_DEFAULT_BUSBW_THRESHOLD:?env.sh of the cloud sets CV_DEFAULT_BUSBW_THRESHOLD}}
read -r -a test_args <<<"${CV_NCCL_TEST_ARGS:--b 1G -e 8G -f 2 -g 1}"
mapfile -t container_flags < <(cv_container_flags "$CV_CLOUD_DIR")
nodes=$(cv_expand_nodelist "$SLURM_JOB_NODELIST" | paste -sd,)

output=$(mktemp)
trap 'rm -f "$output"' EXIT
echo "all_reduce_perf on $nodes: $gpus ranks per node, threshold $threshold GB/s"
status=0
srun --ntasks-per-node="$gpus" --mpi="${CV_MPI:-pmix}" "${container_flags[@]}" \
  "$(cv_all_reduce_perf)" "${test_args[@]}" 2>&1 | tee "$output" || status=$?

verdict=$(cv_nccl_verdict "$output" "$threshold")
if ((status != 0)) && [[ $verdict == PASS* ]]; then
  verdict="FAIL srun exited with status $status"
fi
echo "CV_RESULT nccl $nodes $verdict"
[[ $verdict == PASS* ]]
