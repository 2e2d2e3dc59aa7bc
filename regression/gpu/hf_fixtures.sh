#!/usr/bin/env bash
# regression/gpu/hf_fixtures.sh HF_TOOL OUT: Hugging Face directories that
# fmhpc exports, and fmhpc's own logits on them, for refs.py hf to check
# against transformers on the GPU machine (this machine has no transformers).
# Each case OUT/<case>/: hf/ (config.json + model.safetensors written by
# fm_hf_export from fmhpc's initialisation plus a pattern, so no norm weight
# is 1 and no bias 0), ids.bin (T int32), logits.bin (T x V fp32 from
# fmhpc's CPU forward, fm_model_logits) and overrides.txt.
set -euo pipefail
tool=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
T=24 V=96
common="model%d_model=32 model%n_layer=2 model%vocab_size=$V model%seq_len=$T model%init_std=0.3 run%seed=11"
declare -A cases=(
  [gpt2_tied]="model%arch='gpt2' model%n_head=4 model%tie_embeddings=T"
  [gpt2_untied]="model%arch='gpt2' model%n_head=2 model%tie_embeddings=F"
  [llama_gqa]="model%arch='llama' model%n_head=4 model%n_kv_head=2 model%d_ff=48 model%tie_embeddings=F model%norm_eps=1e-6 model%rope_theta=500000.0"
  [llama_tied_mha]="model%arch='llama' model%n_head=4 model%n_kv_head=4 model%d_ff=40 model%tie_embeddings=T model%rope_theta=10000.0"
)
for c in "${!cases[@]}"; do
  d=$out/$c
  mkdir -p "$d"
  # shellcheck disable=SC2086
  over="$common ${cases[$c]}"
  echo "$over" > "$d/overrides.txt"
  /usr/bin/python3 -c "import sys; import array; a = array.array('i', [(t * 37 + 5) % $V for t in range($T)]); a.tofile(open(sys.argv[1], 'wb'))" "$d/ids.bin"
  # shellcheck disable=SC2086
  "$tool" export-init "$d/hf" $over > "$d/export.log" 2>&1 || { cat "$d/export.log"; exit 1; }
  # shellcheck disable=SC2086
  "$tool" logits "$d/hf" "$d/ids.bin" "$d/logits.bin" $over > "$d/logits.log" 2>&1 || { cat "$d/logits.log"; exit 1; }
  echo "hf fixture $c: $(stat -c %s "$d/logits.bin") bytes of logits"
done
