#!/usr/bin/env bash
# Start a throwaway Slurm cluster on this machine for the project's tests and CI.
#
#   sudo .ci/local_slurm/start.sh          # 4 fake nodes, 8 fake GPUs each, fake pyxis
#   sudo .ci/local_slurm/stop.sh
#
# What you get (defaults): partition "debug" with nodes fakenode1..fakenode4 (four: the
# RLHF PPO job is a heterogeneous job of four groups, and Slurm gives each group its own nodes),
# each claiming 16 CPUs, this machine's memory and gres/gpu:8, plus a SPANK
# plugin that accepts the pyxis flags (--container-image, ...) and runs the
# command on the host. All slurmds run here, one per fake node; only
# SLURMD_NODENAME tells them apart inside a job. Debian's slurm 22.05 and munge
# are installed with apt when missing. Daemons are started directly (no systemd).
#
# Settings (environment; stop first to change them on a running cluster):
#   SLURM_LOCAL_NODES=4        fake nodes, named fakenode1..N
#   SLURM_LOCAL_CPUS=16        CPUs each node claims (more than the hardware is fine)
#   SLURM_LOCAL_MEM_MB=<real>  memory each node claims, in MB
#   SLURM_LOCAL_GPUS=8         fake GPUs per node; 0 configures no GRES at all
#   SLURM_LOCAL_PARTITION=debug
#   SLURM_LOCAL_FAKE_PYXIS=1   0 = no pyxis flags (srun then rejects --container-image)
#   SLURM_LOCAL_PMIX=1         install libpmix2 so `srun --mpi=pmix` works
#   SLURM_LOCAL_WAIT=90        seconds to wait for every node to become idle
#
# Running it again while its daemons are alive changes nothing and only waits
# for the nodes. It refuses to overwrite Slurm config files it did not write.
set -euo pipefail

NODES=${SLURM_LOCAL_NODES:-4}
CPUS=${SLURM_LOCAL_CPUS:-16}
MEM_MB=${SLURM_LOCAL_MEM_MB:-}
GPUS=${SLURM_LOCAL_GPUS:-8}
PARTITION=${SLURM_LOCAL_PARTITION:-debug}
FAKE_PYXIS=${SLURM_LOCAL_FAKE_PYXIS:-1}
PMIX=${SLURM_LOCAL_PMIX:-1}
WAIT_S=${SLURM_LOCAL_WAIT:-90}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=.ci/local_slurm/common.sh
source "$HERE/common.sh"

ETC=/etc/slurm
SPOOL=/var/spool/slurmd
FAKE_GPU_DIR=$SPOOL/fake-gpus
PYXIS_SO=/usr/local/lib/nemo-local-slurm/fake_pyxis.so
PYXIS_PLUGSTACK=$ETC/plugstack.conf.d/nemo-fake-pyxis.conf
FIRST_NODE_PORT=17001
started_at=$SECONDS

# Each fake node is one slurmd on this host, listening on its own port.
node_names() {
  local i
  for ((i = 1; i <= NODES; i++)); do echo "fakenode$i"; done
}

validate_settings() {
  local name value
  for name in NODES CPUS GPUS WAIT_S; do
    value=${!name}
    [[ $value =~ ^[0-9]+$ ]] || die "SLURM_LOCAL_${name%_S} must be a whole number, got '$value'"
  done
  ((NODES >= 1)) || die "SLURM_LOCAL_NODES must be at least 1"
  ((CPUS >= 1)) || die "SLURM_LOCAL_CPUS must be at least 1"
  [[ $PARTITION =~ ^[A-Za-z0-9_-]+$ ]] || die "SLURM_LOCAL_PARTITION '$PARTITION' is not a valid partition name"
}

# A daemon started by us keeps every descriptor it inherits. If the caller is a
# pipeline or a CI step that waits for its pipe to close, a daemon holding that
# pipe makes the caller hang until the cluster is stopped.
close_inherited_descriptors() {
  local fd
  for fd in "/proc/$$/fd/"*; do
    fd=${fd##*/}
    case $fd in
      0 | 1 | 2 | 255) ;;
      *) eval "exec $fd>&-" 2>/dev/null || true ;;
    esac
  done
}

