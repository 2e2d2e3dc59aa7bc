/* llama.c: Llama 2/3 (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no
 * biases, tied or untied output projection). This file owns the Llama
 * parameter and activation tables, activation count, FLOPs, and the forward
 * and backward pass (as HF LlamaForCausalLM, with a document mask). Linear
 * weights are stored (out, in), row-major, with the Hugging Face
 * q_proj/k_proj/... row order (RoPE in HF's rotate_half layout). The output
 * projection + cross-entropy is shared with gpt2.c (model_run.c). */
#include "model_internal.h"

/*   X(id, name, present, flags, tp, per_layer, d0, d1) as in gpt2.c. */
#define LLAMA_PARAMS(X)                                                                               \
  X(WTE, "wte", 1, FM_TF_EMBED, FM_TP_VOCAB, 0, V, C)                            /* (V, C) */         \
  X(ATTN_NORM, "h.attn_norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0) /* (L, C) */         \
  X(WQ, "h.attn.wq", 1, FM_TF_MATRIX, FM_TP_COL, 1, NH *HS, C)                   /* (L, NH*HS, C) */  \
  X(WK, "h.attn.wk", 1, FM_TF_MATRIX, FM_TP_COL, 1, NKV *HS, C)                  /* (L, NKV*HS, C) */ \
  X(WV, "h.attn.wv", 1, FM_TF_MATRIX, FM_TP_COL, 1, NKV *HS, C)                  /* (L, NKV*HS, C) */ \
  X(WO, "h.attn.wo", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, NH * HS) /* (L, C, NH*HS) */  \
  X(MLP_NORM, "h.mlp_norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 1, C, 0)                        \
  X(W_GATE, "h.mlp.w_gate", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C)                  /* (L, F, C) */     \
  X(W_UP, "h.mlp.w_up", 1, FM_TF_MATRIX, FM_TP_COL, 1, F, C)                      /* (L, F, C) */     \
  X(W_DOWN, "h.mlp.w_down", 1, FM_TF_MATRIX | FM_TF_RESIDUAL, FM_TP_ROW, 1, C, F) /* (L, C, F) */     \
  X(NORM, "norm.w", 1, FM_TF_NORM | FM_TF_ONES, FM_TP_NONE, 0, C, 0)                                  \
  X(LM_HEAD, "lm_head", !tied, FM_TF_MATRIX, FM_TP_VOCAB, 0, V, C) /* (V, C), untied only */

static void llama_params(FmTensorTable *tab, const FmModelDims *d) {
  const int64_t C = d->C, V = d->V, F = d->F, NH = d->NH, NKV = d->NKV, HS = d->HS;
  const bool tied = d->tied;
#define X(id, name, present, flags, tp, per_layer, d0, d1) \
  if (present) fm__model_add_param(tab, name, flags, tp, per_layer, d->L, d0, d1);
  LLAMA_PARAMS(X)
#undef X
}

/* Parameter ids: index in the table (lm_head, absent when tied, is last). */
enum {
#define X(id, ...) id,
  LLAMA_PARAMS(X)
#undef X
};

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

/* As gpt2.c: 6 FLOPs per matmul parameter per token plus 12 * L * NH*HS * T
 * for attention (PaLM appendix B). */
static double llama_train_flops(const FmModelDims *d) {
  const double C = (double)d->C, F = (double)d->F, L = (double)d->L;
  const double q = (double)(d->NH * d->HS), kv = (double)(d->NKV * d->HS);
  const double matmul_params = L * (C * q + 2 * C * kv + q * C + 3 * C * F) + (double)d->V * C;
  return 6.0 * matmul_params + 12.0 * L * q * (double)d->T;
}

/* ---- activations ------------------------------------------------------------ */

/* The activation table of a micro-batch (kinds in model_internal.h):
 *   X(id, kind, elems)   with Q = NH*HS, KV = NKV*HS */
