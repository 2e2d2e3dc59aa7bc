#!/usr/bin/env bash
# paths.sh FMHPC MPIEXEC WORK CASE: one training path end to end on the
# prepped linux-doc corpus (regression/prep_nano.sh): nano Llama, a few steps
# of 4 sequences, at 1 rank (2 OpenMP threads) and 2 ranks. Every case asserts
#   - the same bits at 1 and 2 ranks: every step's loss (loss_hex in
#     metrics.jsonl) and the final weights (weights_sha256 in summary.json);
#   - every step's lr equals the schedule's formula (paths_tool.py, written
#     again from optim.h); the loss falls; no step skipped (but the planted one);
# and its own:
#   lion, sophia  the optimizer (Sophia-G refreshes its Hessian at steps 1 and 6;
#                 its estimator is checked against torch in sophia_gnb.sh)
#   linear, wsd   the schedules
#   bf16          precision 'p=f32,c=bf16': losses near fp32's, not its bits
#   spike         spike_skip: a batch of random tokens planted at step 8 of a
#                 copy of the store is skipped and counted (metrics, summary, log)
#   sft           inputs/sft.in on WordNet prepped by inputs/prep_sft.in, from a
#                 2-step nano GPT-2: each step's trained tokens equal the loss
#                 masks of its samples (h5py + the sampler's reference)
#                 and its step-1 loss is torch's (float64) over the masked targets
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3 case=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
cd "$work"
source "$repo/tests/prune.sh"
dir=paths/$case
rm -rf "$dir"; mkdir -p "$dir"
deck=$repo/inputs/llama_nano.in
common=(train%steps=10 train%global_batch=4 train%micro_batch=1 optim%warmup_steps=2 eval%every=0
        "data%valid=''" log%every=1 log%plot=F)
extra=() check_args=()
case $case in
  lion)   extra=("optim%name='lion'" optim%lr=3e-4 optim%weight_decay=0.1) ;;
  sophia) extra=("optim%name='sophia'" optim%lr=1e-3 optim%sophia_k=5) ;;
  linear) extra=("optim%schedule='linear'" optim%min_lr_ratio=0.2) ;;
  wsd)    extra=("optim%schedule='wsd'" optim%decay_fraction=0.3 optim%min_lr_ratio=0.05) ;;
  bf16)   extra=("train%precision='p=f32,c=bf16'") ;;
  spike)
    mkdir -p "$dir/store"
    cp data/linuxdoc_128/train.json data/linuxdoc_128/train_00000.h5 "$dir/store/"
    $py "$repo/regression/paths_tool.py" plant "$dir/store" 1234 4 8
    extra=("data%train='$dir/store/train.json'" train%spike_skip=T train%spike_window=4 train%spike_z=3)
    check_args=(8) ;;
  sft)
    # The SFT deck's inputs: WordNet definitions (make_fixtures.py, run by
    # prep_nano.sh) prepped by inputs/prep_sft.in, and a pretrained nano GPT-2
    # (2 steps here: its HF export is what sft.in's init_from reads).
    "$mpiexec" -n 2 "$fmhpc" "$repo/inputs/prep_sft.in" "prep%inputs='data/linuxdoc/wordnet_sft.jsonl'" \
      "prep%output='$dir/prep_sft'" > "$dir/prep.log" 2>&1 || { cat "$dir/prep.log"; exit 1; }
    "$mpiexec" -n 2 "$fmhpc" "$repo/inputs/gpt2_nano.in" "${common[@]}" train%steps=2 "run%out_dir='$dir/pre'" \
      > "$dir/pre.log" 2>&1 || { cat "$dir/pre.log"; exit 1; }
    deck=$repo/inputs/sft.in
    common=(train%steps=10 train%global_batch=4 train%micro_batch=1 optim%warmup_steps=2 optim%lr=2e-3
            eval%every=0 "data%valid=''" log%every=1 log%plot=F)
    extra=("model%init_from='$dir/pre/final'" "data%train='$dir/prep_sft/train.json'")
    check_args=("$dir/prep_sft" "$dir/pre/final") ;;
  *) echo "FAIL: unknown case $case"; exit 2 ;;
esac

run() { # name np [more overrides]
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=$(( np == 1 ? 2 : 1 )) "$mpiexec" -n "$np" "$fmhpc" "$deck" "${common[@]}" "${extra[@]}" "$@" \
    "run%out_dir='$dir/$name'" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
  grep -o '"loss_hex": "[^"]*"' "$dir/$name/metrics.jsonl" > "$dir/$name/losses.txt"
  grep -o '"weights_sha256": "[^"]*"' "$dir/$name/summary.json" > "$dir/$name/weights.txt"
}
run p1 1
run p2 2
n=$(wc -l < "$dir/p1/losses.txt")
[ "$n" -eq 10 ] || { echo "FAIL: p1 logged $n steps, not 10"; exit 1; }
if cmp -s "$dir/p1/losses.txt" "$dir/p2/losses.txt" && cmp -s "$dir/p1/weights.txt" "$dir/p2/weights.txt"; then
  echo "ok: same bits at 1 and 2 ranks ($n losses, weights $(cut -c20-35 "$dir/p1/weights.txt")...)"
else
  echo "FAIL: 1 and 2 ranks differ"; diff "$dir/p1/losses.txt" "$dir/p2/losses.txt" | head -4; exit 1
fi
$py "$repo/regression/paths_tool.py" check "$dir/p2" "$case" "${check_args[@]}"
case $case in
  spike)
    grep -q "step     8/10 .*| SKIPPED" "$dir/p2.log" || { echo "FAIL: no SKIPPED log line at step 8"; exit 1; }
    grep -q "1 skipped" "$dir/p2.log" || { echo "FAIL: the done line does not count 1 skipped step"; exit 1; }
    echo "ok: the log marks step 8 SKIPPED and counts 1 skipped"
    rm -rf "$dir/store" ;; # the 100 MB copy (kept when a check fails)
  bf16)
    # The first 3 steps in fp32 (lr of steps 1-2 is warmup, independent of
    # the step count, so losses 1-3 are the 10-step run's): bf16 compute must
    # change the bits (so the path ran) and stay near fp32 (the same model).
    extra=()
    run f32 2 train%steps=3
    $py - "$dir/p2/metrics.jsonl" "$dir/f32/metrics.jsonl" <<'PY'
import json, sys
ld = lambda p: [r["loss"] for r in map(json.loads, open(p)) if r["record"] == "step"]
b, f = ld(sys.argv[1])[:3], ld(sys.argv[2])
if len(f) != 3:
    sys.exit(f"FAIL: the fp32 run logged {len(f)} steps, not 3")
d = max(abs(x - y) for x, y in zip(b, f))
if b == f:
    sys.exit("FAIL: c=bf16 gave the fp32 losses bit for bit: the bf16 path did not run")
if d > 5e-3:
    sys.exit(f"FAIL: c=bf16 losses differ from fp32 by up to {d:.4f} (> 5e-3)")
print(f"ok: c=bf16 losses 1-3 within {d:.2e} of fp32's, not equal (step 1: {b[0]!r} vs {f[0]!r})")
PY
    ;;
esac
fm_prune "$dir"
echo "PASS: paths $case"
