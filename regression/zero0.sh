#!/usr/bin/env bash
# zero0.sh FMHPC MPIEXEC WORK: &parallel zero = 0 (optimizer state replicated,
# every rank updates the whole vector) gives the same bits as ZeRO-1 (state
# sharded): gpt2_nano at 2 ranks, 6 steps of 4 sequences, AdamW and Sophia
# (Hessian every 2 steps): every step's loss (hex) and the final weights'
# SHA-256 equal; and zero = 0 stopped at step 3 and resumed (the replicated
# state is rebuilt from the checkpoint's shards) ends with the same bits.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
source "$repo/tests/prune.sh"
Z=zero0
rm -rf "$Z"; mkdir -p "$Z"
common=(train%steps=6 train%global_batch=4 train%micro_batch=1 optim%warmup_steps=1 eval%every=0 "data%valid=''"
        log%every=1 log%plot=F)
run() { # name np [overrides...]
  local n=$1 np=$2; shift 2
  "$mpiexec" -n "$np" "$fmhpc" "$repo/inputs/gpt2_nano.in" "${common[@]}" "$@" "run%out_dir='$Z/$n'" > "$Z/$n.log" 2>&1 ||
    { tail -20 "$Z/$n.log"; echo "FAIL: $n exited non-zero"; exit 1; }
}
bits() { # name: the losses of steps > ${from:-0} after the last resume record, and the weights hash
  awk '/"record": "resume"/{n=0; delete l} /"record": "step"/{l[n++]=$0} END{for(i=0;i<n;i++) print l[i]}' \
    "$Z/$1/metrics.jsonl" | grep -o '"step": [0-9]*, "loss": [^,]*, "loss_hex": "[^"]*"' |
    awk -v from="${from:-0}" '{s=$2; sub(",", "", s); if (s + 0 > from) print}'
  grep -o '"weights_sha256": "[^"]*"' "$Z/$1/summary.json"
}
same() { # a b what
  if [ "$(bits "$1" | grep -c loss_hex)" -ge 3 ] && [ "$(bits "$1")" = "$(bits "$2")" ]; then
    echo "ok: $3: same loss bits and weights ($(bits "$1" | grep -c loss_hex) steps compared)"
  else
    diff <(bits "$1") <(bits "$2") | head -6; echo "FAIL: $3"; exit 1
  fi
}
run z1 2 parallel%zero=1
run z0 2 parallel%zero=0 ckpt%every=3
grep -q "ZeRO-0" "$Z/z0.log" || { echo "FAIL: the zero = 0 run does not say ZeRO-0"; exit 1; }
same z1 z0 "AdamW, zero 1 vs 0 at 2 ranks"
cp -r "$Z/z0" "$Z/z0r"
rm "$Z/z0r/ckpt/step_00000006.h5"; echo step_00000003.h5 > "$Z/z0r/ckpt/latest"
run z0r 2 parallel%zero=0
grep -q "resume: .*step_00000003.h5, step 3" "$Z/z0r.log" || { echo "FAIL: z0r did not resume at step 3"; exit 1; }
from=3 same z0 z0r "AdamW, zero 0 resumed at step 3 (steps 4-6)"
run s1 2 parallel%zero=1 "optim%name='sophia'" optim%sophia_k=2
run s0 2 parallel%zero=0 "optim%name='sophia'" optim%sophia_k=2
same s1 s0 "Sophia, zero 1 vs 0 at 2 ranks"
fm_prune "$Z"
echo "PASS: zero0"
