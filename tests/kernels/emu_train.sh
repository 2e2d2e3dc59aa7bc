#!/usr/bin/env bash
# emu_train.sh CASE FMHPC FMHPC_EMU MPIEXEC FIXTURES WORK: task='train' with
# backend='cuda' on the emulated GPU (fmhpc_emu: every model kernel of
# src/tensor/cuda/ run by the SIMT emulator, buffers not host-accessible, so
# the train loop takes its device path). Label emu; seconds per case.
#   data   a BPE of 320 ids trained on linux-doc, a store of 32-token rows
#          packed bfd_split with document-reset positions (segment ids: the
#          document mask) and a validation store
#   llama  tiny Llama (GQA 4 query heads over 2 KV heads, untied), AdamW,
#   paths  the fast (fp32) reduction (GPT-2) and Sophia-G with &parallel zero = 0
#          (Llama; its Hessian pass runs the model's logits and a second
#          backward on the device) at 2 ranks: losses within 1e-6 of the CPU's
#   plans  (Llama, 1 rank) the checkpoint's gemm_plans attribute (read with
#          h5py) holds the device line and the plans the run logged; a resume
#          under a heuristic that now chooses otherwise (FMHPC_EMU_GEMM_HEURISTIC)
#          pins the recorded algorithms (its step-3 checkpoint records step 2's);
#          a planted algorithm id not offered and a planted other device are
#          warnings naming the shape and what was chosen instead
#   oom    (Llama, 1 rank) an emulated device of FMHPC_EMU_DEVICE_MEM bytes
#          (room for the weights, the gradients and half the activations that
#          --check plans): the run stops with the report naming the
#          activations, the bytes asked, --check's figure, free/total, the hint
#   nccl_shards  a Llama of 2+ parameter blocks: comm='nccl' and 'mpi' at 2 ranks and 1 rank, same bits
#   fast_nccl  determinism='fast' over NCCL on device buffers: bitwise run to run, = fast+mpi at 2 ranks,
#          within 1e-6 of exact
#   gpubind  each rank on its node-local GPU with comm 'mpi' and 'nccl' (train, eval, generate), one GPU per
#          task, sharing
#   traffic  the host<->device bytes of a steady-state step per named device
#          buffer (fmhpc_emu's copy counters, FMHPC_EMU_COPY_STATS) at 1 and 2
#          ranks: no optimizer state, no weights (at 2 ranks exactly the MPI
#          all-gather's staging), the reduced shard up once, the rest bounded
#   sync   a step's device allocations (0 after the first) and reads (copy_to_host: host syncs),
#          at most a stated few and the same with 1 and several micro-batches (comm 'nccl', 'auto')
#   gpt2   tiny GPT-2 (tied embeddings), AdamW; each 3 steps of 4 sequences
#          in micro-batches of 1, exact reduction, and a validation pass:
#     - the CPU backend's losses (3 steps and validation) within 1e-6
#       relative of the emulated CUDA run's. Why not bitwise: the kernels
#       sum in other orders than the CPU ops (GEMM k-order, attention tiles,
#       cross-entropy vocab chunks), each result a few fp32 ulps (~1e-7)
#       away; three AdamW steps keep that at ~1e-9 relative here (observed),
#       while a wrong gradient of any tensor at lr 1e-2 moves the step-2 and
#       step-3 losses by > 1e-4;
#     - the same loss bits and weights SHA-256 under the forward and a
#       seeded random thread schedule (FMHPC_EMU_SCHEDULE), and at 1 and 2
#       MPI ranks (the exact int64 reduction; 2 ranks with &parallel
#       comm='nccl': the exchange on the device over the emulated NCCL of
#       tests/kernels/emu/nccl_emu.c, and 1 rank with 'auto', which takes
#       NCCL on CUDA);
#     - llama only: the same bits with comm='mpi' at 2 ranks (host copies
#       over MPI); a failing NCCL call (FMHPC_EMU_FAIL) named with the
#       device;
#     - llama only: a run preempted after step 2 (checkpoint written from
#       the device path) and resumed with resume='auto' (NCCL) at 2 ranks
#       under the reverse schedule ends with the uninterrupted run's bits; a NaN
#       planted in one rank's gradient (FMHPC_TEST_NAN_AT) is found by the
#       device quantisation, named (tensor, element) and the step skipped;
#       task='eval' of the trained model with backend='cuda' at 2 ranks
#       matches the CPU's eval loss within 1e-6; task='generate' (greedy,
#       batch 2) writes the same texts on the emulated CUDA as on the CPU;
#       without attention_decode (FMHPC_EMU_DROP_OP) it runs on the CPU under
#       'auto' and is refused under 'cuda', naming the op.
set -euo pipefail
case_=$1 FMHPC=$2 EMU=$3 MPIEXEC=$4 FX=$5 WORK=$6
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$WORK/data
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$WORK"
cd "$WORK"

if [ "$case_" = data ]; then
  rm -rf "$DATA" && mkdir -p "$DATA"
  "$MPIEXEC" -n 1 "$FMHPC" "$SRC/inputs/tokenizer_train.in" "tokenizer%inputs='$FX/linuxdoc_small.jsonl'" \
    "tokenizer%output='$DATA/tok.json'" tokenizer%vocab_size=320 > "$DATA/tok.log" 2>&1 ||
    { tail -20 "$DATA/tok.log"; fail "tokenizer"; }
  "$MPIEXEC" -n 1 "$FMHPC" "$SRC/inputs/prep_linuxdoc_nano.in" "prep%inputs='$FX/linuxdoc_small.jsonl'" \
    "prep%output='$DATA/store'" "prep%tokenizer='$DATA/tok.json'" prep%seq_len=32 prep%progress_seconds=0 \
    > "$DATA/prep.log" 2>&1 || { tail -20 "$DATA/prep.log"; fail "prep"; }
  echo "PASS: data ($(grep -c . "$DATA/prep.log") prep log lines)"
  exit 0
fi

common=("data%train='$DATA/store/train.json'" "data%valid='$DATA/store/valid.json'" model%vocab_size=320
        model%seq_len=32 model%d_model=32 model%n_layer=2 train%steps=3 train%global_batch=4 train%micro_batch=1
        "train%determinism='exact'" "optim%name='adamw'" optim%lr=1e-2 optim%warmup_steps=1 eval%every=0
        eval%batches=2 log%every=1 log%plot=F log%peak_tflops=1 ckpt%every=0 "ckpt%resume='none'")
tol=1e-6
if [ "$case_" = paths ]; then # the other training paths on the device: losses as the CPU's
  D=$WORK/paths
  rm -rf "$D" && mkdir -p "$D"
  base=("data%train='$DATA/store/train.json'" "data%valid=''" model%vocab_size=320 model%seq_len=32 model%d_model=32
        model%n_layer=2 train%steps=3 train%global_batch=4 train%micro_batch=1 optim%lr=1e-2 optim%warmup_steps=1
        eval%every=0 log%every=1 log%plot=F log%peak_tflops=1 ckpt%every=0 "ckpt%resume='none'")
  # name deck overrides...
  cases=("gpt2_fast gpt2_nano.in model%n_head=2 train%determinism='fast'"
         "llama_sophia_zero0 llama_nano.in model%n_head=4 model%n_kv_head=2 model%d_ff=64 optim%name='sophia' optim%sophia_k=1 parallel%zero=0")
  for c in "${cases[@]}"; do
    read -r -a w <<< "$c"
    for be in cpu cuda; do
      bin=$FMHPC np=1
      [ $be = cuda ] && bin=$EMU np=2
      timeout -k 5 240 "$MPIEXEC" -n $np "$bin" "$SRC/inputs/${w[1]}" "${base[@]}" "${w[@]:2}" "train%backend='$be'" \
        "run%out_dir='$D/${w[0]}_$be'" > "$D/${w[0]}_$be.log" 2>&1 || { tail -20 "$D/${w[0]}_$be.log"; fail "${w[0]} $be"; }
    done
    /usr/bin/python3 - "$D/${w[0]}" <<'PY'
