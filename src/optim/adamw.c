/* adamw.c: the AdamW optimizer kind: &optim betas and eps, state m and v,
 * the shard update (torch.optim.AdamW; optim.h). Each decay
 * segment calls the backend's adamw_update op, whose body
 * (src/tensor/elementwise.h) is shared with the CUDA kernel, so both backends
 * give the same bits. */
#include <math.h>

#include "optim_internal.h"

static void step(FmOptim *o, float *w, const float *g, int64_t t, float lr) {
  const FmOptimParams *p = &o->p;
  /* Bias corrections in double, rounded once (torch computes them in Python floats). */
  const float bc1 = (float)(1.0 - pow(p->beta1, (double)t));
  const float bc2 = (float)(1.0 - pow(p->beta2, (double)t));
  float *m = fm__optim_state(o, 0), *v = fm__optim_state(o, 1);
  for (int s = 0; s < o->nseg; s++) {
    const int64_t a = o->seg[s].lo - o->lo, n = o->seg[s].hi - o->seg[s].lo;
    const float wd = o->seg[s].decay ? (float)p->weight_decay : 0.0f;
    o->be->adamw_update(w + a, m + a, v + a, g + a, n, lr, (float)p->beta1, (float)p->beta2, (float)p->eps, wd, bc1,
                        bc2);
  }
}

static int params(FmOptimParams *p, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  p->eps = c->optim.eps;
  return fm__optim_take_betas(p, deck, FM_KEY_optim_betas, c->optim.betas, c->optim.betas_n, err);
}

static const char *const state_names[] = {"optim.m", "optim.v"};

const FmOptimKind fm__optim_adamw = {
    "adamw", "AdamW: first and second moments, decoupled weight decay", 2, state_names, params, step, NULL};
