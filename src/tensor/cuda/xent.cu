/* cuda/xent.cu: the output projection fused with softmax cross-entropy in
 * vocab chunks, the CUDA twin of src/tensor/cpu/xent.c (same signature, the
 * same scratch: fm_cpu_xent_scratch(N, V) floats, device memory here). No
 * N x V logits tensor: per chunk of vce = (scratch - 3N) / N columns,
 *   pass 1: logits (N, vc) = x @ w[v0:v0+vc]^T (gemm.cu's cuBLASLt wrapper),
 *           then each row's running max and sum of exp (one warp per row, a
 *           fixed butterfly) and its target's logit;
 *   lse = m + log(l) per row; the loss is summed on the host in row order
 *           (the op returns it: one copy of 2N floats, the op's only sync);
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

static float *fm__xe_host; /* 2N floats: lse and target logits, grown once */
static int64_t fm__xe_host_n;

extern "C" double FM_CUDA_OP(xent_fwd_bwd)(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                                           const float *weight, int64_t N, int64_t C, int64_t V, float *scratch) {
  if (N <= 0) return 0.0;
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
  /* the loss, in row order, on the host */
  if (fm__xe_host_n < N) {
    free(fm__xe_host);
    fm__xe_host = (float *)fm_xmalloc((size_t)(3 * N) * sizeof(float));
    fm__xe_host_n = N;
  }
  float *hl = fm__xe_host, *ht = hl + N, *hw = ht + N;
#ifdef FM_SIMT
  memcpy(hl, m, (size_t)N * sizeof(float));
  memcpy(ht, tl, (size_t)N * sizeof(float));
  memcpy(hw, weight, (size_t)N * sizeof(float));
#else
  fm_cuda_copy_to_host(hl, m, N * (int64_t)sizeof(float));
  fm_cuda_copy_to_host(ht, tl, N * (int64_t)sizeof(float));
  fm_cuda_copy_to_host(hw, weight, N * (int64_t)sizeof(float));
#endif
  double loss = 0.0;
  for (int64_t n = 0; n < N; n++)
    if (hw[n] != 0.0f) loss += (double)hw[n] * ((double)hl[n] - (double)ht[n]);
  if (!dx && !dw) return loss;
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
  return loss;
}
