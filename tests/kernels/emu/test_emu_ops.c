/* test_emu_ops.c: every hand-written CUDA kernel of src/tensor/cuda/, run on
 * the host SIMT emulator (the same .cu compiled with -DFM_SIMT; its ops are
 * named fm_simt_<op>) against the CPU op (fm_cpu_<op>), on small shapes
 * (odd sizes, tails, repeats), under three schedules: forward, reverse and a
 * seeded random thread order. Every case asserts
 *   - the same bits under every schedule (a race or an order-dependent
 *     atomic would differ), and
 *   - the CPU op's bits where the kernel keeps the CPU op's order: all ops
 *     here except the GEMMs (matmul_fwd/bwd: 2 K eps sum |a b|, see there)
 *     and the norm weight gradients, whose fixed-grid partials sum
 *     in another order: there |cuda - cpu| <= 2^-23 |cpu| + 2^-45 sum |terms|
 *     (both are double sums of the same float terms rounded once to float:
 *     they differ by at most one float rounding). They are bitwise for N <= 16
 *     rows (one row per partial: the CPU's order), which is checked too.
 * "Bits" treats two NaNs as equal (the CPU op's vector code and the scalar
 * emulated kernel may set a NaN's sign differently); every other value,
 * -0.0 and Inf included, must match bit for bit.
 * Elementwise ops (GELU, SwiGLU) use the host's expf here, so the emulator
 * checks their indexing bitwise; the device's expf tolerance is in
 * tests/kernels/test_cuda_ops.c (label gpu).
 * The table below assigns each fm_simt_* op to an FmBackend field: a CUDA op
 * whose signature differs from the CPU op's does not compile (-Werror). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu/simt.h"
#include "fm_test.h"
#include "fmhpc/dist.h"
#include "fmhpc/optim.h"
#include "fmhpc/tensor.h"

/* ---- the emulated CUDA table (emu_backend.h) -------------------------------------- */
#include "emu_backend.h"
static const FmBackend *cpu(void) { return fm_backend_cpu(); }

enum { NSCHED = 3 };
static const uint64_t seed = 20261201;

/* ---- helpers --------------------------------------------------------------- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * ((double)(rng >> 11) * 0x1p-53);
}
static float *f32(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static float *f32_uniform(int64_t n, double lo, double hi) {
  float *p = f32(n);
  for (int64_t i = 0; i < n; i++) p[i] = (float)uniform(lo, hi);
  return p;
}
static float *f32_copy(const float *x, int64_t n) {
  float *p = f32(n);
  memcpy(p, x, (size_t)n * sizeof *p);
  return p;
}
static int both_nan(const void *a, const void *b, int64_t elem) {
  if (elem != 4) return 0;
  float x, y;
  memcpy(&x, a, 4);
  memcpy(&y, b, 4);
  return isnan(x) && isnan(y);
}
static int64_t bit_diffs(const void *a, const void *b, int64_t n, int64_t elem) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const char *p = (const char *)a + i * elem, *q = (const char *)b + i * elem;
    bad += memcmp(p, q, (size_t)elem) != 0 && !both_nan(p, q, elem);
  }
  return bad;
}
/* `what` from schedule s against the reference (the CPU op, or schedule 0). */
#define EXPECT_BITS(what, got, ref, n, elem)                                                                           \
  do {                                                                                                                 \
    int64_t fm__d = bit_diffs((got), (ref), (n), (elem));                                                              \
    if (fm__d)                                                                                                         \
      FM__FAIL("%s under %s: %lld of %lld elements differ in bits", (what), fm_simt_schedule_name(), (long long)fm__d, \
               (long long)(n));                                                                                        \
  } while (0)
static void schedule(int s) { fm_simt_set_schedule((FmSimtOrder)s, seed); }
/* What ran in this case (the emulator counts launches). */
static void report(const char *op, int shapes) {
  FmSimtStats st;
  fm_simt_stats(&st);
  printf(
      "emu: %s: %d shape(s) x %d schedules (forward, reverse, random(%llu)): %llu kernel launches, %llu blocks, "
      "%llu threads, compared\n",
      op, shapes, NSCHED, (unsigned long long)seed, (unsigned long long)st.launches, (unsigned long long)st.blocks,
      (unsigned long long)st.threads);
  FM_EXPECT(st.launches > 0);
}

/* ---- elementwise ------------------------------------------------------------- */
FM_TEST(elementwise_bitwise) {
  const int64_t n = 3 * 256 + 77; /* several blocks and a tail */
  float *x = f32_uniform(n, -12.0, 12.0), *y = f32_uniform(n, -3.0, 3.0), *d = f32_uniform(n, -2.0, 2.0);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = INFINITY;
  x[3] = -INFINITY;
  x[4] = NAN;
  float *c1 = f32(n), *c2 = f32(n), *g1 = f32(n), *g2 = f32(n);
  uint16_t *ch = fm_xcalloc((size_t)n, 2), *gh = fm_xcalloc((size_t)n, 2);
  for (int s = 0; s < NSCHED; s++) {
    schedule(s);
    cpu()->gelu_fwd(c1, x, n);
    emu.gelu_fwd(g1, x, n);
    EXPECT_BITS("gelu_fwd", g1, c1, n, 4);
    cpu()->gelu_bwd(c1, d, x, n);
    emu.gelu_bwd(g1, d, x, n);
    EXPECT_BITS("gelu_bwd", g1, c1, n, 4);
    cpu()->swiglu_fwd(c1, x, y, n);
    emu.swiglu_fwd(g1, x, y, n);
    EXPECT_BITS("swiglu_fwd", g1, c1, n, 4);
    cpu()->swiglu_bwd(c1, c2, d, x, y, n);
    emu.swiglu_bwd(g1, g2, d, x, y, n);
    EXPECT_BITS("swiglu_bwd dgate", g1, c1, n, 4);
    EXPECT_BITS("swiglu_bwd dup", g2, c2, n, 4);
    cpu()->add(c1, x, y, n);
    emu.add(g1, x, y, n);
    EXPECT_BITS("add", g1, c1, n, 4);
    cpu()->scale(c1, 0.7071f, n);
    emu.scale(g1, 0.7071f, n);
    EXPECT_BITS("scale", g1, c1, n, 4);
    cpu()->cast_f32_to_bf16(ch, x, n);
    emu.cast_f32_to_bf16(gh, x, n);
    EXPECT_BITS("cast_f32_to_bf16", gh, ch, n, 2);
    cpu()->cast_bf16_to_f32(c1, ch, n);
    emu.cast_bf16_to_f32(g1, ch, n);
    EXPECT_BITS("cast_bf16_to_f32", g1, c1, n, 4);
    memcpy(c1, y, (size_t)n * 4);
    memcpy(g1, y, (size_t)n * 4);
    cpu()->round_bf16(c1, n);
    emu.round_bf16(g1, n);
    EXPECT_BITS("round_bf16", g1, c1, n, 4);
  }
  report("gelu/swiglu fwd+bwd, add, scale, casts, round_bf16", 1);
  free(x), free(y), free(d), free(c1), free(c2), free(g1), free(g2), free(ch), free(gh);
}

/* Five steps of each update with the same gradients: the state stays the
 * CPU's bits (a difference would compound). */
