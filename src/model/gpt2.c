/* gpt2.c: GPT-2 (learned positions, LayerNorm with bias, GELU MLP, fused QKV
 * with biases, tied or untied output projection). This file owns the GPT-2
 * parameter table, activation count and FLOPs; the forward/backward pass will
 * live here too. Linear weights are stored (out, in), row-major. */
#include <math.h>

#include "fmhpc/model.h"

/* The parameter table, in canonical (checkpoint) order.
 *   X(name, present, flags, tp, per_layer, d0, d1)   d1 = 0 for a vector;
 *   per-layer tensors are stacked with a leading L dimension. */
#define GPT2_PARAMS(X)                                                                          \
  X("wte", 1, FM_TF_EMBED, FM_TP_VOCAB, 0, V, C)                /* (V, C) */                   \
  X("wpe", 1, FM_TF_EMBED, FM_TP_NONE, 0, T, C)                 /* (T, C) */                   \
  X("h.ln1.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0) /* (L, C) */                   \
  X("h.ln1.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                               \
  X("h.attn.wqkv", 1, FM_TF_MATRIX, FM_TP_COL, 1, 3 * C, C)     /* (L, 3C, C) */               \
  X("h.attn.bqkv", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_COL, 1, 3 * C, 0)                        \
  X("h.attn.wo", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, C) /* (L, C, C) */         \
  X("h.attn.bo", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                             \
  X("h.ln2.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0)                                \
  X("h.ln2.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                               \
  X("h.mlp.w1", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C)            /* (L, F, C) */                \
  X("h.mlp.b1", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_COL, 1, F, 0)                               \
  X("h.mlp.w2", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, F) /* (L, C, F) */          \
  X("h.mlp.b2", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 1, C, 0)                              \
  X("lnf.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 0, C, 0)                                  \
  X("lnf.b", 1, FM_TF_BIAS | FM_TF_ZEROS, FM_TP_NONE, 0, C, 0)                                 \
  X("lm_head", !tied, FM_TF_MATRIX, FM_TP_VOCAB, 0, V, C) /* (V, C), untied only */

static void gpt2_params(FmTensorTable *tab, const FmModelDims *d) {
  const int64_t C = d->C, T = d->T, V = d->V, F = d->F;
  const bool tied = d->tied;
#define X(name, present, flags, tp, per_layer, d0, d1) \
  if (present) fm__model_add_param(tab, name, flags, tp, per_layer, d->L, d0, d1);
  GPT2_PARAMS(X)
#undef X
}

static int gpt2_dims(FmModelDims *d, const FmDeck *deck, FILE *err) {
  int rc = fm__model_common_dims(d, deck, err);
  const FmConfig *c = &deck->c;
  d->F = c->model.d_ff ? c->model.d_ff : 4 * d->C;
  if (d->NKV != d->NH) {
    fm_deck_error(deck, err, FM_KEY_model_n_kv_head, "GPT-2 has no grouped-query attention: use 0 or n_head");
    rc = FM_EDECK;
  }
  if (d->NH * d->HS != d->C) {
    fm_deck_error(deck, err, FM_KEY_model_head_dim, "GPT-2 needs n_head * head_dim = d_model = %lld",
                  (long long)d->C);
    rc = FM_EDECK;
  }
  return rc;
}

/* Kept per layer for backward (llm.c's accounting, attention computed
 * blockwise so only the log-sum-exp per (head, position) is kept, never T x T):
 * ln1 out + mean/rstd, qkv, attention out + lse, residual after attention,
 * ln2 out + mean/rstd, fc pre-activation and GELU out, residual after MLP. */
static int64_t gpt2_act_elems(const FmModelDims *d, int64_t b, bool recompute) {
  const int64_t BT = b * d->T, C = d->C, F = d->F;
  const int64_t per_layer = BT * (C + 2) + BT * 3 * C + BT * C + b * d->NH * d->T + BT * C + BT * (C + 2) +
                            2 * BT * F + BT * C;
  /* Outside the layers: embedding sum, final norm out + stats, per-token loss
   * and the logits of one vocab chunk (cross-entropy is computed in chunks). */
  const int64_t chunk = d->V < 8192 ? d->V : 8192;
  const int64_t outside = BT * C + BT * (C + 2) + BT + BT * chunk;
  if (recompute) return d->L * BT * C + per_layer + outside; /* layer inputs + one layer live */
  return d->L * per_layer + outside;
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

const FmModelKind fm_model_gpt2 = {
    .name = "gpt2",
    .desc = "GPT-2: learned positions, LayerNorm, GELU, fused QKV",
    .dims = gpt2_dims,
    .params = gpt2_params,
    .act_elems = gpt2_act_elems,
    .train_flops_per_token = gpt2_train_flops,
};
