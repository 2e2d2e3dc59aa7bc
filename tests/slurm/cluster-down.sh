#!/usr/bin/env bash
# cluster-down.sh DIR: stop what cluster-up.sh DIR started: cancel its jobs,
# then stop its slurmd, slurmctld and munged, each by the PID in its pid file
# and only when /proc/PID/comm names that daemon; never by name. Safe to call
# twice or when nothing runs. Exit 77 (skip; a failure when CI=true) when Slurm is not installed.
set -euo pipefail
source "$(dirname "$0")/../oracle.sh"

[ $# -ge 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
for exe in slurmctld munged; do
  fm_need_cmd "$exe" "slurm-wlm and munge"
done
log() { printf 'cluster-down: %s\n' "$*" >&2; }
[ -d "$1" ] || { log "$1 does not exist: nothing to stop"; exit 0; }
DIR=$(cd "$1" && pwd)
# The cluster's state: DIR, or a short directory under /tmp (cluster-up.sh).
ROOT=$DIR
if [ -s "$DIR/root" ]; then ROOT=$(<"$DIR/root"); fi
export SLURM_CONF=$ROOT/etc/slurm.conf
MUNGE=$ROOT/munge

pid_of() { # PIDFILE COMM: print the PID when it is alive and named COMM
  local pid
  [ -s "$1" ] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/comm" ] && [ "$(<"/proc/$pid/comm")" = "$2" ] || return 1
  echo "$pid"
}

# stop COMM PIDFILE...: SIGTERM each live daemon, wait up to 10 s, then SIGKILL.
stop() {
  local comm=$1 f pid; shift
  local -A live=()
  for f in "$@"; do
    if pid=$(pid_of "$f" "$comm"); then live[$pid]=$f; kill -TERM "$pid" 2>/dev/null || true; fi
  done
  [ ${#live[@]} -gt 0 ] || { log "$comm: none running"; return 0; }
  for _ in $(seq 1 50); do
    for pid in "${!live[@]}"; do
      if [ ! -d "/proc/$pid" ]; then log "$comm (pid $pid) stopped"; rm -f "${live[$pid]}"; unset "live[$pid]"; fi
    done
    [ ${#live[@]} -gt 0 ] || return 0
    sleep 0.2
  done
  for pid in "${!live[@]}"; do
    log "$comm (pid $pid) ignored SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; rm -f "${live[$pid]}"
  done
}

# 1. Cancel the jobs, so each slurmd reaps its slurmstepd and tasks.
if pid_of "$ROOT/run/slurmctld.pid" slurmctld >/dev/null && [ -f "$SLURM_CONF" ]; then
  jobs=$(squeue -h -o %i 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # job ids are plain numbers: split on purpose
    scancel --full $jobs 2>/dev/null || true
    for _ in $(seq 1 75); do [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break; sleep 0.2; done
  fi
fi

# 2. The daemons, in the reverse order of their start.
shopt -s nullglob
stop slurmd "$ROOT"/run/slurmd-*.pid
stop slurmctld "$ROOT/run/slurmctld.pid"
stop munged "$MUNGE/munged.pid"

# 3. Report (never kill) slurmstepd still alive: steps whose slurmd went
#    before it could reap them (or steps of another cluster on this machine).
left=
for c in /proc/[0-9]*/comm; do
  [ "$(cat "$c" 2>/dev/null || true)" = slurmstepd ] || continue
  p=${c%/comm}; left+=" ${p#/proc/}"
done
[ -z "$left" ] || log "WARNING: slurmstepd still running:$left"
# State under /tmp (deep build trees) goes with its cluster; the logs stay in DIR/log.
case $ROOT in
  /tmp/fmhpc-slurm-*)
    if [ -d "$ROOT/log" ]; then rm -rf "$DIR/log"; cp -r "$ROOT/log" "$DIR/log"; fi
    rm -rf "$ROOT" ;;
esac
echo "cluster down: $DIR"
