#!/usr/bin/python3
"""paths_tool.py: the Python side of regression/paths.sh (independent of the C
code: h5py reads the stores, tests/data/sampler_ref.py places samples in steps).

  paths_tool.py plant STORE_DIR SEED B STEP    overwrite the tokens of the B
      samples that step STEP (1-based) draws with uniformly random token ids
      (a batch of garbage at a known step); prints the sample ids
  paths_tool.py check RUN_DIR CASE ...         assert what a run must show;
      prints "ok: ..." lines, exits 1 on the first failed rule
"""
import json
import math
import re
import os
import sys



def missing(what):
    """An oracle that is not installed: a failure in CI (CI=true), a ctest skip
    (exit 77) on a developer's machine; never a pass."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: {what} is missing (CI=true: the oracle must run); install Debian's python3-{what}")
        sys.exit(1)
    print(f"SKIPPED: {what} is missing (install Debian's python3-{what})")
    sys.exit(77)


try:
    import h5py
    import numpy as np
except ImportError as e:
    missing(e.name)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
import sampler_ref  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_tool  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def step_samples(n_seq, seed, B, step):
    """Sample ids of the 1-based step's slots j = 0..B-1 (DESIGN section 7)."""
    out = []
    for j in range(B):
        k = (step - 1) * B + j
        out.append(sampler_ref.perm(seed, k // n_seq, n_seq, k % n_seq))
    return out


def store_rows(store_dir, ids, name):
    """Rows `ids` of dataset `name` of a one-shard h5 store (train.json)."""
    man = json.load(open(os.path.join(store_dir, "train.json")))
    if len(man["shards"]) != 1:
        fail(f"{store_dir}: expected one shard")
    with h5py.File(os.path.join(store_dir, man["shards"][0]["file"]), "r") as f:
        return np.stack([f[name][i] for i in ids]), man


def plant(store_dir, seed, B, step):
    man = json.load(open(os.path.join(store_dir, "train.json")))
    ids = step_samples(man["n_seq"], seed, B, step)
    rng = np.random.default_rng(12345)
    shard = man["shards"][0]
    with h5py.File(os.path.join(store_dir, shard["file"]), "r+") as f:
        tok = f["tokens"]
        for i in ids:
            tok[i] = rng.integers(0, man["vocab_size"], size=tok.shape[1], dtype=np.uint32)
        # The store verifies its manifest's per-dataset SHA-256 on open: this copy
        # is edited on purpose, so sign its tokens again, as prep would have
        # (ckpt_tool.checksum: the same sha256-blocks-v1 scheme, written independently).
        if "sha256" in shard:
            shard["sha256"]["tokens"] = ckpt_tool.checksum(tok[...], 0)
    with open(os.path.join(store_dir, "train.json"), "w") as out:
        json.dump(man, out, indent=1)
    print(f"planted garbage tokens in samples {ids} (step {step}); manifest re-signed")


def parse_deck(text):
    """The resolved deck's text (one key per line) as {group: {key: value}}."""
    deck, group = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*&(\w+)", line)
        if m:
            group = deck.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s*(\w+)\s*=\s*(?:'([^']*)'|([^!]*))", line)
        if m and group is not None:
            v = m.group(2)
            if v is None:  # numbers and logicals, one or a comma-separated list
                vals = [{".true.": True, ".false.": False}.get(x.lower(), x) for x in m.group(3).replace(",", " ").split()]
                vals = [x if not isinstance(x, str) else float(x) if re.search(r"[.eEdD]", x) else int(x) for x in vals]
                v = vals[0] if len(vals) == 1 else vals
            group[m.group(1)] = v
    return deck


def read_metrics(run):
    steps, deck = [], None
    for line in open(os.path.join(run, "metrics.jsonl")):
        r = json.loads(line)
        if r["record"] == "step":
            steps.append(r)
        elif r["record"] == "deck":
            deck = parse_deck(r["deck"])
    if not steps:
        fail(f"{run}/metrics.jsonl has no step records")
    return steps, deck


def torch_loss(hf_dir, store, ids, T):
    """(mean loss over the masked targets, over all targets) of samples `ids`
    under the GPT-2 HF export in hf_dir, in float64 with ref_models.py."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model"))
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        missing("torch")
    import ref_models as R

    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    C, NH = cfg["n_embd"], cfg["n_head"]
    c = {"arch": "gpt2", "C": C, "L": cfg["n_layer"], "NH": NH, "NKV": NH, "HS": C // NH,
         "F": cfg.get("n_inner") or 4 * C, "V": cfg["vocab_size"], "T": cfg["n_positions"],
         "eps": cfg["layer_norm_epsilon"], "tied": cfg["tie_word_embeddings"]}
    model = R.GPT2LMHeadModel(c)
    R.load_hf(model, "gpt2", R.read_safetensors(os.path.join(hf_dir, "model.safetensors")))
    model = model.double()
    rows = {k: torch.as_tensor(store_rows(store, ids, k)[0].astype(np.int64))
            for k in ("tokens", "loss_mask", "position_ids", "segment_ids")}
    tok, tgt = rows["tokens"][:, :T], rows["tokens"][:, 1 : T + 1]
    mask, pos, seg = rows["loss_mask"][:, 1 : T + 1].double(), rows["position_ids"][:, :T], rows["segment_ids"][:, :T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = (causal[None] & (seg[:, :, None] == seg[:, None, :]))[:, None]
    with torch.no_grad():
        logits, _ = model(tok, pos, allowed)
        per = F.cross_entropy(logits.reshape(-1, c["V"]), tgt.reshape(-1), reduction="none").view_as(mask)
    return float((per * mask).sum() / mask.sum()), float(per.mean())


def lr_ref(t, lr, W, T, f, kind, decay_fraction):
    """optim.h's schedules, written again from their formulas."""
    if t <= W:
        return lr * t / W
    p = min(1.0, (t - W) / (T - W))
    if kind == "cosine":
        return lr * (f + (1 - f) * 0.5 * (1 + math.cos(math.pi * p)))
    if kind == "linear":
        return lr * (f + (1 - f) * (1 - p))
    if kind == "wsd":
        D = min(max(round(decay_fraction * T), 1), T - W)
        return lr if t <= T - D else lr * (f + (1 - f) * (T - t) / D)
    return lr


def check(run, case, args):
    steps, deck = read_metrics(run)
    summ = json.load(open(os.path.join(run, "summary.json")))
    o, tr = deck["optim"], deck["train"]
    n = tr["steps"]
    if len(steps) != n or [r["step"] for r in steps] != list(range(1, n + 1)):
        fail(f"{run}: {len(steps)} step records for {n} steps")
    losses = [r["loss"] for r in steps]
    if not all(math.isfinite(x) for x in losses):
        fail(f"non-finite loss: {losses}")
    # The schedule: every step's lr from the formula (metrics print 10 digits).
    worst = 0.0
    for r in steps:
        ref = lr_ref(r["step"], o["lr"], o["warmup_steps"], n, o["min_lr_ratio"], o["schedule"], o["decay_fraction"])
        worst = max(worst, abs(r["lr"] - ref) / ref)
    if worst > 2e-9:
        fail(f"lr differs from the {o['schedule']} formula by {worst:.2e} (relative)")
    print(f"ok: {n} lr values follow {o['schedule']} (warmup {o['warmup_steps']}, min_lr_ratio {o['min_lr_ratio']}) "
          f"within {worst:.1e}")
    skipped = [r["step"] for r in steps if r["skipped"]]
    if case == "spike":
        # The rule of optim.h, again: z of each step's loss against the last
        # `window` accepted losses (sample std); a spike when z > spike_z.
        at, win, zmax = int(args[0]), tr["spike_window"], tr["spike_z"]
        if skipped != [at] or summ["skipped"] != 1:
            fail(f"skipped steps {skipped} (summary: {summ['skipped']}), expected exactly [{at}]")
        acc, zs = [], {}
        for r, x in zip(steps, losses):
            if len(acc) >= win:
                w = acc[-win:]
                mean = sum(w) / win
                sd = math.sqrt(sum((v - mean) ** 2 for v in w) / (win - 1))
                zs[r["step"]] = (x - mean) / sd
                if (zs[r["step"]] > zmax) != r["skipped"]:
                    fail(f"step {r['step']}: z = {zs[r['step']]:.3f} against spike_z {zmax}, skipped {r['skipped']}")
            if not r["skipped"]:
                acc.append(x)
        if at not in zs:
            fail(f"the window ({win}) is not full at step {at}: nothing was judged")
        before = losses[at - 1 - win : at - 1]
        if not losses[at - 1] > max(before) + 0.3:
            fail(f"the planted step's loss {losses[at - 1]:.4f} is no spike over the steps before ({before})")
        print(f"ok: step {at} (a garbage batch: loss {losses[at - 1]:.4f}, z = {zs[at]:.2f} > {zmax}) skipped and "
              f"counted (metrics and summary.json: 1); steps {min(zs)}..{n} judged, the rest z <= {zmax} "
              f"(max {max(v for k, v in zs.items() if k != at):.2f})")
        losses = [x for r, x in zip(steps, losses) if r["step"] != at]
    elif skipped or summ["skipped"]:
        fail(f"steps {skipped} skipped (summary {summ['skipped']})")
    # Loss falls: the mean of the last three below the first by a margin.
    tail = sum(losses[-3:]) / 3
    if not tail < losses[0] - float(os.environ.get("PATHS_MIN_DROP", "0.2")):
        fail(f"loss does not fall: first {losses[0]:.4f}, mean of the last three {tail:.4f}")
    print(f"ok: loss falls from {losses[0]:.4f} to {tail:.4f} (mean of the last three)")
    if case == "sft":
        store, seed, B = args[0], deck["run"]["seed"], tr["global_batch"]
        T = deck["model"]["seq_len"]
        total = 0
        for r in steps:
            ids = step_samples(json.load(open(os.path.join(store, "train.json")))["n_seq"], seed, B, r["step"])
            mask, _ = store_rows(store, ids, "loss_mask")
            want = int(mask[:, 1 : T + 1].sum())  # targets are tokens 1..T of each row
            if r["tokens"] != want:
                fail(f"step {r['step']}: trained tokens {r['tokens']}, the loss masks of samples {ids} hold {want}")
            total += want
        # Step 1's loss from the imported weights, in torch float64 (ref_models.py):
        # the mean over the masked targets is fmhpc's; over all targets it is not.
        ids = step_samples(json.load(open(os.path.join(store, "train.json")))["n_seq"], seed, B, 1)
        masked, everything = torch_loss(args[1], store, ids, T)
        rel = abs(steps[0]["loss"] - masked) / masked
        if rel > 1e-5:
            fail(f"step 1 loss {steps[0]['loss']:.9f}, torch over the masked targets {masked:.9f} (rel {rel:.1e})")
        if abs(everything - masked) < 100 * abs(steps[0]["loss"] - masked):
            fail(f"the loss over all targets ({everything:.6f}) is as close as the masked one: the masks show nowhere")
        print(f"ok: step 1 loss {steps[0]['loss']:.9f} = torch float64 over the masked targets {masked:.9f} "
              f"(rel {rel:.1e}, tolerance 1e-5); over every target it would be {everything:.6f}")
        if not total < n * B * T:
            fail(f"the masks trained every token ({total} of {n * B * T}): no masking to check")
        print(f"ok: trained tokens per step equal the loss-mask counts from h5py on every step "
              f"({total} of {n * B * T} tokens, {100.0 * total / (n * B * T):.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "plant":
        plant(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        print(__doc__)
        sys.exit(2)
