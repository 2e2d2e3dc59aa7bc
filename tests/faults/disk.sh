#!/bin/bash
# disk.sh CASE FMHPC MPIEXEC WORK: disk faults during a checkpoint write
# (issue 14; the write path in src/ckpt/ckpt.c, the protocol in ckpt.h). The
# tiny gpt2 of faults.sh on its store (faults.data), 2 ranks, a checkpoint
# every step, each run inside `timeout` so a hang fails the test.
#   fill  a 64 MiB tmpfs as &ckpt dir (a checkpoint is about 19 MiB). A background
#         writer (dd) fills the disk at a held point of step 2's write
#         (FMHPC_CKPT_TEST_HOLD), after the free-space check has passed:
#           reserve: before the reservation: posix_fallocate meets ENOSPC on
#             rank 0, every rank agrees, nothing was written: exit 1 with the
#             file, bytes needed/free and a hint; latest = step 1, no .partial,
#             no latest.tmp; step 1 verifies with h5py.
#           write: mid-write (the params are written, the optimizer state is
#             not): the space was reserved before the first dataset, so dd gets
#             ENOSPC and the checkpoint completes; step 3's free-space check then
#             stops the run cleanly; latest = step 2, which verifies with h5py
#             and equals the uninterrupted run's step-2 weights. Step 3 is the
#             last: its weights still reach out_dir's final/ and summary.json
#             ("final_checkpoint": "failed"), equal to the uninterrupted run's.
#           small_out: out_dir on a 1 MiB tmpfs (the checkpoints elsewhere): final/
#             cannot be written; the failure is said with where the weights are,
#             nothing claims final/, summary.json and loss.png are whole or absent.
#           ck_small: &ckpt dir on that 1 MiB tmpfs: a warning with both sizes
#             before step 1, then the checkpoint fails as before.
#           tiny_out: out_dir with its ckpt/ on a tmpfs that metrics.jsonl fills: the last checkpoint,
#             final/, summary.json and loss.png each fail and are said; none
#             is left cut short or announced; the weights are said to be lost.
#           mfull: the same tmpfs filled by metrics.jsonl at a step of 40: one warning
#             (file, errno, record), the run goes on, whole records kept, the cut said.
#   dir   a &ckpt dir whose parents are missing is created; one under a regular
#         file is a clear error at the start, before step 1; as an unprivileged user
#         (setpriv, root only), a directory made read-only between step 1 and
#         step 2: a clear error naming the file and errno, latest = step 1, and
#         after the permission is restored a resume finishes with the
#         uninterrupted run's weights: nothing lost.
set -euo pipefail
case_=$1 FMHPC=$2 MPIEXEC=$3 WORK=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/tests/oracle.sh"
fm_need_py h5py python3-h5py
DATA=$WORK/data/store
D=$WORK/disk_$case_
fail() { echo "FAIL: $*"; exit 1; }
TRAIN=("$SRC/inputs/gpt2_nano.in" model%d_model=32 model%n_layer=1 model%n_head=2 model%seq_len=32
       "data%train='$DATA/train.json'" "data%valid=''" train%global_batch=4 train%micro_batch=1
       eval%every=0 log%every=1 log%plot=F log%peak_tflops=1 optim%warmup_steps=1 ckpt%every=1 ckpt%keep=5)
