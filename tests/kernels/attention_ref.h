/* attention_ref.h: the float64 references and the derived tolerances for the
 * bf16 tensor-core attention (src/tensor/cuda/attention_flash.cu), shared by
 * its emulated test (emu/test_emu_attention.c) and its device test
 * (test_cuda_ops.c). Header-only, static functions; a test includes it once.
 *
 * A case (AttnCase) holds one problem (q, k, v as views of one fused array or
 * three arrays, dout, documents or none), the CPU op's fp32 out, lse and
 * gradients (from a nonzero base: the op accumulates), and for every
 * compared element two intervals:
 * 1. against a float64 reference from the bf16-rounded q, k, v and dout
 *    (ref_b; the backward takes out and lse as inputs, as the op does: all
 *    get the CPU op's). What is left is the kernel's own rounding: P and dS
 *    rounded to bf16 before their tensor-core products (relative 2^-9
 *    each); p's relative error delta from the fp32 score sum (HS terms,
 *    2^-24 each relative to scale sum|q k|), the base-2 rescaling and exp2f
 *    (a few ulp); fp32 sums over <= T terms (T 2^-24, <= 2^-13 at T = 2048).
 *    With delta <= 2^-10 (asserted from the data), the first-order total is
 *    below 2^-9 + 2^-10 + 2^-13 < 2^-8 of the magnitude of the element's
 *    terms:
 *      out[t,d] <= 2^-8 sum_s p|v_sd|
 *      lse      <= 2^-17 (1 + |lse| + scale max_s sum|q k|) + T 2^-23 (HS 2^-24 <= 2^-17)
 *      dv[s,d]  <= 2^-8 sum_t p|dout_td|
 *      dk[s,d]  <= 2^-8 scale sum_t |dS||q_td|
 *                  + (HS + 2) 2^-23 scale sum_t p (sum_e |dout v| + |D|) |q_td|
 *      dq[t,d]  likewise with k_sd (dP - D may cancel: the second term is
 *               dP's fp32 sum and D's rounding, before the cancellation)
 *    plus 2^-23 |result| for the final fp32 += into the gradient.
 * 2. against the CPU op (fp32 inputs): bound 1 + |ref_b - ref_f| (the exact
 *    effect of rounding the inputs to bf16, both references in float64;
 *    ref_f from the fp32 inputs) + 2^-15 of the same magnitudes (the CPU
 *    op's fp32 sums and its expf).
 * At large T the references cost O(T^2 HS) per head: every qstride-th query
 * row (out, lse, dq) and kstride-th key row (dk, dv) is compared (1: all). */
#ifndef FMHPC_TESTS_KERNELS_ATTENTION_REF_H
#define FMHPC_TESTS_KERNELS_ATTENTION_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/core.h"
#include "fmhpc/tensor.h"