import json, sys
d = sys.argv[1]
cpu, emu = ([json.loads(l)["loss"] for l in open(f"{d}_{b}/metrics.jsonl") if '"loss_hex"' in l] for b in ("cpu", "cuda"))
if len(cpu) != 3 or len(emu) != 3:
    sys.exit(f"FAIL: {d}: {len(cpu)} and {len(emu)} step losses, expected 3")
rel = max(abs(a - b) / abs(a) for a, b in zip(cpu, emu))
print(f"{d.rsplit('/', 1)[1]}: 3 step losses, cpu (1 rank) vs cuda(emulated) (2 ranks) worst relative {rel:.2e}")
sys.exit(0 if rel <= 1e-6 else "FAIL: beyond 1e-6")
PY
  done
  echo "PASS: paths"
  exit 0
fi

if [ "$case_" = plans ]; then # the pinned GEMM plans in a checkpoint, pinned again at a resume
  D=$WORK/plans
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F
        "${common[@]}" "train%backend='cuda'")
  prun() { # prun NAME [ARGS...]: one rank on the emulated device, into $D/NAME.log
    local name=$1
    shift
    timeout -k 5 240 "$MPIEXEC" -n 1 "$EMU" "${args[@]}" "run%out_dir='$D/$name'" "$@" > "$D/$name.log" \
      2> "$D/$name.err" || { local rc=$?; cat "$D/$name.err"; return $rc; }
  }
  rc=0 # preempted after step 2: its checkpoint holds the plans step 1 pinned
  FMHPC_CKPT_TEST_SIGNAL_AT=2 prun ck2 "ckpt%dir='$D/ck'" || rc=$?
  [ "$rc" = 3 ] || { tail -30 "$D/ck2.log"; fail "ck2: exit $rc, expected 3 (preempted after step 2)"; }
  cp -r "$D/ck" "$D/ck_algo" && cp -r "$D/ck" "$D/ck_dev"
  # a fresh run whose heuristic chooses otherwise (FMHPC_EMU_GEMM_HEURISTIC shifts the emulated one)
  FMHPC_EMU_GEMM_HEURISTIC=7 prun shifted train%steps=1 || { tail -20 "$D/shifted.log"; fail "shifted did not run"; }
  # the resume under that heuristic: the checkpoint's algorithms are pinned again, step 3 is written with them
  FMHPC_EMU_GEMM_HEURISTIC=7 prun res ckpt%every=1 "ckpt%dir='$D/ck'" "ckpt%resume='auto'" ||
    { tail -20 "$D/res.log"; fail "res did not run"; }
  # planted mismatches: an algorithm id the library does not offer; another device
  FMHPC_EMU_GEMM_HEURISTIC=7 /usr/bin/python3 - "$D" <<'PY'
import glob, h5py, re, sys
d = sys.argv[1]
for which in ("ck_algo", "ck_dev"):
    (path,) = glob.glob(f"{d}/{which}/step_*2.h5")
    with h5py.File(path, "r+") as f:
        lines = f.attrs["gemm_plans"].splitlines()
        if which == "ck_algo":
            lines[2] = re.sub(r"algo=\d+", "algo=99", lines[2])
        else:
            lines[0] = "device: NVIDIA H200 (sm_90), CUDA runtime 12080, cuBLASLt 120803"
        f.attrs["gemm_plans"] = "\n".join(lines) + "\n"
PY
  FMHPC_EMU_GEMM_HEURISTIC=7 prun bad_algo ckpt%every=0 "ckpt%dir='$D/ck_algo'" "ckpt%resume='auto'" ||
    { tail -20 "$D/bad_algo.log"; fail "bad_algo did not run"; }
  FMHPC_EMU_GEMM_HEURISTIC=7 prun bad_dev ckpt%every=0 "ckpt%dir='$D/ck_dev'" "ckpt%resume='auto'" ||
    { tail -20 "$D/bad_dev.log"; fail "bad_dev did not run"; }
  /usr/bin/python3 - "$D" <<'PY'
import glob, h5py, re, sys
d = sys.argv[1]
def attr(path):
    with h5py.File(path, "r") as f:
        v = f.attrs["gemm_plans"]
    return v.decode() if isinstance(v, bytes) else v
def plans(text):  # shape -> algorithm, from plan lines (a log's or an attribute's)
    out = {}
    for m in re.finditer(r"^gemm \d+: (\S+ \S+ m=.*? ldc=\d+) (algo=.*?) workspace=", text, re.M):
        out[m.group(1)] = m.group(2)
    return out
bad = 0
def check(ok, what):
    global bad
    print(("ok: " if ok else "FAIL: ") + what)
    bad += not ok
(s2,) = glob.glob(f"{d}/ck/step_*2.h5")
(s3,) = glob.glob(f"{d}/ck/step_*3.h5")
rec2, rec3 = attr(s2), attr(s3)
p2, p3 = plans(rec2), plans(rec3)
logged = plans(open(f"{d}/ck2.log").read())
shifted = plans(open(f"{d}/shifted.log").read())
res_log, res_err = open(f"{d}/res.log").read(), open(f"{d}/res.err").read()
print(rec2.splitlines()[0], f"({len(p2)} plans)")
check(rec2.startswith("device: SIMT emulator (host GEMM), CUDA runtime emulated, cuBLASLt emulated"),
      "step 2's gemm_plans attribute names the device and toolkit")
check(len(p2) >= 4 and p2 == logged, f"step 2 records the {len(logged)} plans the run logged")
differ = sum(shifted.get(k) != v for k, v in p2.items())
check(differ > 0, f"the shifted heuristic chooses otherwise for {differ} of {len(p2)} shapes (fresh run)")
check(p3 == p2, "the resumed run (same shifted heuristic) wrote step 3 with step 2's algorithms")
check(re.search(rf"^resume: {len(p2)} GEMM plans pinned again from the checkpoint \(device: SIMT emulator", res_log,
                re.M) is not None, f"res: 'resume: {len(p2)} GEMM plans pinned again' logged")
check(re.search("warning: resume: .*GEMM", res_err) is None, "res: no plan warning")
al = open(f"{d}/bad_algo.err").read()
shape = r"(\S+ \S+ m=\S+ n=\S+ k=\S+ lda=\S+ ldb=\S+ ldc=\d+)"
m = re.search(r"warning: resume: GEMM " + shape + r": the checkpoint's plan \(algo=99 .*?\) is not used: its algorithm id is not offered by this cuBLASLt; chose (algo=\d+ .*?) instead", al)
check(m is not None and len(re.findall(r"warning: resume: GEMM", al)) == 1,
      "bad_algo: one warning naming the shape and the algorithm chosen instead")
