#!/bin/bash
# faults.sh CASE FMHPC MPIEXEC FIXTURES ENCODER_DIR WORK: one fault case
# (tests/faults/tests.cmake, issue 14). Each case runs fmhpc under mpiexec
# inside `timeout`, so a hang fails the test instead of stalling ctest, and
# asserts the exit status and fmhpc's own message.
#   data      prep a tiny store (the fixture of the cases below)
#   out_dir   run%out_dir a regular file / under /proc at 2 ranks: clean error, no hang
#   nan       a NaN planted in one rank's gradient (FMHPC_TEST_NAN_AT): the step
#             is skipped on both ranks and changes no bit of the checkpoint; a
#             NaN every step stops the run after &train max_bad_steps, naming
#             the step and the tensor; optim%lr=1e6 stops with status 1, no
#             final/, and a checkpoint without NaN/Inf (/reduce/amax_prev)
#   run_id    a directory holding run A's step_3 and step_6; run B (resume='none')
#             is told so, writes step_2 and step_4, and its retention (keep=1)
#             deletes only its own step_2; B again with resume='auto' resumes
#             from its own step_4 (the file `latest` names), not A's step_6
#   rollback  a run writes step_1..step_3 (keep=5); resumed from step_1 with
#             keep=1 it writes step_2: its retention keeps step_2 (the file
#             `latest` names) and the earlier line's step_3 (counted outside
#             keep, and said so); resume='auto' then continues from step_2
#   ckpt_model generate from a checkpoint with a deck whose &model differs
#             in n_head (the same parameter count) or norm_eps: exit 2 naming
#             each key with both values and the setting that matches; with
#             the checkpoint's model, the text is made (exit 0)
#   reprep    prep over a store already in the output directory, failing:
#             a train split left empty (min_chars), a shard that cannot be
#             created partway through, a directory where a new shard goes:
#             each exits 1 with its message and leaves every file of the old
#             store byte-identical (it exited 0 and replaced the shards, or
#             left new shards under the old manifest); then a good re-prep
#             resumes from the kept windows and replaces the store
#   checksum  the store's manifest carries each dataset's SHA-256: the intact
#             store is stated verified; one token changed to another valid id
#             (a copy of the store) stops training on both ranks, naming the
#             shard and the dataset
#   verify    fmhpc --verify STORE at 2 ranks: the intact store is OK (exit 0);
#             a changed token fails its SHA-256; a loss mask of 2, a
#             segment id that skips a document and a position id past its
#             column, each planted in a copy whose manifest is re-signed with
#             hashlib (so only the row checks can see them), are named by
#             shard, row, sample and column; training on the bad positions
#             stops with the same message (it segfaulted)
#   rank_kill rank 1 SIGKILLed mid-run (not the launcher) after a checkpoint:
#             the job ends within 60 s with Open MPI naming the lost rank
#             (mpirun ends every rank at a rank's abnormal exit: no heartbeat of
#             our own is needed); resume='auto' then finishes with the
#             uninterrupted run's final weights (SHA-256)
#   rank_file rank 1 alone cannot read the store's shard (MPMD: its own
#             data%train names a directory without it): every rank stops,
#             within seconds, and rank 1's message naming the file is shown
#   startup   a rank lost during start-up (FMHPC_TEST_STARTUP_STOP=1: rank 1
#             SIGSTOPs itself before MPI_Init, a frozen node the launcher
#             cannot see): rank 0 waits in MPI_Init. With FMHPC_STARTUP_TIMEOUT=5
#             the job ends within 60 s, status 1, rank 0 naming the start-up
#             deadline; with the watchdog off (0) the same job is still
#             running 15 s later (the hang it bounds). A bad value is refused.
#   preempt_startup  SIGUSR1 during start-up (FMHPC_CKPT_TEST_SIGNAL_AT=0:
#             after setup, before step 1; the handlers were installed only
#             after setup, so the signal killed the rank, status 138): exit 3,
#             no checkpoint, metrics.jsonl valid; the requeued run trains all
#             steps; a signal during the start-up of a resumed run: exit 3, and
#             the next run resumes from the same checkpoint
#   out_dir_lock  a second run into an out_dir whose run is still going (held
#             mid-checkpoint by FMHPC_CKPT_TEST_HOLD) is refused at start, exit 1,
#             naming the holder's pid (both ran, resumed each other's checkpoint
#             and tore metrics.jsonl); the first then finishes, and the
#             directory is free again for the next run
#   messages  10 failing 2-rank runs (5 agreed errors that exit, 5 out-of-memory
#             aborts on every rank): fmhpc's own message is in every output
set -euo pipefail
case_=$1 FMHPC=$2 MPIEXEC=$3 FX=$4 ENC=$5 WORK=$6
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$WORK/data/store
mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
# tiny gpt2 on the tiny store: seconds per run
TRAIN=("$SRC/inputs/gpt2_nano.in" model%d_model=32 model%n_layer=1 model%n_head=2 model%seq_len=32
       "data%train='$DATA/train.json'" "data%valid=''" train%steps=4 train%global_batch=4 train%micro_batch=1
       eval%every=0 log%every=1 log%plot=F log%peak_tflops=1 optim%warmup_steps=1)
