#!/bin/bash
# prep.sh: task='prep' under srun: JSONL to packed, tokenized shards, written
# collectively (the output does not depend on the rank count; a killed prep
# resumes where it stopped).
#   sbatch slurm/prep.sh                                 inputs/prep_linuxdoc_nano.in (the nano jobs' data)
#   sbatch -n 16 slurm/prep.sh inputs/prep_linuxdoc.in   any prep deck, then overrides
#   sbatch slurm/prep.sh inputs/prep_sft.in prep%seq_len=2048
# Runs in the submit directory (the deck's relative paths: data/, tokenizers/).
# Site specifics go on the sbatch command line: nothing site-specific is baked in.
#SBATCH --job-name=fmhpc-prep
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --output=fmhpc-prep-%j.out
set -euo pipefail
if ! command -v fmhpc >/dev/null 2>&1 && command -v module >/dev/null 2>&1; then module load fmhpc; fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
deck=inputs/prep_linuxdoc_nano.in
case ${1:-} in *.in) deck=$1; shift ;; esac
echo "fmhpc-prep: job ${SLURM_JOB_ID:-?}: $deck on ${SLURM_NTASKS:-?} tasks in $PWD"
srun --mpi=pmix fmhpc "$deck" "$@"
