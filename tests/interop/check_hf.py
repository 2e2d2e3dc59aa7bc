"""check_hf.py: fmhpc's Hugging Face import/export checked by an independent
reader/writer (st_ref.py) and an independent statement of HF's names, shapes
and layouts (GPT2LMHeadModel with Conv1D (in, out) weights; LlamaForCausalLM
with nn.Linear (out, in) weights), as transformers defines them.

    check_hf.py CASE HF_TOOL FMHPC WORKDIR

Export cases: hf_tool writes known weights (w[j] = formula(j) over fmhpc's
parameter arena); we read model.safetensors and config.json and check every
name, shape, dtype and value. Import cases: we write an HF-style directory
(F32/F16/BF16, prefixes as transformers saves them, buffers it keeps,
sharded) and hf_tool imports it; the fp32 arena must equal ours exactly."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

import st_ref

GPT2 = ["model%arch='gpt2'", "model%d_model=16", "model%n_layer=2", "model%n_head=2", "model%vocab_size=37",
        "model%seq_len=12"]
LLAMA = ["model%arch='llama'", "model%d_model=16", "model%n_layer=2", "model%n_head=4", "model%n_kv_head=2",
         "model%d_ff=24", "model%vocab_size=37", "model%seq_len=12", "model%tie_embeddings=F",
         "model%norm_eps=1e-6", "model%rope_theta=500000.0"]
UNTIE = ["model%tie_embeddings=F"]
TIE = ["model%tie_embeddings=T"]


def formula(n):
    j = np.arange(n, dtype=np.int64)
    return (((j * 37 + 11) % 1001 - 500) / 256.0).astype(np.float32)


def dims_of(over):
    """Dims from the overrides, with fmhpc's documented defaults for the rest."""
    kv = dict(o.split("%", 1)[1].split("=", 1) for o in over)
    arch = kv["arch"].strip("'")
    C, L, NH, V, T = (int(kv[k]) for k in ("d_model", "n_layer", "n_head", "vocab_size", "seq_len"))
    NKV = int(kv.get("n_kv_head", NH))
    F = int(kv.get("d_ff", 4 * C))
    tied = kv.get("tie_embeddings", "T") in ("T", ".true.")
    return dict(arch=arch, C=C, L=L, NH=NH, NKV=NKV, HS=C // NH, F=F, V=V, T=T, tied=tied)


def hf_layout(d):
    """HF name -> (fmhpc canonical name, layer or None, transposed?, HF shape)."""
    C, F, V, T, NH, NKV, HS = d["C"], d["F"], d["V"], d["T"], d["NH"], d["NKV"], d["HS"]
    m = {}
    if d["arch"] == "gpt2":
        m["transformer.wte.weight"] = ("wte", None, False, (V, C))
        m["transformer.wpe.weight"] = ("wpe", None, False, (T, C))
        for i in range(d["L"]):
            p = f"transformer.h.{i}."
            m[p + "ln_1.weight"] = ("h.ln1.w", i, False, (C,))
            m[p + "ln_1.bias"] = ("h.ln1.b", i, False, (C,))
            m[p + "attn.c_attn.weight"] = ("h.attn.wqkv", i, True, (C, 3 * C))  # Conv1D: (in, out)
            m[p + "attn.c_attn.bias"] = ("h.attn.bqkv", i, False, (3 * C,))
            m[p + "attn.c_proj.weight"] = ("h.attn.wo", i, True, (C, C))
            m[p + "attn.c_proj.bias"] = ("h.attn.bo", i, False, (C,))
            m[p + "ln_2.weight"] = ("h.ln2.w", i, False, (C,))
            m[p + "ln_2.bias"] = ("h.ln2.b", i, False, (C,))
            m[p + "mlp.c_fc.weight"] = ("h.mlp.w1", i, True, (C, F))
            m[p + "mlp.c_fc.bias"] = ("h.mlp.b1", i, False, (F,))
            m[p + "mlp.c_proj.weight"] = ("h.mlp.w2", i, True, (F, C))
            m[p + "mlp.c_proj.bias"] = ("h.mlp.b2", i, False, (C,))
        m["transformer.ln_f.weight"] = ("lnf.w", None, False, (C,))
        m["transformer.ln_f.bias"] = ("lnf.b", None, False, (C,))
    else:
        m["model.embed_tokens.weight"] = ("wte", None, False, (V, C))
        for i in range(d["L"]):
            p = f"model.layers.{i}."
            m[p + "input_layernorm.weight"] = ("h.attn_norm.w", i, False, (C,))
            m[p + "self_attn.q_proj.weight"] = ("h.attn.wq", i, False, (NH * HS, C))  # nn.Linear: (out, in)
            m[p + "self_attn.k_proj.weight"] = ("h.attn.wk", i, False, (NKV * HS, C))
            m[p + "self_attn.v_proj.weight"] = ("h.attn.wv", i, False, (NKV * HS, C))
            m[p + "self_attn.o_proj.weight"] = ("h.attn.wo", i, False, (C, NH * HS))
            m[p + "post_attention_layernorm.weight"] = ("h.mlp_norm.w", i, False, (C,))
            m[p + "mlp.gate_proj.weight"] = ("h.mlp.w_gate", i, False, (F, C))
            m[p + "mlp.up_proj.weight"] = ("h.mlp.w_up", i, False, (F, C))
            m[p + "mlp.down_proj.weight"] = ("h.mlp.w_down", i, False, (C, F))
        m["model.norm.weight"] = ("norm.w", None, False, (C,))
    if not d["tied"]:
        m["lm_head.weight"] = ("lm_head", None, False, (V, C))  # HF omits it when tied
    return m


def canonical_slice(table, w, canon, layer):
    t = next(x for x in table["tensors"] if x["name"] == canon)
    a = w[t["offset"]:t["offset"] + int(np.prod(t["shape"]))].reshape(t["shape"])
    return a if layer is None else a[layer]


def run(cmd, want_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != want_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}\nrc {p.returncode} (wanted {want_rc})\n{p.stdout}\n{p.stderr}")
    return p


def check_config(path, d, eps, theta):
    c = json.load(open(path))
    if d["arch"] == "gpt2":
        want = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=d["C"], n_layer=d["L"],
                    n_head=d["NH"], n_positions=d["T"], vocab_size=d["V"], layer_norm_epsilon=eps,
                    tie_word_embeddings=d["tied"], activation_function="gelu_new", torch_dtype="float32")
        assert c["n_inner"] is None or c["n_inner"] == d["F"], c["n_inner"]
    else:
        want = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=d["C"],
                    intermediate_size=d["F"], num_hidden_layers=d["L"], num_attention_heads=d["NH"],
                    num_key_value_heads=d["NKV"], head_dim=d["HS"], max_position_embeddings=d["T"],
                    rms_norm_eps=eps, rope_theta=theta, vocab_size=d["V"], tie_word_embeddings=d["tied"],
                    hidden_act="silu", torch_dtype="float32", rope_scaling=None)
    for k, v in want.items():
        assert c.get(k, "<absent>") == v and type(c.get(k)) == type(v), f"config.json {k}: {c.get(k)!r} != {v!r}"


