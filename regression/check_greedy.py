#!/usr/bin/python3
"""check_greedy.py MODEL_DIR GENERATE_JSONL NPM_DIR PROMPT...: fmhpc's greedy
generation from a trained model against step-by-step full-forward argmax in
PyTorch. The reference never shares code with fmhpc: prompts are encoded and
the continuation decoded by npm's gpt-3-encoder (node), the model is the
torch.nn transcription of HF's GPT-2 (tests/model/ref_models.py) loaded from
fmhpc's exported model.safetensors, and each next token is the argmax of a
full forward over the whole sequence so far. Where fp32 rounding could flip an
argmax (the top two torch logits within 1e-4), the comparison stops for that
prompt and says so; any other difference fails."""
import json, os, subprocess, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "model"))
import ref_models as R

model_dir, gen_jsonl, npm = sys.argv[1], sys.argv[2], sys.argv[3]
prompts = sys.argv[4:]
cfg = json.load(open(os.path.join(model_dir, "config.json")))
C, NH = cfg["n_embd"], cfg["n_head"]
c = {"C": C, "L": cfg["n_layer"], "NH": NH, "NKV": NH, "HS": C // NH, "F": cfg.get("n_inner") or 4 * C,
     "V": cfg["vocab_size"], "T": cfg["n_positions"], "eps": cfg["layer_norm_epsilon"],
     "tied": cfg.get("tie_word_embeddings", True)}
torch.manual_seed(0)
model = R.GPT2LMHeadModel(c)
R.load_hf(model, "gpt2", R.read_safetensors(os.path.join(model_dir, "model.safetensors")))
model.eval()

enc = os.path.join(npm, "gpt-3-encoder")
def node(code, arg):
    return subprocess.run(["node", "-e", code, enc, arg], capture_output=True, text=True, check=True).stdout
encode = lambda s: json.loads(node("const e=require(process.argv[1]);console.log(JSON.stringify(e.encode(process.argv[2])))", s))
decode = lambda ids: node("const e=require(process.argv[1]);process.stdout.write(e.decode(JSON.parse(process.argv[2])))",
                          json.dumps(ids))

got = [json.loads(l) for l in open(gen_jsonl)]
fails, compared = 0, 0
for p, g in zip(prompts, got):
    ids = encode(p)
    n = g["tokens"]
    ref, note = [], ""
    with torch.no_grad():
        for _ in range(n):
            T = len(ids) + len(ref)
            seq = torch.tensor([ids + ref])
            allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
            logits, _ = model(seq, torch.arange(T).view(1, T), allowed)
            top2 = torch.topk(logits[0, -1], 2)
            ref.append(int(top2.indices[0]))
            if float(top2.values[0] - top2.values[1]) < 1e-4:
                note = f" (near-tie at token {len(ref)}: compared up to there)"
                break
    want = decode(ref)
    k = len(ref)
    ok = g["text"].startswith(want) if note else g["text"] == want
    compared += k
    print(f"{'ok  ' if ok else 'FAIL'} {p!r}: {k} tokens{note}: {g['text'][:60]!r}")
    fails += not ok
print(f"{compared} greedy tokens compared, {fails} prompts differ")
print("PASS: greedy" if fails == 0 else "FAIL: greedy generation differs from full-forward argmax")
sys.exit(1 if fails else 0)
