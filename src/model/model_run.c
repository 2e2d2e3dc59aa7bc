/* model_run.c: the model-independent half of FmModel: arenas sized at
 * create time, the batch upload, the output projection +
 * cross-entropy between a model's final hidden state and its backward,
 * logits, and activation statistics. Model-specific forward and backward live
 * in gpt2.c and llama.c; the registry and dims rules in model.c; weight init
 * in init.c. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* ---- FmModel ---------------------------------------------------------------- */

/* The ops a model needs from its backend: those ops.def marks `model`. */
static int check_backend(const FmBackend *be, FILE *err) {
  int rc = 0;
#define FM__MODEL_OP_extra(op)
#define FM__MODEL_OP_model(op)                                                                           \
  if (!be->op) {                                                                                         \
    if (err) fprintf(err, "error: the %s backend has no %s op: it cannot run a model\n", be->name, #op); \
    rc = FM_EINVAL;                                                                                      \
  }
#define FM_OP(name, cuda, use, ret, params) FM__MODEL_OP_##use(name)
#include "fmhpc/ops.def"
#undef FM_OP
#undef FM__MODEL_OP_model
#undef FM__MODEL_OP_extra
  return rc;
}

/* The cross-entropy op's scratch. The op table has no size query yet; the
 * contract (backend.h) sizes it with fm_cpu_xent_scratch, which is a pure
 * function of (N, V), not an op, so it serves every backend until the table
 * grows one. */
static int64_t xent_scratch_elems(int64_t N, int64_t V) { return fm_cpu_xent_scratch(N, V); }

/* Floats beside the activation arena: token weights (N), the rows for logits
 * (b*C, b*V) and the cross-entropy scratch. */
static int64_t batch_extra_elems(const FmModelDims *d, int64_t b) {
  const int64_t N = b * d->T;
  return N + b * d->C + b * d->V + xent_scratch_elems(N, d->V);
}

int64_t fm_model_act_elems(const FmModelKind *k, const FmModelDims *d, int64_t b, bool recompute) {
  FmTensorTable t;
  fm_table_init(&t);
  k->acts(&t, d, b, recompute);
  const int64_t n = t.numel + batch_extra_elems(d, b);
  fm_table_free(&t);
  return n;
}

static double mib(int64_t elems, size_t bytes) { return (double)elems * (double)bytes / 1048576.0; }

static float *act_named(FmModel *m, const char *name) {
  const FmTensor *t = fm_table_find(&m->acts, name);
  if (t) return m->act + t->offset;
  fm_abort_one(1, "model %s: no activation \"%s\" in its table", m->kind->name, name);
}

/* The parameter table has pd's shape; activations, batch buffers and the
 * forward use d (d->T <= pd->T: a generation context shorter than the
 * model's, whose positions index the first d->T rows of GPT-2's wpe). */
static int create(FmModel **out, const FmModelKind *k, const FmModelDims *pd, const FmModelDims *d, const FmBackend *be,
                  int64_t b, bool recompute, FmComm *tp, FILE *err) {
  *out = NULL;
  const int P = tp ? tp->size : 1, tr = tp ? tp->rank : 0;
  FmModelDims lpd = *pd, ld = *d;
  int64_t v0 = 0;
  if (P > 1) {
    if (!be->host_accessible || d->T != pd->T) {
      if (err)
        fprintf(err, "error: tensor parallelism (tp = %d) runs on host-memory backends at the model's seq_len; %s\n", P,
                be->host_accessible ? "generation contexts are not sharded yet" : "this backend is not host memory");
      return FM_EINVAL;
    }
    int rc = fm_model_tp_dims(&lpd, &v0, pd, P, tr, err);
    if (rc) return rc;
    ld = lpd;
  }
  const FmModelDims *cpd = pd;
  pd = &lpd;
  d = &ld;
  if (b < 1 || d->T < 1 || d->T > pd->T) {
    if (err)
      fprintf(err, "error: model micro-batch b = %lld, T = %lld: both must be >= 1, T <= the model's %lld\n",
              (long long)b, (long long)d->T, (long long)pd->T);
    return FM_EINVAL;
  }
  int rc = check_backend(be, err);
  if (rc) return rc;
  FmModel *m = fm_xmalloc(sizeof *m);
  memset(m, 0, sizeof *m);
  m->kind = k;
  m->d = *d;
  m->pd = *pd;
  m->be = be;
  m->B = b;
  m->recompute = recompute;
  m->tp = P > 1 ? tp : NULL;
  m->tp_size = P;
  m->tp_rank = tr;
  m->v0 = v0;
  m->cd = *cpd;
  fm_model_param_table(&m->params, k, pd);
  fm_model_param_table(&m->cparams, k, cpd);
  fm_table_init(&m->acts);
  k->acts(&m->acts, d, b, recompute);

  const int64_t N = b * d->T, C = d->C, V = d->V;
  m->param = fm_backend_alloc(be, m->params.numel * (int64_t)sizeof(float), FM_MEM_WEIGHTS);
  m->grad = fm_backend_alloc(be, m->params.numel * (int64_t)sizeof(float), FM_MEM_GRADS);
  m->act = fm_backend_alloc(be, m->acts.numel * (int64_t)sizeof(float), FM_MEM_ACT);
  m->xent_scratch_elems = xent_scratch_elems(N, V);
  /* The micro-batch: token ids, targets, positions, segments; then the
   * token weights, the rows for logits and the cross-entropy scratch. */
  m->tokens = fm_backend_alloc(be, 4 * N * (int64_t)sizeof(int32_t), FM_MEM_BATCH);
  m->targets = m->tokens + N;
  m->pos = m->tokens + 2 * N;
  m->seg = m->tokens + 3 * N;
  const int64_t extra = batch_extra_elems(d, b);
  m->weight = fm_backend_alloc(be, extra * (int64_t)sizeof(float), FM_MEM_BATCH);
  m->rows_x = m->weight + N;
  m->rows_logits = m->rows_x + b * C;
  m->xent_scratch = m->rows_logits + b * V;
  be->memset(m->act, 0, m->acts.numel * (int64_t)sizeof(float));
  be->memset(m->tokens, 0, 4 * N * (int64_t)sizeof(int32_t));
  be->memset(m->weight, 0, extra * (int64_t)sizeof(float));
  fm_model_zero_grad(m);
  if (!be->host_accessible) m->host_stage = fm_xmalloc((size_t)(N * C) * sizeof(float));
  if (P > 1) {
    m->tp_scratch = fm_xmalloc((size_t)fm_comm_sum_ordered_scratch(tp, N * C) * sizeof(float));
    m->vx_scratch = fm_xmalloc((size_t)fm_vocab_xent_scratch(tp, N, C, V) * sizeof(float));
    fm_log0(
        "tensor parallel: tp = %d, rank 0 holds %lld of %lld parameters (heads %lld of %lld, d_ff %lld of %lld, "
        "vocab rows %lld of %lld); vocab-parallel cross-entropy scratch %.1f MiB (at most %lld x %lld logits, "
        "never the %lld x %lld of the whole vocabulary), tp sum scratch %.1f MiB",
        P, (long long)m->params.numel, (long long)m->cparams.numel, (long long)d->NH, (long long)cpd->NH,
        (long long)d->F, (long long)cpd->F, (long long)V, (long long)cpd->V, mib(fm_vocab_xent_scratch(tp, N, C, V), 4),
        (long long)N, (long long)(V < 2048 ? V : 2048), (long long)N, (long long)cpd->V,
        mib(fm_comm_sum_ordered_scratch(tp, N * C), 4));
  }

  m->w_out = fm_model_param(m, d->tied ? "wte" : "lm_head");
  m->dw_out = fm_model_grad(m, d->tied ? "wte" : "lm_head");
  if (!m->w_out) fm_abort_one(1, "model %s: no output projection in its parameter table", k->name);
  m->final = act_named(m, "final");
  m->dfinal = act_named(m, "dfinal");

  int64_t kept = 0, scratch = 0;
  for (int i = 0; i < m->acts.n; i++) {
    if (m->acts.t[i].flags == FM_ACT_GRAD)
      scratch += m->acts.t[i].numel;
    else
      kept += m->acts.t[i].numel;
  }
  fm_log0(
      "model %s on %s: parameters %lld (%.1f MiB), gradients %.1f MiB, activations %.1f MiB "
      "(b = %lld, T = %lld, recompute %s), backward scratch %.1f MiB, batch + logits + cross-entropy "
      "scratch %.1f MiB\n",
      k->name, be->name, (long long)m->params.numel, mib(m->params.numel, 4), mib(m->params.numel, 4), mib(kept, 4),
      (long long)b, (long long)d->T, recompute ? "on" : "off", mib(scratch, 4), mib(extra + 4 * N, 4));
  *out = m;
  return FM_OK;
}

int fm_model_create(FmModel **out, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                    bool recompute, FILE *err) {
  return create(out, k, d, d, be, b, recompute, NULL, err);
}

int fm_model_create_tp(FmModel **out, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                       bool recompute, FmComm *tp, FILE *err) {
  return create(out, k, d, d, be, b, recompute, tp, err);
}

int fm_model_create_ctx(FmModel **out, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                        int64_t T_ctx, FILE *err) {
  FmModelDims dc = *d;
  dc.T = T_ctx;
  return create(out, k, d, &dc, be, b, false, NULL, err);
}

static void gen_free(FmModel *m);

void fm_model_free(FmModel *m) {
  if (!m) return;
  if (m->parent) {
    gen_free(m);
    return;
  }
  m->be->free(m->param);
  m->be->free(m->grad);
  m->be->free(m->act);
  m->be->free(m->tokens);
  m->be->free(m->weight);
  free(m->host_stage);
  free(m->tp_scratch);
  free(m->vx_scratch);
  fm_table_free(&m->cparams);
  fm_table_free(&m->params);
  fm_table_free(&m->acts);
  free(m);
}

void fm_model_set_compute_bf16(FmModel *m, bool on) {
  m->bf16 = on;
  if (m->be->set_compute_bf16) m->be->set_compute_bf16(on ? 1 : 0);
}

void fm_model_zero_grad(FmModel *m) { m->be->memset(m->grad, 0, m->params.numel * (int64_t)sizeof(float)); }

/* ---- forward / backward ---------------------------------------------------------- */

/* The micro-batch's uploads do not wait (copy_to_device_async where the
 * backend has it): the callers keep the host batch unchanged until the step's
 * (or the pass's) next read. */
static void load_batch(FmModel *m, const FmModelInput *in, const float *token_weight) {
  const FmBackend *be = m->be;
  void (*up)(void *, const void *, int64_t) = be->copy_to_device_async ? be->copy_to_device_async : be->copy_to_device;
  const int64_t bytes = m->B * m->d.T * 4;
  up(m->tokens, in->tokens, bytes);
  up(m->pos, in->pos, bytes);
  if (in->targets) up(m->targets, in->targets, bytes);
  if (token_weight) up(m->weight, token_weight, bytes);
  m->seg_on = in->seg != NULL;
  if (in->seg) up(m->seg, in->seg, bytes);
}

/* loss_d non-NULL (fm_model_forward_backward_dev): the loss stays in backend memory. */
static double fwd_bwd(FmModel *m, const FmModelInput *in, const float *token_weight, bool backward, double *loss_d) {
  const FmBackend *be = m->be;
  const int64_t N = m->B * m->d.T, C = m->d.C;
  load_batch(m, in, token_weight);
  m->kind->forward(m);
  if (backward) be->memset(m->dfinal, 0, N * C * (int64_t)sizeof(float));
  /* logits = final @ w_out^T and the weighted cross-entropy, in vocab chunks */
  double loss = 0.0;
  if (loss_d)
    be->xent_fwd_bwd_dev(backward ? m->dfinal : NULL, backward ? m->dw_out : NULL, m->final, m->w_out, m->targets,
                         m->weight, N, C, m->d.V, m->xent_scratch, loss_d);
  else
    loss = fm__tp_on(m) /* vocab-parallel: this rank's rows of the LM head; the logits are never gathered */
               ? fm_vocab_xent_fwd_bwd(m->tp, be, backward ? m->dfinal : NULL, backward ? m->dw_out : NULL, m->final,
                                       m->w_out, m->targets, m->weight, N, C, m->v0, m->d.V, m->vx_scratch)
               : be->xent_fwd_bwd(backward ? m->dfinal : NULL, backward ? m->dw_out : NULL, m->final, m->w_out,
                                  m->targets, m->weight, N, C, m->d.V, m->xent_scratch);
  if (backward) m->kind->backward(m);
  if (backward && m->grad_ready) /* the embeddings (and, without blocks, the head): final only now */
    for (int i = 0; i < m->params.n; i++) {
      const FmTensor *t = &m->params.t[i];
      if (!(t->flags & FM_TF_LAYER) && ((t->flags & FM_TF_EMBED) || m->d.L == 0))
        m->grad_ready(m->grad_ready_ctx, t->offset, t->offset + t->numel);
    }
  return loss;
}

double fm_model_forward_backward(FmModel *m, const FmModelInput *in, const float *token_weight, bool backward) {
  return fwd_bwd(m, in, token_weight, backward, NULL);
}

bool fm_model_loss_on_device(const FmModel *m) { return m->be->xent_fwd_bwd_dev && !fm__tp_on(m); }

void fm_model_forward_backward_dev(FmModel *m, const FmModelInput *in, const float *token_weight, bool backward,
                                   double *loss_d) {
  if (!fm_model_loss_on_device(m))
    fm_abort_one(1,
                 "fm_model_forward_backward_dev: the backend has no xent_fwd_bwd_dev or tp > 1 (a programming error)");
  (void)fwd_bwd(m, in, token_weight, backward, loss_d);
}

void fm_model_set_grad_ready(FmModel *m, FmGradReady fn, void *ctx) {
  m->grad_ready = fn;
  m->grad_ready_ctx = ctx;
}

void fm__grads_ready_block(FmModel *m, int64_t l) {
  if (!m->grad_ready) return;
  if (l ==
      m->d.L - 1) /* the head (final norm, an untied LM head): final since the loss and the final norm's backward */
    for (int i = 0; i < m->params.n; i++) {
      const FmTensor *t = &m->params.t[i];
      if (!(t->flags & (FM_TF_LAYER | FM_TF_EMBED))) m->grad_ready(m->grad_ready_ctx, t->offset, t->offset + t->numel);
    }
  for (int i = 0; i < m->params.n; i++) {
    const FmTensor *t = &m->params.t[i];
    if (!(t->flags & FM_TF_LAYER)) continue;
    const int64_t per = t->numel / t->shape[0];
    m->grad_ready(m->grad_ready_ctx, t->offset + l * per, t->offset + (l + 1) * per);
  }
}

void fm_model_logits(FmModel *m, const FmModelInput *in, const int64_t *rows, int64_t n_rows, float *logits_out) {
  const FmBackend *be = m->be;
  const int64_t C = m->d.C, V = m->d.V, N = m->B * m->d.T;
  if (fm__tp_on(m)) /* the callers (generation, eval's logits, Sophia's sampling) run at tp = 1 today */
    fm_abort_one(1, "fm_model_logits: full-vocabulary logits are not gathered over tp = %d ranks (use tp = 1)",
                 m->tp_size);
  load_batch(m, in, NULL);
  m->kind->forward(m);
  if (!rows) n_rows = N;
  for (int64_t i = 0; i < n_rows; i += m->B) { /* B rows at a time: the buffer made at create */
    const int64_t n = n_rows - i < m->B ? n_rows - i : m->B;
    for (int64_t j = 0; j < n; j++) {
      const int64_t r = rows ? rows[i + j] : i + j;
      if (r < 0 || r >= N) fm_abort_one(1, "fm_model_logits: row %lld outside [0, %lld)", (long long)r, (long long)N);
      be->copy(m->rows_x + j * C, m->final + r * C, C * (int64_t)sizeof(float));
    }
    be->matmul_fwd(m->rows_logits, m->rows_x, m->w_out, NULL, n, C, V);
    be->copy_to_host(logits_out + i * V, m->rows_logits, n * V * (int64_t)sizeof(float));
  }
}

/* ---- generation: the decode model ------------------------------------------------ */

int fm_model_gen_create(FmModel **out, FmModel *m, FILE *err) {
  *out = NULL;
  const FmBackend *be = m->be;
  if (fm__tp_on(m)) {
    if (err) fprintf(err, "error: generation is not sharded over tensor-parallel ranks yet: use &parallel tp = 1\n");
    return FM_EINVAL;
  }
  if (m->recompute || m->parent) {
    if (err) fprintf(err, "error: generation needs a model made without recompute (its activations are the cache)\n");
    return FM_EINVAL;
  }
  if (!be->attention_decode) {
    if (err) fprintf(err, "error: the %s backend has no attention_decode op: it cannot generate yet\n", be->name);
    return FM_EINVAL;
  }
  FmModel *g = fm_xmalloc(sizeof *g);
  memset(g, 0, sizeof *g);
  g->kind = m->kind;
  g->d = m->d;
  g->pd = m->pd;
  g->d.T = 1; /* one new position per sequence */
  g->be = be;
  g->B = m->B;
  g->recompute = true; /* one copy of each block buffer: nothing runs backward */
  g->bf16 = m->bf16;
  g->params = m->params; /* shared, not owned: same table, same arena */
  g->param = m->param;
  g->w_out = m->w_out;
  g->parent = m;
  fm_table_init(&g->acts);
  g->kind->acts(&g->acts, &g->d, g->B, true);
  const int64_t B = g->B, V = g->d.V;
  g->act = fm_backend_alloc(be, g->acts.numel * (int64_t)sizeof(float), FM_MEM_ACT);
  g->tokens = fm_backend_alloc(be, 4 * B * (int64_t)sizeof(int32_t), FM_MEM_BATCH);
  g->targets = g->tokens + B;
  g->pos = g->tokens + 2 * B;
  g->seg = g->tokens + 3 * B;
  g->rows_logits = fm_backend_alloc(be, B * V * (int64_t)sizeof(float), FM_MEM_BATCH);
  be->memset(g->act, 0, g->acts.numel * (int64_t)sizeof(float));
  be->memset(g->tokens, 0, 4 * B * (int64_t)sizeof(int32_t));
  g->dec_pos_host = fm_xmalloc((size_t)B * sizeof(int32_t));
  g->final = act_named(g, "final");
  const int64_t kv = 2 * m->d.L * m->B * m->d.T * m->d.NKV * m->d.HS;
  fm_log0(
      "generation: key/value cache %.1f MiB = %lld bytes (the model's activations, %lld sequences x %lld "
      "positions), decode buffers %.1f MiB\n",
      mib(kv, 4), (long long)kv * 4, (long long)B, (long long)m->d.T, mib(g->acts.numel + B * V + 4 * B, 4));
  *out = g;
  return FM_OK;
}

static void gen_free(FmModel *g) {
  g->be->free(g->act);
  g->be->free(g->tokens);
  g->be->free(g->rows_logits);
  free(g->dec_pos_host);
  fm_table_free(&g->acts); /* params belong to the parent */
  free(g);
}

void fm_model_decode(FmModel *g, const int32_t *tokens, const int32_t *pos, float *logits_out) {
  if (!g->parent) fm_abort_one(1, "fm_model_decode: not a decode model (make it with fm_model_gen_create)");
  const FmBackend *be = g->be;
  const int64_t B = g->B, C = g->d.C, V = g->d.V;
  memcpy(g->dec_pos_host, pos, (size_t)B * sizeof(int32_t));
  be->copy_to_device(g->tokens, tokens, B * (int64_t)sizeof(int32_t));
  be->copy_to_device(g->pos, pos, B * (int64_t)sizeof(int32_t));
  g->kind->forward(g); /* the training forward with T = 1: embedding, blocks, final norm */
  be->matmul_fwd(g->rows_logits, g->final, g->w_out, NULL, B, C, V);
  be->copy_to_host(logits_out, g->rows_logits, B * V * (int64_t)sizeof(float));
}

void fm__model_decode_attend(const FmModel *m, float *out, const float *q, const float *k, const float *v, int64_t ldq,
                             int64_t ld_new, float *kc, float *vc, int64_t ldkv) {
  const FmBackend *be = m->be;
  const FmModelDims *d = &m->d;
  const int64_t Tc = m->parent->d.T, row = d->NKV * d->HS * (int64_t)sizeof(float);
  for (int64_t b = 0; b < m->B; b++) {
    const int64_t t = m->dec_pos_host[b];
    if (t < 0 || t >= Tc)
      fm_abort_one(1, "generation: sequence %lld decodes position %lld outside the context [0, %lld)", (long long)b,
                   (long long)t, (long long)Tc);
    be->copy(kc + (b * Tc + t) * ldkv, k + b * ld_new, row);
    be->copy(vc + (b * Tc + t) * ldkv, v + b * ld_new, row);
  }
  be->attention_decode(out, q, kc, vc, ldq, ldkv, m->pos, m->B, Tc, d->NH, d->NKV, d->HS);
}

int fm_model_act_stats(FmModel *m, double *var_per_layer) {
  const float *res = act_named(m, "res"); /* (L+1, B, T, C) */
  const int64_t n = m->B * m->d.T * m->d.C;
  for (int64_t l = 0; l < m->d.L; l++) {
    const float *x = res + (l + 1) * n; /* block l's output */
    if (!m->be->host_accessible) {
      m->be->copy_to_host(m->host_stage, x, n * (int64_t)sizeof(float));
      x = m->host_stage;
    }
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
      s += x[i];
      s2 += (double)x[i] * x[i];
    }
    const double mean = s / (double)n;
    var_per_layer[l] = s2 / (double)n - mean * mean;
  }
  return (int)m->d.L;
}