/* clang-format off */
#define LLAMA_ACTS(X)                                                                           \
  X(res, FM_ACT_RESID, BT * C)           /* (L+1, B, T, C) residual stream */                 \
  X(ln1, FM_ACT_LAYER, BT * C)           /* (B, T, C) attention RMSNorm out */                \
  X(ln1_rstd, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(q, FM_ACT_LAYER, BT * Q)             /* (B, T, NH*HS) after RoPE */                       \
  X(k, FM_ACT_LAYER, BT * KV)            /* (B, T, NKV*HS) after RoPE */                      \
  X(v, FM_ACT_LAYER, BT * KV)            /* (B, T, NKV*HS) */                                 \
  X(atty, FM_ACT_LAYER, BT * Q)          /* (B, T, NH*HS) attention output */                 \
  X(lse, FM_ACT_LAYER, B * NH * T)       /* (B, NH, T) softmax log-sum-exp */                 \
  X(res_att, FM_ACT_LAYER, BT * C)       /* (B, T, C) residual after attention */             \
  X(ln2, FM_ACT_LAYER, BT * C)           /* (B, T, C) MLP RMSNorm out */                      \
  X(ln2_rstd, FM_ACT_LAYER, BT)          /* (B, T) */                                         \
  X(gate, FM_ACT_LAYER, BT * F)          /* (B, T, F) */                                      \
  X(up, FM_ACT_LAYER, BT * F)            /* (B, T, F) */                                      \
  X(swi, FM_ACT_LAYER, BT * F)           /* (B, T, F) silu(gate) * up */                      \
  X(final, FM_ACT_ONCE, BT * C)          /* (B, T, C) final RMSNorm out */                    \
  X(norm_rstd, FM_ACT_ONCE, BT)          /* (B, T) */                                         \
  X(dfinal, FM_ACT_GRAD, BT * C)         /* (B, T, C) */                                      \
  X(dres, FM_ACT_GRAD, BT * C)           /* (B, T, C) gradient of the residual stream */      \
  X(dln, FM_ACT_GRAD, BT * C)            /* (B, T, C) gradient of a norm's output */          \
  X(datty, FM_ACT_GRAD, BT * Q)          /* (B, T, NH*HS) */                                  \
  X(dq, FM_ACT_GRAD, BT * Q)             /* (B, T, NH*HS) */                                  \
  X(dk, FM_ACT_GRAD, BT * KV)            /* (B, T, NKV*HS) */                                 \
  X(dv, FM_ACT_GRAD, BT * KV)            /* (B, T, NKV*HS) */                                 \
  X(dgate, FM_ACT_GRAD, BT * F)          /* (B, T, F) */                                      \
  X(dup, FM_ACT_GRAD, BT * F)            /* (B, T, F) */
/* clang-format on */

static void llama_acts(FmTensorTable *tab, const FmModelDims *d, int64_t B, bool recompute) {
  const int64_t T = d->T, BT = B * d->T, C = d->C, F = d->F, NH = d->NH;
  const int64_t Q = d->NH * d->HS, KV = d->NKV * d->HS;
#define X(id, kind, elems) fm__model_add_act(tab, #id, kind, d, recompute, elems);
  LLAMA_ACTS(X)
#undef X
}

enum {
#define X(id, kind, elems) A_##id,
  LLAMA_ACTS(X)
#undef X
};

/* One block's weights (or weight gradients) and activations. */
typedef struct LlamaBlock {
  LLAMA_PARAMS(FM__PAR_FIELD) /* the per-layer entries, named by their ids */
} LlamaBlock;

static LlamaBlock llama_block(const FmModel *m, float *arena, int64_t l) {
  LlamaBlock w;
  LLAMA_PARAMS(FM__PAR_SET)
  return w;
}

typedef struct LlamaActs {
  float *in, *out; /* the residual stream before and after the block */
  LLAMA_ACTS(FM__ACT_FIELD)
} LlamaActs;

static LlamaActs llama_block_acts(const FmModel *m, int64_t l) {
  LlamaActs a = {.in = fm__act(m, A_res, l), .out = fm__act(m, A_res, l + 1)};
  LLAMA_ACTS(FM__ACT_SET)
  return a;
}

/* ---- forward ------------------------------------------------------------------ */

/* Block l: x + attn(rmsnorm(x)), then + mlp(rmsnorm(.)), as HF LlamaDecoderLayer. */
static void llama_block_fwd(FmModel *m, int64_t l) {
  const FmBackend *be = m->be;
  const FmModelDims *d = &m->d;
  const int64_t B = m->B, T = d->T, N = B * T, C = d->C, F = d->F, NH = d->NH, NKV = d->NKV, HS = d->HS;
  const int64_t Q = NH * HS, KV = NKV * HS;
  const float eps = (float)d->norm_eps, theta = (float)d->rope_theta;
  const int32_t *seg = m->seg_on ? m->seg : NULL;
  const LlamaBlock w = llama_block(m, m->param, l);
  const LlamaActs a = llama_block_acts(m, l);
  be->rmsnorm_fwd(a.ln1, a.ln1_rstd, a.in, w.ATTN_NORM, N, C, eps);
  be->matmul_fwd(a.q, a.ln1, w.WQ, NULL, N, C, Q);
  be->matmul_fwd(a.k, a.ln1, w.WK, NULL, N, C, KV);
  be->matmul_fwd(a.v, a.ln1, w.WV, NULL, N, C, KV);
  fm__round_act(m, a.v, N * KV);
  be->rope_fwd(a.q, m->pos, N, Q, NH, HS, theta);
  be->rope_fwd(a.k, m->pos, N, KV, NKV, HS, theta);
  fm__round_act(m, a.q, N * Q); /* once after RoPE: autocast keeps q, k in bf16 there */
  fm__round_act(m, a.k, N * KV);
  if (m->parent) /* generation: one new row per sequence against the cache */
    fm__model_decode_attend(m, a.atty, a.q, a.k, a.v, Q, KV, fm__act(m->parent, A_k, l), fm__act(m->parent, A_v, l),
                            KV);
  else
    be->attention_fwd(a.atty, a.lse, a.q, a.k, a.v, Q, KV, seg, B, T, NH, NKV, HS);
  fm__round_act(m, a.atty, N * Q);
  fm__tp_row_fwd(m, a.res_att, a.atty, w.WO, NULL, N, Q, C); /* row-parallel: summed over tp */
  fm__round_act(m, a.res_att, N * C);
  be->add(a.res_att, a.in, a.res_att, N * C);
  be->rmsnorm_fwd(a.ln2, a.ln2_rstd, a.res_att, w.MLP_NORM, N, C, eps);
  be->matmul_fwd(a.gate, a.ln2, w.W_GATE, NULL, N, C, F);
  be->matmul_fwd(a.up, a.ln2, w.W_UP, NULL, N, C, F);
  fm__round_act(m, a.gate, N * F);
  fm__round_act(m, a.up, N * F);
  be->swiglu_fwd(a.swi, a.gate, a.up, N * F);
  fm__round_act(m, a.swi, N * F);
  fm__tp_row_fwd(m, a.out, a.swi, w.W_DOWN, NULL, N, F, C);
  fm__round_act(m, a.out, N * C);
  be->add(a.out, a.res_att, a.out, N * C);
}

static void llama_forward(FmModel *m) {
  const FmBackend *be = m->be;
  const int64_t N = m->B * m->d.T, C = m->d.C, L = m->d.L;
  if (fm__tp_on(m))
    fm__tp_embedding_fwd(m, fm__act(m, A_res, 0), fm__par(m, m->param, WTE, -1), NULL);
  else
    be->embedding_fwd(fm__act(m, A_res, 0), m->tokens, fm__par(m, m->param, WTE, -1), m->pos, NULL, N, C);
  for (int64_t l = 0; l < L; l++) llama_block_fwd(m, l);
  be->rmsnorm_fwd(m->final, fm__act(m, A_norm_rstd, 0), fm__act(m, A_res, L), fm__par(m, m->param, NORM, -1), N, C,
                  (float)m->d.norm_eps);
}

/* ---- backward ----------------------------------------------------------------- */

/* Block l in reverse. On entry dres = d(block output); on exit d(block input).
 * Weight gradients accumulate; scratch outputs are zeroed first because every
 * backward op accumulates into its dinp. */
static void llama_block_bwd(FmModel *m, int64_t l) {
  const FmBackend *be = m->be;
  const FmModelDims *d = &m->d;
  const int64_t B = m->B, T = d->T, N = B * T, C = d->C, F = d->F, NH = d->NH, NKV = d->NKV, HS = d->HS;
  const int64_t Q = NH * HS, KV = NKV * HS, f4 = (int64_t)sizeof(float);
  const float theta = (float)d->rope_theta;
  const int32_t *seg = m->seg_on ? m->seg : NULL;
  const LlamaBlock w = llama_block(m, m->param, l), g = llama_block(m, m->grad, l);
  const LlamaActs a = llama_block_acts(m, l);
  float *dres = fm__act(m, A_dres, 0), *dln = fm__act(m, A_dln, 0), *datty = fm__act(m, A_datty, 0);
  float *dq = fm__act(m, A_dq, 0), *dk = fm__act(m, A_dk, 0), *dv = fm__act(m, A_dv, 0);
  float *dgate = fm__act(m, A_dgate, 0), *dup = fm__act(m, A_dup, 0);
  /* MLP: out = res_att + w_down(silu(w_gate ln2) * w_up ln2) */
  be->memset(dgate, 0, N * F * f4);
  be->matmul_bwd(dgate, g.W_DOWN, NULL, dres, a.swi, w.W_DOWN, N, F, C); /* d(swi), in dgate */
  be->swiglu_bwd(dgate, dup, dgate, a.gate, a.up, N * F);                /* in place: allowed */
  be->memset(dln, 0, N * C * f4);
  be->matmul_bwd(dln, g.W_GATE, NULL, dgate, a.ln2, w.W_GATE, N, C, F);
  be->matmul_bwd(dln, g.W_UP, NULL, dup, a.ln2, w.W_UP, N, C, F);
  fm__tp_sum(m, dln, N * C); /* column-parallel: every rank's part of d(ln2) */
  be->rmsnorm_bwd(dres, g.MLP_NORM, dln, a.res_att, w.MLP_NORM, a.ln2_rstd, N, C);
  /* attention: res_att = in + wo attn(rope(wq x), rope(wk x), wv x), x = ln1(in) */
  be->memset(datty, 0, N * Q * f4);
  be->matmul_bwd(datty, g.WO, NULL, dres, a.atty, w.WO, N, Q, C);
  be->memset(dq, 0, N * Q * f4);
  be->memset(dk, 0, N * KV * f4);
  be->memset(dv, 0, N * KV * f4);
  be->attention_bwd(dq, dk, dv, datty, a.atty, a.lse, a.q, a.k, a.v, Q, KV, seg, B, T, NH, NKV, HS);
  be->rope_bwd(dq, m->pos, N, Q, NH, HS, theta);
  be->rope_bwd(dk, m->pos, N, KV, NKV, HS, theta);
  be->memset(dln, 0, N * C * f4);
  be->matmul_bwd(dln, g.WQ, NULL, dq, a.ln1, w.WQ, N, C, Q);
  be->matmul_bwd(dln, g.WK, NULL, dk, a.ln1, w.WK, N, C, KV);
  be->matmul_bwd(dln, g.WV, NULL, dv, a.ln1, w.WV, N, C, KV);
  fm__tp_sum(m, dln, N * C);
  be->rmsnorm_bwd(dres, g.ATTN_NORM, dln, a.in, w.ATTN_NORM, a.ln1_rstd, N, C);
}

static void llama_backward(FmModel *m) {
  const FmBackend *be = m->be;
  const int64_t N = m->B * m->d.T, C = m->d.C, L = m->d.L;
  float *dres = fm__act(m, A_dres, 0);
  be->memset(dres, 0, N * C * (int64_t)sizeof(float));
  be->rmsnorm_bwd(dres, fm__par(m, m->grad, NORM, -1), m->dfinal, fm__act(m, A_res, L), fm__par(m, m->param, NORM, -1),
                  fm__act(m, A_norm_rstd, 0), N, C);
  for (int64_t l = L - 1; l >= 0; l--) {
    if (m->recompute) llama_block_fwd(m, l); /* refill the one shared block buffer from the kept input */
    llama_block_bwd(m, l);
    fm__grads_ready_block(m, l);
  }
  if (fm__tp_on(m))
    fm__tp_embedding_bwd(m, fm__par(m, m->grad, WTE, -1), NULL, dres);
  else
    be->embedding_bwd(fm__par(m, m->grad, WTE, -1), NULL, dres, m->tokens, m->pos, N, C, m->d.V);
}

const FmModelKind fm_model_llama = {
    .name = "llama",
    .desc = "Llama 2/3: RMSNorm, RoPE, GQA, SwiGLU",
    .rope = true,
    .dims = llama_dims,
    .params = llama_params,
    .train_flops_per_token = llama_train_flops,
    .acts = llama_acts,
    .forward = llama_forward,
    .backward = llama_backward,
};
