#!/usr/bin/python3
"""sophia_gnb.py RUN_DIR STORE_DIR: fmhpc's Sophia-G Hessian estimate against
torch (see sophia_gnb.sh). The run trained 2 steps with sophia_k = 1 and
checkpointed both. From step 1's checkpoint (weights W1, Hessian EMA h1) this
recomputes step 2's refresh, which fmhpc runs before step 2's update:

  labels  y[j, t] ~ softmax(logits(W1)[j, t]) by inverse CDF: u = Philox
          uniform (seed, purpose 5 = FM_RNG_HESSIAN, step index 1, index
          j*T + t, the step's slot j), the first v whose cumulative
          exp(z - max) exceeds u * sum (fmhpc: src/optim/sophia.c's per-step
          hook; the stream: include/fmhpc/rng.h);
  ghat    d/dW of sum_{j,t} mask[j,t] * CE(logits[j, t], y[j, t]) / B,
          B = the step's unmasked targets, by torch autograd in float64
          from the fp32 weights (ref_models.py's Llama, HF's definition);
  h2      = b2 * h1 + (1 - b2) * B * ghat^2    (Algorithm 2: hhat = B ghat ghat)

and compares it with step 2's checkpointed h: relative L2 error and the
largest error over max |ref|, per tensor, both within 2e-5 (ghat carries fp32
rounding of ~1e-6 relative; h doubles it). It also asserts that every label
is far from a CDF boundary (so fp32 logits draw the same label), that B
equals metrics.jsonl's token count, and that the data's own labels (the
empirical Fisher) would NOT pass: the check tells the estimators apart."""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "model"))
import paths_tool as P  # noqa: E402  (h5py, numpy, the deck parser, the sampler's reference)

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    P.missing("torch")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import ref_models as R  # noqa: E402

TOL = 2e-5  # twice model.torch_parity's gradient tolerance: h is quadratic in ghat
MARGIN = 1e-6  # |u - boundary| / sum: fp32 logits move the boundaries by ~1e-8


def uniform(seed, purpose, step, index):
    return (P.sampler_ref.philox(seed, purpose, step, index)[0] >> 8) * (1.0 / 16777216.0)


def ckpt(run, step, group):
    path = os.path.join(run, "ckpt", f"step_{step:08d}.h5")
    with h5py.File(path, "r") as f:
        return {k: np.asarray(v[...]) for k, v in f[group].items()}


