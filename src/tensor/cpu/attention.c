/* cpu/attention.c: causal scaled-dot-product attention with GQA and a
 * document mask, forward and backward, blockwise as FlashAttention-2 (Dao,
 * 2023, Algorithms 1 and 2): scores exist only as BR x BC tiles, never T x T.
 *
 * Forward, per (batch b, query head h, query block): for each key block up to
 * the diagonal, S = scale * Q K^T (one sgemm), masked entries dropped, and an
 * online softmax keeps each row's running max m and sum l, rescaling the
 * output accumulator O as m grows: O += exp(S - m) V (one sgemm). At the end
 * out = O / l and lse = m + log(l), kept for backward.
 *
 * Backward recomputes P = exp(S - lse) per tile, with D = rowsum(dout * out):
 * dV += P^T dout, dP = dout V^T, dS = P (dP - D), dK += scale dS^T Q,
 * dQ += scale dS K. FA2 parallelises over key blocks and adds dQ with atomics;
 * that order depends on timing, so here it is two passes instead: one over
 * (b, kv head, key block) tasks that own dK/dV rows (looping over the group's
 * query heads and the query blocks in order), one over (b, head, query block)
 * tasks that own dQ rows (key blocks in order). The second pass recomputes
 * S and dP: two more sgemm per tile, the price of fixed summation orders.
 * When B * NKV tasks keep the threads busy, one fused pass per (b, kv head)
 * owns that group's dK, dV and dQ rows and does both with each tile's S and
 * dP computed once, adding in the same orders with the same calls: the same
 * bits as the two passes, with 5 sgemm a tile instead of 7.
 *
 * Masks: key s is visible from query t iff s <= t and (seg NULL or
 * seg[b*T+s] == seg[b*T+t]). s = t is always visible, so no row is fully
 * masked (checked). Masked entries get probability exactly 0, so nothing a
 * row cannot see changes its output bits. Tiles are fixed by T alone (key
 * tiles are [s0, min(s0 + BC, T)) in every pass) and each tile's products are
 * single-threaded sgemm calls (cpu_ops.h): the thread count never changes
 * the bits. */
/* GCC will not if-convert (so not vectorise) the softmax loops' selects
 * while it must preserve FP exception flags; nothing here reads them, and
 * the flag changes no result bit (no reassociation, no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <omp.h>
#include <string.h>

#include "fmhpc/tensor.h"

#include "cpu_ops.h"

#define FM_ATT_BR      64  /* query rows per tile */
#define FM_ATT_BC      64  /* key columns per tile */
#define FM_ATT_HSMAX   256 /* largest head size (the forward accumulator lives on the stack) */
#define FM_ATT_OMP_MIN ((int64_t)1 << 18)
#define FM_ATT_DALL    4096 /* the fused backward keeps D of a head's rows for T up to this (16 KiB of stack) */

/* The softmax loops vectorise (fm__cpu_expf is branch-free); the tile
 * functions' clones (FM_CPU_CLONES, cpu_ops.h) give the same bits. */

typedef struct AttnArgs {
  const float *q, *k, *v; /* head h of row n at q + n*ldq + h*HS; kv head g at k + n*ldkv + g*HS */
  int64_t ldq, ldkv;
  const int32_t *seg; /* (B, T) or NULL */
  int64_t B, T, NH, NKV, HS;
  float scale; /* 1/sqrt(HS) */
} AttnArgs;

static void attn_check(int64_t NH, int64_t NKV, int64_t HS) {
  if (NKV < 1 || NH % NKV != 0)
    fm_abort_one(1, "attention: NH = %lld is not a multiple of NKV = %lld", (long long)NH, (long long)NKV);
  if (HS < 1 || HS > FM_ATT_HSMAX)
    fm_abort_one(1, "attention: head size %lld outside [1, %d]", (long long)HS, FM_ATT_HSMAX);
}

/* allow[r*BC + c] = 1 iff key s0+c is visible from query t0+r; returns how
 * many are. */
