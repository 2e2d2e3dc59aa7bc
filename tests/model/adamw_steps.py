#!/usr/bin/python3
"""adamw_steps.py ADAMW_STEPS WORK ARCH TIED: 10 AdamW steps in fmhpc and in
PyTorch from the same initial weights and batches; every step's loss within
1e-5 relative. The torch side is the torch.nn reference of ref_models.py (HF's
GPT-2 / Llama definitions) with torch.optim.AdamW in two parameter groups as
fmhpc decays: weight decay 0.1 on matrices, none on embeddings, norms, biases."""
import json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_models as R  # exits 77 (skip), or 1 in CI, without numpy or torch
import numpy as np
import torch
import torch.nn.functional as F


def main():
    prog, work, arch, tied = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    out = os.path.join(work, f"adamw_{arch}_tied{tied}")
    os.makedirs(out, exist_ok=True)
    subprocess.run([prog, out, arch, tied], check=True)
    fm = [float(x) for x in open(os.path.join(out, "losses.txt"))]
    if len(fm) != 10:
        print(f"FAIL: {len(fm)} fmhpc losses in losses.txt, expected 10")
        return 1
    hf = R.read_safetensors(os.path.join(out, "hf", "model.safetensors"))
    cfg = json.load(open(os.path.join(out, "hf", "config.json")))
    if arch == "gpt2":
        C, L, NH, V, T = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["vocab_size"], cfg["n_positions"]
        c = {"arch": arch, "C": C, "L": L, "NH": NH, "NKV": NH, "HS": C // NH, "F": cfg.get("n_inner") or 4 * C,
             "V": V, "T": T, "eps": cfg["layer_norm_epsilon"], "tied": tied == "1"}
    else:
        C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
        c = {"arch": arch, "C": C, "L": cfg["num_hidden_layers"], "NH": NH, "NKV": cfg["num_key_value_heads"],
             "HS": cfg.get("head_dim") or C // NH, "F": cfg["intermediate_size"], "V": cfg["vocab_size"],
             "T": cfg["max_position_embeddings"], "eps": cfg["rms_norm_eps"], "theta": cfg["rope_theta"],
             "tied": tied == "1"}
    torch.manual_seed(0)
    model = (R.GPT2LMHeadModel if arch == "gpt2" else R.LlamaForCausalLM)(c)
    R.load_hf(model, arch, hf)
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # matrices decay (fmhpc's FM_TF_MATRIX), the rest not
        is_matrix = p.dim() == 2 and "wte" not in name and "wpe" not in name and "embed_tokens" not in name
        (decay if is_matrix else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    ok = True
    rd = lambda s, k, dt: torch.as_tensor(np.fromfile(os.path.join(out, f"batch_{s}.{k}"), dtype=dt))
    for s in range(10):
        tok, tgt, pos, seg = (rd(s, k, "<i4") for k in ("tokens.i32", "targets.i32", "pos.i32", "seg.i32"))
        wt = rd(s, "weight.f32", "<f4")
        T = c["T"]
        B = tok.numel() // T
        tok, tgt, pos, seg = (x.view(B, T).long() for x in (tok, tgt, pos, seg))
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        allowed = (causal[None] & (seg[:, :, None] == seg[:, None, :]))[:, None]
        opt.zero_grad(set_to_none=True)
        logits, _ = model(tok, pos, allowed)
        loss = (F.cross_entropy(logits.view(B * T, -1), tgt.view(-1), reduction="none") * wt).sum()
        loss.backward()
        opt.step()
        rel = abs(fm[s] - float(loss)) / abs(float(loss))
        ok &= rel <= 1e-5
        print(f"step {s + 1:2d}: loss fmhpc {fm[s]:.9f} torch {float(loss):.9f} rel {rel:.2e}")
    print("PASS: 10 AdamW steps within 1e-5" if ok else "FAIL: a loss differs by more than 1e-5")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
