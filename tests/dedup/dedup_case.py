#!/usr/bin/python3
"""dedup_case.py FMHPC MPIEXEC DECK WORDNET_JSONL WORKDIR: task='dedup' end to end.

Test set: the WordNet SFT fixture, then for 100 originals (records the plain
run keeps, with >= 120 code points) one edited copy in each similarity class,
placed at a random later position, plus 5 dirty records per cleaning rule.
Copies replace random response characters until the EXACT Jaccard of the
normalised char-3-gram sets (computed here, independently of fmhpc) is within
0.015 of the class target:
  0.95, 0.85  must be dropped as duplicates of their original (4.7+ sigma
              above the 0.7 threshold at K = 128)
  0.75        mostly dropped: counted; binomial expectation ~89%, asserted >= 70%
  0.50        must be kept (4.5 sigma below the threshold)
Originals must all be kept. Outputs at 1 and 3 ranks must be byte-identical.
Oracle: for every (dropped duplicate, kept twin) pair in the side file the
reported estimate is compared with the exact Jaccard: mean |err| <= 0.05 and
no pair beyond 4 binomial sigma (sqrt(J(1-J)/128) + 1/128)."""
import json, math, os, random, re, shutil, subprocess, sys

fmhpc, mpiexec, deck, wordnet, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
K = 128


def norm(s):  # as include/fmhpc/clean.h: ASCII lowercase, ASCII whitespace runs -> ' ', trimmed
    s = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in s)
    return re.sub(r"[ \t\n\r\f\v]+", " ", s).strip(" ")


def shingles(s):
    t = norm(s)
    if not t:
        return set()
    if len(t) < 3:
        return {t}
    return {t[i:i + 3] for i in range(len(t) - 2)}


def text(r):
    return r["prompt"] + "\n" + r["response"]


def jaccard(a, b):
    A, B = shingles(a), shingles(b)
    return len(A & B) / len(A | B) if A | B else 1.0


def run(np, inputs, tag, progress=False):
    out = os.path.join(work, tag)
    cmd = [mpiexec, "-n", str(np), fmhpc, deck, f"dedup%inputs='{inputs}'", f"dedup%output='{out}/kept.jsonl'",
           f"dedup%dropped='{out}/dropped.jsonl'", f"dedup%report='{out}/report.json'"]
    env = dict(os.environ, FMHPC_PROGRESS_SECONDS="0.0001" if progress else "0")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    for line in p.stdout.splitlines():
        if line.startswith("dedup:"):
            print(f"[{tag}] {line}")
    if progress:  # lines with a rate (and, when deciding, the share and an ETA)
        sign = [l for l in p.stdout.splitlines() if re.match(r"dedup \(reading and signing\): \d+ records, [\d.]+ records/s, elapsed", l)]
        dec = [l for l in p.stdout.splitlines()
               if re.match(r"dedup \(deciding\): \d+/\d+ records, [\d.]+ records/s, \d+%, elapsed \S+, ETA \S+$", l)]
        print(f"[{tag}] progress: {len(sign)} reading lines, {len(dec)} deciding lines; {(dec or ['none'])[-1]}")
        if not sign or not dec:
            fail.append(f"{tag}: no progress lines with a rate and an ETA")
    rep = json.load(open(f"{out}/report.json"))
    dropped = [json.loads(l) for l in open(f"{out}/dropped.jsonl")]
    return out, rep, dropped


fail = []
recs = [json.loads(l) for l in open(wordnet) if l.strip()]
raw = [l.rstrip("\n") for l in open(wordnet) if l.strip()]

# 1. The plain fixture: natural near-duplicates are allowed; they are reported.
_, rep0, drop0 = run(1, wordnet, "plain")
natural = {d["record"] for d in drop0}
print(f"plain WordNet: {rep0['records']} records, natural drops {rep0['dropped']}")
for d in drop0:
    if d["reason"] == "duplicate":
        j = d["duplicate_of"]["record"]
        print(f"  natural near-duplicate: line {d['line']} ~ line {d['duplicate_of']['line']}: "
              f"estimate {d['similarity']:.3f}, exact {jaccard(text(recs[d['record']]), text(recs[j])):.3f}")

# 2. Planted copies at known exact Jaccard.
rng = random.Random(20261130)
letters = "abcdefghijklmnopqrstuvwxyz"
eligible = [i for i, r in enumerate(recs) if i not in natural and len(norm(text(r))) >= 120]
originals = sorted(rng.sample(eligible, 100))
CLASSES = [0.95, 0.85, 0.75, 0.50]


def edited_copy(r, target):
    for _attempt in range(50):
        resp = list(r["response"])
        best = None
        for _step in range(4 * len(resp)):
            k = rng.randrange(len(resp))
            if resp[k] == " ":
                continue
            resp[k] = rng.choice(letters)
            c = dict(r, response="".join(resp))
            j = jaccard(text(r), text(c))
            if abs(j - target) <= 0.015:
                best = (c, j)
                break
            if j < target - 0.015:
                break
        if best:
            return best
    return None


planted = []  # (original index, class, record, exact J)
for o in originals:
    for cls in CLASSES:
        got = edited_copy(recs[o], cls)
        if got is None:
            fail.append(f"could not make a copy of record {o} at J {cls}")
            continue
        planted.append((o, cls, got[0], got[1]))

