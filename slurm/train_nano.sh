#!/bin/bash
# train_nano.sh: the nano GPT-2 (inputs/gpt2_nano.in, 7.2M parameters) on CPUs,
# preemptible: the same pattern as train_1p2b.sh at workstation scale. The
# tests (ctest -L slurm) submit it to a private cluster.
#   sbatch slurm/train_nano.sh                          (from the directory holding inputs/ and data/)
#   sbatch -N 2 --ntasks-per-node=1 slurm/train_nano.sh train%steps=100
#   sbatch slurm/train_nano.sh my.in train%steps=50     a deck first replaces gpt2_nano.in
# Arguments are deck overrides (section%key=value), passed to fmhpc unchanged.
# The job runs in the submit directory; data, out_dir and the checkpoint
# directory are the deck's (relative) paths. Site specifics (account,
# partition) go on the sbatch command line: nothing site-specific is baked in.
#SBATCH --job-name=fmhpc-nano
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=fmhpc-nano-%j.out
set -uo pipefail

# fmhpc from PATH; else from the module system when there is one.
if ! command -v fmhpc >/dev/null 2>&1 && command -v module >/dev/null 2>&1; then module load fmhpc; fi
command -v fmhpc >/dev/null 2>&1 || { echo "fmhpc-nano: fmhpc not found (PATH or module load fmhpc)" >&2; exit 1; }
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
# More ranks than cores on a small node: ranks yield instead of busy-waiting.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

deck=inputs/gpt2_nano.in
case ${1:-} in *.in) deck=$1; shift ;; esac

# Slurm signals the batch shell (B:USR1) 120 s before the time limit (up to a
# minute early); a preemption (scancel --signal=USR1 --batch) does the same.
# Forward it to the job step: the ranks agree on a step, checkpoint it and
# exit with status 3.
step_pid=
# shellcheck disable=SC2317  # invoked by the trap
forward() {
  echo "fmhpc-nano: signal received, forwarding USR1 to the job step"
  if [ -n "$step_pid" ]; then kill -USR1 "$step_pid" 2>/dev/null; fi
}
trap forward USR1 TERM

echo "fmhpc-nano: job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NUM_NODES:-?} nodes," \
     "${SLURM_NTASKS:-?} tasks, in $PWD"
# resume='auto': a requeued run continues from the newest valid checkpoint.
srun --mpi=pmix fmhpc "$deck" "ckpt%resume='auto'" "$@" &
step_pid=$!
# wait returns early when a trapped signal arrives; keep waiting for the step.
while true; do
  wait "$step_pid"; rc=$?
  kill -0 "$step_pid" 2>/dev/null || break
done
echo "fmhpc-nano: job step exited with status $rc"

# 3: checkpointed on a preemption/time-limit signal: requeue to continue.
if [ "$rc" -eq 3 ]; then
  echo "fmhpc-nano: checkpointed on signal, requeueing job ${SLURM_JOB_ID}"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
exit "$rc"
