#!/usr/bin/env bash
# bench/step_gpu/check_emu.sh BENCH_STEP_GPU_EMU: ctest bench.step_gpu_emu.
# The GPU step bench on the SIMT emulator at a tiny Llama (GQA, bf16,
# recompute): it must finish, print its step line, time every model op the
# device path calls (a profile row for each) and account for most of the
# profiled step with them (the rest is glue: a wrapper lost would drop it).
set -uo pipefail
out=$("$1" llama 64 2 4 2 96 128 32 2 2 bf16 1 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
grep -q "^device name='SIMT emulator' peak_gflops=[0-9]* (measured, bf16) copy_gb_s=" <<<"$out" ||
  { echo "FAIL: no device line (the emulator's name, a measured peak)"; exit 1; }
grep -Eq '^fmhpc params=[0-9]+ ms_step=[0-9.]+ tok_s=[0-9]+ .* loss=[0-9.]+ steps=2 recompute=1' <<<"$out" ||
  { echo "FAIL: no step line"; exit 1; }
for row in "forward   embedding" "forward   rmsnorm" "forward   matmul" "forward   rope" "forward   attention" \
  "forward   swiglu" "forward   add (residual)" "loss      classifier+cross-entropy" "backward  matmul" \
  "backward  attention" "backward  rmsnorm" "backward  rope" "backward  swiglu" "backward  embedding" \
  "step      optimizer (AdamW)"; do
  grep -q "^profile   $row " <<<"$out" || { echo "FAIL: no profile row '$row'"; exit 1; }
done
cover=$(sed -n 's/^profile   ops + zero_grad + optimizer cover \([0-9.]*\)% of the .*/\1/p' <<<"$out")
if [ -z "$cover" ] || ! awk -v c="$cover" 'BEGIN { exit !(c >= 60 && c <= 101) }'; then
  echo "FAIL: the ops cover ${cover:-?}% of the profiled step (want 60-101%)"
  exit 1
fi
grep -q '^profile   bound: GEMM-like ops at the bf16 tensor-core peak' <<<"$out" || { echo "FAIL: no bound line"; exit 1; }
echo "PASS: the GPU step bench on the emulator: every model op profiled, ${cover}% of the step covered"
