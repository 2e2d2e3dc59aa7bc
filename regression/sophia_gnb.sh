#!/usr/bin/env bash
# sophia_gnb.sh FMHPC MPIEXEC WORK: Sophia-G's Hessian-sampling pass (the
# Gauss-Newton-Bartlett estimate of Liu et al. 2023, Algorithm 2) against an
# independent torch computation. A tiny Llama (V = 320 from a BPE trained here
# on 300 linux-doc documents, T = 32) trains 2 Sophia steps with a Hessian
# refresh every step (sophia_k = 1) at 2 ranks, checkpointing both steps;
# sophia_gnb.py takes step 1's weights and h from the checkpoint, draws step
# 2's labels from the float64 softmax with the Philox stream written again in
# Python, and compares step 2's h with b2*h1 + (1-b2)*B*ghat^2 from torch
# autograd in float64. A small vocabulary keeps every sampled label far from a
# boundary of the cumulative distribution (asserted), so fp32 and float64
# logits draw the same labels.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
dir=sophia_gnb
rm -rf "$dir"; mkdir -p "$dir"
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/tokenizer_train.in" "tokenizer%inputs='data/linuxdoc/linuxdoc_small.jsonl'" \
  "tokenizer%output='$dir/tokenizer.json'" tokenizer%vocab_size=320 > "$dir/tok.log" 2>&1 || { cat "$dir/tok.log"; exit 1; }
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/prep_linuxdoc_nano.in" "prep%inputs='data/linuxdoc/linuxdoc_small.jsonl'" \
  "prep%output='$dir/data'" "prep%tokenizer='$dir/tokenizer.json'" prep%seq_len=32 \
  > "$dir/prep.log" 2>&1 || { cat "$dir/prep.log"; exit 1; }
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/llama_nano.in" model%d_model=32 model%n_layer=2 model%n_head=4 \
  model%n_kv_head=2 model%d_ff=64 model%vocab_size=320 model%seq_len=32 "data%train='$dir/data/train.json'" \
  "data%valid=''" train%steps=2 train%global_batch=4 train%micro_batch=1 "optim%name='sophia'" optim%sophia_k=1 \
  optim%lr=1e-2 optim%warmup_steps=0 ckpt%every=1 ckpt%keep=2 eval%every=0 log%plot=F "run%out_dir='$dir/run'" \
  > "$dir/train.log" 2>&1 || { cat "$dir/train.log"; exit 1; }
/usr/bin/python3 "$repo/regression/sophia_gnb.py" "$dir/run" "$dir/data"
