#!/usr/bin/env python3
"""check_plan.py FMHPC INPUTS: `fmhpc --check`'s per-rank memory and
per-step communication for dp x tp against a second derivation written here
by hand from the architecture (Megatron layout, ZeRO-1 over dp, the exact
int64 reduction's buffers), for small and 7B models, and its fit suggestion
against a brute-force search over (tp, micro-batch, recompute).

Every figure is parsed from the exact byte column ("1,234 B") and must be
equal, not close. The run fails when a row is missing, a number differs, or
fewer figures than expected were compared.

With FMHPC_EMU (the fmhpc_emu build: its backend 'cuda' is the emulated
device) the plan of a CUDA deck is checked too: flash attention's scratch and
the cuBLASLt workspace in the total, and the fit against the device's own
memory (FMHPC_EMU_DEVICE_MEM, as cudaMemGetInfo reports it) with its headroom."""
import os
import re
import subprocess
import sys

FMHPC, INPUTS = sys.argv[1], sys.argv[2]
FMHPC_EMU = sys.argv[3] if len(sys.argv) > 3 else None
BLOCK = 65536  # FM_DIST_BLOCK: ZeRO shards and reduction scales are whole blocks
XENT_RS = 512  # rows of logits the CPU cross-entropy op holds at once (its scratch)
GIB = 1 << 30


