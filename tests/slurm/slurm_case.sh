#!/usr/bin/env bash
# slurm_case.sh CASE FMHPC CLUSTER REPO DATA WORK: one ctest of label slurm,
# run against the private cluster that cluster-up.sh CLUSTER started.
# slurm/train_nano.sh is submitted from a job directory under WORK whose
# inputs/ is the repository's and whose data/ and tokenizers/ are DATA's
# (the reg_data fixture's linux-doc corpus). The job: nano GPT-2, 30 steps of
# 12 micro-batches, a checkpoint every 10 steps, 2 tasks.
# CASE:
#   sbatch_nano      sbatch --wait on 1 node, 2 tasks (shared memory between
#                    the ranks): exit code 0, 30 step records, the summary,
#                    the checkpoints. Its run is the reference of the others.
#   preempt_requeue  the same job; after step 12, scancel --signal=USR1 --batch:
#                    the script forwards USR1, fmhpc checkpoints and exits 3,
#                    the job requeues itself, restarts (SLURM_RESTART_COUNT=1),
#                    resumes and completes: the losses of all 30 steps (hex)
#                    and the final weights equal the uninterrupted run's.
#   two_nodes        the same job on 2 virtual nodes, 1 task each (TCP between
#                    them): the same bits as on 1 node.
# Exit 77 (skip; a failure when CI=true) only when slurmctld or munged is not installed.
set -euo pipefail
source "$(dirname "$0")/../oracle.sh"
source "$(dirname "$0")/../prune.sh"
[ $# -eq 6 ] || { echo "usage: $0 CASE FMHPC CLUSTER REPO DATA WORK" >&2; exit 2; }
case_=$1 fmhpc=$2 cluster=$3 repo=$4 data=$5 work=$6
for exe in slurmctld munged; do
  fm_need_cmd "$exe" "slurm-wlm and munge"
done
fail() { echo "FAIL: $case_: $*"; exit 1; }
[ -s "$cluster/env.sh" ] || fail "no cluster in $cluster (slurm.cluster_up did not run?)"
# shellcheck disable=SC1091
. "$cluster/env.sh"
scontrol ping >/dev/null 2>&1 || fail "slurmctld of $cluster does not answer"
[ -s "$data/data/linuxdoc_128/train.json" ] || fail "no prepped data in $data (regression.prep_nano did not run?)"
bindir=$(cd "$(dirname "$fmhpc")" && pwd)
export PATH="$bindir:$PATH"
unset SLURM_JOB_ID SLURM_JOBID SBATCH_PARTITION SLURM_PARTITION

steps=30
overrides=("train%steps=$steps" train%global_batch=12 train%micro_batch=1 optim%warmup_steps=5 eval%every=0
           "data%valid=''" log%every=10 log%plot=F ckpt%every=10 "run%out_dir='run'")
jobdir=$work/$case_
ref=$work/sbatch_nano/run

# A fresh job directory: the deck from the repository, the prepped data.
new_jobdir() {
  rm -rf "$jobdir"; mkdir -p "$jobdir"
  ln -s "$repo/inputs" "$jobdir/inputs"
  ln -s "$data/data" "$jobdir/data"
  ln -s "$data/tokenizers" "$jobdir/tokenizers"
}
field() { scontrol show job "$1" 2>/dev/null | grep -o "\b$2=[^ ]*" | head -1 | cut -d= -f2; }
# "step loss_hex" for each step, the last record of each step (a resumed run
# appends to metrics.jsonl: steps after the checkpoint appear twice).
losses() {
  grep '"record": "step"' "$1/metrics.jsonl" |
    sed -E 's/.*"step": ([0-9]+),.*"loss_hex": "([^"]*)".*/\1 \2/' |
    awk '{l[$1] = $2} END {for (s in l) print s, l[s]}' | sort -n
}
sha() { grep -o '"weights_sha256": "[^"]*"' "$1/summary.json" | cut -d'"' -f4; }
show_job() { # the job's output on failure
  echo "---- job output ($1):"; tail -n 40 "$jobdir"/fmhpc-nano-*.out 2>/dev/null || true
  scontrol show job "$1" 2>/dev/null | head -n 12 || true
}
# check_run DIR: 30 distinct steps, a summary with the step count and a weights hash.
check_run() {
  local n s
  [ -s "$1/summary.json" ] || fail "no summary.json in $1"
  n=$(losses "$1" | wc -l)
  [ "$n" -eq "$steps" ] || fail "$n distinct step records in $1/metrics.jsonl, expected $steps"
  grep -q "\"steps\": $steps," "$1/summary.json" || fail "summary.json does not say $steps steps: $(cat "$1/summary.json")"
  s=$(sha "$1"); [ ${#s} -eq 64 ] || fail "no weights_sha256 in $1/summary.json"
  echo "$1: $n steps, final loss $(losses "$1" | tail -1 | cut -d' ' -f2), weights_sha256 $s"
}
# same_bits DIR: the losses of all steps and the final weights equal the reference's.
same_bits() {
  local d
  [ -s "$ref/summary.json" ] || fail "no reference run in $ref (slurm.sbatch_nano did not pass?)"
  if ! d=$(diff <(losses "$ref") <(losses "$1")); then
    echo "$d" | head -n 6; fail "losses differ from the 1-node run's ($(echo "$d" | grep -c '^<') steps)"
  fi
  [ "$(sha "$ref")" = "$(sha "$1")" ] || fail "weights_sha256 $(sha "$1") != the 1-node run's $(sha "$ref")"
  cmp "$ref/final/model.safetensors" "$1/final/model.safetensors" || fail "final/model.safetensors differ"
  echo "same bits as the 1-node run: losses of steps 1-$steps (hex), weights_sha256 $(sha "$1"), model.safetensors"
}

t0=$(date +%s)
case $case_ in
sbatch_nano)
  # One node: the ranks talk through shared memory, not the cluster's TCP default.
  unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include
  new_jobdir; cd "$jobdir"
  rc=0; out=$(sbatch --wait --parsable -N 1 -n 2 "$repo/slurm/train_nano.sh" "${overrides[@]}") || rc=$?
  job=${out%%;*}
  echo "job $job: sbatch --wait returned $rc after $(( $(date +%s) - t0 )) s"
  [ "$rc" -eq 0 ] || { show_job "$job"; fail "sbatch --wait returned $rc"; }
  if [ "$(field "$job" JobState)" != COMPLETED ] || [ "$(field "$job" ExitCode)" != 0:0 ]; then
    show_job "$job"; fail "job $job: JobState=$(field "$job" JobState) ExitCode=$(field "$job" ExitCode)"
  fi
  echo "job $job: JobState=COMPLETED ExitCode=0:0 NodeList=$(field "$job" NodeList) NumTasks=$(field "$job" NumTasks)"
  grep -q "restart 0 on 1 nodes, 2 tasks" "fmhpc-nano-$job.out" || { show_job "$job"; fail "the job did not run 2 tasks on 1 node"; }
  check_run run
  ls run/ckpt/step_00000010.h5 run/ckpt/step_00000020.h5 run/ckpt/step_00000030.h5 >/dev/null ||
    fail "checkpoints of steps 10, 20, 30 missing: $(ls run/ckpt)"
  echo "checkpoints:" run/ckpt/*
  ;;
preempt_requeue)
  unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include
  new_jobdir; cd "$jobdir"
  out=$(sbatch --parsable -N 1 -n 2 "$repo/slurm/train_nano.sh" "${overrides[@]}") || fail "sbatch failed: $out"
  job=${out%%;*}
  trap 'scancel "$job" 2>/dev/null || true' EXIT   # no job left behind when this test fails
  echo "job $job submitted"
  # Wait until the run is past step 12 (its checkpoint of step 10 is written).
  last=0
  for _ in $(seq 1 300); do
    last=$(grep -c '"record": "step"' run/metrics.jsonl 2>/dev/null || true)
    [ "${last:-0}" -ge 12 ] && break
    state=$(field "$job" JobState)
    case $state in PENDING|RUNNING|CONFIGURING) ;; *) show_job "$job"; fail "job $job is $state before step 12";; esac
    sleep 0.5
  done
  [ "${last:-0}" -ge 12 ] || { show_job "$job"; fail "no step 12 within 150 s (at step ${last:-0})"; }
  scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 $job failed"
  echo "USR1 sent to job $job at step $last ($(( $(date +%s) - t0 )) s)"
  # Wait for the end: checkpoint, exit 3, requeue (a restart after cred_expire), completion.
  state=
  for _ in $(seq 1 240); do
    state=$(field "$job" JobState)
    case $state in PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|SUSPENDED) ;; *) break ;; esac
    sleep 1
  done
  restarts=$(field "$job" Restarts)
  echo "job $job: JobState=$state ExitCode=$(field "$job" ExitCode) Restarts=$restarts after $(( $(date +%s) - t0 )) s"
  if [ "$state" != COMPLETED ] || [ "$(field "$job" ExitCode)" != 0:0 ]; then show_job "$job"; fail "job $job ended $state"; fi
  [ "$restarts" = 1 ] || { show_job "$job"; fail "Restarts=$restarts, expected 1"; }
  trap - EXIT
  o=fmhpc-nano-$job.out
  pre=$(grep -o 'preempted: checkpointed step [0-9]*' "$o" | head -1) || { show_job "$job"; fail "fmhpc did not checkpoint on USR1"; }
  k=${pre##* }
  grep -q 'job step exited with status 3' "$o" || { show_job "$job"; fail "the job step did not exit with status 3"; }
  grep -q "requeueing job $job" "$o" || { show_job "$job"; fail "the script did not requeue"; }
  grep -q "job $job restart 1 on" "$o" || { show_job "$job"; fail "no second run with SLURM_RESTART_COUNT=1"; }
  [ -s "run/ckpt/step_$(printf '%08d' "$k").h5" ] || fail "no checkpoint file of step $k: $(ls run/ckpt)"
  r=$(grep -o '"record": "resume", "step": [0-9]*' run/metrics.jsonl | grep -o '[0-9]*$') ||
    fail "no resume record in metrics.jsonl"
  [ "$r" = "$k" ] || fail "resumed from step $r, checkpointed step $k"
  echo "USR1 -> $pre -> exit 3 -> scontrol requeue -> restart 1 resumed from step $r -> COMPLETED"
  echo "step records: $(grep -c '"record": "step"' run/metrics.jsonl) ($k before the preemption, $((steps - k)) after)"
  check_run run
  same_bits run
  ;;
two_nodes)
  # env.sh: Open MPI over TCP (loopback) between the virtual nodes.
  [ "${OMPI_MCA_btl:-}" = self,tcp ] || fail "env.sh does not select the TCP btl"
  new_jobdir; cd "$jobdir"
  rc=0; out=$(sbatch --wait --parsable -N 2 --ntasks-per-node=1 "$repo/slurm/train_nano.sh" "${overrides[@]}") || rc=$?
  job=${out%%;*}
  echo "job $job: sbatch --wait returned $rc after $(( $(date +%s) - t0 )) s"
  [ "$rc" -eq 0 ] || { show_job "$job"; fail "sbatch --wait returned $rc"; }
  nodes=$(field "$job" NodeList)
  echo "job $job: JobState=$(field "$job" JobState) ExitCode=$(field "$job" ExitCode) NodeList=$nodes NumNodes=$(field "$job" NumNodes)"
  [ "$nodes" = "n[1-2]" ] || fail "NodeList=$nodes, expected n[1-2]"
  grep -q "restart 0 on 2 nodes, 2 tasks" "fmhpc-nano-$job.out" || { show_job "$job"; fail "the job did not run 1 task on each of 2 nodes"; }
  check_run run
  same_bits run
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
if [ "$case_" = sbatch_nano ]; then
  fm_prune "$jobdir/run/ckpt" # the others compare their final/model.safetensors with its
else
  fm_prune "$jobdir"
fi
echo "PASS: slurm.$case_ ($(( $(date +%s) - t0 )) s)"
