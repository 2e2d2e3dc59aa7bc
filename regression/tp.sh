#!/usr/bin/env bash
# tp.sh FMHPC MPIEXEC WORK CASE: tensor parallelism (&parallel tp, Megatron-LM
# layout) end to end on the prepped linux-doc corpus, 10 steps of 2
# sequences (2 micro-batches), 4 ranks oversubscribed at most.
#   llama   the nano Llama with n_kv_head = 4 (GQA off: 4 KV heads, so tp 4
#           holds one each) at tp = 1, 2, 4 (dp = 1): every step's loss within
#           a relative 1e-5 of tp = 1 (fp32: tp regroups the sums of the
#           row-parallel layers, the vocab-parallel softmax and the embedding
#           gradient); tp = 2 and tp = 4 again: the same bits (losses, weights SHA-256);
#           dp 2 x tp 2: the same bits as dp 1 x tp 2 (the exact dp reduction
#           runs per tp shard), its HF export byte for byte; it checkpoints at
#           step 5 for the resume case (fixture).
#   gpt2    the nano GPT-2 (fused qkv, biases, tied LM head) at tp = 1, 2, 4:
#           losses within a relative 1e-5, tp = 2 and tp = 4 again the same bits
#           (tp = 1 run to run is regression.determinism's).
#   resume  the dp 2 x tp 2 checkpoint of step 5 (canonical tensors: h5py
#           checks /params/wte is (50257, 128)) resumed at dp 1 x tp 2: steps
#           6-10 and the weights are the uninterrupted run's bits; at tp = 1
#           and tp = 4: within a relative 1e-5, the block scales started fresh;
#           and tp = 3 (does not divide 4 KV heads) is a deck error naming the
#           valid values.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3 case=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
source "$repo/tests/prune.sh"
Z=tp
mkdir -p "$Z"
common=(train%steps=10 train%global_batch=2 train%micro_batch=1 optim%warmup_steps=2 eval%every=0 "data%valid=''"
        log%every=5 log%plot=F log%peak_tflops=1)
run() { # name np deck [overrides...]
  local n=$1 np=$2 deck=$3; shift 3
  rm -rf "${Z:?}/$n"
  "$mpiexec" -n "$np" "$fmhpc" "$repo/inputs/$deck.in" "${common[@]}" "$@" "run%out_dir='$Z/$n'" > "$Z/$n.log" 2>&1 ||
    { tail -20 "$Z/$n.log"; echo "FAIL: $n exited non-zero"; exit 1; }
}
bits() { # name: the step records (after the last resume, steps > ${from:-0}) with their loss bits, and the weights hash
  awk '/"record": "resume"/{n=0; delete l} /"record": "step"/{l[n++]=$0} END{for(i=0;i<n;i++) print l[i]}' \
    "$Z/$1/metrics.jsonl" | grep -o '"step": [0-9]*, "loss": [^,]*, "loss_hex": "[^"]*"' |
    awk -v from="${from:-0}" '{s=$2; sub(",", "", s); if (s + 0 > from) print}'
  grep -o '"weights_sha256": "[^"]*"' "$Z/$1/summary.json"
}
same() { # a b what
  if [ "$(bits "$1" | grep -c loss_hex)" -ge 5 ] && [ "$(bits "$1")" = "$(bits "$2")" ]; then
    echo "ok: $3: same loss bits and weights ($(bits "$1" | grep -c loss_hex) steps compared)"
  else
    diff <(bits "$1") <(bits "$2") | head -6; echo "FAIL: $3"; exit 1
  fi
}
near() { # ref other what [from]: every common step's loss within a relative 1e-5
  /usr/bin/python3 - "$Z/$1/metrics.jsonl" "$Z/$2/metrics.jsonl" "$3" "${4:-0}" <<'PY'
import json, sys
def steps(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if r.get("record") == "step": out[r["step"]] = r["loss"]
    return out
a, b = steps(sys.argv[1]), steps(sys.argv[2])
common = [s for s in sorted(b) if s in a and s > int(sys.argv[4])]
worst = max((abs(b[s] - a[s]) / abs(a[s]) for s in common), default=None)
if len(common) < 5 or worst is None or worst > 1e-5:
    sys.exit(f"FAIL: {sys.argv[3]}: {len(common)} steps compared, worst relative difference {worst}")
print(f"ok: {sys.argv[3]}: {len(common)} losses within a relative {worst:.2e} (tolerance 1e-5)")
PY
}
tp_of() { grep -q "dp $2 x tp $3 " "$Z/$1.log" || { echo "FAIL: $1 did not run at dp $2 x tp $3"; exit 1; }; }
case $case in
llama)
  L=(model%n_kv_head=4)
  run l_tp1 1 llama_nano "${L[@]}"
  run l_tp2 2 llama_nano "${L[@]}" parallel%tp=2
  run l_tp2_again 2 llama_nano "${L[@]}" parallel%tp=2
  run l_tp4 4 llama_nano "${L[@]}" parallel%tp=4
  run l_tp4_again 4 llama_nano "${L[@]}" parallel%tp=4
  run l_dp2tp2 4 llama_nano "${L[@]}" parallel%tp=2 ckpt%every=5
  tp_of l_tp2 1 2; tp_of l_tp4 1 4; tp_of l_dp2tp2 2 2
  near l_tp1 l_tp2 "llama tp 2 vs tp 1"
  near l_tp1 l_tp4 "llama tp 4 vs tp 1"
  same l_tp2 l_tp2_again "llama tp 2 run to run"
  same l_tp4 l_tp4_again "llama tp 4 run to run"
  same l_tp2 l_dp2tp2 "llama dp 2 x tp 2 vs dp 1 x tp 2"
  cmp "$Z/l_tp2/final/model.safetensors" "$Z/l_dp2tp2/final/model.safetensors" ||
    { echo "FAIL: the HF exports of dp 1 x tp 2 and dp 2 x tp 2 differ"; exit 1; }
  echo "ok: the HF export (tp shards gathered) is byte for byte the same at dp 1 and 2"
  fm_prune "$Z"/l_tp* "$Z/l_dp2tp2/final" # l_dp2tp2/ckpt: regression.tp_resume reads it
  ;;
