#!/usr/bin/env bash
# nano_curve.sh FMHPC MPIEXEC WORK: the README's main job as a regression
# case: examples/linuxdoc_nano.sh as the README runs it (prep, then
# inputs/gpt2_nano.in for its full 300 steps on 2 ranks) with its output
# redirected to a file, as under nohup or a batch system:
#   - the log is live: the first step line is readable in run.log while the
#     job runs and before half of the steps are done (metrics.jsonl, flushed
#     each step, is the clock); a block-buffering filter holds the ~4 KB of
#     step lines until near the end;
#   - check_curve.py against regression/reference/gpt2_nano.json (ctest's
#     timeout is the "under 10 minutes on 2 cores" bound).
# The trained model (runs/gpt2_nano/final) is the fixture nano_model of
# regression.nano_gpt2_greedy (nano_greedy.sh).
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
rm -rf runs/gpt2_nano
start=$(date +%s)
: > run.log
# the example calls mpirun: the one ctest found comes first on PATH
PATH="$(dirname "$mpiexec"):$PATH" FMHPC=$fmhpc WORKDIR=$work OMP_NUM_THREADS=1 NP=2 \
  bash "$repo/examples/linuxdoc_nano.sh" > run.log 2>&1 &
job=$!
live=""
while kill -0 "$job" 2>/dev/null; do
  # the first step line in the file: the job must still run and be less than half done
  if line=$(grep -m1 '^step ' run.log 2>/dev/null); then
    done_steps=$(grep -c '"record": "step"' runs/gpt2_nano/metrics.jsonl 2>/dev/null || true)
    total=$(sed -E 's|^step +[0-9]+/([0-9]+) .*|\1|' <<< "$line")
    if kill -0 "$job" 2>/dev/null && [ "${done_steps:-0}" -lt $(( total / 2 )) ]; then
      live="$line (read when ${done_steps:-0} of $total steps were done)"
    fi
    break
  fi
  sleep 0.5
done
rc=0
wait "$job" || rc=$?
echo "trained in $(( $(date +%s) - start )) s (exit status $rc)"
[ "$rc" -eq 0 ] || { tail -30 run.log; echo "FAIL: examples/linuxdoc_nano.sh exited $rc"; exit 1; }
[ -n "$live" ] || { echo "FAIL: the first step line reached run.log only at ${done_steps:-?} of ${total:-?} steps or after the job (is the log block-buffered?)"; exit 1; }
echo "live log: read '$live' from run.log while the job was running"
grep -E "^done:" run.log
/usr/bin/python3 "$repo/regression/check_curve.py" runs/gpt2_nano/metrics.jsonl "$repo/regression/reference/gpt2_nano.json"