/* ---- accessors ------------------------------------------------------------------- */

const FmTensorTable *fm_model_params(const FmModel *m) { return &m->params; }
const FmTensorTable *fm_model_act_table(const FmModel *m) { return &m->acts; }
const FmModelDims *fm_model_get_dims(const FmModel *m) { return &m->d; }
const FmModelDims *fm_model_param_dims(const FmModel *m) { return &m->pd; }
const FmModelKind *fm_model_get_kind(const FmModel *m) { return m->kind; }
const FmBackend *fm_model_backend(const FmModel *m) { return m->be; }
float *fm_model_param_arena(FmModel *m) { return m->param; }
float *fm_model_grad_arena(FmModel *m) { return m->grad; }
int64_t fm_model_batch(const FmModel *m) { return m->B; }

float *fm_model_param(FmModel *m, const char *name) {
  const FmTensor *t = fm_table_find(&m->params, name);
  return t ? m->param + t->offset : NULL;
}

float *fm_model_grad(FmModel *m, const char *name) {
  const FmTensor *t = fm_table_find(&m->params, name);
  return t ? m->grad + t->offset : NULL;
}

/* ---- tensor parallelism -------------------------------------------------------- */

int fm_model_tp_dims(FmModelDims *l, int64_t *v0, const FmModelDims *d, int P, int r, FILE *err) {
  *l = *d;
  *v0 = 0;
  if (P <= 1) return 0;
  if (d->NKV % P != 0 || d->NH % P != 0 || d->F % P != 0 || d->V < P) {
    if (err)
      fprintf(err,
              "error: tp = %d must divide n_kv_head = %lld (each rank owns whole KV heads and their query heads), "
              "n_head = %lld and d_ff = %lld\n",
              P, (long long)d->NKV, (long long)d->NH, (long long)d->F);
    return FM_EINVAL;
  }
  l->NH = d->NH / P;
  l->NKV = d->NKV / P;
  l->F = d->F / P;
  *v0 = fm_tp_begin(d->V, r, P);
  l->V = fm_tp_begin(d->V, r + 1, P) - *v0;
  return 0;
}

