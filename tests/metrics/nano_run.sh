#!/bin/bash
# nano_run.sh FMHPC MPIEXEC FIXTURES ENCODER_DIR WORKDIR: the run that the
# metrics tests read (tests/metrics/tests.cmake). 60 Linux-doc documents are
# prepped (seq_len 64), then a 2-layer GPT-2 trains 8 steps on 2 ranks with
# validation every 3 steps, TensorBoard on and the run name 'tb nano' (a
# blank, to check the name's escaping in file names); preempted after step 5
# (status 3) and resumed, so metrics.jsonl has a resume record and there are
# two event files, as a requeued job leaves them. Checks here: &run name in
# the log header, summary.json and the final checkpoint's run_name attribute
# (h5py); the final checkpoint's sha256 attributes against hashlib (the
# reader checks them only against the writer's own hashing).
set -euo pipefail
FMHPC=$1 MPIEXEC=$2 FX=$3 ENC=$4 WORK=$5
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
head -n 60 "$FX/linuxdoc_small.jsonl" > docs.jsonl
"$FMHPC" "$SRC/inputs/prep_linuxdoc_nano.in" "prep%inputs='docs.jsonl'" "prep%output='store'" "prep%tokenizer='$ENC'" \
  prep%valid_fraction=0.1 "prep%format='bin'" prep%progress_seconds=0 prep%seq_len=64 > prep.log 2>&1 ||
  { tail -20 prep.log; exit 1; }
train() {
  "$MPIEXEC" -n 2 "$FMHPC" "$SRC/inputs/gpt2_nano.in" "run%name='tb nano'" "run%out_dir='run'" \
    "data%train='store/train.json'" "data%valid='store/valid.json'" model%seq_len=64 model%d_model=32 \
    model%n_layer=2 train%steps=8 train%global_batch=4 train%micro_batch=2 optim%warmup_steps=3 eval%every=3 \
    eval%batches=2 log%every=4 log%tensorboard=.true. log%plot=.true. ckpt%every=8
}
rc=0
FMHPC_CKPT_TEST_SIGNAL_AT=5 train > preempt.log 2>&1 || rc=$?
[ $rc -eq 3 ] || { tail -30 preempt.log; echo "FAIL: the preempted run exited with $rc, not 3"; exit 1; }
train > train.log 2>&1 || { tail -30 train.log; exit 1; }
grep -q "resume: .*step_00000005.h5, step 5" train.log || { tail -30 train.log; echo "FAIL: no resume from step 5"; exit 1; }
grep -q "task 'train', run 'tb nano'" train.log || { echo "FAIL: no run name in the log header"; exit 1; }
if grep -q "built without PLplot" train.log; then echo "no loss.png: fmhpc was built without PLplot (metrics.loss_png says so)"
else grep -q "wrote run/loss.png" train.log || { echo "FAIL: training did not say it wrote run/loss.png"; exit 1; }; fi
/usr/bin/python3 - <<'PYEOF'
import json, sys
import h5py
s = json.load(open("run/summary.json"))
if s.get("name") != "tb nano":
    sys.exit(f"FAIL: summary.json name is {s.get('name')!r}")
with h5py.File("run/ckpt/step_00000008.h5", "r") as f:
    a = f.attrs["run_name"]
    a = a.decode() if isinstance(a, bytes) else str(a)
    if a != "tb nano":
        sys.exit(f"FAIL: checkpoint attribute run_name is {a!r}")
print("run name 'tb nano' in the log header, summary.json and the checkpoint's run_name attribute")
PYEOF
/usr/bin/python3 - <<'PYEOF'
# every dataset's sha256 attribute (written by 2 ranks, pieces hashed side by side) against hashlib's
# sha256-blocks-v1: the SHA-256 of the SHA-256s of the pieces cut at multiples of 65536 of the flat index
import hashlib, sys
import h5py, numpy as np
n = 0
def check(name, obj):
    global n
    if not isinstance(obj, h5py.Dataset) or "sha256" not in obj.attrs:
        return
    a = obj.attrs["sha256"]
    a = a.decode() if isinstance(a, bytes) else str(a)
    x = np.ascontiguousarray(obj[...]).reshape(-1)
    b, e, off, i, d = x.tobytes(), x.dtype.itemsize, int(obj.attrs["flat_offset"]), 0, []
    while i < x.size:
        k = min(65536 - (off + i) % 65536, x.size - i)
        d.append(hashlib.sha256(b[i * e:(i + k) * e]).digest())
        i += k
    want = hashlib.sha256(b"".join(d)).hexdigest()
    if a != want:
        sys.exit(f"FAIL: step_00000008.h5 {name}: sha256 attribute {a}, hashlib {want}")
    n += 1
with h5py.File("run/ckpt/step_00000008.h5", "r") as f:
    f.visititems(check)
if n < 10:
    sys.exit(f"FAIL: only {n} datasets of step_00000008.h5 carry a sha256 attribute")
print(f"hashlib agrees with the checkpoint's sha256 attribute on all {n} datasets")
PYEOF
