#!/usr/bin/env bash
# bench/run.sh: every benchmark (tokenize, prep, ops, step_cpu, reduce, ckpt), one
# table of fmhpc against its peer with ratios and goals (issue 15), also
# written as JSON for tracking. Benchmarks are not tests: not run in CI.
#   bench/run.sh [--quick] [--json PATH (default bench/results.json)] [CPU_BUILD_DIR (default build-bench)]
# --quick (or FMHPC_BENCH_QUICK=1): small sizes and one or two repetitions,
# a few minutes on 2 cores; the numbers are then indicative only. Only ratios
# measured in one run on one machine mean anything.
# STEP_BEFORE=DIR (a CPU-only build of an earlier commit) adds that library's step tokens/s
# beside fmhpc's, measured in the same run (bench/step_cpu/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
QUICK="${FMHPC_BENCH_QUICK:-0}"
JSON="$ROOT/bench/results.json"
BUILD_ARG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --json) JSON="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) echo "bench/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) BUILD_ARG="$1" ;;
  esac
  shift
done
source "$ROOT/bench/cpu_lib.sh" "$BUILD_ARG"
ROWS="$(mktemp)"
LOGS="$(mktemp -d)"
trap 'rm -rf "$ROWS" "$LOGS"' EXIT
# row BENCH FMHPC PEER RATIO GOAL: numbers as "value unit", "-" when none
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$ROWS"; }
num() { grep -o " $1=[0-9.]*" <<<" $2" | head -1 | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
run() { # NAME CMD...: run one benchmark, its log kept; a failure is a row, not the end
  local name="$1"; shift
  echo "== $name: $*" >&2
  if ! "$@" > "$LOGS/$name" 2>&1; then
    tail -5 "$LOGS/$name" >&2
    row "$name" "FAILED (exit status)" - - -
    return 1
  fi
  cat "$LOGS/$name" >&2
}
if [ "$QUICK" = 1 ]; then
  PREP_RANKS=1 TOK_REPS=1 OPS_BT="2 128" STEP_CASES='llama_nano' STEP_STEPS=2 RED_N=16777216 RED_REPS=1 CK_REPS=1 CK_LAYERS=12
else
  PREP_RANKS='1 2' TOK_REPS=3 OPS_BT="4 1024" STEP_CASES='.' STEP_STEPS=5 RED_N=124439808 RED_REPS=3 CK_REPS=5 CK_LAYERS=12
fi

# tokenizer: fmhpc vs its npm peers, tokens/s on one core (bench/tokenize/run.sh)
if run tokenize bash "$ROOT/bench/tokenize/run.sh" "$BUILD" "$TOK_REPS"; then
  tps() { grep "^$1" "$LOGS/tokenize" | head -1 | sed 's/.* \([0-9]*\) tokens\/s/\1/'; }
  for enc in r50k_base cl100k_base; do
    f=$(tps "fmhpc .*$enc") n=$(tps "gpt-tokenizer $enc") t=$(tps "tiktoken $enc")
    row "tokenize $enc (1 core)" "$f tok/s" "gpt-tokenizer (npm) $n tok/s" "$(ratio "$f" "$n")" ">= 3x"
    row "tokenize $enc (1 core)" "$f tok/s" "tiktoken (npm, WASM) $t tok/s" "$(ratio "$f" "$t")" ">= 1x"
  done
  f=$(tps "fmhpc .*tokenizer.json") h=$(tps "hf-tokenizers")
  row "tokenize Llama-3 tokenizer.json (1 core)" "$f tok/s" "HF tokenizers (npm, native) $h tok/s" "$(ratio "$f" "$h")" ">= 1x"
fi

# prep: tokens/s per rank of task='prep' on linux-doc against the tokenizer alone (bench/prep/run.sh)
if run prep bash "$ROOT/bench/prep/run.sh" "$BUILD" "$PREP_RANKS"; then
  # per CPU-second (the rate a loaded machine does not distort)
  k=$(grep -m1 '^tokenizer alone' "$LOGS/prep" | sed 's/.*, \([0-9]*\) tokens per CPU-s/\1/')
  for P in $PREP_RANKS; do
    f=$(awk -v P="$P" '$1 == "1x" && $2 == P { print $9 }' "$LOGS/prep")
    row "prep linux-doc, $P rank(s), the job (mpirun + ranks)" "$f tok/CPU-s" "fmhpc tokenizer alone $k tok/CPU-s" "$(ratio "$f" "$k")" ">= 0.70x"
  done
  # at 1 rank, the rank alone (the launcher's CPU left out): its tokens over its CPU
  f=$(awk '$1 == "1x" && $2 == 1 && $11 > 0 { c = $9 * $8 / $11; printf "%.0f", c }' "$LOGS/prep")
  [ -n "$f" ] && row "prep linux-doc, 1 rank, the rank alone" "$f tok/CPU-s" "fmhpc tokenizer alone $k tok/CPU-s" "$(ratio "$f" "$k")" ">= 0.70x"
fi

# ops: GFLOP/s of the model ops against one whole-matrix OpenBLAS sgemm
cc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" $(pkg-config --cflags openblas) \
  "$ROOT/bench/ops/bench_ops.c" "$BUILD/libfmhpc_lib.a" $(pkg-config --libs openblas libpcre2-8 libzstd zlib) -lm \
  -o "$LOGS/bench_ops"
# shellcheck disable=SC2086
if run ops env OMP_NUM_THREADS="$(nproc)" "$LOGS/bench_ops" $OPS_BT; then
  peak=$(grep '^peer: one OpenBLAS sgemm' "$LOGS/ops" | sed 's/.* \([0-9.]*\) GFLOP\/s$/\1/')
  while IFS= read -r line; do
    label=$(sed 's/ *[0-9.]* ms .*//' <<<"$line")
    g=$(sed 's/.* \([0-9.]*\) GFLOP\/s$/\1/' <<<"$line")
    case "$label" in peer:*) continue ;; esac
    row "ops $label (B T = $OPS_BT)" "$g GFLOP/s" "sgemm $peak GFLOP/s" "$(ratio "$g" "$peak")" "-"
  done < <(grep 'GFLOP/s$' "$LOGS/ops")