install_packages() {
  local wanted=(slurmctld slurmd slurm-client munge) missing=() pkg blocker_added=0
  [[ $PMIX == 1 ]] && wanted+=(libpmix2)
  # spank.h and a compiler build the fake pyxis plugin.
  [[ $FAKE_PYXIS == 1 ]] && wanted+=(libslurm-dev gcc libc6-dev)
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  # Without this the packages' maintainer scripts would try to start the
  # daemons with the stock config (and fail, or start ones we do not track).
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    blocker_added=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [[ $blocker_added == 1 ]] && rm -f /usr/sbin/policy-rc.d
  log "packages installed after $((SECONDS - started_at))s"
}

# Slurm's mpi/pmix plugin dlopen()s .../pmix2/lib/libpmix.so, a name only the
# large libpmix-dev package ships. Pointing it at the runtime library suffices.
link_pmix_library() {
  [[ $PMIX == 1 ]] || return 0
  local lib
  lib=$(dpkg -L libpmix2 | grep -m1 '/pmix2/lib/libpmix\.so\.2$' || true)
  [[ -n $lib ]] || die "libpmix2 is installed but its libpmix.so.2 was not found"
  [[ -e ${lib%.2} ]] || ln -s libpmix.so.2 "${lib%.2}"
}

build_fake_pyxis() {
  [[ $FAKE_PYXIS == 1 ]] || return 0
  mkdir -p "$(dirname "$PYXIS_SO")"
  if [[ ! -e $PYXIS_SO || $HERE/fake_pyxis.c -nt $PYXIS_SO ]]; then
    gcc -O2 -Wall -Werror -shared -fPIC -o "$PYXIS_SO" "$HERE/fake_pyxis.c"
  fi
}

