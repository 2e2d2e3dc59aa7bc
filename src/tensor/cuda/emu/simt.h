/* emu/simt.h: the host SIMT emulator that runs the project's CUDA kernels
 * (the .cu files of src/tensor/cuda/, compiled with g++ -x c++ -DFM_SIMT) on small shapes
 * in CI, where there is no GPU. Only ever included by cuda_common.cuh under
 * FM_SIMT and by the emulated tests; nvcc never sees it.
 *
 * Model. Blocks run one after another on the calling thread. The threads of a
 * block are fibers (own stacks, a few instructions of assembly to switch on
 * x86-64, ucontext elsewhere) switched cooperatively only at __syncthreads,
 * __syncwarp, the warp shuffles and the warp-collective tensor-core
 * instructions (mma.cuh). Every launch runs under the current schedule:
 *   FM_SIMT_FORWARD  threads in increasing linear id at every turn,
 *   FM_SIMT_REVERSE  decreasing,
 *   FM_SIMT_RANDOM   a fresh seeded shuffle at every turn of every block,
 * so a missing barrier, a race through shared or global memory across a
 * barrier-free region, or an order-dependent atomic gives different bits under
 * different schedules. Reported and aborted (with the block and the threads):
 * a barrier that some threads never reach (deadlock, including threads that
 * returned while others wait), lanes of one warp in different warp
 * collectives (a shuffle against an mma, say),
 * a shuffle whose mask leaves out live lanes, a warp collective in a partial
 * warp. Dynamic shared memory starts as 0xFF bytes (NaN floats).
 *
 * Not modelled: concurrency between blocks (no grid-wide sync, no inter-block
 * spin waits), the memory model (a race without a barrier between two warps
 * shows up only through the schedules), a missing __syncwarp between shared
 * memory steps of one warp, streams and events, device math functions (the
 * host's libm is used: kernels that must match bits use explicitly rounded
 * operations), texture/cp.async/TMA/clusters. */
#ifndef FMHPC_TENSOR_CUDA_EMU_SIMT_H
#define FMHPC_TENSOR_CUDA_EMU_SIMT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the C interface the tests use -------------------------------------- */
typedef enum { FM_SIMT_FORWARD = 0, FM_SIMT_REVERSE = 1, FM_SIMT_RANDOM = 2 } FmSimtOrder;
void fm_simt_set_schedule(FmSimtOrder order, uint64_t seed);
FmSimtOrder fm_simt_schedule(void);
const char *fm_simt_schedule_name(void); /* "forward", "reverse", "random(seed)" */
/* Counters since the last reset: launches, blocks, threads, fiber switches. */
typedef struct FmSimtStats {
  uint64_t launches, blocks, threads, switches;
} FmSimtStats;
void fm_simt_stats(FmSimtStats *s);
void fm_simt_reset_stats(void);
/* The emulated runtime's memory calls since the start, whoever made them (the
 * backend table or a kernel file's own call): allocations, reads
 * (copy_to_host), waiting uploads (copy_to_device), synchronize calls and
 * queued uploads (copy_to_device_async). On a GPU the middle three wait for
 * the stream: host syncs. */
typedef struct FmSimtMemCalls {
  uint64_t allocs, reads, uploads, syncs, queued;
} FmSimtMemCalls;
void fm_simt_mem_calls(FmSimtMemCalls *c);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* ---- the CUDA C spellings the kernels use (C++ only) ---------------------- */
#include <cmath>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__    __attribute__((noinline))
#define __launch_bounds__(...)
/* One block at a time on one host thread: a static is per block in effect. */
#define __shared__ static
#define __restrict__ __restrict

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

namespace fmsim {

typedef void (*Body)(void *);

/* The running thread's coordinates (valid inside a kernel). */
struct Coord {
  dim3 tid, bid, bdim, gdim;
  int linear; /* threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z) */
};
extern Coord *g_cur;
extern unsigned char *g_dyn_smem;

void launch_impl(dim3 grid, dim3 block, size_t smem, Body body, void *ctx);
template <class F>
static void body_thunk(void *p) {
  (*static_cast<F *>(p))();
}
template <class F>
void launch(dim3 grid, dim3 block, size_t smem, F &&f) {
  launch_impl(grid, block, smem, body_thunk<typename std::remove_reference<F>::type>, &f);
}

/* Barriers and warp collectives; `site` is the caller's return address. */
void syncthreads(const void *site);
void syncwarp(unsigned mask, const void *site);
uint64_t shfl(uint64_t bits, unsigned mask, int src_lane, const void *site);
unsigned ballot(unsigned mask, int pred, const void *site);
enum CollOp { COLL_SYNCWARP = 1, COLL_SHFL, COLL_MMA_16816_BF16, COLL_LDMATRIX, COLL_BALLOT };
/* Deposit 8 words, wait for the whole warp (all in `op`), get every lane's
 * deposit (32 x 8 words, valid until this lane's next collective). */
const uint32_t (*exchange(int op, const uint32_t mine[8], const void *site))[8];
int lane_id();
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
}  // namespace fmsim

