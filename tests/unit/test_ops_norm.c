/* test_ops_norm.c: fm_cpu_layernorm_* (torch.nn.LayerNorm: biased variance,
 * eps inside the sqrt) and fm_cpu_rmsnorm_* (HF LlamaRMSNorm) against float64
 * references written here from those definitions: forward to 1e-6 (rel) /
 * 1e-5 (max), the kept mean/rstd to 1e-6, backward against central
 * differences of the float64 loss sum(dout * out) to 1e-5 / 1e-4, gradients
 * accumulate (+=), and bits independent of the thread count. */
#include <omp.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"

typedef struct NormRef {
  double *x, *w, *b, *dout; /* b NULL: RMSNorm */
  int64_t N, C;
  double eps;
} NormRef;

static void norm_ref_fwd(double *out, double *mean, double *rstd, const NormRef *r) {
  for (int64_t n = 0; n < r->N; n++) {
    const double *x = r->x + n * r->C;
    double mu = 0, v = 0;
    if (r->b) {
      for (int64_t c = 0; c < r->C; c++) mu += x[c];
      mu /= (double)r->C;
      for (int64_t c = 0; c < r->C; c++) v += (x[c] - mu) * (x[c] - mu);
    } else {
      for (int64_t c = 0; c < r->C; c++) v += x[c] * x[c]; /* mean(x^2) */
    }
    const double rs = 1.0 / sqrt(v / (double)r->C + r->eps);
    for (int64_t c = 0; c < r->C; c++)
      out[n * r->C + c] = r->b ? (x[c] - mu) * rs * r->w[c] + r->b[c] : r->w[c] * (x[c] * rs);
    if (mean) mean[n] = mu;
    if (rstd) rstd[n] = rs;
  }
}
static double norm_ref_loss(void *ctx) {
  const NormRef *r = ctx;
  double *out = ops_dalloc(r->N * r->C);
  norm_ref_fwd(out, NULL, NULL, r);
  double L = 0;
  for (int64_t i = 0; i < r->N * r->C; i++) L += r->dout[i] * out[i];
  free(out);
  return L;
}

static void check_norm(int layer, int64_t N, int64_t C, float eps) {
  printf("%s N=%lld C=%lld eps=%g\n", layer ? "layernorm" : "rmsnorm", (long long)N, (long long)C, (double)eps);
  float *x = ops_alloc(N * C), *w = ops_alloc(C), *b = ops_alloc(C), *dout = ops_alloc(N * C);
  for (int64_t i = 0; i < N * C; i++) x[i] = (float)(ops_uniform(-1, 1) + (i / C) * 0.25); /* row offsets */
  ops_fill(w, C, 0.5, 1.5);
  ops_fill(b, C, -1, 1);
  ops_fill(dout, N * C, -1, 1);
  NormRef r = {ops_to_double(x, N * C),
               ops_to_double(w, C),
               layer ? ops_to_double(b, C) : NULL,
               ops_to_double(dout, N * C),
               N,
               C,
               (double)eps};
  double *ref = ops_dalloc(N * C), *rmean = ops_dalloc(N), *rrstd = ops_dalloc(N);
  norm_ref_fwd(ref, rmean, rrstd, &r);
  float *out = ops_alloc(N * C), *mean = ops_alloc(N), *rstd = ops_alloc(N);
  if (layer)
    fm_cpu_layernorm_fwd(out, mean, rstd, x, w, b, N, C, eps);
  else
    fm_cpu_rmsnorm_fwd(out, rstd, x, w, N, C, eps);
  OPS_EXPECT_CLOSE("forward", out, ref, N * C, 1e-6, 1e-5);
  OPS_EXPECT_CLOSE("rstd", rstd, rrstd, N, 1e-6, 1e-6);
  if (layer) OPS_EXPECT_CLOSE("mean", mean, rmean, N, 1e-6, 1e-6);

  float *dx = ops_alloc(N * C), *dw = ops_alloc(C), *db = ops_alloc(C);
  if (layer)
    fm_cpu_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C);
  else
    fm_cpu_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);
  double *gx = ops_dalloc(N * C), *gw = ops_dalloc(C), *gb = ops_dalloc(C);
  ops_fd(gx, r.x, N * C, norm_ref_loss, &r, 1e-6);
  ops_fd(gw, r.w, C, norm_ref_loss, &r, 1e-6);
  OPS_EXPECT_CLOSE("dinp vs FD", dx, gx, N * C, 1e-5, 1e-4);
  OPS_EXPECT_CLOSE("dw vs FD", dw, gw, C, 1e-5, 1e-4);
  if (layer) {
    ops_fd(gb, r.b, C, norm_ref_loss, &r, 1e-6);
    OPS_EXPECT_CLOSE("db vs FD", db, gb, C, 1e-5, 1e-4);
  }
  /* accumulation: a second call adds the same gradient again */
  double *twice_x = ops_dalloc(N * C), *twice_w = ops_dalloc(C);
  for (int64_t i = 0; i < N * C; i++) twice_x[i] = 2.0 * dx[i];
  for (int64_t i = 0; i < C; i++) twice_w[i] = 2.0 * dw[i];
  if (layer)
    fm_cpu_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C);
  else
    fm_cpu_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);
  OPS_EXPECT_CLOSE("dinp accumulates", dx, twice_x, N * C, 1e-6, 1e-6);
  OPS_EXPECT_CLOSE("dw accumulates", dw, twice_w, C, 1e-6, 1e-6);

  free(x), free(w), free(b), free(dout), free(r.x), free(r.w), free(r.b), free(r.dout), free(ref), free(rmean);
  free(rrstd), free(out), free(mean), free(rstd), free(dx), free(dw), free(db), free(gx), free(gw), free(gb);
  free(twice_x), free(twice_w);
}