static int64_t tile_mask(unsigned char *allow, const AttnArgs *a, int64_t b, int64_t t0, int64_t nr, int64_t s0,
                         int64_t nc) {
  int64_t count = 0;
  const int32_t *seg = a->seg ? a->seg + b * a->T : NULL;
  if (!seg) { /* causal only: row r sees the first t0 + r - s0 + 1 columns */
    for (int64_t r = 0; r < nr; r++) {
      int64_t vis = t0 + r - s0 + 1;
      vis = vis < 0 ? 0 : (vis > nc ? nc : vis);
      memset(allow + r * FM_ATT_BC, 1, (size_t)vis);
      memset(allow + r * FM_ATT_BC + vis, 0, (size_t)(nc - vis));
      count += vis;
    }
    return count;
  }
  for (int64_t r = 0; r < nr; r++) {
    const int64_t t = t0 + r;
    for (int64_t c = 0; c < nc; c++) {
      const int64_t s = s0 + c;
      const unsigned char ok = (unsigned char)(s <= t && (!seg || seg[s] == seg[t]));
      allow[r * FM_ATT_BC + c] = ok;
      count += ok;
    }
  }
  return count;
}

/* The largest visible score of a row (-inf if none; NaN scores are never
 * larger): in 8 lanes, then the lanes. The maximum of a set does not depend
 * on the order it is taken in (only the sign of a zero maximum could, and
 * every use, a difference inside exp and m + log(l) with l >= 1, gives the
 * same bits for +0 and -0), so this equals the column-order scan. */
static inline float row_max(const float *srow, const unsigned char *ar, int64_t nc) {
  typedef float v8f __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  typedef unsigned char v8u __attribute__((vector_size(8)));
  v8f lane = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t c = 0;
  for (; c + 8 <= nc; c += 8) {
    v8f v;
    v8u a8;
    memcpy(&v, srow + c, sizeof v);
    memcpy(&a8, ar + c, sizeof a8);
    const v8i take = (__builtin_convertvector(a8, v8i) != 0) & (v > lane); /* visible and larger (never a NaN) */
    lane = (v8f)(((v8i)v & take) | ((v8i)lane & ~take));
  }
  float mx = -INFINITY;
  for (int j = 0; j < 8; j++) mx = lane[j] > mx ? lane[j] : mx;
  for (; c < nc; c++) mx = (ar[c] && srow[c] > mx) ? srow[c] : mx;
  return mx;
}

/* ---- forward ------------------------------------------------------------------ */
FM_CPU_CLONES static void fwd_block(float *out, float *lse, const AttnArgs *a, int64_t b, int64_t h, int64_t t0) {
  const int64_t HS = a->HS, T = a->T, g = h / (a->NH / a->NKV);
  const int64_t nr = T - t0 < FM_ATT_BR ? T - t0 : FM_ATT_BR;
  const float *Q = a->q + (b * T + t0) * a->ldq + h * HS;
  float S[FM_ATT_BR * FM_ATT_BC], acc[FM_ATT_BR * FM_ATT_HSMAX] = {0}, m[FM_ATT_BR], l[FM_ATT_BR] = {0};
  unsigned char allow[FM_ATT_BR * FM_ATT_BC];
  for (int64_t r = 0; r < FM_ATT_BR; r++) m[r] = -INFINITY;

  for (int64_t s0 = 0; s0 < t0 + nr; s0 += FM_ATT_BC) {
    const int64_t nc = T - s0 < FM_ATT_BC ? T - s0 : FM_ATT_BC;
    if (tile_mask(allow, a, b, t0, nr, s0, nc) == 0) continue;
    const float *K = a->k + (b * T + s0) * a->ldkv + g * HS;
    const float *V = a->v + (b * T + s0) * a->ldkv + g * HS;
    fm__cpu_gemm1(0, 1, nr, nc, HS, a->scale, Q, a->ldq, K, a->ldkv, 0.0f, S, FM_ATT_BC); /* S = scale Q K^T */
    float alpha[FM_ATT_BR] = {0}, sum[FM_ATT_BR];
    unsigned char skip[FM_ATT_BR] = {0};
    for (int64_t r = 0; r < nr; r++) {
      float *srow = S + r * FM_ATT_BC;
      const unsigned char *ar = allow + r * FM_ATT_BC;
      const float mx = row_max(srow, ar, nc);
      skip[r] = mx == -INFINITY;
      if (skip[r]) { /* nothing visible in this tile for this row, or only NaN/-inf scores */
        bool seen = false;
        for (int64_t c = 0; c < nc; c++) seen |= ar[c] != 0, srow[c] = 0.0f;
        if (seen) l[r] = NAN; /* a diverged model's scores: the row's output is NaN (below) */
        continue;
      }
      const float mnew = m[r] > mx ? m[r] : mx;
      alpha[r] = fm__cpu_expf(m[r] - mnew); /* 0 on the first visible tile (m = -inf) */
#pragma omp simd
      for (int64_t c = 0; c < nc; c++) srow[c] = ar[c] ? fm__cpu_expf(srow[c] - mnew) : 0.0f;
      m[r] = mnew;
    }
    /* Each row's sum in column order, the rows' chains interleaved (no
     * dependence between rows, so they overlap instead of waiting on one
     * addition at a time; a skipped row sums its zeros, unused). */
    for (int64_t r = 0; r < nr; r++) sum[r] = 0.0f;
    for (int64_t c = 0; c < nc; c++)
      for (int64_t r = 0; r < nr; r++) sum[r] += S[r * FM_ATT_BC + c];
    for (int64_t r = 0; r < nr; r++) {
      if (skip[r]) continue;
      l[r] = l[r] * alpha[r] + sum[r];
      if (alpha[r] != 1.0f) {
        float *o = acc + r * HS;
        const float al = alpha[r];
#pragma omp simd
        for (int64_t d = 0; d < HS; d++) o[d] = o[d] * al;
      }
    }
    fm__cpu_gemm1(0, 0, nr, HS, nc, 1.0f, S, FM_ATT_BC, V, a->ldkv, 1.0f, acc, HS); /* O += P V */
  }

  for (int64_t r = 0; r < nr; r++) {
    const int64_t t = t0 + r;
    float *o = out + (b * T + t) * a->NH * HS + h * HS;
    if (isnan(l[r])) { /* non-finite scores (weights or inputs of a diverged step): NaN out, so the loss is */
      for (int64_t d = 0; d < HS; d++) o[d] = NAN; /* non-finite and &train max_bad_steps decides, never an abort */
      lse[(b * a->NH + h) * T + t] = NAN;
      continue;
    }
    if (!(l[r] > 0.0f)) /* cannot happen: s = t is always visible */
      fm_abort_one(1, "attention: row b=%lld h=%lld t=%lld sees no key", (long long)b, (long long)h, (long long)t);
    const float *ac = acc + r * HS;
    const float lr = l[r];
#pragma omp simd
    for (int64_t d = 0; d < HS; d++) o[d] = ac[d] / lr;
    lse[(b * a->NH + h) * T + t] = (float)((double)m[r] + log((double)lr));
  }
}

