#!/usr/bin/python3
"""check_prep.py: the independent oracle for task='prep'. It re-derives every
document from the JSONL inputs (length filter, valid split by the same
documented hash rule, chat template and loss masks for SFT), tokenizes each
one with npm gpt-tokenizer (r50k_base = GPT-2, via gpt2_ids.js), reads the
shards with h5py (or numpy for .bin) and checks:
  - conservation: the pieces stored (runs of one segment id) are exactly the
    expected documents (bfd), their R-id chunks (bfd_split) or, concatenated,
    the document stream (simple); every token once, nothing extra;
  - exactly one EOS after each document and none elsewhere;
  - loss masks equal the template-derived masks (SFT: content + suffix of
    trained turns, and the EOS after a trained last turn), 0 on padding;
  - position ids (doc_reset: 0.. per piece; continuous: column), segment ids;
  - the manifest's and attributes' counts, vocab size, tokenizer hash and the
    inputs' SHA-256.
Prints the padding fraction per split. Exit status 0 when all holds.

usage: check_prep.py --manifest out/train.json --inputs a.jsonl [b.jsonl ...]
         --tok-dir node_modules/gpt-tokenizer [--mode sft --sections prompt=user,response=assistant
         --train-on assistant --template chatml] [--min-chars 50 --max-chars 2000000]
         [--valid-fraction 0.01 --seed 1234] [--expect-docs N]
"""
import argparse, collections, hashlib, json, os, subprocess, sys

import numpy as np

