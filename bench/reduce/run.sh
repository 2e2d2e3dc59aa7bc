#!/usr/bin/env bash
# bench/reduce/run.sh: one step's gradient exchange, fmhpc's exact int64
# reduction (quantise + int64 reduce-scatter + convert + fp32 all-gather of the
# parameters) against a float MPI_Allreduce of the same size (plain DDP) and
# fmhpc's fast mode, at P = 2 and 4 (oversubscribed on small machines).
# Goal: exact <= 1.5x the float allreduce (issue 15). Then bench_overlap: one
# GPT-2 124M training micro-batch per rank (B = OVERLAP_B, T = OVERLAP_T: 1 and
# 64 by default; OVERLAP_MODEL="C L NH F V" another GPT-2) with the exchange after the backward pass against per-layer
# buckets during it (fm_reduce_bucket): the raw and the exposed exchange time
# per step, wall and CPU seconds, against the float allreduce. Not run in CI.
#   bench/reduce/run.sh [CPU_BUILD_DIR (default: build-bench, made here)] [N_PARAMS (GPT-2 124M)] [REPS]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
N="${2:-124439808}"
REPS="${3:-3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/reduce/bench_reduce.c" \
  "$BUILD/libfmhpc_lib.a" $(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm -o "$OUT/bench_reduce"
mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/reduce/bench_overlap.c" \
  "$BUILD/libfmhpc_lib.a" $(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm -o "$OUT/bench_overlap"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(mpirun --version | head -1)"
for p in ${REDUCE_P:-2 4}; do
  mpirun -n "$p" "$OUT/bench_reduce" "$N" "$REPS"
  # shellcheck disable=SC2086
  mpirun -n "$p" "$OUT/bench_overlap" ${OVERLAP_MODEL:-768 12 12 3072 50257} "${OVERLAP_T:-64}" "${OVERLAP_B:-1}" "$REPS"
done