int fm_model_tp_size(const FmModel *m) { return m->tp_size; }
const FmTensorTable *fm_model_canon_params(const FmModel *m) { return fm__tp_on(m) ? &m->cparams : &m->params; }

int fm_model_tp_replicated(const FmModel *m, int i) { return m->params.t[i].tp == FM_TP_NONE; }

void fm_model_tp_scatter(const FmModel *m, const float *canon, float *local) {
  if (!fm__tp_on(m)) {
    memcpy(local, canon, (size_t)m->params.numel * sizeof *local);
    return;
  }
  for (int i = 0; i < m->params.n; i++)
    fm_tp_copy(&m->cparams.t[i], &m->params.t[i], m->tp_rank, m->tp_size, local + m->params.t[i].offset,
               (float *)(uintptr_t)(canon + m->cparams.t[i].offset), 0);
}

void fm_model_tp_gather(FmModel *m, const float *local, float *canon) {
  if (!fm__tp_on(m)) {
    memcpy(canon, local, (size_t)m->params.numel * sizeof *canon);
    return;
  }
  const int P = m->tp_size;
  FmTensorTable *tabs = fm_xcalloc((size_t)P, sizeof *tabs); /* every rank's local table (they differ in V) */
  int64_t most = 0;
  for (int r = 0; r < P; r++) {
    FmModelDims l;
    int64_t v0;
    FM_CHECK(fm_model_tp_dims(&l, &v0, &m->cd, P, r, NULL));
    fm_model_param_table(&tabs[r], m->kind, &l);
    most = tabs[r].numel > most ? tabs[r].numel : most;
  }
  float *mine = fm_xcalloc((size_t)most, sizeof *mine), *all = fm_xmalloc((size_t)(most * P) * sizeof *all);
  memcpy(mine, local, (size_t)m->params.numel * sizeof *mine);
  FM_CHECK(fm_comm_allgather(m->tp, mine, all, most, FM_DT_F32));
  for (int r = 0; r < P; r++) {
    for (int i = 0; i < tabs[r].n; i++)
      fm_tp_copy(&m->cparams.t[i], &tabs[r].t[i], r, P, all + r * most + tabs[r].t[i].offset,
                 canon + m->cparams.t[i].offset, 1);
    fm_table_free(&tabs[r]);
  }
  free(tabs);
  free(mine);
  free(all);
}

