#!/usr/bin/env bash
# full_disk.sh FMHPC MPIEXEC WORK: a checkpoint write that meets a full disk
# (DESIGN section 8). gpt2_nano at 2 ranks writes a checkpoint every step into
# a 120 MB tmpfs: room for one checkpoint (87 MB) but not two. Step 2's write
# must fail with a clear error, leave no .partial, and `latest` must still name
# step 1's checkpoint, which h5py verifies.
# The tmpfs needs mount(2): as root it is mounted directly; otherwise the case
# runs in a private user + mount namespace (unshare -rm), where mounting a
# tmpfs needs no privilege. Where neither works the case is a ctest skip on a
# developer machine and a failure in CI (tests/oracle.sh) -- never a pass.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tests/oracle.sh"
fm_need_py h5py python3-h5py
cd "$work"
R=full_disk M=$R/mnt
unmount() { if mountpoint -q "$M" 2>/dev/null; then umount "$M"; fi; }
unmount
rm -rf "$R"; mkdir -p "$M"
if ! mount -t tmpfs -o size=120m tmpfs "$M" 2>/dev/null; then
  if [ -z "${FM_FULL_DISK_NS:-}" ] && command -v unshare > /dev/null &&
     unshare --user --map-root-user --mount true 2>/dev/null; then
    echo "mount(2) not permitted here: running in a private user + mount namespace"
    exec env FM_FULL_DISK_NS=1 unshare --user --map-root-user --mount bash "$0" "$@"
  fi
  fm_missing "permission to mount a tmpfs (as root, or unprivileged user namespaces for unshare -rm)" \
    "root, or unprivileged user namespaces (sysctl user.max_user_namespaces > 0)"
fi
trap unmount EXIT
# (the free-space check fails here; a disk that fills after it, before or
# during the write, is tests/faults/disk.sh: the reservation, see ckpt.h)
rc=0
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/gpt2_nano.in" train%steps=2 train%global_batch=12 train%micro_batch=1 \
  optim%warmup_steps=1 eval%every=0 "data%valid=''" log%every=1 log%plot=F ckpt%every=1 "ckpt%dir='$M'" \
  "run%out_dir='$R/run'" > "$R/full.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { tail -20 "$R/full.log"; echo "FAIL: exit status $rc, expected 1 (the write of step 2 fails)"; exit 1; }
msg=$(grep -o 'checkpoint of step 2 failed: .*' "$R/full.log" || true)
[ -n "$msg" ] || { tail -20 "$R/full.log"; echo "FAIL: no 'checkpoint of step 2 failed' message"; exit 1; }
# the write of step 1 states its size, time and rate
grep -qE '^checkpoint: .*step_00000001\.h5, [0-9.]+ MiB in [0-9.]+ s \([0-9.]+ MiB/s\)$' "$R/full.log" ||
  { tail -20 "$R/full.log"; echo "FAIL: no 'checkpoint: PATH, SIZE in S s (RATE MiB/s)' line for step 1"; exit 1; }
latest=$(cat "$M/latest" 2>/dev/null || true)
[ "$latest" = step_00000001.h5 ] || { ls -la "$M"; echo "FAIL: latest is '$latest', expected step_00000001.h5"; exit 1; }
if ls "$M"/*.partial > /dev/null 2>&1; then ls -la "$M"; echo "FAIL: a .partial is left on the full disk"; exit 1; fi
/usr/bin/python3 "$repo/regression/ckpt_tool.py" "$M/step_00000001.h5" > "$R/h5py.txt" ||
  { cat "$R/h5py.txt"; echo "FAIL: step 1's checkpoint does not verify"; exit 1; }
echo "full disk: $msg; latest = step_00000001.h5 (verified by h5py), no .partial"
