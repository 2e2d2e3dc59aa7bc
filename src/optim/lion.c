/* lion.c: the Lion shard update (Chen et al. 2023; optim.h). */
#include "optim_internal.h"

void fm__optim_step_lion(FmOptim *o, float *w, const float *g, int64_t t, float lr) {
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