FM_TEST(layernorm_fwd_bwd) {
  ops_seed(11);
  check_norm(1, 7, 19, 1e-5f);
}
FM_TEST(layernorm_wide_rows) { /* more than one 64-column block in the dw/db pass */
  ops_seed(12);
  check_norm(1, 5, 150, 1e-5f);
}
FM_TEST(rmsnorm_fwd_bwd) {
  ops_seed(13);
  check_norm(0, 7, 19, 1e-6f);
}
FM_TEST(rmsnorm_wide_rows) {
  ops_seed(14);
  check_norm(0, 5, 150, 1e-5f);
}

FM_TEST(norm_bits_thread_independent) {
  ops_seed(15);
  const int64_t N = 257, C = 200;
  float *x = ops_alloc(N * C), *w = ops_alloc(C), *b = ops_alloc(C), *dout = ops_alloc(N * C);
  ops_fill(x, N * C, -2, 2);
  ops_fill(w, C, 0.5, 1.5);
  ops_fill(b, C, -1, 1);
  ops_fill(dout, N * C, -1, 1);
  float *res[2][7];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    float **p = res[k];
    p[0] = ops_alloc(N * C), p[1] = ops_alloc(N), p[2] = ops_alloc(N), p[3] = ops_alloc(N * C);
    p[4] = ops_alloc(C), p[5] = ops_alloc(C), p[6] = ops_alloc(C);
    fm_cpu_layernorm_fwd(p[0], p[1], p[2], x, w, b, N, C, 1e-5f);
    fm_cpu_layernorm_bwd(p[3], p[4], p[5], dout, x, w, p[1], p[2], N, C);
    fm_cpu_rmsnorm_bwd(p[3], p[6], dout, x, w, p[2], N, C);
  }
  omp_set_num_threads(1);
  const int64_t sizes[7] = {N * C, N, N, N * C, C, C, C};
  for (int i = 0; i < 7; i++) FM_EXPECT_EQ_INT(ops_bits_differ(res[0][i], res[1][i], sizes[i]), 0);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 7; i++) free(res[k][i]);
  free(x), free(w), free(b), free(dout);
}
