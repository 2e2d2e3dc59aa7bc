#!/usr/bin/env bash
# bench/step_cpu/profile.sh: where the CPU training step's cycles go, below
# the per-op table of run.sh. Samples the timed steps of bench_step (one case
# of cases.txt, default gpt2_124M_T256; zero_grad, forward, backward, AdamW;
# not set-up, warm-up or the peaks: bench_step switches perf on and off
# through perf's control fifo) and sorts the samples by what ran:
#   the sgemm micro-kernel (OpenBLAS's *_kernel_*: the arithmetic),
#   OpenBLAS's panel packing (*copy_*: each fixed-tile call packs its own
#   A and B panels again; matmul.c), the rest of OpenBLAS, OpenMP's waits
#   (libgomp: spinning at barriers and the ends of loops), fmhpc's own ops by
#   kind, libc (memset, memcpy), the kernel.
# Then the figure that bounds the step's share of the sgemm peak: the step's
# FLOPs over the CPU time its samples give the micro-kernel, against one
# thread's share of the measured peak. When the micro-kernel runs at the
# peak rate, the step's share of the peak per CPU-second can be no larger
# than the micro-kernel's share of the samples. Needs perf; not run in CI.
#   bench/step_cpu/profile.sh [CPU_BUILD_DIR (default build-bench)] [THREADS (nproc)] [CASE (gpt2_124M_T256)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
command -v perf >/dev/null || { echo "profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
source "$ROOT/bench/cpu_lib.sh" "${1:-}"
THREADS="${2:-$(nproc)}"
CASE="${3:-gpt2_124M_T256}"
row=$(grep -v '^#' "$ROOT/bench/step_cpu/cases.txt" | awk -v c="$CASE" '$1 == c')
[ -n "$row" ] || { echo "profile.sh: no case '$CASE' in bench/step_cpu/cases.txt" >&2; exit 2; }
read -r _ arch C L NH NKV F V T B <<<"$row"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
fm_build_step_bench "$BUILD" "$OUT/bench_step"
mkfifo "$OUT/ctl"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $THREADS threads; case $CASE;" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
OMP_NUM_THREADS=$THREADS FMHPC_BENCH_PERF_CTL="$OUT/ctl" perf record -q -F 99 -D -1 --control "fifo:$OUT/ctl" \
  -o "$OUT/perf.data" -- "$OUT/bench_step" "$arch" "$C" "$L" "$NH" "$NKV" "$F" "$V" "$T" "$B" 5 "$THREADS" \
  > "$OUT/log" 2>&1 || { tail -5 "$OUT/log"; exit 1; }
grep -E '^(blas|fmhpc) ' "$OUT/log"
perf report -i "$OUT/perf.data" --stdio --no-children --sort dso,sym -g none -F overhead,sample,dso,sym \
  > "$OUT/report" 2>/dev/null
/usr/bin/python3 - "$OUT/log" "$THREADS" "$OUT/report" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
kv = dict(re.findall(r"(\w+)=([0-9.]+)", next(l for l in log.splitlines() if l.startswith("fmhpc "))))
threads = int(sys.argv[2])
report = open(sys.argv[3])
# (group, dso pattern, symbol pattern); the first match wins
groups = [
    ("sgemm micro-kernel (the arithmetic)", r"openblas", r"^sgemm_kernel_"),
    ("OpenBLAS panel packing (each tile call packs again)", r"openblas", r"^sgemm_(i|o)(n|t)copy_"),
    ("OpenBLAS, other (beta scaling, drivers)", r"openblas", r""),
    ("OpenMP waits (libgomp)", r"libgomp", r""),
    ("attention outside its GEMMs (softmax, masks, D)", r"bench_step",
     r"^(fwd_block|tile_P_dS|bwd_group|bwd_q_block|bwd_kv_block|block_D|tile_mask|row_max)"),
    ("cross-entropy outside its GEMMs", r"bench_step", r"(xent|rows_lse|rows_grad|vocab)"),
    ("AdamW", r"bench_step", r"adamw"),
    ("elementwise, norms, bias, embedding", r"bench_step", r"(gelu|bias|colsum|layernorm|norm_|add|embed|residual)"),
    ("fmhpc, other", r"bench_step", r""),
    ("libc (memset, memcpy)", r"libc", r""),
    ("operating system kernel", r"kernel", r""),
    ("other", r"", r""),
]
count = {g[0]: 0 for g in groups}
total = 0
for line in report:
    m = re.match(r"\s*[0-9.]+%\s+(\d+)\s+(\S+)\s+\[[.k]\]\s+(\S+)", line)
    if not m:
        continue
    n, dso, sym = int(m.group(1)), m.group(2), m.group(3)
    total += n
    for name, dp, sp in groups:
        if re.search(dp, dso) and re.search(sp, sym):
            count[name] += n
            break
if total == 0:
    sys.exit("profile.sh: perf recorded no samples of the timed steps")
print(f"samples of the timed steps: {total}")
print(f"{'what ran':54s} {'share':>7s}")
for name, _, _ in groups:
    if count[name]:
        print(f"{name:54s} {100.0 * count[name] / total:6.1f}%")
k = count[groups[0][0]] / total
flops = float(kv["gflops"]) * float(kv["ms_step"]) / 1e3  # GFLOP of the median step
cpu_s, peak = float(kv["cpu_s_step"]), float(kv["peak_gflops"])
rate = flops / (k * cpu_s)
g = float(kv["gflops"])
print(f"the step: {g:.1f} GFLOP/s, {100 * g / peak:.1f}% of the measured sgemm peak {peak:.1f} (wall clock); "
      f"{flops / cpu_s:.1f} GFLOP per CPU-second against one thread's share of the peak {peak / threads:.1f}: "
      f"{100 * flops / cpu_s * threads / peak:.1f}%")
print(f"the micro-kernel, while it runs: {rate:.1f} GFLOP per CPU-s against one thread's share of the peak "
      f"{peak / threads:.1f} ({100 * rate * threads / peak:.0f}%): the step's share of the peak per CPU-second is "
      f"at most about its share of the samples, {100 * k:.1f}%, at that rate")
PY
