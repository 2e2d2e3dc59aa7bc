#!/bin/bash
# check.sh: validate a deck and print its plan (parameters, memory per rank,
# FLOPs) for the job's own layout, without training.
#   sbatch --nodes=2 --ntasks-per-node=4 slurm/check.sh inputs/llama_1p2b.in
#SBATCH --job-name=fmhpc-check
#SBATCH --time=00:05:00
#SBATCH --output=fmhpc-check-%j.out
set -euo pipefail
if command -v module >/dev/null 2>&1; then module load fmhpc; fi
srun --mpi=pmix fmhpc --check "${@:-inputs/llama_1p2b.in}"