# expect NAME SECONDS STATUS REGEX ARGS...: run at 2 ranks; the status ('nz':
# any failure), the time limit and REGEX in the output
expect() {
  local name=$1 secs=$2 want=$3 re=$4 rc=0
  shift 4
  timeout -k 5 "$secs" "$MPIEXEC" -n 2 "$FMHPC" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "$name: still running after $secs s (a hang)"
  if [ "$want" = nz ]; then [ "$rc" -ne 0 ] || fail "$name: exited 0"; else [ "$rc" = "$want" ] || { tail -20 "$WORK/$name.log"; fail "$name: exited $rc, expected $want"; }; fi
  grep -qE -- "$re" "$WORK/$name.log" || { tail -20 "$WORK/$name.log"; fail "$name: no '$re' in the output"; }
  echo "$name: exit $rc, $(grep -m1 -E -- "$re" "$WORK/$name.log")"
}

case $case_ in
out_dir_lock)
  D=$WORK/out_dir_lock
  rm -rf "$D" && mkdir -p "$D"
  FMHPC_CKPT_TEST_HOLD=2:write:$D/hold timeout -k 5 120 "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" ckpt%every=1 \
    "run%out_dir='$D/run'" > "$D/first.log" 2>&1 &
  job=$!
  for _ in $(seq 900); do [ -e "$D/hold.held" ] || ! kill -0 $job 2> /dev/null && break; sleep 0.1; done
  [ -e "$D/hold.held" ] || { wait $job || true; tail -20 "$D/first.log"; fail "first: never reached the hold"; }
  pid=$(grep -o 'pid [0-9]*' "$D/run/.fmhpc.lock" | cut -c5-)
  expect second 60 1 "fmhpc: &run out_dir = '$D/run' is in use by another run \(pid $pid on [^)]*\): two runs in one out_dir write the same checkpoints and metrics.jsonl" \
    "${TRAIN[@]}" ckpt%every=1 "run%out_dir='$D/run'"
  grep -q "^hint: wait for that run to end, or give this one another out_dir" "$WORK/second.log" || fail "second: no hint"
  ! grep -q "^step " "$WORK/second.log" || fail "second: trained"
  touch "$D/hold.go"
  rc=0
  wait $job || rc=$?
  [ "$rc" = 0 ] || { tail -20 "$D/first.log"; fail "first: exited $rc after the second was refused"; }
  /usr/bin/python3 -c "import json, sys; [json.loads(l) for l in open(sys.argv[1])]" "$D/run/metrics.jsonl" ||
    fail "metrics.jsonl is not JSON lines"
  expect third 120 0 "nothing to train" "${TRAIN[@]}" ckpt%every=1 "run%out_dir='$D/run'"
  echo "PASS: out_dir_lock"
  ;;
preempt_startup)
  D=$WORK/preempt_startup
  rm -rf "$D"
  FMHPC_CKPT_TEST_SIGNAL_AT=0 expect early 120 3 \
    "preempted during start-up, before step 1: nothing new to checkpoint \(a requeue starts afresh\); exit status 3" \
    "${TRAIN[@]}" ckpt%every=2 "run%out_dir='$D'"
  ! ls "$D/ckpt"/step_* > /dev/null 2>&1 || fail "early: wrote a checkpoint"
  /usr/bin/python3 -c "import json, sys; [json.loads(l) for l in open(sys.argv[1])]" "$D/metrics.jsonl" ||
    fail "early: metrics.jsonl is not JSON lines"
  expect requeue 120 0 "done: 4 steps" "${TRAIN[@]}" ckpt%every=2 "run%out_dir='$D'"
  [ -e "$D/ckpt/step_00000004.h5" ] || fail "requeue: no checkpoint of step 4"
  FMHPC_CKPT_TEST_SIGNAL_AT=0 expect early_resumed 120 3 \
    "preempted during start-up, before step 5: nothing new to checkpoint \(a requeue resumes from the same checkpoint\)" \
    "${TRAIN[@]}" ckpt%every=2 train%steps=6 "run%out_dir='$D'"
  expect requeue_resumed 120 0 "resume: $D/ckpt/step_00000004.h5, step 4" "${TRAIN[@]}" ckpt%every=2 train%steps=6 \
    "run%out_dir='$D'"
  [ -e "$D/ckpt/step_00000006.h5" ] || fail "requeue_resumed: no checkpoint of step 6"
  echo "PASS: preempt_startup"
  ;;
