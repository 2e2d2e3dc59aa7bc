#!/usr/bin/env bash
# store_faults.sh FMHPC MPIEXEC WORK: broken stores are clear errors naming
# the file and the rule, never a crash or a silent run. A small good store (4
# rows of the prepped linux-doc corpus, made with h5py) trains one step; then
# copies broken one way each must fail with the expected message:
#   token id 2147483845 planted at row 2, column 7 (it used to SEGFAULT in the
#   embedding); a truncated shard; a shard without /loss_mask; a manifest whose
#   n_seq, or whose shard list, disagrees with the files; a valid store made by
#   another tokenizer; a store of 64-token sequences for a 128-token model.
set -euo pipefail
fmhpc=$1 mpiexec=$2 work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$work"
S=store_faults
rm -rf "$S"; mkdir -p "$S"
/usr/bin/python3 - data/linuxdoc_128/train_00000.h5 "$S" <<'PY'
import copy, json, os, shutil, sys
import h5py
src, out = sys.argv[1], sys.argv[2]

def shard(path, rows, cols=129, **attrs):
    with h5py.File(src, "r") as f, h5py.File(path, "w") as g:
        for name in ("tokens", "loss_mask", "position_ids", "segment_ids"):
            g[name] = f[name][rows[0]:rows[1], :cols]
        for k, v in f.attrs.items():
            g.attrs[k] = v
        g.attrs["n_seq"] = rows[1] - rows[0]
        g.attrs["n_shards"] = 1
        for k, v in attrs.items():
            g.attrs.modify(k, v)  # keeps the attribute's stored type

def manifest(d, name, files, **over):
    with h5py.File(os.path.join(d, files[0][0]), "r") as f:
        a = {k: (v.decode() if isinstance(v, bytes) else v if isinstance(v, str) else int(v)) for k, v in f.attrs.items()}
    m = {"format": "fmhpc-packed", "format_version": 1, "storage": "h5", "split": "train",
         "seq_len": a["seq_len"], "row_len": a["row_len"], "n_seq": sum(n for _, n in files),
         "vocab_size": a["vocab_size"], "eos_id": a["eos_id"], "pad_id": a["pad_id"], "packing": a["packing"],
         "position_ids": a["position_ids"], "tokenizer_hash": a["tokenizer_hash"], "shards": []}
    first = 0
    for fn, n in files:
        m["shards"].append({"file": fn, "first_seq": first, "n_seq": n})
        first += n
    m.update(over)
    with open(os.path.join(d, name), "w") as fp:
        json.dump(m, fp, indent=1)

def store(case, rows=(0, 4), **kw):
    d = os.path.join(out, case)
    os.makedirs(d)
    shard(os.path.join(d, "train_00000.h5"), rows, **kw)
    manifest(d, "train.json", [("train_00000.h5", rows[1] - rows[0])])
    return d

store("good")
d = store("valid", rows=(4, 8)); os.rename(f"{d}/train.json", f"{d}/valid.json")
d = store("badid")
with h5py.File(f"{d}/train_00000.h5", "r+") as f:
    f["tokens"][2, 7] = 2147483845
d = store("truncated", rows=(0, 256))
size = os.path.getsize(f"{d}/train_00000.h5")
os.truncate(f"{d}/train_00000.h5", size // 2)
d = store("nomask")
with h5py.File(f"{d}/train_00000.h5", "r+") as f:
    del f["loss_mask"]
d = store("nseq")
manifest(d, "train.json", [("train_00000.h5", 4)], n_seq=5)
d = store("shardlist")
manifest(d, "train.json", [("train_00000.h5", 3)])
d = store("missingshard")
manifest(d, "train.json", [("train_00000.h5", 4), ("train_00001.h5", 4)])
d = store("othertok", rows=(4, 8), tokenizer_hash=b"0" * 64); os.rename(f"{d}/train.json", f"{d}/valid.json")
store("seq64", cols=65, seq_len=64, row_len=65)
print("made the stores")
PY
run() { # case expected-status(0|nz) train-store [overrides...]
  local c=$1 want=$2 store=$3; shift 3
  local rc=0
  "$mpiexec" -n 1 "$fmhpc" "$repo/inputs/gpt2_nano.in" train%steps=1 optim%warmup_steps=0 train%global_batch=4 train%micro_batch=1 \
    log%plot=F "data%train='$store'" "data%valid=''" "run%out_dir='$S/run_$c'" "$@" > "$S/$c.log" 2>&1 || rc=$?
  if { [ "$want" = 0 ] && [ $rc -ne 0 ]; } || { [ "$want" = nz ] && [ $rc -eq 0 ]; }; then
    tail -20 "$S/$c.log"; echo "FAIL: $c exited $rc, expected $want"; exit 1
  fi
  if grep -q "Segmentation fault\|signal 11" "$S/$c.log"; then tail -20 "$S/$c.log"; echo "FAIL: $c crashed"; exit 1; fi
}
expect() { # case regex what
  grep -qE -- "$2" "$S/$1.log" || { tail -20 "$S/$1.log"; echo "FAIL: $1: no '$2' ($3)"; exit 1; }
  echo "ok: $1: $3"
}
run good 0 "$S/good/train.json" "data%valid='$S/valid/valid.json'"
echo "ok: the good 4-row store (and its valid store) trains a step"
run badid nz "$S/badid/train.json"
expect badid "store_faults/badid/train_00000.h5: row 2 \(sample 2\), column 7: token id 2147483845 >= vocab_size 50257" \
  "an out-of-range id names file, row and column"
run truncated nz "$S/truncated/train.json"
expect truncated "store_faults/truncated/train_00000.h5: .*(truncated|cannot open|not an HDF5|corrupt)" "a truncated shard is named"
run nomask nz "$S/nomask/train.json"
expect nomask "store_faults/nomask/train_00000.h5: .*loss_mask" "a missing dataset is named"
run nseq nz "$S/nseq/train.json"
expect nseq "store_faults/nseq/train.json: shards hold 4 rows, n_seq says 5" "manifest n_seq disagrees"
run shardlist nz "$S/shardlist/train.json"
expect shardlist "store_faults/shardlist/train_00000.h5: .*(manifest|rows)" "a shard's row count disagrees with the manifest"
run missingshard nz "$S/missingshard/train.json"
expect missingshard "store_faults/missingshard/train_00001.h5" "a shard listed in the manifest but absent is named"
run othertok nz "$S/good/train.json" "data%valid='$S/othertok/valid.json'"
expect othertok "&data valid = '.*othertok/valid.json': was made by another tokenizer" "train and valid tokenizers differ"
run seq64 nz "$S/seq64/train.json"
expect seq64 "&model seq_len = 128: the store .*seq64/train.json holds sequences of 64 tokens" "seq_len differs from the model"
echo "PASS: store_faults"
