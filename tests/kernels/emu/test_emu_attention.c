/* test_emu_attention.c: the tensor-core (mma.sync m16n8k16 bf16) flash
 * attention kernels of src/tensor/cuda/attention_flash.cu under the SIMT
 * emulator, through the CUDA op with the bf16 compute switch on
 * (fm_simt_attention_set_bf16), on small shapes: T = 64..128 with documents
 * and without, GQA, head sizes 64 and 128, fused (GPT-2 qkv) and separate
 * strides, tails (T not a multiple of 64), accumulation (+=) into nonzero
 * gradients. Three schedules (forward, reverse, seeded random): equal bits.
 *
 * Tolerances (derived here, checked per element):
 * 1. Against a float64 reference computed from the bf16-rounded q, k, v and
 *    dout (ref_b; the backward takes out and lse as inputs, as the op does:
 *    both references and the kernel get the CPU op's). What is left is the
 *    kernel's own rounding: P and dS are rounded to bf16 before their tensor-
 *    core products (relative 2^-9 each), and p carries a relative error
 *    delta from the fp32 score sum (HS terms, 2^-24 each relative to
 *    scale sum|q k|), the base-2 rescaling and exp2f (a few ulp); sums over
 *    <= 128 terms in fp32 add <= 128 * 2^-24 = 2^-17 relative. With delta
 *    <= 2^-10 (asserted from the data), every first-order term is below
 *    2^-9 + 2^-10 + 2^-17 < 2^-8 of the sum of the magnitudes of the
 *    element's terms:
 *      out[t,d]  <= 2^-8 sum_s p|v_sd|              lse <= 2^-17 (1 + |lse| + scale max_s sum|q k|)
 *      dv[s,d]   <= 2^-8 sum_t p|dout_td|
 *      dk[s,d]   <= 2^-8 scale sum_t |dS||q_td| + (HS+2) 2^-23 scale sum_t p (sum_e |dout v| + |D|) |q_td|
 *      dq[t,d]   likewise with k_sd (dP - D may cancel: the second term is
 *                dP's fp32 sum and D's rounding, before the cancellation)
 *    plus 2^-23 |result| for the final fp32 += into the gradient.
 * 2. Against the CPU op (fp32 inputs): |kernel - cpu| <= bound 1
 *    + |ref_b - ref_f| (the exact effect of rounding the inputs to bf16,
 *    both references in float64; ref_f from the fp32 inputs) + 2^-15 of the
 *    same magnitudes (the CPU op's fp32 sums and its expf).
 * The tests can fail: the same comparison with the document mask left out of
 * the reference, or with the reference's rows permuted, must flag elements
 * (checked below), and planting a wrong fragment index or dropping the mask
 * in the kernel (tried by hand: swapping B's two n-tiles in fm__fa_abt, or
 * making fm__fa_vis ignore seg) fails every shape here. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu/simt.h"
#include "fm_test.h"
#include "fmhpc/tensor.h"

void fm_simt_attention_set_bf16(int on);
void fm_simt_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                           int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void fm_simt_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                           const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void fm_simt_attention_flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                                 int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                 int64_t HS);

enum { NSCHED = 3 };
static const uint64_t seed = 20261201;

static uint64_t rng = 0x243F6A8885A308D3ull;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * ((double)(rng >> 11) * 0x1p-53);
}
static float *f32(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static double *f64(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
/* Round to bf16, nearest even (written here, not taken from the kernels). */
static float bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  memcpy(&y, &u, 4);
  return y;
}

typedef struct Shape {
  int64_t B, T, NH, NKV, HS;
  int docs, fused;
} Shape;
typedef struct Prob { /* one problem: q, k, v as views of one (fused) or three arrays */
  Shape s;
  int64_t ldq, ldkv, nq, nkv; /* elements of the q and k/v arrays */
  float *q, *k, *v, *dout;
  int32_t *seg;
} Prob;

static int visible(const Prob *p, int64_t b, int64_t t, int64_t u) {
  return u <= t && (!p->seg || p->seg[b * p->s.T + u] == p->seg[b * p->s.T + t]);
}