def case_export(tool, work, over, eps=1e-5, theta=10000.0):
    d = dims_of(over)
    out = os.path.join(work, "export")
    run([tool, "export", out] + over)
    table = json.load(open(out + ".table.json"))
    w = formula(table["numel"])
    n, meta, tensors = st_ref.read(os.path.join(out, "model.safetensors"))
    assert n % 8 == 0, "header not padded to 8 bytes"
    assert meta == {"format": "pt"}, meta
    layout = hf_layout(d)
    assert set(tensors) == set(layout), f"names differ: {sorted(set(tensors) ^ set(layout))}"
    # All F32, so the reference order is by name: offsets increase with the name.
    by_name = sorted(tensors)
    assert [tensors[k][2] for k in by_name] == sorted(tensors[k][2] for k in by_name), "not in name order"
    total = 0
    for name, (canon, layer, tr, shape) in layout.items():
        dt, shp, _, _, arr = tensors[name]
        assert dt == "F32" and tuple(shp) == shape, f"{name}: {dt} {shp}, wanted F32 {shape}"
        ref = canonical_slice(table, w, canon, layer)
        ref = ref.T if tr else ref
        assert np.array_equal(arr, ref), f"{name}: values differ"
        total += arr.size
    assert total == table["numel"], "HF tensors do not hold every parameter once"
    if d["arch"] == "gpt2":  # HF's Conv1D computes x @ W + b; fmhpc's linear x @ W^T + b
        x = np.random.default_rng(0).standard_normal((3, d["C"])).astype(np.float32)
        hf = x @ tensors["transformer.h.1.attn.c_attn.weight"][4]
        ours = x @ canonical_slice(table, w, "h.attn.wqkv", 1).T
        assert np.array_equal(hf, ours)
    check_config(os.path.join(out, "config.json"), d, eps, theta)
    print(f"export {d['arch']} tied={d['tied']}: {len(tensors)} tensors, {total} values, config.json ok")