FM_TEST(optimizer_updates_bitwise) {
  const int64_t n = 1000;
  float *w0 = f32_uniform(n, -1.0, 1.0), *h0 = f32_uniform(n, 0.0, 1e-3);
  float *w[NSCHED + 1], *m[NSCHED + 1], *v[NSCHED + 1];
  const char *what[3] = {"adamw", "lion", "sophia"};
  for (int opt = 0; opt < 3; opt++) {
    for (int k = 0; k <= NSCHED; k++) {
      w[k] = f32_copy(w0, n);
      m[k] = f32(n);
      v[k] = opt == 2 ? f32_copy(h0, n) : f32(n); /* Sophia: v is the Hessian estimate h */
    }
    float *g = f32(n);
    for (int t = 1; t <= 5; t++) {
      for (int64_t i = 0; i < n; i++) g[i] = i % 97 == 0 ? 0.0f : (float)(uniform(-1, 1) * pow(10.0, uniform(-7, 1)));
      const float bc1 = (float)(1.0 - pow(0.9, t)), bc2 = (float)(1.0 - pow(0.95, t));
      for (int k = 0; k <= NSCHED; k++) {
        const FmBackend *be = k == NSCHED ? cpu() : &emu;
        if (k < NSCHED) schedule(k);
        if (opt == 0) be->adamw_update(w[k], m[k], v[k], g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
        if (opt == 1) be->lion_update(w[k], m[k], g, n, 1e-4f, 0.9f, 0.1f, 0.99f, 0.01f, 0.1f);
        if (opt == 2) {
          be->sophia_hessian_update(v[k], g, n, 480.0f, 0.99f, 0.01f);
          be->sophia_update(w[k], m[k], v[k], g, n, 2e-4f, 0.965f, 0.035f, bc1, 0.01f, 1e-12f, 0.1f);
        }
      }
    }
    for (int s = 0; s < NSCHED; s++) {
      fm_simt_set_schedule((FmSimtOrder)s, seed);
      char name[64];
      snprintf(name, sizeof name, "%s w", what[opt]);
      EXPECT_BITS(name, w[s], w[NSCHED], n, 4);
      snprintf(name, sizeof name, "%s m", what[opt]);
      EXPECT_BITS(name, m[s], m[NSCHED], n, 4);
      snprintf(name, sizeof name, "%s v/h", what[opt]);
      EXPECT_BITS(name, v[s], v[NSCHED], n, 4);
    }
    for (int k = 0; k <= NSCHED; k++) free(w[k]), free(m[k]), free(v[k]);
    free(g);
  }
  report("adamw, lion, sophia (+ hessian) updates, 5 steps each", 1);
  free(w0), free(h0);
}

/* ---- the gradient norm's block partials and the clip (train.c on a device) ---- */
/* block_sumsq against reduce.c's partials (fm_clip_block_sumsq), bitwise: the
 * norm on the device must be fm_reduce_grad_norm's bits. Magnitudes from
 * 1e-12 to 1e6 so a reordered sum shows; a ragged last block; the real block
 * size (FM_DIST_BLOCK) once. scale_f64 against the host clip loop. */
FM_TEST(norm_clip_bitwise) {
  const int64_t shapes[3][2] = {{4567, 1000}, {3000, 3000}, {FM_DIST_BLOCK + 777, FM_DIST_BLOCK}};
  for (int c = 0; c < 3; c++) {
    const int64_t n = shapes[c][0], block = shapes[c][1], nb = (n + block - 1) / block;
    float *x = f32(n), *want = f32(n), *got = f32(n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(uniform(-1, 1) * pow(10.0, uniform(-12, 6)));
    double *ref = fm_xcalloc((size_t)nb, sizeof *ref), *cpu_out = fm_xcalloc((size_t)nb, sizeof *cpu_out);
    double *dev = emu.alloc(nb * (int64_t)sizeof *dev), *back = fm_xcalloc((size_t)nb, sizeof *back);
    FM_REQUIRE(fm_clip_block_sumsq(x, 0, n, block, ref) == 0);
    cpu()->block_sumsq(cpu_out, x, n, block);
    EXPECT_BITS("block_sumsq cpu", cpu_out, ref, nb, 8);
    const double s = 0.3183098861837907; /* a clip scale with a full mantissa */
    for (int64_t i = 0; i < n; i++) want[i] = (float)((double)x[i] * s);
    for (int k = 0; k < NSCHED; k++) {
      schedule(k);
      emu.block_sumsq(dev, x, n, block);
      emu.copy_to_host(back, dev, nb * (int64_t)sizeof *back);
      EXPECT_BITS("block_sumsq", back, ref, nb, 8);
      memcpy(got, x, (size_t)n * sizeof *got);
      emu.scale_f64(got, s, n);
      EXPECT_BITS("scale_f64", got, want, n, 4);
    }
    cpu()->scale_f64(x, s, n);
    EXPECT_BITS("scale_f64 cpu", x, want, n, 4);
    emu.free(dev);
    free(x), free(want), free(got), free(ref), free(cpu_out), free(back);
  }
  report("block_sumsq (the grad norm's partials), scale_f64 (the clip)", 3);
}

/* ---- matmul (the column-major GEMM wrapper; emulated: a host GEMM) ----------- */
/* Another summation order than OpenBLAS's: |cuda - cpu| <= 2 K eps sum_k |a b|
 * (+ the same for the accumulated term) element by element, with K the
 * reduced length. Shapes with C, OC, N all different so a swapped dimension
 * or leading dimension cannot pass; the bias and dbias paths included. */
static int64_t gemm_bad(const float *got, const float *want, const double *scale, int64_t n, int64_t K,
                        const char *what) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double tol = 2.0 * (double)K * (double)FLT_EPSILON * scale[i] + 1e-30;
    if (!(fabs((double)got[i] - (double)want[i]) <= tol) && bad++ < 5)
      FM__FAIL("%s[%lld] under %s: cuda %.9g cpu %.9g (tol %.3g)", what, (long long)i, fm_simt_schedule_name(), got[i],
               want[i], tol);
  }
  return bad;
}

FM_TEST(matmul_fwd_bwd) {
  const int64_t shapes[][3] = {{7, 13, 5}, {33, 64, 48}, {1, 9, 1}}; /* N, C, OC */
  for (int k = 0; k < 3; k++) {
    const int64_t N = shapes[k][0], C = shapes[k][1], OC = shapes[k][2];
    float *x = f32_uniform(N * C, -1, 1), *w = f32_uniform(OC * C, -1, 1), *bias = f32_uniform(OC, -1, 1);
    float *dout = f32_uniform(N * OC, -1, 1), *di0 = f32_uniform(N * C, -1, 1), *dw0 = f32_uniform(OC * C, -1, 1),
          *db0 = f32_uniform(OC, -1, 1);
    float *co = f32(N * OC), *cdi = f32_copy(di0, N * C), *cdw = f32_copy(dw0, OC * C), *cdb = f32_copy(db0, OC);
    cpu()->matmul_fwd(co, x, w, bias, N, C, OC);
    cpu()->matmul_bwd(cdi, cdw, cdb, dout, x, w, N, C, OC);
    /* scales: sum |terms| of each output */
    double *so = fm_xcalloc((size_t)(N * OC), sizeof(double)), *sdi = fm_xcalloc((size_t)(N * C), sizeof(double));
    double *sdw = fm_xcalloc((size_t)(OC * C), sizeof(double)), *sdb = fm_xcalloc((size_t)OC, sizeof(double));
    for (int64_t n = 0; n < N; n++)
      for (int64_t o = 0; o < OC; o++) {
        so[n * OC + o] = fabs((double)bias[o]);
        sdb[o] += fabs((double)dout[n * OC + o]);
        for (int64_t c = 0; c < C; c++) {
          so[n * OC + o] += fabs((double)x[n * C + c] * w[o * C + c]);
          sdi[n * C + c] += fabs((double)dout[n * OC + o] * w[o * C + c]);
          sdw[o * C + c] += fabs((double)dout[n * OC + o] * x[n * C + c]);
        }
      }
    for (int64_t i = 0; i < N * C; i++) sdi[i] += fabs((double)di0[i]);
    for (int64_t i = 0; i < OC * C; i++) sdw[i] += fabs((double)dw0[i]);
    for (int64_t i = 0; i < OC; i++) sdb[i] += fabs((double)db0[i]);
    float *first[4] = {NULL, NULL, NULL, NULL};
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *go = f32(N * OC), *gdi = f32_copy(di0, N * C), *gdw = f32_copy(dw0, OC * C), *gdb = f32_copy(db0, OC);
      emu.matmul_fwd(go, x, w, bias, N, C, OC);
      emu.matmul_bwd(gdi, gdw, gdb, dout, x, w, N, C, OC);
      FM_EXPECT_EQ_INT(gemm_bad(go, co, so, N * OC, C, "matmul_fwd out"), 0);
      FM_EXPECT_EQ_INT(gemm_bad(gdi, cdi, sdi, N * C, OC, "matmul_bwd dinp"), 0);
      FM_EXPECT_EQ_INT(gemm_bad(gdw, cdw, sdw, OC * C, N, "matmul_bwd dw"), 0);
      FM_EXPECT_EQ_INT(gemm_bad(gdb, cdb, sdb, OC, N, "matmul_bwd dbias"), 0);
      float *got[4] = {go, gdi, gdw, gdb};
      const int64_t len[4] = {N * OC, N * C, OC * C, OC};
      for (int j = 0; j < 4; j++) {
        if (s == 0)
          first[j] = got[j];
        else {
          EXPECT_BITS("matmul (vs forward schedule)", got[j], first[j], len[j], 4);
          free(got[j]);
        }
      }
    }
    for (int j = 0; j < 4; j++) free(first[j]);
    free(x), free(w), free(bias), free(dout), free(di0), free(dw0), free(db0), free(co), free(cdi), free(cdw),
        free(cdb), free(so), free(sdi), free(sdw), free(sdb);
  }
  report("matmul_fwd+bwd (GEMM wrapper + bias/dbias kernels)", 3);
}

