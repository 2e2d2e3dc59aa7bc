#!/usr/bin/env bash
# bench/sha/run.sh: SHA-256 GB per CPU-second of 1..4 messages side by side
# (fm_sha256_update_multi) and prep's shard-checksum mix (bench_sha.c). Not run in CI.
#   bench/sha/run.sh [CPU_BUILD_DIR (default build-bench)] [PIECE_BYTES] [SECONDS_PER_ROW]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
cmake --build "$BUILD" --target fmhpc_lib -j"$(nproc)" >/dev/null
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" "$ROOT/bench/sha/bench_sha.c" "$BUILD/libfmhpc_lib.a" -o "$OUT/bench_sha"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
taskset -c 0 "$OUT/bench_sha" "${2:-262144}" "${3:-0.5}"
