/* model_internal.h: what model.c shares with the model files (gpt2.c,
 * llama.c) and nothing else sees: the FmModel struct, how activation tensors
 * map to layers, and the pointer helpers the forward/backward code uses.
 *
 * Activation tables: every activation tensor is 2-D (copies, elems) with
 * copies chosen by its kind:
 *   FM_ACT_RESID  L + 1 copies: the residual stream, [0] = embeddings and
 *                 [l + 1] = block l's output (kept with or without recompute);
 *   FM_ACT_LAYER  what block l keeps for its backward: L copies, or 1 copy
 *                 shared by every block with recompute (the backward then
 *                 recomputes block l into it first);
 *   FM_ACT_ONCE   outside the blocks (final norm), one copy;
 * *   FM_ACT_GRAD   backward scratch (activation gradients), one copy; their
 *                 names start with "d" and no other name does.
 * Each model names its final hidden state "final" and its gradient "dfinal":
 * model.c runs the output projection + cross-entropy between them. */
#ifndef FMHPC_MODEL_INTERNAL_H
#define FMHPC_MODEL_INTERNAL_H

#include "fmhpc/model.h"

typedef enum { FM_ACT_RESID, FM_ACT_LAYER, FM_ACT_ONCE, FM_ACT_GRAD } FmActKind;

struct FmModel {
  const FmModelKind *kind;
  FmModelDims d;
  FmModelDims pd; /* the parameter table's dims: d, or a longer T (fm_model_create_ctx) */
  const FmBackend *be;
  int64_t B; /* micro-batch: sequences */
  bool recompute;
  bool bf16; /* emulate bf16 compute: see fm__round_act */
  FmTensorTable params, acts;
  float *param, *grad; /* backend: params.numel each */
  float *act;          /* backend: acts.numel */
  float *xent_scratch; /* backend */
  int64_t xent_scratch_elems;
  float *w_out, *dw_out; /* output projection: lm_head, or wte when tied */
  float *final, *dfinal; /* (B, T, C) final hidden state and its gradient */
  /* The micro-batch on the backend, (B, T) each. seg_on says whether the
   * current batch has segment ids (seg is passed as NULL otherwise). */
  int32_t *tokens, *targets, *pos, *seg;
  float *weight;
  bool seg_on;
  float *host_stage;           /* host, B*T*C floats: act stats when the backend is not host memory */
  float *rows_x, *rows_logits; /* backend: logits of up to B rows at a time */
  /* Generation's decode model (fm_model_gen_create): T = 1, one new position
   * per sequence, attending the key/value cache that is `parent`'s activation
   * arena (its per-layer k and v, kept by a forward without recompute). The
   * block code is the training code; only the attention call differs
   * (fm__model_decode_attend). NULL for every other model. */
  const FmModel *parent;
  int32_t *dec_pos_host; /* host (B): the position each sequence decodes */
  /* Tensor parallelism (fm_model_create_tp): d and pd are this rank's local
   * dims, cd the canonical ones; tp NULL and tp_size 1 without it. */
  FmComm *tp;
  int tp_size, tp_rank;
  int64_t v0;            /* this rank's vocab rows are [v0, v0 + d.V) */
  FmModelDims cd;        /* canonical dims */
  FmTensorTable cparams; /* canonical parameter table (tp > 1; else a copy of params' layout) */
  float *tp_scratch;     /* host: fm_comm_sum_ordered's scratch for N*C floats (tp > 1) */
  float *vx_scratch;     /* host: the vocab-parallel cross-entropy's scratch (tp > 1) */
  FmGradReady grad_ready; /* fm_model_set_grad_ready's hook, or NULL */
  void *grad_ready_ctx;
};

/* ---- tensor parallelism inside the models (model_run.c); each is the plain
 * op, or nothing, at tp = 1, so tp = 1 keeps its bits ---- */
static inline bool fm__tp_on(const FmModel *m) { return m->tp_size > 1; }
/* x (n floats) = the sum of every tp rank's x, in rank order. */
void fm__tp_sum(const FmModel *m, float *x, int64_t n);
/* A row-parallel linear: out (N, C) = sum over tp of in (N, K local) w^T
 * (w (C, K local)), then + bias once (bias NULL: none). At tp = 1 the
 * backend's matmul_fwd with its bias. */
void fm__tp_row_fwd(const FmModel *m, float *out, const float *in, const float *w, const float *bias, int64_t N,
                    int64_t K, int64_t C);
