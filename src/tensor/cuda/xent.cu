/* cuda/xent.cu: the output projection fused with softmax cross-entropy in
 * vocab chunks, the CUDA twin of src/tensor/cpu/xent.c (same signature, the
 * same scratch: fm_cpu_xent_scratch(N, V) floats, device memory here). No
 * N x V logits tensor: per chunk of vce = (scratch - 3N) / N columns,
 *   pass 1: logits (N, vc) = x @ w[v0:v0+vc]^T (gemm.cu's cuBLASLt wrapper),
 *           then each row's running max and sum of exp (one warp per row, a
 *           fixed butterfly) and its target's logit;
 *   lse = m + log(l) per row; the loss summed on the device in row order in
 *           double (fm__xent_loss_kernel: the sum the host made before, the
 *           same bits), into a device double: xent_fwd_bwd_dev leaves it
 *           there (a training step reads its micro-batches' losses once, at
 *           its end); xent_fwd_bwd copies that one double to the host;
 *   pass 2 (dx or dw): the logits again, dlogits = weight (softmax - onehot)
 *           in place, dx += dlogits @ w_chunk, dw_chunk += dlogits^T @ x.
 * Deterministic (fixed GEMM plans, one writer per element, no atomics); not
 * the CPU's order: tests/kernels/emu states the tolerance. Targets of rows
 * with weight 0 are not read; the CPU op range-checks the others. */
#include "cuda_common.cuh"

#include "../elementwise.h"

#define FM__XE_WARPS 4

static __device__ __forceinline__ float fm__xe_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}
static __device__ __forceinline__ float fm__xe_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fm_addf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Row n of the chunk: (m, l) = running max and sum exp(logit - m); tl = the
 * target's logit when it lies in this chunk. */
static __global__ void fm__xent_lse_kernel(float *m, float *l, float *tl, const float *tiles, int64_t vce,
                                           const int32_t *targets, const float *weight, int64_t N, int64_t v0,
                                           int64_t vc) {
  const int64_t n = (int64_t)blockIdx.x * FM__XE_WARPS + (threadIdx.x >> 5);
  if (n >= N) return;
  const int lane = threadIdx.x & 31;
  const float *z = tiles + n * vce;
  float cm = -INFINITY;
  for (int64_t j = lane; j < vc; j += 32) cm = z[j] > cm ? z[j] : cm;
  cm = fm__xe_warp_max(cm);
  const float m0 = v0 == 0 ? -INFINITY : m[n], mn = cm > m0 ? cm : m0;
  float s = 0.0f;
  for (int64_t j = lane; j < vc; j += 32) s = fm_addf(s, expf(fm_subf(z[j], mn)));
  s = fm__xe_warp_sum(s);
  if (lane == 0) {
    const float l0 = v0 == 0 ? 0.0f : fm_mulf(l[n], expf(fm_subf(m0, mn)));
    m[n] = mn;
    l[n] = fm_addf(l0, s);
    const int64_t t = targets[n];
    if (weight[n] != 0.0f && t >= v0 && t < v0 + vc) tl[n] = z[t - v0];
  }
}

/* lse[n] = m + log(l), in double, rounded once; in place over m. */
static __global__ void fm__xent_finish_kernel(float *lse, const float *l, int64_t N) {
  FM__CUDA_FOR_EACH(n, N) lse[n] = (float)fm__dadd((double)lse[n], log((double)l[n]));
}

/* tiles (N, vc of vce) = weight[n] (exp(z - lse[n]) - [v0 + j == target]). */
static __global__ void fm__xent_dlogits_kernel(float *tiles, int64_t vce, const float *lse, const int32_t *targets,
                                               const float *weight, int64_t N, int64_t v0, int64_t vc) {
  FM__CUDA_FOR_EACH(i, N * vc) {
    const int64_t n = i / vc, j = i - n * vc;
    float *z = tiles + n * vce + j;
    const float wn = weight[n];
    if (wn == 0.0f) {
      *z = 0.0f;
      continue;
    }
    const float p = expf(fm_subf(*z, lse[n]));
    *z = fm_mulf(wn, v0 + j == (int64_t)targets[n] ? fm_subf(p, 1.0f) : p);
  }
}

/* *loss = sum_n weight[n] (lse[n] - tl[n]) over the rows with weight != 0,
 * in row order in double, correctly rounded (never contracted): the sum the
 * host made before this kernel, bit for bit. One block: each chunk's terms
 * are formed in parallel, then thread 0 adds them in row order. */
