#!/usr/bin/env bash
# Validate the GPU nodes of a cloud Slurm cluster and name the bad ones.
#
#   bash csp_tools/<cloud>/cluster_validation.sh --nodes=8 --nodelist=x8a100-[0000-0007] --partition=x8a100
#
# Run from a cloud folder (aws, azure, oci): the cloud's env.sh supplies the
# NCCL settings and the bandwidth threshold, and its topo.xml (if any) is used.
# Submits the tests as Slurm jobs, waits for them, prints a report and keeps
# every log under <results>/<date>-<time>/. Exit status: 0 all nodes passed,
# 1 a test failed, 2 bad arguments.
set -euo pipefail

CV_CLOUD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=csp_tools/common/lib.sh
source "$CV_CLOUD_DIR/../common/lib.sh"
CLOUD=$(basename "$CV_CLOUD_DIR")

usage() {
  cat <<EOF
Usage: bash csp_tools/$CLOUD/cluster_validation.sh --nodes=N --nodelist=LIST --partition=NAME [options]

Runs DCGM GPU diagnostics on every node and NCCL all_reduce_perf between pairs
of nodes (a ring: each node with its two neighbours), then lists the nodes that
failed which test. Logs go to <results dir>/<date>-<time>/.

Required (values as sinfo prints them):
  --nodes=N              number of nodes to test
  --nodelist=LIST        their names, e.g. x8a100-[0000-0007]
  --partition=NAME       the Slurm partition they belong to

Tests (default: both):
  --dcgm                 run the GPU diagnostics only
  --nccl                 run the NCCL bandwidth test only

Options:
  --results-dir=DIR      base folder for the logs (default: \$CV_RESULTS_DIR or
                         <repository>/results/cluster_validation)
  --nccl-tests-dir=DIR   nccl-tests folder whose build/all_reduce_perf to run; when
                         neither it nor all_reduce_perf on PATH exists, a build job
                         (build-nccl-tests.sh) is submitted first (default:
                         \$CV_NCCL_TESTS_DIR or <repository>/results/nccl-tests)
  --busbw-threshold=GBPS minimum average bus bandwidth of a node pair, in GB/s
                         (default for $CLOUD: ${CV_DEFAULT_BUSBW_THRESHOLD:-see env.sh})
  --dcgm-level=1..4      dcgmi diag run level (default 3, about 15-30 minutes)
  --gpus-per-node=N      NCCL ranks per node (default 8)
  --container=IMAGE      run the NCCL test in this image (pyxis/enroot)
  --account=NAME         Slurm account for the jobs
  --max-wait=MINUTES     give up on jobs that have not ended after this long and
                         cancel them (default 120)
  -h, --help             show this help
EOF
}

usage_error() {
  echo "cluster_validation.sh: $*" >&2
  echo "Run 'bash csp_tools/$CLOUD/cluster_validation.sh -h' for the usage." >&2
  exit 2
}

cv_load_cloud "$CV_CLOUD_DIR" || exit 2

nodes="" nodelist="" partition="" account="" container=""
run_dcgm=0 run_nccl=0
results_dir=${CV_RESULTS_DIR:-$CV_REPO_ROOT/results/cluster_validation}
nccl_tests_dir=${CV_NCCL_TESTS_DIR:-}
threshold=${CV_BUSBW_THRESHOLD:-${CV_DEFAULT_BUSBW_THRESHOLD:-}}
dcgm_level=3 gpus_per_node=8 max_wait_min=120

# Accept both --key=value and --key value.
while (($# > 0)); do
  arg=$1
  shift
  case $arg in
    -h | --help) usage; exit 0 ;;
    --dcgm) run_dcgm=1; continue ;;
    --nccl) run_nccl=1; continue ;;
    --*=*) key=${arg%%=*} value=${arg#*=} ;;
    --*)
      key=$arg
      (($# > 0)) || usage_error "$key needs a value"
      value=$1
      shift
      ;;
    *) usage_error "unexpected argument '$arg'" ;;
  esac
  case $key in
    --nodes) nodes=$value ;;
    --nodelist) nodelist=$value ;;
    --partition) partition=$value ;;
    --results-dir) results_dir=$value ;;
    --nccl-tests-dir) nccl_tests_dir=$value ;;
    --busbw-threshold) threshold=$value ;;
    --dcgm-level) dcgm_level=$value ;;
    --gpus-per-node) gpus_per_node=$value ;;
    --container) container=$value ;;
    --account) account=$value ;;
    --max-wait) max_wait_min=$value ;;
    *) usage_error "unknown option '$key'" ;;
  esac
