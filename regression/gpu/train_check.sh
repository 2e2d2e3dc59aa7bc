#!/usr/bin/env bash
# regression/gpu/train_check.sh FMHPC FX WORK: training on a real GPU
# (backend = 'cuda', one rank, NCCL by &parallel comm = 'auto'), run by
# check.sh --prebuilt with pack.sh's stores in FX/data. Prints one line per
# check, "PASS ..." / "FAIL ..." / "INFO ...", and exits 1 on any FAIL.
#   nano_fp32   inputs/gpt2_nano.in (d 128, 4 layers, T 128) 3 steps of 16
#               sequences + validation, precision c=f32: the CUDA losses within
#               1e-5 relative of the CPU backend's (not bitwise: the kernels sum
#               in other orders; the emulated run in CI holds ~1e-9), twice on
#               CUDA with the same loss bits
#   nano_bf16   the same with c=bf16 on CUDA, twice: the same loss bits
#   1p2b        inputs/llama_1p2b.in (1.2B: d 1536, 24 layers, GQA 24/4, FFN
#               6912, V 100000, T 2048, recompute, bf16 compute) 3 steps of 16
#               sequences (micro-batches of 4) twice: the same loss bits; the
#               steady-state step's time, tokens/s and MFU (metrics.jsonl)
#   1p2b_b8, 1p2b_norecompute   the same 3 steps once with micro-batches of 8,
#               and of 4 without recompute: their step 3 (INFO, for tuning)
# Trying the script on a machine without a GPU: BACKEND=cpu SKIP_1P2B=1.
set -uo pipefail
fmhpc=$1 fx=$2 work=$3
be=${BACKEND:-cuda}
mkdir -p "$work"
fail=0
common=("ckpt%every=0" "ckpt%every_minutes=0" "ckpt%resume='none'" "log%every=1" "log%plot=F" "log%tensorboard=F")

run() { # run NAME TIMEOUT DECK OVERRIDES...: fmhpc in WORK/NAME, its log WORK/NAME.log
  local name=$1 t=$2 deck=$3
  shift 3
  rm -rf "${work:?}/$name"
  (cd "$work" && timeout "$t" "$fmhpc" "$deck" "run%out_dir='$work/$name'" "${common[@]}" "$@") > "$work/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "FAIL $name: exit $rc (log: $work/$name.log), its tail:"; tail -n 15 "$work/$name.log"; }
  return $rc
}

losses() { # the step and validation loss bits of a run, one per line
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["record"] in ("step", "eval"):
        print(r["record"], r["step"], r.get("loss_hex") or r.get("val_loss_hex"))' "$work/$1/metrics.jsonl"
}

nano=("$fx/decks/gpt2_nano.in" "data%train='$fx/data/linuxdoc_128/train.json'"
  "data%valid='$fx/data/linuxdoc_128/valid.json'" "train%steps=3" "optim%warmup_steps=1" "eval%every=0" "eval%batches=2")
if run nano_cpu 90 "${nano[@]}" "train%backend='cpu'" &&
  run nano_cuda_a 90 "${nano[@]}" "train%backend='$be'" &&
  run nano_cuda_b 90 "${nano[@]}" "train%backend='$be'"; then
  grep -m1 '^backend' "$work/nano_cuda_a.log" | sed 's/^/INFO nano: /'
  if cmp -s <(losses nano_cuda_a) <(losses nano_cuda_b); then
    echo "PASS nano_fp32 cuda twice: the same loss bits ($(losses nano_cuda_a | wc -l) losses)"
  else
    echo "FAIL nano_fp32 cuda twice: loss bits differ"
    diff <(losses nano_cuda_a) <(losses nano_cuda_b)
    fail=1
  fi
  python3 - "$work/nano_cpu/metrics.jsonl" "$work/nano_cuda_a/metrics.jsonl" <<'PY' || fail=1
import json, sys
def get(p):
    return [(r["record"], r["step"], float.fromhex(r.get("loss_hex") or r["val_loss_hex"]))
            for r in map(json.loads, open(p)) if r["record"] in ("step", "eval")]
