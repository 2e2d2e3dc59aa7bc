/* test_ops_xent.c: fm_cpu_xent_fwd_bwd (output projection fused with softmax
 * cross-entropy in row blocks and vocab chunks) against a float64 reference written here as
 * torch's cross_entropy: loss_n = logsumexp(x_n W^T) - (x_n W^T)[target_n],
 * returned sum_n weight[n] loss_n. The loss to 1e-6 relative; dx against
 * central differences of the float64 loss to 1e-5 (rel) / 1e-4 (max); dw
 * against central differences at sampled entries (every chunk edge, every
 * target row) and, whole, against the float64 analytic gradient
 * (softmax - onehot) weight x to the same tolerances. V is not a multiple of
 * the chunk (2048); masked tokens (weight 0, target -1) contribute nothing;
 * accumulation (+=); forward-only gives the same loss bits; bits independent
 * of the thread count; bf16 mode's loss equals fp32 on pre-rounded operands. */
#include <omp.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"

typedef struct XentRef {
  double *x, *w;
  const int32_t *tg;
  const float *wt;
  int64_t N, C, V;
} XentRef;

static double xent_ref_loss(void *ctx) {
  const XentRef *r = ctx;
  double *z = ops_dalloc(r->V), L = 0;
  for (int64_t n = 0; n < r->N; n++) {
    if (r->wt[n] == 0.0f) continue;
    double mx = -INFINITY;
    for (int64_t v = 0; v < r->V; v++) {
      double s = 0;
      for (int64_t c = 0; c < r->C; c++) s += r->x[n * r->C + c] * r->w[v * r->C + c];
      z[v] = s;
      if (s > mx) mx = s;
    }
    double se = 0;
    for (int64_t v = 0; v < r->V; v++) se += exp(z[v] - mx);
    L += (double)r->wt[n] * (mx + log(se) - z[r->tg[n]]); /* -log_softmax at the target */
  }
  free(z);
  return L;
}
/* (softmax - onehot) * weight, then dx = dl W, dw = dl^T x, in float64. */
static void xent_ref_grad(double *gx, double *gw, const XentRef *r) {
  double *z = ops_dalloc(r->V);
  for (int64_t n = 0; n < r->N; n++) {
    if (r->wt[n] == 0.0f) continue;
    double mx = -INFINITY, se = 0;
    for (int64_t v = 0; v < r->V; v++) {
      double s = 0;
      for (int64_t c = 0; c < r->C; c++) s += r->x[n * r->C + c] * r->w[v * r->C + c];
      z[v] = s;
      if (s > mx) mx = s;
    }
    for (int64_t v = 0; v < r->V; v++) se += exp(z[v] - mx);
    for (int64_t v = 0; v < r->V; v++) {
      const double dl = (exp(z[v] - mx) / se - (v == r->tg[n])) * r->wt[n];
      for (int64_t c = 0; c < r->C; c++) {
        gx[n * r->C + c] += dl * r->w[v * r->C + c];
        gw[v * r->C + c] += dl * r->x[n * r->C + c];
      }
    }
  }
  free(z);
}

/* rows [mask_lo, mask_hi) are masked as well (whole row tiles and blocks) */
static int64_t mask_lo, mask_hi;

static void make_targets(int32_t *tg, float *wt, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; n++) {
    const int masked = n % 4 == 2 || (n >= mask_lo && n < mask_hi);
    tg[n] = masked ? -1 : (int32_t)(ops_next() % (uint64_t)V);
    wt[n] = masked ? 0.0f : (float)ops_uniform(0.2, 1.0);
  }
  if (N > 3) tg[0] = (int32_t)(V - 1), tg[1] = 0; /* the last and first vocab entries */
}

