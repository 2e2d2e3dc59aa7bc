#!/usr/bin/env bash
# bench/step_cpu/tiles.sh: the CPU GEMM tile (FM_GEMM_MB x FM_GEMM_NB,
# src/tensor/cpu/matmul.c) against other tiles on one training step. Each
# tile is a CPU-only build of the working tree with -DFM_GEMM_MB/NB in
# CMAKE_C_FLAGS (in a temporary directory, removed at exit); the tiles then
# take turns, ROUNDS times, under profile.sh (perf), so each run gives both
# the wall-clock figures and where the samples went. The sample shares (the
# sgemm micro-kernel, OpenBLAS's panel packing, OpenMP's waits) are what
# tells tiles apart on a shared machine: the step and the peak each move by
# up to 20% between runs there, the shares by a point or so.
#   bench/step_cpu/tiles.sh MBxNB [MBxNB...]   e.g. 256x768 512x1536
#   env: ROUNDS (2), THREADS (nproc), CASE (gpt2_124M_T256, bench/step_cpu/cases.txt)
# A tile other than matmul.c's gives other bits (matmul.c says why): this
# measures speed only. Needs perf; not run in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: tiles.sh MBxNB [MBxNB...]   (e.g. 256x768 512x1536)" >&2; exit 2; }
command -v perf >/dev/null || { echo "tiles.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
for t in "$@"; do
  [[ "$t" =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || { echo "tiles.sh: '$t' is not a tile MBxNB (e.g. 256x768)" >&2; exit 2; }
done
ROUNDS="${ROUNDS:-2}"
THREADS="${THREADS:-$(nproc)}"
CASE="${CASE:-gpt2_124M_T256}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
source "$ROOT/bench/cpu_lib.sh" "$OUT" # for fm_build_cpu_lib; each build is its own directory below
for t in "$@"; do
  echo "tiles.sh: building the CPU library with ${t} tiles" >&2
  fm_build_cpu_lib "$OUT/build_$t" -DCMAKE_C_FLAGS="-DFM_GEMM_MB=${t%x*} -DFM_GEMM_NB=${t#*x}"
done
printf "%-10s %5s %9s %8s %8s %10s %8s %7s\n" tile round ms_step "%peak" "%peak/cpu" micro-kernel packing waits
for r in $(seq 1 "$ROUNDS"); do
  for t in "$@"; do
    log="$OUT/r${r}_$t"
    bash "$ROOT/bench/step_cpu/profile.sh" "$OUT/build_$t" "$THREADS" "$CASE" > "$log" 2>&1 ||
      { tail -5 "$log" >&2; exit 1; }
    # the library really ran this tile: bench_step's "blas" line is fm_cpu_blas_info's
    grep -q "fixed ${t} GEMM tiles" "$log" ||
      { echo "tiles.sh: the ${t} build did not report ${t} tiles:" >&2; grep '^blas' "$log" >&2; exit 1; }
    /usr/bin/python3 - "$log" "$t" "$r" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
kv = dict(re.findall(r"(\w+)=([0-9.]+)", next(l for l in log.splitlines() if l.startswith("fmhpc "))))
def share(name):
    m = re.search(r"^" + re.escape(name) + r".*?([0-9.]+)%\s*$", log, re.M)
    return m.group(1) + "%" if m else "0.0%"
step = re.search(r"^the step: .*?, ([0-9.]+)% of the measured sgemm peak .*: ([0-9.]+)%$", log, re.M)
print("%-10s %5s %9s %7s%% %7s%% %10s %8s %7s" % (sys.argv[2], sys.argv[3], kv["ms_step"], step.group(1),
      step.group(2), share("sgemm micro-kernel"), share("OpenBLAS panel packing"), share("OpenMP waits")))
PY
  done
done
