#!/usr/bin/env bash
# regression/gpu/check.sh: the GPU check, for a machine with an NVIDIA GPU.
# Two ways in:
#   regression/gpu/check.sh                 # a node with every dependency: build here
#   BUILD_DIR=/tmp/b JOBS=8 CUDA_ARCHS=90 CMAKE_ARGS="-DFMHPC_WERROR=ON" regression/gpu/check.sh
#     prints the GPU, driver and toolkit; configures a Release build with the
#     CUDA backend required (FMHPC_CUDA=ON) in build-gpu and builds only what
#     the check runs (fmhpc, the test_cuda_* binaries, bench_step_gpu); prints each kernel's registers,
#     shared memory and spills from ptxas (-Xptxas -v); runs the ctest label
#     `gpu` (tests/kernels: each CUDA op against the CPU op at its stated
#     tolerance, bitwise where promised; cuda_backend_table: a slot is NULL
#     exactly where ops.def says nocuda; NCCL at one rank) and prints one line
#     per test: name, pass/fail/skip, seconds; then times the tensor-core
#     attention at the 1.2B shapes (test_cuda_ops attention_flash_timing) and
#     the 1.2B training step with its per-op profile against the device's
#     roofs (bench/step_gpu/bench_step_gpu.c).
#   regression/gpu/check.sh --prebuilt .gpu/prebuilt.tar.xz [LOGS]
#     for a GPU machine without MPI, HDF5 or OpenBLAS (the lent H200): the
#     binaries, libraries and fixtures regression/gpu/pack.sh made on a build
#     machine. Installs Open MPI's component tree only where none is, finds
#     the machine's CUDA and NCCL libraries, runs every gpu-label test binary's
#     cases one by one (the same table), the attention timing, the step
#     bench, then refs.py (transformers loads fmhpc's HF exports and gives its logits;
#     TensorBoard reads a run's event files) and train_check.sh (training with
#     backend='cuda': nano GPT-2 against the CPU and twice for the bits; the
#     1.2B Llama 3 steps twice, its step time, tokens/s and MFU). Logs go to
#     LOGS (default /tmp/fmhpc-gpu-logs).
# Exit status: 1 on any failure, or 3 when a GPU is visible but gpu tests
# skipped (the skip probe or the driver is wrong). On one H200 (--prebuilt,
# Dec 2026) it took 141 s, the machine's start apart, before the step bench
# and train_check's two 1.2B variants were added (not yet timed there: give
# the device call 450 s).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

gpu_info() {
  gpus=0
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== GPU, driver"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv,noheader || nvidia-smi -L || true
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  else
    echo "== nvidia-smi not found: expect the gpu tests to skip"
  fi
}

# step_bench BENCH LOG: the 1.2B Llama's training step (micro-batch 4 x 2048,
# bf16 compute, recompute) on the CUDA backend, its per-op profile against the
# device's roofs (bench/step_gpu/bench_step_gpu.c).
step_bench() {
  echo
  echo "== the 1.2B step on the GPU, per op (bench_step_gpu: b 4 x T 2048, bf16, recompute; 5 steps)"
  timeout 300 "$1" llama 1536 24 24 4 6912 100000 2048 4 5 bf16 1 > "$2" 2>&1
  local st=$?
  grep -E '^(device|fmhpc|phases|profile)' "$2"
  [ $st -eq 0 ] || { echo "bench_step_gpu: exit $st; its tail:"; tail -n 8 "$2"; }
  return $st
}

# test_table LOG: ctest's progress lines (" 3/11 Test #113: name ....   Passed    0.41 sec") as one line per test.
test_table() {
  awk '
    / Test +#[0-9]+: / {
      name = $0; sub(/.*Test +#[0-9]+: /, "", name); sub(/ .*/, "", name)
      res = "FAIL"
      if ($0 ~ /  Passed /) res = "pass"
      else if ($0 ~ /Skipped/) res = "skip"
      t = "?"
      if (match($0, /[0-9.]+ sec/)) { t = substr($0, RSTART, RLENGTH); sub(/ sec/, "", t) }
      printf "%-48s %-5s %8s s\n", name, res, t
      n[res]++
    }
    END { printf "%d pass, %d fail, %d skip\n", n["pass"], n["FAIL"], n["skip"] }
  ' "$1"
}

