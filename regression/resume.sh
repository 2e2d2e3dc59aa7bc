#!/usr/bin/env bash
# resume.sh FMHPC MPIEXEC WORK: checkpoints and exact resume (DESIGN section 8).
# gpt2_nano, 40 steps of 12 micro-batches, checkpoints every 10 steps:
#   - uninterrupted at 2 ranks (the reference);
#   - preempted after step 20 (FMHPC_CKPT_TEST_SIGNAL_AT raises SIGUSR1 on one
#     rank: exit status 3), then resumed with resume='auto' at 2 -> 2, 2 -> 3
#     and 4 -> 1 ranks: losses of steps 21-40 (hex floats) and the final
#     weights (SHA-256 and model.safetensors bytes) equal the reference's;
#   - a rank SIGKILLed while writing step 30's checkpoint: `latest` still
#     names step 20, the .partial is ignored, the resume is exact;
#   - a flipped byte in step 20's file: resume='auto' names the dataset and the
#     file and falls back to step 10;
#   - h5py lists the tensors by name and recomputes every checksum.
# The full disk is regression.resume_full_disk (full_disk.sh).
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tests/oracle.sh"
source "$repo/tests/prune.sh"
fm_need_py h5py python3-h5py
cd "$work"
common=(train%steps=40 train%global_batch=12 train%micro_batch=1 optim%warmup_steps=5 eval%every=0
        "data%valid=''" log%every=10 log%plot=F ckpt%every=10)
R=resume
rm -rf "$R"; mkdir -p "$R"
fail=0
run() { # dir np expected-status [VAR=value ... | group%key=value ...]
  local dir=$1 np=$2 want=$3; shift 3 # want: a status, or nz for any failure
  local rc=0 envs=() overrides=()
  for a in "$@"; do if [[ $a == *%* ]]; then overrides+=("$a"); else envs+=("$a"); fi; done
  env "${envs[@]}" "$mpiexec" -n "$np" "$fmhpc" "$repo/inputs/gpt2_nano.in" "${common[@]}" "${overrides[@]}" \
    "run%out_dir='$R/$dir'" > "$R/$dir.log.$np" 2>&1 || rc=$?
  [ "$want" != nz ] && [ "$rc" -eq "$want" ] || { [ "$want" = nz ] && [ "$rc" -ne 0 ]; } || { tail -30 "$R/$dir.log.$np"; echo "FAIL: $dir at $np ranks exited $rc, expected $want"; exit 1; }
}
# step records after the last resume record: "step N loss_hex"
losses() { awk '/"record": "resume"/{n=0; delete l} /"record": "step"/{l[n++]=$0} END{for(i=0;i<n;i++) print l[i]}' \
             "$R/$1/metrics.jsonl" | grep -o '"step": [0-9]*\|"loss_hex": "[^"]*"' | paste -d' ' - - |
             sed -E 's/"step": ([0-9]+) "loss_hex": "([^"]*)"/\1 \2/' | awk '$1 > 20'; }
same() { # name
  if [ "$(losses ref)" = "$(losses "$1")" ] && [ "$(losses "$1" | wc -l)" -eq 20 ] &&
     cmp -s <(grep -o '"weights_sha256": "[^"]*"' "$R/ref/summary.json") <(grep -o '"weights_sha256": "[^"]*"' "$R/$1/summary.json") &&
     cmp -s "$R/ref/final/model.safetensors" "$R/$1/final/model.safetensors"; then
    echo "same bits: $1 and the uninterrupted run (losses of steps 21-40, final weights)"
  else
    echo "FAIL: $1 differs from the uninterrupted run"; diff <(losses ref) <(losses "$1") | head -4; fail=1
  fi
}
run ref 2 0 ckpt%every=0
# preempted at step 20 on 2 and on 4 ranks (status 3), then resumed elsewhere
run p2 2 3 FMHPC_CKPT_TEST_SIGNAL_AT=20
grep -q 'preempted: checkpointed step 20' "$R/p2.log.2" || { echo "FAIL: no preemption message"; exit 1; }
cp -r "$R/p2" "$R/p2to3"; cp -r "$R/p2" "$R/flip"
run p2 2 0
grep -q 'resume: .*step_00000020.h5, step 20' "$R/p2.log.2" || { echo "FAIL: resume did not name step 20"; exit 1; }
same p2
run p2to3 3 0
same p2to3
run p4to1 4 3 FMHPC_CKPT_TEST_SIGNAL_AT=20
run p4to1 1 0
same p4to1
# kill -9 of one rank while it writes step 30's checkpoint
run kill 2 nz FMHPC_CKPT_TEST_KILL_AT=30
[ "$(cat "$R/kill/ckpt/latest")" = step_00000020.h5 ] && ls "$R/kill/ckpt/step_00000030.h5.partial" > /dev/null ||
  { echo "FAIL: after the kill, latest is $(cat "$R/kill/ckpt/latest")"; ls "$R/kill/ckpt"; fail=1; }
run kill 2 0
grep -q 'resume: .*step_00000020.h5' "$R/kill.log.2" || { echo "FAIL: the resume after the kill did not take step 20"; fail=1; }
same kill
# a flipped byte in step 20's /params/wte data: named, skipped, step 10 taken
/usr/bin/python3 - "$R/flip/ckpt/step_00000020.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["params/wte"].id.get_offset()
with open(sys.argv[1], "r+b") as fp:
    fp.seek(off + 4097); b = fp.read(1); fp.seek(off + 4097); fp.write(bytes([b[0] ^ 1]))
PY
run flip 2 0 train%steps=10
if grep -q 'skipping .*step_00000020.h5: .*dataset params/wte: SHA-256 mismatch' "$R/flip.log.2" &&
   grep -q 'resume: .*step_00000010.h5, step 10' "$R/flip.log.2"; then
  echo "flipped byte: $(grep -o 'skipping .*' "$R/flip.log.2" | cut -c1-160)"
else
  echo "FAIL: the flipped byte was not named"; grep -i 'resume\|skipping' "$R/flip.log.2"; fail=1
fi
# h5py lists the tensors and recomputes every checksum
/usr/bin/python3 "$repo/regression/ckpt_tool.py" "$R/p2/ckpt/step_00000040.h5" > "$R/h5py.txt" ||
  { cat "$R/h5py.txt"; echo "FAIL: h5py check"; fail=1; }
grep -q '^  params/wte ' "$R/h5py.txt" && grep -q '^  optim/v/wte ' "$R/h5py.txt" && tail -1 "$R/h5py.txt" ||
  { echo "FAIL: h5py did not list params/wte"; fail=1; }
[ $fail -eq 0 ] || exit 1
fm_prune "$R"
echo "PASS: resume"
