"""tests/ops/check_torch.py: the CPU model ops (dumped by ops_torch_dump)
against PyTorch in float64 with autograd: attention written from the
definition with torch ops (GQA by repeat_interleave, causal + document mask),
torch.nn.functional.layer_norm, HF LlamaRMSNorm's formula, HF rotate_half
RoPE, torch.nn.functional.cross_entropy. Tolerance: max |a - ref| <= 1e-5 *
max |ref| for every tensor. Usage: check_torch.py <dir>"""
import sys

import numpy as np
import torch

d = sys.argv[1]
torch.set_default_dtype(torch.float64)
fails = []


def load(name, dtype=np.float32, shape=None):
    a = np.fromfile(f"{d}/{name}.bin", dtype=dtype)
    t = torch.from_numpy(a.astype(np.float64) if dtype == np.float32 else a.astype(np.int64))
    return t.reshape(shape) if shape else t


def check(what, got, ref):
    got, ref = got.reshape(-1), ref.detach().reshape(-1)
    err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-300)
    print(f"  {what:28s} max err {err:.2e} (tol 1e-5)")
    if not err <= 1e-5:
        fails.append(what)


# attention
B, T, NH, NKV, HS = 2, 45, 4, 2, 8
ld = (NH + 2 * NKV) * HS
qkv = load("att_qkv", shape=(B, T, ld)).requires_grad_()
seg = load("att_seg", np.int32, (B, T))
dout = load("att_dout", shape=(B, T, NH, HS))
q = qkv[..., : NH * HS].reshape(B, T, NH, HS).transpose(1, 2)
k = qkv[..., NH * HS : (NH + NKV) * HS].reshape(B, T, NKV, HS).transpose(1, 2).repeat_interleave(NH // NKV, 1)
v = qkv[..., (NH + NKV) * HS :].reshape(B, T, NKV, HS).transpose(1, 2).repeat_interleave(NH // NKV, 1)
s = q @ k.transpose(-1, -2) / HS**0.5
causal = torch.ones(T, T, dtype=torch.bool).tril()
mask = causal[None] & (seg[:, :, None] == seg[:, None, :])
s = s.masked_fill(~mask[:, None], float("-inf"))
out = (s.softmax(-1) @ v).transpose(1, 2)
lse = s.logsumexp(-1)
(out * dout).sum().backward()
print("attention (GQA 4/2, 2 documents per row, fused qkv)")
check("out", load("att_out"), out)
check("lse", load("att_lse"), lse)
check("dq|dk|dv", load("att_dqkv"), qkv.grad)

# norms
N, C = 10, 24
x = load("norm_x", shape=(N, C)).requires_grad_()
w = load("norm_w").requires_grad_()
b = load("norm_b").requires_grad_()
dout = load("norm_dout", shape=(N, C))
y = torch.nn.functional.layer_norm(x, (C,), w, b, 1e-5)
(y * dout).sum().backward()
print("layernorm (torch.nn.functional.layer_norm)")
check("out", load("ln_out"), y)
check("dx", load("ln_dx"), x.grad)
check("dw", load("ln_dw"), w.grad)
check("db", load("ln_db"), b.grad)
x.grad = w.grad = None
y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))  # HF LlamaRMSNorm
(y * dout).sum().backward()
print("rmsnorm (HF LlamaRMSNorm)")
check("out", load("rms_out"), y)
check("dx", load("rms_dx"), x.grad)
check("dw", load("rms_dw"), w.grad)

# rope
H, HS = 3, 8
x = load("rope_x", shape=(N, H, HS))
pos = load("rope_pos", np.int32)
inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HS, 2) / HS))
emb = torch.cat([pos[:, None] * inv_freq] * 2, -1)[:, None]
rot = torch.cat([-x[..., HS // 2 :], x[..., : HS // 2]], -1)
print("rope (HF apply_rotary_pos_emb)")
check("out", load("rope_out"), x * emb.cos() + rot * emb.sin())

# cross-entropy
C, V = 16, 2500
x = load("xent_x", shape=(N, C)).requires_grad_()
w = load("xent_w", shape=(V, C)).requires_grad_()
tg = load("xent_tg", np.int32)
wt = load("xent_wt")
per = torch.nn.functional.cross_entropy(x @ w.T, tg.clamp(min=0), reduction="none")
loss = (per * wt).sum()
loss.backward()
got = np.fromfile(f"{d}/xent_loss.bin", dtype=np.float64)[0]
print("cross-entropy (torch.nn.functional.cross_entropy)")
check("loss", torch.tensor([got]), loss.reshape(1))
check("dx", load("xent_dx"), x.grad)
check("dw", load("xent_dw"), w.grad)

if fails:
    print("FAILED:", ", ".join(fails))
    sys.exit(1)
print("all ops match PyTorch")