if [ "${1:-}" = "--prebuilt" ]; then
  tarball=${2:?usage: check.sh --prebuilt TARBALL [LOGS]}
  logs=${3:-/tmp/fmhpc-gpu-logs}
  pre=/tmp/fmhpc-prebuilt
  rm -rf "$pre" && mkdir -p "$pre" "$logs"
  tar -C "$pre" -xJf "$tarball"
  set +e # from here every step runs and reports; rc collects the failures
  gpu_info
  # Debian's libmpi finds its components under its install prefix: put the
  # carried tree there, only where the machine has none of its own.
  ompi=/usr/lib/x86_64-linux-gnu/openmpi
  if [ ! -d "$ompi/lib/openmpi3" ]; then
    mkdir -p "$ompi" && cp -a "$pre/ompi/tree/." "$ompi/"
    mkdir -p /usr/share/openmpi /etc/openmpi # help texts and MCA defaults; none overwritten
    cp -an "$pre/ompi/share/." /usr/share/openmpi/
    cp -an "$pre/ompi/etc/." /etc/openmpi/
    echo "== Open MPI: the carried component tree in $ompi"
  else
    echo "== Open MPI: the machine's own tree in $ompi"
  fi
  # The CUDA and NCCL libraries the binaries link, and cuBLASLt (opened at run time), from this machine.
  libpath=$pre/lib
  for so in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    ldconfig -p | grep -q "$so " && continue
    f=$(find /usr/local/cuda* /usr/local/nvidia /opt /usr/lib /usr/local/lib -name "$so" 2>/dev/null | head -n 1 || true)
    [ -n "$f" ] && libpath=$libpath:$(dirname "$f") || echo "warning: $so not found on this machine" >&2
  done
  export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_ess_singleton_isolated=1 \
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mca_base_component_show_load_errors=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  bin=$pre/bin
  echo "== $("$bin/fmhpc" --version 2>&1 | head -n 1)"
  missing=$(for b in "$bin"/*; do ldd "$b" | grep 'not found'; done | sort -u)
  [ -z "$missing" ] || { echo "missing libraries:"; echo "$missing"; exit 1; }

  echo "== gpu tests (one process per case, as ctest runs them)"
  log=$logs/gpu-check.log
  : > "$log"
  i=0
  for t in test_cuda_ops test_cuda_bf16 test_cuda_nccl; do
    for c in $("$bin/$t" --list); do
      i=$((i + 1))
      t0=$(date +%s%N)
      timeout 120 "$bin/$t" "$c" >> "$log" 2>&1
      trc=$?
      ms=$((($(date +%s%N) - t0) / 1000000))
      res=Failed
      [ $trc -eq 0 ] && res="  Passed"
      [ $trc -eq 77 ] && res="***Skipped"
      printf '%3d Test #%d: %s.%s ....   %s    %d.%03d sec\n' "$i" "$i" "$t" "$c" "$res" $((ms / 1000)) $((ms % 1000)) |
        tee -a "$log.progress" >> "$log"
    done
  done
  echo
  echo "== gpu test results"
  test_table "$log.progress" | tee "$logs/gpu-check.table"
  rc=0
  grep -q ' FAIL ' "$logs/gpu-check.table" && rc=1
  echo
  echo "== attention (bf16 tensor cores), 1.2B shapes"
  "$bin/test_cuda_ops" attention_flash_timing 2>&1 | grep -E '^attention timing|FAIL' || true
  step_bench "$bin/bench_step_gpu" "$logs/bench_step_gpu.log" || rc=1
  echo
  echo "== references on this machine: transformers, TensorBoard"
  for r in hf tb; do # the machine's python3, without the carried libraries
    env -u LD_LIBRARY_PATH timeout 150 python3 "$root/regression/gpu/refs.py" $r "$pre/fx/$r" > "$logs/refs_$r.log" 2>&1
    st=$?
    grep -E '^(PASS|FAIL)' "$logs/refs_$r.log"
    [ $st -eq 0 ] || { rc=1; echo "refs.py $r: exit $st; its tail:"; tail -n 12 "$logs/refs_$r.log"; }
  done
  echo
  echo "== training on the GPU (train_check.sh)"
  bash "$root/regression/gpu/train_check.sh" "$bin/fmhpc" "$pre/fx" "$logs/train" || rc=1
  skipped=$(grep -c ' skip ' "$logs/gpu-check.table" || true)
  if [ "$rc" -eq 0 ] && [ "$gpus" -gt 0 ] && [ "$skipped" -gt 0 ]; then
    echo "error: $gpus GPU(s) visible but $skipped gpu test(s) skipped; see $log (driver vs CUDA runtime?)" >&2
    exit 3
  fi
  echo "== check.sh --prebuilt: exit $rc"
  exit "$rc"
fi
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
archs=${CUDA_ARCHS:-80;90}

gpu_info
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
echo "== toolkit: $("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo "nvcc not found")"

echo "== configure ($build, CUDA archs $archs)"
# CMAKE_ARGS is split on blanks on purpose: it carries several -D options.
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFMHPC_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$archs" ${CMAKE_ARGS:-}
echo "== build (-j$jobs): fmhpc, test_cuda_ops, test_cuda_bf16, test_cuda_nccl, bench_step_gpu"
set +e
cmake --build "$build" -j "$jobs" --target fmhpc test_cuda_ops test_cuda_bf16 test_cuda_nccl bench_step_gpu 2>&1 | tee "$build/gpu-build.log" | grep -v '^ptxas info'
brc=${PIPESTATUS[0]}
set -e
[ "$brc" -eq 0 ] || { echo "build failed (exit $brc): $build/gpu-build.log" >&2; exit 1; }

# ptxas -v, per kernel and architecture: registers, shared memory, spills.
echo
echo "== kernels (ptxas -v): arch, registers, smem bytes, spill stores/loads"
awk -F"'" '
  /Compiling entry function/ { k = $2; a = $4; want = 1; next }
  want && /spill stores/ { split($0, f, " "); st = f[5]; ld = f[9] }
  want && /Used [0-9]+ registers/ {
    r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
    sm = 0; if (match($0, /[0-9]+ bytes smem/)) { sm = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", sm) }
    printf "%-56s %-6s %4s regs %6s smem %s/%s spills\n", k, a, r, sm, st, ld; want = 0 }
' "$build/gpu-build.log" | sort -u | { command -v c++filt >/dev/null && c++filt || cat; }

echo "== ctest -L gpu"
log="$build/gpu-check.log"
set +e
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

test_table "$log" | tee "$build/gpu-check.table"

# Attention at the 1.2B flagship's micro-batch (tests/kernels/test_cuda_ops.c
# attention_flash_timing: its TFLOP/s line; ctest above ran it too).
echo
echo "== attention (bf16 tensor cores), 1.2B shapes"
"$build/tests/test_cuda_ops" attention_flash_timing 2>&1 | grep -E '^attention timing|FAIL' || true
set +e
step_bench "$build/tests/bench_step_gpu" "$build/bench_step_gpu.log" || rc=1
set -e

skipped=$(grep -c ' skip ' "$build/gpu-check.table" || true)
if [ "$rc" -eq 0 ] && [ "$gpus" -gt 0 ] && [ "$skipped" -gt 0 ]; then
  echo "error: $gpus GPU(s) visible but $skipped gpu test(s) skipped; see $log (driver vs CUDA runtime?)" >&2
  exit 3
fi
exit "$rc"