data)
  rm -rf "$WORK/data" && mkdir -p "$WORK/data"
  (cd "$WORK/data" && "$MPIEXEC" -n 1 "$FMHPC" "$SRC/inputs/prep_linuxdoc_nano.in" "prep%inputs='$FX/linuxdoc_small.jsonl'" \
    "prep%tokenizer='$ENC'" "prep%output='store'" prep%seq_len=32 "prep%format='bin'" prep%valid_fraction=0 \
    prep%progress_seconds=0 > log.txt 2>&1) || { tail -20 "$WORK/data/log.txt"; fail "prep"; }
  echo "PASS: data"
  ;;
out_dir)
  : > "$WORK/a_file"
  expect out_dir_file 60 nz "out_dir = '$WORK/a_file/run'.*cannot create" "${TRAIN[@]}" "run%out_dir='$WORK/a_file/run'"
  expect out_dir_proc 60 nz "out_dir = '/proc/fmhpc_run'.*cannot create" "${TRAIN[@]}" "run%out_dir='/proc/fmhpc_run'"
  echo "PASS: out_dir"
  ;;
nan)
  CK=(/usr/bin/python3 "$SRC/tests/faults/check_nan.py")
  rm -rf "$WORK/nan_one" "$WORK/nan_stop" "$WORK/nan_lr"
  FMHPC_TEST_NAN_AT=3:1:h.mlp.w1 expect nan_one 120 0 \
    "step 3: non-finite gradient, first in the gradient of h.mlp.w1 \(element 0\): step skipped \(1 in a row" \
    "${TRAIN[@]}" train%steps=4 ckpt%every=1 "run%out_dir='$WORK/nan_one'"
  grep -q '"skipped": 1,' "$WORK/nan_one/summary.json" || fail "nan_one: summary does not count 1 skipped step"
  "${CK[@]}" "$WORK/nan_one/ckpt/step_00000002.h5" "$WORK/nan_one/ckpt/step_00000003.h5"
  FMHPC_TEST_NAN_AT=2-100:0:wte expect nan_stop 120 1 \
    "step 4: 3 steps in a row with a non-finite loss or gradient \(first non-finite: the gradient of wte \(element 0\)\): stopping" \
    "${TRAIN[@]}" train%steps=8 train%max_bad_steps=3 ckpt%every=1 "run%out_dir='$WORK/nan_stop'"
  [ ! -e "$WORK/nan_stop/final" ] || fail "nan_stop: wrote final/"
  "${CK[@]}" "$WORK/nan_stop/ckpt/step_00000001.h5" "$WORK/nan_stop/ckpt/step_00000003.h5"
  expect nan_lr 120 1 "steps in a row with a non-finite loss or gradient .*: stopping" \
    "${TRAIN[@]}" train%steps=20 optim%lr=1e6 ckpt%every=2 "run%out_dir='$WORK/nan_lr'"
  [ ! -e "$WORK/nan_lr/final" ] || fail "nan_lr: wrote final/"
  "${CK[@]}" "$WORK/nan_lr/ckpt/$(cat "$WORK/nan_lr/ckpt/latest")"
  echo "PASS: nan"
  ;;
