/* cpu/xent.c: the output projection fused with softmax cross-entropy
 * (logits = x w^T, loss_n = logsumexp(logits_n) - logits_n[target_n], as
 * torch.nn.functional.cross_entropy), in row blocks so no N x V logits array
 * ever exists (the idea of Liger-Kernel's fused linear cross-entropy), and
 * each logit is made once: three products (logits, dx, dw), no recompute.
 *
 * Rows go in blocks of FM_XENT_RS, one after another; a block's logits
 * (RS x V) are held whole in scratch. Per FM_XENT_RB rows (the tasks, in
 * parallel), vocab chunk by chunk in order, while the tile is in cache:
 *  1. the logits tile (one sgemm) and each row's online logsumexp step
 *     (running max m, running sum l in double) and target logit; then
 *     loss_n = m + log(l) - z_t;
 *  2. (with gradients) the tile becomes dlogits = (softmax - onehot) *
 *     weight[n] in place and dx rows += dlogits w_chunk (one sgemm,
 *     accumulating, the chunks in order);
 * then, for the whole block, 3. dw (V, C) += dlogits^T x (fm__cpu_gemm's
 * fixed tiles, the sum over the block's rows inside one call per tile).
 * The loss is summed in double over rows in index order. Every call and
 * order is fixed by N, V and C, never by the thread count. The loss, lse and
 * dx have the bits of the earlier two-pass form (which made the logits twice,
 * once for lse and once for the gradient, with the same tile calls); dw sums
 * over rows block by block (RS rows a call) where it summed all N in one.
 * weight[n] == 0 rows contribute nothing and their target is never read (it
 * may be -1).
 *
 * scratch (fm_cpu_xent_scratch floats): one row block's logits
 * (min(N, RS) x V), then lse (N floats), then the per-row weighted losses
 * (N doubles, stored through memcpy: scratch is float). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <string.h>

#include "fmhpc/tensor.h"

#include "cpu_ops.h"

/* The sizes. Each logits call (RB x VC, K = C) packs its VC x C slice of w
 * again, and each dx call (RB x C, K = VC) the same slice, so w is copied
 * twice per RB rows: the copies per multiply-add fall as RB grows. Measured
 * on the GPT-2 124M head (N 1024, C 768, V 50257, 2 threads, 2-vCPU Zen 5,
 * OpenBLAS Haswell kernel, best of 3, interleaved): RB 128 1445-1517 ms,
 * RB 256 1398-1466 ms (4% less), RB 512 with RS 1024 1366-1395 ms; in the
 * whole step (bench/step_cpu/profile.sh) OpenBLAS's panel packing fell from
 * 9.0-9.4% of the samples to 7.8-8.1%. RB 256 keeps two tasks a block for
 * two threads at RS 512 (RB 512 would need RS 1024: twice the scratch, and
 * still one task a thread). The calls' shapes set the bits (matmul.c), so
 * changing a size changes them (regression/reference/bits_guard*.txt); a
 * build may set them (-DFM_XENT_RB=... in CMAKE_C_FLAGS) to measure. */
#ifndef FM_XENT_VC
#define FM_XENT_VC 2048 /* vocab columns per logits call */
#endif
#ifndef FM_XENT_RB
#define FM_XENT_RB 256 /* rows per logits and dx call */
#endif
#ifndef FM_XENT_RS
#define FM_XENT_RS 512 /* rows per block held whole (a multiple of FM_XENT_RB) */
#endif
#if FM_XENT_VC < 1 || FM_XENT_RB < 1 || FM_XENT_RS < FM_XENT_RB || FM_XENT_RS % FM_XENT_RB
#error "FM_XENT_VC, FM_XENT_RB must be positive and FM_XENT_RS a multiple of FM_XENT_RB"
#endif

#define FM_XENT_G 8 /* rows whose sums of exp run side by side (no effect on bits) */

/* The elementwise passes vectorise (fm__cpu_expf is branch-free); their
 * clones (FM_CPU_CLONES, cpu_ops.h) give the same bits. */