static inline float *ar_f32(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static inline double *ar_f64(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
/* Round to bf16, nearest even (written here, not taken from the kernels). */
static inline float ar_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  memcpy(&y, &u, 4);
  return y;
}
static inline float *ar_rounded(const float *x, int64_t n) {
  float *y = ar_f32(n);
  for (int64_t i = 0; i < n; i++) y[i] = ar_bf16(x[i]);
  return y;
}

typedef struct ArShape {
  int64_t B, T, NH, NKV, HS;
  int docs, fused; /* docs: 0 none, 1 ids not ordered, 2 numbered in order (prep) */
} ArShape;
typedef struct ArProb { /* q, k, v as views of one (fused) array or three */
  ArShape s;
  int64_t ldq, ldkv, nq, nkv; /* elements of the q and k/v arrays */
  float *q, *k, *v, *dout;
  int32_t *seg;
} ArProb;

static inline ArProb ar_prob_new(ArShape s, double (*uniform)(double, double)) {
  ArProb p = {s, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL};
  const int64_t N = s.B * s.T, HS = s.HS;
  if (s.fused) {
    p.ldq = p.ldkv = (s.NH + 2 * s.NKV) * HS;
    p.nq = p.nkv = N * p.ldq;
    p.q = ar_f32(p.nq);
    p.k = p.q + s.NH * HS;
    p.v = p.q + (s.NH + s.NKV) * HS;
    for (int64_t i = 0; i < p.nq; i++) p.q[i] = (float)uniform(-2.0, 2.0);
    for (int64_t n = 0; n < N; n++) /* v smaller than q, k */
      for (int64_t e = 0; e < s.NKV * HS; e++) p.v[n * p.ldkv + e] = (float)uniform(-1.0, 1.0);
  } else {
    p.ldq = s.NH * HS, p.ldkv = s.NKV * HS, p.nq = N * p.ldq, p.nkv = N * p.ldkv;
    p.q = ar_f32(p.nq), p.k = ar_f32(p.nkv), p.v = ar_f32(p.nkv);
    for (int64_t i = 0; i < p.nq; i++) p.q[i] = (float)uniform(-2.0, 2.0);
    for (int64_t i = 0; i < p.nkv; i++) p.k[i] = (float)uniform(-2.0, 2.0), p.v[i] = (float)uniform(-1.0, 1.0);
  }
  p.dout = ar_f32(N * s.NH * HS);
  for (int64_t i = 0; i < N * s.NH * HS; i++) p.dout[i] = (float)uniform(-1.0, 1.0);
  if (s.docs) { /* documents of 1..40 tokens (1..600 at large T); docs 1: ids
                 * not ordered; 2: numbered 1, 2, ... as prep does, the last
                 * 20 positions padding (id 0) */
    p.seg = fm_xcalloc((size_t)N, sizeof *p.seg);
    for (int64_t b = 0; b < s.B; b++) {
      int64_t t = 0;
      int32_t id = s.docs == 2 ? 1 : 7;
      while (t < s.T) {
        const int64_t len = 1 + (int64_t)uniform(0.0, s.T > 256 ? 600.0 : 40.0);
        for (int64_t u = t; u < t + len && u < s.T; u++) p.seg[b * s.T + u] = s.docs == 2 && u >= s.T - 20 ? 0 : id;
        t += len, id = s.docs == 2 ? id + 1 : (id * 5 + 3) % 11;
      }
    }
  }
  return p;
}
static inline void ar_prob_free(ArProb *p) {
  free(p->q);
  if (!p->s.fused) free(p->k), free(p->v);
  free(p->dout), free(p->seg);
}
static inline int ar_visible(const ArProb *p, int64_t b, int64_t t, int64_t u) {
  return u <= t && (!p->seg || p->seg[b * p->s.T + u] == p->seg[b * p->s.T + t]);
}

/* Forward in float64 for rows t % qstride == 0: out, lse, and each out
 * element's sum_s p |v|; *qk_max = max over rows of scale max_s sum|q k|. */
static inline void ar_ref_fwd(double *out, double *lse, double *mag, double *qk_max, const ArProb *p, const float *q,
                              const float *k, const float *v, int64_t qstride) {
  const ArShape *s = &p->s;
  const int64_t HS = s->HS, T = s->T;
  const double scale = 1.0 / sqrt((double)HS);
  double *sc = ar_f64(T);
  *qk_max = 0.0;
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->NH; h++)
      for (int64_t t = 0; t < T; t += qstride) {
        const int64_t g = h / (s->NH / s->NKV);
        const float *qr = q + (b * T + t) * p->ldq + h * HS;
        double m = -INFINITY;
        for (int64_t u = 0; u <= t; u++) {
          if (!ar_visible(p, b, t, u)) continue;
          const float *kr = k + (b * T + u) * p->ldkv + g * HS;
          double d = 0.0, a = 0.0;
          for (int64_t e = 0; e < HS; e++) d += (double)qr[e] * kr[e], a += fabs((double)qr[e] * kr[e]);
          sc[u] = d * scale;
          m = sc[u] > m ? sc[u] : m;
          *qk_max = a * scale > *qk_max ? a * scale : *qk_max;
        }
        double l = 0.0;
        for (int64_t u = 0; u <= t; u++)
          if (ar_visible(p, b, t, u)) l += exp(sc[u] - m);
        double *o = out + (b * T + t) * s->NH * HS + h * HS, *mg = mag + (b * T + t) * s->NH * HS + h * HS;
        for (int64_t e = 0; e < HS; e++) o[e] = mg[e] = 0.0;
        for (int64_t u = 0; u <= t; u++) {
          if (!ar_visible(p, b, t, u)) continue;
          const double pr = exp(sc[u] - m) / l;
          const float *vr = v + (b * T + u) * p->ldkv + g * HS;
          for (int64_t e = 0; e < HS; e++) o[e] += pr * vr[e], mg[e] += pr * fabs((double)vr[e]);
        }
        lse[(b * s->NH + h) * T + t] = m + log(l);
      }
  free(sc);
}

