/* cuda/gemm.cu: the CUDA matmul ops (fm_cuda_matmul_fwd/bwd, the twins of
 * src/tensor/cpu/matmul.c) on one column-major GEMM wrapper, fm__gemm_cm,
 * with cuBLAS's semantics: C (m, n) = alpha op(A) op(B) + beta C.
 *
 * Device: cuBLASLt, fp32 in and out, fp32 compute. A plan per shape
 * (transposes, m, n, k, leading dimensions): the descriptors and the algorithm
 * are chosen once, at the first call with that shape, by cuBLASLt's
 * heuristic, and pinned; every later call uses the same algorithm and the
 * same fixed workspace, so results are the same bits run to run. Split-K
 * reductions "in place" in the output (which may use atomics) are excluded.
 * Under the emulator (FM_SIMT) the same wrapper computes the same
 * column-major product on the host (fp32 sums, k increasing), so every call's
 * layouts, transposes and leading dimensions are tested against the CPU op
 * (tests/kernels/emu). The bias (fwd) is a kernel after the GEMM, as on the
 * CPU; dbias uses norm.cu's fixed-grid column partials (no atomics).
 * The CPU op sums in OpenBLAS's order: the results agree within the stated
 * GEMM tolerance, not bitwise. */
#include "cuda_common.cuh"

#include "../elementwise.h"

#ifndef FM_SIMT
#include <cublasLt.h>
#include <cublas_api.h>
#endif

/* ---- the column-major GEMM --------------------------------------------------- */
#ifdef FM_SIMT
void fm__gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p++) {
        const float a = ta ? A[p + i * lda] : A[i + p * lda];
        const float b = tb ? B[j + p * ldb] : B[p + j * ldb];
        acc = acc + a * b;
      }
      float *c = &C[i + j * ldc];
      *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c; /* beta 0: C may hold NaN */
    }
}
#else
#define FM__CHECK_LT(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t fm__s = (call);                                                          \
    if (fm__s != CUBLAS_STATUS_SUCCESS) {                                                   \
      fm__report_call("cuBLASLt", #call, __FILE__, __LINE__, cublasGetStatusString(fm__s)); \
      fm_abort_one(1, "cuBLASLt call failed");                                              \
    }                                                                                       \
  } while (0)

#define FM__GEMM_PLANS    256
#define FM__GEMM_WS_BYTES ((int64_t)32 << 20) /* one fixed workspace: same algorithm inputs every call */

typedef struct FmGemmPlan {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} FmGemmPlan;

static cublasLtHandle_t fm__lt;
static void *fm__lt_ws;
static FmGemmPlan fm__plans[FM__GEMM_PLANS];
static int fm__nplans;

static const FmGemmPlan *fm__gemm_plan(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                       int64_t ldc) {
  for (int i = 0; i < fm__nplans; i++) {
    const FmGemmPlan *p = &fm__plans[i];
    if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldb == ldb &&
        p->ldc == ldc)
      return p;
  }
  if (fm__nplans == FM__GEMM_PLANS)
    fm_abort_one(1, "cuBLASLt: more than %d GEMM shapes in one process (plans are kept per shape)", FM__GEMM_PLANS);
  if (!fm__lt) {
    FM__CHECK_LT(cublasLtCreate(&fm__lt));
    fm__lt_ws = fm_cuda_alloc(FM__GEMM_WS_BYTES);
  }
  FmGemmPlan *p = &fm__plans[fm__nplans];
  p->ta = ta, p->tb = tb, p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldb = ldb, p->ldc = ldc;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  FM__CHECK_LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  FM__CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  FM__CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  FM__CHECK_LT(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, (uint64_t)(ta ? k : m), (uint64_t)(ta ? m : k), lda));
  FM__CHECK_LT(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, (uint64_t)(tb ? n : k), (uint64_t)(tb ? k : n), ldb));
  FM__CHECK_LT(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc));
  cublasLtMatmulPreference_t pref;
  FM__CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = (uint64_t)FM__GEMM_WS_BYTES;
  FM__CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
  FM__CHECK_LT(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  FM__CHECK_LT(cublasLtMatmulAlgoGetHeuristic(fm__lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &best, &found));
  FM__CHECK_LT(cublasLtMatmulPreferenceDestroy(pref));
  if (found < 1)
    fm_abort_one(1, "cuBLASLt: no algorithm for GEMM %c%c m=%lld n=%lld k=%lld", ta ? 'T' : 'N', tb ? 'T' : 'N',
                 (long long)m, (long long)n, (long long)k);
  p->algo = best.algo;
  fm__nplans++;
  return p;
}

