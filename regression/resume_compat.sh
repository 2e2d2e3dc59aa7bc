#!/usr/bin/env bash
# resume_compat.sh FMHPC MPIEXEC WORK: may a deck continue a checkpoint?
# llama_nano (gpt2_nano for n_head), 4 sequences a step, checkpoint at step 2
# (its deck carries a 70,000-byte &generate prompt, past HDF5's 64 KiB
# attribute header limit), then:
#   - h5py reads the checkpoint's deck attribute whole (the prompt included);
#   - task='eval' of the checkpoint file gives the same loss bits as eval of
#     the run's HF export of the same weights (final/);
#   - n_head 4 -> 2 at the same d_model (every tensor keeps its shape) and
#     another rope_theta are refused, the message naming key, old and new value;
#   - another lr (and steps) resumes with a warning listing both keys, and
#     metrics.jsonl records them (key, checkpoint value, new value);
#   - global_batch 4 -> 2: steps 3 and 4 read sample slots 8..11, the very
#     samples the uninterrupted B = 4 run reads at step 3 (FMHPC_TEST_SAMPLE_IDS
#     logs slot and sample id), and step 4's checkpoint stores 12 samples.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
source "$repo/tests/prune.sh"
R=resume_compat
rm -rf "$R"; mkdir -p "$R"
long=$(printf 'p%.0s' $(seq 70000))
common=(train%global_batch=4 train%micro_batch=1 optim%warmup_steps=1 eval%every=0 "data%valid=''" log%every=1
        log%plot=F ckpt%every=2 "generate%prompts='$long'")
run() { # dir expected-status(0|nz) [VAR=value ... | group%key=value ...]
  local dir=$1 want=$2; shift 2
  local rc=0 envs=() overrides=()
  for a in "$@"; do if [[ $a == *%* ]]; then overrides+=("$a"); else envs+=("$a"); fi; done
  env "${envs[@]}" "$mpiexec" -n 1 "$fmhpc" "$repo/inputs/${deck:-llama_nano}.in" "${common[@]}" "${overrides[@]}" \
    "run%out_dir='$R/$dir'" > "$R/$dir.log" 2>&1 || rc=$?
  if { [ "$want" = 0 ] && [ $rc -ne 0 ]; } || { [ "$want" = nz ] && [ $rc -eq 0 ]; }; then
    tail -20 "$R/$dir.log"; echo "FAIL: $dir exited $rc, expected $want"; exit 1
  fi
}
expect() { # dir regex what
  grep -qE -- "$2" "$R/$1.log" || { tail -20 "$R/$1.log"; echo "FAIL: $1: no '$2' ($3)"; exit 1; }
  echo "ok: $1: $3"
}
run base 0 train%steps=2
for c in rope lr gb; do cp -r "$R/base" "$R/$c"; done
/usr/bin/python3 - "$R/base/ckpt/step_00000002.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    deck = f.attrs["deck"]
deck = deck.decode() if isinstance(deck, bytes) else deck
assert "p" * 70000 in deck and deck.rstrip().endswith("/"), f"deck attribute holds {len(deck)} bytes, not the whole deck"
print(f"ok: the checkpoint stores the whole resolved deck ({len(deck)} bytes)")
PY

# task='eval' of the checkpoint file equals eval of the same weights exported to HF (final/), bit for bit
for m in ckpt/step_00000002.h5 final; do
  run "eval_${m%%/*}" 0 "run%task='eval'" "eval%model='$R/base/$m'" eval%batches=2
done
a=$(grep -o '"loss_hex": "[^"]*"' "$R/eval_ckpt/eval.json"); b=$(grep -o '"loss_hex": "[^"]*"' "$R/eval_final/eval.json")
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: eval of the checkpoint ($a) and of its HF export ($b) differ"; exit 1; }
grep -q "tokens\": [1-9]" "$R/eval_ckpt/eval.json" || { echo "FAIL: the checkpoint's eval counted no tokens"; exit 1; }
echo "ok: task='eval' of step_00000002.h5 equals eval of final/ (HF): $a"

deck=gpt2_nano run gpt2 0 train%steps=2
cp -r "$R/gpt2" "$R/nhead"
deck=gpt2_nano run nhead nz train%steps=4 model%n_head=2
expect nhead "&model n_head = 4 in the checkpoint, 2 in this deck" "n_head 4 -> 2 refused, both values named"
run rope nz train%steps=4 model%rope_theta=500000.0
expect rope "&model rope_theta = 10000.0 in the checkpoint, 500000.0 in this deck" "rope_theta refused"
! grep -q '"record": "step", "step": 3' "$R/rope/metrics.jsonl" || { echo "FAIL: the refused resume trained"; exit 1; }

run lr 0 train%steps=3 optim%lr=5e-4
expect lr "resume: 2 key\(s\) differ" "lr and steps change: a warning"
expect lr "&optim lr = 0.001 in the checkpoint, 0.0005 now" "the warning names lr with both values"
/usr/bin/python3 - "$R/lr/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ch = [r for r in recs if r.get("record") == "resume_changes"]
assert len(ch) == 1, f"{len(ch)} resume_changes records"
got = {c["key"]: (c["checkpoint"], c["now"]) for c in ch[0]["changed"]}
want = {"&optim lr": ("0.001", "0.0005"), "&train steps": ("2", "3")}
assert got == want, f"recorded {got}, expected {want}"
assert ch[0]["step"] == 2 and any(r.get("record") == "step" and r["step"] == 3 for r in recs)
print("ok: metrics.jsonl records the changed keys:", got)
PY

rm -f "$R"/*.ids.*
run ref 0 train%steps=3 ckpt%every=0 FMHPC_TEST_SAMPLE_IDS="$R/ref.ids"
run gb 0 train%steps=4 train%global_batch=2 FMHPC_TEST_SAMPLE_IDS="$R/gb.ids"
expect gb "&train global_batch = 4 in the checkpoint, 2 now" "global_batch change warned"
/usr/bin/python3 - "$R/ref.ids.0" "$R/gb.ids.0" "$R/gb/ckpt/step_00000004.h5" <<'PY'
import sys, h5py
def read(p):
    return [tuple(int(x) for x in l.split()[1::2]) for l in open(p)]  # (step, slot, sample)
ref = {(slot, sample) for step, slot, sample in read(sys.argv[1]) if step == 3}
gb = read(sys.argv[2])
got = {(slot, sample) for _, slot, sample in gb}
assert [s for s, _, _ in gb] == [3, 3, 4, 4], f"steps read after the resume: {[s for s, _, _ in gb]}"
assert len(ref) == 4 and sorted(s for s, _ in ref) == [8, 9, 10, 11], f"reference slots {sorted(ref)}"
assert got == ref, f"after the resume with B=2: {sorted(got)}; the B=4 run's step 3: {sorted(ref)}"
with h5py.File(sys.argv[3], "r") as f:
    assert int(f.attrs["samples"]) == 12, f"step 4 stores {int(f.attrs['samples'])} samples"
print("ok: B 4 -> 2 continues at slot 8 with the same samples", sorted(got), "; step 4 stores 12 samples")
PY
fm_prune "$R"
echo "PASS: resume_compat"
