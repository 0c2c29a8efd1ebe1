#!/usr/bin/env bash
# Brings up Slurm on this one machine (slurmctld + slurmd, munge), as root,
# for `netgauge --local --hosts N --srun` and `srun -n N ...` tests:
#   scripts/slurm-local.sh start   # installs slurm-wlm and munge if missing
#   scripts/slurm-local.sh stop
# The node is this host (srun --overcommit runs more ranks than cores), one
# partition "local"; PMIx (mpi/pmix) is the default MPI plugin. Leaves
# nothing running after `stop`; the configuration lives in /etc/slurm.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "slurm-local: run as root" >&2; exit 1; }
cmd=${1:-start}
node=$(hostname -s)
conf=/etc/slurm/slurm.conf
case "$cmd" in
start)
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
  chown munge:munge /run/munge
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  # munged: started here only when not running; `stop` stops only that one.
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
    touch /run/slurm-local-started-munged
  fi
  cpus=$(nproc)
  cat > "$conf" <<CONF
ClusterName=netgauge-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmix
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 50); do
    sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
    sleep 0.2
  done
  sinfo
  ;;
stop)
  # By the pid files the daemons wrote (SlurmctldPidFile, SlurmdPidFile).
  for f in /run/slurmd.pid /run/slurmctld.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  if [ -e /run/slurm-local-started-munged ]; then
    [ -s /run/munge/munged.pid ] && kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f /run/slurm-local-started-munged
  fi
  ;;
*) echo "usage: slurm-local.sh start|stop" >&2; exit 2 ;;
esac