def cdiv(a, b):
    return -(-a // b)


# ---- the models, written out from their architecture ------------------------
def param_tensors(m):
    """(numel, split) of every stored tensor; split: None, 'col', 'row', 'vocab'."""
    C, L, NH, NKV, HS, F, V, T = (m[k] for k in ("C", "L", "NH", "NKV", "HS", "F", "V", "T"))
    if m["arch"] == "gpt2":
        t = [(V * C, "vocab"), (T * C, None)]
        t += [(L * C, None)] * 2  # ln1 w, b
        t += [(L * 3 * C * C, "col"), (L * 3 * C, "col"), (L * C * C, "row"), (L * C, None)]  # attention
        t += [(L * C, None)] * 2  # ln2 w, b
        t += [(L * F * C, "col"), (L * F, "col"), (L * C * F, "row"), (L * C, None)]  # MLP
        t += [(C, None)] * 2  # final LayerNorm
    else:
        Q, KV = NH * HS, NKV * HS
        t = [(V * C, "vocab"), (L * C, None), (L * Q * C, "col"), (L * KV * C, "col"), (L * KV * C, "col")]
        t += [(L * C * Q, "row"), (L * C, None), (L * F * C, "col"), (L * F * C, "col"), (L * C * F, "row")]
        t += [(C, None)]
    if not m["tied"]:
        t.append((V * C, "vocab"))
    return t


def act_elems(m, tp, b, recompute):
    """Floats one tp rank allocates for activations: its heads, 1/tp of F and V."""
    C, L, T = m["C"], m["L"], m["T"]
    NH, NKV, HS = m["NH"] // tp, m["NKV"] // tp, m["HS"]
    F, V = cdiv(m["F"], tp), cdiv(m["V"], tp)
    BT, Q, KV = b * T, NH * HS, NKV * HS
    per_layer_copies = 1 if recompute else L
    if m["arch"] == "gpt2":
        layer = (BT * C + 2 * BT) + 3 * BT * Q + BT * Q + b * NH * T + BT * C + (BT * C + 2 * BT) + 2 * BT * F
        once = BT * C + 2 * BT
        grad = 3 * BT * C + BT * Q + 3 * BT * Q + BT * F
    else:
        layer = (BT * C + BT) + BT * Q + 2 * BT * KV + BT * Q + b * NH * T + BT * C + (BT * C + BT) + 3 * BT * F
        once = BT * C + BT
        grad = 3 * BT * C + 2 * BT * Q + 2 * BT * KV + 2 * BT * F
    resid = (L + 1) * BT * C
    N = BT
    extra = N + b * C + b * V + (min(N, XENT_RS) * V + 3 * N)  # token weights, logits rows, xent scratch
    return resid + per_layer_copies * layer + once + grad + extra


def zero_shards(n, dp):
    nb = cdiv(n, BLOCK)
    out = []
    for r in range(dp):
        lo, hi = min(nb * r // dp * BLOCK, n), min(nb * (r + 1) // dp * BLOCK, n)
        out.append(hi - lo)
    return out


def plan(m, run, tp, b, recompute):
    """Memory (bytes) and per-step bytes sent, for one rank."""
    dp = run["world"] // tp
    n = sum(x if s is None else cdiv(x, tp) for x, s in param_tensors(m))
    S = max(1, max(zero_shards(n, dp)))
    cb = 2 if run["bf16"] else 4
    mine = S if run["zero"] else n
    r = {"n": n, "S": S}
    r["weights (compute copy)"] = n * cb
    r["fp32 master"] = mine * 4 if run["bf16"] else None
    r["gradients"] = n * 4
    # exact: int64 accumulator + shard; fp32 staging too where one MPI call cannot carry the all-gather
    r["reduction buffers"] = (dp * S + S) * (12 if n > 2**31 - 1 else 8) if run["exact"] else dp * S * 8
    r["optimizer state"] = mine * 4 * run["nstate"]
    r["activations"] = act_elems(m, tp, b, False) * cb
    r["activations (recompute)"] = act_elems(m, tp, b, True) * cb
    N, C, T = b * m["T"], m["C"], m["T"]
    NHl, NKVl, HS = m["NH"] // tp, m["NKV"] // tp, m["HS"]
    if run.get("device"):
        # attention_flash.cu's grow-once buffers at c=bf16, head size 64/128: bf16 q, dout (N x NH*HS),
        # k, v (N x NKV*HS); fp32 D (b*NH*T); and gemm.cu's fixed 32 MiB cuBLASLt workspace
        if run["bf16"] and HS in (64, 128):
            r["attention scratch"] = (2 * N * NHl * HS + 2 * N * NKVl * HS) * 2 + b * NHl * T * 4
        r["cuBLASLt workspace"] = 32 << 20
        # train.c's device gradient buffers: the summed shard, and with zero = 0 the full gradient
        # (tp = 1: under tp > 1 the update runs on the host)
        r["gradient shard (device)"] = S * 4 + (0 if run["zero"] else n * 4) if tp == 1 else None
    elif tp > 1:
        # model_run.c's host scratch: the ordered tp sums (tp x min(N*C, 2^20) floats) and the
        # vocab-parallel cross-entropy (a logits tile of N x min(V/tp, 2048), 3N doubles mine and
        # gathered, this rank's dx part, the dx sum's scratch)
        sums = tp * min(N * C, 1 << 20)
        tile = (N * min(cdiv(m["V"], tp), 2048) + 1) // 2 * 2
        r["tp scratch"] = (sums + tile + N * 6 * (1 + tp) + N * C + sums) * 4
    fixed = sum(r.get(k) or 0 for k in ("weights (compute copy)", "fp32 master", "gradients", "reduction buffers",
                                        "optimizer state", "attention scratch", "cuBLASLt workspace", "tp scratch",
                                        "gradient shard (device)"))
    r["total"] = fixed + r["activations (recompute)" if recompute else "activations"]
    mb_rank = run["B"] // b // dp
    # Megatron: per layer 2 sums forward, 2 backward (+2 when recompute repeats the forward),
    # plus the embedding's forward and the LM head's input gradient; each sum is an all-gather.
    sums = 4 * m["L"] + 2 + (2 * m["L"] if recompute else 0)
    r["activation sums"] = (tp - 1) * 4 * b * m["T"] * m["C"] * sums * mb_rank
    r["vocab-parallel xent"] = (tp - 1) * 8 * 3 * b * m["T"] * mb_rank  # (max, sum-exp, target logit) as doubles
    r["gradient reduce-scatter"] = (dp - 1) * S * (8 if run["exact"] else 4)
    r["weight all-gather" if run["zero"] else "gradient all-gather"] = (dp - 1) * S * 4
    nb = cdiv(n, BLOCK)
    r["scales, norm blocks"] = (2 * (dp - 1) * cdiv(nb, dp) * 4 if run["exact"] else 0) + (dp - 1) * cdiv(S, BLOCK) * 8
    return r


def fit_search(m, run, mem):
    """Smallest tp dividing the ranks, NKV and d_ff; the largest micro-batch up to
    the deck's; the deck's recompute first, then recompute on."""
    for tp in range(1, run["world"] + 1):
        if run["world"] % tp or m["NKV"] % tp or m["F"] % tp:
            continue
        dp = run["world"] // tp
        for rec in ([True] if run["recompute"] else [False, True]):
            for b in range(run["b"], 0, -1):
                if run["B"] % b or (run["B"] // b) % dp:
                    continue
                if plan(m, run, tp, b, rec)["total"] <= mem:
                    return tp, b, rec
    return None


# ---- running fmhpc and reading its figures -----------------------------------
compared = 0


def check(name, args, m, run, device_gib=None, emu_mem=None):
    global compared
    cmd = [FMHPC_EMU if run.get("device") else FMHPC, "--check"] + args
    if device_gib is not None:
        cmd.append(f"parallel%device_mem_gib={device_gib}")
    env = dict(os.environ)
    env.pop("FMHPC_EMU_DEVICE_MEM", None)
    if emu_mem is not None:
        env["FMHPC_EMU_DEVICE_MEM"] = str(emu_mem)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"FAIL: {name}: {' '.join(cmd)} exited {out.returncode}\n{out.stderr}")
    text = out.stdout
    got = {}
    for line in text.splitlines():
        mm = re.match(r"^  (\S.*?)\s{2,}\S+ \S*\s+([\d,]+) B   ", line)
        if mm:
            got[mm.group(1)] = int(mm.group(2).replace(",", ""))
    tp = run["tp"]
    want = plan(m, run, tp, run["b"], run["recompute"])
    hdr = re.search(r"n = ([\d,]+) parameters on this rank, S = ([\d,]+) its largest dp shard", text)
    if not hdr:
        sys.exit(f"FAIL: {name}: no 'memory per rank' header in\n{text}")
    bad = []
    for key, val in (("n", int(hdr.group(1).replace(",", ""))), ("S", int(hdr.group(2).replace(",", "")))):
        compared += 1
        if val != want[key]:
            bad.append(f"{key}: fmhpc {val:,}, hand {want[key]:,}")
    for key, val in want.items():
        if key in ("n", "S") or val is None:
            continue
        compared += 1
        if key not in got:
            bad.append(f"row '{key}' missing")
        elif got[key] != val:
            bad.append(f"{key}: fmhpc {got[key]:,} B, hand {val:,} B")
    if "params_total" in m:
        compared += 1
        if f"parameters {m['params_total']:,} (" not in text:
            bad.append(f"total parameters {m['params_total']:,} not printed")
        hand_total = sum(x for x, _ in param_tensors(m))
        if hand_total != m["params_total"]:
            bad.append(f"hand parameter formula gives {hand_total:,}, the published count is {m['params_total']:,}")
    if device_gib is not None or emu_mem is not None:
        mem = int(device_gib * GIB) if device_gib is not None else emu_mem
        compared += 1
        src = " (the device's, cudaMemGetInfo: " if emu_mem is not None and device_gib is None else " device: "
        if src not in text:
            bad.append(f"the fit line does not say where the device size came from ('{src.strip()}')")
        if want["total"] <= mem:
            if ": fits, headroom " not in text:
                bad.append(f"{want['total']:,} B <= {mem:,} B but no 'fits, headroom'")
        else:
            if ": DOES NOT FIT, short by " not in text:
                bad.append(f"{want['total']:,} B > {mem:,} B but no 'DOES NOT FIT, short by'")
            sug = fit_search(m, run, mem)
            if sug is None:
                if "no tp dividing" not in text:
                    bad.append("nothing fits, but fmhpc does not say so")
            else:
                tps, bs, rec = sug
                line = f"suggest: parallel%tp={tps} train%micro_batch={bs} model%recompute={'.true.' if rec else '.false.'}"
                if line not in text:
                    bad.append(f"expected '{line}'")
    if bad:
        print(text)
        for b in bad:
            print(f"FAIL: {name}: {b}")
        sys.exit(1)
    print(f"ok: {name}: dp {run['world'] // tp} x tp {tp}: total {want['total']:,} B per rank, "
          f"tp sends {want['activation sums'] + want['vocab-parallel xent']:,} B, "
          f"dp sends {want['gradient reduce-scatter']:,} + {want.get('weight all-gather', want.get('gradient all-gather')):,} B per step")


LLAMA_NANO = dict(arch="llama", C=128, L=4, NH=4, NKV=2, HS=32, F=352, V=50257, T=128, tied=False)
GPT2_NANO = dict(arch="gpt2", C=128, L=4, NH=4, NKV=4, HS=32, F=512, V=50257, T=128, tied=True)
LLAMA2_7B = dict(arch="llama", C=4096, L=32, NH=32, NKV=32, HS=128, F=11008, V=32000, T=4096, tied=False,
                 params_total=6738415616)  # the published Llama-2-7B count

deck = f"{INPUTS}/llama_nano.in"
check("llama_nano dp2 x tp2, exact, fp32", ["--ranks", "4", deck, "parallel%tp=2"], LLAMA_NANO,
      dict(world=4, tp=2, b=4, B=16, bf16=False, exact=True, zero=True, nstate=2, recompute=False))
check("llama_nano dp4 x tp2, fast, bf16, ZeRO-0, recompute, lion",
      ["--ranks", "8", deck, "parallel%tp=2", "train%determinism='fast'", "train%precision='p=f32,c=bf16'",
       "parallel%zero=0", "model%recompute=.true.", "optim%name='lion'", "train%global_batch=32"], LLAMA_NANO,
      dict(world=8, tp=2, b=4, B=32, bf16=True, exact=False, zero=False, nstate=1, recompute=True))
check("gpt2_nano dp3 x tp4 (odd dp, uneven shards)", ["--ranks", "12", f"{INPUTS}/gpt2_nano.in", "parallel%tp=4",
      "train%global_batch=24", "train%micro_batch=2"], GPT2_NANO,
      dict(world=12, tp=4, b=2, B=24, bf16=False, exact=True, zero=True, nstate=2, recompute=False))
run7b = dict(world=64, tp=8, b=1, B=1024, bf16=True, exact=True, zero=True, nstate=2, recompute=True)
check("llama2 7B on 64 ranks (deck tp 8)", ["--ranks", "64", f"{INPUTS}/llama2.in"], LLAMA2_7B, run7b)
check("llama2 7B, 80 GiB devices", ["--ranks", "64", f"{INPUTS}/llama2.in"], LLAMA2_7B, run7b, device_gib=80)
check("llama2 7B, 16 GiB devices", ["--ranks", "64", f"{INPUTS}/llama2.in"], LLAMA2_7B, run7b, device_gib=16)
check("llama2 7B, 1 GiB devices", ["--ranks", "64", f"{INPUTS}/llama2.in"], LLAMA2_7B, run7b, device_gib=1)
run_nano = dict(world=8, tp=1, b=4, B=32, bf16=False, exact=True, zero=True, nstate=2, recompute=False)
nano8 = ["--ranks", "8", deck, "train%global_batch=32"]
for gib, what in ((0.25, "tp must grow"), (0.17, "tp and micro-batch must change"), (50 / 1024, "nothing fits")):
    check(f"llama_nano 8 ranks tp 1, a {gib * 1024:.0f} MiB device ({what})", nano8, LLAMA_NANO, run_nano, gib)
# A CUDA deck (the emulated device): head size 64, so c=bf16 runs flash attention
if FMHPC_EMU:
    LLAMA_H64 = dict(arch="llama", C=256, L=4, NH=4, NKV=2, HS=64, F=352, V=50257, T=128, tied=False)
    h64 = ["--ranks", "2", deck, "model%d_model=256", "train%backend='cuda'", "train%precision='p=f32,c=bf16'"]
    run_h64 = dict(world=2, tp=1, b=4, B=16, bf16=True, exact=True, zero=True, nstate=2, recompute=False, device=True)
    check("llama d_model 256 (head 64) on the emulated CUDA, c=bf16: flash scratch, workspace", h64, LLAMA_H64, run_h64)
    total = plan(LLAMA_H64, run_h64, 1, 4, False)["total"]
    check("the same against the device's memory (fits)", h64, LLAMA_H64, run_h64, emu_mem=total + (5 << 20))
    check("the same against a device too small", h64, LLAMA_H64, run_h64, emu_mem=total - (1 << 20))
    # zero = 0: the replicated optimizer's full gradient on the device too
    check("the same with zero = 0 (full gradient on the device)", h64 + ["parallel%zero=0"], LLAMA_H64,
          dict(run_h64, zero=False))
    run_f32 = dict(run_h64, bf16=False)
    check("the same in fp32 compute (no flash)", h64[:-1], LLAMA_H64, run_f32)
elif os.environ.get("CI") == "true":
    sys.exit("FAIL: no FMHPC_EMU argument: the CUDA deck's plan is not checked")
if compared < 10 * 14:
    sys.exit(f"FAIL: compared only {compared} figures")
print(f"PASS: {compared} --check figures equal the hand derivation")