static void check_xent(int64_t N, int64_t C, int64_t V, int full_fd_w) {
  printf("xent N=%lld C=%lld V=%lld\n", (long long)N, (long long)C, (long long)V);
  int32_t *tg = calloc((size_t)N, sizeof(int32_t));
  float *wt = ops_alloc(N), *x = ops_alloc(N * C), *w = ops_alloc(V * C);
  make_targets(tg, wt, N, V);
  ops_fill(x, N * C, -1, 1);
  ops_fill(w, V * C, -3, 3);
  float *scratch = ops_alloc(fm_cpu_xent_scratch(N, V));
  float *dx = ops_alloc(N * C), *dw = ops_alloc(V * C);
  const double loss = fm_cpu_xent_fwd_bwd(dx, dw, x, w, tg, wt, N, C, V, scratch);
  const double loss_fwd = fm_cpu_xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, scratch);
  XentRef r = {ops_to_double(x, N * C), ops_to_double(w, V * C), tg, wt, N, C, V};
  const double rl = xent_ref_loss(&r);
  printf("  loss %.12g, float64 reference %.12g, rel err %.2e (tol 1e-6)\n", loss, rl, fabs(loss - rl) / fabs(rl));
  FM_EXPECT_NEAR(loss, rl, 1e-6, 0);
  FM_EXPECT(memcmp(&loss, &loss_fwd, sizeof loss) == 0);

  double *gx = ops_dalloc(N * C), *gw = ops_dalloc(V * C);
  if (N <= 16) {
    ops_fd(gx, r.x, N * C, xent_ref_loss, &r, 1e-6);
    OPS_EXPECT_CLOSE("dx vs FD", dx, gx, N * C, 1e-5, 1e-4);
  } else { /* FD at 8 sampled rows of x (one ref loss costs N V C), incl. each row block's edges */
    const int64_t xr[8] = {0, 1, 127, 128, 129, 255, 256, N - 1};
    float *sd = ops_alloc(8 * C);
    double *sf = ops_dalloc(8 * C);
    for (int i = 0; i < 8; i++) {
      ops_fd(sf + i * C, r.x + xr[i] * C, C, xent_ref_loss, &r, 1e-6);
      memcpy(sd + i * C, dx + xr[i] * C, (size_t)C * sizeof(float));
    }
    OPS_EXPECT_CLOSE("dx vs FD (sampled rows)", sd, sf, 8 * C, 1e-5, 1e-4);
    free(sd), free(sf);
  }
  if (full_fd_w) {
    ops_fd(gw, r.w, V * C, xent_ref_loss, &r, 1e-6);
    OPS_EXPECT_CLOSE("dw vs FD", dw, gw, V * C, 1e-5, 1e-4);
  } else {
    double *ax = ops_dalloc(N * C);
    xent_ref_grad(ax, gw, &r);
    OPS_EXPECT_CLOSE("dx vs f64 analytic", dx, ax, N * C, 1e-5, 1e-4);
    OPS_EXPECT_CLOSE("dw vs f64 analytic", dw, gw, V * C, 1e-5, 1e-4);
    /* FD at sampled vocab rows: chunk edges, the targets, a few at random */
    int64_t rows[64], nr = 0;
    const int64_t edges[] = {0, 1, 2047, 2048, 2049, 4095, 4096, V - 2, V - 1};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
      if (edges[i] < V) rows[nr++] = edges[i];
    for (int64_t n = 0; n < N && nr < 56; n++)
      if (wt[n] != 0.0f) rows[nr++] = tg[n];
    for (int i = 0; i < 6; i++) rows[nr++] = (int64_t)(ops_next() % (uint64_t)V);
    if (N > 16) nr = 12; /* big N: the edges and a few targets are enough */
    float *sd = ops_alloc(nr * C);
    double *sf = ops_dalloc(nr * C);
    for (int64_t i = 0; i < nr; i++) {
      ops_fd(sf + i * C, r.w + rows[i] * C, C, xent_ref_loss, &r, 1e-6);
      memcpy(sd + i * C, dw + rows[i] * C, (size_t)C * sizeof(float));
    }
    OPS_EXPECT_CLOSE("dw vs FD (sampled rows)", sd, sf, nr * C, 1e-5, 1e-4);
    free(ax), free(sd), free(sf);
  }
  /* masked rows: no gradient at all */
  int64_t nonzero = 0;
  for (int64_t n = 0; n < N; n++)
    if (wt[n] == 0.0f)
      for (int64_t c = 0; c < C; c++) nonzero += dx[n * C + c] != 0.0f;
  FM_EXPECT_EQ_INT(nonzero, 0);
  /* accumulation: a second call adds the same gradient */
  double *tx = ops_dalloc(N * C), *tw = ops_dalloc(V * C);
  for (int64_t i = 0; i < N * C; i++) tx[i] = 2.0 * dx[i];
  for (int64_t i = 0; i < V * C; i++) tw[i] = 2.0 * dw[i];
  fm_cpu_xent_fwd_bwd(dx, dw, x, w, tg, wt, N, C, V, scratch);
  OPS_EXPECT_CLOSE("dx accumulates", dx, tx, N * C, 1e-6, 1e-6);
  OPS_EXPECT_CLOSE("dw accumulates", dw, tw, V * C, 1e-6, 1e-6);

  free(tg), free(wt), free(x), free(w), free(scratch), free(dx), free(dw), free(r.x), free(r.w), free(gx), free(gw);
  free(tx), free(tw);
}

FM_TEST(xent_one_chunk_full_fd) {
  ops_seed(51);
  check_xent(8, 6, 301, 1);
}
FM_TEST(xent_three_chunks_ragged) { /* 5003 = 2048 + 2048 + 907 */
  ops_seed(52);
  check_xent(9, 12, 5003, 0);
}
FM_TEST(xent_many_row_blocks) { /* 300 rows: two 256-row tasks, one ragged */
  ops_seed(53);
  check_xent(300, 4, 2100, 0);
}

