/* cpu/xent.c: the output projection fused with softmax cross-entropy
 * (logits = x w^T, loss_n = logsumexp(logits_n) - logits_n[target_n], as
 * torch.nn.functional.cross_entropy), in vocab chunks so no N x V logits
 * array ever exists (the idea of Liger-Kernel's fused linear cross-entropy).
 *
 * Pass 1, parallel over row blocks: for each vocab chunk in order, the
 * logits tile (one sgemm), then an online logsumexp per row (running max m,
 * running sum l in double) and the target's logit. loss_n = m + log(l) - z_t.
 * Pass 2 (only for gradients), chunk by chunk: row blocks in parallel
 * recompute their logits tile with the same sgemm call (same bits), turn it
 * into dlogits = (softmax - onehot) * weight[n] and add dx += dlogits w_chunk;
 * then dw_chunk += dlogits^T x over all N rows (fm__cpu_gemm's tiles, each
 * summing over N inside one call). Chunks run in order, so dx's sum over the
 * vocabulary has a fixed order too. The loss is summed in double over rows in
 * index order. weight[n] == 0 rows contribute nothing and their target is
 * never read (it may be -1).
 *
 * scratch (fm_cpu_xent_scratch floats): the logits tiles of all rows for one
 * chunk (N x min(V, FM_XENT_VC)), then lse (N floats), then the per-row
 * weighted losses (N doubles, stored through memcpy: scratch is float). */
/* GCC will not if-convert (so not vectorise) the softmax loops' selects
 * while it must preserve FP exception flags; nothing here reads them, and
 * the flag changes no result bit (no reassociation, no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <string.h>

#include "fmhpc/tensor.h"

#include "cpu_ops.h"

#define FM_XENT_VC 2048 /* vocab columns per chunk */
#define FM_XENT_RB 128  /* rows per task */

static int64_t chunk_cols(int64_t V) { return V < FM_XENT_VC ? V : FM_XENT_VC; }

int64_t fm_cpu_xent_scratch(int64_t N, int64_t V) { return N * chunk_cols(V) + 3 * N; }

static int block_masked(const float *weight, int64_t r0, int64_t nr) {
  for (int64_t r = 0; r < nr; r++)
    if (weight[r0 + r] != 0.0f) return 0;
  return 1;
}

/* Pass 1 for rows [r0, r0+nr): lse (float) and weight * loss (double). */
static void lse_block(float *lse, float *loss_d, float *tiles, const float *x, const float *w, const int32_t *targets,
                      const float *weight, int64_t r0, int64_t nr, int64_t C, int64_t V) {
  const int64_t vce = chunk_cols(V);
  float m[FM_XENT_RB], zt[FM_XENT_RB];
  double l[FM_XENT_RB];
  for (int64_t r = 0; r < nr; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0;
    zt[r] = 0.0f;
  }
  float *tile = tiles + r0 * vce;
  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
    fm__cpu_gemm1(0, 1, nr, vc, C, 1.0f, x + r0 * C, C, w + v0 * C, C, 0.0f, tile, vce);
    for (int64_t r = 0; r < nr; r++) {
      float *z = tile + r * vce;
      const int64_t t = weight[r0 + r] != 0.0f ? targets[r0 + r] : -1;
      if (t >= v0 && t < v0 + vc) zt[r] = z[t - v0];
      float mx = m[r];
      for (int64_t c = 0; c < vc; c++) mx = z[c] > mx ? z[c] : mx;
#pragma omp simd
      for (int64_t c = 0; c < vc; c++) z[c] = fm__cpu_expf(z[c] - mx);
      double s = 0.0;
      for (int64_t c = 0; c < vc; c++) s += z[c]; /* in column order */
      l[r] = l[r] * exp((double)m[r] - (double)mx) + s;
      m[r] = mx;
    }
  }
  for (int64_t r = 0; r < nr; r++) {
    const int64_t n = r0 + r;
    const double lsed = (double)m[r] + log(l[r]);
    const double wl = weight[n] != 0.0f ? (double)weight[n] * (lsed - (double)zt[r]) : 0.0;
    lse[n] = (float)lsed;
    memcpy(loss_d + 2 * n, &wl, sizeof wl);
  }
}

/* Pass 2 for rows [r0, r0+nr) of chunk [v0, v0+vc): the tile becomes
 * dlogits = (softmax - onehot) * weight, then dx += dlogits w_chunk. */