verify() { /usr/bin/python3 "$SRC/regression/ckpt_tool.py" "$1" > "$D/h5py.txt" 2>&1 || { cat "$D/h5py.txt"; fail "$1 does not verify"; }; }
wsha() { grep -o '"weights_sha256": "[0-9a-f]*"' "$1/summary.json"; }
# run NAME SECS STATUS ARGS...: a 2-rank run in the foreground, bounded
run() {
  local name=$1 secs=$2 want=$3 rc=0
  shift 3
  timeout -k 5 "$secs" "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" "$@" > "$D/$name.log" 2>&1 || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "$name: still running after $secs s (a hang)"
  [ "$rc" = "$want" ] || { tail -20 "$D/$name.log"; fail "$name: exited $rc, expected $want"; }
}
# held NAME POINT FILLER ARGS...: a run held at POINT of step 2's write while
# FILLER (a shell command) runs; then released. Sets rc to its exit status.
held() {
  local name=$1 point=$2 filler=$3
  shift 3
  rm -f "$D/hold.held" "$D/hold.go"
  FMHPC_CKPT_TEST_HOLD=2:$point:$D/hold timeout -k 5 120 "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" "$@" \
    > "$D/$name.log" 2>&1 &
  local job=$!
  for _ in $(seq 900); do [ -e "$D/hold.held" ] || ! kill -0 $job 2>/dev/null && break; sleep 0.1; done
  [ -e "$D/hold.held" ] || { wait $job || true; tail -20 "$D/$name.log"; fail "$name: never reached the hold at '$point'"; }
  eval "$filler"
  touch "$D/hold.go"
  rc=0
  wait $job || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "$name: still running 120 s after the fill (a hang)"
}
M=$D/mnt
unmount() { if mountpoint -q "$M" 2> /dev/null; then umount "$M"; fi; }

