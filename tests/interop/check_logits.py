#!/usr/bin/python3
"""check_logits.py HF_TOOL SRC WORK: the fixtures regression/gpu/hf_fixtures.sh
makes for the GPU machine's transformers check (regression/gpu/refs.py hf),
checked here against tests/model/ref_models.py: for each case, the HF
directory hf_tool export-init wrote, loaded by HF names into the torch
reference (GPT2LMHeadModel / LlamaForCausalLM as transformers defines them;
dims, epsilon and RoPE theta from its config.json), run in float64 on ids.bin
at positions 0..T-1 with the causal mask, must give hf_tool logits' fp32
logits.bin within 1e-5 of the logits' scale and the same argmax at every
position. So the producer of what the GPU machine checks is itself checked
in CI. Exit 0 pass, 1 fail; without torch 77, or 1 in CI (tests/oracle.py)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import ref_models  # noqa: E402

np, torch = ref_models.np, ref_models.torch


def main():
    tool, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    fx = os.path.join(work, "hf_fixtures")
    subprocess.run(["bash", os.path.join(src, "regression", "gpu", "hf_fixtures.sh"), tool, fx], check=True)
    cases = sorted(os.listdir(fx))
    if len(cases) != 4:
        print(f"FAIL: expected 4 fixture cases, found {cases}")
        return 1
    bad = 0
    for case in cases:
        d = os.path.join(fx, case)
        cfg = json.load(open(os.path.join(d, "hf", "config.json")))
        arch = cfg["model_type"]
        ids = np.fromfile(os.path.join(d, "ids.bin"), dtype="<i4")
        T = len(ids)
        if arch == "gpt2":
            c = {"arch": arch, "V": cfg["vocab_size"], "C": cfg["n_embd"], "T": cfg["n_positions"], "L": cfg["n_layer"],
                 "NH": cfg["n_head"], "NKV": cfg["n_head"], "HS": cfg["n_embd"] // cfg["n_head"],
                 "F": cfg["n_inner"] or 4 * cfg["n_embd"], "eps": cfg["layer_norm_epsilon"],
                 "tied": cfg["tie_word_embeddings"], "theta": 0.0, "B": 1}
        else:
            c = {"arch": arch, "V": cfg["vocab_size"], "C": cfg["hidden_size"], "T": cfg["max_position_embeddings"],
                 "L": cfg["num_hidden_layers"], "NH": cfg["num_attention_heads"], "NKV": cfg["num_key_value_heads"],
                 "HS": cfg["head_dim"], "F": cfg["intermediate_size"], "eps": cfg["rms_norm_eps"],
                 "tied": cfg["tie_word_embeddings"], "theta": cfg["rope_theta"], "B": 1}
        ref = np.fromfile(os.path.join(d, "logits.bin"), dtype="<f4").reshape(T, c["V"])
        model = (ref_models.GPT2LMHeadModel if arch == "gpt2" else ref_models.LlamaForCausalLM)(c)
        ref_models.load_hf(model, arch, ref_models.read_safetensors(os.path.join(d, "hf", "model.safetensors")))
        model = model.double()
        tok = torch.as_tensor(ids.astype(np.int64))[None]
        pos = torch.arange(T)[None]
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None]
        with torch.no_grad():
            out = model(tok, pos, allowed)[0][0].numpy()
        diff, scale = float(np.abs(out - ref).max()), max(1.0, float(np.abs(out).max()))
        same = bool((out.argmax(1) == ref.argmax(1)).all())
        ok = diff <= 1e-5 * scale and same and float(out.std()) > 0.1
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'}: {case} ({arch}, tied {c['tied']}, NKV {c['NKV']}): {T} x {c['V']} logits, "
              f"max |diff| {diff:.3g} against the float64 reference (scale {scale:.3g}, spread {out.std():.3g}), "
              f"argmax {'equal' if same else 'DIFFERS'}")
    print("PASS: hf_tool logits equals the torch reference on every fixture" if not bad else f"FAIL: {bad} case(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