cpu, gpu = get(sys.argv[1]), get(sys.argv[2])
assert [c[:2] for c in cpu] == [g[:2] for g in gpu] and cpu, (cpu, gpu)
rel = max(abs(c[2] - g[2]) / abs(c[2]) for c, g in zip(cpu, gpu))
ok = rel <= 1e-5
print(f"{'PASS' if ok else 'FAIL'} nano_fp32 cuda vs cpu: {len(cpu)} losses, max relative difference {rel:.3g} "
      f"(<= 1e-5); step 3 loss cpu {cpu[2][2]:.9f} cuda {gpu[2][2]:.9f}")
sys.exit(0 if ok else 1)
PY
else
  fail=1
fi

bf=("train%precision='p=f32,c=bf16'" "train%backend='$be'")
if run nano_bf16_a 90 "${nano[@]}" "${bf[@]}" && run nano_bf16_b 90 "${nano[@]}" "${bf[@]}"; then
  if cmp -s <(losses nano_bf16_a) <(losses nano_bf16_b); then
    echo "PASS nano_bf16 cuda twice: the same loss bits (step 3: $(losses nano_bf16_a | awk 'NR == 3 { print $3 }'))"
  else
    echo "FAIL nano_bf16 cuda twice: loss bits differ"
    fail=1
  fi
else
  fail=1
fi

big=("$fx/decks/llama_1p2b.in" "data%train='$fx/data/linuxdoc_2048/train.json'"
  "data%valid='$fx/data/linuxdoc_2048/valid.json'" "train%steps=3" "optim%warmup_steps=1" "train%global_batch=16" "train%micro_batch=4"
  "train%backend='$be'" "eval%every=0" "eval%batches=2")
for r in a b; do
  [ -z "${SKIP_1P2B:-}" ] || break
  run "1p2b_$r" 150 "${big[@]}" || { fail=1; break; }
  rm -rf "$work/1p2b_$r/final" # 4.8 GB of fp32 safetensors; the loss bits are the check
done
if [ -f "$work/1p2b_b/metrics.jsonl" ]; then
  if cmp -s <(losses 1p2b_a) <(losses 1p2b_b); then
    echo "PASS 1p2b twice: the same loss bits ($(losses 1p2b_a | tr '\n' ' '))"
  else
    echo "FAIL 1p2b twice: loss bits differ"
    diff <(losses 1p2b_a) <(losses 1p2b_b)
    fail=1
  fi
  python3 - "$work/1p2b_b/metrics.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["record"] == "step"]
last = steps[-1]
print(f"INFO 1p2b step {last['step']}: {last['step_s'] * 1e3:.0f} ms, {last['tokens_per_s']:.0f} tokens/s, "
      f"MFU {100 * last['mfu']:.1f}% (compute {last['compute_s'] * 1e3:.0f} ms, update {last['update_s'] * 1e3:.0f} ms, "
      f"data {last['data_s'] * 1e3:.1f} ms); step 1 {steps[0]['step_s'] * 1e3:.0f} ms")
PY
  grep -E '^(backend|comm|model|MFU):? ' "$work/1p2b_b.log" | sed 's/^/INFO 1p2b log: /'
  for v in "b8 train%micro_batch=8" "norecompute model%recompute=F"; do
    # shellcheck disable=SC2086 # two words: the name and the override
    set -- $v
    run "1p2b_$1" 150 "${big[@]}" "$2" || { fail=1; continue; }
    rm -rf "$work/1p2b_$1/final"
    python3 - "$work/1p2b_$1/metrics.jsonl" "$1" <<'PY'
import json, sys
last = [r for r in map(json.loads, open(sys.argv[1])) if r["record"] == "step"][-1]
print(f"INFO 1p2b_{sys.argv[2]} step {last['step']}: {last['step_s'] * 1e3:.0f} ms, {last['tokens_per_s']:.0f} tokens/s, "
      f"MFU {100 * last['mfu']:.1f}%")
PY
    grep -E '^model ' "$work/1p2b_$1.log" | sed "s/^/INFO 1p2b_$1 log: /"
  done
fi
exit $fail