case $case_ in
fill)
  unmount
  rm -rf "$D" && mkdir -p "$M"
  if ! mount -t tmpfs -o size=64m tmpfs "$M" 2> /dev/null; then
    if [ -z "${FM_DISK_NS:-}" ] && command -v unshare > /dev/null && unshare --user --map-root-user --mount true 2> /dev/null; then
      echo "mount(2) not permitted here: running in a private user + mount namespace"
      exec env FM_DISK_NS=1 unshare --user --map-root-user --mount bash "$0" "$@"
    fi
    fm_missing "permission to mount a tmpfs (as root, or unprivileged user namespaces for unshare -rm)" \
      "root, or unprivileged user namespaces (sysctl user.max_user_namespaces > 0)"
  fi
  trap unmount EXIT
  run ref 120 0 train%steps=3 "ckpt%dir='$D/ref_ckpt'" "run%out_dir='$D/ref'"
  # fill: dd writes until the disk is full; it must end on ENOSPC with <1 MiB left
  fill="dd if=/dev/zero of='$M/fill' bs=1M > '$D/dd.txt' 2>&1 || true"
  full() { # NAME: the fill was real
    grep -q 'No space left on device' "$D/dd.txt" || { cat "$D/dd.txt"; fail "$1: dd did not fill the disk"; }
    echo "$1: filled at the hold: $(grep -o 'No space left on device' "$D/dd.txt"), $(du -m "$M/fill" | cut -f1) MiB by dd"
  }
  # 1. the disk fills after the free-space check, before the reservation
  # (all but 2 MiB: room for the empty file, not for its reservation)
  held reserve reserve "$fill; rm -f '$M/fill'; dd if=/dev/zero of='$M/fill' bs=1M \
    count=\$(( \$(df -k --output=avail '$M' | tail -1) / 1024 - 2 )) 2> /dev/null; df -k '$M' > '$D/df.txt'" train%steps=3 "ckpt%dir='$M'" "run%out_dir='$D/r1'"
  full reserve
  [ "$rc" = 1 ] || { tail -20 "$D/reserve.log"; fail "reserve: exit status $rc, expected 1"; }
  re="checkpoint of step 2 failed: $M/step_00000002.h5.partial: cannot reserve the checkpoint file \([0-9.]+ MiB\): No space left on device \([0-9.]+ [KMG]?i?B free in $M\); nothing was written"
  grep -qE "$re" "$D/reserve.log" || { tail -20 "$D/reserve.log"; fail "reserve: no '$re'"; }
  grep -q "^hint: free space in $M" "$D/reserve.log" || fail "reserve: no hint"
  ! grep -q 'no space for a checkpoint' "$D/reserve.log" || fail "reserve: the free-space check failed; the fill came too early"
  [ "$(cat "$M/latest")" = step_00000001.h5 ] || fail "reserve: latest is $(cat "$M/latest")"
  ! ls "$M"/*.partial "$M/latest.tmp" > /dev/null 2>&1 || { ls -la "$M"; fail "reserve: a .partial or latest.tmp is left"; }
  verify "$M/step_00000001.h5"
  echo "reserve: exit 1, $(grep -oE 'checkpoint of step 2 failed: .*' "$D/reserve.log")"
  # 2. the disk fills mid-write: the reserved checkpoint completes
  rm -rf "${M:?}"/* "$D/dd.txt"
  held write write "test \$(du -k '$M/step_00000002.h5.partial' | cut -f1) -ge \$((\$(stat -c %s '$D/ref_ckpt/step_00000002.h5') / 1024)) || echo UNRESERVED > '$D/unreserved'; $fill" \
    train%steps=3 "ckpt%dir='$M'" "run%out_dir='$D/r2'"
  full write
  [ ! -e "$D/unreserved" ] || fail "write: the .partial did not hold its full size before the optimizer state was written"
  [ "$rc" = 1 ] || { tail -20 "$D/write.log"; fail "write: exit status $rc, expected 1 (step 3 has no room)"; }
  grep -qE "^checkpoint: $M/step_00000002\.h5, " "$D/write.log" || { tail -20 "$D/write.log"; fail "write: step 2's checkpoint was not committed"; }
  grep -qE "checkpoint of step 3 failed: $M: no space for a checkpoint" "$D/write.log" || { tail -20 "$D/write.log"; fail "write: step 3 did not stop on the free-space check"; }
  grep -q "fmhpc: the checkpoint of the last step (3) failed (above): the run's weights are in $D/r2/final" "$D/write.log" ||
    { tail -20 "$D/write.log"; fail "write: no message saying where the last step's weights went"; }
  grep -q '"final_checkpoint": "failed"' "$D/r2/summary.json" || fail "write: summary.json does not record the failed checkpoint"
  [ -s "$D/r2/final/model.safetensors" ] || fail "write: no final/model.safetensors"
  [ -n "$(wsha "$D/ref")" ] && [ "$(wsha "$D/ref")" = "$(wsha "$D/r2")" ] || fail "write: the summary's weights differ from the uninterrupted run's"
  cmp -s "$D/ref/final/model.safetensors" "$D/r2/final/model.safetensors" || fail "write: final/ differs from the uninterrupted run's"
  [ "$(cat "$M/latest")" = step_00000002.h5 ] || fail "write: latest is $(cat "$M/latest")"
  ! ls "$M"/*.partial "$M/latest.tmp" > /dev/null 2>&1 || { ls -la "$M"; fail "write: a .partial or latest.tmp is left"; }
  verify "$M/step_00000002.h5"
  /usr/bin/python3 - "$M/step_00000002.h5" "$D/ref_ckpt/step_00000002.h5" <<'PY' || fail "write: step 2 differs from the uninterrupted run's"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert len(names) > 3, names
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), n
print(f"write: step 2's {len(names)} datasets equal the uninterrupted run's")
PY
  echo "write: $(grep -oE 'checkpoint of step 3 failed: .*' "$D/write.log")"
  # 3. out_dir on a 1 MiB tmpfs, the checkpoints elsewhere: final/ (about 6.5 MB) cannot be written. It was announced
  # ("wrote ... final/"), left empty, and the weights said to be there; now the failure is said, the weights are
  # named in their checkpoint, summary.json is whole JSON or absent, and nothing claims final/
  M2=$D/mnt2
  mkdir -p "$M2" && mount -t tmpfs -o size=1m tmpfs "$M2"
  trap 'unmount; umount "$M2" 2> /dev/null || true' EXIT
  run small_out 120 1 train%steps=2 "ckpt%dir='$D/ck3'" "run%out_dir='$M2/run'" log%plot=T
  grep -q "fmhpc: the export to $M2/run/final failed (above): the weights of step 2 are in its checkpoint in $D/ck3; exit status 1" \
    "$D/small_out.log" || { tail -20 "$D/small_out.log"; fail "small_out: no message naming where the weights are"; }
  grep -qF "hint: task = 'export' with &model init_from = that checkpoint writes them as HF safetensors; eval, generate and ifd read it as it is" \
    "$D/small_out.log" || fail "small_out: no hint"
  ! grep -q "final/ (HF safetensors)" "$D/small_out.log" || fail "small_out: final/ announced as written"
  [ ! -e "$M2/run/final" ] || { ls -la "$M2/run/final"; fail "small_out: an empty final/ is left"; }
  ! grep -q "weights are in $M2/run/final" "$D/small_out.log" || fail "small_out: the weights said to be in final/"
  [ ! -e "$M2/run/summary.json" ] || /usr/bin/python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$M2/run/summary.json" ||
    fail "small_out: summary.json is not whole JSON"
  [ ! -e "$M2/run/loss.png" ] || [ "$(tail -c 8 "$M2/run/loss.png" | od -An -tx1 | tr -d ' \n')" = 49454e44ae426082 ] ||
    fail "small_out: loss.png cut short"
  verify "$D/ck3/step_00000002.h5"
  echo "small_out: exit 1, $(grep -o 'the export to .*' "$D/small_out.log")"
  # the checkpoints on that 1 MiB tmpfs: said at start, before step 1 (it was said only at the first checkpoint)
  run ck_small 120 1 train%steps=2 ckpt%every=2 "ckpt%dir='$M2/ck'" "run%out_dir='$D/ck_small'"
  want="fmhpc: warning: &ckpt dir $M2/ck: no space for a checkpoint: "
  grep -qE "fmhpc: warning: &ckpt dir $M2/ck: no space for a checkpoint: it needs about [0-9.]+ [KMG]?i?B, [0-9.]+ [KMG]?i?B is free \(disk full or quota\); found at start, so the first checkpoint \(&ckpt every = 2, or a preemption\) would fail" \
    "$D/ck_small.log" || { tail -20 "$D/ck_small.log"; fail "ck_small: no start-up warning"; }
  [ "$(grep -nF "$want" "$D/ck_small.log" | cut -d: -f1)" -lt "$(grep -n '^step ' "$D/ck_small.log" | head -1 | cut -d: -f1)" ] ||
    fail "ck_small: the warning came after step 1"
  echo "ck_small: exit 1, $(grep -oF "$want" "$D/ck_small.log")..."
  umount "$M2"
  # 4. out_dir and its ckpt/ on a tmpfs that metrics.jsonl fills: the last checkpoint, final/, summary.json
  # and loss.png each fail, each is said (loss.png was renamed into place cut short, summary.json left empty), and
  # the weights are said to be nowhere
  # the size: the pages metrics.jsonl and the out_dir lock take (measured by the same run on a normal disk), so
  # that nothing else fits whatever the deck's length
  run tiny_probe 120 0 train%steps=2 ckpt%every=2 "run%out_dir='$D/tiny_probe'" log%plot=F
  pages=$(( ($(stat -c %s "$D/tiny_probe/metrics.jsonl") + 4095) / 4096 + 1 ))
  mount -t tmpfs -o size=$((pages * 4))k tmpfs "$M2"
  run tiny_out 120 1 train%steps=2 ckpt%every=2 "run%out_dir='$M2/run'" log%plot=T
  for want in "cannot write the run summary $M2/run/summary.json: No space left on device" \
    "fmhpc: the plot '$M2/run/loss.png.tmp' was written short (is the file system full?): no loss.png" \
    "fmhpc: the export to $M2/run/final failed (above), and so did the checkpoint of that step: the weights of step 2 are not saved; exit status 1" \
    "hint: free space in $M2/run/ckpt, then run the deck again: resume = 'auto' continues from the newest checkpoint there"; do
    grep -qF "$want" "$D/tiny_out.log" || { tail -20 "$D/tiny_out.log"; fail "tiny_out: no '$want'"; }
  done
  [ ! -e "$M2/run/summary.json" ] && [ ! -e "$M2/run/loss.png" ] || fail "tiny_out: a cut summary.json or loss.png is left"
  ! grep -q "summary.json, final/\|wrote $M2/run/loss.png" "$D/tiny_out.log" || fail "tiny_out: an unwritten file announced"
  echo "tiny_out: exit 1, $(grep -o 'the export to .*' "$D/tiny_out.log")"
  umount "$M2"
  # 5. metrics.jsonl fills that tmpfs at a step of 40 (the checkpoints elsewhere): it was cut with no word and announced
  # as written; now one warning names the file, errno and the record, the run goes on to its last checkpoint, the
  # file's whole lines are the deck and steps 1..N-1, and the closing line says where it was cut
  mount -t tmpfs -o size=$((pages * 4))k tmpfs "$M2"
  run mfull 120 1 train%steps=40 ckpt%every=40 "ckpt%dir='$D/ck_mf'" "run%out_dir='$M2/run'" log%plot=F
  re="fmhpc: warning: cannot write $M2/run/metrics.jsonl \\(No space left on device\\) at step ([0-9]+)'s record: the file keeps the records before it; none are written to it for the rest of this run, which goes on"
  [ "$(grep -cE "^$re\$" "$D/mfull.log")" = 1 ] || { tail -20 "$D/mfull.log"; fail "mfull: not one warning naming the file, errno and the record"; }
  n=$(grep -E "^$re\$" "$D/mfull.log" | sed -E "s/.* at step ([0-9]+)'s record.*/\1/")
  grep -q "^done: 40 steps" "$D/mfull.log" || fail "mfull: the run did not go on to step 40"
  grep -qF "wrote $M2/run/metrics.jsonl (cut at step $n's record)" "$D/mfull.log" || { tail -5 "$D/mfull.log"; fail "mfull: the closing line does not say where metrics.jsonl was cut"; }
  verify "$D/ck_mf/step_00000040.h5"
  /usr/bin/python3 - "$M2/run/metrics.jsonl" "$n" <<'PY' || fail "mfull: metrics.jsonl's whole lines are not the deck and steps 1..N-1"
