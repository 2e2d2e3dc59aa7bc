/* test_ops_attention.c: fm_cpu_attention_fwd/bwd (blockwise, online softmax,
 * causal + GQA + document mask) against a float64 reference written here
 * straight from the definition (per query: scores q.k/sqrt(HS) over the keys
 * s <= t of its document, softmax, weighted sum of v; lse = log sum exp):
 * forward and lse to 1e-6 (rel) / 1e-5 (max); backward against central
 * differences of the float64 loss sum(dout * out) to 1e-5 / 1e-4. Inputs sit
 * in one fused row buffer [q | k | v] (ld = (NH + 2 NKV) HS, which is 3C when
 * NKV = NH), as GPT-2's qkv projection leaves them. Also: odd T in 7..33 and a
 * T of 150 spanning three 64-row tiles; NKV = NH, NH/2, 1 (MQA); 2-3 documents
 * per row; outputs bitwise unchanged when a masked position (a later token,
 * another document, another row) changes; bits independent of the thread
 * count. */
#include <omp.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"

typedef struct AttnRef {
  double *buf, *dout; /* buf (B*T, ld): q | k | v; dout (B*T, NH*HS) */
  const int32_t *seg;
  int64_t B, T, NH, NKV, HS, ld;
} AttnRef;

static void attn_ref_fwd(double *out, double *lse, const AttnRef *r) {
  const int64_t HS = r->HS, rep = r->NH / r->NKV;
  const double scale = 1.0 / sqrt((double)HS);
  double *sc = ops_dalloc(r->T);
  for (int64_t b = 0; b < r->B; b++)
    for (int64_t h = 0; h < r->NH; h++)
      for (int64_t t = 0; t < r->T; t++) {
        const int64_t g = h / rep;
        const double *q = r->buf + (b * r->T + t) * r->ld + h * HS;
        double mx = -INFINITY;
        for (int64_t s = 0; s <= t; s++) {
          sc[s] = -INFINITY;
          if (r->seg && r->seg[b * r->T + s] != r->seg[b * r->T + t]) continue;
          const double *k = r->buf + (b * r->T + s) * r->ld + (r->NH + g) * HS;
          double d = 0;
          for (int64_t i = 0; i < HS; i++) d += q[i] * k[i];
          sc[s] = d * scale;
          if (sc[s] > mx) mx = sc[s];
        }
        double sum = 0;
        for (int64_t s = 0; s <= t; s++) sum += exp(sc[s] - mx);
        double *o = out + (b * r->T + t) * r->NH * HS + h * HS;
        for (int64_t i = 0; i < HS; i++) o[i] = 0;
        for (int64_t s = 0; s <= t; s++) {
          const double p = exp(sc[s] - mx) / sum;
          const double *v = r->buf + (b * r->T + s) * r->ld + (r->NH + r->NKV + g) * HS;
          for (int64_t i = 0; i < HS; i++) o[i] += p * v[i];
        }
        if (lse) lse[(b * r->NH + h) * r->T + t] = mx + log(sum);
      }
  free(sc);
}
static double attn_ref_loss(void *ctx) {
  const AttnRef *r = ctx;
  const int64_t n = r->B * r->T * r->NH * r->HS;
  double *out = ops_dalloc(n);
  attn_ref_fwd(out, NULL, r);
  double L = 0;
  for (int64_t i = 0; i < n; i++) L += r->dout[i] * out[i];
  free(out);
  return L;
}

/* seg ids: 2 or 3 documents per row at random boundaries, ids not ordered
 * across rows (only equality matters). */
static void make_segments(int32_t *seg, int64_t B, int64_t T) {
  for (int64_t b = 0; b < B; b++) {
    const int64_t ndoc = 2 + (int64_t)(ops_next() % 2);
    int64_t cut1 = 1 + (int64_t)(ops_next() % (uint64_t)(T / ndoc)),
            cut2 = cut1 + 1 + (int64_t)(ops_next() % (uint64_t)(T / ndoc));
    if (ndoc == 2) cut2 = T;
    for (int64_t t = 0; t < T; t++) seg[b * T + t] = (int32_t)(7 * b + (t < cut1 ? 3 : t < cut2 ? 1 : 5));
  }
}

typedef struct AttnCase {
  int64_t B, T, NH, NKV, HS;
  int use_seg;
} AttnCase;

/* Everything the op needs, with q/k/v pointing into one fused buffer. */
typedef struct AttnRun {
  AttnCase c;
  int64_t ld, N, no;
  float *buf, *out, *lse, *dout, *dbuf;
  int32_t *seg;
} AttnRun;