void fm__tp_sum(const FmModel *m, float *x, int64_t n) {
  if (fm__tp_on(m)) FM_CHECK(fm_comm_sum_ordered(m->tp, x, n, m->tp_scratch));
}

void fm__tp_row_fwd(const FmModel *m, float *out, const float *in, const float *w, const float *bias, int64_t N,
                    int64_t K, int64_t C) {
  if (!fm__tp_on(m)) {
    m->be->matmul_fwd(out, in, w, bias, N, K, C);
    return;
  }
  m->be->matmul_fwd(out, in, w, NULL, N, K, C); /* this rank's partial sum */
  fm__tp_sum(m, out, N * C);
  if (bias) /* once, after the sum: every rank holds the same replicated bias */
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++) out[n * C + c] += bias[c];
}

/* Host loops: tp > 1 runs on host-memory backends (fm_model_create_tp). */
void fm__tp_embedding_fwd(const FmModel *m, float *out, const float *wte, const float *wpe) {
  const int64_t N = m->B * m->d.T, C = m->d.C, V = m->d.V;
  for (int64_t n = 0; n < N; n++) {
    const int64_t v = (int64_t)m->tokens[n] - m->v0;
    if (v >= 0 && v < V)
      memcpy(out + n * C, wte + v * C, (size_t)C * sizeof *out);
    else
      memset(out + n * C, 0, (size_t)C * sizeof *out);
  }
  fm__tp_sum(m, out, N * C); /* one rank holds each row: the others add zeros, so the sum is exact */
  if (wpe)
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++) out[n * C + c] += wpe[(int64_t)m->pos[n] * C + c];
}

void fm__tp_embedding_bwd(const FmModel *m, float *dwte, float *dwpe, const float *dout) {
  const int64_t N = m->B * m->d.T, C = m->d.C, V = m->d.V;
  for (int64_t n = 0; n < N; n++) { /* in token order: the same bits for any thread count */
    const int64_t v = (int64_t)m->tokens[n] - m->v0;
    if (v >= 0 && v < V)
      for (int64_t c = 0; c < C; c++) dwte[v * C + c] += dout[n * C + c];
    if (dwpe)
      for (int64_t c = 0; c < C; c++) dwpe[(int64_t)m->pos[n] * C + c] += dout[n * C + c];
  }
}
