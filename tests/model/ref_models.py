#!/usr/bin/env python3
"""ref_models.py: GPT-2 and Llama written with torch.nn from the Hugging Face
modeling definitions (transformers' modeling_gpt2.py and modeling_llama.py,
eager attention), loaded with fmhpc's weights, and compared with fmhpc.

    ref_models.py <model_dump binary> <work dir> <gpt2|llama> <tied 0|1>

runs model_dump (tests/model/model_dump.c: one forward + backward of a tiny
model on a micro-batch of two sequences holding two documents each, with
masked targets, and the weights exported as a Hugging Face model), loads the
exported model.safetensors by HF names into the reference, and runs the same
batch through
  * the reference in float32: logits, loss and every gradient must agree
    within 1e-5: per tensor, relative L2 error |a - r| / |r| <= 1e-5 and the
    largest elementwise error <= 1e-5 * max |r| (elementwise relative error
    is meaningless for elements near zero, and the two sides sum in different
    orders);
  * the reference in float64 (autograd in float64 from the same fp32 weights):
    the same measures, within 1e-5 -- fmhpc's whole error against exact
    arithmetic, which must be fp32 rounding only;
and checks fmhpc's per-layer residual-stream variance (&log act_stats)
against the float64 hidden states at 1e-6 relative. Prints the worst numbers.
Exit 0 pass, 1 fail; without torch 77 (skipped), or 1 in CI (tests/oracle.py).
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import oracle  # noqa: E402

np = oracle.need_module("numpy", "python3-numpy")
torch = oracle.need_module("torch", "python3-torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def read_safetensors(path):
    """A safetensors file (8-byte header length, JSON header, raw data) as numpy arrays."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt[t["dtype"]]).reshape(t["shape"])
    return out


# HF state-dict names -> this file's module names (one nn.Module per HF
# module, flattened one level).
HF_RENAMES = {
    "gpt2": [("transformer.", ""), ("attn.c_attn", "c_attn"), ("attn.c_proj", "attn_c_proj"), ("mlp.c_fc", "c_fc"),
             ("mlp.c_proj", "mlp_c_proj")],
    "llama": [("model.", ""), ("self_attn.", ""), ("mlp.", "")],
}


def load_hf(model, arch, hf):
    sd = {}
    for name, v in hf.items():
        for a, b in HF_RENAMES[arch]:
            name = name.replace(a, b)
        sd[name] = v
    load_exactly(model, sd)