static int64_t chunk_cols(int64_t V) { return V < FM_XENT_VC ? V : FM_XENT_VC; }

int64_t fm_cpu_xent_scratch(int64_t N, int64_t V) { return (N < FM_XENT_RS ? N : FM_XENT_RS) * V + 3 * N; }

static int rows_masked(const float *weight, int64_t r0, int64_t nr) {
  for (int64_t r = 0; r < nr; r++)
    if (weight[r0 + r] != 0.0f) return 0;
  return 1;
}

/* max(m, z[0..n)) ignoring NaN z, in 8 lanes and then the lanes: the same
 * value as the scan in column order (the maximum of a set does not depend on
 * the order; only a zero maximum's sign could, and its uses, differences
 * inside exp and m + log(l) with l >= 1, give the same bits for +0 and -0). */
static inline float chunk_max(const float *z, int64_t n, float m) {
  typedef float v8f __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  v8f lane = {m, m, m, m, m, m, m, m};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    v8f zc;
    memcpy(&zc, z + c, sizeof zc);
    const v8i gt = zc > lane; /* all ones where z > lane (never for a NaN z) */
    lane = (v8f)(((v8i)zc & gt) | ((v8i)lane & ~gt));
  }
  float mx = m;
  for (int j = 0; j < 8; j++) mx = lane[j] > mx ? lane[j] : mx;
  for (; c < n; c++) mx = z[c] > mx ? z[c] : mx;
  return mx;
}

/* Rows [r0, r0+nr) (global row numbers; their logits at Z, row stride V):
 * for each vocab chunk in order, the logits tile (one sgemm) and, while it is
 * in cache, each row's online logsumexp step and target logit; then lse and
 * weight * loss. Each row's sum of exp runs in double in column order, a
 * chain of dependent additions: FM_XENT_G rows' chains run side by side
 * (independent, so the additions overlap) and each row keeps its order and
 * its bits. */