/* Forward in float64: out, lse, and each out element's sum_s p |v|; *qk_max
 * = max over rows of scale * max_s sum_d |q k|. */
static void ref_fwd(double *out, double *lse, double *mag, double *qk_max, const Prob *p, const float *q,
                    const float *k, const float *v) {
  const Shape *s = &p->s;
  const int64_t HS = s->HS, T = s->T;
  const double scale = 1.0 / sqrt((double)HS);
  double *sc = f64(T);
  *qk_max = 0.0;
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t g = h / (s->NH / s->NKV);
        const float *qr = q + (b * T + t) * p->ldq + h * HS;
        double m = -INFINITY;
        for (int64_t u = 0; u <= t; u++) {
          if (!visible(p, b, t, u)) continue;
          const float *kr = k + (b * T + u) * p->ldkv + g * HS;
          double d = 0.0, a = 0.0;
          for (int64_t e = 0; e < HS; e++) d += (double)qr[e] * kr[e], a += fabs((double)qr[e] * kr[e]);
          sc[u] = d * scale;
          m = sc[u] > m ? sc[u] : m;
          *qk_max = a * scale > *qk_max ? a * scale : *qk_max;
        }
        double l = 0.0;
        for (int64_t u = 0; u <= t; u++)
          if (visible(p, b, t, u)) l += exp(sc[u] - m);
        double *o = out + (b * T + t) * s->NH * HS + h * HS, *mg = mag + (b * T + t) * s->NH * HS + h * HS;
        for (int64_t e = 0; e < HS; e++) o[e] = mg[e] = 0.0;
        for (int64_t u = 0; u <= t; u++) {
          if (!visible(p, b, t, u)) continue;
          const double pr = exp(sc[u] - m) / l;
          const float *vr = v + (b * T + u) * p->ldkv + g * HS;
          for (int64_t e = 0; e < HS; e++) o[e] += pr * vr[e], mg[e] += pr * fabs((double)vr[e]);
        }
        lse[(b * s->NH + h) * T + t] = m + log(l);
      }
  free(sc);
}

/* Backward in float64 with out and lse as inputs: the gradients' increments
 * into (N, ld)-shaped arrays laid out as the op's dq/dk/dv (the q view's or
 * k/v views' strides), each element's first-order magnitude A (sum of
 * |products| through the bf16-rounded factors) and Bm (the dP/D part). */
typedef struct Grads {
  double *dq, *dk, *dv, *Aq, *Ak, *Av, *Bq, *Bk;
} Grads;
static Grads grads_new(const Prob *p) {
  Grads g = {f64(p->nq), f64(p->nkv), f64(p->nkv), f64(p->nq), f64(p->nkv), f64(p->nkv), f64(p->nq), f64(p->nkv)};
  return g;
}
static void grads_free(Grads *g) {
  free(g->dq), free(g->dk), free(g->dv), free(g->Aq), free(g->Ak), free(g->Av), free(g->Bq), free(g->Bk);
}
static void ref_bwd(Grads *G, const Prob *p, const float *q, const float *k, const float *v, const float *dout,
                    const float *out, const float *lse) {
  const Shape *s = &p->s;
  const int64_t HS = s->HS, T = s->T, ldo = s->NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t g = h / (s->NH / s->NKV);
        const int64_t iq = (b * T + t) * p->ldq + h * HS, io = (b * T + t) * ldo + h * HS;
        double D = 0.0;
        for (int64_t e = 0; e < HS; e++) D += (double)dout[io + e] * out[io + e];
        const double L = lse[(b * s->NH + h) * T + t];
        for (int64_t u = 0; u <= t; u++) {
          if (!visible(p, b, t, u)) continue;
          const int64_t ik = (b * T + u) * p->ldkv + g * HS;
          double S = 0.0, dP = 0.0, dPa = 0.0;
          for (int64_t e = 0; e < HS; e++) {
            S += (double)q[iq + e] * k[ik + e];
            dP += (double)dout[io + e] * v[ik + e];
            dPa += fabs((double)dout[io + e] * v[ik + e]);
          }
          const double pr = exp(S * scale - L), dS = pr * (dP - D), bm = pr * (dPa + fabs(D));
          for (int64_t e = 0; e < HS; e++) {
            G->dv[ik + e] += pr * dout[io + e];
            G->Av[ik + e] += pr * fabs((double)dout[io + e]);
            G->dk[ik + e] += scale * dS * q[iq + e];
            G->Ak[ik + e] += scale * fabs(dS * q[iq + e]);
            G->Bk[ik + e] += scale * bm * fabs((double)q[iq + e]);
            G->dq[iq + e] += scale * dS * k[ik + e];
            G->Aq[iq + e] += scale * fabs(dS * k[ik + e]);
            G->Bq[iq + e] += scale * bm * fabs((double)k[ik + e]);
          }
        }
      }
}

