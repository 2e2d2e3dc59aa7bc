#!/usr/bin/python3
"""make_fixtures.py OUTDIR: the data tests' inputs, built from Debian packages
nobody here wrote.
  linuxdoc.jsonl        every Documentation/**/*.rst.gz of linux-doc-6.1, one
                        document each ({"text", "path"}), sorted by path
  linuxdoc_small.jsonl  the first 300 of them (+ .gz and .zst copies, and a
                        copy with blank lines, for the codec tests)
  linuxdoc_bad.jsonl    20 documents with a malformed line 7, a missing field on
                        line 12 and invalid UTF-8 on line 15
  wordnet_sft.jsonl     {"prompt": "Define the word X.", "response": gloss} from
                        wordnet-base's data.noun / data.verb / data.adj
Without those packages: exit 77 (ctest: skipped), or 1 in CI (tests/oracle.py).
"""
import glob, gzip, json, os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import oracle  # noqa: E402

out = sys.argv[1]
root = "/usr/share/doc/linux-doc-6.1/Documentation"
if not os.path.isdir(root):
    oracle.missing(root, "linux-doc-6.1")
if not os.path.exists("/usr/share/wordnet/data.noun"):
    oracle.missing("/usr/share/wordnet/data.noun", "wordnet-base")
os.makedirs(out, exist_ok=True)
paths = sorted(glob.glob(root + "/**/*.rst.gz", recursive=True))
docs = []
for p in paths:
    raw = gzip.open(p).read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
    docs.append({"text": text, "path": os.path.relpath(p, root)})
assert len(docs) == 3183, len(docs)

def dump(name, recs):
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")

dump("linuxdoc.jsonl", docs)
dump("linuxdoc_small.jsonl", docs[:300])
small = os.path.join(out, "linuxdoc_small.jsonl")
with open(small, "rb") as f, gzip.open(small + ".gz", "wb") as g:
    g.write(f.read())
subprocess.run(["zstd", "-q", "-f", "-3", small, "-o", small + ".zst"], check=True)
with open(os.path.join(out, "linuxdoc_small_blank.jsonl"), "w", encoding="utf-8") as f:
    for i, r in enumerate(docs[:300]):
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
        if i % 50 == 0:
            f.write("\n  \n")

with open(os.path.join(out, "linuxdoc_bad.jsonl"), "wb") as f:
    for i, r in enumerate(docs[:20]):
        line = json.dumps(r, ensure_ascii=False).encode()
        if i == 6:
            line = line[:-1]                       # line 7: unterminated object
        if i == 11:
            line = json.dumps({"body": r["text"]}).encode()  # line 12: no "text"
        if i == 14:
            line = line[:20] + b"\xff" + line[20:]  # line 15: invalid UTF-8
        f.write(line + b"\n")

# WordNet: data.* lines are "offset lex ss_type w_cnt word lex_id ... | gloss".
recs = []
for pos in ("noun", "verb", "adj"):
    with open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1") as f:
        for n, line in enumerate(f):
            if line.startswith(" ") or "|" not in line or n % 40:
                continue
            fields = line.split("|")[0].split()
            word = fields[4].replace("_", " ")
            gloss = line.split("|", 1)[1].strip()
            recs.append({"prompt": f"Define the word {word}.", "response": gloss})
dump("wordnet_sft.jsonl", recs)
print(f"{len(docs)} linux-doc documents, {len(recs)} WordNet pairs in {out}")