run_id)
  D=$WORK/runid
  rm -rf "$D"
  expect run_a 120 0 "run id [0-9a-f]{16}" "${TRAIN[@]}" train%steps=6 ckpt%every=3 ckpt%keep=5 "run%out_dir='$D/a'" \
    "ckpt%dir='$D/ckpt'"
  expect run_b 120 0 "resume = 'none': $D/ckpt already holds 2 checkpoints \(newest step_00000006.h5\)" \
    "${TRAIN[@]}" train%steps=4 ckpt%every=2 ckpt%keep=1 "ckpt%resume='none'" "run%out_dir='$D/b'" "ckpt%dir='$D/ckpt'"
  have=$(cd "$D/ckpt" && ls step_*.h5 | tr '\n' ' ')
  [ "$have" = "step_00000003.h5 step_00000004.h5 step_00000006.h5 " ] || fail "run_id: after B the directory holds $have"
  [ "$(cat "$D/ckpt/latest")" = step_00000004.h5 ] || fail "run_id: latest is not B's step_4"
  expect run_b2 120 0 "resume: $D/ckpt/step_00000004.h5, step 4 .*run id $(grep -o 'run id [0-9a-f]*' "$WORK/run_b.log" | cut -c8-)" \
    "${TRAIN[@]}" train%steps=5 ckpt%every=2 ckpt%keep=1 "run%out_dir='$D/b'" "ckpt%dir='$D/ckpt'"
  echo "PASS: run_id"
  ;;
rollback)
  D=$WORK/rollback
  rm -rf "$D"
  expect rb_a 120 0 "checkpoint: $D/ckpt/step_00000003.h5" "${TRAIN[@]}" train%steps=3 ckpt%every=1 ckpt%keep=5 \
    "run%out_dir='$D'"
  expect rb_b 120 0 "holds 1 checkpoint\(s\) of this run at later steps than 2 \(from step 3" "${TRAIN[@]}" \
    train%steps=2 ckpt%every=1 ckpt%keep=1 "ckpt%resume='$D/ckpt/step_00000001.h5'" "run%out_dir='$D'"
  grep -qF "left when this run went back to an earlier checkpoint); retention keeps them outside &ckpt keep and never deletes them (remove them when no longer wanted); one is replaced only if this run writes that step again" \
    "$WORK/rb_b.log" || fail "rollback: the warning's text"
  have=$(cd "$D/ckpt" && ls step_*.h5 | tr '\n' ' ')
  [ "$have" = "step_00000002.h5 step_00000003.h5 " ] || fail "rollback: after the resume the directory holds $have"
  [ "$(cat "$D/ckpt/latest")" = step_00000002.h5 ] || fail "rollback: latest is not the new step_2"
  expect rb_auto 120 0 "resume: $D/ckpt/step_00000002.h5, step 2" "${TRAIN[@]}" train%steps=4 ckpt%every=1 \
    ckpt%keep=1 "run%out_dir='$D'"
  have=$(cd "$D/ckpt" && ls step_*.h5 | tr '\n' ' ')
  [ "$have" = "step_00000004.h5 " ] || fail "rollback: after the line passed step 3 the directory holds $have"
  echo "PASS: rollback"
  ;;
ckpt_model)
  D=$WORK/ckpt_model
  rm -rf "$D"
  expect cm_train 120 0 "checkpoint: $D/ckpt/step_00000001.h5" "${TRAIN[@]}" train%steps=1 ckpt%every=1 "run%out_dir='$D'"
  GEN=("$SRC/inputs/generate.in" model%d_model=32 model%n_layer=1 model%seq_len=32 "generate%model='$D/ckpt/step_00000001.h5'"
       "generate%tokenizer='$ENC'" "generate%prompts='The kernel'" generate%max_tokens=4 "run%out_dir='$D/gen'")
  expect cm_heads 60 2 "&model n_head = 2 in the checkpoint, 4 in this deck" "${GEN[@]}" model%n_head=4
  grep -q "hint: to match this checkpoint, set in the deck: &model n_head = 2 " "$WORK/cm_heads.log" ||
    fail "ckpt_model: no hint naming n_head = 2"
  expect cm_eps 60 2 "&model norm_eps = 1e-5 in the checkpoint, 0.001 in this deck" "${GEN[@]}" model%n_head=2 \
    model%norm_eps=1e-3
  grep -qF "fmhpc: $D/ckpt/step_00000001.h5: the checkpoint holds another model than this deck's &model (the same number of parameters, but its weights mean something else here):" \
    "$WORK/cm_heads.log" || fail "ckpt_model: no header line"
  expect cm_same 60 0 "generate: 1 prompts" "${GEN[@]}" model%n_head=2
  # a checkpoint without a stored deck, or with one this version cannot bind: loaded, with a warning
  for k in nodeck baddeck; do
    cp "$D/ckpt/step_00000001.h5" "$D/$k.h5"
    /usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+')