fi

# the training step: fmhpc vs PyTorch, tokens/s
if run step_cpu env STEP_CASES="$STEP_CASES" bash "$ROOT/bench/step_cpu/run.sh" "$BUILD" "$(nproc)" "$STEP_STEPS"; then
  while read -r name fm ft g pk pct pm pt r bt br; do
    before=""
    [ -n "${bt:-}" ] && before=" (before: $bt tok/s, now ${br}x)"
    row "step_cpu $name" "$ft tok/s, $g GFLOP/s ($pct of sgemm peak)$before" "PyTorch $pt tok/s" "$r" ">= 2x, >= 85% peak"
  done < <(grep -E '^(gpt2|llama)' "$LOGS/step_cpu")
fi

# the exact reduction's exchange vs a float MPI_Allreduce
[ "$QUICK" = 1 ] && export OVERLAP_MODEL="${OVERLAP_MODEL:-256 4 4 1024 50257}" # a small GPT-2 for the overlap rows
if run reduce bash "$ROOT/bench/reduce/run.sh" "$BUILD" "$RED_N" "$RED_REPS"; then
  while IFS= read -r line; do
    p=$(num P "$line")
    ex=$(num exact_ms "$line") em=$(num exact_mpi_ms "$line") fa=$(num fast_ms "$line") ar=$(num allreduce_ms "$line")
    bu=$(num bucket_ms "$line") exc=$(num exact_cpu_s "$line") buc=$(num bucket_cpu_s "$line") arc=$(num allreduce_cpu_s "$line")
    rg=$(num ring_ms "$line") rgc=$(num ring_cpu_s "$line") how="ring"
    [ "$(num shm "$line")" = 1 ] && how="shared-memory window"
    row "reduce exact P=$p n=$RED_N" "$ex ms ($how; $exc CPU-s)" "MPI_Allreduce fp32 $ar ms ($arc CPU-s)" \
      "$(ratio "$ex" "$ar") (CPU $(ratio "$exc" "$arc"))" "<= 1.5x"
    if [ -n "$rg" ]; then
      row "reduce exact, ring (across nodes) P=$p" "$rg ms ($rgc CPU-s)" "MPI_Allreduce fp32 $ar ms ($arc CPU-s)" \
        "$(ratio "$rg" "$ar") (CPU $(ratio "$rgc" "$arc"))" "<= 1.5x"
    fi
    row "reduce exact, buckets back to back P=$p" "$bu ms ($buc CPU-s)" "MPI_Allreduce fp32 $ar ms ($arc CPU-s)" \
      "$(ratio "$bu" "$ar") (CPU $(ratio "$buc" "$arc"))" "<= 1.5x"
    row "reduce exact, MPI_Reduce_scatter_block P=$p" "$em ms" "MPI_Allreduce fp32 $ar ms" "$(ratio "$em" "$ar")" "(before)"
    row "reduce fast P=$p" "$fa ms" "MPI_Allreduce fp32 $ar ms" "$(ratio "$fa" "$ar")" "-"
  done < <(grep '^RESULT reduce' "$LOGS/reduce")
  while IFS= read -r line; do # bench_overlap: a GPT-2 124M micro-batch per rank, buckets during its backward
    p=$(num P "$line") rw=$(num raw_ms "$line") ex=$(num exposed_ms "$line") ar=$(num allreduce_ms "$line")
    rc=$(num raw_cpu_s "$line") ec=$(num exposed_cpu_s "$line") ac=$(num allreduce_cpu_s "$line")
    row "reduce exact raw per step, GPT-2 step P=$p" "$rw ms ($rc CPU-s)" "MPI_Allreduce fp32 $ar ms ($ac CPU-s)" \
      "$(ratio "$rw" "$ar") (CPU $(ratio "$rc" "$ac"))" "<= 1.5x"
    row "reduce exact exposed per step, buckets P=$p" "$ex ms ($ec CPU-s)" "MPI_Allreduce fp32 $ar ms ($ac CPU-s)" \
      "$(ratio "$ex" "$ar") (CPU $(ratio "$ec" "$ac"))" "hidden behind backward"
  done < <(grep '^RESULT overlap' "$LOGS/reduce")