write_configs() {
  local names nodelist ports gres_opt="" gres_types="" files
  mapfile -t names < <(node_names)
  if ((NODES == 1)); then
    nodelist=${names[0]}
    ports=$FIRST_NODE_PORT
  else
    nodelist="fakenode[1-$NODES]"
    ports="[$FIRST_NODE_PORT-$((FIRST_NODE_PORT + NODES - 1))]"
  fi
  if [[ -z $MEM_MB ]]; then
    # Not `slurmd -C`: before slurm.conf exists it tries a DNS config lookup
    # and prints errors.
    MEM_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    [[ -n $MEM_MB ]] || die "could not read this machine's memory from /proc/meminfo; set SLURM_LOCAL_MEM_MB"
  fi
  if ((GPUS > 0)); then
    gres_opt=" Gres=gpu:$GPUS"
    gres_types="GresTypes=gpu"
  fi

  mkdir -p "$ETC/plugstack.conf.d" /var/spool/slurmctld "$SPOOL" /var/log/slurm /run/slurm
  write_owned_file "$ETC/slurm.conf" 644 <<EOF
ClusterName=nemolocal
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
# PMIx creates spmix_appdir_<job> under TmpFS; one shared /tmp makes the
# second fake node fail with "File exists".
TmpFS=$SPOOL/%n/tmp
# Track processes without cgroups and bind nothing, so no systemd is needed.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# Trust this file's CPUs, memory and GPUs over the hardware: the fake nodes
# claim more CPUs than the machine has, and GPUs it does not have.
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# Start jobs as soon as they are eligible; the defaults add 2-3 s to every
# dependency hop and array wave.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Reject at submit time what can never run (too many nodes, CPUs, GPUs) instead
# of leaving it pending forever, as a real cluster's limits would.
EnforcePartLimits=ALL
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Without accounting, this file is the record of finished jobs and exit codes.
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
$gres_types
ReturnToService=2
# Keep finished jobs visible to "scontrol show job" for an hour.
MinJobAge=3600
KillWait=5
# A requeued job may start again once its old credential has expired (120 s by default); tests of
# self-requeueing jobs should not wait that long.
AuthInfo=cred_expire=15
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=$nodelist NodeHostname=localhost NodeAddr=127.0.0.1 Port=$ports CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB$gres_opt State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

  # Slurm 22.05 fails to start on cgroup-v2 hosts without systemd unless told
  # to carry on; harmless on cgroup v1.
  write_owned_file "$ETC/cgroup.conf" 644 <<EOF
CgroupPlugin=autodetect
IgnoreSystemdOnFailure=yes
EOF

  if ((GPUS > 0)); then
    # gres/gpu drops GPUs that have no device file, and the node is then
    # drained for reporting fewer GPUs than configured. Links to /dev/null are
    # character devices, which is all the check looks at.
    mkdir -p "$FAKE_GPU_DIR"
    local i
    for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$FAKE_GPU_DIR/gpu$i"; done
    if ((GPUS == 1)); then files=$FAKE_GPU_DIR/gpu0; else files="$FAKE_GPU_DIR/gpu[0-$((GPUS - 1))]"; fi
    write_owned_file "$ETC/gres.conf" 644 <<EOF
NodeName=$nodelist Name=gpu File=$files
EOF
  else
    remove_owned_file "$ETC/gres.conf"
  fi

  # plugstack.conf may belong to the admin; only add our include line if absent.
  if [[ ! -e $ETC/plugstack.conf ]]; then
    write_owned_file "$ETC/plugstack.conf" 644 <<EOF
include $ETC/plugstack.conf.d/*.conf
EOF
  fi
  if [[ $FAKE_PYXIS == 1 ]]; then
    write_owned_file "$PYXIS_PLUGSTACK" 644 <<EOF
optional $PYXIS_SO
EOF
  else
    remove_owned_file "$PYXIS_PLUGSTACK"
  fi

  # Jobs compute MASTER_ADDR from the node list, so the fake names must resolve.
  if ! getent hosts "${names[-1]}" >/dev/null; then
    echo "127.0.0.1 ${names[*]} $OWNER_MARK" >>/etc/hosts
  fi
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged is already running; using it (stop.sh will leave it alone)"
    return 0
  fi
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    head -c 1024 /dev/urandom >/etc/munge/munge.key
  fi
  # Debian's package creates the key but not /run/munge (systemd would).
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
  chmod 400 /etc/munge/munge.key
  chmod 755 /run/munge
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --force
  remember_daemon munged "$(await_pidfile /run/munge/munged.pid munged)" ||
    die "munged did not start; see /var/log/munge/munged.log"
  local _
  for _ in {1..50}; do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munged started but does not answer; see /var/log/munge/munged.log"
}

start_slurm_daemons() {
  local node
  rm -f /run/slurm/slurmctld.pid
  # -c: start from empty state; a stale job or node list from an earlier run
  # with other settings would confuse the tests.
  slurmctld -c
  remember_daemon slurmctld "$(await_pidfile /run/slurm/slurmctld.pid slurmctld)" ||
    die "slurmctld did not start; see /var/log/slurm/slurmctld.log"
  for node in $(node_names); do
    # Credentials kept from an earlier run reject job ids that slurmctld -c reuses.
    rm -rf "${SPOOL:?}/$node"
    mkdir -p "$SPOOL/$node/tmp"
    chmod 1777 "$SPOOL/$node/tmp"
    rm -f "/run/slurm/slurmd-$node.pid"
    slurmd -N "$node"
    remember_daemon slurmd "$(await_pidfile "/run/slurm/slurmd-$node.pid" slurmd)" ||
      die "slurmd for $node did not start; see /var/log/slurm/slurmd-$node.log"
  done
}

wait_until_idle() {
  local deadline=$((SECONDS + WAIT_S)) states=""
  while ((SECONDS < deadline)); do
    states=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | paste -sd, || true)
    [[ $states == idle ]] && return 0
    # A node that registered too early, or with an earlier config, can end up
    # drained or down; it is ours, so put it back in service.
    if [[ $states == *drain* || $states == *down* ]]; then
      scontrol update nodename=ALL state=resume >/dev/null 2>&1 || true
    fi
    sleep 0.5
  done
  sinfo -N -o '%N %T %E' >&2 || true
  die "nodes are not idle after ${WAIT_S}s (states: ${states:-none}); see /var/log/slurm/"
}

main() {
  become_root "$@"
  validate_settings
  close_inherited_descriptors
  mkdir -p "$STATE_DIR"

  if daemons_recorded; then
    if all_recorded_daemons_alive; then
      log "already running; settings unchanged (run stop.sh first to change them)"
      wait_until_idle
      sinfo >&2
      return 0
    fi
    log "some daemons of the earlier start are gone; stopping the rest and starting again"
    bash "$HERE/stop.sh"
  fi

  local port
  for port in 6817 $(seq "$FIRST_NODE_PORT" $((FIRST_NODE_PORT + NODES - 1))); do
    port_in_use "$port" && die "port $port is in use by a program this script did not start"
  done

  install_packages
  link_pmix_library
  build_fake_pyxis
  write_configs
  : >"$DAEMONS"
  start_munge
  start_slurm_daemons
  wait_until_idle
  sinfo >&2
  log "ready after $((SECONDS - started_at))s: $NODES node(s) x $CPUS CPUs x $GPUS GPUs, partition $PARTITION, fake pyxis=$FAKE_PYXIS"
}

main "$@"
