/* llama.c: Llama 2/3 (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no
 * biases, tied or untied output projection). This file owns the Llama
 * parameter table, activation count and FLOPs; the forward/backward pass will
 * live here too. Linear weights are stored (out, in), row-major, with the
 * Hugging Face q_proj/k_proj/... row order. */
#include "fmhpc/model.h"

/*   X(name, present, flags, tp, per_layer, d0, d1) as in gpt2.c. */
#define LLAMA_PARAMS(X)                                                                          \
  X("wte", 1, FM_TF_EMBED, FM_TP_VOCAB, 0, V, C)                   /* (V, C) */                 \
  X("h.attn_norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0) /* (L, C) */              \
  X("h.attn.wq", 1, FM_TF_MATRIX, FM_TP_COL, 1, NH * HS, C)        /* (L, NH*HS, C) */          \
  X("h.attn.wk", 1, FM_TF_MATRIX, FM_TP_COL, 1, NKV * HS, C)       /* (L, NKV*HS, C) */         \
  X("h.attn.wv", 1, FM_TF_MATRIX, FM_TP_COL, 1, NKV * HS, C)       /* (L, NKV*HS, C) */         \
  X("h.attn.wo", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, NH * HS) /* (L, C, NH*HS) */ \
  X("h.mlp_norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0)                            \
  X("h.mlp.w_gate", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C)           /* (L, F, C) */              \
  X("h.mlp.w_up", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C)             /* (L, F, C) */              \
  X("h.mlp.w_down", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, F) /* (L, C, F) */       \
  X("norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 0, C, 0)                                  \
  X("lm_head", !tied, FM_TF_MATRIX, FM_TP_VOCAB, 0, V, C)          /* (V, C), untied only */

static void llama_params(FmTensorTable *tab, const FmModelDims *d) {
  const int64_t C = d->C, V = d->V, F = d->F, NH = d->NH, NKV = d->NKV, HS = d->HS;
  const bool tied = d->tied;
#define X(name, present, flags, tp, per_layer, d0, d1) \
  if (present) fm__model_add_param(tab, name, flags, tp, per_layer, d->L, d0, d1);
  LLAMA_PARAMS(X)
#undef X
}

/* Llama's FFN width when the deck gives none: 2/3 of 4C rounded up to a
 * multiple of 256 (the reference implementation's multiple_of). */
static int64_t llama_default_ffn(int64_t C) {
  int64_t f = 2 * (4 * C) / 3;
  return 256 * ((f + 255) / 256);
}

static int llama_dims(FmModelDims *d, const FmDeck *deck, FILE *err) {
  int rc = fm__model_common_dims(d, deck, err);
  d->F = deck->c.model.d_ff ? deck->c.model.d_ff : llama_default_ffn(d->C);
  if (d->HS % 2 != 0) {
    fm_deck_error(deck, err, FM_KEY_model_head_dim, "RoPE rotates pairs: head size %lld must be even",
                  (long long)d->HS);
    rc = FM_EDECK;
  }
  return rc;
}

/* Kept per layer for backward (attention blockwise: lse per head and
 * position, never T x T): attn norm out + rstd, q, k, v (after RoPE),
 * attention out + lse, residual, mlp norm out + rstd, gate, up, SwiGLU out,
 * residual. */
static int64_t llama_act_elems(const FmModelDims *d, int64_t b, bool recompute) {
  const int64_t BT = b * d->T, C = d->C, F = d->F;
  const int64_t q = d->NH * d->HS, kv = d->NKV * d->HS;
  const int64_t per_layer = BT * (C + 1) + BT * (q + 2 * kv) + BT * q + b * d->NH * d->T + BT * C +
                            BT * (C + 1) + 3 * BT * F + BT * C;
  const int64_t chunk = d->V < 8192 ? d->V : 8192;
  const int64_t outside = BT * C + BT * (C + 1) + BT + BT * chunk;
  if (recompute) return d->L * BT * C + per_layer + outside;
  return d->L * per_layer + outside;
}

/* As gpt2.c: 6 FLOPs per matmul parameter per token plus 12 * L * NH*HS * T
 * for attention (PaLM appendix B). */
static double llama_train_flops(const FmModelDims *d) {
  const double C = (double)d->C, F = (double)d->F, L = (double)d->L;
  const double q = (double)(d->NH * d->HS), kv = (double)(d->NKV * d->HS);
  const double matmul_params = L * (C * q + 2 * C * kv + q * C + 3 * C * F) + (double)d->V * C;
  return 6.0 * matmul_params + 12.0 * L * q * (double)d->T;
}

const FmModelKind fm_model_llama = {
    .name = "llama",
    .desc = "Llama 2/3: RMSNorm, RoPE, GQA, SwiGLU",
    .dims = llama_dims,
    .params = llama_params,
    .act_elems = llama_act_elems,
    .train_flops_per_token = llama_train_flops,
};
