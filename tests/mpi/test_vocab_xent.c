/* test_vocab_xent.c: vocab-parallel cross-entropy (src/model/vocab_xent.c)
 * over 1-4 ranks, each holding an uneven slice of the vocabulary, against a
 * float64 reference computed here on the whole projection (loss, dx, dw) and
 * against the fused unsharded op (xent_fwd_bwd): equal within fp32 rounding.
 * The loss and dx have the same bits on every rank and run to run, and the
 * scratch never holds N x V logits. */
#include "fm_test.h"
#include "fmhpc/model.h"
#include "fmhpc/rng.h"

enum { N = 37, C = 24, V = 4301 }; /* V > 2048: several chunks on one rank */

static float val(uint64_t purpose, uint64_t i, float scale) {
  return (float)((fm_rng_uniform(7, (uint32_t)purpose, 0, i) - 0.5) * 2.0 * scale);
}

typedef struct Ref {
  double loss;
  double *dx, *dw; /* (N, C), (V, C) */
} Ref;

/* float64: logits, logsumexp, softmax - onehot, the gradients. */
static void reference(Ref *r, const float *x, const float *w, const int32_t *tg, const float *wt) {
  r->loss = 0.0;
  r->dx = calloc((size_t)(N * C), sizeof(double));
  r->dw = calloc((size_t)(V * C), sizeof(double));
  double *z = malloc(sizeof(double) * V);
  for (int n = 0; n < N; n++) {
    double mx = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++) {
      double a = 0.0;
      for (int c = 0; c < C; c++) a += (double)x[n * C + c] * (double)w[v * C + c];
      z[v] = a;
      mx = a > mx ? a : mx;
    }
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    const double lse = mx + log(s);
    if (wt[n] == 0.0f) continue;
    r->loss += (double)wt[n] * (lse - z[tg[n]]);
    for (int v = 0; v < V; v++) {
      const double g = (exp(z[v] - lse) - (v == tg[n])) * (double)wt[n];
      for (int c = 0; c < C; c++) {
        r->dx[n * C + c] += g * (double)w[v * C + c];
        r->dw[v * C + c] += g * (double)x[n * C + c];
      }
    }
  }
  free(z);
}

FM_TEST(vocab_parallel_matches_float64_and_fused) {
  FmComm *tp = fm_comm_mpi_create(MPI_COMM_WORLD);
  const int P = tp->size, me = tp->rank;
  int status = 0;
  const FmBackend *be = fm_backend_get("cpu", &status);
  FM_REQUIRE(be != NULL);
  float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * V * C), *wt = malloc(sizeof(float) * N);
  int32_t *tg = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N * C; i++) x[i] = val(1, (uint64_t)i, 2.0f);
  for (int i = 0; i < V * C; i++) w[i] = val(2, (uint64_t)i, 1.0f);
  for (int n = 0; n < N; n++) {
    tg[n] = (int32_t)((n * 977 + 13) % V);
    wt[n] = n % 5 == 3 ? 0.0f : 1.0f / N; /* some masked rows */
  }
  Ref ref;
  reference(&ref, x, w, tg, wt);

  /* this rank's uneven slice [v0, v0 + Vl) */
  const int64_t v0 = (int64_t)V * me / P, Vl = (int64_t)V * (me + 1) / P - v0;
  const int64_t ns = fm_vocab_xent_scratch(tp, N, C, Vl);
  FM_EXPECT(ns < (int64_t)N * V); /* no rank holds the N x V logits */
  float *scratch = malloc(sizeof(float) * (size_t)ns);
  float *dx = calloc((size_t)(N * C), sizeof(float)), *dw = calloc((size_t)(Vl * C), sizeof(float));
  const double loss = fm_vocab_xent_fwd_bwd(tp, be, dx, dw, x, w + v0 * C, tg, wt, N, C, v0, Vl, scratch);

  /* float64 reference: tolerances of fp32 logits over C = 24 terms */
  FM_EXPECT_NEAR(loss, ref.loss, 1e-6, 1e-7);
  int64_t bad = 0;
  double worst = 0.0;
  for (int i = 0; i < N * C; i++) {
    const double e = fabs((double)dx[i] - ref.dx[i]);
    worst = e > worst ? e : worst;
    bad += e > 1e-6 + 1e-5 * fabs(ref.dx[i]);
  }
  for (int64_t i = 0; i < Vl * C; i++) {
    const double e = fabs((double)dw[i] - ref.dw[v0 * C + i]);
    worst = e > worst ? e : worst;
    bad += e > 1e-6 + 1e-5 * fabs(ref.dw[v0 * C + i]);
  }
  FM_EXPECT_EQ_INT(bad, 0);

  /* the fused unsharded op on the whole projection */
  float *fs = malloc(sizeof(float) * (size_t)fm_cpu_xent_scratch(N, V));
  const double fused = be->xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, fs);
  FM_EXPECT_NEAR(loss, fused, 1e-6, 1e-7);
  if (me == 0)
    printf("vocab-parallel xent at tp=%d: loss %.9f, float64 %.9f (diff %.3g), fused op %.9f (diff %.3g), "
           "worst |grad - float64| %.3g\n",
           P, loss, ref.loss, fabs(loss - ref.loss), fused, fabs(loss - fused), worst);

  /* the same bits on every rank, and run to run */
  double losses[4] = {0};
  FM_REQUIRE(P <= 4);
  FM_EXPECT_EQ_INT(fm_comm_allgather(tp, &loss, losses, 1, FM_DT_F64), 0);
  for (int r = 0; r < P; r++) FM_EXPECT(memcmp(&losses[r], &loss, sizeof loss) == 0);
  float *dx0 = calloc((size_t)(P * N * C), sizeof(float));
  FM_EXPECT_EQ_INT(fm_comm_allgather(tp, dx, dx0, N * C, FM_DT_F32), 0);
  for (int r = 0; r < P; r++) FM_EXPECT(memcmp(dx0 + (int64_t)r * N * C, dx, sizeof(float) * N * C) == 0);
  float *dx2 = calloc((size_t)(N * C), sizeof(float)), *dw2 = calloc((size_t)(Vl * C), sizeof(float));
  const double loss2 = fm_vocab_xent_fwd_bwd(tp, be, dx2, dw2, x, w + v0 * C, tg, wt, N, C, v0, Vl, scratch);
  FM_EXPECT(memcmp(&loss, &loss2, sizeof loss) == 0);
  FM_EXPECT(memcmp(dx, dx2, sizeof(float) * N * C) == 0);
  FM_EXPECT(memcmp(dw, dw2, sizeof(float) * (size_t)(Vl * C)) == 0);

  free(dx2), free(dw2), free(dx0), free(fs), free(scratch), free(dx), free(dw);
  free(ref.dx), free(ref.dw), free(x), free(w), free(wt), free(tg);
  fm_comm_destroy(tp);
}
