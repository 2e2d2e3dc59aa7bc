#!/usr/bin/env bash
# bench/step_cpu/run.sh: one CPU training step (forward + backward + AdamW) of
# fmhpc and of PyTorch (python3-torch 1.13, float32) on the same model, batch
# and thread count: GPT-2 124M at B=4, T=64 and T=256, and the nano Llama.
# Prints ms/step, tokens/s, GFLOP/s (6N + attention per token), the share of
# the machine's measured fp32 GEMM peak (multi-threaded OpenBLAS sgemm 2048^3;
# column peak: the larger of its measurements before and after the timed
# steps; %peak: the median over the timed steps of each step's share of the
# peak measured next to it, which follows the VM's drift), and fmhpc/PyTorch; then each case's per-op profile (forward, loss, backward,
# zero_grad, optimizer, the exact reduction's local passes: ms, GFLOP/s, GB/s
# and the share of the op's roofline from the measured sgemm peak and triad
# memory bandwidth). STEP_BEFORE=DIR (a CPU build of another commit, e.g. main
# before a change) runs the same bench_step.c on that library in the same run
# and adds its tokens/s beside fmhpc's (column before, ratio after/before).
# Each side also prints cpu_s_step, the process's CPU seconds per step (all
# threads): on a loaded machine the wall clock counts time it did not run.
# Goals: >= 2x PyTorch's tokens/s at T=256, >= 85% of peak. Not run in CI.
# Timing (both sides alike): 3 warm-up steps, then at least STEPS timed steps
# and more until FMHPC_BENCH_MIN_S seconds (default 4); each figure is the
# median step's (mean and best printed beside), so one slow step on a shared
# machine does not decide a row.
#   bench/step_cpu/run.sh [CPU_BUILD_DIR (default build-bench)] [THREADS (nproc)] [STEPS (5)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
THREADS="${2:-$(nproc)}"
STEPS="${3:-5}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
fm_build_step_bench "$BUILD" "$OUT/bench_step"
BEFORE="${STEP_BEFORE:-}"
[ -n "$BEFORE" ] && fm_build_step_bench "$(cd "$BEFORE" && pwd)" "$OUT/bench_before"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $THREADS threads; $STEPS timed steps"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} (both sides)"
printf "%-22s %9s %9s %9s %9s %7s %9s %9s %7s %9s %7s\n" case fm_ms fm_tok/s GFLOP/s peak %peak pt_ms pt_tok/s ratio \
  before vs_bef
# STEP_CASES (a regex on the case names; default all) picks cases: bench/run.sh's quick mode
while read -r name arch C L NH NKV F V T B; do
  [[ "$name" =~ ${STEP_CASES:-.} ]] || continue
  f=$(OMP_NUM_THREADS=$THREADS "$OUT/bench_step" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" "$STEPS" "$THREADS")
  b=""
  [ -n "$BEFORE" ] && b=$(OMP_NUM_THREADS=$THREADS "$OUT/bench_before" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" "$STEPS" "$THREADS")
  p=$(/usr/bin/python3 "$ROOT/bench/step_cpu/torch_step.py" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" "$STEPS" "$THREADS")
  get() { grep -o " $1=[0-9.]*" <<<" $2" | head -1 | cut -d= -f2; }
  awk -v n="$name" -v fm="$(get ms_step "$f")" -v ft="$(get tok_s "$f")" -v g="$(get gflops "$f")" \
      -v pk="$(get peak_gflops "$f")" -v sa="$(get share_adj "$f")" -v pm="$(get ms_step "$p")" -v pt="$(get tok_s "$p")" \
      -v bt="$(get tok_s "$b")" 'BEGIN {
    printf "%-22s %9.1f %9.0f %9.2f %9.2f %6.1f%% %9.1f %9.0f %6.2fx", n, fm, ft, g, pk, 100*(sa != "" ? sa : g/pk), pm, pt, ft/pt
    if (bt != "") printf " %9.0f %6.2fx", bt, ft/bt
    printf "\n" }'
  echo "  $name $p"
  echo "  $name fmhpc: $(grep -E '^(fmhpc|phases|beside)' <<<"$f" | tr '\n' ' ')"
  grep '^profile' <<<"$f" | sed "s/^profile/  $name fmhpc/"
  if [ -n "$b" ]; then
    echo "  $name before: $(grep -E '^(fmhpc|phases|beside)' <<<"$b" | tr '\n' ' ')"
    grep '^profile' <<<"$b" | sed "s/^profile/  $name before/"
  fi
done < <(grep -v '^#' "$ROOT/bench/step_cpu/cases.txt")
echo "goals: fmhpc >= 2x PyTorch tokens/s at gpt2_124M_T256 (3x nano Llama); GFLOP/s >= 85% of the measured GEMM peak"
