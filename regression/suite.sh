#!/usr/bin/env bash
# suite.sh: the regression cases as a computing centre runs them, across hosts.
#   cd fmhpc && sbatch --nodes=N regression/suite.sh [--short] [CASE...]
#   regression/suite.sh --list                          the cases, the short ones marked
# Each case is a script in regression/ (the same ones ctest -L regression
# runs) given regression/srun/mpiexec as its MPIEXEC: its ranks are started by
# srun, block-wise over the job's nodes (tensor-parallel groups inside a node,
# data parallelism across nodes). Each script compares its runs with its
# reference (bits where the design promises them: determinism at any dp,
# resume, ZeRO-0 vs 1, across nodes; tolerances elsewhere: bf16, PyTorch,
# h5py) and exits 0 only after all its checks; 77 is a skip (an oracle or a
# feature missing, said in its log). One table at the end: case, result,
# seconds, the log's last line; the job exits 1 if any case failed.
# Without arguments every case runs (about 30 min on 2 nodes of 2 cores);
# --short runs the few-minute subset CI runs (slurm.suite_short). Logs and
# runs go to FMHPC_SUITE_WORK (default suite-work/<job id> in the submit
# directory: it must be on a file system every node sees). fmhpc comes from
# FMHPC, else PATH, else `module load fmhpc`; the repository (for the
# scripts and inputs/) from FMHPC_REPO, else the submit directory.
#SBATCH --job-name=fmhpc-suite
#SBATCH --exclusive
#SBATCH --time=02:00:00
#SBATCH --output=fmhpc-suite-%j.out
set -uo pipefail

repo=${FMHPC_REPO:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}}
[ -x "$repo/regression/srun/mpiexec" ] ||
  { echo "suite: $repo is not an fmhpc source tree (no regression/srun/mpiexec); submit from it or set FMHPC_REPO" >&2; exit 2; }

# name|script|argument|short: in dependency order (prep_nano makes the data
# every other case reads; nano_gpt2_greedy reads nano_gpt2_curve's model).
CASES=(
  "prep_nano|prep_nano.sh||short"
  "multinode_dp2|multinode.sh|1|short"
  "multinode_tp2_dp2|multinode.sh|2|short"
  "zero0|zero0.sh||"
  "store_faults|store_faults.sh||"
  "bits_guard|bits_guard.sh||"
  "determinism_gpt2_nano|determinism.sh|gpt2_nano|"
  "determinism_llama_nano|determinism.sh|llama_nano|"
  "resume|resume.sh||"
  "resume_compat|resume_compat.sh||"
  "paths_lion|paths.sh|lion|"
  "paths_sophia|paths.sh|sophia|"
  "paths_linear|paths.sh|linear|"
  "paths_wsd|paths.sh|wsd|"
  "paths_bf16|paths.sh|bf16|"
  "paths_spike|paths.sh|spike|"
  "paths_sft|paths.sh|sft|"
  "sophia_gnb|sophia_gnb.sh||"
  "nano_gpt2_curve|nano_curve.sh||"
  "nano_gpt2_greedy|nano_greedy.sh||"
)
# Not here: resume_full_disk mounts a tmpfs on the batch host, which ranks on
# other nodes would not see (ctest -L regression runs it on one host).

short=0 list=0 want=()
for a in "$@"; do
  case $a in
  --short) short=1 ;;
  --list) list=1 ;;
  -*) echo "suite: unknown option '$a' (--short, --list, or case names)" >&2; exit 2 ;;
  *) want+=("$a") ;;
  esac
done
known=" "
for c in "${CASES[@]}"; do known+="${c%%|*} "; done
for w in "${want[@]}"; do
  [[ $known == *" $w "* ]] || { echo "suite: no case '$w'; cases:$known" >&2; exit 2; }
done
if [ "$list" = 1 ]; then
  for c in "${CASES[@]}"; do IFS='|' read -r n s a sh <<< "$c"; printf '%-24s %-18s %-10s %s\n' "$n" "$s" "$a" "$sh"; done
  exit 0
fi

if [ -n "${FMHPC:-}" ]; then fmhpc=$FMHPC
else
  if ! command -v fmhpc >/dev/null 2>&1 && command -v module >/dev/null 2>&1; then module load fmhpc; fi
  fmhpc=$(command -v fmhpc) || { echo "suite: fmhpc not found (FMHPC, PATH or module load fmhpc)" >&2; exit 2; }
fi
[ -x "$fmhpc" ] || { echo "suite: $fmhpc is not executable" >&2; exit 2; }
work=${FMHPC_SUITE_WORK:-${SLURM_SUBMIT_DIR:-$PWD}/suite-work/${SLURM_JOB_ID:-local}}
mkdir -p "$work/logs"
work=$(cd "$work" && pwd)
shim=$repo/regression/srun/mpiexec
export PATH="$repo/regression/srun:$PATH"  # scripts that call mpirun/mpiexec by name get srun too
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

echo "suite: fmhpc $("$fmhpc" --version 2>/dev/null | head -1) ($fmhpc)"
echo "suite: job ${SLURM_JOB_ID:-none} on ${SLURM_JOB_NUM_NODES:-1} node(s) ${SLURM_JOB_NODELIST:-$(hostname -s)}; work $work"

selected() { # name short
  if [ ${#want[@]} -gt 0 ]; then [[ " ${want[*]} " == *" $1 "* ]]; return; fi
  [ "$short" = 0 ] || [ "$2" = short ]
}
rows=() nfail=0 npass=0 nskip=0
t_all=$(date +%s)
for c in "${CASES[@]}"; do
  IFS='|' read -r name script arg sh <<< "$c"
  selected "$name" "$sh" || continue
  log=$work/logs/$name.log
  t0=$(date +%s)
  echo "suite: $name ..."
  rc=0
  # shellcheck disable=SC2086  # arg is empty or one word
  bash "$repo/regression/$script" "$fmhpc" "$shim" "$work" $arg > "$log" 2>&1 || rc=$?
  dt=$(( $(date +%s) - t0 ))
  last=$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-90)
  case $rc in
  0) res=PASS; npass=$((npass + 1)) ;;
  77) if grep -q '^WAITS:' "$log"; then res=WAITS; else res=SKIP; fi; nskip=$((nskip + 1)) ;;
  *) res=FAIL; nfail=$((nfail + 1)) ;;
  esac
  echo "suite: $name $res ($dt s)"
  rows+=("$(printf '%-24s %-5s %5d s  %s' "$name" "$res" "$dt" "$last")")
done

echo
echo "== fmhpc regression suite: ${SLURM_JOB_NUM_NODES:-1} node(s), job ${SLURM_JOB_ID:-none} =="
printf '%-24s %-5s %7s  %s\n' case result time "last line of logs/<case>.log"
for r in "${rows[@]}"; do echo "$r"; done
echo "== $npass passed, $nfail failed, $nskip skipped or waiting, $(( $(date +%s) - t_all )) s; logs in $work/logs =="
[ $((npass + nfail + nskip)) -gt 0 ] || { echo "suite: FAIL: no case ran"; exit 1; }
[ "$nfail" -eq 0 ] || exit 1
[ "$npass" -gt 0 ] || { echo "suite: FAIL: no case passed"; exit 1; }
exit 0