FM_CPU_CLONES static void rows_lse(float *Z, float *lse, float *loss_d, const float *x, const float *w,
                                   const int32_t *targets, const float *weight, int64_t r0, int64_t nr, int64_t C,
                                   int64_t V) {
  const int64_t vce = chunk_cols(V);
  float m[FM_XENT_RB], zt[FM_XENT_RB], e[FM_XENT_G][FM_XENT_VC];
  double l[FM_XENT_RB];
  for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0, zt[r] = 0.0f;
  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
    fm__cpu_gemm1(0, 1, nr, vc, C, 1.0f, x + r0 * C, C, w + v0 * C, C, 0.0f, Z + v0, V);
    for (int64_t g0 = 0; g0 < nr; g0 += FM_XENT_G) {
      const int64_t ng = nr - g0 < FM_XENT_G ? nr - g0 : FM_XENT_G;
      float mx[FM_XENT_G];
      double s[FM_XENT_G];
      for (int64_t j = 0; j < ng; j++) {
        const int64_t r = g0 + j;
        const float *z = Z + r * V + v0;
        const int64_t t = weight[r0 + r] != 0.0f ? targets[r0 + r] : -1;
        if (t >= v0 && t < v0 + vc) zt[r] = z[t - v0];
        const float mj = chunk_max(z, vc, m[r]);
        float *ej = e[j];
#pragma omp simd
        for (int64_t c = 0; c < vc; c++) ej[c] = fm__cpu_expf(z[c] - mj);
        mx[j] = mj;
        s[j] = 0.0;
      }
      if (ng == FM_XENT_G)
        for (int64_t c = 0; c < vc; c++) /* in column order, per row */
          for (int j = 0; j < FM_XENT_G; j++) s[j] += e[j][c];
      else
        for (int64_t j = 0; j < ng; j++)
          for (int64_t c = 0; c < vc; c++) s[j] += e[j][c];
      for (int64_t j = 0; j < ng; j++) {
        const int64_t r = g0 + j;
        l[r] = l[r] * exp((double)m[r] - (double)mx[j]) + s[j];
        m[r] = mx[j];
      }
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

/* The same rows' logits become dlogits = (softmax - onehot) * weight, chunk
 * by chunk, each chunk then added into dx (dx += dlogits_chunk w_chunk, the
 * chunks in order) while it is in cache. */
FM_CPU_CLONES static void rows_grad(float *Z, float *dx, const float *lse, const float *w, const int32_t *targets,
                                    const float *weight, int64_t r0, int64_t nr, int64_t C, int64_t V, int bf16) {
  const int64_t vce = chunk_cols(V);
  for (int64_t v0 = 0; v0 < V; v0 += vce) {
    const int64_t vc = V - v0 < vce ? V - v0 : vce;
    for (int64_t r = 0; r < nr; r++) {
      const int64_t n = r0 + r;
      float *z = Z + r * V + v0;
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
    if (dx) fm__cpu_gemm1(0, 0, nr, C, vc, 1.0f, Z + v0, V, w + v0 * C, C, 1.0f, dx + r0 * C, C);
  }
}

double fm_cpu_xent_fwd_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *weight, int64_t N, int64_t C, int64_t V, float *scratch) {
  for (int64_t n = 0; n < N; n++)
    if (weight[n] != 0.0f && (targets[n] < 0 || targets[n] >= V))
      fm_abort_one(1, "cross-entropy: target %d at row %lld is outside [0, %lld)", (int)targets[n], (long long)n,
                   (long long)V);
  fm__cpu_blas_init();
  const int bf16 = fm__cpu_bf16_on();
  const float *xq = x, *wq = w;
  if (bf16) { /* bf16 GEMM operands, fp32 sums (bf16_mode.c) */
    xq = fm__cpu_bf16_copy(0, x, N, C, C);
    wq = fm__cpu_bf16_copy(1, w, V, C, C);
  }
  const int64_t RS = N < FM_XENT_RS ? N : FM_XENT_RS;
  float *Z = scratch, *lse = scratch + RS * V, *loss_d = lse + N;
  const int grad = dx || dw;
  const int par = N * V * C >= ((int64_t)1 << 18);

  for (int64_t R0 = 0; R0 < N; R0 += RS) {
    const int64_t ns = N - R0 < RS ? N - R0 : RS, nsub = (ns + FM_XENT_RB - 1) / FM_XENT_RB;
    if (rows_masked(weight, R0, ns)) { /* nothing to add to dx or dw */
      const double zero = 0.0;
      for (int64_t n = R0; n < R0 + ns; n++) lse[n] = 0.0f, memcpy(loss_d + 2 * n, &zero, sizeof zero);
      continue;
    }
#pragma omp parallel for schedule(dynamic, 1) if (par && nsub > 1)
    for (int64_t sb = 0; sb < nsub; sb++) {
      const int64_t r0 = R0 + sb * FM_XENT_RB, nr = R0 + ns - r0 < FM_XENT_RB ? R0 + ns - r0 : FM_XENT_RB;
      float *Zs = Z + (r0 - R0) * V;
      if (rows_masked(weight, r0, nr)) {
        const double zero = 0.0;
        for (int64_t n = r0; n < r0 + nr; n++) lse[n] = 0.0f, memcpy(loss_d + 2 * n, &zero, sizeof zero);
        if (dw) memset(Zs, 0, (size_t)(nr * V) * sizeof(float)); /* dw reads these rows */
        continue;
      }
      rows_lse(Zs, lse, loss_d, xq, wq, targets, weight, r0, nr, C, V);
      if (grad) rows_grad(Zs, dx, lse, wq, targets, weight, r0, nr, C, V, bf16);
    }
    /* dw (V, C) += dlogits^T (V, ns) @ x (ns, C) */
    if (dw) fm__cpu_gemm(1, 0, V, C, ns, 1.0f, Z, V, xq + R0 * C, C, 1.0f, dw, C);
  }
  double loss = 0.0;
  for (int64_t n = 0; n < N; n++) { /* in row order */
    double wl;
    memcpy(&wl, loss_d + 2 * n, sizeof wl);
    loss += wl;
  }
  return loss;
}