/* ---- attention ------------------------------------------------------------------ */
/* q, k, v inside one fused row (ldq = ldkv = (NH + 2 NKV) HS, as GPT-2's qkv
 * buffer), GQA, documents (seg) and none, HS below, at and past a warp's 32
 * lanes. The kernel sums in another order and uses libm's expf, the CPU op
 * blockwise sgemm and its own expf: out and lse within 2e-5 (1 + |cpu|);
 * dq/dk/dv within 1e-4 of the largest |element| of the CPU's array (fp32
 * sums over at most T * NH/NKV terms of size <= that). Bits equal across
 * schedules. */
static int64_t near_bad(const float *got, const float *want, int64_t n, double rtol, int by_max, const char *what) {
  double mx = 0.0;
  for (int64_t i = 0; i < n; i++) mx = fabs((double)want[i]) > mx ? fabs((double)want[i]) : mx;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double tol = by_max ? rtol * mx : rtol * (1.0 + fabs((double)want[i]));
    if (!(fabs((double)got[i] - (double)want[i]) <= tol) && bad++ < 5)
      FM__FAIL("%s[%lld] under %s: cuda %.9g cpu %.9g (tol %.3g)", what, (long long)i, fm_simt_schedule_name(), got[i],
               want[i], tol);
  }
  return bad;
}

FM_TEST(attention_fwd_bwd) {
  const int64_t shapes[][5] = {{2, 37, 4, 2, 16}, {1, 20, 3, 3, 40}, {2, 9, 2, 1, 32}}; /* B, T, NH, NKV, HS */
  for (int k = 0; k < 3; k++) {
    const int64_t B = shapes[k][0], T = shapes[k][1], NH = shapes[k][2], NKV = shapes[k][3], HS = shapes[k][4];
    const int64_t N = B * T, ld = (NH + 2 * NKV) * HS, NO = N * NH * HS;
    float *qkv = f32_uniform(N * ld, -1.5, 1.5), *dout = f32_uniform(NO, -1, 1);
    const float *q = qkv, *kk = qkv + NH * HS, *v = qkv + (NH + NKV) * HS;
    int32_t *seg = fm_xcalloc((size_t)N, sizeof *seg);
    for (int64_t n = 0; n < N; n++) seg[n] = (int32_t)((n % T) / 7 + (n % T == 10)); /* uneven documents */
    for (int withseg = 0; withseg < 2; withseg++) {
      const int32_t *sg = withseg ? seg : NULL;
      float *co = f32(NO), *cl = f32(B * NH * T), *cg = f32_uniform(N * ld, -0.1, 0.1);
      float *g0 = f32_copy(cg, N * ld);
      cpu()->attention_fwd(co, cl, q, kk, v, ld, ld, sg, B, T, NH, NKV, HS);
      cpu()->attention_bwd(cg, cg + NH * HS, cg + (NH + NKV) * HS, dout, co, cl, q, kk, v, ld, ld, sg, B, T, NH, NKV,
                           HS);
      float *first_o = NULL, *first_g = NULL;
      for (int s = 0; s < NSCHED; s++) {
        schedule(s);
        float *go = f32(NO), *gl = f32(B * NH * T), *gg = f32_copy(g0, N * ld);
        emu.attention_fwd(go, gl, q, kk, v, ld, ld, sg, B, T, NH, NKV, HS);
        emu.attention_bwd(gg, gg + NH * HS, gg + (NH + NKV) * HS, dout, co, cl, q, kk, v, ld, ld, sg, B, T, NH, NKV,
                          HS);
        FM_EXPECT_EQ_INT(near_bad(go, co, NO, 2e-5, 0, "attention_fwd out"), 0);
        FM_EXPECT_EQ_INT(near_bad(gl, cl, B * NH * T, 2e-5, 0, "attention_fwd lse"), 0);
        FM_EXPECT_EQ_INT(near_bad(gg, cg, N * ld, 1e-4, 1, "attention_bwd dq|dk|dv"), 0);
        if (s == 0) {
          first_o = go;
          first_g = gg;
        } else {
          EXPECT_BITS("attention_fwd (vs forward schedule)", go, first_o, NO, 4);
          EXPECT_BITS("attention_bwd (vs forward schedule)", gg, first_g, N * ld, 4);
          free(go), free(gg);
        }
        free(gl);
      }
      free(first_o), free(first_g), free(co), free(cl), free(cg), free(g0);
    }
    free(qkv), free(dout), free(seg);
  }
  report("attention_fwd+bwd (GQA, documents, fused qkv strides)", 6);
}

/* ---- classifier + cross-entropy ---------------------------------------------------- */
/* V = 4500: three vocab chunks of the CPU op's 2048 (the same scratch size),
 * a masked row whose target is -1 (must not be read), per-row weights. The
 * loss within 1e-5 relative; dx and dw within 1e-4 of the largest |element|
 * of the CPU's (fp32 sums of V or N terms of a softmax, in another order,
 * with libm's expf against the CPU op's). Bits equal across schedules. */
/* attention_decode: one query row per sequence against a KV cache (q rows
 * inside fused qkv rows, the cache's rows padded past NKV*HS), GQA, positions
 * at 0, at and across the kernel's 32-key tiles, at the cache's end. Both
 * sides are fp32 with other orders: each score is a sum of HS products in
 * fp32 (within HS 2^-24 scale sum|q k| of exact on each side, so eS = twice
 * that between them), the softmax moves a p by at most 2 eS relative, the
 * two expf by 2^-22, the sums l and P V over <= Tc terms by Tc 2^-24 each
 * side: |cuda - cpu| <= (2 eS + (4 Tc + 8) 2^-24) sum_s p|v| + 2^-23 |cpu|,
 * p and sum|q k| in float64 here. Bits equal across schedules. */
