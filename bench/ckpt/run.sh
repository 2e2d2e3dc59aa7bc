#!/usr/bin/env bash
# bench/ckpt/run.sh: checkpoint write bandwidth of fmhpc (fm_ckpt_write of
# GPT-2 124M-sized state: parameters + AdamW m and v, 1.5 GB, parallel HDF5,
# sha256 checksums, fsync + rename) against dd of the same number of bytes to
# the same directory with conv=fsync, both REPS times in the same rotation (each
# write beside the previous one, which is removed after it; dd_rotate.sh says
# why). Goal: fmhpc >= 80% of dd. Not run in CI.
#   bench/ckpt/run.sh [CPU_BUILD_DIR (default build-bench)] [RANKS (2)] [REPS (5)] [LAYERS (12)] [DIR]
# DIR defaults to a fresh directory under $TMPDIR (or /tmp): the disk measured.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
RANKS="${2:-2}"
REPS="${3:-5}"
LAYERS="${4:-12}"
OUT="$(mktemp -d)"
if [ -n "${5:-}" ]; then DIR="$5"; mkdir -p "$DIR"; MADE=""; else DIR="$(mktemp -d)"; MADE="$DIR"; fi
trap 'rm -rf "$OUT" "$DIR"/step_* "$DIR"/latest "$DIR"/latest.tmp "$DIR"/dd.[0-9]* ${MADE:+"$MADE"}' EXIT
mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/ckpt/bench_ckpt.c" \
  "$BUILD/libfmhpc_lib.a" $(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm -o "$OUT/bench_ckpt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
all=$(mpirun -n "$RANKS" "$OUT/bench_ckpt" "$DIR" "$REPS" "$LAYERS")
f=$(grep "^RESULT" <<<"$all")
prof=$(grep "^PROFILE" <<<"$all" || true)
bytes=$(grep -o ' bytes=[0-9]*' <<<"$f" | cut -d= -f2)
# dd: the same bytes, in the same rotation (dd_rotate.sh), in the same directory emptied again
rm -f "$DIR"/step_* "$DIR"/latest
d=$(bash "$ROOT/bench/ckpt/dd_rotate.sh" "$DIR" "$bytes" "$REPS")
echo "$f"
grep "^PROFILE" <<<"$prof" || true
grep "^REP" <<<"$all" || true
echo "$d"
num() { grep -o " $1=[0-9.]*" <<<"$2" | cut -d= -f2; }
awk -v f="$(num mib_s "$f")" -v d="$(num mib_s "$d")" -v fm="$(num median_s "$f")" -v dm="$(num median_s "$d")" \
  -v dir="$DIR" 'BEGIN {
  printf "checkpoint write to %s: fmhpc %.1f MiB/s, dd conv=fsync %.1f MiB/s (best of each): %.0f%% (goal >= 80%%: %s); " \
         "medians %.3f s and %.3f s: %.0f%%\n", dir, f, d, 100 * f / d, (f / d >= 0.8) ? "met" : "NOT met", fm, dm,
         100 * dm / fm }'
