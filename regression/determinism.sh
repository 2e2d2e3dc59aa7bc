#!/usr/bin/env bash
# determinism.sh FMHPC MPIEXEC WORK DECK: the bitwise promise of DESIGN
# section 6. DECK (gpt2_nano or llama_nano) trains 30 steps of 12 micro-batches
# on the prepped linux-doc corpus (regression/prep_nano.sh) at 1, 2, 3 and 4
# data-parallel ranks, and again at 2 ranks:
#   - determinism = 'exact' (1 rank with 2 OpenMP threads, more ranks with 1):
#     every step's loss (the hex float in metrics.jsonl)
#     and the final weights (SHA-256 of the fp32 vector, and the exported
#     model.safetensors byte for byte) are identical for all runs;
#   - determinism = 'fast' (float reduce-scatter) at 1, 2 and 4 ranks: the
#     bits differ between some rank counts; the test asserts that they do, so
#     it is the exact reduction that makes the runs above agree.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3 deck=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
source "$repo/tests/prune.sh"
common=(train%steps=30 train%global_batch=12 train%micro_batch=1 optim%warmup_steps=5 eval%every=0
        "data%valid=''" log%every=10 log%plot=F)
run() { # name np determinism
  rm -rf "det/$deck/$1"
  # One rank gets 2 OpenMP threads, more ranks 1: thread counts must not matter either.
  OMP_NUM_THREADS=$(( $2 == 1 ? 2 : 1 )) "$mpiexec" -n "$2" "$fmhpc" "$repo/inputs/$deck.in" "${common[@]}" "train%determinism='$3'" \
    "run%out_dir='det/$deck/$1'" > "det_${deck}_$1.log" 2>&1 || { cat "det_${deck}_$1.log"; exit 1; }
  grep -o '"loss_hex": "[^"]*"' "det/$deck/$1/metrics.jsonl" > "det/$deck/$1/losses.txt"
  grep -o '"weights_sha256": "[^"]*"' "det/$deck/$1/summary.json" > "det/$deck/$1/weights.txt"
  [ "$(wc -l < "det/$deck/$1/losses.txt")" -eq 30 ] || { echo "FAIL: $1 logged $(wc -l < "det/$deck/$1/losses.txt") steps"; exit 1; }
}
mkdir -p "det/$deck"
fail=0
for np in 1 2 3 4; do run "exact_p$np" $np exact; done
run exact_p2_again 2 exact
for r in exact_p2 exact_p3 exact_p4 exact_p2_again; do
  if cmp -s "det/$deck/exact_p1/losses.txt" "det/$deck/$r/losses.txt" &&
     cmp -s "det/$deck/exact_p1/weights.txt" "det/$deck/$r/weights.txt" &&
     cmp -s "det/$deck/exact_p1/final/model.safetensors" "det/$deck/$r/final/model.safetensors"; then
    echo "same bits: exact_p1 and $r (30 losses, weights $(cut -c20-35 "det/$deck/$r/weights.txt")...)"
  else
    echo "FAIL: exact_p1 and $r differ"; diff "det/$deck/exact_p1/losses.txt" "det/$deck/$r/losses.txt" | head -4
    fail=1
  fi
done
for np in 1 2 4; do run "fast_p$np" $np fast; done
ndiff=0
for np in 2 4; do
  if ! cmp -s "det/$deck/fast_p1/losses.txt" "det/$deck/fast_p$np/losses.txt" ||
     ! cmp -s "det/$deck/fast_p1/weights.txt" "det/$deck/fast_p$np/weights.txt"; then
    ndiff=$((ndiff + 1)); echo "fast mode: p1 and p$np differ (as expected without the exact reduction)"
  fi
done
[ $ndiff -gt 0 ] || { echo "FAIL: fast mode gave the same bits at 1, 2 and 4 ranks: the test has no teeth"; fail=1; }
[ $fail -eq 0 ] && fm_prune "det/$deck" && echo "PASS: determinism $deck"
exit $fail
