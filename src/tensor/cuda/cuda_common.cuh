/* cuda_common.cuh: what every file in src/tensor/cuda/ needs: the C headers,
 * the CUDA runtime (or, under FM_SIMT, the host emulator emu/simt.h), the
 * stream the ops run on, one launch spelling for both, and the launch shape of
 * the elementwise kernels. Private to src/tensor/cuda/.
 *
 * Every .cu here is compiled twice: by nvcc into the library, and by
 * g++ -x c++ -DFM_SIMT -ffp-contract=off into the emulated kernel tests
 * (tests/kernels/emu), where its host wrappers are named fm_simt_<op>
 * instead of fm_cuda_<op> (FM_CUDA_OP) so both can sit in one program. */
#ifndef FMHPC_TENSOR_CUDA_COMMON_CUH
#define FMHPC_TENSOR_CUDA_COMMON_CUH

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/backend.h" /* C headers carry their own extern "C" */
#include "fmhpc/core.h"

#ifdef FM_SIMT
#include "emu/simt.h"
#define FM_CUDA_OP(name) fm_simt_##name
/* kernel<<<grid, block, smem, stream>>>(args) */
#define FM_LAUNCH(kernel, grid, block, smem, ...) FM_SIMT_LAUNCH(kernel, grid, block, smem, __VA_ARGS__)
#define FM_DYN_SMEM(T, name)                      FM_SIMT_DYN_SMEM(T, name)
#else
#include <cuda_runtime.h>
#define FM_CUDA_OP(name) fm_cuda_##name
/* The stream set with fm_cuda_set_stream (memory.cu). */
static inline cudaStream_t fm__cuda_stream(void) { return (cudaStream_t)fm_cuda_get_stream(); }

/* Checked calls (memory.cu): a failure is reported with the library, the
 * call's text, file:line, the rank (fm_err's prefix) and the device this
 * thread is bound to, then the job ends (no step continues after a failed
 * CUDA call). FM_CUDA_CHECK adds, for cudaErrorInsufficientDriver, the
 * driver's and the runtime's CUDA versions and what to do, and for
 * cudaErrorMemoryAllocation the device's free/total memory. Other libraries
 * (cuBLASLt) pass their status string to fm__cuda_fail. */
[[noreturn]] void fm__cuda_fail(const char *lib, const char *call, const char *file, int line, const char *what);
[[noreturn]] void fm__cuda_fail_code(const char *call, const char *file, int line, cudaError_t e);
#define FM_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    cudaError_t fm__ce = (call);                                                      \
    if (fm__ce != cudaSuccess) fm__cuda_fail_code(#call, __FILE__, __LINE__, fm__ce); \
  } while (0)
#define FM_LAUNCH(kernel, grid, block, smem, ...)                        \
  do {                                                                   \
    kernel<<<(grid), (block), (smem), fm__cuda_stream()>>>(__VA_ARGS__); \
    FM_CUDA_CHECK(cudaGetLastError());                                   \
  } while (0)
#define FM_DYN_SMEM(T, name) extern __shared__ T name[]
#endif

/* Device buffers an op keeps between calls (built on the first call, as
 * the CPU op's tables): device memory, or host memory under the emulator. */
#ifdef FM_SIMT
static inline void *fm__dev_alloc(int64_t bytes) {
  void *p = malloc((size_t)(bytes > 0 ? bytes : 1));
  if (!p) fm_abort_one(1, "simt: out of host memory for a %lld-byte device buffer", (long long)bytes);
  return p;
}
static inline void *fm__dev_alloc_for(int64_t bytes, FmMemItem item) {
  (void)item;
  return fm__dev_alloc(bytes);
}
static inline void fm__dev_free(void *p) { free(p); }
static inline void fm__dev_upload(void *dst, const void *src, int64_t bytes) { memcpy(dst, src, (size_t)bytes); }
#else
static inline void *fm__dev_alloc(int64_t bytes) { return fm_cuda_alloc_for(bytes, "a CUDA op's work buffer", 0); }
/* A buffer that is one of the run's planned items (its name and the plan's
 * figure in an out-of-memory report). */
static inline void *fm__dev_alloc_for(int64_t bytes, FmMemItem item) {
  return fm_cuda_alloc_for(bytes, fm_mem_item_name(item), fm_mem_plan_get(item));
}
static inline void fm__dev_free(void *p) { fm_cuda_free(p); }
static inline void fm__dev_upload(void *dst, const void *src, int64_t bytes) {
  fm_cuda_copy_to_device(dst, src, bytes);
}
#endif

/* gemm.cu's column-major GEMM (cuBLAS semantics: C (m, n) = alpha op(A)
 * op(B) + beta C; ta/tb: op = transpose), for the ops built on GEMMs (matmul,
 * xent); bf16 operands when compute_bf16 is on. Named per build like the ops,
 * so both builds link into one test; C linkage, so the C tests call it. */
#define fm__gemm_cm FM_CUDA_OP(gemm_cm)
extern "C" void fm__gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* The compute_bf16 switch (set_compute_bf16, gemm.cu): 1 when GEMM operands
 * are bf16 (fp32 accumulation), 0 for fp32. Kernels that choose a tensor-core
 * path by precision (attention) read it on the host, per call. */
#define fm__cuda_compute_bf16 FM_CUDA_OP(compute_bf16)
extern "C" int fm__cuda_compute_bf16(void);

/* Elementwise kernels: 256 threads a block, grid-stride loops with int64
 * indices (n may exceed 2^31), and at most FM__CUDA_MAX_BLOCKS blocks: enough
 * to fill an H200 (132 SMs x 8 resident blocks) many times over, small enough
 * that each thread does several elements on huge arrays. */
#define FM__CUDA_BLOCK      256
#define FM__CUDA_MAX_BLOCKS 16384
static inline unsigned fm__cuda_grid(int64_t n) {
  int64_t blocks = (n + FM__CUDA_BLOCK - 1) / FM__CUDA_BLOCK;
  return (unsigned)(blocks < FM__CUDA_MAX_BLOCKS ? blocks : FM__CUDA_MAX_BLOCKS);
}
#define FM__CUDA_FOR_EACH(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Correctly rounded double arithmetic, never contracted (the CPU ops' row
 * statistics are double sums; elementwise.h has the float ones). */
static __device__ __forceinline__ double fm__dadd(double a, double b) { return __dadd_rn(a, b); }
static __device__ __forceinline__ double fm__dmul(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ double fm__ddiv(double a, double b) { return __ddiv_rn(a, b); }
static __device__ __forceinline__ double fm__dsqrt(double a) { return __dsqrt_rn(a); }

/* Warp reductions with a fixed butterfly: every lane ends with the same sum,
 * combined in the same order whatever the schedule. */
static __device__ __forceinline__ double fm__warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fm__dadd(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

#endif