dirty = {
    "html": ["Define the word bold.\n<b>printed</b> in a heavy typeface", "Define the word para.\na <p>paragraph</p> of text"],
    "url": ["Define the word site.\nsee https://example.org/site for more", "Define the word web.\nvisit www.example.org daily"],
    "markdown": ["Define the word code.\n```\nint main(void);\n```", "Define the word head.\n# Heading\nthe top part",
                 "Define the word table.\n| a | b |\n|---|---|", "Define the word link.\nsee [docs](x/y.md) for it"],
    "char_repetition": ["Define the word aaa.\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
    "word_repetition": ["Define the word abcd.\n" + " ".join(f"a b c d {k}" for k in range(1, 9))],
    "too_short": ["x\ny"],
}
# insertion plan: copies after their original; dirty records anywhere
rows = [("orig", i, raw[i]) for i in range(len(recs))]
for o, cls, c, j in planted:
    pos = next(k for k, r in enumerate(rows) if r[0] == "orig" and r[1] == o)
    at = rng.randrange(pos + 1, len(rows) + 1)
    rows.insert(at, ("copy", (o, cls, j), json.dumps(c, ensure_ascii=False)))
ndirty = {}
for reason, texts in dirty.items():
    for t in texts:
        p, r = t.split("\n", 1)
        rows.insert(rng.randrange(len(rows) + 1), ("dirty", reason, json.dumps({"prompt": p, "response": r})))
        ndirty[reason] = ndirty.get(reason, 0) + 1
test_set = os.path.join(work, "wordnet_planted.jsonl")
with open(test_set, "w", encoding="utf-8") as f:
    for r in rows:
        f.write(r[2] + "\n")
all_recs = [json.loads(r[2]) for r in rows]
orig_at = {r[1]: k for k, r in enumerate(rows) if r[0] == "orig"}

# 3. 1 rank and 3 ranks: byte-identical outputs.
out1, rep1, drop1 = run(1, test_set, "np1", progress=True)
out3, rep3, drop3 = run(3, test_set, "np3")
for name in ("kept.jsonl", "dropped.jsonl"):
    same = open(f"{out1}/{name}", "rb").read() == open(f"{out3}/{name}", "rb").read()
    print(f"{name}: 1 rank vs 3 ranks {'byte-identical' if same else 'DIFFER'}")
    if not same:
        fail.append(f"{name} differs between 1 and 3 ranks")
if rep1["dropped"] != rep3["dropped"]:
    fail.append(f"report counts differ: {rep1['dropped']} vs {rep3['dropped']}")

# kept output = the input lines of kept records, in order
dropped_at = {d["record"]: d for d in drop1}
kept_lines = [r[2] for k, r in enumerate(rows) if k not in dropped_at]
if open(f"{out1}/kept.jsonl", encoding="utf-8").read() != "".join(l + "\n" for l in kept_lines):
    fail.append("kept.jsonl is not the kept input lines in input order")

# 4. Planted copies.
lost = [o for o in originals if orig_at[o] in dropped_at]
if lost:
    fail.append(f"originals dropped: {lost}")
by_class = {c: [0, 0] for c in CLASSES}  # dropped, total
for k, r in enumerate(rows):
    if r[0] != "copy":
        continue
    o, cls, j = r[1]
    d = dropped_at.get(k)
    by_class[cls][1] += 1
    if d:
        by_class[cls][0] += 1
    if cls >= 0.85:
        if not d or d["reason"] != "duplicate" or d["duplicate_of"]["record"] != orig_at[o]:
            fail.append(f"copy at J {j:.3f} of record {o} (row {k}) not dropped as a duplicate of it: {d}")
    if cls <= 0.5 and d:
        fail.append(f"copy at J {j:.3f} of record {o} (row {k}) dropped: {d['reason']}")
for cls in CLASSES:
    dr, tot = by_class[cls]
    print(f"planted copies at J {cls:.2f} +- 0.015: {dr}/{tot} dropped")
print(f"originals: {100 - len(lost)}/100 kept")
if by_class[0.75][0] < 0.7 * by_class[0.75][1]:
    fail.append(f"only {by_class[0.75][0]} of {by_class[0.75][1]} copies at J 0.75 dropped (expected ~89%)")

# 5. Cleaning counts: planted dirty records plus what the plain run found.
for reason, n in ndirty.items():
    want = n + rep0["dropped"][reason]
    if rep1["dropped"][reason] != want:
        fail.append(f"{reason}: {rep1['dropped'][reason]} dropped, planted {n} (+{rep0['dropped'][reason]} natural)")
print(f"cleaning: {rep1['dropped']}")

# 6. Oracle: estimates of every duplicate pair against the exact Jaccard.
errs = []
for d in drop1:
    if d["reason"] != "duplicate":
        continue
    j = jaccard(text(all_recs[d["record"]]), text(all_recs[d["duplicate_of"]["record"]]))
    e = d["similarity"] - j
    errs.append(e)
    if abs(e) > 4 * math.sqrt(j * (1 - j) / K) + 1 / K:
        fail.append(f"estimate {d['similarity']:.3f} vs exact {j:.3f} for record {d['record']} (beyond 4 sigma)")
mae = sum(abs(e) for e in errs) / len(errs)
within = sum(abs(e) <= 0.05 for e in errs) / len(errs)
print(f"oracle: {len(errs)} (duplicate, kept twin) pairs: mean err {sum(errs) / len(errs):+.4f}, "
      f"mean |err| {mae:.4f}, max |err| {max(abs(e) for e in errs):.4f}, {100 * within:.1f}% within 0.05")
if mae > 0.05:
    fail.append(f"mean |estimate - exact| = {mae:.4f} > 0.05")
print(f"throughput: {rep1['records_per_s']:.0f} records/s at 1 rank, {rep3['records_per_s']:.0f} records/s at 3 ranks "
      f"({rep1['records']} records)")
if fail:
    print("\n".join("FAIL: " + f for f in fail))
    sys.exit(1)
print("PASS: dedup")
