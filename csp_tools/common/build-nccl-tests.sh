#!/usr/bin/env bash
# Build NVIDIA's nccl-tests (all_reduce_perf and friends) with MPI, as a one-node Slurm batch job.
#
#   sbatch -N 1 csp_tools/<cloud>/build-nccl-tests.sh
#
# The binaries land in $CV_NCCL_TESTS_DIR/build (default:
# <repository>/results/nccl-tests/build), on the shared file system so every
# node runs the same build. cluster_validation.sh submits this job itself when
# it finds no all_reduce_perf. Settings (environment):
#   CV_NCCL_TESTS_DIR        where to clone and build
#   CV_NCCL_TESTS_VERSION    git tag (v2.13.10)
#   CV_NCCL_TESTS_REPO       git URL (https://github.com/NVIDIA/nccl-tests.git)
#   CUDA_HOME, NCCL_HOME, MPI_HOME
#                            toolkits; defaults: /usr/local/cuda, the system NCCL,
#                            and the MPI whose mpicc is on PATH
#   CV_CONTAINER             build inside this container image (pyxis) instead,
#                            e.g. the training image, which holds CUDA, NCCL and HPC-X
#SBATCH --job-name=cluster-validation-build-nccl-tests
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=00:30:00
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

dest=${CV_NCCL_TESTS_DIR:-$CV_REPO_ROOT/results/nccl-tests}
version=${CV_NCCL_TESTS_VERSION:-v2.13.10}
repo=${CV_NCCL_TESTS_REPO:-https://github.com/NVIDIA/nccl-tests.git}

if [[ -d $dest/.git ]]; then
  git -C "$dest" fetch --quiet --tags
else
  mkdir -p "$(dirname "$dest")"
  git clone --quiet "$repo" "$dest"
fi
git -C "$dest" checkout --quiet "$version"

# The build runs on a compute node, where the CUDA toolkit and MPI live.
# shellcheck disable=SC2016  # expanded by the inner shell, on the node
build='
  set -euo pipefail
  cd "$1"
  cuda=${CUDA_HOME:-/usr/local/cuda}
  mpi=${MPI_HOME:-}
  if [[ -z $mpi ]]; then
    mpicc=$(command -v mpicc) || { echo "no mpicc on PATH; set MPI_HOME" >&2; exit 1; }
    mpi=$(dirname "$(dirname "$mpicc")")
  fi
  make_args=(MPI=1 "MPI_HOME=$mpi" "CUDA_HOME=$cuda" -j "$(nproc)")
  [[ -n ${NCCL_HOME:-} ]] && make_args+=("NCCL_HOME=$NCCL_HOME")
  make "${make_args[@]}"
'
mapfile -t container_flags < <(CV_NCCL_TESTS_DIR=$dest cv_container_flags "$CV_CLOUD_DIR")
srun --nodes=1 --ntasks=1 "${container_flags[@]}" bash -c "$build" cv-build "$dest"
test -x "$dest/build/all_reduce_perf"
echo "built $dest/build/all_reduce_perf ($version)"