if sys.argv[2] == 'nodeck': del f.attrs['deck']
else: f.attrs['deck'] = '&model no_such_key = 1 /'" "$D/$k.h5" "$k"
  done
  expect cm_nodeck 60 0 "nodeck.h5 stores no deck: its &model cannot be compared with this deck's \\(the parameter count matches\\)" \
    "${GEN[@]}" model%n_head=2 "generate%model='$D/nodeck.h5'"
  expect cm_baddeck 60 0 "baddeck.h5: the deck it stores does not bind in this version: its &model cannot be compared with this deck's" \
    "${GEN[@]}" model%n_head=2 "generate%model='$D/baddeck.h5'"
  # a newer format_version is refused, not read as this one's; a damaged nblocks is named as such
  for k in v99:format_version:99 nb0:nblocks:0; do
    IFS=: read -r f a v <<< "$k"
    cp "$D/ckpt/step_00000001.h5" "$D/$f.h5"
    /usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs.modify(sys.argv[2], int(sys.argv[3]))" \
      "$D/$f.h5" "$a" "$v"
  done
  expect cm_version 60 nz "v99.h5: format_version 99: this fmhpc reads checkpoint format version 1 \\(a checkpoint of another fmhpc version: resume or load it with that one\\)" \
    "${GEN[@]}" model%n_head=2 "generate%model='$D/v99.h5'"
  expect cm_nblocks 120 nz "nb0.h5: attribute nblocks = 0, but this run's exact reduction has [0-9]+ blocks of scales \\(0: none, as determinism = 'fast' writes\\): the attribute is damaged, or the run's determinism differs" \
    "${TRAIN[@]}" "ckpt%resume='$D/nb0.h5'" "run%out_dir='$D/nb'"
  echo "PASS: ckpt_model"
  ;;
reprep)
  R=$WORK/reprep
  rm -rf "$R" && mkdir -p "$R"
  cat "$FX/linuxdoc_small.jsonl" "$FX/linuxdoc_small.jsonl" > "$R/twice.jsonl"
  P=("$SRC/inputs/prep_linuxdoc_nano.in" "prep%tokenizer='$ENC'" "prep%output='$R/out'" prep%seq_len=32
     prep%valid_fraction=0 prep%progress_seconds=0 prep%shard_tokens=200000)
  prep1() { # NAME STATUS REGEX ARGS...: one rank
    local name=$1 want=$2 re=$3 rc=0
    shift 3
    (cd "$R" && timeout -k 5 120 "$MPIEXEC" -n 1 "$FMHPC" "${P[@]}" "$@" > "$WORK/$name.log" 2>&1) || rc=$?
    [ "$rc" = "$want" ] || { tail -20 "$WORK/$name.log"; fail "$name: exited $rc, expected $want"; }
    grep -qE -- "$re" "$WORK/$name.log" || { tail -20 "$WORK/$name.log"; fail "$name: no '$re' in the output"; }
    echo "$name: exit $rc, $(grep -m1 -E -- "$re" "$WORK/$name.log")"
  }
  same() { (cd "$R/out" && sha256sum -c --quiet "$R/old.sums") || fail "$1: the old store changed"; }
  prep1 rp_old 0 "^train +[0-9,]+ documents.* [0-9]+ shards" "prep%inputs='$FX/linuxdoc_small.jsonl'"
  (cd "$R/out" && sha256sum train.json train_*.h5 > "$R/old.sums")
  [ "$(wc -l < "$R/old.sums")" -ge 3 ] || fail "reprep: the old store has fewer than 2 shards"
  prep1 rp_empty 1 "prep: the train split would hold no document" "prep%inputs='$R/twice.jsonl'" prep%min_chars=1999999
  same rp_empty
  rm -rf "$R/out/.prep_work"
  mkdir -p "$R/out/.prep_work/stage/train_00001.h5.partial" # shard 1 cannot be created: a failure partway
  prep1 rp_partway 1 "train_00001.h5.partial" "prep%inputs='$R/twice.jsonl'"
  same rp_partway
  ls "$R/out" | grep -q partial && fail "rp_partway: a .partial file in the output directory"
  rm -rf "$R/out/.prep_work/stage"
  next=$(printf "train_%05d.h5" $(($(wc -l < "$R/old.sums") - 1))) # the first shard the old store lacks
  mkdir "$R/out/$next"
  prep1 rp_dir 1 "$next is a directory: the new store's file of that name cannot replace it; nothing was changed in $R/out" \
    "prep%inputs='$R/twice.jsonl'"
  grep -qF "hint: move it away and run the prep again (its windows are kept: it resumes)" "$WORK/rp_dir.log" ||
    fail "rp_dir: no hint"
  same rp_dir
  rmdir "$R/out/$next"
  prep1 rp_new 0 "resuming from the committed windows" "prep%inputs='$R/twice.jsonl'"
  "$MPIEXEC" -n 1 "$FMHPC" --verify "$R/out/train.json" > "$WORK/rp_verify.log" 2>&1 || { cat "$WORK/rp_verify.log"; fail "reprep: the new store does not verify"; }
  [ ! -e "$R/out/.prep_work" ] || fail "reprep: .prep_work left after a good prep"
  echo "PASS: reprep"
  ;;
