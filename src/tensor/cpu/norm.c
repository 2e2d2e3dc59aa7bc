/* cpu/norm.c: LayerNorm (GPT-2; torch.nn.LayerNorm) and RMSNorm (Llama; HF
 * LlamaRMSNorm), forward and backward, over rows of C.
 *
 * Row statistics are summed in double in a fixed order (8 interleaved
 * lanes, lane j taking columns j, j+8, ..., the lanes then added in order:
 * the same order whatever the thread count, and one that vectorises) and
 * rounded once to the float mean/rstd that forward keeps and backward reuses. Backward's
 * weight gradients (sums over N rows) run column-parallel: a thread owns a
 * block of columns and walks every row in order, so each sum has one fixed
 * order whatever the thread count (no per-thread partials). */
#include <math.h>

#include "fmhpc/tensor.h"

#include "cpu_ops.h"

#define FM_NORM_OMP_MIN ((int64_t)1 << 14)
/* The per-row and per-column-block bodies below vectorise; their clones
 * (FM_CPU_CLONES, cpu_ops.h) give the same bits. */
#define FM_NORM_CB    64 /* columns per thread task in the dw/db pass */
#define FM_NORM_LANES 8

/* result = the row sum of `term` (an expression in i) in the lane order above. */
#define FM_LANE_SUM(result, C, term)                                 \
  do {                                                               \
    double fm__acc[FM_NORM_LANES] = {0};                             \
    int64_t c = 0;                                                   \
    for (; c + FM_NORM_LANES <= (C); c += FM_NORM_LANES)             \
      for (int64_t j = 0; j < FM_NORM_LANES; j++) {                  \
        const int64_t i = c + j;                                     \
        fm__acc[j] += (term);                                        \
      }                                                              \
    double fm__s = 0.0;                                              \
    for (int64_t j = 0; j < FM_NORM_LANES; j++) fm__s += fm__acc[j]; \
    for (int64_t i = c; i < (C); i++) fm__s += (term);               \
    (result) = fm__s;                                                \
  } while (0)

/* ---- LayerNorm --------------------------------------------------------------- */
/* As torch.nn.LayerNorm: biased variance, eps inside the sqrt;
 * out = (x - mean) * rstd * w + b. */
FM_CPU_CLONES static void layernorm_fwd_row(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                            const float *b, int64_t n, int64_t C, float eps) {
  const float *x = inp + n * C;
  double s, v;
  FM_LANE_SUM(s, C, (double)x[i]);
  const double mu = s / (double)C;
  FM_LANE_SUM(v, C, ((double)x[i] - mu) * ((double)x[i] - mu));
  const float m = (float)mu;
  const float r = (float)(1.0 / sqrt(v / (double)C + (double)eps));
  float *o = out + n * C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = ((x[c] - m) * r) * w[c] + b[c];
  mean[n] = m;
  rstd[n] = r;
}

void fm_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= FM_NORM_OMP_MIN)
  for (int64_t n = 0; n < N; n++) layernorm_fwd_row(out, mean, rstd, inp, w, b, n, C, eps);
}

/* dw (C) += sum_n dout * xhat, db (C) += sum_n dout, xhat = (x - mean) * rstd
 * (mean NULL: RMSNorm's xhat = x * rstd). Column blocks in parallel, rows in
 * order, double sums from the old value, one rounding. */
FM_CPU_CLONES static void norm_dweights_block(float *dw, float *db, const float *dout, const float *inp,
                                              const float *mean, const float *rstd, int64_t N, int64_t C, int64_t cb) {
  const int64_t c0 = cb * FM_NORM_CB;
  const int64_t cn = C - c0 < FM_NORM_CB ? C - c0 : FM_NORM_CB;
  double aw[FM_NORM_CB], ab[FM_NORM_CB];
  for (int64_t c = 0; c < cn; c++) {
    aw[c] = dw ? dw[c0 + c] : 0.0;
    ab[c] = db ? db[c0 + c] : 0.0;
  }
  for (int64_t n = 0; n < N; n++) {
    const float *x = inp + n * C + c0, *d = dout + n * C + c0;
    const float m = mean ? mean[n] : 0.0f, r = rstd[n];
#pragma omp simd
    for (int64_t c = 0; c < cn; c++) {
      const float xhat = mean ? (x[c] - m) * r : x[c] * r;
      aw[c] += (double)(d[c] * xhat);
      ab[c] += (double)d[c];
    }
  }
  for (int64_t c = 0; c < cn; c++) {
    if (dw) dw[c0 + c] = (float)aw[c];
    if (db) db[c0 + c] = (float)ab[c];
  }
}