EOS = 50256
TEMPLATES = {"none": ("", "", ""), "chatml": ("", "<|im_start|>{role}\n", "<|im_end|>\n"),
             "llama3": ("<|begin_of_text|>", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>")}


def philox_uniform(seed, purpose, step, index):
    """fm_rng_uniform of include/fmhpc/rng.h (Philox4x32-10, Random123)."""
    M = 0xFFFFFFFF
    c = [index & M, index >> 32, step & M, purpose & M]
    k0, k1 = seed & M, (seed >> 32) & M
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M, p1 & M, ((p0 >> 32) ^ c[3] ^ k1) & M, p0 & M]
        k0 = (k0 + 0x9E3779B9) & M
        k1 = (k1 + 0xBB67AE85) & M
    return np.float32(c[0] >> 8) * np.float32(1.0 / 16777216.0)


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def tokenize(strings, tok_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    text = "".join(json.dumps(s) + "\n" for s in strings)
    out = subprocess.run(["node", os.path.join(here, "gpt2_ids.js"), tok_dir], input=text.encode(),
                         capture_output=True, check=True).stdout.decode()
    ids = [json.loads(l) for l in out.splitlines() if l]
    assert len(ids) == len(strings), (len(ids), len(strings))
    return ids


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expected_docs(a):
    """[(split, tokens tuple, mask tuple)] in input order, plus filter counts."""
    records, counts = [], collections.Counter()
    for path in a.inputs:
        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                records.append(json.loads(line.decode("utf-8")))
    counts["records"] = len(records)
    tmpl = TEMPLATES[a.template]
    secs = [s.split("=") if "=" in s else (s, s) for s in a.sections.split(",")] if a.sections else []
    train_on = set(a.train_on.split(",")) if a.train_on else set()
    docs, strings = [], {}
    for r in records:
        if a.mode == "pretrain":
            turns = [("text", r["text"], True)]
        else:
            turns = [(role, r[field], field in train_on or role in train_on) for field, role in secs]
        chars = sum(len(t[1]) for t in turns)
        if chars < a.min_chars:
            counts["too_short"] += 1
            continue
        if chars > a.max_chars:
            counts["too_long"] += 1
            continue
        h = 0xCBF29CE484222325
        for t in turns:
            h = fnv1a(h, t[1].encode("utf-8") + b"\0")
        valid = a.valid_fraction > 0 and philox_uniform(a.seed, 6, 0, h) < np.float32(a.valid_fraction)
        pieces = []  # (string, trained)
        if a.mode == "sft":
            if tmpl[0]:
                pieces.append((tmpl[0], False))
            for role, content, trained in turns:
                pieces += [(tmpl[1].replace("{role}", role), False), (content, trained),
                           (tmpl[2].replace("{role}", role), trained)]
        else:
            pieces.append((turns[0][1], True))
        for s, _ in pieces:
            strings.setdefault(s, len(strings))
        docs.append((int(valid), pieces, turns[-1][2]))
    ids = tokenize(list(strings), a.tok_dir)
    out = []
    for split, pieces, last_trained in docs:
        tok, mask = [], []
        for s, trained in pieces:
            t = ids[strings[s]]
            tok += t
            mask += [int(trained)] * len(t)
        tok.append(EOS)
        mask.append(int(last_trained))
        out.append((split, tuple(tok), tuple(mask)))
    return out, counts


def load_split(manifest_path):
    m = json.load(open(manifest_path))
    d = os.path.dirname(manifest_path)
    arrs = {k: [] for k in ("tokens", "loss_mask", "segment_ids", "position_ids")}
    R = m["row_len"]
    for sh in m["shards"]:
        if m["storage"] == "h5":
            import h5py
            with h5py.File(os.path.join(d, sh["file"]), "r") as f:
                at = f.attrs
                for k in ("vocab_size", "seq_len", "eos_id", "pad_id", "first_seq", "n_seq"):
                    want = m[k] if k not in ("first_seq", "n_seq") else sh[k]
                    if int(at[k]) != want:
                        fail(f"{sh['file']}: attribute {k} = {at[k]}, manifest {want}")
                for k in ("tokenizer_hash", "packing", "position_ids"):
                    v = at[k].decode() if isinstance(at[k], bytes) else str(at[k])
                    if v != m[k]:
                        fail(f"{sh['file']}: attribute {k} = {v}, manifest {m[k]}")
                src = at["sources"].decode() if isinstance(at["sources"], bytes) else str(at["sources"])
                for inp in m["provenance"]["inputs"]:
                    if f"{inp['sha256']}  {inp['path']}" not in src:
                        fail(f"{sh['file']}: sources attribute lacks {inp['path']}")
                for k in arrs:
                    if k in f:
                        arrs[k].append(f[k][...])
        else:
            stem = os.path.join(d, sh["file"])
            for k, dt in (("tokens", "<u4"), ("loss_mask", "u1"), ("segment_ids", "<i4"), ("position_ids", "<i4")):
                p = f"{stem}.{k}.bin"
                if os.path.exists(p):
                    arrs[k].append(np.fromfile(p, dtype=dt).reshape(-1, R))
    out = {k: (np.concatenate(v) if v else None) for k, v in arrs.items()}
    if out["tokens"] is None:
        out = {k: np.zeros((0, R), dtype=np.int64) for k in arrs}
    if out["tokens"].shape != (m["n_seq"], R):
        fail(f"{manifest_path}: tokens {out['tokens'].shape}, manifest n_seq {m['n_seq']} x {R}")
    return m, out


def pieces_of(m, a):
    """[(tokens, mask)] per segment run, in row order; checks pads and positions."""
    R, pad = m["row_len"], m["pad_id"]
    tok, mask, seg = a["tokens"], a["loss_mask"], a["segment_ids"]
    pos = a["position_ids"]
    pieces, rows_end = [], []
    for i in range(tok.shape[0]):
        s = seg[i]
        n = int(np.count_nonzero(s))
        if np.any(s[n:] != 0) or (n and (s[0] != 1 or np.any(np.diff(s[:n]) < 0) or np.any(np.diff(s[:n]) > 1))):
            fail(f"row {i}: segment ids not 1,1,..,2,.. then 0 padding: {s[:n + 3]}")
        if np.any(tok[i, n:] != pad) or np.any(mask[i, n:] != 0):
            fail(f"row {i}: padding is not pad_id {pad} with loss mask 0")
        starts = [0] + [int(t) for t in np.nonzero(np.diff(s[:n]))[0] + 1] + [n]
        for a0, b0 in zip(starts, starts[1:]):
            pieces.append((tuple(int(x) for x in tok[i, a0:b0]), tuple(int(x) for x in mask[i, a0:b0])))
            if pos is not None:
                want = np.arange(a0, b0) if m["position_ids"] == "continuous" else np.arange(b0 - a0)
                if np.any(pos[i, a0:b0] != want):
                    fail(f"row {i}: position ids {pos[i, a0:b0][:8]} ..., expected {m['position_ids']}")
        if pos is not None and m["position_ids"] == "continuous" and np.any(pos[i, n:] != np.arange(n, R)):
            fail(f"row {i}: continuous position ids on padding")
        rows_end.append(len(pieces))
    return pieces, rows_end


def check_split(m, arrs, docs, R):
    packing = m["packing"]
    pieces, _ = pieces_of(m, arrs)
    stored = sum(len(p[0]) for p in pieces)
    pad = m["n_seq"] * R - stored
    if pad != m["padding"]:
        fail(f"padding {pad} stored, manifest says {m['padding']}")
    dropped = [d for d in docs if packing == "bfd" and len(d[0]) > R]
    kept = [d for d in docs if not (packing == "bfd" and len(d[0]) > R)]
    if packing == "simple":
        stream_t = tuple(x for p in pieces for x in p[0])
        stream_m = tuple(x for p in pieces for x in p[1])
        want_t = tuple(x for d in kept for x in d[0])
        want_m = tuple(x for d in kept for x in d[1])
        if stream_t != want_t:
            k = next((i for i, (x, y) in enumerate(zip(stream_t, want_t)) if x != y), min(len(stream_t), len(want_t)))
            fail(f"simple: the stored stream differs from the documents at token {k} "
                 f"({len(stream_t)} stored, {len(want_t)} expected)")
        if stream_m != want_m:
            fail("simple: loss masks differ from the template-derived masks")
        # pieces start at document starts or at row starts (continuations)
        if any(stream_t[i] == EOS and stream_t[i + 1] == EOS for i in range(len(stream_t) - 1)):
            fail("simple: a double EOS in the stream")
    else:
        want = collections.Counter()
        for t, mk in kept:
            if packing == "bfd_split":
                for o in range(0, len(t), R):
                    want[(t[o:o + R], mk[o:o + R])] += 1
            else:
                want[(t, mk)] += 1
        got = collections.Counter(pieces)
        if got != want:
            extra, missing = got - want, want - got
            fail(f"{packing}: pieces differ from the documents: {sum(extra.values())} unexpected, "
                 f"{sum(missing.values())} missing (e.g. missing of length "
                 f"{[len(k[0]) for k in list(missing)[:3]]}, unexpected {[len(k[0]) for k in list(extra)[:3]]})")
        for t, mk in pieces:
            if any(x == EOS for x in t[:-1]) and packing == "bfd":
                fail("bfd: an EOS inside a document")
    n_eos = sum(1 for p in pieces for x in p[0] if x == EOS)
    if n_eos != len(kept):
        fail(f"{n_eos} EOS stored for {len(kept)} documents (exactly one each)")
    tokens = sum(len(d[0]) for d in kept)
    if m["documents"] != len(kept) or m["tokens"] != tokens:
        fail(f"manifest: {m['documents']} documents / {m['tokens']} tokens, expected {len(kept)} / {tokens}")
    trained = sum(sum(d[1]) for d in kept)
    frac = pad / (m["n_seq"] * R) if m["n_seq"] else 0.0
    print(f"{m['split']}: {len(kept)} documents ({len(dropped)} dropped by bfd), {tokens} tokens, {trained} "
          f"trained, {m['n_seq']} rows, padding {pad} = {frac:.6f} ({packing}); conservation OK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--inputs", nargs="+", required=True)
    ap.add_argument("--tok-dir", required=True)
    ap.add_argument("--mode", default="pretrain")
    ap.add_argument("--sections", default="")
    ap.add_argument("--train-on", default="")
    ap.add_argument("--template", default="none")
    ap.add_argument("--min-chars", type=int, default=50)
    ap.add_argument("--max-chars", type=int, default=2000000)
    ap.add_argument("--valid-fraction", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--expect-docs", type=int, default=-1)
    a = ap.parse_args()
    docs, counts = expected_docs(a)
    if not docs:
        fail(f"no documents in {a.inputs} pass the filters: nothing would be compared")
    if a.expect_docs >= 0 and counts["records"] != a.expect_docs:
        fail(f"{counts['records']} records in the inputs, expected {a.expect_docs}")
    mpath = a.manifest
    for split in (0, 1):
        path = mpath if split == 0 else os.path.join(os.path.dirname(mpath), "valid.json")
        sdocs = [(t, mk) for s, t, mk in docs if s == split]
        if not os.path.exists(path):
            if sdocs:
                fail(f"{len(sdocs)} documents expected in the valid split, but {path} is missing")
            continue
        m, arrs = load_split(path)
        c = m["provenance"]["counts"]
        for k in ("too_short", "too_long", "records"):
            if c[k] != counts[k]:
                fail(f"{path}: {k} = {c[k]}, expected {counts[k]}")
        for inp in m["provenance"]["inputs"]:
            if hashlib.sha256(open(inp["path"], "rb").read()).hexdigest() != inp["sha256"]:
                fail(f"{path}: sha256 of {inp['path']} differs")
        check_split(m, arrs, sdocs, m["row_len"])
    print(f"records {counts['records']}, filtered: {counts['too_short']} short, {counts['too_long']} long")


if __name__ == "__main__":
    main()
