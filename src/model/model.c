/* model.c: the model registry (models.def) and the dimension rules every
 * model shares. Model-specific shapes live in gpt2.c and llama.c; running a
 * model (FmModel) lives in model_run.c. */
#include <math.h>
#include <string.h>

#include "model_internal.h"

#define FM_MODEL(n) extern const FmModelKind fm_model_##n;
#include "fmhpc/models.def"
#undef FM_MODEL

static const FmModelKind *const registry[] = {
#define FM_MODEL(n) &fm_model_##n,
#include "fmhpc/models.def"
#undef FM_MODEL
};

int fm_model_count(void) { return (int)(sizeof registry / sizeof registry[0]); }
const FmModelKind *fm_model_at(int i) { return registry[i]; }

const FmModelKind *fm_model_find(const char *name) {
  for (int i = 0; i < fm_model_count(); i++)
    if (fm_strcasecmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

static void diff_add(FmModelDiff *out, int max, int *n, const char *key, const char *then, const char *now) {
  if (*n < max) {
    out[*n].key = key;
    snprintf(out[*n].then, sizeof out[*n].then, "%s", then);
    snprintf(out[*n].now, sizeof out[*n].now, "%s", now);
  }
  (*n)++;
}

static void diff_int(FmModelDiff *out, int max, int *n, const char *key, int64_t then, int64_t now) {
  char a[32], b[32];
  snprintf(a, sizeof a, "%lld", (long long)then);
  snprintf(b, sizeof b, "%lld", (long long)now);
  if (then != now) diff_add(out, max, n, key, a, b);
}

static void diff_real(FmModelDiff *out, int max, int *n, const char *key, double then, double now) {
  char a[48], b[48];
  fm_deck_fmt_real(a, sizeof a, then);
  fm_deck_fmt_real(b, sizeof b, now);
  if (then != now) diff_add(out, max, n, key, a, b);
}

int fm_model_dims_diff(const FmModelKind *ka, const FmModelDims *a, const FmModelKind *kb, const FmModelDims *b,
                       FmModelDiff *out, int max) {
  int n = 0;
  if (ka != kb) {
    char x[40], y[40];
    snprintf(x, sizeof x, "'%s'", ka->name);
    snprintf(y, sizeof y, "'%s'", kb->name);
    diff_add(out, max, &n, "arch", x, y);
  }
  diff_int(out, max, &n, "d_model", a->C, b->C);
  diff_int(out, max, &n, "n_layer", a->L, b->L);
  diff_int(out, max, &n, "n_head", a->NH, b->NH);
  diff_int(out, max, &n, "n_kv_head", a->NKV, b->NKV);
  diff_int(out, max, &n, "head_dim", a->HS, b->HS);
  diff_int(out, max, &n, "d_ff", a->F, b->F);
  diff_int(out, max, &n, "vocab_size", a->V, b->V);
  if (a->tied != b->tied)
    diff_add(out, max, &n, "tie_embeddings", a->tied ? ".true." : ".false.", b->tied ? ".true." : ".false.");
  diff_real(out, max, &n, "norm_eps", a->norm_eps, b->norm_eps);
  if (ka->rope || kb->rope) diff_real(out, max, &n, "rope_theta", a->rope_theta, b->rope_theta);
  return n;
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
  /* the kernels take both as float: a value that becomes 0 or inf there would be used silently (norm_eps 1e-300
   * is an epsilon of 0; rope_theta 1e-300 made every loss NaN) */
  if ((float)d->norm_eps <= 0.0f || !isfinite((float)d->norm_eps)) {
    fm_deck_error(deck, err, FM_KEY_model_norm_eps, "is %s in float, as the norm kernels use it",
                  (float)d->norm_eps <= 0.0f ? "0" : "inf");
    rc = FM_EDECK;
  }
  if ((float)d->rope_theta <= 0.0f || !isfinite((float)d->rope_theta)) {
    fm_deck_error(deck, err, FM_KEY_model_rope_theta, "is %s in float, as the RoPE kernels use it",
                  (float)d->rope_theta <= 0.0f ? "0" : "inf");
    rc = FM_EDECK;
  }
  return rc;
}

/* Sizes are int64 products of these keys: each is kept below FM_MAX_ELEMS
 * before a model derives anything from it (4*C, the Llama ffn rule). */
static int check_keys(const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  const struct {
    int key;
    int64_t v;
  } keys[] = {{FM_KEY_model_d_model, c->model.d_model},         {FM_KEY_model_n_layer, c->model.n_layer},
              {FM_KEY_model_n_head, c->model.n_head},           {FM_KEY_model_n_kv_head, c->model.n_kv_head},
              {FM_KEY_model_head_dim, c->model.head_dim},       {FM_KEY_model_d_ff, c->model.d_ff},
              {FM_KEY_model_vocab_size, c->model.vocab_size},   {FM_KEY_model_seq_len, c->model.seq_len},
              {FM_KEY_train_micro_batch, c->train.micro_batch}, {FM_KEY_train_global_batch, c->train.global_batch}};
  int rc = 0;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (keys[i].v > FM_MAX_ELEMS) {
      fm_deck_error(deck, err, keys[i].key, "must be <= 2^50 = %lld, the most elements fmhpc sizes in one tensor",
                    (long long)FM_MAX_ELEMS);
      rc = FM_EDECK;
    }
  return rc;
}

/* The largest products the parameter and activation tables form, checked
 * before any table is built: a wrapped int64 gave "activations 0 B",
 * negative byte counts and crashes. Each must stay <= FM_MAX_ELEMS. */
static int check_sizes(const FmModelDims *d, const FmDeck *deck, FILE *err) {
  const int64_t b = deck->c.train.micro_batch, B = deck->c.train.global_batch, W = d->C > d->F ? d->C : d->F;
  const struct {
    const char *what;
    int64_t f[5];
    int key, n;
  } sizes[] = {
      {"the token embedding (V x C)", {d->V, d->C}, FM_KEY_model_vocab_size, 2},
      {"the stacked attention weights (L x NH*HS x C)", {d->L, d->NH, d->HS, d->C}, FM_KEY_model_d_model, 4},
      {"the stacked residual weights (L x C x C)", {d->L, d->C, d->C}, FM_KEY_model_d_model, 3},
      {"the stacked MLP weights (L x C x F)", {d->L, d->C, d->F}, FM_KEY_model_d_ff, 3},
      {"a micro-batch's logits (b x T x V)", {b, d->T, d->V}, FM_KEY_model_seq_len, 3},
      {"a micro-batch's activations (L+1 x b x T x 4 max(C, F))", {d->L + 1, b, d->T, 4, W}, FM_KEY_model_seq_len, 5},
      {"a step's tokens (B x T)", {B, d->T}, FM_KEY_train_global_batch, 2},
  };
  int rc = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !rc; i++)
    if (fm_elems(sizes[i].n, sizes[i].f) < 0) {
      fm_deck_error(deck, err, sizes[i].key,
                    "%s would hold more than 2^50 elements, the most fmhpc sizes in one tensor", sizes[i].what);
      if (err) fprintf(err, "hint: fmhpc --check prints the plan of a deck that fits\n");
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
  int rc = check_keys(deck, err);
  if (rc) return rc;
  rc = k->dims(d, deck, err);
  return rc ? rc : check_sizes(d, deck, err);
}

/* Per-layer tensors are stacked: (L, d0[, d1]). */
void fm__model_add_param(FmTensorTable *tab, const char *name, uint32_t flags, FmTpSplit tp, int per_layer, int64_t L,
                         int64_t d0, int64_t d1) {
  int64_t shape[3];
  int nd = 0;
  if (per_layer) shape[nd++] = L;
  shape[nd++] = d0;
  if (d1) shape[nd++] = d1;
  fm_table_add(tab, name, FM_DT_F32, flags | (per_layer ? FM_TF_LAYER : 0u), tp, nd, shape);
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

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int fm_model_check_tp(const FmModelDims *d, int64_t tp, const FmDeck *deck, FILE *err) {
  const int64_t g = gcd64(d->NKV, d->F);
  if (tp >= 1 && g % tp == 0 && tp <= d->V) return 0;
  char valid[256] = "";
  size_t used = 0;
  for (int64_t q = 1; q <= g && used + 24 < sizeof valid; q++)
    if (g % q == 0)
      used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%lld", used ? ", " : "", (long long)q);
  fm_deck_error(deck, err, FM_KEY_parallel_tp,
                "must divide the model's %lld key/value heads (each tp rank owns whole KV heads and their query "
                "heads) and d_ff = %lld (the MLP's columns): valid tp values are %s",
                (long long)d->NKV, (long long)d->F, valid);
  return FM_EDECK;
}