if m:
    print("   ", m.group(0))
    check(shifted.get(m.group(1)) == m.group(2), "bad_algo: the algorithm chosen instead is the heuristic's")
check(re.search(rf"^resume: {len(p2) - 1} GEMM plans pinned again", open(f"{d}/bad_algo.log").read(), re.M),
      f"bad_algo: the other {len(p2) - 1} plans pinned")
dv = open(f"{d}/bad_dev.err").read()
check("warning: resume: the checkpoint's GEMM plans were chosen on another device or toolkit (NVIDIA H200 (sm_90), "
      "CUDA runtime 12080, cuBLASLt 120803; this run: SIMT emulator" in dv and
      "): cuBLASLt's heuristic chooses again, and a plan that differs is named below" in dv,
      "bad_dev: the other device is named")
nd = len(re.findall(r"warning: resume: GEMM .*: the checkpoint's plan .* is not used: another device or toolkit; "
                    r"chose algo=", dv))
check(nd == differ, f"bad_dev: {nd} shapes named where the heuristic chose otherwise (expected {differ})")
sys.exit(f"FAIL: {bad} check(s)" if bad else 0)
PY
  echo "PASS: plans"
  exit 0
fi

if [ "$case_" = oom ]; then # out of device memory: the report names the item, the bytes and the plan's figure
  D=$WORK/oom
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F
        "${common[@]}" "train%backend='cuda'" "run%out_dir='$D/run'")
  "$EMU" --check "${args[@]}" > "$D/check.log" 2>&1 || { tail -20 "$D/check.log"; fail "--check did not run"; }
  plan() { sed -n "s/^  $1  *[0-9.]* [KMG]*i*B  *\([0-9,]*\) B .*/\1/p" "$D/check.log" | tr -d ,; }
  w=$(plan "weights (compute copy)") g=$(plan gradients) a=$(plan activations)
  [ -n "$w" ] && [ -n "$g" ] && [ -n "$a" ] || fail "--check: no weights/gradients/activations rows"
  # a device with room for the weights, the gradients and half the activations
  limit=$((w + g + a / 2))
  rc=0
  FMHPC_EMU_DEVICE_MEM=$limit timeout -k 5 120 "$MPIEXEC" -n 1 "$EMU" "${args[@]}" > "$D/run.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "a run on a device of $limit bytes succeeded"
  # the arena is the activation table; --check's row adds the micro-batch buffers, so asked <= planned
  A=$(sed -n 's/.*out of GPU memory on device 0 allocating [0-9.]* MiB (\([0-9]*\) bytes) for the activations .*/\1/p' \
      "$D/run.log" | head -1)
  [ -n "$A" ] && [ "$A" -le "$a" ] && [ "$A" -gt $((limit - w - g)) ] ||
    { grep -i "memory" "$D/run.log"; fail "no report for the activations of <= $a bytes that did not fit"; }
  mib() { awk -v b="$1" 'BEGIN{printf "%.2f MiB (%d bytes)", b/1048576, b}'; }
  msg="out of GPU memory on device 0 allocating $(mib "$A") for the activations (the plan, fmhpc --check: $(mib "$a"));"
  msg+=" $(mib $((limit - w - g))) free of $(mib "$limit"); hint: a smaller &train micro_batch,"
  msg+=" &model recompute = .true. (activation checkpointing), or a larger &parallel tp"
  grep -qF "$msg" "$D/run.log" || { grep -i "memory" "$D/run.log"; fail "no report: $msg"; }
  echo "oom: exit $rc: $(grep -o 'out of GPU memory.*free of [^;]*' "$D/run.log")"
  echo "PASS: oom"
  exit 0
fi

if [ "$case_" = nccl_shards ]; then # the device exchange where every rank owns gradient blocks
  # A tiny Llama of d_model 64 (two FM_DIST_BLOCK blocks of parameters or more, so at 2 ranks each
  # rank's ZeRO-1 shard holds blocks: the NCCL reduce-scatter, dequant and all-gather move real shards,
  # unlike the 1-block models above): comm='nccl' at 2 ranks, comm='mpi' at 2 ranks and 'auto' (NCCL)
  # at 1 rank give the same loss bits and weights SHA-256.
  D=$WORK/nccl_shards
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" "${common[@]}" model%n_head=4 model%n_kv_head=2 model%d_model=64 model%d_ff=128
        model%tie_embeddings=F "data%valid=''" "train%backend='cuda'")
  for run in "auto 1" "nccl 2" "mpi 2"; do
    read -r comm np <<< "$run"
    timeout -k 5 240 "$MPIEXEC" -n $np "$EMU" "${args[@]}" "parallel%comm='$comm'" "run%out_dir='$D/${comm}$np'" \
      > "$D/${comm}$np.log" 2>&1 || { tail -20 "$D/${comm}$np.log"; fail "${comm}$np"; }
  done
  grep -q "^comm: nccl (auto: NCCL" "$D/auto1.log" || fail "auto1: 'auto' did not take NCCL"
  grep -q "^comm: nccl (asked for)" "$D/nccl2.log" || fail "nccl2: no 'comm: nccl (asked for)' line"
  /usr/bin/python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
def read(n):
    steps = [json.loads(l)["loss_hex"] for l in open(f"{d}/{n}/metrics.jsonl") if '"loss_hex"' in l]
    s = json.load(open(f"{d}/{n}/summary.json"))
    return steps, s["weights_sha256"], s["params"]
ref, sha, params = read("auto1")
if len(ref) != 3 or params <= 65536:
    sys.exit(f"FAIL: {len(ref)} step losses, {params} parameters (want 3, and 2 or more blocks of 65536)")
bad = 0
for n in ("nccl2", "mpi2"):
    steps, s, _ = read(n)
    same = steps == ref and s == sha
    print(f"{n}: losses {steps} weights {s[:16]}... {'same bits' if same else 'DIFFERENT'} as auto1 (NCCL, 1 rank)")
    bad += not same
print(f"{params} parameters ({(params + 65535) // 65536} blocks); 2 runs compared bitwise")
sys.exit(f"FAIL: {bad} mismatch(es)" if bad else 0)
PY
  echo "PASS: nccl_shards"
  exit 0
