#!/usr/bin/env bash
# Stop the local Slurm cluster that start.sh brought up.
#
#   sudo .ci/local_slurm/stop.sh
#
# Cancels every job first (a job step outliving its slurmd would keep running
# unsupervised), then ends only the daemons start.sh recorded, newest first.
# A munged that was already running before start.sh is left alone. Packages and
# /etc/slurm stay, so the next start takes about a second.
# SLURM_LOCAL_STOP_GRACE (20): seconds a daemon gets after SIGTERM before SIGKILL.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=.ci/local_slurm/common.sh
source "$HERE/common.sh"
GRACE_S=${SLURM_LOCAL_STOP_GRACE:-20}

cancel_all_jobs() {
  local jobs _
  scontrol ping >/dev/null 2>&1 || return 0
  jobs=$(squeue -h -o '%A' 2>/dev/null | sort -u)
  [[ -n $jobs ]] || return 0
  log "cancelling jobs: $(paste -sd' ' <<<"$jobs")"
  # shellcheck disable=SC2086  # one job id per word
  scancel $jobs 2>/dev/null || true
  for _ in {1..60}; do
    [[ -z $(squeue -h -o '%A' 2>/dev/null) ]] && return 0
    sleep 0.5
  done
  log "some jobs are still listed after 30s; stopping the daemons anyway"
}

controller_is_ours() {
  local name pid start
  while read -r name pid start; do
    [[ $name == slurmctld ]] && daemon_alive "$name" "$pid" "$start" && return 0
  done <"$DAEMONS"
  return 1
}

stop_daemon() {
  local name=$1 pid=$2 start=$3 _
  if ! daemon_alive "$name" "$pid" "$start"; then
    log "$name ($pid) is already gone"
    return 0
  fi
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((GRACE_S * 10))); do
    daemon_alive "$name" "$pid" "$start" || return 0
    sleep 0.1
  done
  log "$name ($pid) still runs ${GRACE_S}s after SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

forget_fake_hostnames() {
  grep -qF "$OWNER_MARK" /etc/hosts 2>/dev/null || return 0
  local kept
  kept=$(grep -vF "$OWNER_MARK" /etc/hosts)
  # Rewrite in place rather than replace: /etc/hosts is often a bind mount.
  printf '%s\n' "$kept" >/etc/hosts
}

main() {
  become_root "$@"
  if ! daemons_recorded; then
    log "no daemons recorded in $DAEMONS; nothing to stop"
    forget_fake_hostnames
    return 0
  fi
  controller_is_ours && cancel_all_jobs
  local name pid start
  while read -r name pid start; do
    stop_daemon "$name" "$pid" "$start"
  done < <(tac "$DAEMONS")
  rm -f "$DAEMONS"
  forget_fake_hostnames
  log "stopped"
}

main "$@"