/* The vocab-parallel embedding (tp > 1): out (N, C) = wte[token] from the
 * rank holding its row (summed over tp: one non-zero term), + wpe[pos] when
 * wpe is not NULL; backward: this rank's rows of dwte, and dwpe (replicated)
 * when not NULL. */
void fm__tp_embedding_fwd(const FmModel *m, float *out, const float *wte, const float *wpe);
void fm__tp_embedding_bwd(const FmModel *m, float *dwte, float *dwpe, const float *dout);

/* Block l's backward is done: its slices of the stacked tensors to the
 * grad_ready hook (model kinds call it after each block's backward). */
void fm__grads_ready_block(FmModel *m, int64_t l);

/* One activation tensor of the table; kind picks its copies (see above). */
void fm__model_add_act(FmTensorTable *tab, const char *name, FmActKind kind, const FmModelDims *d, bool recompute,
                       int64_t elems);

/* Activation `id` (its index in the model's activation list) for block l. */
static inline float *fm__act(const FmModel *m, int id, int64_t l) {
  const FmTensor *t = &m->acts.t[id];
  return m->act + t->offset + (t->shape[0] > 1 ? l * t->shape[1] : 0);
}

/* Parameter `id` of block l (l < 0 for a tensor outside the blocks) in an
 * arena laid out by the parameter table: params or grads. */
static inline float *fm__par(const FmModel *m, float *arena, int id, int64_t l) {
  const FmTensor *t = &m->params.t[id];
  return arena + t->offset + (l >= 0 ? l * (t->numel / t->shape[0]) : 0);
}

/* Decode attention of block l in a decode model: write the new rows' k and v
 * (B rows, stride ld_new) into the parent's cache (kc, vc: rows of the
 * parent's (B, T) layout, stride ldkv) at each sequence's position, then
 * attend positions 0..pos[b]. out (B, NH*HS). */
void fm__model_decode_attend(const FmModel *m, float *out, const float *q, const float *k, const float *v,
                             int64_t ldq, int64_t ld_new, float *kc, float *vc, int64_t ldkv);

/* bf16 compute (fm_model_set_compute_bf16) as torch.autocast does it: the
 * outputs of matmuls, attention, RoPE, GELU and SwiGLU are bf16 tensors, while
 * the residual stream, norms' outputs and statistics, the softmax's lse and
 * every gradient stay fp32. The backend rounds GEMM operands itself. */
static inline void fm__round_act(const FmModel *m, float *x, int64_t n) {
  if (m->bf16) m->be->round_bf16(x, n);
}

/* A block's activations as named fields, generated from a model's X-macro
 * activation list (X(id, kind, elems)): one `float *id` per FM_ACT_LAYER
 * entry, set to layer l's copy by FM__ACT_SET inside a function with `a`,
 * `m` and `l` in scope. The struct adds `in` and `out` (residual l, l+1). */
#define FM__ACT_FIELD_FM_ACT_LAYER(id) float *id;
#define FM__ACT_FIELD_FM_ACT_RESID(id)
#define FM__ACT_FIELD_FM_ACT_ONCE(id)
#define FM__ACT_FIELD_FM_ACT_GRAD(id)
#define FM__ACT_FIELD(id, kind, elems) FM__ACT_FIELD_##kind(id)
#define FM__ACT_SET_FM_ACT_LAYER(id)   a.id = fm__act(m, A_##id, l);
#define FM__ACT_SET_FM_ACT_RESID(id)
#define FM__ACT_SET_FM_ACT_ONCE(id)
#define FM__ACT_SET_FM_ACT_GRAD(id)
#define FM__ACT_SET(id, kind, elems) FM__ACT_SET_##kind(id)

/* A block's weights (or weight gradients) as named fields, from a model's
 * X-macro parameter list (X(id, name, present, flags, tp, per_layer, d0,
 * d1)): one `float *ID` per per-layer entry, set to layer l's slice of
 * `arena` by FM__PAR_SET inside a function with `w`, `m`, `arena` and `l` in
 * scope. */
#define FM__PAR_FIELD_1(id) float *id;
#define FM__PAR_FIELD_0(id)
#define FM__PAR_FIELD(id, name, present, flags, tp, per_layer, d0, d1) FM__PAR_FIELD_##per_layer(id)
#define FM__PAR_SET_1(id)                                              w.id = fm__par(m, arena, id, l);
#define FM__PAR_SET_0(id)
#define FM__PAR_SET(id, name, present, flags, tp, per_layer, d0, d1) FM__PAR_SET_##per_layer(id)

#endif