#define FM__XE_LOSS_THREADS 256
static __global__ void fm__xent_loss_kernel(double *loss, const float *lse, const float *tl, const float *weight,
                                            int64_t N) {
  __shared__ double term[FM__XE_LOSS_THREADS];
  double s = 0.0;
  for (int64_t n0 = 0; n0 < N; n0 += FM__XE_LOSS_THREADS) {
    const int64_t n = n0 + threadIdx.x;
    if (n < N)
      term[threadIdx.x] =
          weight[n] != 0.0f ? fm__dmul((double)weight[n], fm__dadd((double)lse[n], -(double)tl[n])) : 0.0;
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t k = N - n0 < FM__XE_LOSS_THREADS ? N - n0 : FM__XE_LOSS_THREADS;
      for (int64_t j = 0; j < k; j++)
        if (weight[n0 + j] != 0.0f) s = fm__dadd(s, term[j]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = s;
}

/* Both ops: the loss into the device double *loss_d. */
static void fm__xent(float *dx, float *dw, const float *x, const float *w, const int32_t *targets, const float *weight,
                     int64_t N, int64_t C, int64_t V, float *scratch, double *loss_d) {
  const int64_t vce = (fm_cpu_xent_scratch(N, V) - 3 * N) / N;
  float *tiles = scratch, *m = scratch + N * vce, *l = m + N, *tl = l + N;
  const unsigned rows = (unsigned)((N + FM__XE_WARPS - 1) / FM__XE_WARPS);
  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
    /* column-major tiles (vc of vce, N) = w_chunk (C, vc)^T x (C, N) */
    fm__gemm_cm(1, 0, vc, N, C, 1.0f, w + v0 * C, C, x, C, 0.0f, tiles, vce);
    FM_LAUNCH(fm__xent_lse_kernel, rows, 32 * FM__XE_WARPS, 0, m, l, tl, tiles, vce, targets, weight, N, v0, vc);
  }
  FM_LAUNCH(fm__xent_finish_kernel, fm__cuda_grid(N), FM__CUDA_BLOCK, 0, m, l, N);
  FM_LAUNCH(fm__xent_loss_kernel, 1, FM__XE_LOSS_THREADS, 0, loss_d, m, tl, weight, N);
  if (!dx && !dw) return;
  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
    fm__gemm_cm(1, 0, vc, N, C, 1.0f, w + v0 * C, C, x, C, 0.0f, tiles, vce);
    FM_LAUNCH(fm__xent_dlogits_kernel, fm__cuda_grid(N * vc), FM__CUDA_BLOCK, 0, tiles, vce, m, targets, weight, N, v0,
              vc);
    /* dx (N, C) += dlogits (N, vc) @ w_chunk (vc, C): column-major dx (C, N) += w_chunk (C, vc) tiles (vc, N) */
    if (dx) fm__gemm_cm(0, 0, C, N, vc, 1.0f, w + v0 * C, C, tiles, vce, 1.0f, dx, C);
    /* dw_chunk (vc, C) += dlogits^T @ x: column-major dw_chunk (C, vc) += x (C, N) tiles^T (N, vc) */
    if (dw) fm__gemm_cm(0, 1, C, vc, N, 1.0f, x, C, tiles, vce, 1.0f, dw + v0 * C, C);
  }
}

extern "C" void *FM_CUDA_OP(alloc)(int64_t bytes);
extern "C" void FM_CUDA_OP(memset)(void *p, int value, int64_t bytes);
extern "C" void FM_CUDA_OP(copy_to_host)(void *host_dst, const void *src, int64_t bytes);

extern "C" void FM_CUDA_OP(xent_fwd_bwd_dev)(float *dx, float *dw, const float *x, const float *w,
                                             const int32_t *targets, const float *weight, int64_t N, int64_t C,
                                             int64_t V, float *scratch, double *loss_out) {
  if (N <= 0) {
    FM_CUDA_OP(memset)(loss_out, 0, (int64_t)sizeof *loss_out);
    return;
  }
  fm__xent(dx, dw, x, w, targets, weight, N, C, V, scratch, loss_out);
}

static double *fm__xe_loss_d; /* the returning op's device double, made at its first call */

extern "C" double FM_CUDA_OP(xent_fwd_bwd)(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                                           const float *weight, int64_t N, int64_t C, int64_t V, float *scratch) {
  if (N <= 0) return 0.0;
  if (!fm__xe_loss_d) fm__xe_loss_d = (double *)FM_CUDA_OP(alloc)((int64_t)sizeof(double));
  fm__xent(dx, dw, x, w, targets, weight, N, C, V, scratch, fm__xe_loss_d);
  double loss = 0.0;
  FM_CUDA_OP(copy_to_host)(&loss, fm__xe_loss_d, (int64_t)sizeof loss); /* waits for the backward GEMMs too */
  return loss;
}
