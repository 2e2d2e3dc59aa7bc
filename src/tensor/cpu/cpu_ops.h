/* cpu/cpu_ops.h: what the CPU model ops share, private to src/tensor/cpu/:
 * the deterministic tiled GEMM (fm__cpu_gemm, in matmul.c), the one-call GEMM
 * used inside already-parallel tiles (fm__cpu_gemm1), the bf16-emulation
 * switch and its grow-once buffers (bf16_mode.c), and a vectorisable expf for
 * softmax (attention.c, xent.c). The public contracts are in
 * include/fmhpc/backend.h.
 *
 * Determinism (DESIGN section 6): OpenBLAS 0.3.21 is not bit-stable across its
 * thread counts, nor is a row subset of a product computed alone bit-equal to
 * the same rows inside a larger call (its edge micro-kernels sum in another
 * order). So every GEMM here is cut into tiles whose boundaries depend only on
 * the shapes, each tile is one single-threaded cblas_sgemm call, and OpenMP
 * runs the tiles. The same shapes then make the same calls, whatever the
 * thread count. */
#ifndef FMHPC_TENSOR_CPU_OPS_H
#define FMHPC_TENSOR_CPU_OPS_H

#include <stdint.h>
#include <string.h>

#include "../elementwise.h"

/* C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major; op(A) is A (M, K)
 * or, with transA, A^T for A stored (K, M); likewise op(B) is B (K, N) or
 * B^T for B stored (N, K). OpenMP over fixed tiles of C; each element's sum
 * over K runs inside one single-threaded sgemm call, so its bits do not
 * depend on the thread count. Call from outside any parallel region. */
void fm__cpu_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The same product as one single-threaded sgemm call (inside a parallel
 * region, on a tile the caller owns). */
void fm__cpu_gemm1(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The order fm__cpu_gemm hands a parallel region's tiles out in (matmul.c):
 * order[0..n) becomes a permutation of the tile indices 0..n-1 such that
 * `threads` threads taking the next tile as each frees (schedule(dynamic, 1)),
 * at equal speed, finish when a balanced assignment of the tiles' costs
 * (cost[i], any unit) says: longest first, then the most and least loaded
 * threads' tiles re-split exactly (a subset sum), repeatedly. Only the order
 * changes, never a tile's call, so never a bit. With equal costs, one thread,
 * or more than FM__GEMM_PLAN_MAX tiles it leaves the identity. Returns the
 * planned finishing time (the identity's under that schedule otherwise). */
#define FM__GEMM_PLAN_MAX 64
double fm__cpu_gemm_plan(int64_t *order, const double *cost, int64_t n, int threads);
/* Pins OpenBLAS to one thread (once per process; cheap afterwards). */
void fm__cpu_blas_init(void);

/* bf16 emulation (fm_cpu_set_compute_bf16). */
int fm__cpu_bf16_on(void);
/* x rounded to bf16 in one of FM__BF16_SLOTS buffers that grow to the largest
 * size asked for and are kept: after the first step nothing is allocated. */
#define FM__BF16_SLOTS 3
const float *fm__cpu_bf16_copy(int slot, const float *x, int64_t rows, int64_t cols, int64_t ld);

/* The clones of the vectorised loops (elementwise, norm, attention softmax,
 * cross-entropy, bias and column sums): GCC builds each function for AVX-512F,
 * for AVX2 and for the baseline, and picks one at load by cpuid. Each lane
 * does the same IEEE operations in the same order on every path, and none of
 * these loops reduces across lanes, so all three give the same bits; FMA is
 * enabled by none of the three targets, and -ffp-contract=off forbids
 * contraction anyway. Measured on the nano Llama cross-entropy (C 128, V
 * 50257, one thread, best of 4 interleaved): AVX2 285 ms, AVX-512 248 ms. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FM_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FM_CPU_CLONES
#endif

/* exp(x) in float, for softmax arguments (x <= 0 in practice): Cody-Waite
 * reduction x = k ln2 + r, |r| <= ln2/2, Cephes' degree-6 expf polynomial
 * (relative error about 1 ulp), 2^k built in the exponent bits. Returns 0 for
 * x < -87 (so exp(-inf) = 0 and masked scores vanish exactly), NaN for NaN;
 * valid up to x = 88. Branch-free, so `#pragma omp simd` loops vectorise it;
 * plain + and * under -ffp-contract=off give the same bits scalar or vector. */
static inline float fm__cpu_expf(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc >= -88.0f ? xc : -88.0f; /* NaN lands here too: no UB in the int cast */
  const float kf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - kf * 0.693359375f;                                         /* ln2 high part, exact product */
  r = r + kf * 2.12194440e-4f;                                              /* ln2 low part */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = (p * r) * r + r + 1.0f;
  const float two_k = fm_bits_f32((uint32_t)((int32_t)kf + 127) << 23);
  const float e = y * two_k;
  return x != x ? x : (x < -87.0f ? 0.0f : e);
}

#endif