fi
if [ "$case_" = gpubind ]; then # each rank binds its node-local GPU, whatever the comm
  # The emulated runtime (nccl_emu.c) has FMHPC_EMU_GPUS devices and honours FMHPC_EMU_VISIBLE_DEVICES as
  # the real one honours CUDA_VISIBLE_DEVICES; rank 0's "gpu:" line lists every rank's device as
  # cudaGetDevice reports it after the binding, with the device's PCI bus id (its physical identity).
  #   mpi2, nccl2    2 GPUs, 2 ranks: ranks 0 and 1 on devices 0 and 1 (before, comm='mpi' left both on 0)
  #   pertask        Slurm's one GPU per task (each rank sees only its own: 0 and 1): both device 0, two
  #                  different bus ids, no sharing warning, and NCCL (which refuses one GPU twice) runs
  #   shared_mpi     1 GPU, 2 ranks, comm='mpi': both on device 0, one warning, the run trains
  #   shared_nccl    the same with comm='nccl': refused with a clear message, status != 0
  D=$WORK/gpubind
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" "${common[@]}" model%n_head=4 model%n_kv_head=2 model%d_ff=64
        train%steps=1 "data%valid=''" "train%backend='cuda'")
  run() { # name np comm [env...] -- extra mpiexec args
    local name=$1 np=$2 comm=$3
    shift 3
    timeout -k 5 240 env "$@" "$MPIEXEC" -n "$np" "$EMU" "${args[@]}" "parallel%comm='$comm'" \
      "run%out_dir='$D/$name'" > "$D/$name.log" 2>&1
  }
  for c in mpi nccl; do
    run ${c}2 2 $c FMHPC_EMU_GPUS=2 || { tail -20 "$D/${c}2.log"; fail "${c}2"; }
    grep -q "^gpu: 2 ranks on 1 node, .*rank:device 0:0 (0000:00:00.0), 1:1 (0000:01:00.0)$" "$D/${c}2.log" ||
      { grep gpu "$D/${c}2.log"; fail "${c}2: ranks not on devices 0 and 1"; }
    ! grep -q "a GPU with another rank" "$D/${c}2.log" || fail "${c}2: a sharing warning with one GPU per rank"
  done
  # task='eval' and 'generate' of that model bind alike
  ev=("run%task='eval'" "eval%model='$D/mpi2/final'")
  gen=("run%task='generate'" "generate%model='$D/mpi2/final'" "generate%tokenizer='$DATA/tok.json'"
       "generate%prompts='The kernel', 'A driver must'" generate%max_tokens=4 generate%temperature=0 generate%batch=2
       "generate%output='$D/gen.jsonl'")
  for t in eval gen; do
    [ $t = eval ] && extra=("${ev[@]}") || extra=("${gen[@]}")
    timeout -k 5 240 env FMHPC_EMU_GPUS=2 "$MPIEXEC" -n 2 "$EMU" "${args[@]}" "${extra[@]}" "run%out_dir='$D/$t'" \
      > "$D/$t.log" 2>&1 || { tail -20 "$D/$t.log"; fail "$t"; }
    grep -q "^gpu: 2 ranks on 1 node, .*rank:device 0:0 (0000:00:00.0), 1:1 (0000:01:00.0)$" "$D/$t.log" ||
      { grep gpu "$D/$t.log"; fail "$t: ranks not on devices 0 and 1"; }
  done
  # one GPU per task, as srun --gpus-per-task=1 sets CUDA_VISIBLE_DEVICES (MPMD: one environment per rank)
  timeout -k 5 240 env FMHPC_EMU_GPUS=2 "$MPIEXEC" -n 1 env FMHPC_EMU_VISIBLE_DEVICES=0 "$EMU" "${args[@]}" \
    "parallel%comm='nccl'" "run%out_dir='$D/pertask'" : -n 1 env FMHPC_EMU_VISIBLE_DEVICES=1 "$EMU" "${args[@]}" \
    "parallel%comm='nccl'" "run%out_dir='$D/pertask'" > "$D/pertask.log" 2>&1 ||
    { tail -20 "$D/pertask.log"; fail "pertask"; }
  grep -q "rank:device 0:0 (0000:00:00.0), 1:0 (0000:01:00.0)$" "$D/pertask.log" ||
    { grep gpu "$D/pertask.log"; fail "pertask: not each on its own device 0"; }
  ! grep -q "a GPU with another rank" "$D/pertask.log" || fail "pertask: a sharing warning"
  run shared_mpi 2 mpi FMHPC_EMU_GPUS=1 || { tail -20 "$D/shared_mpi.log"; fail "shared_mpi"; }
  grep -q "rank:device 0:0 (0000:00:00.0), 1:0 (0000:00:00.0)$" "$D/shared_mpi.log" || fail "shared_mpi: devices"
  w="gpu: 1 rank shares a GPU with another rank of its node (more ranks per node than GPUs): legal but slow, and comm = 'nccl' refuses it"
  [ "$(grep -cF "$w" "$D/shared_mpi.log")" = 1 ] ||
    { cat "$D/shared_mpi.log"; fail "shared_mpi: not exactly one sharing warning"; }
  # comm = 'auto' takes NCCL on CUDA, but not where ranks share a GPU: MPI then, and the run trains
  run shared_auto 2 auto FMHPC_EMU_GPUS=1 || { tail -20 "$D/shared_auto.log"; fail "shared_auto: did not train"; }
  grep -qF "comm: mpi (auto: ranks of a node share a GPU, which NCCL refuses)" "$D/shared_auto.log" ||
    { grep "comm:" "$D/shared_auto.log"; fail "shared_auto: auto did not fall back to MPI"; }
  if run shared_nccl 2 nccl FMHPC_EMU_GPUS=1; then fail "shared_nccl: two ranks on one GPU over NCCL ran"; fi
  grep -qF "fmhpc: &parallel comm = 'nccl' needs one GPU per rank, and ranks of a node share one (see the warning above)" "$D/shared_nccl.log" ||
    { tail -20 "$D/shared_nccl.log"; fail "shared_nccl: no clear message"; }
  # no device, and a device the runtime refuses: each stops with its message
  if run nodev 1 mpi FMHPC_EMU_GPUS=0; then fail "nodev: ran without a device"; fi
  grep -qF "rank 0 (local rank 0) sees no CUDA device; hint: check CUDA_VISIBLE_DEVICES and the job's GPU request" "$D/nodev.log" ||
    { tail -20 "$D/nodev.log"; fail "nodev: no message"; }
  # ranks that choose different backends: a message and a failed status on every task, not two ranks waiting in
  # different collectives (before, the CPU rank went on while the GPU rank waited in the binding: a hang). In a
  # job this is backend = 'auto' on a node whose GPU is not visible; the emulator's backend does not consult
  # the emulated device count, so here each MPMD task's deck differs instead (rank 1: backend = 'cpu')
  rc=0
  timeout -k 5 90 "$MPIEXEC" -n 1 "$EMU" "${args[@]}" "parallel%comm='mpi'" "run%out_dir='$D/mixed'" : \
    -n 1 "$EMU" "${args[@]}" "train%backend='cpu'" "parallel%comm='mpi'" "run%out_dir='$D/mixed'" \
    > "$D/mixed.log" 2>&1 || rc=$?
  case $rc in 0) fail "mixed: ran with one rank on the CPU and one on a GPU" ;; 124 | 137) fail "mixed: hung" ;; esac
  grep -qF "train: the ranks chose different backends (rank 0 takes a GPU (CUDA), rank 1 takes the CPU backend): a node whose GPU is not visible, or whose driver fails, takes the CPU under &train backend = 'auto'" \
    "$D/mixed.log" || { tail -20 "$D/mixed.log"; fail "mixed: no message naming the ranks"; }
  grep -qF "hint: check CUDA_VISIBLE_DEVICES and the job's GPU request on every node, or set &train backend = 'cpu' (or 'cuda', which names the rank without a GPU)" \
      "$D/mixed.log" || { tail -20 "$D/mixed.log"; fail "mixed: the reason or the hint missing"; }
  if run setfail 1 mpi FMHPC_EMU_FAIL=cudaSetDevice; then fail "setfail: ran though cudaSetDevice failed"; fi
  grep -qE "cudaSetDevice\(0\) failed: invalid device ordinal \(CUDA error 101\) \(.*comm_nccl.c:[0-9]+\)" \
    "$D/setfail.log" || { tail -20 "$D/setfail.log"; fail "setfail: no message"; }
  for n in mpi2 nccl2 pertask shared_mpi shared_auto; do
    [ -f "$D/$n/summary.json" ] || fail "$n: no summary.json (the run did not finish)"
  done
  echo "PASS: gpubind (mpi and nccl at 2 ranks on devices 0 and 1; one GPU per task; shared: warned, NCCL refused)"
  exit 0
