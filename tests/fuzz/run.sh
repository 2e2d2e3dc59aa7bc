#!/usr/bin/env bash
# tests/fuzz/run.sh MINUTES [HARNESS...]: run each libFuzzer harness (all of
# tests/fuzz/CMakeLists.txt's FMHPC_FUZZERS by default) for MINUTES wall-clock
# minutes, one after the other, at nice 19, on its seed corpus
# (tests/fuzz/corpus/<h>) plus what earlier runs found
# (<build>/tests/fuzz/work/<h>/new). Prints one line per harness: minutes,
# CPU seconds, executions, coverage (cov, ft), corpus size and crashes (also
# appended to <build>/tests/fuzz/work/<h>/history, one line per run); a
# crash's input is left in <build>/tests/fuzz/work/<h>/ (copy it into
# corpus/<h>/ as a regression input once the parser is fixed).
#   FMHPC_FUZZ_BUILD  build directory (default build-asan; configured with
#                     CC=clang -DFMHPC_CUDA=OFF -DFMHPC_FUZZ=ON when missing)
#   FMHPC_FUZZ_JOBS   harnesses run at the same time (default 1)
#   FMHPC_FUZZ_CPU=1  MINUTES are CPU minutes, not wall minutes: each harness
#                     runs again (in chunks, continuing from its corpus) until
#                     its CPU time reaches MINUTES, for a shared machine
#   FMHPC_FUZZ_NICE   the nice level (default 19)
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:?usage: tests/fuzz/run.sh MINUTES [HARNESS...]}
shift
build=${FMHPC_FUZZ_BUILD:-build-asan}
if [ $# -eq 0 ]; then
  set -- $(sed -n 's/^set(FMHPC_FUZZERS \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang cmake -S . -B "$build" -DFMHPC_CUDA=OFF -DFMHPC_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j2 --target $(printf 'fuzz_%s ' "$@") >/dev/null
secs=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
# LeakSanitizer: Open MPI/PMIx keep allocations until exit (h5attrs initialises MPI)
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0

one() {
  local h=$1 work="$build/tests/fuzz/work/$1"
  mkdir -p "$work/new" "$work/tmp"
  local log="$work/run.log" t0 cpu=0 execs=0 chunk c e
  t0=$(date +%s)
  : >"$log"
  while :; do
    chunk=$secs
    [ "${FMHPC_FUZZ_CPU:-0}" = 1 ] && chunk=$((secs - cpu < 20 ? 20 : secs - cpu))
    TMPDIR="$work/tmp" /usr/bin/time -f '%U %S' -o "$work/cpu" nice -n "${FMHPC_FUZZ_NICE:-19}" \
      "$build/tests/fuzz/fuzz_$h" -max_total_time="$chunk" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work/new" "tests/fuzz/corpus/$h" >"$log.part" 2>&1 || true
    cat "$log.part" >>"$log"
    c=$(tail -n 1 "$work/cpu" | awk '{ printf "%.0f", $1 + $2 }' 2>/dev/null || echo 0)
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log.part" | tail -n 1)
    cpu=$((cpu + ${c:-0})) execs=$((execs + ${e:-0}))
    [ "${FMHPC_FUZZ_CPU:-0}" = 1 ] && [ "$cpu" -lt "$secs" ] && [ "$(ls "$work" | grep -cE '^(crash|leak|timeout|oom)-')" = 0 ] \
      && continue
    break
  done
  rm -f "$log.part"
  local cov ft corp crashes
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  corp=$(ls "$work/new" | wc -l)
  crashes=$(ls "$work" | grep -cE '^(crash|leak|timeout|oom)-' || true)
  printf '%-15s %6.1f min  cpu %5s s  execs %9s  cov %5s  ft %6s  found %5s  crashes %s\n' "$h" \
    "$(awk -v a="$t0" -v b="$(date +%s)" 'BEGIN { print (b - a) / 60 }')" "$cpu" "$execs" "${cov:-?}" \
    "${ft:-?}" "$corp" "$crashes" | tee -a "$work/history"
}
jobs_max=${FMHPC_FUZZ_JOBS:-1}
for h in "$@"; do
  one "$h" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
wait