checksum)
  /usr/bin/python3 - "$DATA" <<'PY'  # the manifest's checksums, recomputed with hashlib
import hashlib, json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/train.json"))
n = 0
for sh in m["shards"]:
    for name, esize in (("tokens", 4), ("loss_mask", 1), ("segment_ids", 4), ("position_ids", 4)):
        b = open(f"{d}/{sh['file']}.{name}.bin", "rb").read()
        p = 65536 * esize
        want = hashlib.sha256(b"".join(hashlib.sha256(b[i:i + p]).digest() for i in range(0, len(b), p))).hexdigest()
        assert sh["sha256"][name] == want, f"{sh['file']} {name}: manifest {sh['sha256'][name]}, hashlib {want}"
        n += 1
print(f"hashlib agrees with the manifest on {n} datasets")
PY
  C=$WORK/flipped
  rm -rf "$C" && cp -r "$DATA" "$C"
  /usr/bin/python3 - "$C/train_00000.tokens.bin" <<'PY'
import sys, numpy as np
t = np.memmap(sys.argv[1], dtype="<u4", mode="r+")
i = int(np.argmax(t < 1000))  # a small id: +1 stays a valid id
print(f"tokens[{i}]: {int(t[i])} -> {int(t[i]) + 1}")
t[i] += 1
t.flush()
PY
  expect sum_ok 120 0 "data: $DATA/train.json: every dataset of its 1 shard matches its SHA-256" "${TRAIN[@]}" \
    train%steps=1 "run%out_dir='$WORK/sum_ok'"
  expect sum_bad 120 nz "$C/train.json: shard 'train_00000': dataset 'tokens' does not match its SHA-256 in the manifest" \
    "${TRAIN[@]}" train%steps=1 "data%train='$C/train.json'" "run%out_dir='$WORK/sum_bad'"
  echo "PASS: checksum"
  ;;