void fm_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                          int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  attn_check(NH, NKV, HS);
  fm__cpu_blas_init();
  const AttnArgs a = {q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS, (float)(1.0 / sqrt((double)HS))};
  const int64_t nqb = (T + FM_ATT_BR - 1) / FM_ATT_BR;
  const int64_t tasks = nqb * B * NH;
  /* Late query blocks see the most keys: hand them out first. */
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && B * NH * T * T * HS >= FM_ATT_OMP_MIN)
  for (int64_t i = 0; i < tasks; i++) {
    const int64_t ib = nqb - 1 - i / (B * NH), bh = i % (B * NH);
    fwd_block(out, lse, &a, bh / NH, bh % NH, ib * FM_ATT_BR);
  }
}

/* ---- backward ------------------------------------------------------------------ */
typedef struct AttnGrads {
  float *dq, *dk, *dv;
  const float *dout, *out, *lse;
} AttnGrads;

/* D[r] = sum_d dout[t][d] * out[t][d] for the query block's rows (FA2's D_i). */
static void block_D(float *D, const AttnGrads *gr, const AttnArgs *a, int64_t b, int64_t h, int64_t t0, int64_t nr) {
  const int64_t ld = a->NH * a->HS;
  for (int64_t r = 0; r < nr; r++) {
    const float *dO = gr->dout + (b * a->T + t0 + r) * ld + h * a->HS;
    const float *O = gr->out + (b * a->T + t0 + r) * ld + h * a->HS;
    double s = 0.0;
    for (int64_t d = 0; d < a->HS; d++) s += (double)dO[d] * O[d];
    D[r] = (float)s;
  }
}

/* One tile's P (in S) and dS (in dP), recomputed from lse:
 * P = exp(scale Q K^T - lse) where visible, else 0; dS = P (dout V^T - D). */
