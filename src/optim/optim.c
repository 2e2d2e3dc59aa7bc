/* optim.c: the optimizer registry (optimizers.def), hyperparameters from the
 * deck (the shared keys here, each kind's own in its file), the ZeRO-1
 * optimizer object (shard, zeroed state, state table, weight decay segments),
 * step and hook dispatch. The update rules live in adamw.c, lion.c
 * and sophia.c; schedules, clipping, the shard map and spike skipping in their
 * own files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "optim_internal.h"

static const FmOptimKind *const registry[] = {
#define FM_OPTIM(n) &fm__optim_##n,
#include "fmhpc/optimizers.def"
#undef FM_OPTIM
};

int fm_optim_count(void) { return (int)(sizeof registry / sizeof registry[0]); }
const FmOptimKind *fm_optim_at(int i) { return registry[i]; }

const FmOptimKind *fm_optim_find(const char *name) {
  for (int i = 0; i < fm_optim_count(); i++)
    if (fm_strcasecmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

int fm__optim_take_betas(FmOptimParams *p, const FmDeck *deck, int key, const double *v, int n, FILE *err) {
  if (n != 2) {
    fm_deck_error(deck, err, key, "needs two values (beta1, beta2), got %d", n);
    return FM_EDECK;
  }
  p->beta1 = v[0];
  p->beta2 = v[1];
  return 0;
}

int fm_optim_params_from_deck(FmOptimParams *p, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  memset(p, 0, sizeof *p);
  p->kind = fm_optim_find(c->optim.name);
  if (!p->kind) {
    fm_deck_error(deck, err, FM_KEY_optim_name, "no such optimizer in optimizers.def");
    return FM_EDECK;
  }
  p->weight_decay = c->optim.weight_decay;
  p->decay_norms = c->optim.decay_norms;
  p->decay_biases = c->optim.decay_biases;
  p->decay_embeddings = c->optim.decay_embeddings;
  return p->kind->params(p, deck, err);
}

bool fm_optim_decays(const FmOptimParams *p, uint32_t flags) {
  if (flags & FM_TF_NORM) return p->decay_norms;
  if (flags & FM_TF_BIAS) return p->decay_biases;
  if (flags & FM_TF_EMBED) return p->decay_embeddings;
  return (flags & FM_TF_MATRIX) != 0;
}

/* Cut [lo, hi) at tensor boundaries; merge neighbours with the same setting. */
static void build_segments(FmOptim *o, const FmTensorTable *params) {
  o->seg = fm_xmalloc(sizeof *o->seg * (size_t)(params->n + 1));
  o->nseg = 0;
  for (int i = 0; i < params->n; i++) {
    const FmTensor *t = &params->t[i];
    int64_t a = t->offset > o->lo ? t->offset : o->lo;
    int64_t b = t->offset + t->numel < o->hi ? t->offset + t->numel : o->hi;
    if (a >= b) continue;
    bool decay = fm_optim_decays(&o->p, t->flags);
    if (o->nseg > 0 && o->seg[o->nseg - 1].hi == a && o->seg[o->nseg - 1].decay == decay) {
      o->seg[o->nseg - 1].hi = b;
    } else {
      o->seg[o->nseg++] = (FmOptimSeg){a, b, decay};
    }
  }
}

FmOptim *fm_optim_create(const FmOptimParams *p, const FmTensorTable *params, int64_t lo, int64_t hi, FILE *err) {
  if (!p->kind || lo < 0 || hi < lo || hi > params->numel) {
    if (err)
      fprintf(err, "fm_optim_create: shard [%lld, %lld) is not inside the %lld parameters (or no optimizer)\n",
              (long long)lo, (long long)hi, (long long)params->numel);
    return NULL;
  }
  FmOptim *o = fm_xcalloc(1, sizeof *o);
  o->p = *p;
  o->be = fm_backend_cpu();
  o->lo = lo;
  o->hi = hi;
  const int64_t n = hi - lo;
  const int ns = p->kind->state_per_param;
  o->state = fm_xcalloc((size_t)(ns * n > 0 ? ns * n : 1), sizeof(float));
  fm_table_init(&o->table);
  o->arrays = fm_xcalloc((size_t)(ns > 0 ? ns : 1), sizeof *o->arrays);
  for (int j = 0; j < ns; j++) {
    fm_table_add(&o->table, p->kind->state_names[j], FM_DT_F32, 0, FM_TP_NONE, 1, &n);
    o->arrays[j] = fm__optim_state(o, j);
  }
  build_segments(o, params);
  return o;
}

int fm_optim_create_from_deck(FmOptim **out, const FmDeck *deck, const FmTensorTable *params, int64_t lo, int64_t hi,
                              FILE *err) {
  FmOptimParams p;
  *out = NULL;
  int rc = fm_optim_params_from_deck(&p, deck, err);
  if (rc) return rc;
  *out = fm_optim_create(&p, params, lo, hi, err);
  return *out ? 0 : FM_EINVAL;
}

void fm_optim_free(FmOptim *o) {
  if (!o) return;
  if (o->p.kind->hook && o->p.kind->hook->free) o->p.kind->hook->free(o);
  if (o->dstate) o->be->free(o->dstate);
  free(o->arrays);
  fm_table_free(&o->table);
  free(o->state);
  free(o->seg);
  free(o);
}

static int64_t state_bytes(const FmOptim *o) {
  return (int64_t)o->p.kind->state_per_param * (o->hi - o->lo) * (int64_t)sizeof(float);
}

void fm_optim_use_device(FmOptim *o, const FmBackend *be) {
  if (be->host_accessible || o->dstate) return;
  o->be = be;
  const int64_t bytes = state_bytes(o);
  if (bytes <= 0) return;
  o->dstate = fm_backend_alloc(be, bytes, FM_MEM_OPTIM);
  fm_backend_name_buffer(o->dstate, bytes, "optimizer state");
  be->copy_to_device(o->dstate, o->state, bytes);
}

void fm_optim_state_to_host(FmOptim *o) {
  if (o->dstate) o->be->copy_to_host(o->state, o->dstate, state_bytes(o));
}

void fm_optim_state_to_device(FmOptim *o) {
  if (o->dstate) o->be->copy_to_device(o->dstate, o->state, state_bytes(o));
}

void fm_optim_step(FmOptim *o, float *w_shard, const float *g_shard, int64_t t, float lr) {
  o->p.kind->step(o, w_shard, g_shard, t, lr);
}

void fm_optim_setup_run(FmOptim *o, const FmOptimRunShape *s) {
  if (o->p.kind->hook && o->p.kind->hook->setup) o->p.kind->hook->setup(o, s);
}

void fm_optim_before_step(FmOptim *o, const FmOptimStepIo *io) {
  if (o->p.kind->hook && o->p.kind->hook->before_step) o->p.kind->hook->before_step(o, io);
}

const FmTensorTable *fm_optim_state_table(const FmOptim *o) { return &o->table; }
float *fm_optim_state_data(FmOptim *o) { return o->state; }
const char *const *fm_optim_state_names(const FmOptim *o) { return o->p.kind->state_names; }
float *const *fm_optim_state_arrays(const FmOptim *o) { return o->arrays; }
int64_t fm_optim_lo(const FmOptim *o) { return o->lo; }
int64_t fm_optim_hi(const FmOptim *o) { return o->hi; }
const FmOptimParams *fm_optim_params(const FmOptim *o) { return &o->p; }

int fm_optim_segments(const FmOptim *o, const FmOptimSeg **segs) {
  *segs = o->seg;
  return o->nseg;
}