FM_TEST(attention_decode_vs_cpu) {
  const int64_t shapes[][5] = {{3, 70, 4, 2, 64}, {2, 40, 3, 1, 40}, {1, 100, 2, 2, 128}}; /* B, Tc, NH, NKV, HS */
  const int32_t poss[][3] = {{0, 31, 69}, {32, 17, 0}, {99, 0, 0}};
  int64_t compared = 0;
  fm_simt_reset_stats();
  for (int k = 0; k < 3; k++) {
    const int64_t B = shapes[k][0], Tc = shapes[k][1], NH = shapes[k][2], NKV = shapes[k][3], HS = shapes[k][4];
    const int64_t ldq = (NH + 2 * NKV) * HS, ldkv = NKV * HS + 8, NO = B * NH * HS;
    float *q = f32_uniform(B * ldq, -2.0, 2.0), *kc = f32_uniform(B * Tc * ldkv, -2.0, 2.0);
    float *vc = f32_uniform(B * Tc * ldkv, -1.0, 1.0), *co = f32(NO);
    int32_t pos[3];
    memcpy(pos, poss[k], sizeof pos);
    cpu()->attention_decode(co, q, kc, vc, ldq, ldkv, pos, B, Tc, NH, NKV, HS);
    double *tol = fm_xcalloc((size_t)NO, sizeof *tol);
    const double scale = 1.0 / sqrt((double)HS);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < NH; h++) {
        const int64_t g = h / (NH / NKV), t = pos[b];
        const float *qr = q + b * ldq + h * HS;
        double m = -INFINITY, eS = 0.0, l = 0.0, *sc = fm_xcalloc((size_t)(t + 1), sizeof *sc);
        for (int64_t s = 0; s <= t; s++) {
          const float *kr = kc + (b * Tc + s) * ldkv + g * HS;
          double d = 0.0, a = 0.0;
          for (int64_t e = 0; e < HS; e++) d += (double)qr[e] * kr[e], a += fabs((double)qr[e] * kr[e]);
          sc[s] = d * scale;
          m = sc[s] > m ? sc[s] : m;
          eS = 2.0 * HS * 0x1p-24 * a * scale > eS ? 2.0 * HS * 0x1p-24 * a * scale : eS;
        }
        for (int64_t s = 0; s <= t; s++) l += exp(sc[s] - m);
        for (int64_t e = 0; e < HS; e++) {
          double mag = 0.0;
          for (int64_t s = 0; s <= t; s++)
            mag += exp(sc[s] - m) / l * fabs((double)vc[(b * Tc + s) * ldkv + g * HS + e]);
          const int64_t i = b * NH * HS + h * HS + e;
          tol[i] = (2.0 * eS + (4.0 * (double)Tc + 8.0) * 0x1p-24) * mag + 0x1p-23 * fabs((double)co[i]);
        }
        free(sc);
      }
    float *first = NULL;
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *go = f32(NO);
      emu.attention_decode(go, q, kc, vc, ldq, ldkv, pos, B, Tc, NH, NKV, HS);
      int64_t bad = 0;
      for (int64_t i = 0; i < NO; i++)
        if (!(fabs((double)go[i] - co[i]) <= tol[i]) && bad++ < 5)
          FM__FAIL("attention_decode[%lld] under %s: cuda %.9g cpu %.9g (tol %.3g)", (long long)i,
                   fm_simt_schedule_name(), go[i], co[i], tol[i]);
      FM_EXPECT_EQ_INT(bad, 0);
      compared += NO;
      if (s == 0)
        first = go;
      else {
        EXPECT_BITS("attention_decode (vs forward schedule)", go, first, NO, 4);
        free(go);
      }
    }
    free(first), free(q), free(kc), free(vc), free(co), free(tol);
  }
  FM_EXPECT(compared > 0);
  report("attention_decode (GQA, fused q rows, padded cache rows)", 3);
}

FM_TEST(xent_fwd_bwd) {
  const int64_t N = 9, C = 16, V = 4500;
  float *x = f32_uniform(N * C, -1, 1), *w = f32_uniform(V * C, -1, 1), *wt = f32(N);
  int32_t *tg = fm_xcalloc((size_t)N, sizeof *tg);
  for (int64_t n = 0; n < N; n++) {
    tg[n] = (int32_t)uniform(0, (double)V);
    wt[n] = (float)(0.5 + n) / 40.0f;
  }
  tg[3] = -1; /* masked */
  wt[3] = 0.0f;
  tg[4] = 2047; /* the last column of the first chunk */
  tg[5] = 2048;
  const int64_t S = fm_cpu_xent_scratch(N, V);
  float *scratch = f32(S), *cdx = f32_uniform(N * C, -0.1, 0.1), *cdw = f32_uniform(V * C, -0.1, 0.1);
  float *dx0 = f32_copy(cdx, N * C), *dw0 = f32_copy(cdw, V * C);
  const double closs = cpu()->xent_fwd_bwd(cdx, cdw, x, w, tg, wt, N, C, V, scratch);
  const double floss = cpu()->xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, scratch);
  FM_EXPECT(closs == floss);
  double first_loss = 0.0;
  float *first_dx = NULL, *first_dw = NULL;
  for (int s = 0; s < NSCHED; s++) {
    schedule(s);
    float *gdx = f32_copy(dx0, N * C), *gdw = f32_copy(dw0, V * C), *gs = f32(S);
    const double gl = emu.xent_fwd_bwd(gdx, gdw, x, w, tg, wt, N, C, V, gs);
    const double gf = emu.xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, gs);
    FM_EXPECT(gl == gf);
    FM_EXPECT_NEAR(gl, closs, 1e-5, 0.0);
    FM_EXPECT_EQ_INT(near_bad(gdx, cdx, N * C, 1e-4, 1, "xent dx"), 0);
    FM_EXPECT_EQ_INT(near_bad(gdw, cdw, V * C, 1e-4, 1, "xent dw"), 0);
    if (s == 0) {
      first_loss = gl;
      first_dx = gdx;
      first_dw = gdw;
    } else {
      FM_EXPECT(gl == first_loss);
      EXPECT_BITS("xent dx (vs forward schedule)", gdx, first_dx, N * C, 4);
      EXPECT_BITS("xent dw (vs forward schedule)", gdw, first_dw, V * C, 4);
      free(gdx), free(gdw);
    }
    free(gs);
  }
  printf("xent: loss cpu %.12g cuda(emulated) %.12g\n", closs, first_loss);
  free(first_dx), free(first_dw), free(x), free(w), free(wt), free(tg), free(scratch), free(cdx), free(cdw), free(dx0),
      free(dw0);
  report("xent_fwd_bwd (3 vocab chunks, a masked row)", 1);
}

/* xent_fwd_bwd_dev: the loss left in a device double (a training step reads
 * its micro-batches' losses once, at its end) is the returning op's, bit for
 * bit, and is the sum the host made before the loss moved to the device:
 * sum_n weight[n] (lse[n] - target logit[n]) in row order in double, over the
 * rows with weight != 0, here recomputed on the host from the op's scratch.
 * N = 600 rows: three chunks of the loss kernel's 256 terms, a partial last
 * one, masked rows (whose target logit the op never writes) among them. */
