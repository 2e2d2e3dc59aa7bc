#!/usr/bin/env bash
# bench/ckpt/run.sh: checkpoint write bandwidth of fmhpc (fm_ckpt_write of
# GPT-2 124M-sized state: parameters + AdamW m and v, 1.5 GB, parallel HDF5,
# sha256 checksums, fsync + rename) against dd of the same number of bytes to
# the same directory with conv=fsync. Goal: fmhpc >= 80% of dd. Not run in CI.
#   bench/ckpt/run.sh [CPU_BUILD_DIR (default build-bench)] [RANKS (2)] [REPS (2)] [LAYERS (12)] [DIR]
# DIR defaults to a fresh directory under $TMPDIR (or /tmp): the disk measured.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
RANKS="${2:-2}"
REPS="${3:-2}"
LAYERS="${4:-12}"
OUT="$(mktemp -d)"
if [ -n "${5:-}" ]; then DIR="$5"; mkdir -p "$DIR"; MADE=""; else DIR="$(mktemp -d)"; MADE="$DIR"; fi
trap 'rm -rf "$OUT" "$DIR"/step_* "$DIR"/latest "$DIR"/latest.tmp "$DIR"/dd.bin "$DIR"/dd_kept.bin ${MADE:+"$MADE"}' EXIT
mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/ckpt/bench_ckpt.c" \
  "$BUILD/libfmhpc_lib.a" $(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm -o "$OUT/bench_ckpt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
all=$(mpirun -n "$RANKS" "$OUT/bench_ckpt" "$DIR" "$REPS" "$LAYERS")
f=$(grep "^RESULT" <<<"$all")
prof=$(grep "^PROFILE" <<<"$all" || true)
bytes=$(grep -o ' bytes=[0-9]*' <<<"$f" | cut -d= -f2)
# dd: the same bytes in 1 MiB blocks, fsync'd before dd exits; best of REPS
best=""
for _ in $(seq "$REPS"); do
  rm -f "$DIR/dd.bin"
  s=$(date +%s.%N)
  dd if=/dev/zero of="$DIR/dd.bin" bs=1M count=$(((bytes + 1048575) / 1048576)) conv=fsync status=none
  e=$(date +%s.%N)
  t=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }')
  best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')
done
dd_mib=$(awk -v b="$bytes" -v t="$best" 'BEGIN { printf "%.1f", b / t / 1048576 }')
# dd once more into a new file while dd.bin stays, as a checkpoint is written while the previous one stays:
# the repeats above reuse the page cache that the removed dd.bin freed, which on some machines costs far less
# than fresh pages (a KVM guest here: 0.8 s after the rm, 2.6-4.8 s beside the kept file). Not the goal's peer.
s=$(date +%s.%N)
dd if=/dev/zero of="$DIR/dd_kept.bin" bs=1M count=$(((bytes + 1048575) / 1048576)) conv=fsync status=none
e=$(date +%s.%N)
rm -f "$DIR/dd_kept.bin"
kept=$(awk -v b="$bytes" -v s="$s" -v e="$e" 'BEGIN { printf "seconds=%.3f mib_s=%.1f", e - s, b / (e - s) / 1048576 }')
echo "$f"
grep "^PROFILE" <<<"$prof" || true
echo "RESULT dd bytes=$bytes seconds=$best mib_s=$dd_mib"
echo "RESULT dd_kept bytes=$bytes $kept (a new file beside the last dd.bin, as a checkpoint beside the previous one)"
awk -v f="$(grep -o ' mib_s=[0-9.]*' <<<"$f" | cut -d= -f2)" -v d="$dd_mib" -v dir="$DIR" 'BEGIN {
  printf "checkpoint write to %s: fmhpc %.1f MiB/s, dd conv=fsync %.1f MiB/s: %.0f%% (goal >= 80%%: %s)\n",
         dir, f, d, 100 * f / d, (f / d >= 0.8) ? "met" : "NOT met" }'
