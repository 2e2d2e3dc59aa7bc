/* sophia.c: the Sophia-G shard update and its Hessian-diagonal EMA (Liu et
 * al. 2023, Algorithms 2 and 3, in Levanter's form; optim.h says exactly
 * what, and where it departs from either). */
#include <math.h>
#include <string.h>

#include "fmhpc/core.h"
#include "optim_internal.h"

void fm__optim_step_sophia(FmOptim *o, float *w, const float *g, int64_t t, float lr) {
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

int fm_optim_sophia_hessian_update(FmOptim *o, const float *ghat_shard, int64_t batch_tokens) {
  if (strcmp(o->p.kind->name, "sophia") != 0 || batch_tokens < 1) return FM_EINVAL;
  const float b2 = (float)o->p.beta2, omb2 = (float)(1.0 - o->p.beta2), B = (float)batch_tokens;
  float *h = fm__optim_state(o, 1);
  const int64_t n = o->hi - o->lo;
  o->be->sophia_hessian_update(h, ghat_shard, n, B, b2, omb2);
  return 0;
}