FM_CPU_CLONES static void tile_P_dS(float *S, float *dP, const unsigned char *allow, const AttnGrads *gr,
                                    const AttnArgs *a, int64_t b, int64_t h, int64_t g, int64_t t0, int64_t nr,
                                    int64_t s0, int64_t nc, const float *D) {
  const int64_t HS = a->HS, T = a->T, ldo = a->NH * HS;
  const float *Q = a->q + (b * T + t0) * a->ldq + h * HS;
  const float *K = a->k + (b * T + s0) * a->ldkv + g * HS;
  const float *V = a->v + (b * T + s0) * a->ldkv + g * HS;
  const float *dO = gr->dout + (b * T + t0) * ldo + h * HS;
  const float *L = gr->lse + (b * a->NH + h) * T + t0;
  fm__cpu_gemm1(0, 1, nr, nc, HS, a->scale, Q, a->ldq, K, a->ldkv, 0.0f, S, FM_ATT_BC);
  fm__cpu_gemm1(0, 1, nr, nc, HS, 1.0f, dO, ldo, V, a->ldkv, 0.0f, dP, FM_ATT_BC);
  for (int64_t r = 0; r < nr; r++) {
    float *srow = S + r * FM_ATT_BC, *drow = dP + r * FM_ATT_BC;
    const unsigned char *ar = allow + r * FM_ATT_BC;
    const float lr = L[r], Dr = D[r];
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) {
      const float p = ar[c] ? fm__cpu_expf(srow[c] - lr) : 0.0f;
      srow[c] = p;
      drow[c] = p * (drow[c] - Dr);
    }
  }
}

/* dK, dV rows [s0, s0+nc) of kv head g: sum over the group's query heads, then
 * query blocks, in order. */
static void bwd_kv_block(const AttnGrads *gr, const AttnArgs *a, int64_t b, int64_t g, int64_t s0) {
  const int64_t HS = a->HS, T = a->T, rep = a->NH / a->NKV, ldo = a->NH * HS;
  const int64_t nc = T - s0 < FM_ATT_BC ? T - s0 : FM_ATT_BC;
  float S[FM_ATT_BR * FM_ATT_BC], dP[FM_ATT_BR * FM_ATT_BC], D[FM_ATT_BR];
  unsigned char allow[FM_ATT_BR * FM_ATT_BC];
  float *dK = gr->dk ? gr->dk + (b * T + s0) * a->ldkv + g * HS : NULL;
  float *dV = gr->dv ? gr->dv + (b * T + s0) * a->ldkv + g * HS : NULL;
  for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
    for (int64_t t0 = (s0 / FM_ATT_BR) * FM_ATT_BR; t0 < T; t0 += FM_ATT_BR) {
      const int64_t nr = T - t0 < FM_ATT_BR ? T - t0 : FM_ATT_BR;
      if (tile_mask(allow, a, b, t0, nr, s0, nc) == 0) continue;
      block_D(D, gr, a, b, h, t0, nr);
      tile_P_dS(S, dP, allow, gr, a, b, h, g, t0, nr, s0, nc, D);
      const float *Q = a->q + (b * T + t0) * a->ldq + h * HS;
      const float *dO = gr->dout + (b * T + t0) * ldo + h * HS;
      if (dV) fm__cpu_gemm1(1, 0, nc, HS, nr, 1.0f, S, FM_ATT_BC, dO, ldo, 1.0f, dV, a->ldkv);        /* P^T dO */
      if (dK) fm__cpu_gemm1(1, 0, nc, HS, nr, a->scale, dP, FM_ATT_BC, Q, a->ldq, 1.0f, dK, a->ldkv); /* dS^T Q */
    }
  }
}

/* The fused pass: every dK, dV and dQ row of batch row b and kv head g in
 * one task, each tile's S and dP computed once (5 products a tile, not 7).
 * The loops (query head h, key block, query block) add into dK/dV in the
 * order of bwd_kv_block (h, then query blocks) and into dQ in the order of
 * bwd_q_block (key blocks ascending), with the same calls: the same bits as
 * the two passes. Used when there are enough (b, g) tasks for the threads. */