fi
if [ "$case_" = fast_nccl ]; then # determinism='fast' with NCCL: the fp32 sum of the device gradients over NCCL
  # The Llama of nccl_shards (2 parameter blocks: each rank's shard holds one) with determinism='fast' and
  # comm='nccl' at 2 ranks, twice; 'fast' with comm='mpi' (the sum on host copies) and 'exact' with
  # comm='nccl' at 2 ranks. Asserted:
  #   - fast+nccl is bitwise run to run (loss bits and weights SHA-256 of the two runs);
  #   - fast+nccl equals fast+mpi bit for bit: at 2 ranks each element of the sum is one fp32 addition,
  #     which is commutative, so any correct exchange gives the same bits (a wrong shard, layout or
  #     missing rank does not);
  #   - its losses are within 1e-6 relative of exact mode's (fast sums the micro-batches in fp32 on the
  #     device, exact in int64 fixed point: a few fp32 ulps per gradient element; observed 5e-8 after
  #     three AdamW steps at lr 1e-2, while leaving rank 1's gradient out of the sum moved the step-2 loss
  #     by 2e-3 relative and failed all three checks);
  #   - the log names the device sum, not host copies; a NaN planted in rank 1's gradient is named
  #     (tensor, element) as on the host path and the step skipped.
  D=$WORK/fast_nccl
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" "${common[@]}" model%n_head=4 model%n_kv_head=2 model%d_model=64 model%d_ff=128
        model%tie_embeddings=F "data%valid=''" "train%backend='cuda'")
  for run in "fast nccl a" "fast nccl b" "fast mpi a" "exact nccl a"; do
    read -r det comm k <<< "$run"
    n=$det-$comm-$k
    timeout -k 5 240 "$MPIEXEC" -n 2 "$EMU" "${args[@]}" "train%determinism='$det'" "parallel%comm='$comm'" \
      "run%out_dir='$D/$n'" > "$D/$n.log" 2>&1 || { tail -20 "$D/$n.log"; fail "$n"; }
  done
  grep -q "fp32 gradient sum (NCCL), grad norm, clip and optimizer" "$D/fast-nccl-a.log" ||
    { grep -i "reduce\|comm" "$D/fast-nccl-a.log"; fail "fast-nccl: the log does not name the device sum"; }
  ! grep -qi "host cop" "$D/fast-nccl-a.log" || fail "fast-nccl: the log still says host copies"
  /usr/bin/python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
def read(n):
    steps = [json.loads(l)["loss_hex"] for l in open(f"{d}/{n}/metrics.jsonl") if '"loss_hex"' in l]
    return steps, json.load(open(f"{d}/{n}/summary.json"))["weights_sha256"]
def val(h):  # C's %a
    return float.fromhex(h)
a, sa = read("fast-nccl-a")
b, sb = read("fast-nccl-b")
m, sm = read("fast-mpi-a")
e, _ = read("exact-nccl-a")
if len(a) != 3 or len(e) != 3:
    sys.exit(f"FAIL: {len(a)} and {len(e)} step losses (want 3)")
bad = 0
for name, x, s in (("fast nccl run 2", b, sb), ("fast mpi", m, sm)):
    same = x == a and s == sa
    print(f"{name}: losses {x} weights {s[:16]}... {'same bits' if same else 'DIFFERENT'} as fast nccl run 1")
    bad += not same
worst = max(abs(val(x) - val(y)) / abs(val(y)) for x, y in zip(a, e))
print(f"fast vs exact (nccl, 2 ranks): {[val(x) for x in a]} vs {[val(y) for y in e]}, worst relative {worst:.3g}"
      " (tolerance 1e-6)")
bad += not worst <= 1e-6
sys.exit(f"FAIL: {bad} check(s)" if bad else 0)
PY
  FMHPC_TEST_NAN_AT=2:1:h.mlp.w_up timeout -k 5 240 "$MPIEXEC" -n 2 "$EMU" "${args[@]}" "train%determinism='fast'" \
    "parallel%comm='nccl'" "run%out_dir='$D/nan'" > "$D/nan.log" 2>&1 || { tail -20 "$D/nan.log"; fail "nan"; }
  grep -q "step 2: non-finite gradient, first in the gradient of h.mlp.w_up (element 0): step skipped" "$D/nan.log" ||
    { grep -i "non-finite\|step " "$D/nan.log"; fail "nan: the planted NaN was not named"; }
  grep -q '"skipped": 1,' "$D/nan/summary.json" || fail "nan: summary does not count 1 skipped step"
  echo "PASS: fast_nccl"
  exit 0
fi
if [ "$case_" = sync ]; then # what a device step waits for and allocates, per micro-batch count
  # fmhpc_emu counts (FMHPC_EMU_COPY_STATS=1) its device allocations and waits: the calls that wait
  # for the stream on a GPU (a host sync): reads (copy_to_host), uploads (copy_to_device) and
  # synchronize; queued uploads (copy_to_device_async, the micro-batches) do not wait. Runs of 1
  # and 3 steps differ by 2 steps, so (count(3) - count(1)) / 2 is a step after the first. The
  # device path (comm 'nccl' at 2 ranks, 'auto' = NCCL at 1 rank), 1 micro-batch a rank and several:
  #   allocations  0 a step
  #   waits        the same number whatever the micro-batch count, at most WAITS_MAX: 2 reads
  #                (the redo flags with the step's micro-batch losses in one copy, fm_reduce_readback;
  #                the grad norm's partials, where the rank's shard holds blocks), no upload, no
  #                synchronize
  # A read or a waiting upload per micro-batch (the loss before it was summed on the device, the
  # batch before its uploads were queued) fails the equality; the scales' upload (before they were
  # computed on the device) fails the bound. Not in the waits: the NCCL communicator's stream
  # synchronizations (comm_nccl.c waits after each collective: flags, maxima, reduce-scatter and at
  # 2 ranks the all-gather), printed per step and held to the same count for any micro-batch count.
  WAITS_MAX=${FMHPC_EMU_SYNC_WAITS_MAX:-2}
  D=$WORK/sync
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F
        "${common[@]}" "data%valid=''" "train%backend='cuda'")
  for run in "auto 1 1" "auto 1 4" "nccl 2 1" "nccl 2 2"; do
    read -r comm np mb <<< "$run"
    for st in 1 3; do
      n=${comm}_np${np}_mb${mb}_s$st
      FMHPC_EMU_COPY_STATS=1 timeout -k 5 240 "$MPIEXEC" -n $np "$EMU" "${args[@]}" train%steps=$st \
        train%micro_batch=$mb "parallel%comm='$comm'" "run%out_dir='$D/$n'" > "$D/$n.log" 2>&1 ||
        { tail -20 "$D/$n.log"; fail "$n"; }
    done
  done
  /usr/bin/python3 - "$D" "$WAITS_MAX" <<'PY'
