/* model.c: the model registry (models.def) and the dimension rules every
 * model shares. Model-specific shapes live in gpt2.c and llama.c; running a
 * model (FmModel) lives in model_run.c. */
#include <string.h>

#include "model_internal.h"

#define FM_MODEL(n) extern const FmModelKind fm_model_##n;
#include "models.def"
#undef FM_MODEL

static const FmModelKind *const registry[] = {
#define FM_MODEL(n) &fm_model_##n,
#include "models.def"
#undef FM_MODEL
};

int fm_model_count(void) { return (int)(sizeof registry / sizeof registry[0]); }
const FmModelKind *fm_model_at(int i) { return registry[i]; }

const FmModelKind *fm_model_find(const char *name) {
  for (int i = 0; i < fm_model_count(); i++)
    if (fm_strcasecmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

int fm__model_common_dims(FmModelDims *d, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  memset(d, 0, sizeof *d);
  d->C = c->model.d_model;
  d->L = c->model.n_layer;
  d->NH = c->model.n_head;
  d->NKV = c->model.n_kv_head ? c->model.n_kv_head : c->model.n_head;
  d->HS = c->model.head_dim ? c->model.head_dim : c->model.d_model / c->model.n_head;
  d->V = c->model.vocab_size;
  d->T = c->model.seq_len;
  d->tied = c->model.tie_embeddings;
  d->norm_eps = c->model.norm_eps;
  d->rope_theta = c->model.rope_theta;
  int rc = 0;
  if (!c->model.head_dim && c->model.d_model % c->model.n_head != 0) {
    fm_deck_error(deck, err, FM_KEY_model_n_head, "must divide d_model = %lld (or set head_dim)",
                  (long long)c->model.d_model);
    rc = FM_EDECK;
  }
  if (d->NH % d->NKV != 0) {
    fm_deck_error(deck, err, FM_KEY_model_n_kv_head,
                  "must divide n_head = %lld (each KV head serves n_head/n_kv_head query heads)", (long long)d->NH);
    rc = FM_EDECK;
  }
  if (d->NKV > d->NH) {
    fm_deck_error(deck, err, FM_KEY_model_n_kv_head, "must be <= n_head = %lld", (long long)d->NH);
    rc = FM_EDECK;
  }
  return rc;
}

int fm_model_dims(FmModelDims *d, const FmModelKind **kind, const FmDeck *deck, FILE *err) {
  const FmModelKind *k = fm_model_find(deck->c.model.arch);
  if (!k) { /* keys.def restricts arch to the registry's names; keep them in step */
    fm_deck_error(deck, err, FM_KEY_model_arch, "no such model in models.def");
    return FM_EDECK;
  }
  if (kind) *kind = k;
  return k->dims(d, deck, err);
}

/* Per-layer tensors are stacked: (L, d0[, d1]). */
void fm__model_add_param(FmTensorTable *tab, const char *name, uint32_t flags, FmTpSplit tp, int per_layer, int64_t L,
                         int64_t d0, int64_t d1) {
  int64_t shape[3];
  int nd = 0;
  if (per_layer) shape[nd++] = L;
  shape[nd++] = d0;
  if (d1) shape[nd++] = d1;
  fm_table_add(tab, name, FM_DT_F32, flags, tp, nd, shape);
}

void fm_model_param_table(FmTensorTable *tab, const FmModelKind *kind, const FmModelDims *d) {
  fm_table_init(tab);
  kind->params(tab, d);
}

/* Copies per kind: see model_internal.h. */
void fm__model_add_act(FmTensorTable *tab, const char *name, FmActKind kind, const FmModelDims *d, bool recompute,
                       int64_t elems) {
  int64_t copies = 1;
  if (kind == FM_ACT_RESID) copies = d->L + 1;
  if (kind == FM_ACT_LAYER && !recompute) copies = d->L;
  const int64_t shape[2] = {copies, elems};
  fm_table_add(tab, name, FM_DT_F32, (uint32_t)kind, FM_TP_NONE, 2, shape);
}