static AttnRun run_make(AttnCase c) {
  AttnRun r = {c, (c.NH + 2 * c.NKV) * c.HS, c.B * c.T, c.B * c.T * c.NH * c.HS, NULL, NULL, NULL, NULL, NULL, NULL};
  r.buf = ops_alloc(r.N * r.ld), r.dbuf = ops_alloc(r.N * r.ld);
  r.out = ops_alloc(r.no), r.dout = ops_alloc(r.no), r.lse = ops_alloc(c.B * c.NH * c.T);
  ops_fill(r.buf, r.N * r.ld, -1.5, 1.5);
  ops_fill(r.dout, r.no, -1, 1);
  if (c.use_seg) {
    r.seg = calloc((size_t)r.N, sizeof(int32_t));
    make_segments(r.seg, c.B, c.T);
  }
  return r;
}
static void run_free(AttnRun *r) {
  free(r->buf), free(r->dbuf), free(r->out), free(r->dout), free(r->lse), free(r->seg);
}
static void run_fwd(AttnRun *r) {
  const AttnCase c = r->c;
  fm_cpu_attention_fwd(r->out, r->lse, r->buf, r->buf + c.NH * c.HS, r->buf + (c.NH + c.NKV) * c.HS, r->ld, r->ld,
                       r->seg, c.B, c.T, c.NH, c.NKV, c.HS);
}
static void run_bwd(AttnRun *r) {
  const AttnCase c = r->c;
  float *q = r->buf, *dq = r->dbuf;
  fm_cpu_attention_bwd(dq, dq + c.NH * c.HS, dq + (c.NH + c.NKV) * c.HS, r->dout, r->out, r->lse, q, q + c.NH * c.HS,
                       q + (c.NH + c.NKV) * c.HS, r->ld, r->ld, r->seg, c.B, c.T, c.NH, c.NKV, c.HS);
}

static void check_attention(AttnCase c) {
  printf("attention B=%lld T=%lld NH=%lld NKV=%lld HS=%lld seg=%d\n", (long long)c.B, (long long)c.T, (long long)c.NH,
         (long long)c.NKV, (long long)c.HS, c.use_seg);
  AttnRun run = run_make(c);
  AttnRef ref = {ops_to_double(run.buf, run.N * run.ld),
                 ops_to_double(run.dout, run.no),
                 run.seg,
                 c.B,
                 c.T,
                 c.NH,
                 c.NKV,
                 c.HS,
                 run.ld};
  double *rout = ops_dalloc(run.no), *rlse = ops_dalloc(c.B * c.NH * c.T);
  attn_ref_fwd(rout, rlse, &ref);
  run_fwd(&run);
  OPS_EXPECT_CLOSE("forward", run.out, rout, run.no, 1e-6, 1e-5);
  OPS_EXPECT_CLOSE("lse", run.lse, rlse, c.B * c.NH * c.T, 1e-6, 1e-5);

  /* the fused gradient buffer starts at g0: the op adds, so compare dbuf - g0 */
  ops_fill(run.dbuf, run.N * run.ld, -1, 1);
  double *g0 = ops_to_double(run.dbuf, run.N * run.ld);
  run_bwd(&run);
  double *g = ops_dalloc(run.N * run.ld);
  ops_fd(g, ref.buf, run.N * run.ld, attn_ref_loss, &ref, 1e-6);
  for (int64_t i = 0; i < run.N * run.ld; i++) g[i] += g0[i];
  OPS_EXPECT_CLOSE("g0 + dq|dk|dv vs FD", run.dbuf, g, run.N * run.ld, 1e-5, 1e-4);
  /* the same without the g0 offset, per part, so small gradients are not hidden */
  float *d = ops_alloc(run.N * run.ld);
  memset(run.dbuf, 0, (size_t)(run.N * run.ld) * sizeof(float));
  run_bwd(&run);
  memcpy(d, run.dbuf, (size_t)(run.N * run.ld) * sizeof(float));
  for (int64_t i = 0; i < run.N * run.ld; i++) g[i] -= g0[i];
  const char *names[3] = {"dq vs FD", "dk vs FD", "dv vs FD"};
  const int64_t off[4] = {0, c.NH * c.HS, (c.NH + c.NKV) * c.HS, run.ld};
  for (int p = 0; p < 3; p++) {
    const int64_t w = off[p + 1] - off[p];
    float *dp = ops_alloc(run.N * w);
    double *gp = ops_dalloc(run.N * w);
    for (int64_t n = 0; n < run.N; n++)
      for (int64_t j = 0; j < w; j++) {
        dp[n * w + j] = d[n * run.ld + off[p] + j];
        gp[n * w + j] = g[n * run.ld + off[p] + j];
      }
    OPS_EXPECT_CLOSE(names[p], dp, gp, run.N * w, 1e-5, 1e-4);
    free(dp), free(gp);
  }
  free(d), free(g), free(g0), free(rout), free(rlse), free(ref.buf), free(ref.dout);
  run_free(&run);
}