import json, re, sys
d, waits_max = sys.argv[1], int(sys.argv[2])
def stats(name):
    log = open(f"{d}/{name}.log").read()
    dev = {int(r): tuple(map(int, v)) for r, *v in re.findall(
        r"fmhpc_emu: rank (\d+) device: (\d+) allocations, (\d+) waits \((\d+) reads, (\d+) uploads, "
        r"(\d+) synchronize calls\), (\d+) queued uploads", log)}
    for r, n in re.findall(r"fmhpc_emu: rank (\d+) nccl: (\d+) stream synchronizations", log):
        dev[int(r)] += (int(n),)
    return dev, json.load(open(f"{d}/{name}/summary.json"))
bad = 0
def check(ok, what):
    global bad
    print(("ok: " if ok else "FAIL: ") + what)
    bad += not ok
per = {}
for comm, np, mb in (("auto", 1, 1), ("auto", 1, 4), ("nccl", 2, 1), ("nccl", 2, 2)):
    (da, sa), (db, sb) = stats(f"{comm}_np{np}_mb{mb}_s1"), stats(f"{comm}_np{np}_mb{mb}_s3")
    if sorted(da) != list(range(np)) or sorted(db) != list(range(np)):
        sys.exit(f"FAIL: {comm} np {np}: device counters of ranks {sorted(da)} and {sorted(db)}")
    if sa["redone"] != sb["redone"] or sa["skipped"] or sb["skipped"]:
        sys.exit(f"FAIL: {comm} np {np} mb {mb}: redone {sa['redone']}/{sb['redone']}, skipped "
                 f"{sa['skipped']}/{sb['skipped']} (a redo or skip changes what a step reads)")
    micro = 4 // np // mb  # global_batch 4
    for r in range(np):
        if len(da[r]) != 7 or len(db[r]) != 7:
            sys.exit(f"FAIL: {comm} np {np} rank {r}: no 'nccl: N stream synchronizations' line")
        a, w, h, u, s, q, ns = ((y - x) / 2 for x, y in zip(da[r], db[r]))
        print(f"{comm} np {np} rank {r}, {micro} micro-batch(es) a step: {a:g} allocations, {w:g} waits ({h:g} "
              f"reads, {u:g} uploads, {s:g} synchronize), {q:g} queued uploads, {ns:g} NCCL stream syncs a step")
        check(a == 0, f"{comm} np {np} rank {r} ({micro} micro-batches): no allocation in a step after the first")
        check(w <= waits_max, f"{comm} np {np} rank {r} ({micro} micro-batches): {w:g} waits a step <= {waits_max}")
        check(q >= 4 * micro, f"{comm} np {np} rank {r}: the {micro} micro-batch(es) queued (>= 4 uploads each)")
        per[comm, np, r, micro] = (h, u, s, ns)
for comm, np in (("auto", 1), ("nccl", 2)):
    for r in range(np):
        few, many = per[comm, np, r, 1], per[comm, np, r, 4 // np]
        check(few == many, f"{comm} np {np} rank {r}: (reads, uploads, synchronize, NCCL syncs) a step {few} with 1 "
              f"micro-batch, {many} with {4 // np}: the same")
sys.exit(f"FAIL: {bad} check(s)" if bad else 0)
PY
  echo "PASS: sync"
  exit 0
fi
if [ "$case_" = traffic ]; then # what a training step moves between host and device
  # fmhpc_emu counts every copy_to_device/copy_to_host (FMHPC_EMU_COPY_STATS=1), in all and per device
  # buffer the trainer names (fm_backend_name_buffer: 'weights', 'optimizer state', 'grad shard').
  # Two runs of 1 and 3 steps differ by exactly 2 steps (setup, step 1, the final weights hash and
  # export are in both), so (bytes(3) - bytes(1)) / 2 is a steady-state step. With the update on the
  # device, per step and rank, with comm 'mpi' (1 and 2 ranks; the exchange staged on the host):
  #   optimizer state  0 bytes either way
  #   grad shard       4 own bytes up (the reduced shard, once), own = this rank's shard length
  #   weights          1 rank: 0; 2 ranks: the all-gather's staging, exactly 4 own down and
  #                    4 (numel - own) up
  #   everything else  the int64 accumulator down (8 P S), the micro-batches (tokens, targets,
  #                    positions, segments, token weights: 20 bytes a token), and 1 KiB of scalars
  #                    (block scales and maxima, flags, the norm's partials, the loss)
  # and with comm 'nccl' (2 ranks; the exchange and the all-gather on the device): weights, state and
  # grad shard 0 bytes, the rest only the batch and the 1 KiB of scalars.
  # Before the update ran on the device every step copied the weights up (4 numel), which fails.
  D=$WORK/traffic
  rm -rf "$D" && mkdir -p "$D"
  args=("$SRC/inputs/llama_nano.in" model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F
        "${common[@]}" "data%valid=''" "train%backend='cuda'")
  for run in "mpi 1" "mpi 2" "nccl 2"; do
    read -r comm np <<< "$run"
    for st in 1 3; do
      n=${comm}_np${np}_s$st
      FMHPC_EMU_COPY_STATS=1 timeout -k 5 240 "$MPIEXEC" -n $np "$EMU" "${args[@]}" train%steps=$st \
        "parallel%comm='$comm'" "run%out_dir='$D/$n'" > "$D/$n.log" 2>&1 || { tail -20 "$D/$n.log"; fail "$n"; }
    done
  done
  /usr/bin/python3 - "$D" <<'PY'
import json, re, sys
d = sys.argv[1]
def stats(name):
    log = open(f"{d}/{name}.log").read()
    tot, buf = {}, {}
    for r, h2d, d2h in re.findall(r"fmhpc_emu: rank (\d+) copies: to_device (\d+) bytes in \d+ calls, "
                                  r"to_host (\d+) bytes", log):
        tot[int(r)] = (int(h2d), int(d2h))
    for r, n, h2d, d2h in re.findall(r"fmhpc_emu: rank (\d+) buffer '([^']+)' \(\d+ bytes\): to_device (\d+) bytes, "
                                     r"to_host (\d+) bytes", log):
        buf[(int(r), n)] = (int(h2d), int(d2h))
    return tot, buf, json.load(open(f"{d}/{name}/summary.json"))
bad = 0
def check(ok, what):
    global bad
    print(("ok: " if ok else "FAIL: ") + what)
    bad += not ok
for comm, np in (("mpi", 1), ("mpi", 2), ("nccl", 2)):
    (ta, ba, sa), (tb, bb, sb) = stats(f"{comm}_np{np}_s1"), stats(f"{comm}_np{np}_s3")
    if sorted(ta) != list(range(np)) or sorted(tb) != list(range(np)):
        sys.exit(f"FAIL: np {np}: copy counters of ranks {sorted(ta)} and {sorted(tb)}")
    if sa["redone"] != sb["redone"] or sa["skipped"] or sb["skipped"]:
        sys.exit(f"FAIL: np {np}: redone {sa['redone']}/{sb['redone']}, skipped {sa['skipped']}/{sb['skipped']}")
    numel = sa["params"]
    names = ("weights", "grad shard", "optimizer state")
    step = {}
    for r in range(np):
        for n in names:
            if n == "optimizer state" and (r, n) not in ba and (r, n) not in bb:
                ba[r, n] = bb[r, n] = (0, 0)  # an empty shard (this tiny model is one block): no state to allocate
            if (r, n) not in ba or (r, n) not in bb:
                sys.exit(f"FAIL: np {np} rank {r}: no counters for the buffer '{n}' (the update is not on the device)")
            step[r, n] = tuple((y - x) / 2 for x, y in zip(ba[r, n], bb[r, n]))
        step[r, "all"] = tuple((y - x) / 2 for x, y in zip(ta[r], tb[r]))
    if comm == "mpi":  # the reduced shard comes up once: its length is this rank's share
        own = {r: step[r, "grad shard"][0] / 4 for r in range(np)}
        check(sum(own.values()) == numel, f"{comm} np {np}: the ranks' shards ({[int(own[r]) for r in range(np)]}) cover the {numel} parameters")
    S = numel  # the largest shard: this tiny model is one block, held by one rank
    for r in range(np):
        w, st, g, a = (step[r, n] for n in ("weights", "optimizer state", "grad shard", "all"))
        rest = a[0] + a[1] - sum(w) - sum(st) - sum(g)
        allowed = (8 * np * S if comm == "mpi" else 0) + 20 * (4 * 32 // np) + 1024
        print(f"{comm} np {np} rank {r} per step: weights up {w[0]:.0f} down {w[1]:.0f}, optimizer state up {st[0]:.0f} "
              f"down {st[1]:.0f}, grad shard up {g[0]:.0f} down {g[1]:.0f}, the rest {rest:.0f} B "
              f"(all: up {a[0]:.0f} down {a[1]:.0f}; the weights are {4 * numel} B, AdamW's state {8 * numel} B)")
        where = f"{comm} np {np} rank {r}"
        check(st == (0, 0), f"{where}: no optimizer state moves")
        want = (0, 0) if np == 1 or comm == "nccl" else (4 * (numel - own[r]), 4 * own[r])
        check(w == want, f"{where}: weights move {w}, expected {want} "
                         f"({'the MPI all-gather staging: the others shards up, mine down' if want[0] + want[1] else 'none'})")
        check(g[1] == 0 and (comm == "mpi" or g[0] == 0),
              f"{where}: the grad shard {'only goes up' if comm == 'mpi' else 'stays on the device (NCCL writes it)'}")
        check(rest <= allowed, f"{where}: the rest {rest:.0f} <= {allowed} "
                               f"({'the accumulator 8 P S, ' if comm == 'mpi' else ''}the batch, 1 KiB)")
sys.exit(f"FAIL: {bad} check(s)" if bad else 0)
PY
  echo "PASS: traffic"
  exit 0
fi

case $case_ in
llama) deck=(llama_nano.in model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F) ;;
llama_bf16) # bf16 compute: bf16 cuBLASLt GEMMs (emulated) against the CPU's bf16 emulation,
  # the same rounded operands summed in other orders; a rounding that flips
  # moves a loss by ~1e-6 here (observed <= 3.0e-6), while bf16 against fp32
  # differs by > 2e-4 at steps 2 and 3 (checked below: bf16 really ran)
  deck=(llama_nano.in model%n_head=4 model%n_kv_head=2 model%d_ff=64 model%tie_embeddings=F
        "train%precision='p=f32,c=bf16'")
  tol=2e-5 ;;
