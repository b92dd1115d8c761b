# shellcheck shell=bash
# Helpers for the cluster validation tools (sourced, not run).
#
# Every test job prints one machine-readable line per verdict, which the
# report reads back from the job's log:
#   CV_RESULT dcgm <node> PASS|FAIL <detail>
#   CV_RESULT nccl <node>,<node>[,...] PASS|FAIL <detail>
# Keeping verdicts in the logs means a report can be rebuilt from a results
# folder at any time (common/report.sh), and manual sbatch runs get the same
# verdict lines as runs started by cluster_validation.sh.

CV_COMMON_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034  # read by the scripts that source this file
CV_REPO_ROOT=$(cd "$CV_COMMON_DIR/../.." && pwd)

cv_log() { echo "[cluster-validation] $*" >&2; }

# Print the nodes of a Slurm host list (x8a100-[0000-0003],y1) one per line.
cv_expand_nodelist() {
  scontrol show hostnames "$1"
}

# Load the cloud's settings (NCCL env, default thresholds) from <cloud dir>/env.sh,
# and point NCCL at the cloud's topology file when it has one. The path NCCL
# sees differs when the test runs in a container, where the cloud folder is
# mounted at /nccl, as the launcher's env presets do for training jobs.
cv_load_cloud() {
  local cloud_dir=$1
  [[ -f $cloud_dir/env.sh ]] || {
    cv_log "no env.sh in $cloud_dir; run the tools from a cloud folder (csp_tools/aws, azure or oci)"
    return 1
  }
  # shellcheck source=/dev/null
  source "$cloud_dir/env.sh"
  if [[ -f $cloud_dir/topo.xml && -z ${NCCL_TOPO_FILE:-} ]]; then
    if [[ -n ${CV_CONTAINER:-} ]]; then
      export NCCL_TOPO_FILE=/nccl/topo.xml
    else
      export NCCL_TOPO_FILE=$cloud_dir/topo.xml
    fi
  fi
}

# srun flags that run a step in CV_CONTAINER (pyxis), one per line; none without it.
cv_container_flags() {
  local cloud_dir=$1 mounts
  [[ -n ${CV_CONTAINER:-} ]] || return 0
  mounts="$cloud_dir:/nccl"
  [[ -n ${CV_NCCL_TESTS_DIR:-} ]] && mounts+=",$CV_NCCL_TESTS_DIR:$CV_NCCL_TESTS_DIR"
  printf '%s\n' "--container-image=$CV_CONTAINER" "--container-mounts=$mounts" --no-container-mount-home
}

# The all_reduce_perf the NCCL test runs: CV_NCCL_TESTS_DIR/build/all_reduce_perf
# when that folder is set, else the one on the nodes' PATH.
cv_all_reduce_perf() {
  if [[ -n ${CV_NCCL_TESTS_DIR:-} ]]; then
    echo "$CV_NCCL_TESTS_DIR/build/all_reduce_perf"
  else
    echo all_reduce_perf
  fi
}

# cv_nccl_verdict <all_reduce_perf output file> <threshold GB/s>
# Prints "PASS|FAIL <detail>". Fails on a missing average (the run crashed),
# on data errors (#wrong or out-of-bounds values) and on an average bus
# bandwidth below the threshold.
cv_nccl_verdict() {
  local output=$1 threshold=$2
  awk -v threshold="$threshold" '
    /^# Avg bus bandwidth/ { avg = $NF; have_avg = 1 }
    /^# Out of bounds values/ { if ($7 + 0 != 0) oob = $7 }
    # Data rows: size count type redop root time algbw busbw #wrong (out-of-place), then in-place.
    /^ *[0-9]+ +[0-9]+ +[a-z0-9_]+ +[a-z]+ +-?[0-9]+ / {
      if ($9 ~ /^[0-9]+$/ && $9 > 0) wrong += $9
      if ($13 ~ /^[0-9]+$/ && $13 > 0) wrong += $13
    }
    END {
      if (!have_avg) { print "FAIL no \"Avg bus bandwidth\" line: all_reduce_perf did not finish"; exit }
      if (wrong > 0) { printf "FAIL busbw=%s GB/s but %d wrong results\n", avg, wrong; exit }
      if (oob != "") { printf "FAIL busbw=%s GB/s but %s out-of-bounds values\n", avg, oob; exit }
      if (avg + 0 < threshold + 0) { printf "FAIL busbw=%s GB/s < %s GB/s\n", avg, threshold; exit }
      printf "PASS busbw=%s GB/s >= %s GB/s\n", avg, threshold
    }' "$output"
}

# cv_dcgm_verdict <dcgmi output file> <dcgmi exit status>
# Prints "PASS|FAIL <detail>": FAIL when dcgmi exited non-zero or any result
# cell reads "Fail" (older DCGM releases exit 0 even when a test fails).
cv_dcgm_verdict() {
  local output=$1 status=$2 failed
  # Table rows look like "| Memory Bandwidth | Fail - GPU: 3 |".
  failed=$(awk -F'|' 'NF >= 3 && $3 ~ /^ *Fail/ {
      name = $2; result = $3
      gsub(/^ +| +$/, "", name); gsub(/^ +| +$/, "", result)
      printf "%s%s: %s", sep, name, result; sep = "; "
    }' "$output")
  if [[ -n $failed ]]; then
    echo "FAIL $failed"
  elif [[ $status != 0 ]]; then
    echo "FAIL dcgmi exited with status $status: $(grep -m1 -iE 'error|fail' "$output" || tail -n1 "$output")"
  else
    echo "PASS"
  fi
}

# Run one node's GPU diagnostics; called through srun, once per node, by dcgmi_diag.sh.
# cv_dcgm_on_node <run level> <log folder>
cv_dcgm_on_node() {
  local level=$1 log_dir=$2 node=${SLURMD_NODENAME:-$(hostname)} log status=0
  log=$log_dir/dcgmi-$node.log
  if ! command -v dcgmi >/dev/null 2>&1; then
    echo "CV_RESULT dcgm $node FAIL dcgmi is not installed on this node (install NVIDIA DCGM)"
    return 0
  fi
  dcgmi diag -r "$level" >"$log" 2>&1 || status=$?
  echo "CV_RESULT dcgm $node $(cv_dcgm_verdict "$log" "$status") (log: $log)"
}