def load_exactly(model, sd):
    """Every parameter from fmhpc's weights (a tied lm_head is wte itself)."""
    r = model.load_state_dict({k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    assert not r.unexpected_keys and set(r.missing_keys) <= {"lm_head.weight"}, r
    assert "lm_head.weight" in sd or model.lm_head.weight is next(iter(model.children())).weight


# ---- GPT-2 (modeling_gpt2.py) ---------------------------------------------------


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer with weight stored (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


def gelu_new(x):
    """HF NewGELUActivation: the tanh approximation GPT-2 uses."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def eager_attention(q, k, v, allowed):
    """q (B, NH, T, HS), k and v (B, NH, T, HS); allowed (B, 1, T, T)."""
    w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(v.size(-1))
    w = w.masked_fill(~allowed, torch.finfo(w.dtype).min)
    return torch.matmul(F.softmax(w, dim=-1), v)


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, F_ = c["C"], c["F"]
        self.nh, self.hs = c["NH"], c["HS"]
        self.ln_1 = nn.LayerNorm(C, eps=c["eps"])
        self.c_attn = Conv1D(3 * C, C)
        self.attn_c_proj = Conv1D(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=c["eps"])
        self.c_fc = Conv1D(F_, C)
        self.mlp_c_proj = Conv1D(C, F_)

    def heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.nh, self.hs).permute(0, 2, 1, 3)

    def forward(self, x, allowed):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        a = eager_attention(self.heads(q), self.heads(k), self.heads(v), allowed)
        x = x + self.attn_c_proj(a.permute(0, 2, 1, 3).reshape(B, T, C))
        return x + self.mlp_c_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["V"], c["C"])
        self.wpe = nn.Embedding(c["T"], c["C"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["L"])])
        self.ln_f = nn.LayerNorm(c["C"], eps=c["eps"])
        self.lm_head = nn.Linear(c["C"], c["V"], bias=False)
        if c["tied"]:
            self.lm_head.weight = self.wte.weight

    def forward(self, tokens, pos, allowed):
        x = self.wte(tokens) + self.wpe(pos)
        hidden = []
        for blk in self.h:
            x = blk(x, allowed)
            hidden.append(x)
        return self.lm_head(self.ln_f(x)), hidden

    def load(self, w, c):
        """fmhpc canonical tensors (Linear (out, in)) -> HF layout (Conv1D (in, out))."""
        sd = {"wte.weight": w["wte"], "wpe.weight": w["wpe"], "ln_f.weight": w["lnf.w"], "ln_f.bias": w["lnf.b"]}
        if not c["tied"]:
            sd["lm_head.weight"] = w["lm_head"]
        for l in range(c["L"]):
            p = f"h.{l}."
            sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = w["h.ln1.w"][l], w["h.ln1.b"][l]
            sd[p + "c_attn.weight"], sd[p + "c_attn.bias"] = w["h.attn.wqkv"][l].T, w["h.attn.bqkv"][l]
            sd[p + "attn_c_proj.weight"], sd[p + "attn_c_proj.bias"] = w["h.attn.wo"][l].T, w["h.attn.bo"][l]
            sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = w["h.ln2.w"][l], w["h.ln2.b"][l]
            sd[p + "c_fc.weight"], sd[p + "c_fc.bias"] = w["h.mlp.w1"][l].T, w["h.mlp.b1"][l]
            sd[p + "mlp_c_proj.weight"], sd[p + "mlp_c_proj.bias"] = w["h.mlp.w2"][l].T, w["h.mlp.b2"][l]
        load_exactly(self, sd)

    def grads(self, c):
        """Gradients in fmhpc's canonical layout."""
        g = lambda t: t.grad.detach().double().numpy()
        st = lambda f: np.stack([f(b) for b in self.h])
        out = {
            "wte": g(self.wte.weight), "wpe": g(self.wpe.weight),
            "h.ln1.w": st(lambda b: g(b.ln_1.weight)), "h.ln1.b": st(lambda b: g(b.ln_1.bias)),
            "h.attn.wqkv": st(lambda b: g(b.c_attn.weight).T), "h.attn.bqkv": st(lambda b: g(b.c_attn.bias)),
            "h.attn.wo": st(lambda b: g(b.attn_c_proj.weight).T), "h.attn.bo": st(lambda b: g(b.attn_c_proj.bias)),
            "h.ln2.w": st(lambda b: g(b.ln_2.weight)), "h.ln2.b": st(lambda b: g(b.ln_2.bias)),
            "h.mlp.w1": st(lambda b: g(b.c_fc.weight).T), "h.mlp.b1": st(lambda b: g(b.c_fc.bias)),
            "h.mlp.w2": st(lambda b: g(b.mlp_c_proj.weight).T), "h.mlp.b2": st(lambda b: g(b.mlp_c_proj.bias)),
            "lnf.w": g(self.ln_f.weight), "lnf.b": g(self.ln_f.bias),
        }
        if not c["tied"]:
            out["lm_head"] = g(self.lm_head.weight)
        return out


# ---- Llama (modeling_llama.py) ------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(pos, HS, theta, dtype):
    """LlamaRotaryEmbedding with explicit position ids: (B, 1, T, HS) each."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    freqs = pos.to(torch.float64)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def repeat_kv(x, n_rep):
    B, nkv, T, HS = x.shape
    return x if n_rep == 1 else x[:, :, None].expand(B, nkv, n_rep, T, HS).reshape(B, nkv * n_rep, T, HS)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, F_ = c["C"], c["F"]
        self.nh, self.nkv, self.hs = c["NH"], c["NKV"], c["HS"]
        self.input_layernorm = LlamaRMSNorm(C, c["eps"])
        self.q_proj = nn.Linear(C, self.nh * self.hs, bias=False)
        self.k_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hs, C, bias=False)
        self.post_attention_layernorm = LlamaRMSNorm(C, c["eps"])
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin, allowed):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.nh, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        a = eager_attention(q, repeat_kv(k, rep), repeat_kv(v, rep), allowed)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, self.nh * self.hs))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["V"], c["C"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["L"])])
        self.norm = LlamaRMSNorm(c["C"], c["eps"])
        self.lm_head = nn.Linear(c["C"], c["V"], bias=False)
        if c["tied"]:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, tokens, pos, allowed):
        x = self.embed_tokens(tokens)
        cos, sin = rope_cos_sin(pos, self.c["HS"], self.c["theta"], x.dtype)
        hidden = []
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
            hidden.append(x)
        return self.lm_head(self.norm(x)), hidden

    def load(self, w, c):
        sd = {"embed_tokens.weight": w["wte"], "norm.weight": w["norm.w"]}
        if not c["tied"]:
            sd["lm_head.weight"] = w["lm_head"]
        names = [("input_layernorm.weight", "h.attn_norm.w"), ("q_proj.weight", "h.attn.wq"),
                 ("k_proj.weight", "h.attn.wk"), ("v_proj.weight", "h.attn.wv"), ("o_proj.weight", "h.attn.wo"),
                 ("post_attention_layernorm.weight", "h.mlp_norm.w"), ("gate_proj.weight", "h.mlp.w_gate"),
                 ("up_proj.weight", "h.mlp.w_up"), ("down_proj.weight", "h.mlp.w_down")]
        for l in range(c["L"]):
            for hf, fm in names:
                sd[f"layers.{l}.{hf}"] = w[fm][l]
        load_exactly(self, sd)

    def grads(self, c):
        g = lambda t: t.grad.detach().double().numpy()
        st = lambda f: np.stack([f(b) for b in self.layers])
        out = {
            "wte": g(self.embed_tokens.weight), "norm.w": g(self.norm.weight),
            "h.attn_norm.w": st(lambda b: g(b.input_layernorm.weight)), "h.attn.wq": st(lambda b: g(b.q_proj.weight)),
            "h.attn.wk": st(lambda b: g(b.k_proj.weight)), "h.attn.wv": st(lambda b: g(b.v_proj.weight)),
            "h.attn.wo": st(lambda b: g(b.o_proj.weight)),
            "h.mlp_norm.w": st(lambda b: g(b.post_attention_layernorm.weight)),
            "h.mlp.w_gate": st(lambda b: g(b.gate_proj.weight)), "h.mlp.w_up": st(lambda b: g(b.up_proj.weight)),
            "h.mlp.w_down": st(lambda b: g(b.down_proj.weight)),
        }
        if not c["tied"]:
            out["lm_head"] = g(self.lm_head.weight)
        return out


# ---- the comparison ---------------------------------------------------------------


def run_reference(c, weights, batch, dtype, hf=None):
    """weights: fmhpc's canonical tensors, or with hf, HF's exported ones."""
    torch.manual_seed(0)
    model = (GPT2LMHeadModel if c["arch"] == "gpt2" else LlamaForCausalLM)(c)
    if hf is not None:
        load_hf(model, c["arch"], hf)
    else:
        model.load(weights, c)
    model = model.to(dtype)
    B, T = c["B"], c["T"]
    tok, tgt, pos, seg, wt = (torch.as_tensor(batch[k]).view(B, T) for k in ("tokens", "targets", "pos", "seg", "weight"))
    tok, tgt, pos = tok.long(), tgt.long(), pos.long()
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = (causal[None] & (seg[:, :, None] == seg[:, None, :]))[:, None]  # (B, 1, T, T): document mask
    logits, hidden = model(tok, pos, allowed)
    per_token = F.cross_entropy(logits.view(B * T, -1), tgt.view(-1), reduction="none")
    loss = (per_token * wt.view(-1).to(dtype)).sum()
    loss.backward()
    var = [float((h.double() ** 2).mean() - h.double().mean() ** 2) for h in hidden]
    return logits.detach().double().numpy().reshape(B * T, -1), float(loss), model.grads(c), var


def errors(a, r):
    """(relative L2 error, max elementwise error / max |r|)."""
    a, r = np.asarray(a, np.float64).ravel(), np.asarray(r, np.float64).ravel()
    scale = np.abs(r).max()
    l2 = np.linalg.norm(a - r) / max(np.linalg.norm(r), 1e-300)
    return l2, (np.abs(a - r).max() / scale if scale > 0 else np.abs(a - r).max())


def compare(tag, fm, ref, tol):
    worst, ok = (0.0, 0.0, ""), True
    for name in ref:
        l2, mx = errors(fm[name], ref[name])
        if max(l2, mx) > max(worst[0], worst[1]):
            worst = (l2, mx, name)
        if not (l2 <= tol and mx <= tol):
            print(f"FAIL {tag}: {name}: relative L2 {l2:.3e}, max err / max |ref| {mx:.3e} (tolerance {tol:g})")
            ok = False
    print(f"{tag}: worst relative L2 {worst[0]:.3e}, worst max err / max|ref| {worst[1]:.3e} ({worst[2]}), "
          f"tolerance {tol:g}")
    return ok


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    dump, work, arch, tied = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    out = os.path.join(work, f"{arch}_tied{tied}")
    os.makedirs(out, exist_ok=True)
    subprocess.run([dump, out, arch, tied], check=True)
    with open(os.path.join(out, "index.json")) as f:
        c = json.load(f)
    rd = lambda name, dt: np.fromfile(os.path.join(out, name), dtype=dt)
    flat_p, flat_g = rd("params.f32", "<f4"), rd("grads.f32", "<f4")
    tab = {p["name"]: p for p in c["params"]}
    view = lambda flat, p: flat[p["offset"] : p["offset"] + int(np.prod(p["shape"]))].reshape(p["shape"])
    weights = {n: view(flat_p, p) for n, p in tab.items()}
    fm_grads = {n: view(flat_g, p) for n, p in tab.items()}
    batch = {"tokens": rd("tokens.i32", "<i4"), "targets": rd("targets.i32", "<i4"), "pos": rd("pos.i32", "<i4"),
             "seg": rd("seg.i32", "<i4"), "weight": rd("weight.f32", "<f4")}
    fm_logits = rd("logits.f32", "<f4").reshape(c["B"] * c["T"], c["V"])
    assert set(tab) == set(run_reference(c, weights, batch, torch.float32)[2]), "parameter names differ"
    hf = read_safetensors(os.path.join(out, "hf", "model.safetensors"))

    ok = True
    print(f"== {arch} (tied {tied}): C={c['C']} L={c['L']} NH={c['NH']} NKV={c['NKV']} V={c['V']} "
          f"B={c['B']} T={c['T']}, two documents per row, masked targets")
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-5)):
        name = "torch float32" if dtype == torch.float32 else "torch float64"
        logits, loss, grads, var = run_reference(c, weights, batch, dtype, hf)
        lrel = abs(c["loss"] - loss) / abs(loss)
        print(f"{name}: loss fmhpc {c['loss']:.9f} ref {loss:.9f} (rel {lrel:.2e})")
        ok &= lrel <= tol
        ok &= compare(f"{name} logits", {"logits": fm_logits}, {"logits": logits}, tol)
        ok &= compare(f"{name} gradients", fm_grads, grads, tol)
        if dtype == torch.float64:
            vrel = max(abs(a - b) / abs(b) for a, b in zip(c["act_var"], var))
            print(f"act_stats: residual variance per layer fmhpc {c['act_var']} ref {var} (worst rel {vrel:.2e})")
            ok &= vrel <= 1e-6
    # The canonical weights give the same float32 results bit for bit as the
    # HF export (the export is a relayout, nothing more).
    l_hf, loss_hf, g_hf, _ = run_reference(c, weights, batch, torch.float32, hf)
    l_fm, loss_fm, g_fm, _ = run_reference(c, weights, batch, torch.float32)
    same = loss_hf == loss_fm and np.array_equal(l_hf, l_fm) and all(np.array_equal(g_hf[k], g_fm[k]) for k in g_fm)
    print(f"HF export (hf/model.safetensors) vs canonical weights in the reference: {'identical' if same else 'DIFFER'}")
    ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