FM_TEST(xent_masked_row_blocks) { /* 1300 rows: blocks of 512 (the last ragged); rows 128-1023
                                    masked: half of block 0's first 256-row task, all of its second,
                                    all of block 1 */
  ops_seed(54);
  mask_lo = 128, mask_hi = 1024;
  check_xent(1300, 4, 2100, 0);
  mask_lo = mask_hi = 0;
}

FM_TEST(xent_all_masked_is_zero) {
  ops_seed(54);
  const int64_t N = 5, C = 4, V = 50;
  int32_t tg[5] = {-1, -1, -1, -1, -1};
  float wt[5] = {0, 0, 0, 0, 0};
  float *x = ops_alloc(N * C), *w = ops_alloc(V * C), *dx = ops_alloc(N * C), *dw = ops_alloc(V * C);
  float *scratch = ops_alloc(fm_cpu_xent_scratch(N, V));
  ops_fill(x, N * C, -1, 1);
  ops_fill(w, V * C, -1, 1);
  const double loss = fm_cpu_xent_fwd_bwd(dx, dw, x, w, tg, wt, N, C, V, scratch);
  FM_EXPECT(loss == 0.0);
  int64_t nz = 0;
  for (int64_t i = 0; i < N * C; i++) nz += dx[i] != 0.0f;
  for (int64_t i = 0; i < V * C; i++) nz += dw[i] != 0.0f;
  FM_EXPECT_EQ_INT(nz, 0);
  free(x), free(w), free(dx), free(dw), free(scratch);
}

FM_TEST(xent_bits_thread_independent) {
  ops_seed(55);
  const int64_t N = 300, C = 32, V = 5000;
  int32_t *tg = calloc((size_t)N, sizeof(int32_t));
  float *wt = ops_alloc(N), *x = ops_alloc(N * C), *w = ops_alloc(V * C);
  make_targets(tg, wt, N, V);
  ops_fill(x, N * C, -1, 1);
  ops_fill(w, V * C, -1, 1);
  float *scratch = ops_alloc(fm_cpu_xent_scratch(N, V));
  float *dx[2], *dw[2];
  double loss[2];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    dx[k] = ops_alloc(N * C), dw[k] = ops_alloc(V * C);
    loss[k] = fm_cpu_xent_fwd_bwd(dx[k], dw[k], x, w, tg, wt, N, C, V, scratch);
  }
  omp_set_num_threads(1);
  FM_EXPECT(memcmp(&loss[0], &loss[1], sizeof(double)) == 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(dx[0], dx[1], N * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(dw[0], dw[1], V * C), 0);
  for (int k = 0; k < 2; k++) free(dx[k]), free(dw[k]);
  free(tg), free(wt), free(x), free(w), free(scratch);
}

/* bf16 mode rounds x and w before the logits GEMM: the loss is, bit for bit,
 * the fp32 loss of pre-rounded operands (dlogits are rounded too, so the
 * gradients only agree to bf16 precision). */
FM_TEST(xent_bf16_emulation) {
  ops_seed(56);
  const int64_t N = 20, C = 16, V = 3000;
  int32_t *tg = calloc((size_t)N, sizeof(int32_t));
  float *wt = ops_alloc(N), *x = ops_alloc(N * C), *w = ops_alloc(V * C);
  make_targets(tg, wt, N, V);
  ops_fill(x, N * C, -1, 1);
  ops_fill(w, V * C, -1, 1);
  float *scratch = ops_alloc(fm_cpu_xent_scratch(N, V));
  float *dx16 = ops_alloc(N * C), *dx32 = ops_alloc(N * C);
  float *xr = ops_copy(x, N * C), *wr = ops_copy(w, V * C);
  fm_cpu_round_bf16(xr, N * C);
  fm_cpu_round_bf16(wr, V * C);
  fm_cpu_set_compute_bf16(1);
  const double l16 = fm_cpu_xent_fwd_bwd(dx16, NULL, x, w, tg, wt, N, C, V, scratch);
  fm_cpu_set_compute_bf16(0);
  const double l32r = fm_cpu_xent_fwd_bwd(dx32, NULL, xr, wr, tg, wt, N, C, V, scratch);
  const double l32 = fm_cpu_xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, scratch);
  FM_EXPECT(memcmp(&l16, &l32r, sizeof(double)) == 0);
  FM_EXPECT(l16 != l32);
  double *ref = ops_to_double(dx32, N * C);
  OPS_EXPECT_CLOSE("bf16 dx vs fp32 on rounded operands", dx16, ref, N * C, 1e-2, 1e-2);
  free(ref), free(tg), free(wt), free(x), free(w), free(scratch), free(dx16), free(dx32), free(xr), free(wr);
}