FM_TEST(xent_loss_on_device) {
  const int64_t N = 600, C = 8, V = 40;
  float *x = f32_uniform(N * C, -1, 1), *w = f32_uniform(V * C, -1, 1), *wt = f32(N);
  int32_t *tg = fm_xcalloc((size_t)N, sizeof *tg);
  for (int64_t n = 0; n < N; n++) {
    tg[n] = (int32_t)uniform(0, (double)V);
    wt[n] = n % 7 == 3 ? 0.0f : (float)uniform(0.1, 2.0) / (float)N;
  }
  const int64_t S = fm_cpu_xent_scratch(N, V), vce = (S - 3 * N) / N;
  int compared = 0;
  for (int s = 0; s < NSCHED; s++) {
    schedule(s);
    float *gs = f32(S), *dx1 = f32(N * C), *dw1 = f32(V * C), *dx2 = f32(N * C), *dw2 = f32(V * C);
    for (int64_t i = 0; i < N; i++) gs[N * vce + 2 * N + i] = NAN; /* unwritten target logits of masked rows */
    const double ret = emu.xent_fwd_bwd(dx1, dw1, x, w, tg, wt, N, C, V, gs);
    const float *lse = gs + N * vce, *tl = lse + 2 * N;
    double host = 0.0;
    for (int64_t n = 0; n < N; n++)
      if (wt[n] != 0.0f) host += (double)wt[n] * ((double)lse[n] - (double)tl[n]);
    double dev = -1.0;
    emu.xent_fwd_bwd_dev(dx2, dw2, x, w, tg, wt, N, C, V, gs, &dev);
    FM_EXPECT(memcmp(&dev, &ret, sizeof dev) == 0);
    FM_EXPECT(memcmp(&dev, &host, sizeof dev) == 0);
    FM_EXPECT(isfinite(dev) && dev > 0.0);
    EXPECT_BITS("xent_fwd_bwd_dev dx (vs xent_fwd_bwd)", dx2, dx1, N * C, 4);
    EXPECT_BITS("xent_fwd_bwd_dev dw (vs xent_fwd_bwd)", dw2, dw1, V * C, 4);
    compared++;
    free(gs), free(dx1), free(dw1), free(dx2), free(dw2);
  }
  FM_EXPECT_EQ_INT(compared, NSCHED);
  free(x), free(w), free(wt), free(tg);
  report("xent_fwd_bwd_dev (600 rows, masked rows)", 1);
}

/* ---- norms ------------------------------------------------------------------- */
static const int64_t norm_shapes[][2] = {{5, 13}, {9, 64}, {3, 1}, {7, 1536}, {40, 100}, {33, 8}};
enum { NNORM = sizeof norm_shapes / sizeof norm_shapes[0] };

/* dw/db of the CUDA kernel against the CPU: bitwise for N <= 16, else one
 * float rounding of the same double sum (see the header). */
static void expect_weight_grad(const char *what, const float *got, const float *cpu_v, const double *scale, int64_t N,
                               int64_t C) {
  int64_t bad = 0, diff = 0;
  for (int64_t c = 0; c < C; c++) {
    if (memcmp(&got[c], &cpu_v[c], 4) == 0) continue;
    diff++;
    const double tol = 0x1p-23 * fabs((double)cpu_v[c]) + 0x1p-45 * scale[c];
    if (N <= 16 || !(fabs((double)got[c] - (double)cpu_v[c]) <= tol)) {
      if (bad++ < 5)
        FM__FAIL("%s N=%lld C=%lld col %lld: cuda %.9g cpu %.9g (tol %.3g)", what, (long long)N, (long long)C,
                 (long long)c, got[c], cpu_v[c], N <= 16 ? 0.0 : tol);
    }
  }
  if (diff)
    printf("  %s N=%lld C=%lld: %lld of %lld within tolerance, not bitwise\n", what, (long long)N, (long long)C,
           (long long)diff, (long long)C);
}

FM_TEST(layernorm_fwd_bwd) {
  for (int k = 0; k < NNORM; k++) {
    const int64_t N = norm_shapes[k][0], C = norm_shapes[k][1], NC = N * C;
    float *x = f32_uniform(NC, -4.0, 4.0), *w = f32_uniform(C, 0.0, 2.0), *b = f32_uniform(C, -1.0, 1.0);
    for (int64_t i = 0; i < NC; i += 7) x[i] += 30.0f; /* an offset the mean must remove */
    float *dout = f32_uniform(NC, -1.0, 1.0), *di0 = f32_uniform(NC, -1.0, 1.0);
    float *dw0 = f32_uniform(C, -1.0, 1.0), *db0 = f32_uniform(C, -1.0, 1.0);
    float *co = f32(NC), *cm = f32(N), *cr = f32(N), *cdi = f32_copy(di0, NC), *cdw = f32_copy(dw0, C),
          *cdb = f32_copy(db0, C);
    cpu()->layernorm_fwd(co, cm, cr, x, w, b, N, C, 1e-5f);
    cpu()->layernorm_bwd(cdi, cdw, cdb, dout, x, w, cm, cr, N, C);
    double *sw = fm_xcalloc((size_t)C, sizeof(double)), *sb = fm_xcalloc((size_t)C, sizeof(double));
    for (int64_t c = 0; c < C; c++) {
      sw[c] = fabs((double)dw0[c]);
      sb[c] = fabs((double)db0[c]);
      for (int64_t n = 0; n < N; n++) {
        sw[c] += fabs((double)dout[n * C + c] * (((double)x[n * C + c] - cm[n]) * cr[n]));
        sb[c] += fabs((double)dout[n * C + c]);
      }
    }
    float *first_dw = f32(C), *first_db = f32(C);
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *go = f32(NC), *gm = f32(N), *gr = f32(N), *gdi = f32_copy(di0, NC), *gdw = f32_copy(dw0, C),
            *gdb = f32_copy(db0, C);
      emu.layernorm_fwd(go, gm, gr, x, w, b, N, C, 1e-5f);
      EXPECT_BITS("layernorm_fwd out", go, co, NC, 4);
      EXPECT_BITS("layernorm_fwd mean", gm, cm, N, 4);
      EXPECT_BITS("layernorm_fwd rstd", gr, cr, N, 4);
      emu.layernorm_bwd(gdi, gdw, gdb, dout, x, w, cm, cr, N, C);
      EXPECT_BITS("layernorm_bwd dinp", gdi, cdi, NC, 4);
      if (s == 0) {
        expect_weight_grad("layernorm_bwd dw", gdw, cdw, sw, N, C);
        expect_weight_grad("layernorm_bwd db", gdb, cdb, sb, N, C);
        memcpy(first_dw, gdw, (size_t)C * 4);
        memcpy(first_db, gdb, (size_t)C * 4);
      } else {
        EXPECT_BITS("layernorm_bwd dw (vs forward schedule)", gdw, first_dw, C, 4);
        EXPECT_BITS("layernorm_bwd db (vs forward schedule)", gdb, first_db, C, 4);
      }
      /* dinp NULL: only the weight gradients */
      float *hdw = f32_copy(dw0, C);
      emu.layernorm_bwd(NULL, hdw, NULL, dout, x, w, cm, cr, N, C);
      EXPECT_BITS("layernorm_bwd dw alone", hdw, first_dw, C, 4);
      free(go), free(gm), free(gr), free(gdi), free(gdw), free(gdb), free(hdw);
    }
    free(x), free(w), free(b), free(dout), free(di0), free(dw0), free(db0), free(co), free(cm), free(cr), free(cdi),
        free(cdw), free(cdb), free(sw), free(sb), free(first_dw), free(first_db);
  }
  report("layernorm_fwd+bwd", NNORM);
}