static void bwd_group(const AttnGrads *gr, const AttnArgs *a, int64_t b, int64_t g) {
  const int64_t HS = a->HS, T = a->T, rep = a->NH / a->NKV, ldo = a->NH * HS;
  float S[FM_ATT_BR * FM_ATT_BC], dP[FM_ATT_BR * FM_ATT_BC], Dblk[FM_ATT_BR], Dall[FM_ATT_DALL];
  unsigned char allow[FM_ATT_BR * FM_ATT_BC];
  const int keep = T <= FM_ATT_DALL; /* D of every query row of head h, made once (else per tile, the same values) */
  for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
    if (keep)
      for (int64_t t0 = 0; t0 < T; t0 += FM_ATT_BR)
        block_D(Dall + t0, gr, a, b, h, t0, T - t0 < FM_ATT_BR ? T - t0 : FM_ATT_BR);
    for (int64_t s0 = 0; s0 < T; s0 += FM_ATT_BC) {
      const int64_t nc = T - s0 < FM_ATT_BC ? T - s0 : FM_ATT_BC;
      const float *K = a->k + (b * T + s0) * a->ldkv + g * HS;
      float *dK = gr->dk ? gr->dk + (b * T + s0) * a->ldkv + g * HS : NULL;
      float *dV = gr->dv ? gr->dv + (b * T + s0) * a->ldkv + g * HS : NULL;
      for (int64_t t0 = (s0 / FM_ATT_BR) * FM_ATT_BR; t0 < T; t0 += FM_ATT_BR) {
        const int64_t nr = T - t0 < FM_ATT_BR ? T - t0 : FM_ATT_BR;
        if (tile_mask(allow, a, b, t0, nr, s0, nc) == 0) continue;
        const float *D = Dall + t0;
        if (!keep) {
          block_D(Dblk, gr, a, b, h, t0, nr);
          D = Dblk;
        }
        tile_P_dS(S, dP, allow, gr, a, b, h, g, t0, nr, s0, nc, D);
        const float *Q = a->q + (b * T + t0) * a->ldq + h * HS;
        const float *dO = gr->dout + (b * T + t0) * ldo + h * HS;
        if (dV) fm__cpu_gemm1(1, 0, nc, HS, nr, 1.0f, S, FM_ATT_BC, dO, ldo, 1.0f, dV, a->ldkv);        /* P^T dO */
        if (dK) fm__cpu_gemm1(1, 0, nc, HS, nr, a->scale, dP, FM_ATT_BC, Q, a->ldq, 1.0f, dK, a->ldkv); /* dS^T Q */
        if (gr->dq)                                                                                     /* dS K */
          fm__cpu_gemm1(0, 0, nr, HS, nc, a->scale, dP, FM_ATT_BC, K, a->ldkv, 1.0f,
                        gr->dq + (b * T + t0) * a->ldq + h * HS, a->ldq);
      }
    }
  }
}

/* dQ rows [t0, t0+nr) of head h: key blocks in order. */
static void bwd_q_block(const AttnGrads *gr, const AttnArgs *a, int64_t b, int64_t h, int64_t t0) {
  const int64_t HS = a->HS, T = a->T, g = h / (a->NH / a->NKV);
  const int64_t nr = T - t0 < FM_ATT_BR ? T - t0 : FM_ATT_BR;
  float S[FM_ATT_BR * FM_ATT_BC], dP[FM_ATT_BR * FM_ATT_BC], D[FM_ATT_BR];
  unsigned char allow[FM_ATT_BR * FM_ATT_BC];
  float *dQ = gr->dq + (b * T + t0) * a->ldq + h * HS;
  block_D(D, gr, a, b, h, t0, nr);
  for (int64_t s0 = 0; s0 < t0 + nr; s0 += FM_ATT_BC) {
    const int64_t nc = T - s0 < FM_ATT_BC ? T - s0 : FM_ATT_BC;
    if (tile_mask(allow, a, b, t0, nr, s0, nc) == 0) continue;
    tile_P_dS(S, dP, allow, gr, a, b, h, g, t0, nr, s0, nc, D);
    const float *K = a->k + (b * T + s0) * a->ldkv + g * HS;
    fm__cpu_gemm1(0, 0, nr, HS, nc, a->scale, dP, FM_ATT_BC, K, a->ldkv, 1.0f, dQ, a->ldq); /* dS K */
  }
}