verify)
  # plant KIND: a copy of the store with one bad value at tokens row 5 (flat
  # index I), the manifest re-signed with hashlib unless KIND is 'token'
  plant() {
    local kind=$1 dir=$WORK/verify_$1
    rm -rf "$dir" && cp -r "$DATA" "$dir"
    /usr/bin/python3 - "$dir" "$kind" <<'PY'
import hashlib, json, sys, numpy as np
d, kind = sys.argv[1], sys.argv[2]
m = json.load(open(f"{d}/train.json"))
f = f"{d}/{m['shards'][0]['file']}"
R = m["seq_len"] + 1
if kind == "token":      # a valid id changed: only the SHA-256 sees it
    t = np.memmap(f + ".tokens.bin", dtype="<u4", mode="r+"); i = int(np.argmax(t < 1000)); t[i] += 1; t.flush()
elif kind == "mask":     # row 5, column 7
    t = np.memmap(f + ".loss_mask.bin", dtype="u1", mode="r+"); t[5 * R + 7] = 2; t.flush()
elif kind == "position": # row 5, column 9: past the context (the embedding's rows)
    t = np.memmap(f + ".position_ids.bin", dtype="<i4", mode="r+"); t[5 * R + 9] = 1000000; t.flush()
elif kind == "position_all": # column 9 of every row: the first batch of training reads one
    t = np.memmap(f + ".position_ids.bin", dtype="<i4", mode="r+"); t[9::R] = 1000000; t.flush()
else:                    # segment: row 5, column 3 jumps two documents ahead
    t = np.memmap(f + ".segment_ids.bin", dtype="<i4", mode="r+"); t[5 * R + 3] = t[5 * R + 2] + 2; t.flush()
if kind != "token":
    for sh in m["shards"]:
        for name, esize in (("tokens", 4), ("loss_mask", 1), ("segment_ids", 4), ("position_ids", 4)):
            b = open(f"{d}/{sh['file']}.{name}.bin", "rb").read()
            p = 65536 * esize
            sh["sha256"][name] = hashlib.sha256(b"".join(hashlib.sha256(b[i:i + p]).digest()
                                                         for i in range(0, len(b), p))).hexdigest()
    json.dump(m, open(f"{d}/train.json", "w"))
PY
  }
  expect verify_ok 60 0 "^verify: OK" --verify "$DATA/train.json"
  # a manifest of another format_version is refused (it was read as version 1)
  rm -rf "$WORK/verify_v2" && cp -r "$DATA" "$WORK/verify_v2"
  sed -i 's/"format_version": 1/"format_version": 2/' "$WORK/verify_v2/train.json"
  expect verify_v2 60 nz "train.json: format_version 2: this fmhpc reads version 1 of the store format" \
    --verify "$WORK/verify_v2/train.json"
  grep -qF "hint: a store from another fmhpc version: read it with that one, or prep again with this one" \
    "$WORK/verify_v2.log" || fail "verify_v2: no hint"
  grep -q "verify:   SHA-256: every dataset of every shard matches the manifest" "$WORK/verify_ok.log" ||
    fail "verify_ok: the SHA-256 line is missing"
  for k in token mask segment position position_all; do plant $k; done
  expect verify_token 60 1 "verify_token/train.json: shard 'train_00000': dataset 'tokens' does not match its SHA-256" \
    --verify "$WORK/verify_token/train.json"
  expect verify_mask 60 1 "train_00000: row 5 \\(sample 5\\), column 7: loss mask 2: masks are 0 or 1" \
    --verify "$WORK/verify_mask/train.json"
  expect verify_segment 60 1 "train_00000: row 5 \\(sample 5\\), column 3: segment id [0-9]+ after [0-9]+" \
    --verify "$WORK/verify_segment/train.json"
  expect verify_position 60 1 "train_00000: row 5 \\(sample 5\\), column 9: position id 1000000 at column 9" \
    --verify "$WORK/verify_position/train.json"
  # training reads rows with the same rules: a position past the context crashed the embedding (SIGSEGV)
  expect train_position 60 nz "train_00000: row [0-9]+ \\(sample [0-9]+\\), column 9: position id 1000000 at column 9" \
    "${TRAIN[@]}" train%steps=1 "data%train='$WORK/verify_position_all/train.json'" "run%out_dir='$WORK/train_position'"
  ! grep -q "^verify: OK" "$WORK/verify_mask.log" "$WORK/verify_segment.log" "$WORK/verify_position.log" ||
    fail "a bad store was called OK"
  echo "PASS: verify"
  ;;