import json, sys
text, n = open(sys.argv[1], "rb").read().decode(), int(sys.argv[2])
recs = [json.loads(l) for l in text.split("\n")[:-1]]
assert recs[0]["record"] == "deck", recs[0]
steps = [r["step"] for r in recs[1:]]
assert 2 <= n <= 40 and steps == list(range(1, n)), (n, steps)
print(f"mfull: metrics.jsonl keeps the deck and steps 1..{n - 1} whole; the warning came at step {n}")
PY
  # space freed, the run resumed from step 40 to 44: a cut record at the end is dropped and said, so the file stays
  # one record a line, and the end-of-run plot (which reads it) and --plot work
  cut=$(( $(stat -c %s "$M2/run/metrics.jsonl") - $(/usr/bin/python3 -c 'import sys; print(open(sys.argv[1], "rb").read().rfind(b"\n") + 1)' "$M2/run/metrics.jsonl") ))
  mount -o remount,size=16m "$M2"
  run mfull_resume 120 0 train%steps=44 ckpt%every=40 "ckpt%dir='$D/ck_mf'" "run%out_dir='$M2/run'" log%plot=T
  if [ "$cut" -gt 0 ]; then
    grep -qF "fmhpc: warning: $M2/run/metrics.jsonl ended inside a record (the run before was cut while writing it): its last $cut bytes, after the last whole record, were dropped" \
      "$D/mfull_resume.log" || { tail -20 "$D/mfull_resume.log"; fail "mfull: the cut record's $cut bytes not said dropped"; }
  fi
  grep -qF "wrote $M2/run/loss.png" "$D/mfull_resume.log" || { tail -20 "$D/mfull_resume.log"; fail "mfull: no loss.png after the resume"; }
  "$FMHPC" --plot "$M2/run" > "$D/mfull_plot.log" 2>&1 || { cat "$D/mfull_plot.log"; fail "mfull: --plot refuses the resumed run's metrics.jsonl"; }
  /usr/bin/python3 - "$M2/run/metrics.jsonl" "$n" <<'PY' || fail "mfull: the resumed metrics.jsonl is not steps 1..N-1, the resume, 41..44"
