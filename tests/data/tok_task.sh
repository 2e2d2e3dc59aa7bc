#!/usr/bin/env bash
# tok_task.sh FMHPC MPIEXEC FIXTURES WORK: task='tokenizer' through the deck at
# 1 and 3 ranks writes byte-identical tokenizer.json files, and the trained
# tokenizer round-trips a document through fmhpc --encode / --decode. With
# FMHPC_PROGRESS_SECONDS tiny, the 1-rank run's log has progress lines with a
# rate and an ETA (src/core/progress.c).
set -euo pipefail
fmhpc=$1 mpiexec=$2 fx=$3 work=$4
deck=$(dirname "$0")/../../inputs/tokenizer_train.in
rm -rf "$work"; mkdir -p "$work"; cd "$work"
for np in 1 3; do
  FMHPC_PROGRESS_SECONDS=$([ $np = 1 ] && echo 0.0001 || echo 0) "$mpiexec" -n $np "$fmhpc" "$deck" "tokenizer%inputs='$fx/linuxdoc_small.jsonl'" \
    "tokenizer%output='tok$np.json'" 'tokenizer%vocab_size=1500' > log$np.txt
done
cmp tok1.json tok3.json || { echo "FAIL: 1 and 3 ranks wrote different files"; exit 1; }
re='^tokenizer: [0-9]+/[0-9]+ merges, [0-9.]+ merges/s, [0-9]+%, elapsed [0-9hms]+, ETA [0-9hms]+$'
n=$(grep -cE "$re" log1.txt || true)
[ "$n" -gt 0 ] || { cat log1.txt; echo "FAIL: no merge progress line with a rate and an ETA"; exit 1; }
echo "$n progress lines, last: $(grep -E "$re" log1.txt | tail -1)"
grep -q '"type": *"BPE"' tok1.json || { echo "FAIL: no BPE model in tokenizer.json"; exit 1; }
/usr/bin/python3 - "$fx/linuxdoc_small.jsonl" <<'PY' > doc.txt
import json, sys
print(json.loads(open(sys.argv[1]).readline())["text"], end="")
PY
"$fmhpc" --encode tok1.json < doc.txt > ids.txt
"$fmhpc" --decode tok1.json < ids.txt > back.txt
cmp doc.txt back.txt || { echo "FAIL: decode(encode(doc)) != doc"; exit 1; }
nbytes=$(wc -c < doc.txt); nids=$(wc -w < ids.txt)
[ "$nids" -lt "$nbytes" ] || { echo "FAIL: $nids ids for $nbytes bytes: no compression"; exit 1; }
echo "PASS: tokenizer task ($nids ids for $nbytes bytes)"