/* Backward in float64 with out and lse as inputs, for query rows t %
 * qstride == 0 (dq) and key rows s % kstride == 0 (dk, dv): increments in
 * the views' layouts, each element's first-order magnitude A (sum of
 * |products| through the bf16-rounded factors) and Bm (dP's and D's part). */
typedef struct ArGrads {
  double *dq, *dk, *dv, *Aq, *Ak, *Av, *Bq, *Bk;
} ArGrads;
static inline ArGrads ar_grads_new(const ArProb *p) {
  ArGrads g = {ar_f64(p->nq),  ar_f64(p->nkv), ar_f64(p->nkv), ar_f64(p->nq),
               ar_f64(p->nkv), ar_f64(p->nkv), ar_f64(p->nq),  ar_f64(p->nkv)};
  return g;
}
static inline void ar_grads_free(ArGrads *g) {
  free(g->dq), free(g->dk), free(g->dv), free(g->Aq), free(g->Ak), free(g->Av), free(g->Bq), free(g->Bk);
}
static inline void ar_ref_bwd(ArGrads *G, const ArProb *p, const float *q, const float *k, const float *v,
                              const float *dout, const float *out, const float *lse, int64_t qstride, int64_t kstride) {
  const ArShape *s = &p->s;
  const int64_t HS = s->HS, T = s->T, ldo = s->NH * HS;
  const double scale = 1.0 / sqrt((double)HS);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t g = h / (s->NH / s->NKV);
        const int64_t iq = (b * T + t) * p->ldq + h * HS, io = (b * T + t) * ldo + h * HS;
        const int qrow = t % qstride == 0;
        double D = 0.0;
        for (int64_t e = 0; e < HS; e++) D += (double)dout[io + e] * out[io + e];
        const double L = lse[(b * s->NH + h) * T + t];
        for (int64_t u = 0; u <= t; u++) {
          const int krow = u % kstride == 0;
          if (!(qrow || krow) || !ar_visible(p, b, t, u)) continue;
          const int64_t ik = (b * T + u) * p->ldkv + g * HS;
          double S = 0.0, dP = 0.0, dPa = 0.0;
          for (int64_t e = 0; e < HS; e++) {
            S += (double)q[iq + e] * k[ik + e];
            dP += (double)dout[io + e] * v[ik + e];
            dPa += fabs((double)dout[io + e] * v[ik + e]);
          }
          const double pr = exp(S * scale - L), dS = pr * (dP - D), bm = pr * (dPa + fabs(D));
          for (int64_t e = 0; e < HS; e++) {
            if (krow) {
              G->dv[ik + e] += pr * dout[io + e];
              G->Av[ik + e] += pr * fabs((double)dout[io + e]);
              G->dk[ik + e] += scale * dS * q[iq + e];
              G->Ak[ik + e] += scale * fabs(dS * q[iq + e]);
              G->Bk[ik + e] += scale * bm * fabs((double)q[iq + e]);
            }
            if (qrow) {
              G->dq[iq + e] += scale * dS * k[ik + e];
              G->Aq[iq + e] += scale * fabs(dS * k[ik + e]);
              G->Bq[iq + e] += scale * bm * fabs((double)k[ik + e]);
            }
          }
        }
      }
}

/* One case: the CPU op's results and, per element, the reference (ref_b)
 * and the two tolerances; tol < 0: not compared (not a sampled row). */
typedef struct AttnCase {
  ArProb p;
  int64_t NO, NL, ng;  /* out, lse, gradient-array elements */
  int64_t koff, voff;  /* where dk, dv start in the gradient array */
  float *co, *cl, *cg; /* the CPU op: out, lse, gradients (base + increments) */
  float *base_g;       /* the gradient array's starting values */
  float *rq, *rk, *rv; /* bf16-rounded inputs */
  double *wo, *tbo, *tco, *wl, *tbl, *tcl, *wg, *tbg, *tcg;
  double delta; /* p's relative error the bound assumes <= 2^-10 */
} AttnCase;