static void grad_block(float *dx, float *tiles, const float *lse, const float *x, const float *w,
                       const int32_t *targets, const float *weight, int64_t r0, int64_t nr, int64_t v0, int64_t vc,
                       int64_t C, int64_t V) {
  const int64_t vce = chunk_cols(V);
  float *tile = tiles + r0 * vce;
  if (block_masked(weight, r0, nr)) { /* contributes nothing, and dw reads zeros */
    for (int64_t r = 0; r < nr; r++) memset(tile + r * vce, 0, (size_t)vc * sizeof(float));
    return;
  }
  fm__cpu_gemm1(0, 1, nr, vc, C, 1.0f, x + r0 * C, C, w + v0 * C, C, 0.0f, tile, vce);
  const int bf16 = fm__cpu_bf16_on();
  for (int64_t r = 0; r < nr; r++) {
    const int64_t n = r0 + r;
    float *z = tile + r * vce;
    const float wt = weight[n];
    if (wt == 0.0f) {
      memset(z, 0, (size_t)vc * sizeof(float));
      continue;
    }
    const float L = lse[n];
    const int64_t t = targets[n];
    const float pt = (t >= v0 && t < v0 + vc) ? (fm__cpu_expf(z[t - v0] - L) - 1.0f) * wt : 0.0f;
#pragma omp simd
    for (int64_t c = 0; c < vc; c++) z[c] = fm__cpu_expf(z[c] - L) * wt;
    if (t >= v0 && t < v0 + vc) z[t - v0] = pt;
    if (bf16)
      for (int64_t c = 0; c < vc; c++) z[c] = fm_round_bf16(z[c]);
  }
  if (dx) fm__cpu_gemm1(0, 0, nr, C, vc, 1.0f, tile, vce, w + v0 * C, C, 1.0f, dx + r0 * C, C);
}

double fm_cpu_xent_fwd_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *weight, int64_t N, int64_t C, int64_t V, float *scratch) {
  for (int64_t n = 0; n < N; n++)
    if (weight[n] != 0.0f && (targets[n] < 0 || targets[n] >= V))
      fm_abort_one(1, "cross-entropy: target %d at row %lld is outside [0, %lld)", (int)targets[n], (long long)n,
                   (long long)V);
  fm__cpu_blas_init();
  const float *xq = x, *wq = w;
  if (fm__cpu_bf16_on()) { /* bf16 GEMM operands, fp32 sums (bf16_mode.c) */
    xq = fm__cpu_bf16_copy(0, x, N, C, C);
    wq = fm__cpu_bf16_copy(1, w, V, C, C);
  }
  const int64_t vce = chunk_cols(V);
  float *tiles = scratch, *lse = scratch + N * vce, *loss_d = lse + N;
  const int64_t nrb = (N + FM_XENT_RB - 1) / FM_XENT_RB;
  const int par = nrb > 1 && N * V * C >= ((int64_t)1 << 18);

#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t rb = 0; rb < nrb; rb++) {
    const int64_t r0 = rb * FM_XENT_RB, nr = N - r0 < FM_XENT_RB ? N - r0 : FM_XENT_RB;
    if (block_masked(weight, r0, nr)) {
      const double zero = 0.0;
      for (int64_t n = r0; n < r0 + nr; n++) {
        lse[n] = 0.0f;
        memcpy(loss_d + 2 * n, &zero, sizeof zero);
      }
      continue;
    }
    lse_block(lse, loss_d, tiles, xq, wq, targets, weight, r0, nr, C, V);
  }
  double loss = 0.0;
  for (int64_t n = 0; n < N; n++) { /* in row order */
    double wl;
    memcpy(&wl, loss_d + 2 * n, sizeof wl);
    loss += wl;
  }
  if (!dx && !dw) return loss;

  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t rb = 0; rb < nrb; rb++) {
      const int64_t r0 = rb * FM_XENT_RB, nr = N - r0 < FM_XENT_RB ? N - r0 : FM_XENT_RB;
      grad_block(dx, tiles, lse, xq, wq, targets, weight, r0, nr, v0, vc, C, V);
    }
    /* dw[v0:v0+vc] (vc, C) += dlogits^T (vc, N) @ x (N, C) */
    if (dw) fm__cpu_gemm(1, 0, vc, C, N, 1.0f, tiles, vce, xq, C, 1.0f, dw + v0 * C, C);
  }
  return loss;
}
