/* state.c: the table of sharded state a checkpoint walks (dist.h). */
#include <stdio.h>
#include <string.h>

#include "fmhpc/dist.h"

void fm_dist_state_init(FmDistState *t, const FmTensorTable *params, int64_t lo, int64_t hi) {
  memset(t, 0, sizeof *t);
  t->params = params;
  t->lo = lo;
  t->hi = hi;
}

void fm_dist_state_add(FmDistState *t, const char *name, FmDistLayout layout, void *data, int64_t n) {
  if (t->n >= FM_DIST_MAX_STATE) fm_abort_one(1, "fm_dist_state_add: more than %d sharded arrays", FM_DIST_MAX_STATE);
  FmDistEntry *e = &t->e[t->n++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->layout = layout;
  e->data = data;
  e->n = layout == FM_DIST_FLAT_SHARD ? t->hi - t->lo : n;
}

const FmDistEntry *fm_dist_state_find(const FmDistState *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->e[i].name, name) == 0) return &t->e[i];
  return NULL;
}

void fm_dist_state_of_run(FmDistState *t, const FmTensorTable *params, float *w, const FmReduce *red, FmOptim *opt,
                          float *const *state, FmSpike *spike) {
  fm_dist_state_init(t, params, fm_reduce_lo(red), fm_reduce_hi(red));
  fm_dist_state_add(t, "params", FM_DIST_FLAT_SHARD, w + t->lo, 0);
  const int ns = fm_optim_state_table(opt)->n;
  const char *const *names = fm_optim_state_names(opt);
  float *const *arrays = state ? state : fm_optim_state_arrays(opt);
  for (int i = 0; i < ns; i++) {
    char name[sizeof t->e[0].name];
    const char *dot = strchr(names[i], '.'); /* "optim.m" -> "optim/m" */
    snprintf(name, sizeof name, "optim/%.48s", dot ? dot + 1 : names[i]);
    fm_dist_state_add(t, name, FM_DIST_FLAT_SHARD, arrays[i], 0);
  }
  fm_dist_state_add(t, "reduce/amax_prev", FM_DIST_WHOLE_F32, red->amax_prev, red->nblocks);
  if (spike->window > 0) fm_dist_state_add(t, "spike/losses", FM_DIST_WHOLE_F64, spike->buf, spike->window);
}
