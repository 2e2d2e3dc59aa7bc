/* cuda/embedding.cu: token (+ learned position) embedding lookup and its
 * deterministic backward, the CUDA twins of src/tensor/cpu/embedding.c.
 *
 * Backward without atomics, in the CPU op's order: the CPU adds dout rows
 * into dwte[tokens[n]] for n = 0, 1, ... in order. Here one warp per row n
 * first looks (32 tokens a step, with a ballot) for an earlier row with the
 * same token; if there is one, that row's warp does the work. Otherwise this
 * warp owns the token: it walks rows n, n+1, ... and adds every row with that
 * token, in increasing n, each lane over its columns. So each element of dwte
 * gets the same adds in the same order as on the CPU: the same bits, for any
 * schedule. dwpe alike, grouped by position. The cost is O(N^2 / 32) token
 * reads per call (2M for N = 8192), from L2. Tokens and positions are not
 * range-checked here (the CPU op checks; the data loader checks on the host). */
#include "cuda_common.cuh"

#include "../elementwise.h"

#define FM__EMB_WARPS 4

static __global__ void fm__embedding_fwd_kernel(float *out, const int32_t *tokens, const float *wte, const int32_t *pos,
                                                const float *wpe, int64_t N, int64_t C) {
  const int64_t n = (int64_t)blockIdx.x * FM__EMB_WARPS + (threadIdx.x >> 5);
  if (n >= N) return;
  const float *te = wte + (int64_t)tokens[n] * C;
  const float *pe = wpe ? wpe + (int64_t)pos[n] * C : NULL;
  float *o = out + n * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) o[c] = pe ? fm_addf(te[c], pe[c]) : te[c];
}

/* 1 when some row m < n has key[m] == key[n] (every lane gets the answer). */
static __device__ int fm__seen_before(const int32_t *key, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int32_t k = key[n];
  for (int64_t m0 = 0; m0 < n; m0 += 32) {
    const int64_t m = m0 + lane;
    const int hit = m < n && key[m] == k;
    if (__any_sync(0xffffffffu, hit)) return 1;
  }
  return 0;
}

/* grad[key[n]] += dout[m] for every m >= n with key[m] == key[n], m in order. */
static __device__ void fm__scatter_rows(float *grad, const float *dout, const int32_t *key, int64_t n, int64_t N,
                                        int64_t C) {
  const int lane = threadIdx.x & 31;
  const int32_t k = key[n];
  float *g = grad + (int64_t)k * C;
  for (int64_t m0 = n; m0 < N; m0 += 32) {
    const int64_t m = m0 + lane;
    unsigned hits = __ballot_sync(0xffffffffu, m < N && key[m] == k);
    while (hits) {
      const int j = __ffs((int)hits) - 1; /* rows in increasing order */
      hits &= hits - 1;
      const float *d = dout + (m0 + j) * C;
      for (int64_t c = lane; c < C; c += 32) g[c] = fm_addf(g[c], d[c]);
    }
  }
}

static __global__ void fm__embedding_bwd_kernel(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                                const int32_t *pos, int64_t N, int64_t C) {
  const int64_t n = (int64_t)blockIdx.x * FM__EMB_WARPS + (threadIdx.x >> 5);
  if (n >= N) return;
  if (dwte && !fm__seen_before(tokens, n)) fm__scatter_rows(dwte, dout, tokens, n, N, C);
  if (dwpe && !fm__seen_before(pos, n)) fm__scatter_rows(dwpe, dout, pos, n, N, C);
}

extern "C" void FM_CUDA_OP(embedding_fwd)(float *out, const int32_t *tokens, const float *wte, const int32_t *pos,
                                          const float *wpe, int64_t N, int64_t C) {
  if (wpe && !pos) fm_abort_one(1, "embedding: wpe given without positions");
  if (N <= 0 || C <= 0) return;
  FM_LAUNCH(fm__embedding_fwd_kernel, (unsigned)((N + FM__EMB_WARPS - 1) / FM__EMB_WARPS), 32 * FM__EMB_WARPS, 0, out,
            tokens, wte, pos, wpe, N, C);
}

extern "C" void FM_CUDA_OP(embedding_bwd)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                          const int32_t *pos, int64_t N, int64_t C, int64_t V) {
  (void)V; /* the CPU op range-checks tokens against V; see above */
  if (dwpe && !pos) fm_abort_one(1, "embedding backward: dwpe given without positions");
  if (N <= 0 || C <= 0 || (!dwte && !dwpe)) return;
  FM_LAUNCH(fm__embedding_bwd_kernel, (unsigned)((N + FM__EMB_WARPS - 1) / FM__EMB_WARPS), 32 * FM__EMB_WARPS, 0, dwte,
            dwpe, dout, tokens, pos, N, C);
}