void fm__gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const FmGemmPlan *p = fm__gemm_plan(ta, tb, m, n, k, lda, ldb, ldc);
  FM__CHECK_LT(cublasLtMatmul(fm__lt, p->op, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c, &p->algo, fm__lt_ws,
                              (size_t)FM__GEMM_WS_BYTES, fm__cuda_stream()));
}
#endif

/* ---- bias and its gradient --------------------------------------------------- */
static __global__ void fm__bias_add_kernel(float *out, const float *bias, int64_t N, int64_t OC) {
  FM__CUDA_FOR_EACH(i, N * OC) out[i] = fm_addf(out[i], bias[i % OC]);
}

#define FM__CS_COLS   32
#define FM__CS_GROUPS 16
/* dbias[c] += sum_n d[n][c]: thread (c, g) sums rows g, g + 16, ... in
 * double; thread (c, 0) adds the old value and the 16 partials in order. */
static __global__ void fm__colsum_kernel(float *dbias, const float *d, int64_t N, int64_t OC) {
  __shared__ double part[FM__CS_GROUPS][FM__CS_COLS];
  const int tc = threadIdx.x, g = threadIdx.y;
  const int64_t c = (int64_t)blockIdx.x * FM__CS_COLS + tc;
  double a = 0.0;
  if (c < OC)
    for (int64_t n = g; n < N; n += FM__CS_GROUPS) a = fm__dadd(a, (double)d[n * OC + c]);
  part[g][tc] = a;
  __syncthreads();
  if (g == 0 && c < OC) {
    double s = (double)dbias[c];
    for (int k = 0; k < FM__CS_GROUPS; k++) s = fm__dadd(s, part[k][tc]);
    dbias[c] = (float)s;
  }
}

/* ---- the ops: row-major (N, C) tensors are column-major (C, N) ---------------- */
/* out (N, OC) = inp (N, C) @ w^T + bias: column-major out (OC, N) = w^T
 * (w stored (OC, C): column-major (C, OC), transposed) times inp (C, N). */
extern "C" void FM_CUDA_OP(matmul_fwd)(float *out, const float *inp, const float *w, const float *bias, int64_t N,
                                       int64_t C, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  fm__gemm_cm(1, 0, OC, N, C, 1.0f, w, C, inp, C, 0.0f, out, OC);
  if (bias) FM_LAUNCH(fm__bias_add_kernel, fm__cuda_grid(N * OC), FM__CUDA_BLOCK, 0, out, bias, N, OC);
}

extern "C" void FM_CUDA_OP(matmul_bwd)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                       const float *w, int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return;
  /* dinp (N, C) += dout (N, OC) @ w (OC, C): column-major dinp (C, N) += w (C, OC) dout (OC, N) */
  if (dinp) fm__gemm_cm(0, 0, C, N, OC, 1.0f, w, C, dout, OC, 1.0f, dinp, C);
  /* dw (OC, C) += dout^T @ inp: column-major dw (C, OC) += inp (C, N) dout^T (N, OC) */
  if (dw) fm__gemm_cm(0, 1, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
  if (dbias)
    FM_LAUNCH(fm__colsum_kernel, (unsigned)((OC + FM__CS_COLS - 1) / FM__CS_COLS), dim3(FM__CS_COLS, FM__CS_GROUPS), 0,
              dbias, dout, N, OC);
}