FM_TEST(rmsnorm_fwd_bwd) {
  for (int k = 0; k < NNORM; k++) {
    const int64_t N = norm_shapes[k][0], C = norm_shapes[k][1], NC = N * C;
    float *x = f32_uniform(NC, -4.0, 4.0), *w = f32_uniform(C, 0.0, 2.0);
    float *dout = f32_uniform(NC, -1.0, 1.0), *di0 = f32_uniform(NC, -1.0, 1.0), *dw0 = f32_uniform(C, -1.0, 1.0);
    float *co = f32(NC), *cr = f32(N), *cdi = f32_copy(di0, NC), *cdw = f32_copy(dw0, C);
    cpu()->rmsnorm_fwd(co, cr, x, w, N, C, 1e-6f);
    cpu()->rmsnorm_bwd(cdi, cdw, dout, x, w, cr, N, C);
    double *sw = fm_xcalloc((size_t)C, sizeof(double));
    for (int64_t c = 0; c < C; c++) {
      sw[c] = fabs((double)dw0[c]);
      for (int64_t n = 0; n < N; n++) sw[c] += fabs((double)dout[n * C + c] * ((double)x[n * C + c] * cr[n]));
    }
    float *first_dw = f32(C);
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *go = f32(NC), *gr = f32(N), *gdi = f32_copy(di0, NC), *gdw = f32_copy(dw0, C);
      emu.rmsnorm_fwd(go, gr, x, w, N, C, 1e-6f);
      EXPECT_BITS("rmsnorm_fwd out", go, co, NC, 4);
      EXPECT_BITS("rmsnorm_fwd rstd", gr, cr, N, 4);
      emu.rmsnorm_bwd(gdi, gdw, dout, x, w, cr, N, C);
      EXPECT_BITS("rmsnorm_bwd dinp", gdi, cdi, NC, 4);
      if (s == 0) {
        expect_weight_grad("rmsnorm_bwd dw", gdw, cdw, sw, N, C);
        memcpy(first_dw, gdw, (size_t)C * 4);
      } else {
        EXPECT_BITS("rmsnorm_bwd dw (vs forward schedule)", gdw, first_dw, C, 4);
      }
      free(go), free(gr), free(gdi), free(gdw);
    }
    free(x), free(w), free(dout), free(di0), free(dw0), free(co), free(cr), free(cdi), free(cdw), free(sw),
        free(first_dw);
  }
  report("rmsnorm_fwd+bwd", NNORM);
}

/* ---- RoPE ------------------------------------------------------------------- */
FM_TEST(rope_fwd_bwd_bitwise) {
  /* q-like rows of H heads in a wider row (ld > H*HS, as in a fused qkv
   * buffer); positions repeat, restart (documents), and some lie past the
   * device table (8192): the in-kernel angle path. */
  const int64_t shapes[][3] = {{37, 3, 16}, {5, 2, 128}, {64, 1, 2}};
  for (int k = 0; k < 3; k++) {
    const int64_t N = shapes[k][0], H = shapes[k][1], HS = shapes[k][2], ld = H * HS + 6;
    int32_t *pos = fm_xcalloc((size_t)N, sizeof *pos);
    for (int64_t n = 0; n < N; n++) pos[n] = (int32_t)(n % 11 == 10 ? 8190 + 3 * n : n % 13);
    float *x0 = f32_uniform(N * ld, -2.0, 2.0);
    float *cf = f32_copy(x0, N * ld), *cb = f32_copy(x0, N * ld);
    cpu()->rope_fwd(cf, pos, N, ld, H, HS, 10000.0f);
    cpu()->rope_bwd(cb, pos, N, ld, H, HS, 10000.0f);
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *gf = f32_copy(x0, N * ld), *gb = f32_copy(x0, N * ld);
      emu.rope_fwd(gf, pos, N, ld, H, HS, 10000.0f);
      emu.rope_bwd(gb, pos, N, ld, H, HS, 10000.0f);
      EXPECT_BITS("rope_fwd", gf, cf, N * ld, 4);
      EXPECT_BITS("rope_bwd", gb, cb, N * ld, 4);
      free(gf), free(gb);
    }
    free(pos), free(x0), free(cf), free(cb);
  }
  report("rope_fwd+bwd", 3);
}

/* ---- embedding ----------------------------------------------------------------- */
FM_TEST(embedding_fwd_bwd_bitwise) {
  const int64_t shapes[][3] = {{70, 45, 13}, {5, 32, 3}, {100, 7, 200}}; /* N, C, V */
  for (int k = 0; k < 3; k++) {
    const int64_t N = shapes[k][0], C = shapes[k][1], V = shapes[k][2], P = 20;
    int32_t *tok = fm_xcalloc((size_t)N, sizeof *tok), *pos = fm_xcalloc((size_t)N, sizeof *pos);
    for (int64_t n = 0; n < N; n++) {
      tok[n] = (int32_t)(uniform(0, 1) < 0.3 ? 1 : (int64_t)uniform(0, (double)V)); /* token 1 repeats often */
      pos[n] = (int32_t)(n % P);
    }
    float *wte = f32_uniform(V * C, -1, 1), *wpe = f32_uniform(P * C, -1, 1), *dout = f32_uniform(N * C, -1, 1);
    float *dwte0 = f32_uniform(V * C, -1, 1), *dwpe0 = f32_uniform(P * C, -1, 1);
    float *co = f32(N * C), *co2 = f32(N * C), *cdte = f32_copy(dwte0, V * C), *cdpe = f32_copy(dwpe0, P * C);
    cpu()->embedding_fwd(co, tok, wte, pos, wpe, N, C);
    cpu()->embedding_fwd(co2, tok, wte, NULL, NULL, N, C);
    cpu()->embedding_bwd(cdte, cdpe, dout, tok, pos, N, C, V);
    for (int s = 0; s < NSCHED; s++) {
      schedule(s);
      float *go = f32(N * C), *go2 = f32(N * C), *gdte = f32_copy(dwte0, V * C), *gdpe = f32_copy(dwpe0, P * C);
      float *gdte2 = f32_copy(dwte0, V * C);
      emu.embedding_fwd(go, tok, wte, pos, wpe, N, C);
      emu.embedding_fwd(go2, tok, wte, NULL, NULL, N, C);
      emu.embedding_bwd(gdte, gdpe, dout, tok, pos, N, C, V);
      emu.embedding_bwd(gdte2, NULL, dout, tok, NULL, N, C, V);
      EXPECT_BITS("embedding_fwd (wte+wpe)", go, co, N * C, 4);
      EXPECT_BITS("embedding_fwd (wte)", go2, co2, N * C, 4);
      EXPECT_BITS("embedding_bwd dwte", gdte, cdte, V * C, 4);
      EXPECT_BITS("embedding_bwd dwpe", gdpe, cdpe, P * C, 4);
      EXPECT_BITS("embedding_bwd dwte (no wpe)", gdte2, cdte, V * C, 4);
      free(go), free(go2), free(gdte), free(gdpe), free(gdte2);
    }
    free(tok), free(pos), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(co), free(co2), free(cdte),
        free(cdpe);
  }
  report("embedding_fwd+bwd", 3);
}

/* ---- exact gradient reduction: quantise + add ------------------------------------ */
/* Against fm_reduce_add itself (src/dist/reduce.c: add_block), with P = 1 and
 * P = 3 shards (its padded layout), over two micro-batches; one block holds a
 * value past the limit (overflow) and one a NaN (nonfinite). fm_reduce_add
 * only reads the communicator's rank and size. */
