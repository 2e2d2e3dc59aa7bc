#!/usr/bin/env bash
# suite_case.sh FMHPC CLUSTER REPO WORK: regression/suite.sh --short as a
# centre submits it, on the private 2-virtual-node cluster of cluster-up.sh:
#   sbatch --wait --nodes=2 regression/suite.sh --short
# The job must complete with exit 0 and print its pass/fail table with
# prep_nano, multinode_dp2 and multinode_tp2_dp2 PASS: the nano Llama at dp 2 across the two
# nodes (TCP between them) gives the same loss bits and weights as dp 2 on one
# node and as 1 rank; multinode_tp2_dp2 PASS: tp 2 inside each node x dp 2
# across them gives the same bits as tp 2 on one node (ranks 2 per node).
# Exit 77 (skip; a failure when CI=true) only when slurmctld or munged is not installed.
set -euo pipefail
source "$(dirname "$0")/../oracle.sh"
source "$(dirname "$0")/../prune.sh"
[ $# -eq 4 ] || { echo "usage: $0 FMHPC CLUSTER REPO WORK" >&2; exit 2; }
fmhpc=$1 cluster=$2 repo=$3 work=$4
for exe in slurmctld munged; do fm_need_cmd "$exe" "slurm-wlm and munge"; done
fail() { echo "FAIL: slurm.suite_short: $*"; exit 1; }
[ -s "$cluster/env.sh" ] || fail "no cluster in $cluster (slurm.cluster_up did not run?)"
# shellcheck disable=SC1091
. "$cluster/env.sh"
scontrol ping >/dev/null 2>&1 || fail "slurmctld of $cluster does not answer"
unset SLURM_JOB_ID SLURM_JOBID SBATCH_PARTITION SLURM_PARTITION
jobdir=$work/suite_short
rm -rf "$jobdir"; mkdir -p "$jobdir"; cd "$jobdir"
t0=$(date +%s)
rc=0
out=$(FMHPC=$fmhpc FMHPC_REPO=$repo FMHPC_SUITE_WORK=$jobdir/w sbatch --wait --parsable --nodes=2 \
      "$repo/regression/suite.sh" --short) || rc=$?
job=${out%%;*}
o=$jobdir/fmhpc-suite-$job.out
echo "job $job: sbatch --wait returned $rc after $(( $(date +%s) - t0 )) s"
sed -n '/== fmhpc regression suite/,$p' "$o" 2>/dev/null || true
[ -s "$o" ] || fail "no job output $o"
[ "$rc" -eq 0 ] || { tail -n 30 "$o"; for f in "$jobdir"/w/logs/*.log; do echo "---- $f"; tail -n 15 "$f"; done; fail "the suite job exited $rc"; }
grep -q "== fmhpc regression suite: 2 node(s), job $job ==" "$o" || fail "no table header for 2 nodes in $o"
for c in prep_nano multinode_dp2; do
  grep -Eq "^$c +PASS " "$o" || fail "$c did not PASS"
done
grep -q "across-node placement of 2 ranks: 1 n1 1 n2" "$jobdir/w/logs/multinode_dp2.log" ||
  fail "multinode_dp2's ranks were not one on each node: $(grep placement "$jobdir/w/logs/multinode_dp2.log")"
grep -Eq "^multinode_tp2_dp2 +PASS " "$o" || fail "multinode_tp2_dp2 did not PASS (tp 2 inside each node x dp 2 across)"
grep -q "across-node placement of 4 ranks: 2 n1 2 n2" "$jobdir/w/logs/multinode_tp2_dp2.log" ||
  fail "multinode_tp2_dp2's ranks were not two on each node: $(grep placement "$jobdir/w/logs/multinode_tp2_dp2.log")"
echo "tp 2 inside each node x dp 2 across nodes: the same bits as tp 2 on one node"
fm_prune "$jobdir"
echo "PASS: slurm.suite_short ($(( $(date +%s) - t0 )) s)"
