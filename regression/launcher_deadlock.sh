#!/usr/bin/env bash
# launcher_deadlock.sh FMHPC [MPIEXEC]: reproduces, on purpose, the one hang
# of the kill campaign (issue 14): a rank killed inside its PMIx connect
# handshake. mpirun then reports the lost rank and ends the other ranks, but
# itself deadlocks in PMIx_server_finalize (Open MPI 4.1.4 with PMIx 4.2.2,
# Debian 12): every rank is gone and mpirun never exits. Not fmhpc's to fix;
# regression/kill_campaign.sh kills such a launcher 20 s after its last rank
# ended. Exit 0: reproduced (mpirun still up 20 s after every rank ended);
# 1: mpirun ended by itself (a fixed launcher, or the shim no longer hits).
# A manual check, not in ctest: it depends on PMIx internals.
set -euo pipefail
FMHPC=$1 MPIEXEC=${2:-mpiexec}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cc -shared -fPIC -O1 -o "$D/shim.so" "$(dirname "$0")/launcher_deadlock_shim.c" -ldl
FMHPC_SHIM_DELAY_US=200000 LD_PRELOAD=$D/shim.so "$MPIEXEC" -n 3 "$FMHPC" --version > "$D/log" 2>&1 &
job=$!
alive() { [ -e "/proc/$1" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat" 2> /dev/null; }
t0=$SECONDS gone=''
while kill -0 "$job" 2> /dev/null && [ $((SECONDS - t0)) -lt 60 ]; do
  up=0
  for c in $(pgrep -P "$job" || true); do alive "$c" && up=1; done
  if [ $up = 1 ]; then gone=''; elif [ -z "$gone" ]; then gone=$SECONDS; fi
  [ -z "$gone" ] || [ $((SECONDS - gone)) -lt 20 ] || break
  sleep 0.2
done
grep -v '^---' "$D/log" || true
if kill -0 "$job" 2> /dev/null; then
  gdb -batch -p "$job" -ex bt 2> /dev/null | grep -E '^#' | head -8 || true
  kill -KILL "$job"
  echo "launcher_deadlock: reproduced: every rank ended, mpirun still up 20 s later (killed)"
  exit 0
fi
echo "launcher_deadlock: not reproduced: mpirun ended by itself"
exit 1