FM_TEST(quant_add_vs_reduce_add) {
  const int64_t n = 5 * FM_DIST_BLOCK + 777;
  for (int P = 1; P <= 3; P += 2) {
    FmComm comm;
    memset(&comm, 0, sizeof comm);
    comm.size = P;
    comm.rank = 0;
    comm.kind = "none"; /* a stand-in: no collective is called (fm_reduce_create asks the kind) */
    FmReduce g;
    FM_REQUIRE(fm_reduce_create(&g, n, 2, true, &comm) == 0);
    fm_reduce_begin(&g);
    int64_t *acc[NSCHED];
    float *amax[NSCHED];
    int32_t flags[NSCHED][2];
    for (int s = 0; s < NSCHED; s++) {
      acc[s] = fm_xcalloc((size_t)(g.P * g.S), sizeof(int64_t));
      amax[s] = fm_xcalloc((size_t)g.nblocks, sizeof(float));
      flags[s][0] = flags[s][1] = 0;
    }
    int64_t *cacc = fm_xcalloc((size_t)(g.P * g.S), sizeof(int64_t));
    float *camax = fm_xcalloc((size_t)g.nblocks, sizeof(float));
    int32_t cflags[2] = {0, 0};
    float *grad = f32(n);
    for (int mb = 0; mb < 2; mb++) {
      for (int64_t i = 0; i < n; i++) grad[i] = (float)(uniform(-1, 1) * pow(2.0, uniform(-30, 0)));
      for (int64_t i = 0; i < n; i += 4099) grad[i] = (float)(uniform(-0.5, 0.5) * 0x1p-24) + 0x1p-40f; /* ties */
      if (mb == 1) {
        grad[2 * FM_DIST_BLOCK + 5] = 1e5f; /* past 16x headroom of amax_prev = 1: overflow */
        grad[4 * FM_DIST_BLOCK + 9] = NAN;
      }
      fm_reduce_add(&g, grad);
      for (int r = 0; r < g.P; r++) /* the CPU op, the readable form of the same contract */
        cpu()->quant_add(cacc + (int64_t)r * g.S, camax, cflags, grad, g.exp2, g.lo[r], g.hi[r], FM_DIST_BLOCK,
                         g.limit);
      for (int s = 0; s < NSCHED; s++) {
        schedule(s);
        for (int r = 0; r < g.P; r++)
          fm_simt_quant_add(acc[s] + (int64_t)r * g.S, amax[s], flags[s], grad, g.exp2, g.lo[r], g.hi[r], FM_DIST_BLOCK,
                            g.limit);
      }
    }
    FM_EXPECT_EQ_INT(g.overflow, 1);
    FM_EXPECT_EQ_INT(g.nonfinite, 1);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < g.P * g.S; i++) nonzero += g.acc[i] != 0;
    FM_EXPECT(nonzero > n / 2);
    EXPECT_BITS("cpu quant_add acc", cacc, g.acc, g.P * g.S, 8);
    EXPECT_BITS("cpu quant_add amax", camax, g.amax, g.nblocks, 4);
    FM_EXPECT_EQ_INT(cflags[0], g.overflow);
    FM_EXPECT_EQ_INT(cflags[1], g.nonfinite);
    free(cacc);
    free(camax);
    for (int s = 0; s < NSCHED; s++) {
      fm_simt_set_schedule((FmSimtOrder)s, seed);
      EXPECT_BITS("quant_add acc", acc[s], g.acc, g.P * g.S, 8);
      EXPECT_BITS("quant_add amax", amax[s], g.amax, g.nblocks, 4);
      FM_EXPECT_EQ_INT(flags[s][0], g.overflow);
      FM_EXPECT_EQ_INT(flags[s][1], g.nonfinite);
      free(acc[s]);
      free(amax[s]);
    }
    free(grad);
    fm_reduce_free(&g);
  }
  report("quant_add", 2);
}

/* The reduced shard's dequantisation (reduce.c's device finish): the CUDA
 * kernel under every schedule and the CPU twin give reduce.c's host-finish
 * formula bit for bit, on sums that need both roundings (int64 -> double
 * drops bits above 2^53, double -> float rounds again, and ties), at a shard
 * start inside the vector and scales from 2^-120 to 2^120. */
/* block_scales: the next step's scale exponents where the maxima are (the
 * NCCL path keeps them on the device). Against an independent reference:
 * s = log2(limit) - (ilogb(amax) + 1) - 12 clamped to [-120, 120] (an
 * all-zero block as amax = 1), on maxima across the float range (zero,
 * subnormals, powers of two and their neighbours, FLT_MAX), for two limits;
 * the CPU op and the emulated kernel give exactly these integers. */
FM_TEST(block_scales_bitwise) {
  enum { NB = 1000 };
  float *amax = f32(NB);
  const float fixed[] = {0.0f,    1.0f, 0.5f,        2.0f,       1e-45f,  1e-40f, 1.17549435e-38f,
                         FLT_MAX, 3.0f, 0.99999994f, 1.0000001f, 4096.0f, 1e30f,  1e-30f};
  const int nf = (int)(sizeof fixed / sizeof fixed[0]);
  for (int b = 0; b < NB; b++) amax[b] = b < nf ? fixed[b] : (float)ldexp(uniform(0.5, 1.0), (int)uniform(-149, 128));
  const int64_t limits[] = {(int64_t)1 << 51, (int64_t)1 << 60};
  int compared = 0;
  for (int k = 0; k < 2; k++) {
    int32_t ref[NB], cpu_s[NB];
    int lim_bits = 0;
    while (((int64_t)1 << lim_bits) < limits[k]) lim_bits++;
    for (int b = 0; b < NB; b++) {
      const int e = amax[b] > 0.0f ? ilogb(amax[b]) + 1 : 1;
      int s = lim_bits - e - 12;
      ref[b] = s > 120 ? 120 : s < -120 ? -120 : s;
    }
    cpu()->block_scales(cpu_s, amax, NB, limits[k]);
    FM_EXPECT(memcmp(cpu_s, ref, sizeof ref) == 0);
    for (int sc = 0; sc < NSCHED; sc++) {
      schedule(sc);
      int32_t got[NB];
      memset(got, 0x7f, sizeof got);
      emu.block_scales(got, amax, NB, limits[k]);
      for (int b = 0; b < NB; b++) {
        if (got[b] != ref[b])
          FM__FAIL("block_scales: block %d amax %a limit 2^%d: %d, expected %d", b, (double)amax[b], lim_bits, got[b],
                   ref[b]);
        compared++;
      }
    }
  }
  FM_EXPECT_EQ_INT(compared, 2 * NSCHED * NB);
  free(amax);
  report("block_scales (1000 maxima, 2 limits)", 2);
}

FM_TEST(dequant_bitwise) {
  const int64_t block = FM_DIST_BLOCK, lo = 3 * block, len = 2 * block + 333, nb = 8;
  int64_t *acc = fm_xcalloc((size_t)len, sizeof *acc);
  int32_t exp2[8];
  for (int64_t b = 0; b < nb; b++) exp2[b] = (int32_t)(b * 37 % 241) - 120;
  exp2[3] = 52, exp2[4] = 0, exp2[5] = -60;
  for (int64_t i = 0; i < len; i++) {
    const double m = uniform(-1.0, 1.0) * pow(2.0, uniform(0, 62));
    acc[i] = (int64_t)m;
  }
  acc[0] = INT64_MAX / 2 + 1, acc[1] = -(INT64_MAX / 2) - 12345, acc[2] = 0, acc[3] = -1;
  acc[4] = ((int64_t)1 << 24) + 1, acc[5] = ((int64_t)1 << 25) + 3, acc[6] = ((int64_t)1 << 54) + 1; /* ties */
  acc[7] = ((int64_t)1 << 53) + ((int64_t)1 << 29) + 1; /* halfway for float after the double rounding */
  float *ref = f32(len), *c = f32(len), *g = f32(len);
  for (int64_t i0 = 0; i0 < len; i0 += block) { /* reduce.c fm_reduce_finish, host path */
    const double inv = ldexp(1.0, -exp2[(lo + i0) / block]);
    const int64_t i1 = i0 + block < len ? i0 + block : len;
    for (int64_t i = i0; i < i1; i++) ref[i] = (float)((double)acc[i] * inv);
  }
  cpu()->dequant(c, acc, exp2, lo, len, block);
  EXPECT_BITS("cpu dequant", c, ref, len, 4);
  for (int s = 0; s < NSCHED; s++) {
    schedule(s);
    memset(g, 0xFF, (size_t)len * sizeof *g);
    emu.dequant(g, acc, exp2, lo, len, block);
    EXPECT_BITS("dequant", g, ref, len, 4);
  }
  int64_t nonzero = 0;
  for (int64_t i = 0; i < len; i++) nonzero += ref[i] != 0.0f;
  FM_EXPECT(nonzero > len / 2);
  free(acc), free(ref), free(c), free(g);
  report("dequant", 1);
}