static Prob prob_new(Shape s) {
  Prob p = {s, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL};
  const int64_t N = s.B * s.T, HS = s.HS;
  if (s.fused) {
    p.ldq = p.ldkv = (s.NH + 2 * s.NKV) * HS;
    p.nq = p.nkv = N * p.ldq;
    p.q = f32(p.nq);
    p.k = p.q + s.NH * HS;
    p.v = p.q + (s.NH + s.NKV) * HS;
    for (int64_t i = 0; i < p.nq; i++) p.q[i] = (float)uniform(-2.0, 2.0);
    for (int64_t n = 0; n < N; n++) /* v smaller than q, k */
      for (int64_t e = 0; e < s.NKV * HS; e++) p.v[n * p.ldkv + e] = (float)uniform(-1.0, 1.0);
  } else {
    p.ldq = s.NH * HS, p.ldkv = s.NKV * HS, p.nq = N * p.ldq, p.nkv = N * p.ldkv;
    p.q = f32(p.nq), p.k = f32(p.nkv), p.v = f32(p.nkv);
    for (int64_t i = 0; i < p.nq; i++) p.q[i] = (float)uniform(-2.0, 2.0);
    for (int64_t i = 0; i < p.nkv; i++) p.k[i] = (float)uniform(-2.0, 2.0), p.v[i] = (float)uniform(-1.0, 1.0);
  }
  p.dout = f32(N * s.NH * HS);
  for (int64_t i = 0; i < N * s.NH * HS; i++) p.dout[i] = (float)uniform(-1.0, 1.0);
  if (s.docs) { /* documents of 1..40 tokens, ids not ordered */
    p.seg = fm_xcalloc((size_t)N, sizeof *p.seg);
    for (int64_t b = 0; b < s.B; b++) {
      int64_t t = 0;
      int32_t id = 7;
      while (t < s.T) {
        const int64_t len = 1 + (int64_t)uniform(0.0, 40.0);
        for (int64_t u = t; u < t + len && u < s.T; u++) p.seg[b * s.T + u] = id;
        t += len, id = (id * 5 + 3) % 11;
      }
    }
  }
  return p;
}
static void prob_free(Prob *p) {
  free(p->q);
  if (!p->s.fused) free(p->k), free(p->v);
  free(p->dout), free(p->seg);
}
/* A copy of x (n elements) rounded to bf16. */
static float *rounded(const float *x, int64_t n) {
  float *y = f32(n);
  for (int64_t i = 0; i < n; i++) y[i] = bf16(x[i]);
  return y;
}

/* Elements of got outside want +- tol (NaN counts); prints the first few
 * when `loud`. */
static int64_t outside(const char *what, const float *got, const double *want, const double *tol, int64_t n, int loud) {
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double err = fabs((double)got[i] - want[i]);
    worst = err / tol[i] > worst ? err / tol[i] : worst;
    if (!(err <= tol[i]) && bad++ < 4 && loud)
      FM__FAIL("%s[%lld] under %s: kernel %.9g reference %.9g (tol %.3g)", what, (long long)i, fm_simt_schedule_name(),
               got[i], want[i], tol[i]);
  }
  if (loud) printf("    %-34s largest |error| / tolerance %.3f over %lld values\n", what, worst, (long long)n);
  return bad;
}
static int64_t bit_diffs(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, 4) != 0;
  return d;
}

