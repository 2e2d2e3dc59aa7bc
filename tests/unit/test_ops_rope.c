/* test_ops_rope.c: fm_cpu_rope_fwd/bwd against a float64 reference written
 * here as HF Llama's apply_rotary_pos_emb: q * cos + rotate_half(q) * sin with
 * rotate_half(x) = cat(-x[HS/2:], x[:HS/2]) and cos/sin = cat(freqs, freqs),
 * freqs = pos * theta^(-arange(0, HS, 2)/HS). Forward to 1e-6 (rel) / 1e-6
 * (max, positions up to 4000); backward against central differences of the
 * float64 loss sum(dout * rope(x)) to 1e-5 / 1e-4; rope_bwd(rope_fwd(x)) == x
 * to 1e-6; strided rows leave the gaps untouched. */
#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"

typedef struct RopeRef {
  double *x, *dout;
  const int32_t *pos;
  int64_t N, ld, H, HS;
  double theta;
} RopeRef;

/* HF: emb = cat(freqs, freqs); q_embed = q * cos(emb) + rotate_half(q) * sin(emb). */
static void rope_ref_fwd(double *out, const RopeRef *r) {
  const int64_t half = r->HS / 2;
  for (int64_t n = 0; n < r->N; n++)
    for (int64_t h = 0; h < r->H; h++) {
      const double *q = r->x + n * r->ld + h * r->HS;
      double *o = out + n * r->ld + h * r->HS;
      for (int64_t j = 0; j < r->HS; j++) {
        const int64_t i = j % half;
        const double inv_freq = 1.0 / pow(r->theta, (double)(2 * i) / (double)r->HS);
        const double emb = (double)r->pos[n] * inv_freq;
        const double rot = j < half ? -q[j + half] : q[j - half];
        o[j] = q[j] * cos(emb) + rot * sin(emb);
      }
    }
}
static double rope_ref_loss(void *ctx) {
  const RopeRef *r = ctx;
  const int64_t n = r->N * r->ld;
  double *out = ops_dalloc(n);
  rope_ref_fwd(out, r);
  double L = 0;
  for (int64_t i = 0; i < r->N; i++) /* only the heads, not the gaps */
    for (int64_t j = 0; j < r->H * r->HS; j++) L += r->dout[i * r->ld + j] * out[i * r->ld + j];
  free(out);
  return L;
}

/* N rows of H heads with a gap of 5 floats after the heads (ld > H*HS). */
static void check_rope(int64_t N, int64_t H, int64_t HS, float theta, int32_t maxpos, int fd) {
  printf("rope N=%lld H=%lld HS=%lld theta=%g maxpos=%d\n", (long long)N, (long long)H, (long long)HS, (double)theta,
         (int)maxpos);
  const int64_t ld = H * HS + 5, n = N * ld;
  int32_t *pos = calloc((size_t)N, sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) pos[i] = (int32_t)(i == 0 ? maxpos : (int64_t)(ops_next() % (uint64_t)(maxpos + 1)));
  float *x = ops_alloc(n), *dout = ops_alloc(n);
  ops_fill(x, n, -1, 1);
  ops_fill(dout, n, -1, 1);
  RopeRef r = {ops_to_double(x, n), ops_to_double(dout, n), pos, N, ld, H, HS, (double)theta};
  double *ref = ops_dalloc(n);
  rope_ref_fwd(ref, &r);
  for (int64_t i = 0; i < N; i++) /* gaps: the reference leaves them 0; the op leaves x there */
    for (int64_t j = H * HS; j < ld; j++) ref[i * ld + j] = x[i * ld + j];
  float *y = ops_copy(x, n);
  fm_cpu_rope_fwd(y, pos, N, ld, H, HS, theta);
  OPS_EXPECT_CLOSE("forward (HF rotate_half)", y, ref, n, 1e-6, 1e-6);

  float *back = ops_copy(y, n);
  fm_cpu_rope_bwd(back, pos, N, ld, H, HS, theta);
  double *xd = ops_to_double(x, n);
  OPS_EXPECT_CLOSE("rope_bwd(rope_fwd(x)) == x", back, xd, n, 1e-6, 1e-6);

  if (fd) {
    float *dx = ops_copy(dout, n);
    fm_cpu_rope_bwd(dx, pos, N, ld, H, HS, theta);
    double *g = ops_dalloc(n);
    ops_fd(g, r.x, n, rope_ref_loss, &r, 1e-6);
    for (int64_t i = 0; i < N; i++) /* gaps carry dout through unchanged */
      for (int64_t j = H * HS; j < ld; j++) g[i * ld + j] = dout[i * ld + j];
    OPS_EXPECT_CLOSE("dx vs FD", dx, g, n, 1e-5, 1e-4);
    free(dx), free(g);
  }
  free(pos), free(x), free(dout), free(r.x), free(r.dout), free(ref), free(y), free(back), free(xd);
}

FM_TEST(rope_fwd_bwd_fd) {
  ops_seed(21);
  check_rope(6, 3, 8, 10000.0f, 40, 1);
}
FM_TEST(rope_llama3_theta_long_positions) {
  ops_seed(22);
  check_rope(9, 2, 64, 500000.0f, 4000, 0);
}
FM_TEST(rope_table_regrows) { /* a larger position after a smaller one, then another theta */
  ops_seed(23);
  check_rope(4, 2, 16, 10000.0f, 10, 1);
  check_rope(4, 2, 16, 10000.0f, 3000, 0);
  check_rope(4, 2, 16, 1000.0f, 50, 1);
}
/* Position 0 is the identity, bit for bit (cos 0 = 1, sin 0 = 0). */
FM_TEST(rope_position_zero_is_identity) {
  ops_seed(24);
  const int64_t N = 3, H = 2, HS = 12, n = N * H * HS;
  int32_t pos[3] = {0, 0, 0};
  float *x = ops_alloc(n);
  ops_fill(x, n, -1, 1);
  float *y = ops_copy(x, n);
  fm_cpu_rope_fwd(y, pos, N, H * HS, H, HS, 10000.0f);
  FM_EXPECT_EQ_INT(ops_bits_differ(x, y, n), 0);
  free(x), free(y);
}
