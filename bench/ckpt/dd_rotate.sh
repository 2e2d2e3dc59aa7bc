#!/usr/bin/env bash
# bench/ckpt/dd_rotate.sh DIR BYTES REPS: the checkpoint write's peer. dd writes BYTES from /dev/zero in
# 1 MiB blocks with conv=fsync into DIR REPS times, in the rotation fm_ckpt_write keeps (keep = 1): each
# write goes into a new file beside the previous one, which is removed after it (bench_ckpt does the same).
# Both sides start in an empty DIR. Why the rotation: on a thin-provisioned virtual disk a write into blocks
# a removed file just freed costs less than one into blocks never written (a KVM guest here, 1.4 GB:
# 1.06 s right after an rm, 3.3 s into a new file beside a kept one), so a dd that removes its file before
# each repeat is measured on other terms than a checkpoint written beside the last one.
# Prints "REP dd K seconds=S" per write and "RESULT dd bytes=B seconds=BEST mib_s=R median_s=M".
set -euo pipefail
DIR="$1" BYTES="$2" REPS="$3"
count=$(((BYTES + 1048575) / 1048576))
ts=()
for k in $(seq "$REPS"); do
  s=$(date +%s.%N)
  dd if=/dev/zero of="$DIR/dd.$k" bs=1M count="$count" conv=fsync status=none
  e=$(date +%s.%N)
  rm -f "$DIR/dd.$((k - 1))"
  t=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }')
  echo "REP dd $k seconds=$t"
  ts+=("$t")
done
rm -f "$DIR/dd.$REPS"
printf '%s\n' "${ts[@]}" | sort -g | awk -v b="$BYTES" '{ t[NR] = $1 } END {
  m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
  printf "RESULT dd bytes=%d seconds=%.3f mib_s=%.1f median_s=%.3f\n", b, t[1], b / t[1] / 1048576, m }'