done

missing=()
[[ -n $nodes ]] || missing+=(--nodes)
[[ -n $nodelist ]] || missing+=(--nodelist)
[[ -n $partition ]] || missing+=(--partition)
((${#missing[@]} == 0)) || usage_error "missing required option(s): ${missing[*]} (e.g. --nodes=8 --nodelist=x8a100-[0000-0007] --partition=x8a100)"
[[ $nodes =~ ^[1-9][0-9]*$ ]] || usage_error "--nodes must be a positive whole number, got '$nodes'"
[[ $dcgm_level =~ ^[1-4]$ ]] || usage_error "--dcgm-level must be 1, 2, 3 or 4, got '$dcgm_level'"
[[ $gpus_per_node =~ ^[1-9][0-9]*$ ]] || usage_error "--gpus-per-node must be a positive whole number, got '$gpus_per_node'"
[[ $max_wait_min =~ ^[1-9][0-9]*$ ]] || usage_error "--max-wait must be a positive number of minutes, got '$max_wait_min'"
[[ $threshold =~ ^[0-9]+([.][0-9]+)?$ ]] || usage_error "--busbw-threshold must be a number of GB/s, got '$threshold'"
((run_dcgm || run_nccl)) || { run_dcgm=1; run_nccl=1; }

command -v sbatch >/dev/null 2>&1 || usage_error "sbatch is not on PATH; run this on the cluster's login node"
scontrol show partition "$partition" >/dev/null 2>&1 ||
  usage_error "partition '$partition' does not exist; sinfo lists: $(sinfo -h -o %R | sort -u | paste -sd' ')"
mapfile -t node_names < <(cv_expand_nodelist "$nodelist" 2>/dev/null)
((${#node_names[@]} > 0)) || usage_error "--nodelist '$nodelist' is not a Slurm host list"
((${#node_names[@]} == nodes)) ||
  usage_error "--nodes=$nodes but --nodelist=$nodelist names ${#node_names[@]} node(s): ${node_names[*]}"
if ((run_nccl && nodes < 2)); then
  if ((run_dcgm)); then
    cv_log "NCCL node-pair test skipped: it needs at least 2 nodes"
    run_nccl=0
  else
    usage_error "--nccl needs at least 2 nodes, got $nodes"
  fi
fi

run_dir=$results_dir/$(date +%Y%m%d-%H%M%S)
suffix=1
while [[ -e $run_dir ]]; do run_dir=$results_dir/$(date +%Y%m%d-%H%M%S)-$((suffix++)); done
mkdir -p "$run_dir"
printf '# %s\n# <test> <subject> <job id> <log file>\n' "cluster_validation.sh for $CLOUD on $partition: ${node_names[*]}" >"$run_dir/plan"

# Options every job gets. GPUs are requested only where the partition has
# GPU GRES; asking a cluster without GRES for GPUs fails at submission.
common=(--parsable --partition="$partition" --exclusive)
[[ -n $account ]] && common+=(--account="$account")
has_gpu_gres=0
sinfo -h -p "$partition" -o %G | grep -q 'gpu' && has_gpu_gres=1
export CV_CLOUD_DIR CV_LOG_DIR=$run_dir CV_DCGM_LEVEL=$dcgm_level CV_GPUS_PER_NODE=$gpus_per_node
export CV_BUSBW_THRESHOLD=$threshold CV_CONTAINER=$container

# submit <sbatch args...>: sets $id and remembers it for the wait. Called
# directly, not in $( ), so that job_ids survives. When a submission fails,
# the jobs already queued are cancelled: a half-submitted validation would
# report the missing tests as failed nodes.
job_ids=()
submit() {
  id=$(sbatch "${common[@]}" "$@") || {
    cv_log "sbatch $* failed"
    ((${#job_ids[@]} == 0)) || scancel "${job_ids[@]}" 2>/dev/null || true
    exit 1
  }
  id=${id%%;*}
  job_ids+=("$id")
}

if ((run_dcgm)); then
  submit --nodes="$nodes" --nodelist="$nodelist" --ntasks-per-node=1 \
    --output="$run_dir/dcgmi_diag-%j.log" "$CV_CLOUD_DIR/dcgmi_diag.sh"
  for node in "${node_names[@]}"; do
    echo "dcgm $node $id $run_dir/dcgmi_diag-$id.log" >>"$run_dir/plan"
  done
  cv_log "DCGM diagnostics (level $dcgm_level): job $id on ${node_names[*]}"
fi

if ((run_nccl)); then
  # Use an existing build, or all_reduce_perf on PATH; otherwise build first.
  default_tests_dir=$CV_REPO_ROOT/results/nccl-tests
  dependency=()
  if [[ -z $nccl_tests_dir && ! -x $default_tests_dir/build/all_reduce_perf ]] &&
    command -v all_reduce_perf >/dev/null 2>&1; then
    cv_log "NCCL test: all_reduce_perf from PATH ($(command -v all_reduce_perf))"
  else
    nccl_tests_dir=${nccl_tests_dir:-$default_tests_dir}
    export CV_NCCL_TESTS_DIR=$nccl_tests_dir
    if [[ ! -x $nccl_tests_dir/build/all_reduce_perf ]]; then
      submit --nodes=1 --nodelist="${node_names[0]}" \
        --output="$run_dir/build-nccl-tests-%j.log" "$CV_CLOUD_DIR/build-nccl-tests.sh"
      dependency=(--dependency="afterok:$id" --kill-on-invalid-dep=yes)
      cv_log "no $nccl_tests_dir/build/all_reduce_perf: building it first (job $id)"
    fi
  fi
  gpu_request=()
  ((has_gpu_gres)) && gpu_request=(--gpus-per-node="$gpus_per_node")
  # Ring of pairs; with two nodes the ring is the one pair.
  pair_count=$nodes
  ((nodes == 2)) && pair_count=1
  for ((i = 0; i < pair_count; i++)); do
    a=${node_names[i]} b=${node_names[(i + 1) % nodes]}
    submit --nodes=2 --nodelist="$a,$b" --ntasks-per-node="$gpus_per_node" "${gpu_request[@]}" \
      "${dependency[@]}" --output="$run_dir/nccl-$a-$b-%j.log" "$CV_CLOUD_DIR/nccl.sh"
    echo "nccl $a,$b $id $run_dir/nccl-$a-$b-$id.log" >>"$run_dir/plan"
  done
  cv_log "NCCL all_reduce_perf (threshold $threshold GB/s): $pair_count pair job(s)"
fi

# Wait for every job to leave the queue; cancel what is still there after --max-wait.
# squeue answers "Invalid job id" once all listed jobs are gone; any other
# error (slurmctld busy or restarting) means "ask again".
jobs_left() {
  local out
  if out=$(squeue -h -o %i -j "$(IFS=,; echo "${job_ids[*]}")" 2>&1); then
    grep -c . <<<"$out" || true
  elif [[ $out == *"Invalid job id"* ]]; then
    echo 0
  else
    echo unknown
  fi
}
started=$SECONDS
deadline=$((started + max_wait_min * 60))
last_note=$SECONDS
while left=$(jobs_left) && [[ $left != 0 ]]; do
  if ((SECONDS >= deadline)); then
    cv_log "job(s) still queued or running after $max_wait_min minutes; cancelling them"
    scancel "${job_ids[@]}" 2>/dev/null || true
    break
  fi
  if ((SECONDS - last_note >= 60)); then
    cv_log "waiting for $left job(s)..."
    last_note=$SECONDS
  fi
  # Quick polls while short jobs finish; then gentle on the controller for the long ones.
  if ((SECONDS < started + 60)); then sleep 0.5; else sleep 10; fi
done

status=0
bash "$CV_COMMON_DIR/report.sh" "$run_dir" | tee "$run_dir/report.txt" || status=$?
echo "Logs and report: $run_dir"
exit "$status"