static const Shape shapes[] = {
    /* B, T, NH, NKV, HS, docs, fused */
    {1, 128, 4, 2, 64, 1, 1},
    {2, 72, 2, 1, 128, 1, 0},
    {1, 64, 3, 3, 64, 0, 0},
    {1, 100, 2, 1, 128, 0, 1},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

FM_TEST(flash_fwd_bwd) {
  int64_t compared = 0;
  fm_simt_reset_stats();
  for (int si = 0; si < NSHAPES; si++) {
    const Shape sh = shapes[si];
    Prob p = prob_new(sh);
    const int64_t N = sh.B * sh.T, NO = N * sh.NH * sh.HS, NL = sh.B * sh.NH * sh.T, HS = sh.HS;
    const int64_t koff = p.k - p.q, voff = p.v - p.q; /* fused: offsets into q's array */
    /* The CPU op (fp32): out, lse; its backward from a nonzero base. */
    float *co = f32(NO), *cl = f32(NL), *base_q = f32(p.nq), *base_kv = f32(p.nkv);
    for (int64_t i = 0; i < p.nq; i++) base_q[i] = (float)uniform(-0.1, 0.1);
    for (int64_t i = 0; i < p.nkv; i++) base_kv[i] = (float)uniform(-0.1, 0.1);
    fm_backend_cpu()->attention_fwd(co, cl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
    /* gradient arrays: fused: one (N, ld) array (dq, dk, dv at the views'
     * offsets); separate: dq, dk, dv arrays */
    const int64_t ng = sh.fused ? p.nq : p.nq + 2 * p.nkv;
    float *cg = f32(ng);
    for (int64_t i = 0; i < ng; i++)
      cg[i] = sh.fused ? base_q[i] : (i < p.nq ? base_q[i] : base_kv[(i - p.nq) % p.nkv]);
    float *const base_g = f32(ng);
    memcpy(base_g, cg, (size_t)ng * sizeof *cg);
#define GQ(x) (x)
#define GK(x) ((x) + (sh.fused ? koff : p.nq))
#define GV(x) ((x) + (sh.fused ? voff : p.nq + p.nkv))
    fm_backend_cpu()->attention_bwd(GQ(cg), GK(cg), GV(cg), p.dout, co, cl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B,
                                    sh.T, sh.NH, sh.NKV, HS);

    /* float64 references: from the bf16-rounded inputs (b) and the fp32 ones (f) */
    const int64_t nall = sh.fused ? p.nq : 0;
    float *rq, *rk, *rv;
    if (sh.fused) {
      rq = rounded(p.q, nall), rk = rq + koff, rv = rq + voff;
    } else {
      rq = rounded(p.q, p.nq), rk = rounded(p.k, p.nkv), rv = rounded(p.v, p.nkv);
    }
    float *rdo = rounded(p.dout, NO);
    double *ob = f64(NO), *lb = f64(NL), *mb = f64(NO), *of = f64(NO), *lf = f64(NL), *mf = f64(NO), qkb, qkf;
    ref_fwd(ob, lb, mb, &qkb, &p, rq, rk, rv);
    ref_fwd(of, lf, mf, &qkf, &p, p.q, p.k, p.v);
    /* delta <= 2^-10 is what bound 1 assumes: the fp32 score sum's relative
     * error HS 2^-24 (scale sum|qk|) ln 2 plus exp2f and the rescaling. */
    const double delta = HS * 0x1p-24 * qkb * 1.4426950408889634 * 0.6931471805599453 + 0x1p-20;
    FM_EXPECT(delta <= 0x1p-10);
    Grads gb = grads_new(&p), gf = grads_new(&p);
    ref_bwd(&gb, &p, rq, rk, rv, rdo, co, cl);
    ref_bwd(&gf, &p, p.q, p.k, p.v, p.dout, co, cl);

    /* per-element tolerances (see the header) */
    double *tb_o = f64(NO), *tc_o = f64(NO), *wb_o = f64(NO), *tb_l = f64(NL), *tc_l = f64(NL), *wl = f64(NL);
    for (int64_t i = 0; i < NO; i++) {
      tb_o[i] = 0x1p-8 * mb[i] + 1e-30;
      tc_o[i] = tb_o[i] + fabs(ob[i] - of[i]) + 0x1p-15 * mf[i];
      wb_o[i] = ob[i];
    }
    for (int64_t i = 0; i < NL; i++) {
      tb_l[i] = 0x1p-17 * (1.0 + fabs(lb[i]) + qkb);
      tc_l[i] = tb_l[i] + fabs(lb[i] - lf[i]) + 0x1p-17 * (1.0 + fabs(lf[i]) + qkf);
      wl[i] = lb[i];
    }
    /* gradients: want = base + increment, laid out as cg */
    double *wg = f64(ng), *tb_g = f64(ng), *tc_g = f64(ng), *wcpu = f64(ng);
    for (int64_t i = 0; i < ng; i++) wcpu[i] = cg[i];
    for (int64_t j = 0; j < ng; j++) { /* which gradient j is, and its index in the reference's view */
      int part;
      int64_t src;
      if (sh.fused) {
        const int64_t col = j % p.ldq;
        part = col < koff ? 0 : col < voff ? 1 : 2;
        src = j - (part == 0 ? 0 : part == 1 ? koff : voff);
      } else {
        part = j < p.nq ? 0 : j < p.nq + p.nkv ? 1 : 2;
        src = j - (part == 0 ? 0 : part == 1 ? p.nq : p.nq + p.nkv);
      }
      const double *inc_b = part == 0 ? gb.dq : part == 1 ? gb.dk : gb.dv;
      const double *inc_f = part == 0 ? gf.dq : part == 1 ? gf.dk : gf.dv;
      const double *A = part == 0 ? gb.Aq : part == 1 ? gb.Ak : gb.Av;
      const double *Af = part == 0 ? gf.Aq : part == 1 ? gf.Ak : gf.Av;
      const double *Bm = part == 0 ? gb.Bq : part == 1 ? gb.Bk : NULL;
      wg[j] = (double)base_g[j] + inc_b[src];
      tb_g[j] = 0x1p-8 * A[src] + (Bm ? (double)(HS + 2) * 0x1p-23 * Bm[src] : 0.0) + 0x1p-23 * fabs(wg[j]) + 1e-30;
      tc_g[j] = tb_g[j] + fabs(inc_b[src] - inc_f[src]) + 0x1p-15 * Af[src] + 0x1p-23 * fabs(wcpu[j]);
    }

    fm_simt_attention_set_bf16(1);
    float *first_o = NULL, *first_l = NULL, *first_g = NULL;
    for (int s = 0; s < NSCHED; s++) {
      fm_simt_set_schedule((FmSimtOrder)s, seed);
      float *go = f32(NO), *gl = f32(NL), *gg = f32(ng);
      memcpy(gg, base_g, (size_t)ng * sizeof *gg);
      fm_simt_attention_fwd(go, gl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
      fm_simt_attention_bwd(GQ(gg), GK(gg), GV(gg), p.dout, co, cl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B, sh.T,
                            sh.NH, sh.NKV, HS);
      if (s == 0) {
        FM_EXPECT_EQ_INT(outside("out vs float64(bf16 inputs)", go, wb_o, tb_o, NO, 1), 0);
        FM_EXPECT_EQ_INT(outside("lse vs float64(bf16 inputs)", gl, wl, tb_l, NL, 1), 0);
        FM_EXPECT_EQ_INT(outside("dq|dk|dv vs float64(bf16 inputs)", gg, wg, tb_g, ng, 1), 0);
        double *cod = f64(NO), *cld = f64(NL);
        for (int64_t i = 0; i < NO; i++) cod[i] = co[i];
        for (int64_t i = 0; i < NL; i++) cld[i] = cl[i];
        FM_EXPECT_EQ_INT(outside("out vs the CPU op", go, cod, tc_o, NO, 1), 0);
        FM_EXPECT_EQ_INT(outside("lse vs the CPU op", gl, cld, tc_l, NL, 1), 0);
        FM_EXPECT_EQ_INT(outside("dq|dk|dv vs the CPU op", gg, wcpu, tc_g, ng, 1), 0);
        compared += 2 * (NO + NL + ng);
        /* the bound is tight enough to see a mask or a layout error: the
         * reference without documents (where there are some) or with rows
         * shifted by one must be flagged */
        if (sh.docs) {
          Prob nodoc = p;
          nodoc.seg = NULL;
          double *o2 = f64(NO), *l2 = f64(NL), *m2 = f64(NO), qk2;
          ref_fwd(o2, l2, m2, &qk2, &nodoc, rq, rk, rv);
          const int64_t flagged = outside("(expected) out vs reference without documents", go, o2, tb_o, NO, 0);
          printf("  shape %d: a reference without the document mask flags %lld of %lld outputs\n", si,
                 (long long)flagged, (long long)NO);
          FM_EXPECT(flagged > NO / 10);
          free(o2), free(l2), free(m2);
        }
        const int64_t row = sh.NH * HS;
        const int64_t flagged = outside("(expected) out vs rows shifted", go + row, wb_o, tb_o, NO - row, 0);
        FM_EXPECT(flagged > (NO - row) / 2);
        free(cod), free(cld);
        /* the switch took the tensor-core kernel: same bits as calling it */
        float *fo = f32(NO), *fl = f32(NL);
        fm_simt_attention_flash_fwd(fo, fl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
        FM_EXPECT_EQ_INT(bit_diffs(fo, go, NO) + bit_diffs(fl, gl, NL), 0);
        free(fo), free(fl);
        first_o = go, first_l = gl, first_g = gg;
      } else {
        const int64_t d = bit_diffs(go, first_o, NO) + bit_diffs(gl, first_l, NL) + bit_diffs(gg, first_g, ng);
        if (d)
          FM__FAIL("shape %d under %s: %lld elements differ in bits from the forward schedule", si,
                   fm_simt_schedule_name(), (long long)d);
        free(go), free(gl), free(gg);
      }
    }
    /* with the switch off the fp32 kernels run: not the bf16 bits */
    fm_simt_attention_set_bf16(0);
    float *xo = f32(NO), *xl = f32(NL);
    fm_simt_attention_fwd(xo, xl, p.q, p.k, p.v, p.ldq, p.ldkv, p.seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
    FM_EXPECT(bit_diffs(xo, first_o, NO) > 0);
    free(xo), free(xl);
    printf("  shape %d: B=%lld T=%lld NH=%lld NKV=%lld HS=%lld %s %s: compared under %d schedules\n", si,
           (long long)sh.B, (long long)sh.T, (long long)sh.NH, (long long)sh.NKV, (long long)HS,
           sh.docs ? "documents" : "one document", sh.fused ? "fused qkv" : "separate q/k/v", NSCHED);
    free(first_o), free(first_l), free(first_g);
    free(co), free(cl), free(base_q), free(base_kv), free(cg), free(base_g);
    free(rq);
    if (!sh.fused) free(rk), free(rv);
    free(rdo), free(ob), free(lb), free(mb), free(of), free(lf), free(mf);
    grads_free(&gb), grads_free(&gf);
    free(tb_o), free(tc_o), free(wb_o), free(tb_l), free(tc_l), free(wl), free(wg), free(tb_g), free(tc_g), free(wcpu);
    prob_free(&p);
  }
  FmSimtStats st;
  fm_simt_stats(&st);
  printf(
      "emu: attention (tensor cores): %d shapes x %d schedules (forward, reverse, random(%llu)): %llu launches, "
      "%llu blocks, %llu fiber switches, %lld values compared\n",
      NSHAPES, NSCHED, (unsigned long long)seed, (unsigned long long)st.launches, (unsigned long long)st.blocks,
      (unsigned long long)st.switches, (long long)compared);
  FM_EXPECT(compared > 0);
}