FM_TEST(attention_gqa_documents_T7) {
  ops_seed(41);
  check_attention((AttnCase){2, 7, 4, 2, 8, 1});
}
FM_TEST(attention_gqa_documents_T33) {
  ops_seed(42);
  check_attention((AttnCase){2, 33, 4, 2, 8, 1});
}
FM_TEST(attention_mqa_documents_T19) {
  ops_seed(43);
  check_attention((AttnCase){2, 19, 4, 1, 8, 1});
}
FM_TEST(attention_mha_ld3C_T25) {
  ops_seed(44);
  check_attention((AttnCase){2, 25, 4, 4, 8, 1});
}
FM_TEST(attention_mha_no_seg_T13) {
  ops_seed(45);
  check_attention((AttnCase){1, 13, 4, 4, 6, 0});
}
FM_TEST(attention_three_tiles_T150) {
  ops_seed(46);
  check_attention((AttnCase){1, 150, 2, 1, 4, 1});
}

/* Change what a position may not see; what it produces must keep its bits. */
FM_TEST(attention_masked_positions_do_not_leak) {
  ops_seed(47);
  const AttnCase c = {2, 97, 4, 2, 16, 1};
  AttnRun a = run_make(c), b = run_make(c);
  memcpy(b.buf, a.buf, (size_t)(a.N * a.ld) * sizeof(float));
  memcpy(b.dout, a.dout, (size_t)a.no * sizeof(float));
  memcpy(b.seg, a.seg, (size_t)a.N * sizeof(int32_t));
  run_fwd(&a);
  run_bwd(&a);
  /* row 0: find document starts; t1 = last token of the first document */
  int64_t t1 = 0;
  while (t1 + 1 < c.T && a.seg[t1 + 1] == a.seg[0]) t1++;
  /* perturb in b: row 0, every token of the first document (q, k, v, dout),
   * and row 1 tokens after 60: the rest of row 0 and row 1 up to 60 see none */
  for (int64_t t = 0; t <= t1; t++)
    for (int64_t j = 0; j < a.ld; j++) b.buf[t * a.ld + j] += 0.5f;
  for (int64_t t = 61; t < c.T; t++)
    for (int64_t j = 0; j < a.ld; j++) b.buf[(c.T + t) * a.ld + j] -= 0.25f;
  run_fwd(&b);
  run_bwd(&b);
  const int64_t od = c.NH * c.HS, qd = c.NH * c.HS;
  int64_t diff_out = 0, diff_lse = 0, diff_dq = 0, changed = 0;
  for (int64_t bb = 0; bb < 2; bb++)
    for (int64_t t = 0; t < c.T; t++) {
      const int free_row = bb == 0 ? t > t1 : t <= 60; /* must be unchanged */
      const int64_t n = bb * c.T + t;
      const int64_t d = ops_bits_differ(a.out + n * od, b.out + n * od, od);
      int64_t dl = 0;
      for (int64_t h = 0; h < c.NH; h++)
        dl += ops_bits_differ(a.lse + (bb * c.NH + h) * c.T + t, b.lse + (bb * c.NH + h) * c.T + t, 1);
      if (free_row) {
        diff_out += d, diff_lse += dl;
        diff_dq += ops_bits_differ(a.dbuf + n * a.ld, b.dbuf + n * a.ld, qd);
      } else {
        changed += d > 0;
      }
    }
  printf("  first document ends at t=%lld; rows that had to change and did: %lld of %lld\n", (long long)t1,
         (long long)changed, (long long)(t1 + 1 + c.T - 61));
  FM_EXPECT_EQ_INT(diff_out, 0);
  FM_EXPECT_EQ_INT(diff_lse, 0);
  FM_EXPECT_EQ_INT(diff_dq, 0);
  FM_EXPECT_EQ_INT(changed, t1 + 1 + c.T - 61); /* the perturbation was seen where visible */
  run_free(&a), run_free(&b);
}

FM_TEST(attention_bits_thread_independent) {
  ops_seed(48);
  const AttnCase c = {2, 200, 4, 2, 16, 1};
  AttnRun r[2];
  for (int k = 0; k < 2; k++) {
    ops_seed(48);
    r[k] = run_make(c);
    /* 1 thread takes the fused backward (B * NKV = 4 tasks >= 2 x 1), 3 threads
     * the two passes (4 < 2 x 3): the same bits either way */
    omp_set_num_threads(k ? 3 : 1);
    run_fwd(&r[k]);
    run_bwd(&r[k]);
  }
  omp_set_num_threads(1);
  FM_EXPECT_EQ_INT(ops_bits_differ(r[0].out, r[1].out, r[0].no), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(r[0].lse, r[1].lse, c.B * c.NH * c.T), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(r[0].dbuf, r[1].dbuf, r[0].N * r[0].ld), 0);
  run_free(&r[0]), run_free(&r[1]);
}