static inline AttnCase attn_case_new(ArShape sh, double (*uniform)(double, double), int64_t qstride, int64_t kstride) {
  AttnCase c;
  memset(&c, 0, sizeof c);
  c.p = ar_prob_new(sh, uniform);
  ArProb *p = &c.p;
  const int64_t N = sh.B * sh.T, HS = sh.HS;
  c.NO = N * sh.NH * HS, c.NL = sh.B * sh.NH * sh.T;
  c.ng = sh.fused ? p->nq : p->nq + 2 * p->nkv;
  c.koff = sh.fused ? p->k - p->q : p->nq;
  c.voff = sh.fused ? p->v - p->q : p->nq + p->nkv;
  c.co = ar_f32(c.NO), c.cl = ar_f32(c.NL), c.cg = ar_f32(c.ng), c.base_g = ar_f32(c.ng);
  for (int64_t i = 0; i < c.ng; i++) c.base_g[i] = c.cg[i] = (float)uniform(-0.1, 0.1);
  const FmBackend *cpu = fm_backend_cpu();
  cpu->attention_fwd(c.co, c.cl, p->q, p->k, p->v, p->ldq, p->ldkv, p->seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
  cpu->attention_bwd(c.cg, c.cg + c.koff, c.cg + c.voff, p->dout, c.co, c.cl, p->q, p->k, p->v, p->ldq, p->ldkv, p->seg,
                     sh.B, sh.T, sh.NH, sh.NKV, HS);

  if (sh.fused) {
    c.rq = ar_rounded(p->q, p->nq), c.rk = c.rq + (p->k - p->q), c.rv = c.rq + (p->v - p->q);
  } else {
    c.rq = ar_rounded(p->q, p->nq), c.rk = ar_rounded(p->k, p->nkv), c.rv = ar_rounded(p->v, p->nkv);
  }
  float *rdo = ar_rounded(p->dout, c.NO);
  double *ob = ar_f64(c.NO), *lb = ar_f64(c.NL), *mb = ar_f64(c.NO), *of = ar_f64(c.NO), *lf = ar_f64(c.NL),
         *mf = ar_f64(c.NO), qkb, qkf;
  ar_ref_fwd(ob, lb, mb, &qkb, p, c.rq, c.rk, c.rv, qstride);
  ar_ref_fwd(of, lf, mf, &qkf, p, p->q, p->k, p->v, qstride);
  c.delta = HS * 0x1p-24 * qkb * 1.4426950408889634 * 0.6931471805599453 + 0x1p-20;
  ArGrads gb = ar_grads_new(p), gf = ar_grads_new(p);
  ar_ref_bwd(&gb, p, c.rq, c.rk, c.rv, rdo, c.co, c.cl, qstride, kstride);
  ar_ref_bwd(&gf, p, p->q, p->k, p->v, p->dout, c.co, c.cl, qstride, kstride);

  c.wo = ar_f64(c.NO), c.tbo = ar_f64(c.NO), c.tco = ar_f64(c.NO);
  for (int64_t i = 0; i < c.NO; i++) {
    const int64_t t = (i / (sh.NH * HS)) % sh.T;
    c.wo[i] = ob[i];
    c.tbo[i] = t % qstride ? -1.0 : 0x1p-8 * mb[i] + 1e-30;
    c.tco[i] = t % qstride ? -1.0 : c.tbo[i] + fabs(ob[i] - of[i]) + 0x1p-15 * mf[i];
  }
  c.wl = ar_f64(c.NL), c.tbl = ar_f64(c.NL), c.tcl = ar_f64(c.NL);
  for (int64_t i = 0; i < c.NL; i++) {
    const int64_t t = i % sh.T;
    c.wl[i] = lb[i];
    c.tbl[i] = t % qstride ? -1.0 : 0x1p-17 * (1.0 + fabs(lb[i]) + qkb) + (double)sh.T * 0x1p-23;
    c.tcl[i] = t % qstride ? -1.0 : c.tbl[i] + fabs(lb[i] - lf[i]) + 0x1p-17 * (1.0 + fabs(lf[i]) + qkf);
  }
  c.wg = ar_f64(c.ng), c.tbg = ar_f64(c.ng), c.tcg = ar_f64(c.ng);
  for (int64_t j = 0; j < c.ng; j++) { /* which gradient j is, its index in the view, its row */
    int part;
    int64_t src;
    if (sh.fused) {
      const int64_t col = j % p->ldq;
      part = col < c.koff ? 0 : col < c.voff ? 1 : 2;
    } else {
      part = j < c.koff ? 0 : j < c.voff ? 1 : 2;
    }
    src = j - (part == 0 ? 0 : part == 1 ? c.koff : c.voff);
    const int64_t row = (src / (part == 0 ? p->ldq : p->ldkv)) % sh.T;
    const double *inc_b = part == 0 ? gb.dq : part == 1 ? gb.dk : gb.dv;
    const double *inc_f = part == 0 ? gf.dq : part == 1 ? gf.dk : gf.dv;
    const double *A = part == 0 ? gb.Aq : part == 1 ? gb.Ak : gb.Av;
    const double *Af = part == 0 ? gf.Aq : part == 1 ? gf.Ak : gf.Av;
    const double *Bm = part == 0 ? gb.Bq : part == 1 ? gb.Bk : NULL;
    c.wg[j] = (double)c.base_g[j] + inc_b[src];
    if (row % (part == 0 ? qstride : kstride)) {
      c.tbg[j] = c.tcg[j] = -1.0;
      continue;
    }
    c.tbg[j] = 0x1p-8 * A[src] + (Bm ? (double)(HS + 2) * 0x1p-23 * Bm[src] : 0.0) + 0x1p-23 * fabs(c.wg[j]) + 1e-30;
    c.tcg[j] = c.tbg[j] + fabs(inc_b[src] - inc_f[src]) + 0x1p-15 * Af[src] + 0x1p-23 * fabs((double)c.cg[j]);
  }
  free(rdo), free(ob), free(lb), free(mb), free(of), free(lf), free(mf);
  ar_grads_free(&gb), ar_grads_free(&gf);
  return c;
}
static inline void attn_case_free(AttnCase *c) {
  free(c->co), free(c->cl), free(c->cg), free(c->base_g), free(c->rq);
  if (!c->p.s.fused) free(c->rk), free(c->rv);
  free(c->wo), free(c->tbo), free(c->tco), free(c->wl), free(c->tbl), free(c->tcl), free(c->wg), free(c->tbg),
      free(c->tcg);
  ar_prob_free(&c->p);
}

/* Compared elements of got outside want +- tol (NaN counts); the first few
 * reported when `loud`, with the largest |error| / tolerance. *n_cmp += the
 * elements compared. want_f: float wants (the CPU op) instead of double. */
static inline int64_t ar_outside(const char *what, const char *when, const float *got, const double *want,
                                 const float *want_f, const double *tol, int64_t n, int loud, int64_t *n_cmp) {
  int64_t bad = 0, cmp = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (tol[i] < 0.0) continue;
    cmp++;
    const double w = want_f ? (double)want_f[i] : want[i], err = fabs((double)got[i] - w);
    worst = err / tol[i] > worst ? err / tol[i] : worst;
    if (!(err <= tol[i]) && bad++ < 4 && loud)
      FM__FAIL("%s[%lld] %s: kernel %.9g reference %.9g (tol %.3g)", what, (long long)i, when, got[i], w, tol[i]);
  }
  if (loud) printf("    %-34s largest |error| / tolerance %.3f over %lld values\n", what, worst, (long long)cmp);
  if (n_cmp) *n_cmp += cmp;
  return bad;
}
/* Both comparisons of a kernel's out, lse and gradient array; returns the
 * number of elements outside, adds the compared count. */