static void norm_dweights(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                          const float *rstd, int64_t N, int64_t C) {
  const int64_t nb = (C + FM_NORM_CB - 1) / FM_NORM_CB;
#pragma omp parallel for schedule(static) if (N * C >= FM_NORM_OMP_MIN)
  for (int64_t cb = 0; cb < nb; cb++) norm_dweights_block(dw, db, dout, inp, mean, rstd, N, C, cb);
}

/* dinp += rstd * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = dout * w. */
FM_CPU_CLONES static void layernorm_bwd_row(float *dinp, const float *dout, const float *inp, const float *w,
                                            const float *mean, const float *rstd, int64_t n, int64_t C) {
  const float *x = inp + n * C, *d = dout + n * C;
  const float m = mean[n], r = rstd[n];
  double sd, sdx;
  FM_LANE_SUM(sd, C, (double)(d[i] * w[i]));
  FM_LANE_SUM(sdx, C, (double)((d[i] * w[i]) * ((x[i] - m) * r)));
  const float md = (float)(sd / (double)C), mdx = (float)(sdx / (double)C);
  float *di = dinp + n * C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) {
    const float xhat = (x[c] - m) * r;
    di[c] = di[c] + r * ((d[c] * w[c] - md) - xhat * mdx);
  }
}

void fm_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                          const float *mean, const float *rstd, int64_t N, int64_t C) {
  if (dinp) {
#pragma omp parallel for schedule(static) if (N * C >= FM_NORM_OMP_MIN)
    for (int64_t n = 0; n < N; n++) layernorm_bwd_row(dinp, dout, inp, w, mean, rstd, n, C);
  }
  if (dw || db) norm_dweights(dw, db, dout, inp, mean, rstd, N, C);
}

/* ---- RMSNorm ----------------------------------------------------------------- */
/* As HF LlamaRMSNorm: out = w * (x * rsqrt(mean(x^2) + eps)). */
FM_CPU_CLONES static void rmsnorm_fwd_row(float *out, float *rstd, const float *inp, const float *w, int64_t n,
                                          int64_t C, float eps) {
  const float *x = inp + n * C;
  double s;
  FM_LANE_SUM(s, C, (double)x[i] * x[i]);
  const float r = (float)(1.0 / sqrt(s / (double)C + (double)eps));
  float *o = out + n * C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = w[c] * (x[c] * r);
  rstd[n] = r;
}

void fm_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= FM_NORM_OMP_MIN)
  for (int64_t n = 0; n < N; n++) rmsnorm_fwd_row(out, rstd, inp, w, n, C, eps);
}

/* dinp += rstd * (dn - xhat * mean(dn * xhat)), dn = dout * w, xhat = x * rstd. */
FM_CPU_CLONES static void rmsnorm_bwd_row(float *dinp, const float *dout, const float *inp, const float *w,
                                          const float *rstd, int64_t n, int64_t C) {
  const float *x = inp + n * C, *d = dout + n * C;
  const float r = rstd[n];
  double sdx;
  FM_LANE_SUM(sdx, C, (double)((d[i] * w[i]) * (x[i] * r)));
  const float mdx = (float)(sdx / (double)C);
  float *di = dinp + n * C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) di[c] = di[c] + r * (d[c] * w[c] - (x[c] * r) * mdx);
}

void fm_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                        int64_t N, int64_t C) {
  if (dinp) {
#pragma omp parallel for schedule(static) if (N * C >= FM_NORM_OMP_MIN)
    for (int64_t n = 0; n < N; n++) rmsnorm_bwd_row(dinp, dout, inp, w, rstd, n, C);
  }
  if (dw) norm_dweights(dw, NULL, dout, inp, NULL, rstd, N, C);
}