gpt2) deck=(gpt2_nano.in model%n_head=2 model%tie_embeddings=T) ;;
*) fail "unknown case $case_" ;;
esac
args=("$SRC/inputs/${deck[0]}" "${deck[@]:1}" "${common[@]}")
D=$WORK/$case_
rm -rf "$D" && mkdir -p "$D"
# run NAME NP BINARY [SCHEDULE] [ARGS...]
run() {
  local name=$1 np=$2 bin=$3 sched=$4
  shift 4
  FMHPC_EMU_SCHEDULE=$sched timeout -k 5 240 "$MPIEXEC" -n "$np" "$bin" "${args[@]}" "run%out_dir='$D/$name'" "$@" \
    > "$D/$name.log" 2>&1 || { local rc=$?; [ "$name" = ck2 ] && return $rc; tail -30 "$D/$name.log"; fail "$name did not run"; }
}
run cpu 1 "$FMHPC" forward "train%backend='cpu'"
if [ "$case_" = llama_bf16 ]; then # the same on the CPU in fp32 compute, to show bf16 changed something
  run cpu32 1 "$FMHPC" forward "train%backend='cpu'" "train%precision='p=f32,c=f32'"
fi
run fwd 1 "$EMU" forward "train%backend='cuda'"
run rnd 1 "$EMU" random:12345 "train%backend='cuda'"
run np2 2 "$EMU" forward "train%backend='cuda'" "parallel%comm='nccl'"
grep -q "^backend: cuda (emulated) (as the deck asks)" "$D/fwd.log" || fail "fwd: no 'backend: cuda (emulated)' line"
grep -q "^backend: cpu (as the deck asks)" "$D/cpu.log" || fail "cpu: no 'backend: cpu' line"
if [ "$case_" = llama_bf16 ]; then # the pinned GEMM plans are logged after step 1, in bf16
  grep -q "^gemm 0: bf16 " "$D/fwd.log" || fail "fwd: no 'gemm 0: bf16' plan line in the log"
fi
grep -q "^comm: nccl (asked for)" "$D/np2.log" || fail "np2: no 'comm: nccl (asked for)' line"
grep -q "^comm: nccl (auto: NCCL" "$D/fwd.log" || fail "fwd: 'auto' did not take NCCL on the emulated CUDA"
runs=(fwd rnd np2)
if [ "$case_" = llama ]; then # checkpoint on the device path, resume at another rank count
  # the exchange over MPI on host copies: the bits of NCCL's (integer sums) and of one rank
  run mpi2 2 "$EMU" forward "train%backend='cuda'" "parallel%comm='mpi'"
  grep -q "^comm: mpi (asked for)" "$D/mpi2.log" || fail "mpi2: no 'comm: mpi (asked for)' line"
  runs+=(mpi2)
  # a failing NCCL call (injected into the emulated NCCL on both ranks) is named and ends the run
  rc=0
  FMHPC_EMU_FAIL=ncclCommInitRank "$MPIEXEC" -n 2 "$EMU" "${args[@]}" "train%backend='cuda'" "parallel%comm='nccl'" \
    "run%out_dir='$D/ncclfail'" > "$D/ncclfail.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] && grep -q "comm_nccl.c:[0-9]*: NCCL call failed: ncclCommInitRank(&im->nccl, size, id, rank): .* (device 1)" \
    "$D/ncclfail.log" && grep -qF "fmhpc: &parallel comm: the NCCL communicators could not be created (NCCL error; see above)" "$D/ncclfail.log" ||
    { tail -8 "$D/ncclfail.log"; fail "ncclfail: exit $rc, expected a failure naming ncclCommInitRank and the device"; }
  echo "ncclfail: $(grep -o 'NCCL call failed: ncclCommInitRank.*(device 1)' "$D/ncclfail.log" | head -1)"
  rc=0 # a preemption signal after step 2: checkpoint, exit 3 (requeue)
  FMHPC_CKPT_TEST_SIGNAL_AT=2 run ck2 1 "$EMU" forward "train%backend='cuda'" "ckpt%dir='$D/ck'" || rc=$?
  [ "$rc" = 3 ] || { tail -30 "$D/ck2.log"; fail "ck2: exit $rc, expected 3 (preempted after step 2)"; }
  run ck3 2 "$EMU" reverse "train%backend='cuda'" ckpt%every=1 "ckpt%dir='$D/ck'" "ckpt%resume='auto'"
  grep -q "^resume: .*step 2" "$D/ck3.log" || fail "ck3 did not resume from step 2"
  grep -q "^comm: nccl (auto" "$D/ck3.log" || fail "ck3: the resumed run did not reduce over NCCL"
  runs+=(ck3)
  # a NaN planted in rank 1's gradient at step 2: the device quantisation flags it, the step is computed
  # again on the host path to name the element, and skipped on both ranks
  FMHPC_TEST_NAN_AT=2:1:h.mlp.w_up run nan 2 "$EMU" forward "train%backend='cuda'"
  grep -q "step 2: non-finite gradient, first in the gradient of h.mlp.w_up (element 0): step skipped" "$D/nan.log" ||
    { grep -i "non-finite\|step " "$D/nan.log"; fail "nan: the planted NaN was not named"; }
  grep -q '"skipped": 1,' "$D/nan/summary.json" || fail "nan: summary does not count 1 skipped step"
  grep -q '"redone": 0,' "$D/nan/summary.json" || fail "nan: the naming pass was counted as a redo"
  echo "nan: $(grep -o 'step 2: non-finite.*skipped' "$D/nan.log" | head -1)"
  # task='eval' of the trained model on the emulated device and on the CPU
  run evcpu 1 "$FMHPC" forward "run%task='eval'" "eval%model='$D/fwd/final'" "train%backend='cpu'"
  run evemu 2 "$EMU" random:99 "run%task='eval'" "eval%model='$D/fwd/final'" "train%backend='cuda'"
  grep -q "^backend: cuda (emulated) (as the deck asks)" "$D/evemu.log" || fail "evemu: not on the emulated CUDA"
  /usr/bin/python3 -c "
