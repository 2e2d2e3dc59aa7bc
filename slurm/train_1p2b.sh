#!/bin/bash
# train_1p2b.sh: the flagship 1.2B Llama-style pretraining run.
#   sbatch slurm/train_1p2b.sh                 (from the directory holding inputs/ and data/)
#   sbatch --nodes=16 slurm/train_1p2b.sh      any node count whose dp divides 128 micro-batches
# Site specifics (account, partition, QoS, constraint) go on the sbatch command
# line or in a site deck layered after the flagship deck: nothing site-specific
# is baked in here.
#SBATCH --job-name=fmhpc-1p2b
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=fmhpc-1p2b-%j.out
set -uo pipefail

# fmhpc from the module system when there is one; else from PATH.
if command -v module >/dev/null 2>&1; then module load fmhpc; fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}

# Slurm signals the batch shell (B:USR1) up to 300 s before the time limit
# (and may send it up to a minute early). Forward it to the job step: fmhpc's
# ranks agree on the step to checkpoint, write it, and exit with status 3.
step_pid=
forward() { [ -n "$step_pid" ] && kill -USR1 "$step_pid" 2>/dev/null; }
trap forward USR1 TERM

echo "fmhpc-1p2b: job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NUM_NODES:-?} nodes"
srun --mpi=pmix fmhpc inputs/llama_1p2b.in "$@" &
step_pid=$!
# wait returns early when a trapped signal arrives; keep waiting for the step.
while true; do
  wait "$step_pid"; rc=$?
  kill -0 "$step_pid" 2>/dev/null || break
done

# 3: checkpointed on a preemption/time-limit signal; requeue to continue
# (&ckpt resume = 'auto' picks the newest valid checkpoint).
if [ "$rc" -eq 3 ]; then
  echo "fmhpc-1p2b: checkpointed on signal, requeueing job ${SLURM_JOB_ID}"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
exit "$rc"