/* ---- memory (host memory under the emulator) ------------------------------------ */
/* The emulated device's size (FMHPC_EMU_DEVICE_MEM) and the bytes in use:
 * device_mem reports them, alloc_for and free move them by the bytes asked
 * (emu.train_oom runs an allocation past the size: the report). */
FM_TEST(device_memory_limit) {
  int64_t f = 0, t = 0;
  unsetenv("FMHPC_EMU_DEVICE_MEM");
  FM_EXPECT_EQ_INT(emu.device_mem(&f, &t), FM_ENODEV);
  FM_EXPECT(f == -1 && t == -1);
  setenv("FMHPC_EMU_DEVICE_MEM", "2M", 1);
  FM_EXPECT_EQ_INT(emu.device_mem(&f, &t), FM_OK);
  FM_EXPECT_EQ_INT(t, 2 << 20);
  const int64_t f0 = f;
  FM_EXPECT(f0 > 0 && f0 <= t);
  void *p = emu.alloc_for(1000, "a test buffer", 1000), *q = emu.alloc(24);
  FM_REQUIRE(p != NULL && q != NULL && ((uintptr_t)p % 256) == 0);
  FM_EXPECT_EQ_INT(emu.device_mem(&f, &t), FM_OK);
  FM_EXPECT_EQ_INT(f, f0 - 1024);
  emu.free(p);
  emu.free(q);
  FM_EXPECT_EQ_INT(emu.device_mem(&f, &t), FM_OK);
  FM_EXPECT_EQ_INT(f, f0);
  FM_EXPECT(emu.alloc_for(0, "nothing", 0) == NULL);
  fm_mem_plan_set(FM_MEM_ACT, 12345);
  FM_EXPECT_EQ_INT(fm_mem_plan_get(FM_MEM_ACT), 12345);
  FM_EXPECT(strcmp(fm_mem_item_name(FM_MEM_ACT), "the activations") == 0);
  unsetenv("FMHPC_EMU_DEVICE_MEM");
  /* device_name: what MFU's peak is looked up by (train.c) */
  char name[64] = "x";
  FM_EXPECT_EQ_INT(emu.device_name(name, sizeof name), FM_OK);
  FM_EXPECT_EQ_STR(name, "SIMT emulator");
  FM_EXPECT_EQ_INT(fm_backend_cpu()->device_name(name, sizeof name), FM_ENODEV);
  FM_EXPECT_EQ_STR(name, "");
}

FM_TEST(memory_ops) {
  enum { N = 1001 };
  FM_EXPECT(emu.alloc(0) == NULL);
  emu.free(NULL);
  uint8_t host[N], back[N], want[N];
  for (int i = 0; i < N; i++) host[i] = (uint8_t)(uniform(0, 256));
  uint8_t *a = emu.alloc(N), *b = emu.alloc(N);
  FM_REQUIRE(a && b && ((uintptr_t)a & 63) == 0);
  emu.copy_to_device(a, host, N);
  emu.copy(b, a, N);
  emu.memset(b + 7, 0x5A, 101);
  emu.synchronize();
  emu.copy_to_host(back, b, N);
  memcpy(want, host, N);
  memset(want + 7, 0x5A, 101);
  FM_EXPECT(memcmp(back, want, N) == 0);
  /* a queued upload lands before the next read (the stream's order) */
  emu.copy_to_device_async(a + 3, host + 500, 400);
  emu.copy_to_host(back, a, N);
  memcpy(want, host, N);
  memcpy(want + 3, host + 500, 400);
  FM_EXPECT(memcmp(back, want, N) == 0);
  emu.free(a);
  emu.free(b);
}

/* Every op ops.def marks `cuda` has its emulated kernel and a case above;
 * printed as the op table (CPU / CUDA / emulated test), for the record. */
static const char *const tested[] = {
    /* memory_ops */
    "alloc",
    "free",
    "memset",
    "copy_to_device",
    "copy_to_device_async",
    "copy_to_host",
    "copy",
    "synchronize",
    /* device_memory_limit; emu.train_oom (the report past the size) */
    "alloc_for",
    "device_mem",
    "device_name",
    /* elementwise_bitwise */
    "gelu_fwd",
    "gelu_bwd",
    "swiglu_fwd",
    "swiglu_bwd",
    "add",
    "scale",
    "cast_f32_to_bf16",
    "cast_bf16_to_f32",
    "round_bf16",
    /* optimizer_updates_bitwise */
    "adamw_update",
    "lion_update",
    "sophia_update",
    "sophia_hessian_update",
    /* matmul_fwd_bwd */
    "matmul_fwd",
    "matmul_bwd",
    /* layernorm_fwd_bwd, rmsnorm_fwd_bwd */
    "layernorm_fwd",
    "layernorm_bwd",
    "rmsnorm_fwd",
    "rmsnorm_bwd",
    /* attention_fwd_bwd; test_emu_attention.c flash_fwd_bwd (the mma.sync tiles) */
    "attention_fwd",
    "attention_bwd",
    /* attention_decode_vs_cpu */
    "attention_decode",
    /* xent_fwd_bwd */
    "xent_fwd_bwd",
    /* xent_loss_on_device */
    "xent_fwd_bwd_dev",
    /* rope_fwd_bwd_bitwise */
    "rope_fwd",
    "rope_bwd",
    /* embedding_fwd_bwd_bitwise */
    "embedding_fwd",
    "embedding_bwd",
    /* test_emu_gemm.c: gemm_layouts_both_precisions, matmul_bf16_vs_cpu_bf16, gemm_plans_pinned_per_shape,
     * gemm_plans_record_and_pin; emu.train_plans (a checkpoint's gemm_plans attribute, resume) */
    "set_compute_bf16",
    "gemm_plans_text",
    "gemm_plans_record",
    "gemm_plans_pin",
    /* norm_clip_bitwise */
    "block_sumsq",
    "scale_f64",
    /* quant_add_vs_reduce_add */
    "quant_add",
    /* dequant_bitwise */
    "dequant",
    /* block_scales_bitwise */
    "block_scales",
};
static int is_tested(const char *op) {
  for (size_t i = 0; i < sizeof tested / sizeof tested[0]; i++)
    if (strcmp(tested[i], op) == 0) return 1;
  return 0;
}

FM_TEST(emulated_table) {
  int ops = 0, with_cuda = 0;
  printf("  %-22s %-6s %-6s %s\n", "op", "cpu", "cuda", "emulated test (test_emu_ops)");
#define FM_OP(name, cuda, use, ret, params)                                                                           \
  do {                                                                                                                \
    const int want = strcmp(#cuda, "cuda") == 0, have = emu.name != NULL, t = is_tested(#name);                       \
    ops++;                                                                                                            \
    with_cuda += want;                                                                                                \
    printf("  %-22s %-6s %-6s %s\n", #name, fm_backend_cpu()->name ? "yes" : "NULL", want ? "yes" : "NULL",           \
           want ? (t ? "yes" : "MISSING") : "-");                                                                     \
    if (want != have) FM__FAIL("%s: ops.def says %s, the emulated table has %s", #name, #cuda, have ? "it" : "NULL"); \
    if (want && !t) FM__FAIL("%s: a CUDA op without an emulated test here", #name);                                   \
  } while (0);
#include "fmhpc/ops.def"
#undef FM_OP
  printf(
      "emu: %d of %d backend ops have a CUDA kernel, each run by the emulator against the CPU op under %d schedules\n",
      with_cuda, ops, NSCHED);
  FM_EXPECT_EQ_INT(with_cuda, (int)(sizeof tested / sizeof tested[0]));
}
