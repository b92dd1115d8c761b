#!/usr/bin/env bash
# Print the verdicts of one cluster validation run and name the failing nodes.
#
#   bash csp_tools/common/report.sh results/cluster_validation/<run>
#
# cluster_validation.sh calls this when its jobs have ended; run it by hand to
# read an earlier run again. The run folder holds `plan`, one line per
# expected verdict ("<test> <subject> <job id> <log file>"), and the job logs
# with their CV_RESULT lines (see lib.sh).
#
# Blame: DCGM tests each node on its own. NCCL tests pairs; a node is named
# when every pair it was in failed. In a ring of three or more nodes each node
# is in two pairs, so one bad node fails both of its pairs while its two
# neighbours pass with their other partner. With only two nodes, a failed pair
# names both nodes, since either may be at fault.
# Exit status: 0 when everything passed, 1 otherwise.
set -euo pipefail

run_dir=${1:?usage: report.sh <cluster validation run folder>}
plan=$run_dir/plan
[[ -f $plan ]] || {
  echo "report.sh: $plan not found; is $run_dir a cluster validation run folder?" >&2
  exit 2
}

# verdict_of <test> <subject> <log>: the CV_RESULT verdict, or FAIL when the job left none.
verdict_of() {
  local test=$1 subject=$2 log=$3 line
  if [[ ! -f $log ]]; then
    echo "FAIL no log: the job never started (node down, drained or busy?)"
    return
  fi
  line=$(grep -m1 "^CV_RESULT $test $subject " "$log" || true)
  if [[ -z $line ]]; then
    echo "FAIL no result: the job ended early or was cancelled"
  else
    echo "${line#"CV_RESULT $test $subject "}"
  fi
}

declare -A failures=() pairs_of=() failed_pairs_of=()
dcgm_lines=() nccl_lines=() nodes=()
any_failure=0

note_node() {
  [[ -v "pairs_of[$1]" ]] && return 0
  pairs_of[$1]=0
  failed_pairs_of[$1]=0
  nodes+=("$1")
}

while read -r test subject job log; do
  [[ -z $test || $test == \#* ]] && continue
  verdict=$(verdict_of "$test" "$subject" "$log")
  [[ $verdict == FAIL* ]] && any_failure=1
  row=$(printf '  %-40s %s  (job %s, log %s)' "${subject//,/ }" "$verdict" "$job" "$(basename "$log")")
  case $test in
    dcgm)
      note_node "$subject"
      dcgm_lines+=("$row")
      [[ $verdict == FAIL* ]] && failures[$subject]+=" dcgm"
      ;;
    nccl)
      nccl_lines+=("$row")
      IFS=, read -r -a members <<<"$subject"
      for node in "${members[@]}"; do
        note_node "$node"
        pairs_of[$node]=$((pairs_of[$node] + 1))
        [[ $verdict == FAIL* ]] && failed_pairs_of[$node]=$((failed_pairs_of[$node] + 1))
      done
      ;;
    *) echo "report.sh: unknown test '$test' in $plan" >&2 ;;
  esac
done <"$plan"

for node in "${nodes[@]}"; do
  if ((pairs_of[$node] > 0 && failed_pairs_of[$node] == pairs_of[$node])); then
    failures[$node]+=" nccl"
  fi
done

if ((${#dcgm_lines[@]} > 0)); then
  echo "DCGM GPU diagnostics (one verdict per node):"
  printf '%s\n' "${dcgm_lines[@]}"
fi
if ((${#nccl_lines[@]} > 0)); then
  echo "NCCL all_reduce_perf bus bandwidth (one verdict per node pair):"
  printf '%s\n' "${nccl_lines[@]}"
fi
echo
if ((${#failures[@]} > 0)); then
  echo "FAILED NODES (replace or restart them, then validate again):"
  for node in "${nodes[@]}"; do
    [[ -v "failures[$node]" ]] || continue
    tests=${failures[$node]# }
    echo "  $node: ${tests// /, }"
  done
elif ((any_failure)); then
  echo "FAILED: an NCCL pair failed although each of its nodes passed with another partner;"
  echo "  check the link or switch between them and validate again."
else
  echo "PASSED: all ${#nodes[@]} nodes passed every test."
fi
exit "$any_failure"