import json, sys
a, b = (json.load(open(sys.argv[i] + '/eval.json'))['loss'] for i in (1, 2))
print(f'eval: loss cpu {a:.9f} cuda(emulated) {b:.9f} rel {abs(a - b) / a:.2e}')
sys.exit(0 if abs(a - b) <= 1e-6 * a else 'FAIL: eval losses differ')" "$D/evcpu" "$D/evemu"
  # task='generate' (greedy) on the emulated CUDA (attention_decode over the KV cache) and on the CPU:
  # the same tokens; without attention_decode 'auto' takes the CPU and says why, 'cuda' is refused
  gen=("run%task='generate'" "generate%model='$D/fwd/final'" "generate%tokenizer='$DATA/tok.json'"
       "generate%prompts='The kernel', 'A driver must'" generate%max_tokens=8 generate%temperature=0 generate%batch=2)
  run gencpu 1 "$FMHPC" forward "${gen[@]}" "generate%output='$D/gencpu.jsonl'" "train%backend='cpu'"
  run genemu 1 "$EMU" reverse "${gen[@]}" "generate%output='$D/genemu.jsonl'" "train%backend='cuda'"
  grep -q "^backend: cuda (emulated)" "$D/genemu.log" || fail "genemu: not on the emulated CUDA"
  [ "$(grep -c '"tokens": 8' "$D/gencpu.jsonl")" = 2 ] || fail "gencpu: expected 2 texts of 8 tokens"
  cmp -s "$D/gencpu.jsonl" "$D/genemu.jsonl" || { cat "$D/gencpu.jsonl" "$D/genemu.jsonl"; fail "generate: texts differ"; }
  FMHPC_EMU_DROP_OP=attention_decode run genauto 1 "$EMU" forward "${gen[@]}" "generate%output='$D/genauto.jsonl'" \
    "train%backend='auto'"
  grep -q "^backend: cpu (auto: a CUDA device is usable, but the cuda (emulated) build has no attention_decode op" \
    "$D/genauto.log" || fail "genauto: no 'backend: cpu (auto: ... attention_decode' line"
  rc=0
  FMHPC_EMU_DROP_OP=attention_decode "$MPIEXEC" -n 1 "$EMU" "${args[@]}" "${gen[@]}" "train%backend='cuda'" \
    "run%out_dir='$D/gencuda'" > "$D/gencuda.log" 2>&1 || rc=$?
  [ "$rc" = 2 ] && grep -q "generate cannot use this backend: the cuda (emulated) build has no attention_decode" \
    "$D/gencuda.log" || { tail -5 "$D/gencuda.log"; fail "gencuda: exit $rc, expected 2 naming attention_decode"; }
  echo "generate: greedy texts equal on the CPU and the emulated CUDA: $(head -c 120 "$D/genemu.jsonl")"
fi
TOL=$tol /usr/bin/python3 - "$D" cpu "${runs[@]}" <<'PY'
import json, os, sys
d, cpu, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
tol = float(os.environ["TOL"])
def read(name):
    recs = [json.loads(l) for l in open(f"{d}/{name}/metrics.jsonl")]
    steps = {r["step"]: (r["loss"], r["loss_hex"]) for r in recs if "loss_hex" in r}
    val = [r for r in recs if "val_loss" in r]
    summ = json.load(open(f"{d}/{name}/summary.json"))
    return steps, val[-1]["val_loss"] if val else None, summ["weights_sha256"]
ref_steps, ref_val, _ = read(cpu)
fwd_steps, fwd_val, fwd_sha = read(runs[0])
bad, n, worst = 0, 0, 0.0
if sorted(ref_steps) != [1, 2, 3] or sorted(fwd_steps) != [1, 2, 3] or ref_val is None or fwd_val is None:
    sys.exit(f"FAIL: missing step losses or val_loss: cpu {sorted(ref_steps)}, {runs[0]} {sorted(fwd_steps)}")
pairs = [(f"step {s}", ref_steps[s][0], fwd_steps[s][0]) for s in (1, 2, 3)] + [("val", ref_val, fwd_val)]
for what, a, b in pairs:
    rel = abs(a - b) / abs(a)
    worst = max(worst, rel)
    n += 1
    print(f"{what}: loss cpu {a:.9f} cuda(emulated) {b:.9f} rel {rel:.2e}")
    bad += not rel <= tol
if os.path.exists(f"{d}/cpu32"):
    f32, _, _ = read("cpu32")
    moved = max(abs(f32[s][0] - ref_steps[s][0]) / abs(ref_steps[s][0]) for s in (1, 2, 3))
    print(f"bf16 against fp32 compute (CPU): largest relative loss difference {moved:.2e}")
    bad += not moved > 10 * tol
for name in runs[1:]:
    steps, val, sha = read(name)
    first = min(steps)  # a resumed run logs its steps only
    same = all(steps[s][1] == fwd_steps[s][1] for s in steps) and sha == fwd_sha and len(steps) == 4 - first
    print(f"{name}: steps {sorted(steps)} weights {sha[:16]}... {'same bits' if same else 'DIFFERENT'} as {runs[0]}")
    bad += not same
print(f"{n} losses compared, worst relative difference {worst:.2e} (tolerance {tol:g}); "
      f"{len(runs) - 1} runs compared bitwise")
if bad or n == 0:
    sys.exit(f"FAIL: {bad} mismatch(es)")
print("PASS")
PY
