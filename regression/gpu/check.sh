#!/usr/bin/env bash
# regression/gpu/check.sh: the GPU check for a machine with an NVIDIA GPU.
# Configures a Release build with the CUDA backend required (FMHPC_CUDA=ON) in
# build-gpu, builds it, runs the ctest label `gpu` (tests/kernels: each CUDA op
# against the CPU op at its stated tolerance), and prints one line per test:
# name, pass/fail/skip, seconds. Exit status: ctest's, or 3 when a GPU is
# visible but gpu tests skipped (the skip probe or the driver is wrong).
#   regression/gpu/check.sh                 # from anywhere
#   BUILD_DIR=/tmp/b JOBS=8 CUDA_ARCHS=90 CMAKE_ARGS="-DFMHPC_WERROR=ON" regression/gpu/check.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
archs=${CUDA_ARCHS:-80;90}

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "== nvidia-smi -L"
  nvidia-smi -L || true
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
else
  echo "== nvidia-smi not found: expect the gpu tests to skip"
fi

echo "== configure ($build, CUDA archs $archs)"
# CMAKE_ARGS is split on blanks on purpose: it carries several -D options.
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFMHPC_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$archs" ${CMAKE_ARGS:-}
echo "== build (-j$jobs)"
cmake --build "$build" -j "$jobs"

echo "== ctest -L gpu"
log="$build/gpu-check.log"
set +e
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

# ctest's progress lines: " 3/11 Test #113: test_cuda_ops.gelu_fwd_vs_cpu ....   Passed    0.41 sec"
echo
echo "== gpu test results"
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
' "$log" | tee "$build/gpu-check.table"

skipped=$(grep -c ' skip ' "$build/gpu-check.table" || true)
if [ "$rc" -eq 0 ] && [ "$gpus" -gt 0 ] && [ "$skipped" -gt 0 ]; then
  echo "error: $gpus GPU(s) visible but $skipped gpu test(s) skipped; see $log (driver vs CUDA runtime?)" >&2
  exit 3
fi
exit "$rc"