def hf_dir(work, d, dtype, config_extra=None, strip_prefix=False, buffers=False, shards=1, seed=0):
    """An HF-style model directory with random weights; returns fmhpc's expected arena (by HF name)."""
    rng = np.random.default_rng(seed)
    path = os.path.join(work, "hf_in")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    tensors, expect = {}, {}
    for name, (canon, layer, tr, shape) in hf_layout(d).items():
        a = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if strip_prefix and d["arch"] == "gpt2" and name.startswith("transformer."):
            name = name[len("transformer."):]  # GPT2Model checkpoints, e.g. the hub's "gpt2"
        tensors[name] = (dtype, a)
        expect[(canon, layer)] = st_ref.as_stored(a, dtype).T if tr else st_ref.as_stored(a, dtype)
    if buffers:  # non-parameter buffers older transformers saved
        for i in range(d["L"]):
            if d["arch"] == "gpt2":
                pre = "" if strip_prefix else "transformer."
                tensors[f"{pre}h.{i}.attn.bias"] = ("F32", np.tril(np.ones((1, 1, d["T"], d["T"]), np.float32)))
            else:
                tensors[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = ("F32", np.ones(d["HS"] // 2, np.float32))
    names = sorted(tensors)
    if shards == 1:
        st_ref.write(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"})
    else:
        wmap = {}
        for s in range(shards):
            part = names[s::shards]
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            st_ref.write(os.path.join(path, fn), {k: tensors[k] for k in part}, {"format": "pt"})
            wmap.update({k: fn for k in part})
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, open(os.path.join(path, "model.safetensors.index.json"), "w"))
    if d["arch"] == "gpt2":
        cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
               "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
               "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": d["T"], "n_embd": d["C"],
               "n_head": d["NH"], "n_layer": d["L"], "n_positions": d["T"], "resid_pdrop": 0.1,
               "summary_activation": None, "task_specific_params": {"text-generation": {"do_sample": True}},
               "vocab_size": d["V"], "transformers_version": "4.40.0"}
        if not d["tied"]:
            cfg["tie_word_embeddings"] = False
    else:
        cfg = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
               "hidden_size": d["C"], "initializer_range": 0.02, "intermediate_size": d["F"],
               "max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": d["NH"],
               "num_hidden_layers": d["L"], "num_key_value_heads": d["NKV"], "pretraining_tp": 1,
               "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000.0,
               "tie_word_embeddings": d["tied"], "torch_dtype": "bfloat16", "use_cache": True,
               "vocab_size": d["V"]}
    cfg.update(config_extra or {})
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"), indent=2)
    return path, expect


def case_import(tool, work, over, dtype, **kw):
    d = dims_of(over)
    path, expect = hf_dir(work, d, dtype, **kw)
    out = os.path.join(work, "imported.bin")
    run([tool, "import", path, out] + over)
    table = json.load(open(out + ".table.json"))
    w = np.fromfile(out, dtype="<f4")
    assert w.size == table["numel"]
    seen = np.zeros(w.size, bool)
    for (canon, layer), ref in expect.items():
        got = canonical_slice(table, w, canon, layer)
        assert got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32)), \
            f"{canon}[{layer}]: imported values differ"
        t = next(x for x in table["tensors"] if x["name"] == canon)
        per = got.size
        start = t["offset"] + (layer or 0) * per
        seen[start:start + per] = True
    assert seen.all(), "some parameters were not checked"
    print(f"import {d['arch']} {dtype} tied={d['tied']} {kw}: {w.size} values exact")


def case_import_error(tool, work, over, want, dtype="F32", corrupt=None, **kw):
    d = dims_of(over)
    path, _ = hf_dir(work, d, dtype, **kw)
    if corrupt:
        corrupt(path)
    p = run([tool, "import", path, os.path.join(work, "x.bin")] + over, want_rc=1)
    for s in want:
        assert s in p.stderr, f"message lacks {s!r}:\n{p.stderr}"
    print(f"rejected as expected:\n{p.stderr}")