#define threadIdx (fmsim::g_cur->tid)
#define blockIdx  (fmsim::g_cur->bid)
#define blockDim  (fmsim::g_cur->bdim)
#define gridDim   (fmsim::g_cur->gdim)
#define warpSize  32

#define FM_SIMT_SITE __builtin_return_address(0)
__attribute__((noinline)) inline void __syncthreads() { fmsim::syncthreads(FM_SIMT_SITE); }
__attribute__((noinline)) inline void __syncwarp(unsigned mask = 0xffffffffu) { fmsim::syncwarp(mask, FM_SIMT_SITE); }
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace fmsim {
template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}
/* CUDA's width rule: lanes form groups of `width`; a source outside the
 * caller's group (per the intrinsic) returns the caller's own value, signalled
 * here by src = -1. */
inline int seg_base(int lane, int width) { return lane & ~(width - 1); }
}  // namespace fmsim

template <class T>
__attribute__((noinline)) T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  int l = fmsim::lane_id();
  int s = fmsim::seg_base(l, width) + (src & (width - 1));
  return fmsim::from_bits<T>(fmsim::shfl(fmsim::to_bits(v), mask, s, FM_SIMT_SITE));
}
template <class T>
__attribute__((noinline)) T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  int l = fmsim::lane_id();
  int s = l ^ lane_mask;
  if (s >= fmsim::seg_base(l, width) + width) s = -1; /* later groups: own value */
  return fmsim::from_bits<T>(fmsim::shfl(fmsim::to_bits(v), mask, s, FM_SIMT_SITE));
}
template <class T>
__attribute__((noinline)) T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int l = fmsim::lane_id();
  int s = l + (int)delta;
  if (s >= fmsim::seg_base(l, width) + width) s = -1;
  return fmsim::from_bits<T>(fmsim::shfl(fmsim::to_bits(v), mask, s, FM_SIMT_SITE));
}
template <class T>
__attribute__((noinline)) T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int l = fmsim::lane_id();
  int s = l - (int)delta;
  if (s < fmsim::seg_base(l, width)) s = -1;
  return fmsim::from_bits<T>(fmsim::shfl(fmsim::to_bits(v), mask, s, FM_SIMT_SITE));
}

__attribute__((noinline)) inline unsigned __ballot_sync(unsigned mask, int pred) {
  return fmsim::ballot(mask, pred, FM_SIMT_SITE);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, !pred) == 0; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

/* Atomics: one thread runs at a time, so a plain read-modify-write is atomic.
 * The order of the adds follows the schedule, as on a GPU it follows timing. */
inline float atomicAdd(float *p, float v) {
  float o = *p;
  *p = o + v;
  return o;
}
inline int atomicAdd(int *p, int v) {
  int o = *p;
  *p = o + v;
  return o;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  unsigned o = *p;
  *p = o + v;
  return o;
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  unsigned long long o = *p;
  *p = o + v;
  return o;
}
inline int atomicOr(int *p, int v) {
  int o = *p;
  *p = o | v;
  return o;
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
  unsigned o = *p;
  *p = o > v ? o : v;
  return o;
}

/* Correctly rounded arithmetic: the host's IEEE operations (-ffp-contract=off). */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline unsigned __float_as_uint(float x) { return fmsim::from_bits<unsigned>(fmsim::to_bits(x)); }
inline float __uint_as_float(unsigned u) { return fmsim::from_bits<float>(fmsim::to_bits(u)); }
inline long long __double_as_longlong(double x) { return fmsim::from_bits<long long>(fmsim::to_bits(x)); }
inline double __longlong_as_double(long long u) { return fmsim::from_bits<double>(fmsim::to_bits(u)); }
inline double __ll2double_rn(long long v) { return (double)v; }
inline long long __double2ll_rn(double x) { return std::llrint(x); } /* default mode: nearest even */
inline float __double2float_rn(double x) { return (float)x; } /* default mode: nearest even */

/* Launch spelling for both compilers (<<< >>> is not C++). */
#define FM_SIMT_LAUNCH(kernel, grid, block, smem, ...) \
  fmsim::launch((grid), (block), (smem), [=] { kernel(__VA_ARGS__); })
#define FM_SIMT_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(fmsim::g_dyn_smem)

#endif /* __cplusplus */
#endif
