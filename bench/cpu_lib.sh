# bench/cpu_lib.sh: sourced by the benchmarks. Sets BUILD to a CPU-only build
# of libfmhpc_lib.a (the benchmarks time the CPU backend and link with plain
# cc/mpicc, so no CUDA objects): $1 when given, else $ROOT/build-bench,
# configured and built here when missing or out of date.
if [ -n "${1:-}" ]; then
  BUILD="$(cd "$1" && pwd)"
else
  BUILD="$ROOT/build-bench"
  cmake -S "$ROOT" -B "$BUILD" -DFMHPC_CUDA=OFF -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" --target fmhpc_lib -j"$(nproc)" >/dev/null
fi
if nm -A "$BUILD/libfmhpc_lib.a" 2>/dev/null | grep -q '\.cu\.o:'; then
  echo "bench: $BUILD has CUDA objects; pass a CPU-only build (-DFMHPC_CUDA=OFF) or none" >&2
  exit 2
fi
# fm_src_of BUILD_DIR: the source tree a build directory was configured from
# (its headers must be the ones a benchmark compiles against: the structs and
# the backend table change between commits);
# ROOT when the directory has no CMakeCache.txt.
fm_src_of() {
  local s
  s=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" 2>/dev/null)
  echo "${s:-$ROOT}"
}
