#!/usr/bin/python3
"""torch_step.py ARCH C L NH NKV F V T B STEPS THREADS: the same training step as
bench_step.c in PyTorch (Debian's python3-torch 1.13, float32, same thread
count): forward + backward of one B x T micro-batch + torch.optim.AdamW. The
models are the torch.nn references the parity tests use (tests/model/
ref_models.py, written from Hugging Face's GPT-2 and Llama definitions).
Timed as bench_step.c: 3 warm-up steps, then at least STEPS timed steps and
more until FMHPC_BENCH_MIN_S seconds (default 4; at most 200); ms_step, tok_s
and cpu_s_step are the median step's (mean_ms and best_ms beside)."""
import os, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "model"))
import ref_models as R

arch = sys.argv[1]
C, L, NH, NKV, F, V, T, B, steps, threads = map(int, sys.argv[2:])
torch.set_num_threads(threads)
torch.manual_seed(1)
c = {"C": C, "L": L, "NH": NH, "NKV": NKV, "HS": C // NH, "F": F, "V": V, "T": T, "eps": 1e-5,
     "theta": 10000.0, "tied": arch == "gpt2"}
model = R.GPT2LMHeadModel(c) if arch == "gpt2" else R.LlamaForCausalLM(c)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
tok = torch.randint(0, V, (B, T))
tgt = torch.randint(0, V, (B, T))
pos = torch.arange(T).expand(B, T)
allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T).expand(B, 1, T, T)
times, cpu = [], []
min_s = float(os.environ.get("FMHPC_BENCH_MIN_S", "4"))
warm, s = 3, 0
while len(times) < 200 and (len(times) < steps or sum(times) < min_s):
    c0 = time.process_time()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    logits, _ = model(tok, pos, allowed)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), tgt.view(-1))
    loss.backward()
    opt.step()
    if s >= warm:
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    s += 1


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


med, mean = median(times), sum(times) / len(times)
print("torch ms_step=%.1f mean_ms=%.1f best_ms=%.1f tok_s=%.0f cpu_s_step=%.3f steps=%d (median step; %d warm-up)" %
      (1e3 * med, 1e3 * mean, 1e3 * min(times), B * T / med, median(cpu), len(times), warm))