fi

# checkpoint write vs dd conv=fsync of the same bytes to the same disk
if run ckpt bash "$ROOT/bench/ckpt/run.sh" "$BUILD" 2 "$CK_REPS" "$CK_LAYERS"; then
  f=$(grep '^RESULT ckpt' "$LOGS/ckpt") d=$(grep '^RESULT dd ' "$LOGS/ckpt")
  row "ckpt write GPT-2 124M + AdamW ($(num bytes "$f") B)" "$(num mib_s "$f") MiB/s" "dd conv=fsync $(num mib_s "$d") MiB/s" \
    "$(ratio "$(num mib_s "$f")" "$(num mib_s "$d")")" ">= 0.8x"
fi

/usr/bin/python3 - "$ROWS" "$JSON" "$QUICK" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores" <<'PY'
import json, sys, time
rows = [dict(zip(("bench", "fmhpc", "peer", "ratio", "goal"), l.rstrip("\n").split("\t"))) for l in open(sys.argv[1])]
w = [max(len(h), *(len(r[h]) for r in rows)) if rows else len(h) for h in ("bench", "fmhpc", "peer", "ratio", "goal")]
print("| " + " | ".join(h.ljust(n) for h, n in zip(("bench", "fmhpc", "peer", "ratio", "goal"), w)) + " |")
print("| " + " | ".join("-" * n for n in w) + " |")
for r in rows:
    print("| " + " | ".join(r[h].ljust(n) for h, n in zip(("bench", "fmhpc", "peer", "ratio", "goal"), w)) + " |")
json.dump({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": sys.argv[3] == "1",
           "machine": sys.argv[4], "rows": rows}, open(sys.argv[2], "w"), indent=1)
print("written:", sys.argv[2])
PY