void fm_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv, const int32_t *seg,
                          int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  attn_check(NH, NKV, HS);
  fm__cpu_blas_init();
  const AttnArgs a = {q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS, (float)(1.0 / sqrt((double)HS))};
  const AttnGrads gr = {dq, dk, dv, dout, out, lse};
  const int64_t nkb = (T + FM_ATT_BC - 1) / FM_ATT_BC, nqb = (T + FM_ATT_BR - 1) / FM_ATT_BR;
  const int par = B * NH * T * T * HS >= FM_ATT_OMP_MIN;
  /* Same bits either way; the fused pass does 5/7 of the products but has
   * only B * NKV tasks, so it is taken when they keep every thread busy. */
  if (B * NKV >= 2 * (int64_t)(par ? omp_get_max_threads() : 1)) {
    const int64_t tasks = B * NKV;
#pragma omp parallel for schedule(dynamic, 1) if (par && tasks > 1)
    for (int64_t i = 0; i < tasks; i++) bwd_group(&gr, &a, i / NKV, i % NKV);
    return;
  }
  if (dk || dv) {
    const int64_t tasks = nkb * B * NKV; /* early key blocks are seen by the most queries: first */
#pragma omp parallel for schedule(dynamic, 1) if (par && tasks > 1)
    for (int64_t i = 0; i < tasks; i++) {
      const int64_t bg = i % (B * NKV);
      bwd_kv_block(&gr, &a, bg / NKV, bg % NKV, (i / (B * NKV)) * FM_ATT_BC);
    }
  }
  if (dq) {
    const int64_t tasks = nqb * B * NH;
#pragma omp parallel for schedule(dynamic, 1) if (par && tasks > 1)
    for (int64_t i = 0; i < tasks; i++) {
      const int64_t bh = i % (B * NH);
      bwd_q_block(&gr, &a, bh / NH, bh % NH, (nqb - 1 - i / (B * NH)) * FM_ATT_BR);
    }
  }
}

/* ---- decode (generation) ------------------------------------------------------- */
/* fwd_block's algorithm for one query row at t = pos[b]: the same key tiles
 * [s0, s0 + BC), cut at t + 1 (keys after t are not read: the cache holds
 * nothing valid there yet). */
static void decode_row(float *o, const float *Q, const float *kc, const float *vc, int64_t ldkv, int64_t t, int64_t HS,
                       float scale) {
  float S[FM_ATT_BC], acc[FM_ATT_HSMAX] = {0}, m = -INFINITY, l = 0.0f;
  for (int64_t s0 = 0; s0 <= t; s0 += FM_ATT_BC) {
    const int64_t nc = t + 1 - s0 < FM_ATT_BC ? t + 1 - s0 : FM_ATT_BC;
    const float *K = kc + s0 * ldkv, *V = vc + s0 * ldkv;
    fm__cpu_gemm1(0, 1, 1, nc, HS, scale, Q, HS, K, ldkv, 0.0f, S, FM_ATT_BC); /* S = scale q K^T */
    float mx = -INFINITY;
    for (int64_t c = 0; c < nc; c++)
      if (S[c] > mx) mx = S[c];
    const float mnew = m > mx ? m : mx;
    const float alpha = fm__cpu_expf(m - mnew);
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) S[c] = fm__cpu_expf(S[c] - mnew);
    float sum = 0.0f;
    for (int64_t c = 0; c < nc; c++) sum += S[c]; /* in column order, as the forward */
    l = l * alpha + sum;
    m = mnew;
    if (alpha != 1.0f)
      for (int64_t d = 0; d < HS; d++) acc[d] = acc[d] * alpha;
    fm__cpu_gemm1(0, 0, 1, HS, nc, 1.0f, S, FM_ATT_BC, V, ldkv, 1.0f, acc, HS); /* O += P V */
  }
  for (int64_t d = 0; d < HS; d++) o[d] = acc[d] / l;
}

void fm_cpu_attention_decode(float *out, const float *q, const float *kc, const float *vc, int64_t ldq, int64_t ldkv,
                             const int32_t *pos, int64_t B, int64_t Tc, int64_t NH, int64_t NKV, int64_t HS) {
  attn_check(NH, NKV, HS);
  fm__cpu_blas_init();
  const float scale = (float)(1.0 / sqrt((double)HS));
  for (int64_t b = 0; b < B; b++)
    if (pos[b] < 0 || pos[b] >= Tc)
      fm_abort_one(1, "attention decode: pos[%lld] = %d outside the cache [0, %lld)", (long long)b, (int)pos[b],
                   (long long)Tc);
  const int64_t tasks = B * NH;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && B * NH * Tc * HS >= FM_ATT_OMP_MIN)
  for (int64_t i = 0; i < tasks; i++) {
    const int64_t b = i / NH, h = i % NH, g = h / (NH / NKV), off = b * Tc * ldkv + g * HS;
    decode_row(out + b * NH * HS + h * HS, q + b * ldq + h * HS, kc + off, vc + off, ldkv, pos[b], HS, scale);
  }
}
