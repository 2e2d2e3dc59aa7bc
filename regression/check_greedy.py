#!/usr/bin/python3
"""check_greedy.py MODEL_DIR GENERATE_JSONL NPM_DIR MAX_TOKENS PROMPT...: fmhpc's
greedy generation from a trained model against step-by-step full-forward
argmax in PyTorch. The reference never shares code with fmhpc: prompts are
encoded and the continuation decoded by npm's gpt-3-encoder (node), the model
is the torch.nn transcription of HF's GPT-2 (tests/model/ref_models.py) loaded
from fmhpc's exported model.safetensors, and each next token is the argmax of
a full forward over the whole sequence so far.
For every prompt the reference makes MAX_TOKENS tokens (fewer only when its
argmax is EOS, which fmhpc must report as stop "eos" at the same place); each
one is compared: fmhpc's text must equal the decoded reference, its token
count and stop reason must agree. Where fp32 rounding could flip an argmax
(the top two torch logits within 1e-4) either token is accepted: the one whose
text continues fmhpc's output is taken, and the comparison goes on.
Fails on any difference, on a missing or extra record, and on fewer compared
tokens than requested."""
import json, os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import oracle

torch = oracle.need_module("torch", "python3-torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model"))
import ref_models as R

EOS = 50256
model_dir, gen_jsonl, npm, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prompts = sys.argv[5:]
if not prompts or max_tokens < 1:
    sys.exit("FAIL: usage: check_greedy.py MODEL_DIR GENERATE_JSONL NPM_DIR MAX_TOKENS PROMPT... (at least one prompt)")
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
                          json.dumps([i for i in ids if i != EOS]))

got = [json.loads(l) for l in open(gen_jsonl)]
fails = []
if len(got) != len(prompts):
    fails.append(f"{gen_jsonl}: {len(got)} records for {len(prompts)} prompts")
compared, ties = 0, 0
for i, p in enumerate(prompts):
    if i >= len(got):
        fails.append(f"{p!r}: no record")
        continue
    g = got[i]
    if g.get("prompt") != p:
        fails.append(f"record {i}: prompt {g.get('prompt')!r}, expected {p!r}")
        continue
    ids = encode(p)
    ref, why = [], "length"
    with torch.no_grad():
        while len(ref) < max_tokens and len(ids) + len(ref) < c["T"]:
            T = len(ids) + len(ref)
            seq = torch.tensor([ids + ref])
            allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
            logits, _ = model(seq, torch.arange(T).view(1, T), allowed)
            top2 = torch.topk(logits[0, -1], 2)
            nxt = int(top2.indices[0])
            if float(top2.values[0] - top2.values[1]) < 1e-4:  # either may be right: follow fmhpc's text
                ties += 1
                alt = int(top2.indices[1])
                if not g["text"].startswith(decode(ref + [nxt])) and g["text"].startswith(decode(ref + [alt])):
                    nxt = alt
            ref.append(nxt)
            if nxt == EOS:
                why = "eos"
                break
    if len(ref) < max_tokens and why != "eos":
        why = "context"
    want = decode(ref)
    ok = g["text"] == want and g["tokens"] == len(ref) and g["stop"] == why
    compared += len(ref)
    print(f"{'ok  ' if ok else 'FAIL'} {p!r}: {len(ref)} tokens compared (reference stop {why}; fmhpc {g['tokens']} "
          f"tokens, stop {g['stop']}): {g['text'][:60]!r}")
    if not ok:
        fails.append(f"{p!r}: fmhpc {g['text']!r} ({g['tokens']} tokens, stop {g['stop']}), "
                     f"reference {want!r} ({len(ref)} tokens, stop {why})")
    elif len(ref) < max_tokens and why != "eos":
        fails.append(f"{p!r}: only {len(ref)} of {max_tokens} tokens compared")
print(f"{compared} greedy tokens compared over {len(prompts)} prompts ({ties} near-ties followed)")
if compared == 0:
    fails.append("no token compared")
for f in fails:
    print("FAIL:", f)
if fails:
    sys.exit(1)
print("PASS: greedy generation equals full-forward argmax")
