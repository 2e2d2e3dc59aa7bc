/* sophia.c: the Sophia-G optimizer kind: &optim sophia_* keys, state m and h,
 * the shard update, the Hessian-diagonal EMA and the per-step hook that
 * estimates it (Liu et al. 2023, Algorithms 2 and 3, in Levanter's form;
 * optim.h says exactly what, and where it departs from either). */
#include <math.h>
#include <stdlib.h>

#include "fmhpc/core.h"
#include "fmhpc/rng.h"
#include "optim_internal.h"

static void step(FmOptim *o, float *w, const float *g, int64_t t, float lr) {
  const FmOptimParams *p = &o->p;
  const float b1 = (float)p->beta1, omb1 = (float)(1.0 - p->beta1);
  const float bc1 = p->sophia_bias_correction ? (float)(1.0 - pow(p->beta1, (double)t)) : 1.0f;
  const float gamma = (float)p->sophia_gamma, eps = (float)p->eps;
  float *m = fm__optim_state(o, 0);
  const float *h = fm__optim_state(o, 1);
  for (int s = 0; s < o->nseg; s++) {
    const int64_t a = o->seg[s].lo - o->lo, b = o->seg[s].hi - o->lo;
    const float wd = o->seg[s].decay ? (float)p->weight_decay : 0.0f;
    o->be->sophia_update(w + a, m + a, h + a, g + a, b - a, lr, b1, omb1, bc1, gamma, eps, wd);
  }
}

bool fm_optim_hessian_due(const FmOptim *o, int64_t t) {
  if (o->p.kind != &fm__optim_sophia || t < 1) return false;
  return (t - 1) % o->p.sophia_k == 0;
}

int fm_optim_sophia_hessian_update(FmOptim *o, const float *ghat_shard, int64_t batch_tokens) {
  if (o->p.kind != &fm__optim_sophia || batch_tokens < 1) return FM_EINVAL;
  const float b2 = (float)o->p.beta2, omb2 = (float)(1.0 - o->p.beta2), B = (float)batch_tokens;
  float *h = fm__optim_state(o, 1);
  const int64_t n = o->hi - o->lo;
  o->be->sophia_hessian_update(h, ghat_shard, n, B, b2, omb2);
  return 0;
}

/* ---- the per-step hook: Gauss-Newton-Bartlett (Algorithm 2) ------------------ */

/* Buffers sized once from the run's shape. */
typedef struct Gnb {
  FmOptimRunShape s;
  int32_t *sampled;  /* (nmicro*b*T) the sampled labels */
  int32_t **targets; /* (nmicro) rows of `sampled`, one per micro-batch */
  int64_t *rows;     /* (T) the rows of one sequence */
  float *logits;     /* (T, V) their logits */
} Gnb;

static void gnb_setup(FmOptim *o, const FmOptimRunShape *s) {
  Gnb *g = fm_xcalloc(1, sizeof *g);
  const int64_t nm = s->nmicro > 0 ? s->nmicro : 1, bt = s->b * s->T;
  g->s = *s;
  g->sampled = fm_xcalloc((size_t)(nm * bt), sizeof *g->sampled);
  g->targets = fm_xcalloc((size_t)nm, sizeof *g->targets);
  for (int64_t i = 0; i < nm; i++) g->targets[i] = g->sampled + i * bt;
  g->rows = fm_xcalloc((size_t)s->T, sizeof *g->rows);
  g->logits = fm_xcalloc((size_t)(s->T * s->V), sizeof *g->logits);
  o->hook = g;
}

static void gnb_free(FmOptim *o) {
  Gnb *g = o->hook;
  if (!g) return;
  free(g->sampled);
  free(g->targets);
  free(g->rows);
  free(g->logits);
  free(g);
  o->hook = NULL;
}

/* One label from the softmax of the row z (V logits): the first id whose
 * running sum of exp(z - max) exceeds u * (the whole sum). */
static int32_t sample_row(const float *z, int64_t V, double u01) {
  double mx = -INFINITY, sum = 0, acc = 0;
  for (int64_t v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
  for (int64_t v = 0; v < V; v++) sum += exp(z[v] - mx);
  const double u = u01 * sum;
  int64_t v = 0;
  for (; v < V - 1; v++) {
    acc += exp(z[v] - mx);
    if (acc > u) break;
  }
  return (int32_t)v;
}

/* On the steps fm_optim_hessian_due names: the gradient of the loss on labels
 * sampled from the model's own softmax, a label a pure function of (seed,
 * step, global token index), then the EMA of B*ghat^2. */
static void gnb_before_step(FmOptim *o, const FmOptimStepIo *io) {
  Gnb *g = o->hook;
  if (!g || !fm_optim_hessian_due(o, io->step + 1)) return;
  const FmOptimRunShape *s = &g->s;
  const int64_t T = s->T, V = s->V;
  for (int64_t i = 0; i < s->nmicro; i++)
    for (int64_t q = 0; q < s->b; q++) {
      for (int64_t t = 0; t < T; t++) g->rows[t] = q * T + t;
      io->logits(io->ctx, i, g->rows, T, g->logits);
      for (int64_t t = 0; t < T; t++) {
        const uint64_t idx = (uint64_t)(((s->first_micro + i) * s->b + q) * T + t);
        const double u01 = fm_rng_uniform(s->seed, FM_RNG_HESSIAN, (uint32_t)io->step, idx);
        g->targets[i][q * T + t] = sample_row(g->logits + t * V, V, u01);
      }
    }
  bool nonfinite = false;
  const float *ghat = io->grad_shard(io->ctx, (const int32_t *const *)g->targets, &nonfinite);
  if (!nonfinite) fm_optim_sophia_hessian_update(o, ghat, io->ntokens);
}

static const FmOptimHook gnb = {gnb_setup, gnb_before_step, gnb_free};

static int params(FmOptimParams *p, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  p->eps = c->optim.sophia_eps;
  p->sophia_gamma = c->optim.sophia_rho;
  p->sophia_k = c->optim.sophia_k;
  p->sophia_bias_correction = c->optim.sophia_debias;
  return fm__optim_take_betas(p, deck, FM_KEY_optim_sophia_betas, c->optim.sophia_betas, c->optim.sophia_betas_n, err);
}

static const char *const state_names[] = {"optim.m", "optim.h"};

const FmOptimKind fm__optim_sophia = {
    "sophia", "Sophia-G: momentum and a Gauss-Newton-Bartlett Hessian diagonal", 2, state_names, params, step, &gnb};