static inline int64_t attn_case_check(const AttnCase *c, const float *go, const float *gl, const float *gg,
                                      const char *when, int64_t *n_cmp) {
  int64_t bad = 0;
  bad += ar_outside("out vs float64(bf16 inputs)", when, go, c->wo, NULL, c->tbo, c->NO, 1, n_cmp);
  bad += ar_outside("lse vs float64(bf16 inputs)", when, gl, c->wl, NULL, c->tbl, c->NL, 1, n_cmp);
  bad += ar_outside("dq|dk|dv vs float64(bf16 inputs)", when, gg, c->wg, NULL, c->tbg, c->ng, 1, n_cmp);
  bad += ar_outside("out vs the CPU op", when, go, NULL, c->co, c->tco, c->NO, 1, n_cmp);
  bad += ar_outside("lse vs the CPU op", when, gl, NULL, c->cl, c->tcl, c->NL, 1, n_cmp);
  bad += ar_outside("dq|dk|dv vs the CPU op", when, gg, NULL, c->cg, c->tcg, c->ng, 1, n_cmp);
  if (!(c->delta <= 0x1p-10)) {
    FM__FAIL("the bound assumes p's relative error delta <= 2^-10; this data gives %.3g", c->delta);
    bad++;
  }
  return bad;
}
static inline int64_t ar_bit_diffs(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, 4) != 0;
  return d;
}

#endif
