# shellcheck shell=bash
# Helpers shared by start.sh and stop.sh (sourced, not run).
#
# The daemons we start are listed in $DAEMONS, one "<name> <pid> <start time>"
# line each. stop.sh signals a PID only while /proc still shows the same name
# and start time, so a PID the kernel has since reused for an unrelated
# process is never hit.

STATE_DIR=/run/nemo-local-slurm
DAEMONS=$STATE_DIR/daemons
# Every file we write carries this line; we never overwrite or delete one without it.
OWNER_MARK="# written by nemo_launcher .ci/local_slurm/start.sh"

log() { echo "[local-slurm] $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# Re-run the calling script as root: it installs packages, writes /etc/slurm
# and runs the daemons as root.
become_root() {
  ((EUID == 0)) && return 0
  command -v sudo >/dev/null 2>&1 || die "must run as root (sudo is not available)"
  exec sudo -E bash "$0" "$@"
}

# Field 22 of /proc/<pid>/stat (clock ticks after boot). The command name in
# field 2 may hold spaces, so count from the closing parenthesis.
process_start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  awk '{print $20}' <<<"$stat"
}

# daemon_alive <name> <pid> [<start time>]: that process exists, is not a
# zombie, is called <name> and (if given) started at <start time>.
daemon_alive() {
  local name=$1 pid=$2 start=${3:-} stat
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]] || return 1
  [[ -z $start || $(process_start_time "$pid") == "$start" ]]
}

# await_pidfile <file> <name>: print the PID once <file> names a live <name>
# (daemons write their pidfile after forking); fail after about 15 s.
await_pidfile() {
  local file=$1 name=$2 pid _
  for _ in {1..150}; do
    pid=$(cat "$file" 2>/dev/null || true)
    if daemon_alive "$name" "$pid"; then
      echo "$pid"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

remember_daemon() {
  local name=$1 pid=$2
  [[ -n $pid ]] || return 1
  echo "$name $pid $(process_start_time "$pid")" >>"$DAEMONS"
}

daemons_recorded() { [[ -s $DAEMONS ]]; }

all_recorded_daemons_alive() {
  local name pid start
  while read -r name pid start; do
    daemon_alive "$name" "$pid" "$start" || return 1
  done <"$DAEMONS"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

owned_or_absent() { [[ ! -e $1 ]] || grep -qF "$OWNER_MARK" "$1"; }

# write_owned_file <path> <mode> < content
write_owned_file() {
  local path=$1 mode=$2 tmp
  owned_or_absent "$path" || die "$path exists and was not written by this script; move it away first"
  tmp=$(mktemp)
  {
    echo "$OWNER_MARK"
    cat
  } >"$tmp"
  install -m "$mode" "$tmp" "$path"
  rm -f "$tmp"
}

remove_owned_file() {
  [[ -e $1 ]] && owned_or_absent "$1" && rm -f "$1"
  return 0
}
