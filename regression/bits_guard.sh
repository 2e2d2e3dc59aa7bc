#!/usr/bin/env bash
# bits_guard.sh FMHPC MPIEXEC WORK [--record]: a CHANGE GUARD, not a correctness
# oracle. Short runs of the nano decks down every training path (AdamW, Lion,
# Sophia; cosine, linear, WSD, constant; fp32 and bf16 compute; recompute;
# spike skip; grad accumulation) on the prepped linux-doc fixture, each reduced
# to its per-step loss bits and the final weights' SHA-256. They are compared
# with regression/reference/bits_guard.txt, which is fmhpc's own earlier output
# (recorded at 4fc7521 on the CI machine kind, OpenBLAS Haswell kernels;
# re-recorded when GELU and SwiGLU moved to the shared polynomial exp,
# fm_expf_neg in src/tensor/elementwise.h, which moves their last bits; and
# when the CPU GEMM tiles grew from 128 x 512 to 256 x 768, which regroups
# OpenBLAS's sums in the last bits, src/tensor/cpu/matmul.c; and when the
# cross-entropy's logits and dx calls grew from 128 to 256 rows,
# src/tensor/cpu/xent.c: Haswell's bits moved, the step losses by at most
# 2e-8 relative in fp32 and 1.5e-5 in bf16, while the SkylakeX and
# Cooperlake files still matched, checked on one AVX-512 Zen 5 machine): a
# refactor that promises unchanged behaviour must leave every line equal. A
# change that alters bits on purpose re-records with --record and says why in
# its commit. Correctness itself is checked elsewhere (finite differences,
# PyTorch parity, the determinism and resume cases).
# The bits depend on the OpenBLAS kernel the run logs ("OpenBLAS core X",
# src/tensor/cpu/matmul.c): bits_guard.txt holds the Haswell kernel's (and
# Zen's, whose sgemm gives the same bits, checked on one machine with both);
# bits_guard.X.txt another kernel's, recorded from the same commit by
# OPENBLAS_CORETYPE=X on a CPU that runs it (SkylakeX and Cooperlake at
# 167e9a6 plus the kernel pin, on an AVX-512 Xeon whose Haswell run matched
# bits_guard.txt; an Emerald Rapids Xeon that OpenBLAS 0.3.21 does not know
# runs Cooperlake unless OPENBLAS_CORETYPE says otherwise, as fmhpc chooses
# there). --record writes the file of the kernel in use.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3 mode=${4:-check}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
source "$repo/tests/prune.sh"
common=(train%steps=6 train%global_batch=4 train%micro_batch=2 optim%warmup_steps=2 eval%every=3
        eval%batches=2 log%every=1 log%plot=F ckpt%every=0 "ckpt%resume='none'")
# name deck overrides...
cases=(
  "gpt2_adamw_cosine gpt2_nano"
  "gpt2_recompute_accum gpt2_nano model%recompute=T train%micro_batch=1"
  "llama_adamw_cosine llama_nano"
  "llama_lion_linear llama_nano optim%name='lion' optim%lr=1e-4 optim%schedule='linear'"
  "llama_sophia_wsd llama_nano optim%name='sophia' optim%sophia_k=2 optim%schedule='wsd'"
  "llama_bf16_constant llama_nano train%precision='p=f32,c=bf16' optim%schedule='constant'"
  "llama_spike_clip llama_nano train%spike_skip=T train%spike_window=2 train%spike_z=0.5 train%grad_clip=0.5"
)
out=bits_guard.txt
: > "$out"
for c in "${cases[@]}"; do
  read -r -a w <<< "$c"
  name=${w[0]} deck=${w[1]}
  dir=bits/$name
  rm -rf "$dir"
  OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$fmhpc" "$repo/inputs/$deck.in" "${common[@]}" "${w[@]:2}" \
    "run%out_dir='$dir'" > "bits_$name.log" 2>&1 || { cat "bits_$name.log"; echo "FAIL: $name did not run"; exit 1; }
  losses=$(grep -o '"loss_hex": "[^"]*"' "$dir/metrics.jsonl" | cut -d'"' -f4 | paste -sd' ')
  nloss=$(wc -w <<< "$losses")
  [ "$nloss" -eq 6 ] || { echo "FAIL: $name logged $nloss step losses, expected 6"; exit 1; }
  # A default deck ('auto') on a machine without a usable GPU trains on the CPU and says why.
  grep -q "^backend: cpu (auto: " "bits_$name.log" || { echo "FAIL: $name: no 'backend: cpu (auto: ...)' line"; exit 1; }
  sha=$(grep -o '"weights_sha256": "[^"]*"' "$dir/summary.json" | cut -d'"' -f4)
  [ -n "$sha" ] || { echo "FAIL: $name: no weights_sha256 in summary.json"; exit 1; }
  echo "$name $sha $losses" >> "$out"
  core=$(grep -m1 -o 'OpenBLAS core [^ ]*' "bits_$name.log" | cut -d' ' -f3) || true
  [ -n "$core" ] || { echo "FAIL: $name: the log names no 'OpenBLAS core'"; exit 1; }
  [ -z "${core0:-}" ] || [ "$core" = "$core0" ] || { echo "FAIL: $name ran OpenBLAS core $core, $core0 before"; exit 1; }
  core0=$core
done
case "$core0" in
  Haswell | Zen) ref=$repo/regression/reference/bits_guard.txt ;;
  *) ref=$repo/regression/reference/bits_guard.$core0.txt ;;
esac
if [ "$mode" != --record ] && [ ! -f "$ref" ]; then
  echo "FAIL: no reference for OpenBLAS core $core0 (expected $ref)"
  echo "  hint: OPENBLAS_CORETYPE=Haswell (on a CPU with AVX2 and FMA) compares with bits_guard.txt; or record"
  echo "  this kernel's file with --record on a commit whose bits match an existing reference"
  exit 1
fi
echo "OpenBLAS core $core0: reference $ref"
if [ "$mode" = --record ]; then
  cp "$out" "$ref"; echo "recorded $(wc -l < "$ref") cases into $ref"; exit 0
fi
fail=0 n=0
while read -r name rest; do
  n=$((n + 1))
  want=$(grep "^$name " "$ref" | cut -d' ' -f2-) || true
  if [ -z "$want" ]; then echo "FAIL: $name has no reference line"; fail=1
  elif [ "$want" != "$rest" ]; then
    echo "FAIL: $name changed"; echo "  reference: $want"; echo "  now:       $rest"; fail=1
  else echo "same bits: $name (weights ${rest:0:16}...)"; fi
done < "$out"
[ "$n" -gt 0 ] && [ "$n" -eq "$(grep -c . "$ref")" ] || { echo "FAIL: ran $n cases, the reference has $(grep -c . "$ref")"; fail=1; }
[ $fail -eq 0 ] && fm_prune bits && echo "PASS: bits_guard ($n cases)"
exit $fail