import json, sys
n = int(sys.argv[2])
recs = [json.loads(l) for l in open(sys.argv[1])]
kinds = [(r["record"], r.get("step")) for r in recs if r["record"] != "resume_changes"]  # steps and plot changed
want = [("deck", None)] + [("step", s) for s in range(1, n)] + [("resume", 40)] + [("step", s) for s in range(41, 45)]
assert kinds == want, kinds
print(f"mfull: resumed: deck, steps 1..{n - 1}, resume at 40, steps 41..44, one record a line")
PY
  umount "$M2"
  echo "PASS: disk fill"
  ;;
dir)
  rm -rf "$D" && mkdir -p "$D"
  run missing 120 0 train%steps=1 "ckpt%dir='$D/a/b/c'" "run%out_dir='$D/missing'"
  [ "$(cat "$D/a/b/c/latest")" = step_00000001.h5 ] || fail "missing: no checkpoint in the created directory"
  echo "missing: $D/a/b/c created, step 1 committed"
  : > "$D/a_file"
  run notdir 120 1 train%steps=2 "ckpt%dir='$D/a_file/ckpt'" "run%out_dir='$D/notdir'"
  grep -q "&ckpt dir = '$D/a_file/ckpt': cannot create or write the directory: Not a directory" \
    "$D/notdir.log" || { tail -20 "$D/notdir.log"; fail "notdir: no clear message"; }
  ! grep -q "^step " "$D/notdir.log" || { tail -20 "$D/notdir.log"; fail "notdir: steps ran before the refusal"; }
  echo "notdir: exit 1 before step 1, $(grep -o '&ckpt dir = .*' "$D/notdir.log")"
  if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null; then
    fm_missing "root and setpriv, to run as an unprivileged user (permission denied)" "util-linux (setpriv), as root"
  fi
  # as nobody: root ignores permissions
  chmod 0777 "$D"
  chmod -R a+rX "$WORK/data"
  asuser() { setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$D" TMPDIR="$D" "$@"; }
  P=$D/perm
  asuser timeout -k 5 120 "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" train%steps=3 "run%out_dir='$P/ref'" > "$D/perm_ref.log" 2>&1 ||
    { tail -20 "$D/perm_ref.log"; fail "perm: the reference run as nobody failed"; }
  rm -f "$D/hold.held" "$D/hold.go"
  asuser env FMHPC_CKPT_TEST_HOLD="2:start:$D/hold" timeout -k 5 120 "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" train%steps=3 \
    "run%out_dir='$P/run'" > "$D/perm.log" 2>&1 &
  job=$!
  for _ in $(seq 900); do [ -e "$D/hold.held" ] || ! kill -0 $job 2>/dev/null && break; sleep 0.1; done
  [ -e "$D/hold.held" ] || { wait $job || true; tail -20 "$D/perm.log"; fail "perm: never reached the hold"; }
  chmod 0555 "$P/run/ckpt"
  touch "$D/hold.go"
  rc=0
  wait $job || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "perm: still running after 120 s (a hang)"
  [ "$rc" = 1 ] || { tail -20 "$D/perm.log"; fail "perm: exit status $rc, expected 1"; }
  grep -q "checkpoint of step 2 failed: $P/run/ckpt: cannot write $P/run/ckpt/latest.tmp: Permission denied (&ckpt dir must be writable)" "$D/perm.log" ||
    { tail -20 "$D/perm.log"; fail "perm: no clear message"; }
  [ "$(cat "$P/run/ckpt/latest")" = step_00000001.h5 ] || fail "perm: latest is $(cat "$P/run/ckpt/latest")"
  ! ls "$P/run/ckpt"/*.partial > /dev/null 2>&1 || fail "perm: a .partial is left"
  verify "$P/run/ckpt/step_00000001.h5"
  echo "perm: exit 1, $(grep -o 'checkpoint of step 2 failed: .*' "$D/perm.log")"
  chmod 0755 "$P/run/ckpt"
  asuser timeout -k 5 120 "$MPIEXEC" -n 2 "$FMHPC" "${TRAIN[@]}" train%steps=3 "run%out_dir='$P/run'" > "$D/perm_resume.log" 2>&1 ||
    { tail -20 "$D/perm_resume.log"; fail "perm: the resume failed"; }
  grep -q "resume: $P/run/ckpt/step_00000001.h5, step 1" "$D/perm_resume.log" || fail "perm: did not resume from step 1"
  [ -n "$(wsha "$P/ref")" ] && [ "$(wsha "$P/ref")" = "$(wsha "$P/run")" ] || fail "perm: resumed weights differ from the uninterrupted run's"
  echo "perm: resumed from step 1 after the permission came back; final weights equal the uninterrupted run's ($(wsha "$P/ref"))"
  echo "PASS: disk dir"
  ;;
*) fail "unknown case $case_" ;;
esac