rank_kill)
  K=$WORK/kill
  rm -rf "$K"
  KT=("${TRAIN[@]}" train%steps=12 ckpt%every=3 log%every=1)
  expect kill_ref 300 0 "done: 12 steps" "${KT[@]}" "run%out_dir='$K/ref'"
  "$MPIEXEC" -n 2 "$FMHPC" "${KT[@]}" "run%out_dir='$K/run'" > "$WORK/kill_run.log" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do [ -f "$K/run/ckpt/latest" ] && break; sleep 0.1; done
  [ -f "$K/run/ckpt/latest" ] || fail "rank_kill: no checkpoint after 60 s"
  victim=
  for c in $(pgrep -P "$launcher"); do # this launcher's own children only
    tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$c
  done
  [ -n "$victim" ] || fail "rank_kill: rank 1's process not found under mpiexec $launcher"
  t0=$(date +%s)
  kill -KILL "$victim"
  rc=0
  for _ in $(seq 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then kill -KILL "$launcher"; fail "rank_kill: job still running 60 s after rank 1 died"; fi
  wait "$launcher" || rc=$?
  echo "rank_kill: rank 1 (pid $victim) killed after $(cat "$K/run/ckpt/latest"); job ended $(( $(date +%s) - t0 )) s later, status $rc"
  [ "$rc" -ne 0 ] || fail "rank_kill: the job exited 0"
  grep -E "rank 1 .*exited on signal 9|process rank 1 .*signal 9" "$WORK/kill_run.log" ||
    { tail -20 "$WORK/kill_run.log"; fail "rank_kill: no message naming rank 1"; }
  expect kill_resume 300 0 "resume: .*step_000000[0-9][0-9].h5" "${KT[@]}" "run%out_dir='$K/run'"
  want=$(grep -o '"weights_sha256": "[0-9a-f]*"' "$K/ref/summary.json")
  got=$(grep -o '"weights_sha256": "[0-9a-f]*"' "$K/run/summary.json")
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "rank_kill: resumed weights $got differ from the uninterrupted $want"
  echo "rank_kill: the resumed run's final weights equal the uninterrupted run's ($want)"
  echo "PASS: rank_kill"
  ;;
rank_file)
  H=$WORK/half
  rm -rf "$H" && mkdir -p "$H" && cp "$DATA/train.json" "$H/"
  rc=0
  timeout -k 5 60 "$MPIEXEC" -n 1 "$FMHPC" "${TRAIN[@]}" "run%out_dir='$WORK/rank_file'" : \
    -n 1 "$FMHPC" "${TRAIN[@]}" "data%train='$H/train.json'" "run%out_dir='$WORK/rank_file'" > "$WORK/rank_file.log" 2>&1 || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "rank_file: still running after 60 s (a hang)"
  [ "$rc" -ne 0 ] || fail "rank_file: exited 0"
  grep -E "fmhpc\[rank 1\]: $H/train_00000.tokens.bin: cannot open" "$WORK/rank_file.log" ||
    { tail -20 "$WORK/rank_file.log"; fail "rank_file: rank 1's message is not shown"; }
  echo "PASS: rank_file"
  ;;
startup)
  # the launcher's own rank processes, stopped or not, killed (cleanup of a hang)
  kill_job() { local c; for c in $(pgrep -P "$1" || true); do kill -KILL "$c" 2>/dev/null || true; done; kill -KILL "$1" 2>/dev/null || true; }
  export FMHPC_TEST_STARTUP_STOP=1 FMHPC_STARTUP_TIMEOUT=5
  t0=$(date +%s)
  expect startup_watchdog 60 1 "fmhpc\[rank 0\]: MPI start-up did not complete within 5 s \(a rank lost during start-up\?\); exiting so that the launcher ends the job \(FMHPC_STARTUP_TIMEOUT sets the limit\)" \
    --version < /dev/null
  took=$(( $(date +%s) - t0 ))
  grep -q "FMHPC_TEST_STARTUP_STOP=1: rank 1 stops itself before MPI_Init" "$WORK/startup_watchdog.log" ||
    fail "startup: rank 1 did not stop itself (the hook did not run)"
  ! grep -q "^fmhpc 0" "$WORK/startup_watchdog.log" || fail "startup: rank 0 got through start-up without rank 1"
  echo "startup: the job ended ${took} s after its start (deadline 5 s)"
  # the same without the watchdog: the hang it bounds
  FMHPC_STARTUP_TIMEOUT=0 "$MPIEXEC" -n 2 "$FMHPC" --version > "$WORK/startup_off.log" 2>&1 < /dev/null &
  launcher=$!
  sleep 15
  if kill -0 "$launcher" 2>/dev/null; then
    kill_job "$launcher"
    wait "$launcher" 2>/dev/null || true
    echo "startup: with FMHPC_STARTUP_TIMEOUT=0 the job was still running after 15 s (killed)"
  else
    fail "startup: without the watchdog the job ended by itself: the test no longer shows the hang it guards"
  fi
  export FMHPC_TEST_STARTUP_STOP= FMHPC_STARTUP_TIMEOUT=soon
  expect startup_bad 60 1 \
    "FMHPC_STARTUP_TIMEOUT='soon': not a number of seconds in \[0, 1e6\] \(0 turns the MPI start-up watchdog off\)" --version
  echo "PASS: startup"
  ;;
messages)
  for i in 1 2 3 4 5; do
    expect exit_$i 60 2 "<command line>:1:7: &optim warmup_steps = 20: must be <= &train steps = 4" \
      "${TRAIN[@]}" optim%warmup_steps=20 "run%out_dir='$WORK/messages'"
    expect abort_$i 60 nz "fmhpc\[rank [01]\]: out of memory allocating" "${TRAIN[@]}" model%vocab_size=4000000000 \
      "run%out_dir='$WORK/messages'"
  done
  echo "PASS: messages"
  ;;
*) fail "unknown case $case_" ;;
esac