def main(run, store):
    steps, deck = P.read_metrics(run)
    m, tr, o, seed = deck["model"], deck["train"], deck["optim"], deck["run"]["seed"]
    if o["name"] != "sophia" or o["sophia_k"] != 1 or len(steps) < 2:
        P.fail("the run must be Sophia with sophia_k = 1 and at least 2 steps")
    B, T, V, b2 = tr["global_batch"], m["seq_len"], m["vocab_size"], o["sophia_betas"][1]
    NH = m["n_head"]
    c = {"arch": "llama", "C": m["d_model"], "L": m["n_layer"], "NH": NH, "NKV": m["n_kv_head"] or NH,
         "HS": m["head_dim"] or m["d_model"] // NH, "F": m["d_ff"], "V": V, "T": T, "eps": m["norm_eps"],
         "theta": m["rope_theta"], "tied": m["tie_embeddings"]}
    w1, h1, h2 = ckpt(run, 1, "params"), ckpt(run, 1, "optim/h"), ckpt(run, 2, "optim/h")

    # Step 2's batch (1-based step 2: slots 4..7 of the sampler's order).
    ids = P.step_samples(P.json.load(open(os.path.join(store, "train.json")))["n_seq"], seed, B, 2)
    rows = {k: torch.as_tensor(P.store_rows(store, ids, k)[0].astype(np.int64))
            for k in ("tokens", "loss_mask", "position_ids", "segment_ids")}
    tok, tgt = rows["tokens"][:, :T], rows["tokens"][:, 1 : T + 1]
    mask, pos, seg = rows["loss_mask"][:, 1 : T + 1].double(), rows["position_ids"][:, :T], rows["segment_ids"][:, :T]
    ntok = int(mask.sum())
    if steps[1]["tokens"] != ntok:
        P.fail(f"step 2 trained {steps[1]['tokens']} tokens, its loss masks hold {ntok}")
    allowed = (torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & (seg[:, :, None] == seg[:, None, :]))[:, None]

    def model():
        mdl = R.LlamaForCausalLM(c)
        mdl.load(w1, c)
        return mdl.double()

    with torch.no_grad():
        z = model()(tok, pos, allowed)[0].numpy()  # (B, T, V) float64
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    cum = np.cumsum(e, axis=-1)
    total = cum[..., -1]
    u = np.array([[uniform(seed, 5, 1, j * T + t) for t in range(T)] for j in range(B)]) * total
    above = cum[..., : V - 1] > u[..., None]
    labels = np.where(above.any(-1), above.argmax(-1), V - 1)
    lo = np.where(labels > 0, np.take_along_axis(cum, np.maximum(labels - 1, 0)[..., None], -1)[..., 0], 0.0)
    hi = np.take_along_axis(cum, labels[..., None], -1)[..., 0]
    margin = float((np.minimum(u - lo, np.where(labels < V - 1, hi - u, np.inf)) / total).min())
    if margin < MARGIN:
        P.fail(f"a sampled label lies {margin:.1e} from a CDF boundary (< {MARGIN:g}): fp32 could draw another")
    agree = float((labels == tgt.numpy()).mean())
    print(f"labels: {B}x{T} drawn from the float64 softmax (V = {V}), every one at least {margin:.1e} from a CDF "
          f"boundary; {100 * agree:.1f}% equal the data's next token")

    def h_ref(y):
        mdl = model()
        logits = mdl(tok, pos, allowed)[0]
        per = F.cross_entropy(logits.reshape(-1, V), torch.as_tensor(y).reshape(-1), reduction="none")
        ((per * mask.reshape(-1)).sum() / ntok).backward()
        g = mdl.grads(c)
        return {k: b2 * h1[k].astype(np.float64) + (1 - b2) * (ntok * g[k] ** 2) for k in g}

    def worst(ref):
        out = (0.0, 0.0, "")
        for k, r in ref.items():
            l2, mx = R.errors(h2[k], r)
            if max(l2, mx) > max(out[:2]):
                out = (l2, mx, k)
        return out

    ref = h_ref(labels)
    if set(ref) != set(h2):
        P.fail(f"tensors differ: checkpoint {sorted(h2)} vs reference {sorted(ref)}")
    l2, mx, name = worst(ref)
    absmax = max(float(np.abs(h2[k] - ref[k]).max()) for k in ref)
    relmax = max(float((np.abs(h2[k] - ref[k]) / np.maximum(np.abs(ref[k]), 1e-30))[np.abs(ref[k]) >
                       1e-3 * np.abs(ref[k]).max()].max()) for k in ref)
    print(f"h after step 2's refresh vs torch float64 GNB: worst relative L2 {l2:.2e}, worst max err / max|ref| "
          f"{mx:.2e} ({name}); max abs diff {absmax:.2e}, max elementwise rel diff {relmax:.2e} (elements above "
          f"1e-3 of their tensor's max); tolerance {TOL:g} on the first two, {sum(v.size for v in ref.values())} values")
    if not (l2 <= TOL and mx <= TOL):
        P.fail("fmhpc's Hessian estimate differs from torch's")
    # The same comparison with the data's labels (the empirical Fisher) must fail.
    fl2, fmx, _ = worst(h_ref(tgt.numpy()))
    print(f"with the data's labels instead (empirical Fisher): worst relative L2 {fl2:.2e}, max/max {fmx:.2e}")
    if not max(fl2, fmx) > 100 * TOL:
        P.fail("the empirical Fisher passes too: the comparison cannot tell the estimators apart")
    if not math.isfinite(steps[1]["loss"]):
        P.fail("step 2's loss is not finite")
    print("PASS: sophia gnb")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2])
