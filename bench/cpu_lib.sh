# bench/cpu_lib.sh: sourced by the benchmarks. Sets BUILD to a CPU-only build
# of libfmhpc_lib.a (the benchmarks time the CPU backend and link with plain
# cc/mpicc, so no CUDA objects): $1 when given, else $ROOT/build-bench,
# configured and built here when missing or out of date.
# fm_build_cpu_lib DIR [CMAKE_ARG...]: configure ROOT's tree in DIR as the
# benchmarks' CPU-only Release build (extra arguments go to cmake, e.g.
# tiles.sh's CMAKE_C_FLAGS) and build libfmhpc_lib.a there.
fm_build_cpu_lib() {
  local dir=$1
  shift
  cmake -S "$ROOT" -B "$dir" -DFMHPC_CUDA=OFF -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" --target fmhpc_lib -j"$(nproc)" >/dev/null
}
if [ -n "${1:-}" ]; then
  BUILD="$(cd "$1" && pwd)"
else
  BUILD="$ROOT/build-bench"
  fm_build_cpu_lib "$BUILD"
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
# The OpenBLAS kernel every side runs (fmhpc, PyTorch, the sgemm peaks): where
# OPENBLAS_CORETYPE is unset and OpenBLAS falls back to a generic pre-AVX2
# kernel on a CPU with AVX2 and FMA, fmhpc runs Cooperlake (AVX-512 BF16),
# SkylakeX (AVX-512) or Haswell instead (src/tensor/cpu/matmul.c); so do the
# peers here, or they are measured on another kernel than fmhpc's.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  fm_blas_core=$(/usr/bin/python3 -c 'import ctypes
l = ctypes.CDLL("libopenblas.so.0"); l.openblas_get_corename.restype = ctypes.c_char_p
print(l.openblas_get_corename().decode())' 2>/dev/null) || fm_blas_core=""
  case " Prescott Core2 Penryn Dunnington Nehalem Atom Sandybridge Opteron Barcelona Bobcat Bulldozer Piledriver Steamroller Excavator " in
    *" ${fm_blas_core:-none} "*)
      fm_pin=Haswell
      if grep -qw avx512f /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
         grep -qw avx512dq /proc/cpuinfo; then
        fm_pin=SkylakeX
        grep -qw avx512_bf16 /proc/cpuinfo && fm_pin=Cooperlake
      fi
      export OPENBLAS_CORETYPE=$fm_pin
      echo "bench: OpenBLAS took its generic $fm_blas_core kernel on this CPU (AVX2, FMA): OPENBLAS_CORETYPE=$fm_pin for every side, as fmhpc chooses" >&2 ;;
  esac
fi
# fm_build_step_bench LIBDIR OUTPUT: bench/step_cpu/bench_step.c linked with
# LIBDIR's libfmhpc_lib.a, compiled against LIBDIR's own source tree's headers
# (bench/step_cpu/run.sh, profile.sh).
fm_build_step_bench() {
  # shellcheck disable=SC2046 # pkg-config prints several words
  mpicc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -I"$(fm_src_of "$1")/include" $(pkg-config --cflags openblas) \
    "$ROOT/bench/step_cpu/bench_step.c" "$1/libfmhpc_lib.a" \
    $(pkg-config --libs hdf5-openmpi openblas libpcre2-8 libzstd zlib) -lm -o "$2"
}
