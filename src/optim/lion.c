/* lion.c: the Lion optimizer kind: &optim lion_betas, one state (m), the
 * shard update (Chen et al. 2023; optim.h). */
#include "optim_internal.h"

static void step(FmOptim *o, float *w, const float *g, int64_t t, float lr) {
  const FmOptimParams *p = &o->p;
  const float b1 = (float)p->beta1, omb1 = (float)(1.0 - p->beta1);
  const float b2 = (float)p->beta2, omb2 = (float)(1.0 - p->beta2);
  float *m = fm__optim_state(o, 0);
  for (int s = 0; s < o->nseg; s++) {
    const int64_t a = o->seg[s].lo - o->lo, b = o->seg[s].hi - o->lo;
    const float wd = o->seg[s].decay ? (float)p->weight_decay : 0.0f;
    o->be->lion_update(w + a, m + a, g + a, b - a, lr, b1, omb1, b2, omb2, wd);
  }
}

static int params(FmOptimParams *p, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  p->eps = c->optim.eps; /* unused by the rule; kept as the deck says */
  return fm__optim_take_betas(p, deck, FM_KEY_optim_lion_betas, c->optim.lion_betas, c->optim.lion_betas_n, err);
}

static const char *const state_names[] = {"optim.m"};

const FmOptimKind fm__optim_lion = {"lion", "Lion: one momentum, sign update", 1, state_names, params, step, NULL};
