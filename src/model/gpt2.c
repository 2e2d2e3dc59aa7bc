/* gpt2.c: GPT-2 (learned positions, LayerNorm with bias, GELU MLP, fused QKV
 * with biases, tied or untied output projection). This file owns the GPT-2
 * parameter and activation tables, activation count, FLOPs, and the forward
 * and backward pass (as HF GPT2LMHeadModel, with a document mask). Linear
 * weights are stored (out, in), row-major (HF's Conv1D stores (in, out): the
 * HF name map transposes). The output projection + cross-entropy is shared
 * with llama.c (model_run.c). */
#include <math.h>

#include "model_internal.h"

/* The parameter table, in canonical (checkpoint) order.
 *   X(id, name, present, flags, tp, per_layer, d0, d1)   d1 = 0 for a vector;
 *   per-layer tensors are stacked with a leading L dimension. */
#define GPT2_PARAMS(X)                                                                     \
  X(WTE, "wte", 1, FM_TF_EMBED, FM_TP_VOCAB, 0, V, C)                  /* (V, C) */        \
  X(WPE, "wpe", 1, FM_TF_EMBED, FM_TP_NONE, 0, T, C)                   /* (T, C) */        \
  X(LN1_W, "h.ln1.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0) /* (L, C) */        \
  X(LN1_B, "h.ln1.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                    \
  X(WQKV, "h.attn.wqkv", 1, FM_TF_MATRIX, FM_TP_COL3, 1, 3 * Q, C) /* (L, 3C, C); Q = C */ \
  X(BQKV, "h.attn.bqkv", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_COL3, 1, 3 * Q, 0)             \
  X(WO, "h.attn.wo", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, Q) /* (L, C, C) */ \
  X(BO, "h.attn.bo", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                     \
  X(LN2_W, "h.ln2.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0)                     \
  X(LN2_B, "h.ln2.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                    \
  X(W1, "h.mlp.w1", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C) /* (L, F, C) */                   \
  X(B1, "h.mlp.b1", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_COL, 1, F, 0)                       \
  X(W2, "h.mlp.w2", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, F) /* (L, C, F) */  \
  X(B2, "h.mlp.b2", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                      \
  X(LNF_W, "lnf.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 0, C, 0)                       \
  X(LNF_B, "lnf.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 0, C, 0)                      \
  X(LM_HEAD, "lm_head", !tied, FM_TF_MATRIX, FM_TP_VOCAB, 0, V, C) /* (V, C), untied only */

static void gpt2_params(FmTensorTable *tab, const FmModelDims *d) {
  const int64_t C = d->C, T = d->T, V = d->V, F = d->F, Q = d->NH * d->HS; /* Q < C on a tp rank */
  const bool tied = d->tied;
#define X(id, name, present, flags, tp, per_layer, d0, d1) \
  if (present) fm__model_add_param(tab, name, flags, tp, per_layer, d->L, d0, d1);
  GPT2_PARAMS(X)
#undef X
}

/* Parameter ids: index in the table (lm_head, absent when tied, is last). */
enum {
#define X(id, ...) id,
  GPT2_PARAMS(X)
#undef X
};

static int gpt2_dims(FmModelDims *d, const FmDeck *deck, FILE *err) {
  int rc = fm__model_common_dims(d, deck, err);
  const FmConfig *c = &deck->c;
  d->F = c->model.d_ff ? c->model.d_ff : 4 * d->C;
  if (d->NKV != d->NH) {
    fm_deck_error(deck, err, FM_KEY_model_n_kv_head, "GPT-2 has no grouped-query attention: use 0 or n_head");
    rc = FM_EDECK;
  }
  if (d->NH * d->HS != d->C) {
    fm_deck_error(deck, err, FM_KEY_model_head_dim, "GPT-2 needs n_head * head_dim = d_model = %lld", (long long)d->C);
    rc = FM_EDECK;
  }
  return rc;
}

/* PaLM appendix B: 6 FLOPs per parameter per token in matmuls (forward 2,
 * backward 4) plus attention scores and values, 12 * L * C_attn * T per token
 * (non-causal count, the convention MFU numbers use). Embedding lookups and
 * position embeddings do no matmul; the output projection does. */
static double gpt2_train_flops(const FmModelDims *d) {
  const double C = (double)d->C, F = (double)d->F, L = (double)d->L;
  const double matmul_params = L * (3 * C * C + C * C + 2 * C * F) + (double)d->V * C;
  return 6.0 * matmul_params + 12.0 * L * (double)(d->NH * d->HS) * (double)d->T;
}

/* ---- activations ------------------------------------------------------------ */

/* The activation table of a micro-batch (kinds in model_internal.h):
 *   X(id, kind, elems) */
/* clang-format off */
#define GPT2_ACTS(X)                                                                            \
  X(res, FM_ACT_RESID, BT * C)           /* (L+1, B, T, C) residual stream */                 \
  X(ln1, FM_ACT_LAYER, BT * C)           /* (B, T, C) */                                      \
  X(ln1_mean, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(ln1_rstd, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(qkv, FM_ACT_LAYER, BT * 3 * Q)       /* (B, T, 3Q): q, k, v of NH heads of HS (Q = C) */  \
  X(atty, FM_ACT_LAYER, BT * Q)          /* (B, T, NH*HS) attention output */                 \
  X(lse, FM_ACT_LAYER, B * NH * T)       /* (B, NH, T) softmax log-sum-exp */                 \
  X(res_att, FM_ACT_LAYER, BT * C)       /* (B, T, C) residual after attention */             \
  X(ln2, FM_ACT_LAYER, BT * C)           /* (B, T, C) */                                      \
  X(ln2_mean, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(ln2_rstd, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(fch, FM_ACT_LAYER, BT * F)           /* (B, T, F) MLP pre-activation */                   \
  X(fch_gelu, FM_ACT_LAYER, BT * F)      /* (B, T, F) */                                      \
  X(final, FM_ACT_ONCE, BT * C)          /* (B, T, C) final LayerNorm out */                  \
  X(lnf_mean, FM_ACT_ONCE, BT)           /* (B, T) */                                         \
  X(lnf_rstd, FM_ACT_ONCE, BT)           /* (B, T) */                                         \
  X(dfinal, FM_ACT_GRAD, BT * C)         /* (B, T, C) */                                      \
  X(dres, FM_ACT_GRAD, BT * C)           /* (B, T, C) gradient of the residual stream */      \
  X(dln, FM_ACT_GRAD, BT * C)            /* (B, T, C) gradient of a norm's output */          \
  X(datty, FM_ACT_GRAD, BT * Q)          /* (B, T, NH*HS) */                                  \
  X(dqkv, FM_ACT_GRAD, BT * 3 * Q)       /* (B, T, 3Q) */                                     \
  X(dfch, FM_ACT_GRAD, BT * F)           /* (B, T, F) */
/* clang-format on */

static void gpt2_acts(FmTensorTable *tab, const FmModelDims *d, int64_t B, bool recompute) {
  const int64_t T = d->T, BT = B * d->T, C = d->C, F = d->F, NH = d->NH;
  const int64_t Q = d->NH * d->HS; /* = C; written per head so that a tensor-parallel rank's heads size it */
#define X(id, kind, elems) fm__model_add_act(tab, #id, kind, d, recompute, elems);
  GPT2_ACTS(X)
#undef X
}

enum {
#define X(id, kind, elems) A_##id,
  GPT2_ACTS(X)
#undef X
};

/* One block's weights (or weight gradients) and activations. */
typedef struct Gpt2Block {
  GPT2_PARAMS(FM__PAR_FIELD) /* the per-layer entries, named by their ids */
} Gpt2Block;

static Gpt2Block gpt2_block(const FmModel *m, float *arena, int64_t l) {
  Gpt2Block w;
  GPT2_PARAMS(FM__PAR_SET)
  return w;
}

typedef struct Gpt2Acts {
  float *in, *out; /* the residual stream before and after the block */
  GPT2_ACTS(FM__ACT_FIELD)
} Gpt2Acts;

static Gpt2Acts gpt2_block_acts(const FmModel *m, int64_t l) {
  Gpt2Acts a = {.in = fm__act(m, A_res, l), .out = fm__act(m, A_res, l + 1)};
  GPT2_ACTS(FM__ACT_SET)
  return a;
}

/* ---- forward ------------------------------------------------------------------ */

/* Block l: x + attn(ln1(x)), then + mlp(ln2(.)), as HF GPT2Block. */
static void gpt2_block_fwd(FmModel *m, int64_t l) {
  const FmBackend *be = m->be;
  const FmModelDims *d = &m->d;
  const int64_t B = m->B, T = d->T, N = B * T, C = d->C, F = d->F, NH = d->NH, HS = d->HS, Q = NH * HS;
  const float eps = (float)d->norm_eps;
  const int32_t *seg = m->seg_on ? m->seg : NULL;
  const Gpt2Block w = gpt2_block(m, m->param, l);
  const Gpt2Acts a = gpt2_block_acts(m, l);
  be->layernorm_fwd(a.ln1, a.ln1_mean, a.ln1_rstd, a.in, w.LN1_W, w.LN1_B, N, C, eps);
  be->matmul_fwd(a.qkv, a.ln1, w.WQKV, w.BQKV, N, C, 3 * Q);
  fm__round_act(m, a.qkv, N * 3 * Q);
  if (m->parent) { /* generation: one new row per sequence against the cache */
    float *cache = fm__act(m->parent, A_qkv, l);
    fm__model_decode_attend(m, a.atty, a.qkv, a.qkv + Q, a.qkv + 2 * Q, 3 * Q, 3 * Q, cache + Q, cache + 2 * Q, 3 * Q);
  } else {
    be->attention_fwd(a.atty, a.lse, a.qkv, a.qkv + Q, a.qkv + 2 * Q, 3 * Q, 3 * Q, seg, B, T, NH, NH, HS);
  }
  fm__round_act(m, a.atty, N * Q);
  fm__tp_row_fwd(m, a.res_att, a.atty, w.WO, w.BO, N, Q, C); /* row-parallel: summed over tp, bias once */
  fm__round_act(m, a.res_att, N * C);
  be->add(a.res_att, a.in, a.res_att, N * C);
  be->layernorm_fwd(a.ln2, a.ln2_mean, a.ln2_rstd, a.res_att, w.LN2_W, w.LN2_B, N, C, eps);
  be->matmul_fwd(a.fch, a.ln2, w.W1, w.B1, N, C, F);
  fm__round_act(m, a.fch, N * F);
  be->gelu_fwd(a.fch_gelu, a.fch, N * F);
  fm__round_act(m, a.fch_gelu, N * F);
  fm__tp_row_fwd(m, a.out, a.fch_gelu, w.W2, w.B2, N, F, C);
  fm__round_act(m, a.out, N * C);
  be->add(a.out, a.res_att, a.out, N * C);
}

static void gpt2_forward(FmModel *m) {
  const FmBackend *be = m->be;
  const int64_t N = m->B * m->d.T, C = m->d.C, L = m->d.L;
  if (fm__tp_on(m))
    fm__tp_embedding_fwd(m, fm__act(m, A_res, 0), fm__par(m, m->param, WTE, -1), fm__par(m, m->param, WPE, -1));
  else
    be->embedding_fwd(fm__act(m, A_res, 0), m->tokens, fm__par(m, m->param, WTE, -1), m->pos,
                      fm__par(m, m->param, WPE, -1), N, C);
  for (int64_t l = 0; l < L; l++) gpt2_block_fwd(m, l);
  be->layernorm_fwd(m->final, fm__act(m, A_lnf_mean, 0), fm__act(m, A_lnf_rstd, 0), fm__act(m, A_res, L),
                    fm__par(m, m->param, LNF_W, -1), fm__par(m, m->param, LNF_B, -1), N, C, (float)m->d.norm_eps);
}

/* ---- backward ----------------------------------------------------------------- */

/* Block l in reverse. On entry dres = d(block output); on exit d(block input).
 * Weight gradients accumulate; dinp outputs into scratch are zeroed first
 * because every backward op accumulates. */
static void gpt2_block_bwd(FmModel *m, int64_t l) {
  const FmBackend *be = m->be;
  const FmModelDims *d = &m->d;
  const int64_t B = m->B, T = d->T, N = B * T, C = d->C, F = d->F, NH = d->NH, HS = d->HS, Q = NH * HS;
  const int64_t f4 = (int64_t)sizeof(float);
  const int32_t *seg = m->seg_on ? m->seg : NULL;
  const Gpt2Block w = gpt2_block(m, m->param, l), g = gpt2_block(m, m->grad, l);
  const Gpt2Acts a = gpt2_block_acts(m, l);
  float *dres = fm__act(m, A_dres, 0), *dln = fm__act(m, A_dln, 0), *datty = fm__act(m, A_datty, 0);
  float *dqkv = fm__act(m, A_dqkv, 0), *dfch = fm__act(m, A_dfch, 0);
  /* MLP: out = res_att + w2 gelu(w1 ln2(res_att)) */
  be->memset(dfch, 0, N * F * f4);
  be->matmul_bwd(dfch, g.W2, g.B2, dres, a.fch_gelu, w.W2, N, F, C);
  be->gelu_bwd(dfch, dfch, a.fch, N * F);
  be->memset(dln, 0, N * C * f4);
  be->matmul_bwd(dln, g.W1, g.B1, dfch, a.ln2, w.W1, N, C, F);
  fm__tp_sum(m, dln, N * C); /* column-parallel: every rank's part of d(ln2) */
  be->layernorm_bwd(dres, g.LN2_W, g.LN2_B, dln, a.res_att, w.LN2_W, a.ln2_mean, a.ln2_rstd, N, C);
  /* attention: res_att = in + wo attn(qkv(ln1(in))) */
  be->memset(datty, 0, N * Q * f4);
  be->matmul_bwd(datty, g.WO, g.BO, dres, a.atty, w.WO, N, Q, C); /* dbias: the same on every tp rank */
  be->memset(dqkv, 0, N * 3 * Q * f4);
  be->attention_bwd(dqkv, dqkv + Q, dqkv + 2 * Q, datty, a.atty, a.lse, a.qkv, a.qkv + Q, a.qkv + 2 * Q, 3 * Q, 3 * Q,
                    seg, B, T, NH, NH, HS);
  be->memset(dln, 0, N * C * f4);
  be->matmul_bwd(dln, g.WQKV, g.BQKV, dqkv, a.ln1, w.WQKV, N, C, 3 * Q);
  fm__tp_sum(m, dln, N * C);
  be->layernorm_bwd(dres, g.LN1_W, g.LN1_B, dln, a.in, w.LN1_W, a.ln1_mean, a.ln1_rstd, N, C);
}

static void gpt2_backward(FmModel *m) {
  const FmBackend *be = m->be;
  const int64_t N = m->B * m->d.T, C = m->d.C, L = m->d.L;
  float *dres = fm__act(m, A_dres, 0);
  be->memset(dres, 0, N * C * (int64_t)sizeof(float));
  be->layernorm_bwd(dres, fm__par(m, m->grad, LNF_W, -1), fm__par(m, m->grad, LNF_B, -1), m->dfinal,
                    fm__act(m, A_res, L), fm__par(m, m->param, LNF_W, -1), fm__act(m, A_lnf_mean, 0),
                    fm__act(m, A_lnf_rstd, 0), N, C);
  for (int64_t l = L - 1; l >= 0; l--) {
    if (m->recompute) gpt2_block_fwd(m, l); /* refill the one shared block buffer from the kept input */
    gpt2_block_bwd(m, l);
    fm__grads_ready_block(m, l);
  }
  if (fm__tp_on(m))
    fm__tp_embedding_bwd(m, fm__par(m, m->grad, WTE, -1), fm__par(m, m->grad, WPE, -1), dres);
  else
    be->embedding_bwd(fm__par(m, m->grad, WTE, -1), fm__par(m, m->grad, WPE, -1), dres, m->tokens, m->pos, N, C,
                      m->d.V);
}

const FmModelKind fm_model_gpt2 = {
    .name = "gpt2",
    .desc = "GPT-2: learned positions, LayerNorm, GELU, fused QKV",
    .dims = gpt2_dims,
    .params = gpt2_params,
    .train_flops_per_token = gpt2_train_flops,
    .acts = gpt2_acts,
    .forward = gpt2_forward,
    .backward = gpt2_backward,
};
