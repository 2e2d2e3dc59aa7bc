/* test_ops_embedding.c: fm_cpu_embedding_fwd/bwd (GPT-2 wte + wpe; Llama's
 * token embedding alone) against a float64 reference written here:
 * forward exact (a gather plus one fp32 add), backward against central
 * differences of the float64 loss sum(dout * out) to 1e-5 (rel) / 1e-4 (max)
 * with repeated tokens and positions; repeated tokens add in token order
 * (bitwise against a sequential fp32 sum); accumulation (+=); bits independent
 * of the thread count. */
#include <omp.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"

typedef struct EmbRef {
  double *wte, *wpe, *dout; /* wpe may be NULL */
  const int32_t *tok, *pos;
  int64_t N, C;
} EmbRef;

static double emb_ref_loss(void *ctx) {
  const EmbRef *r = ctx;
  double L = 0;
  for (int64_t n = 0; n < r->N; n++)
    for (int64_t c = 0; c < r->C; c++) {
      const double o = r->wte[(int64_t)r->tok[n] * r->C + c] + (r->wpe ? r->wpe[(int64_t)r->pos[n] * r->C + c] : 0.0);
      L += r->dout[n * r->C + c] * o;
    }
  return L;
}

static void check_embedding(int with_pos) {
  const int64_t N = 12, C = 70, V = 9, P = 6; /* 12 tokens over 9 ids and 6 positions: repeats */
  printf("embedding N=%lld C=%lld V=%lld wpe=%d\n", (long long)N, (long long)C, (long long)V, with_pos);
  int32_t tok[12], pos[12];
  for (int64_t n = 0; n < N; n++) {
    tok[n] = (int32_t)(ops_next() % 5); /* ids 0..4 only: many repeats, ids 5..8 unused */
    pos[n] = (int32_t)(n % P);
  }
  float *wte = ops_alloc(V * C), *wpe = ops_alloc(P * C), *dout = ops_alloc(N * C), *out = ops_alloc(N * C);
  ops_fill(wte, V * C, -1, 1);
  ops_fill(wpe, P * C, -1, 1);
  ops_fill(dout, N * C, -1, 1);
  fm_cpu_embedding_fwd(out, tok, wte, with_pos ? pos : NULL, with_pos ? wpe : NULL, N, C);
  int64_t bad = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const float e = with_pos ? wte[tok[n] * C + c] + wpe[pos[n] * C + c] : wte[tok[n] * C + c];
      bad += memcmp(&e, &out[n * C + c], 4) != 0;
    }
  FM_EXPECT_EQ_INT(bad, 0);

  float *dwte = ops_alloc(V * C), *dwpe = ops_alloc(P * C);
  fm_cpu_embedding_bwd(dwte, with_pos ? dwpe : NULL, dout, tok, with_pos ? pos : NULL, N, C, V);
  EmbRef r = {ops_to_double(wte, V * C),
              with_pos ? ops_to_double(wpe, P * C) : NULL,
              ops_to_double(dout, N * C),
              tok,
              pos,
              N,
              C};
  double *gte = ops_dalloc(V * C), *gpe = ops_dalloc(P * C);
  ops_fd(gte, r.wte, V * C, emb_ref_loss, &r, 1e-6);
  OPS_EXPECT_CLOSE("dwte vs FD", dwte, gte, V * C, 1e-5, 1e-4);
  if (with_pos) {
    ops_fd(gpe, r.wpe, P * C, emb_ref_loss, &r, 1e-6);
    OPS_EXPECT_CLOSE("dwpe vs FD", dwpe, gpe, P * C, 1e-5, 1e-4);
  }
  /* Token order: dwte[v] = ((0 + dout[n1]) + dout[n2]) + ... over n1 < n2 < ..., in fp32. */
  float *seq = ops_alloc(V * C);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) seq[tok[n] * C + c] = seq[tok[n] * C + c] + dout[n * C + c];
  FM_EXPECT_EQ_INT(ops_bits_differ(seq, dwte, V * C), 0);
  /* accumulates: a second call doubles it exactly */
  double *twice = ops_dalloc(V * C);
  for (int64_t i = 0; i < V * C; i++) twice[i] = 2.0 * dwte[i];
  fm_cpu_embedding_bwd(dwte, NULL, dout, tok, NULL, N, C, V);
  OPS_EXPECT_CLOSE("dwte accumulates", dwte, twice, V * C, 1e-6, 1e-6);

  free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe), free(r.wte), free(r.wpe), free(r.dout);
  free(gte), free(gpe), free(seq), free(twice);
}

FM_TEST(embedding_tokens_and_positions) {
  ops_seed(31);
  check_embedding(1);
}
FM_TEST(embedding_tokens_only) {
  ops_seed(32);
  check_embedding(0);
}

FM_TEST(embedding_bwd_bits_thread_independent) {
  ops_seed(33);
  const int64_t N = 2048, C = 256, V = 50, P = 64;
  int32_t *tok = calloc((size_t)N, sizeof(int32_t)), *pos = calloc((size_t)N, sizeof(int32_t));
  for (int64_t n = 0; n < N; n++) {
    tok[n] = (int32_t)(ops_next() % (uint64_t)V);
    pos[n] = (int32_t)(n % P);
  }
  float *dout = ops_alloc(N * C);
  ops_fill(dout, N * C, -1, 1);
  float *dte[2], *dpe[2];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    dte[k] = ops_alloc(V * C), dpe[k] = ops_alloc(P * C);
    fm_cpu_embedding_bwd(dte[k], dpe[k], dout, tok, pos, N, C, V);
  }
  omp_set_num_threads(1);
  FM_EXPECT_EQ_INT(ops_bits_differ(dte[0], dte[1], V * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(dpe[0], dpe[1], P * C), 0);
  for (int k = 0; k < 2; k++) free(dte[k]), free(dpe[k]);
  free(tok), free(pos), free(dout);
}
