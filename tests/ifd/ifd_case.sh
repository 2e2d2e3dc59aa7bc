#!/bin/bash
# ifd_case.sh FMHPC IFD_MODEL MPIEXEC FIXTURES ENCODER_DIR WORKDIR: task='ifd'
# end to end (tests/ifd/tests.cmake).
#  1. two small GPT-2 weight sets in HF format (ifd_model; seeds 1 and 2);
#  2. the first 6 WordNet records, scored by inputs/ifd.in with model_b at 1
#     and 2 ranks: ifd.jsonl and ifd_summary.json byte-identical;
#  3. for records 0..3, each form built by task='prep' (mode 'sft', template
#     'deck' whose bos is <|endoftext|> = ifd's start id, empty role texts,
#     train_on 'assistant') from a one-record JSONL (prompt+response, and the
#     response alone), then task='eval' (inputs/eval.in) on that store:
#     L_cond, L_uncond and IFD = L_cond / L_uncond must match ifd.jsonl within
#     1e-6 relative, and eval's per-document line must agree with its loss.
# Prep's templating, masking, packing and the store, and eval's batch loop,
# are code paths ifd.c does not use; only the model's forward is shared.
set -euo pipefail
FMHPC=$1 MODEL=$2 MPIEXEC=$3 FX=$4 ENC=$5 WORK=$6
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
DIMS=(model%arch=\'gpt2\' model%d_model=32 model%n_layer=2 model%n_head=4 model%vocab_size=50257 model%seq_len=128)
"$MODEL" a 1 0.3 "${DIMS[@]}"
"$MODEL" b 2 0.3 "${DIMS[@]}"
head -n 6 "$FX/wordnet_sft.jsonl" > recs.jsonl

IFD=("$SRC/inputs/ifd.in" "${DIMS[@]}" "ifd%inputs='recs.jsonl'" "ifd%model='a'" "ifd%model_b='b'"
     "ifd%tokenizer='$ENC'" "ifd%instruction_field='prompt'" "ifd%response_field='response'" "ifd%output=''"
     "ifd%chat_template='none'")
for np in 1 2; do
  "$MPIEXEC" -n $np "$FMHPC" "${IFD[@]}" "run%out_dir='np$np'" > ifd_np$np.log 2>&1 || { tail -20 ifd_np$np.log; exit 1; }
done
grep '^ifd:' ifd_np1.log
for f in ifd.jsonl ifd_summary.json; do
  cmp np1/$f np2/$f || { echo "FAIL: $f differs between 1 and 2 ranks"; exit 1; }
done
echo "byte-identical at 1 and 2 ranks: ifd.jsonl ($(wc -l < np1/ifd.jsonl) records), ifd_summary.json"

PREP=("${DIMS[@]}" "run%task='prep'" "prep%tokenizer='$ENC'" "prep%mode='sft'" "prep%train_on='assistant'"
      "prep%chat_template='deck'" "prep%role_names='user','assistant'" "prep%role_prefix='',''"
      "prep%role_suffix='',''" "prep%template_bos='<|endoftext|>'" "prep%seq_len=128" "prep%packing='bfd'"
      "prep%position_ids='none'" "prep%min_chars=0" "prep%format='bin'" "prep%progress_seconds=0")
EVAL=("$SRC/inputs/eval.in" "${DIMS[@]}" "eval%model='a'" "eval%batches=1" "train%micro_batch=1")
for i in 0 1 2 3; do
  $PY - "$i" <<'PYEOF'
import json, sys
i = int(sys.argv[1])
r = json.loads(open("recs.jsonl").readlines()[i])
json.dump({"prompt": r["prompt"], "response": r["response"]}, open(f"cond{i}.jsonl", "w")); print(file=open(f"cond{i}.jsonl", "a"))
json.dump({"response": r["response"]}, open(f"uncond{i}.jsonl", "w")); print(file=open(f"uncond{i}.jsonl", "a"))
PYEOF
  for form in cond uncond; do
    sec="'prompt=user','response=assistant'"
    [ $form == uncond ] && sec="'response=assistant'"
    "$FMHPC" "${PREP[@]}" "prep%inputs='$form$i.jsonl'" "prep%sections=$sec" "prep%output='$form$i'" \
      > prep_$form$i.log 2>&1 || { tail -20 prep_$form$i.log; exit 1; }
    FMHPC_PROGRESS_SECONDS=0.000001 "$FMHPC" "${EVAL[@]}" "data%valid='$form$i/train.json'" "run%out_dir='ev_$form$i'" \
      "eval%per_doc='ev_$form$i.docs.jsonl'" > eval_$form$i.log 2>&1 || { tail -20 eval_$form$i.log; exit 1; }
  done
done
# eval's progress lines (every tick at FMHPC_PROGRESS_SECONDS=1e-6): count, rate, share, ETA
grep -qE '^eval: [12]/2 batches, [0-9.]+ batches/s, (50|100)%, elapsed [0-9hms]+, ETA [0-9hms]+$' eval_cond0.log ||
  { cat eval_cond0.log; echo "FAIL: no eval progress line"; exit 1; }
$PY - <<'PYEOF'
import json, math
recs = [json.loads(l) for l in open("np1/ifd.jsonl")]
ok = True
def near(a, b, rtol):
    return abs(a - b) <= rtol * abs(b)
for i in range(4):
    r = recs[i]
    lc = json.load(open(f"ev_cond{i}/eval.json"))
    lu = json.load(open(f"ev_uncond{i}/eval.json"))
    dc = [json.loads(l) for l in open(f"ev_cond{i}.docs.jsonl")]
    assert not r["truncated"] and not r["skipped"], r
    # eval counts the same targets: the response ids and the closing EOS
    checks = [lc["tokens"] == r["scored_tokens"], lu["tokens"] == r["scored_tokens"],
              near(r["l_cond"], lc["loss"], 1e-6), near(r["l_uncond"], lu["loss"], 1e-6),
              near(r["ifd"], lc["loss"] / lu["loss"], 1e-6), near(r["ifd"], r["l_cond"] / r["l_uncond"], 1e-15),
              len(dc) == 1 and dc[0]["tokens"] == lc["tokens"] and near(dc[0]["loss"], lc["loss"], 1e-5),
              0 <= lc["accuracy"] <= 1 and dc[0]["correct"] == lc["correct"]]
    print(f"record {i}: {r['scored_tokens']} scored ids; ifd L_cond {r['l_cond']:.9f} eval {lc['loss']:.9f}; "
          f"L_uncond {r['l_uncond']:.9f} eval {lu['loss']:.9f}; IFD {r['ifd']:.9f} vs {lc['loss'] / lu['loss']:.9f}; "
          f"accuracy {lc['accuracy']:.4f}: {'ok' if all(checks) else 'FAIL ' + str(checks)}")
    ok &= all(checks)
# the summary restates the records
s = json.load(open("np1/ifd_summary.json"))
v = sorted(r["ifd"] for r in recs)
m = sum(v) / len(v)
b = [r["ifd_b"] for r in recs]
a = [r["ifd"] for r in recs]
mb = sum(b) / len(b)
pr = sum((x - m) * (y - mb) for x, y in zip(a, b)) / math.sqrt(sum((x - m) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
sc = [s["records"] == 6, s["ifd"]["count"] == 6, near(s["ifd"]["mean"], m, 1e-12),
      near(s["ifd"]["median"], (v[2] + v[3]) / 2, 1e-12),
      near(s["ifd"]["std"], math.sqrt(sum((x - m) ** 2 for x in v) / 6), 1e-9),
      s["ifd"]["share_above_1"] == sum(x > 1 for x in v) / 6, near(s["pearson_r"], pr, 1e-9),
      all(near(r["ifd_diff"], r["ifd_b"] - r["ifd"], 1e-12) for r in recs)]
print(f"summary: mean {m:.6f}, median {s['ifd']['median']:.6f}, Pearson r {pr:.6f}: {'ok' if all(sc) else 'FAIL ' + str(sc)}")
ok &= all(sc)
if not ok:
    raise SystemExit("FAIL: ifd")
print("PASS: ifd")
PYEOF