gpt2)
  run g_tp1 1 gpt2_nano
  run g_tp2 2 gpt2_nano parallel%tp=2
  run g_tp2_again 2 gpt2_nano parallel%tp=2
  run g_tp4 4 gpt2_nano parallel%tp=4
  run g_tp4_again 4 gpt2_nano parallel%tp=4
  tp_of g_tp2 1 2; tp_of g_tp4 1 4
  near g_tp1 g_tp2 "gpt2 tp 2 vs tp 1"
  near g_tp1 g_tp4 "gpt2 tp 4 vs tp 1"
  same g_tp2 g_tp2_again "gpt2 tp 2 run to run"
  same g_tp4 g_tp4_again "gpt2 tp 4 run to run"
  fm_prune "$Z"/g_tp*
  ;;
resume)
  ck="$Z/l_dp2tp2/ckpt/step_00000005.h5"
  [ -f "$ck" ] || { echo "FAIL: no $ck (regression.tp_llama makes it)"; exit 1; }
  /usr/bin/python3 - "$ck" "$repo/tests" <<'PY' || exit $?
import sys
sys.path.insert(0, sys.argv[2])
import oracle
h5py = oracle.need_module("h5py", "python3-h5py")
f = h5py.File(sys.argv[1], "r")
shapes = {k: f["params"][k].shape for k in ("wte", "lm_head", "h.attn.wq", "h.attn.wk", "h.attn.wo", "h.mlp.w_down")}
want = {"wte": (50257, 128), "lm_head": (50257, 128), "h.attn.wq": (4, 128, 128), "h.attn.wk": (4, 128, 128),
        "h.attn.wo": (4, 128, 128), "h.mlp.w_down": (4, 128, 352)}
if shapes != want:
    sys.exit(f"FAIL: checkpoint shapes {shapes}, canonical {want}")
print("ok: the dp 2 x tp 2 checkpoint holds canonical (unsharded) tensors")
PY
  L=(model%n_kv_head=4 "ckpt%resume='$ck'")
  run r_tp2 2 llama_nano "${L[@]}" parallel%tp=2
  run r_tp1 1 llama_nano "${L[@]}"
  run r_tp4 4 llama_nano "${L[@]}" parallel%tp=4
  for n in r_tp2 r_tp1 r_tp4; do grep -q "^resume: .*step 5 " "$Z/$n.log" || { echo "FAIL: $n did not resume at step 5"; exit 1; }; done
  from=5 same l_dp2tp2 r_tp2 "resume of dp 2 x tp 2 at dp 1 x tp 2"
  grep -q "block scales start fresh" "$Z/r_tp1.log" || { echo "FAIL: r_tp1 does not say its scales start fresh"; exit 1; }
  near l_dp2tp2 r_tp1 "resume of tp 2 at tp 1" 5
  near l_dp2tp2 r_tp4 "resume of tp 2 at tp 4" 5
  if "$mpiexec" -n 3 "$fmhpc" "$repo/inputs/llama_nano.in" "${common[@]}" model%n_kv_head=4 parallel%tp=3 \
       "run%out_dir='$Z/bad'" > "$Z/bad.log" 2>&1; then
    echo "FAIL: tp = 3 with 4 KV heads trained"; exit 1
  fi
  grep -q "tp.*valid tp values are 1, 2, 4" "$Z/bad.log" || { cat "$Z/bad.log" | tail -5; echo "FAIL: no deck error naming 1, 2, 4"; exit 1; }
  echo "ok: tp = 3 is a deck error: $(grep -m1 'valid tp values' "$Z/bad.log")"
  fm_prune "$Z"/r_tp* "$Z/bad" "$Z/l_dp2tp2"
  ;;
*) echo "tp.sh: unknown case $case"; exit 2 ;;
esac
echo "PASS: tp $case"