def retype_weight(path):
    """Store one weight as I32: a dtype fmhpc does not take as a weight."""
    _, meta, t = st_ref.read(os.path.join(path, "model.safetensors"))
    tensors = {k: (v[0], v[4]) for k, v in t.items()}
    tensors["model.norm.weight"] = ("I32", tensors["model.norm.weight"][1].astype(np.int32))
    st_ref.write(os.path.join(path, "model.safetensors"), tensors, meta)


def lie_about_offsets(path):
    """Move one tensor's end past the data region."""
    f = os.path.join(path, "model.safetensors")
    raw = open(f, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    b, e = head["transformer.wpe.weight"]["data_offsets"]
    head["transformer.wpe.weight"]["data_offsets"] = [b + (1 << 20), e + (1 << 20)]
    text = json.dumps(head).encode()
    open(f, "wb").write(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def case_export_task(fmhpc, tool, work):
    """&run task='export' re-exports an HF directory given as &model init_from."""
    d = dims_of(LLAMA)
    path, expect = hf_dir(work, d, "BF16")
    out = os.path.join(work, "run")
    p = run([fmhpc] + LLAMA + ["run%task='export'", f"model%init_from='{path}'", f"run%out_dir='{out}'"])
    assert "export: wrote" in p.stdout, p.stdout
    table_run = os.path.join(work, "task.bin")
    run([tool, "import", os.path.join(out, "hf"), table_run] + LLAMA)
    table = json.load(open(table_run + ".table.json"))
    w = np.fromfile(table_run, dtype="<f4")
    for (canon, layer), ref in expect.items():
        assert np.array_equal(canonical_slice(table, w, canon, layer), ref), f"{canon}[{layer}]"
    p = run([fmhpc] + LLAMA + ["run%task='export'"], want_rc=2)
    assert "init_from" in p.stderr and "an fmhpc checkpoint (step_N.h5) or a Hugging Face model directory" in p.stderr, p.stderr
    print("export task: bf16 HF dir -> fp32 HF dir, values exact; no init_from is a clear error")


def main():
    case, tool, fmhpc, work = sys.argv[1:5]
    work = os.path.join(work, case)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases = {
        "export_gpt2_tied": lambda: case_export(tool, work, GPT2),
        "export_gpt2_untied": lambda: case_export(tool, work, GPT2 + UNTIE),
        "export_llama_gqa": lambda: case_export(tool, work, LLAMA, 1e-6, 500000.0),
        "export_llama_tied": lambda: case_export(tool, work, LLAMA + TIE, 1e-6, 500000.0),
        "import_gpt2_f32": lambda: case_import(tool, work, GPT2, "F32"),
        "import_gpt2_f16_base_model_names": lambda: case_import(tool, work, GPT2, "F16", strip_prefix=True, buffers=True),
        "import_gpt2_bf16_untied": lambda: case_import(tool, work, GPT2 + UNTIE, "BF16", buffers=True),
        "import_llama_bf16_sharded": lambda: case_import(tool, work, LLAMA, "BF16", shards=3, buffers=True),
        "import_llama_f16_tied": lambda: case_import(tool, work, LLAMA + TIE, "F16"),
        "import_config_mismatch": lambda: case_import_error(
            tool, work, LLAMA, ['config.json: "hidden_size" = 32 but the deck\'s &model d_model gives 16',
                                "hint: to match this model, set in the deck: &model d_model = 32 /"],
            config_extra={"hidden_size": 32}),
        "import_rope_scaling_unsupported": lambda: case_import_error(
            tool, work, LLAMA, ['"rope_scaling" asks for rope_type "llama3"'], config_extra={"rope_scaling": {"rope_type": "llama3"}}),
        "import_integer_weight": lambda: case_import_error(
            tool, work, LLAMA, ['tensor "model.norm.weight": dtype I32 is not a floating-point type'],
            corrupt=retype_weight),
        "import_offsets_lie": lambda: case_import_error(
            tool, work, GPT2, ['tensor "transformer.wpe.weight": data_offsets', "run past the data region"],
            corrupt=lie_about_offsets),
        "export_task": lambda: case_export_task(fmhpc, tool, work),
    }
    cases[case]()


if __name__ == "__main__":
    main()
