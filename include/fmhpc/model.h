/* model.h: the model registry (src/deck/models.def) and what each model
 * declares about itself: its dimensions from the deck, its parameter table
 * (one X-macro list per model), the activations a micro-batch keeps for the
 * backward pass, and its FLOPs per token; and FmModel, a model instantiated
 * on a backend: parameter, gradient and activation arenas sized at create
 * time, weight init, forward + backward of one micro-batch, logits for
 * evaluation and generation, and residual-stream statistics. Every op runs
 * through the FmBackend table, so the same code drives CPU and CUDA. */
#ifndef FMHPC_MODEL_H
#define FMHPC_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tensor.h"

/* Dimensions in the one vocabulary of STYLE.md. */
typedef struct FmModelDims {
  int64_t C;         /* model width */
  int64_t L;         /* layers */
  int64_t NH;        /* query heads */
  int64_t NKV;       /* key/value heads */
  int64_t HS;        /* head size */
  int64_t F;         /* feed-forward width */
  int64_t V;         /* vocabulary */
  int64_t T;         /* context length */
  bool tied;         /* output projection shares the token embedding */
  double norm_eps;   /* LayerNorm / RMSNorm epsilon */
  double rope_theta; /* RoPE base (llama) */
} FmModelDims;

typedef struct FmModel FmModel;

typedef struct FmModelKind {
  const char *name; /* "gpt2", "llama" */
  const char *desc;
  bool rope; /* its attention rotates by RoPE: rope_theta gives the weights their meaning */
  /* Derive dims from the deck; rule violations go to err via fm_deck_error. */
  int (*dims)(FmModelDims *d, const FmDeck *deck, FILE *err);
  /* Append the parameter tensors, in canonical order, to tab. */
  void (*params)(FmTensorTable *tab, const FmModelDims *d);
  /* Training FLOPs per token (forward + backward), matmuls and attention. */
  double (*train_flops_per_token)(const FmModelDims *d);
  /* The activation table of a micro-batch of b sequences (src/model/
   * model_internal.h says how tensors map to layers), appended to tab. */
  void (*acts)(FmTensorTable *tab, const FmModelDims *d, int64_t b, bool recompute);
  /* Embedding -> blocks -> final norm into the model's final hidden state. */
  void (*forward)(FmModel *m);
  /* From d(final hidden) back to the embeddings, accumulating every weight
   * gradient (recomputing each block first when m was made with recompute). */
  void (*backward)(FmModel *m);
} FmModelKind;

const FmModelKind *fm_model_find(const char *name);
int fm_model_count(void);
const FmModelKind *fm_model_at(int i);

/* The floats fm_model_create allocates beside parameters and gradients for
 * micro-batches of b sequences: the model's activation table (kept values
 * and backward scratch; with recompute only the layer inputs and one live
 * layer) plus the per-batch buffers (token weights, logits rows, the
 * cross-entropy scratch). `fmhpc --check` plans activation memory from it. */
int64_t fm_model_act_elems(const FmModelKind *k, const FmModelDims *d, int64_t b, bool recompute);

/* One &model key on which two models differ, both values as a deck writes them. */
typedef struct FmModelDiff {
  const char *key; /* "arch", "d_model", ..., "rope_theta" */
  char then[48], now[48];
} FmModelDiff;
/* Where model a (a checkpoint's) and model b (this deck's) differ in what
 * gives the stored weights their meaning: the architecture and the resolved
 * dims (head_dim 0 and its default value are one model), rope_theta only for
 * a kind that uses RoPE. seq_len is left to the caller (GPT-2 has it in the
 * shapes, Llama in no weight). Up to max entries into out; returns how many
 * differences there are. Loading a checkpoint (interop/load.c) and resuming
 * one (train/compat.c) decide "the same model" by this one rule. */
int fm_model_dims_diff(const FmModelKind *ka, const FmModelDims *a, const FmModelKind *kb, const FmModelDims *b,
                       FmModelDiff *out, int max);

/* Dims from the deck via the deck's arch; FM_EDECK with a message on error. */
int fm_model_dims(FmModelDims *d, const FmModelKind **kind, const FmDeck *deck, FILE *err);
/* Shared dims rules (n_head | d_model, n_kv_head | n_head, ...). */
int fm__model_common_dims(FmModelDims *d, const FmDeck *deck, FILE *err);
/* Append one fp32 parameter; per-layer tensors get a leading L dimension and
 * d1 == 0 makes a vector. Used by the models' X-macro parameter lists. */
void fm__model_add_param(FmTensorTable *tab, const char *name, uint32_t flags, FmTpSplit tp, int per_layer, int64_t L,
                         int64_t d0, int64_t d1);
/* The whole parameter table of the deck's model (dims must be valid). */
void fm_model_param_table(FmTensorTable *tab, const FmModelKind *kind, const FmModelDims *d);

/* ---- FmModel: a model on a backend ---------------------------------------- */

/* One micro-batch as the model reads it: b*T int32 each, host memory (the
 * model copies it to the backend). seg may be NULL (one document per row);
 * targets may be NULL for fm_model_logits. The data module's FmBatch fields
 * map one to one: tokens, targets, position_ids, segment_ids. */
typedef struct FmModelInput {
  const int32_t *tokens;  /* (B, T) input ids */
  const int32_t *targets; /* (B, T) next-token ids */
  const int32_t *pos;     /* (B, T) position ids (GPT-2's wpe row, Llama's RoPE angle) */
  const int32_t *seg;     /* (B, T) segment ids: attention stays inside a document; or NULL */
} FmModelInput;

/* Make a model of kind k with dims d on backend be for micro-batches of b
 * sequences of d->T tokens. Allocates, once: the parameter arena and the
 * gradient arena (both laid out by the parameter table: tensor i at
 * tab.t[i].offset), the activation arena (the kind's activation table, with
 * per-layer recompute or without) and the batch buffers; rank 0 logs their
 * sizes. Nothing is allocated after this (STYLE rule 8). Weights are not
 * initialised. FM_EINVAL with a message on err when the backend lacks a model
 * op or b < 1. */
int fm_model_create(FmModel **m, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                    bool recompute, FILE *err);
/* For generation: as fm_model_create without recompute, but the activations
 * (the prefill's key/value cache) and batch buffers hold T_ctx <= d->T
 * positions per sequence (prompt + max_tokens), while the parameter table
 * keeps d's shape (weights load as usual). FM_EINVAL when T_ctx is not in
 * [1, d->T]. */
int fm_model_create_ctx(FmModel **m, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                        int64_t T_ctx, FILE *err);
/* Tensor parallelism (Megatron-LM layout): as fm_model_create, on rank
 * tp->rank of the group tp (NULL or one rank: fm_model_create exactly). The
 * rank holds the shards of the tp-local dims (fm_model_tp_dims): whole KV
 * heads and their query heads (column-parallel q/k/v, GPT-2's fused qkv cut
 * per part), d_ff/tp of the MLP's column-parallel in-projections, the
 * matching input columns of the row-parallel out-projections (their bias
 * replicated and added once, after the sum), its vocab rows of the
 * embedding and LM head (vocab-parallel cross-entropy: no rank makes the
 * logits of another's rows), the norms replicated. The activation sums over
 * tp (after each row-parallel layer, and before each norm's backward, where
 * the column-parallel layers' input gradients meet) are fm_comm_sum_ordered:
 * rank order, the same bits for a fixed tp. Host memory only for tp > 1
 * (FM_EINVAL on another backend); d's T is the model's (no generation
 * context). fm_model_params is then the local table; fm_model_canon_params
 * the canonical one. */
int fm_model_create_tp(FmModel **m, const FmModelKind *k, const FmModelDims *d, const FmBackend *be, int64_t b,
                       bool recompute, FmComm *tp, FILE *err);
/* Rank r of P's dims: NH/P, NKV/P, F/P heads and widths, V its vocab rows
 * (floor(r*V/P) from *v0 on). FM_EINVAL with a message on err when P does
 * not divide n_kv_head (GPT-2: n_head) or d_ff. */
int fm_model_tp_dims(FmModelDims *local, int64_t *v0, const FmModelDims *d, int P, int r, FILE *err);
/* &parallel tp against the model (deck error naming the valid values, the
 * divisors of gcd(n_kv_head, d_ff), when it does not divide them). */
int fm_model_check_tp(const FmModelDims *d, int64_t tp, const FmDeck *deck, FILE *err);
/* tp group size (1 without tensor parallelism) and the canonical tables. */
int fm_model_tp_size(const FmModel *m);
const FmTensorTable *fm_model_canon_params(const FmModel *m);
/* Collective over tp: every rank's local vector `local` (laid out by its
 * fm_model_params; the parameter or gradient arena, or optimizer state) all
 * gathered and placed into canon (fm_model_canon_params' numel floats, host)
 * on every rank. At tp = 1 a copy. */
void fm_model_tp_gather(FmModel *m, const float *local, float *canon);
/* The reverse, local only: this rank's shards of the canonical vector canon
 * into local (laid out by fm_model_params). */
void fm_model_tp_scatter(const FmModel *m, const float *canon, float *local);
/* For a gradient norm over tp: 1 when tensor i of fm_model_params is
 * replicated over tp (counted once, by tp rank 0), else 0. */
int fm_model_tp_replicated(const FmModel *m, int i);
void fm_model_free(FmModel *m);

/* Initialise every weight (DESIGN section 6: a pure function of the seed and
 * the element's index g in the flat parameter vector, so any split of the
 * vector over ranks gives the same values):
 *   FM_TF_ONES -> 1, FM_TF_ZEROS -> 0, otherwise std * fm_rng_normal(seed,
 *   FM_RNG_INIT, 0, g) with std = init_std, init_std / sqrt(2L) for
 *   FM_TF_RESIDUAL tensors when residual_scaled, and init_std / 2 for GPT-2's
 *   position embedding "wpe" (0.01 at the default 0.02, as OpenAI's GPT-2
 *   model.py). */
void fm_model_init_weights(FmModel *m, uint64_t seed, double init_std, bool residual_scaled);
/* The same values for the flat range [begin, end) of a parameter table into
 * host memory out (end - begin floats): what a rank holding a shard calls. */
void fm_model_init_range(float *out, const FmTensorTable *tab, int64_t L, int64_t begin, int64_t end, uint64_t seed,
                         double init_std, bool residual_scaled);

/* Forward (and with backward, backward) of one micro-batch. token_weight
 * (B*T floats, host) is 0 for a masked token and 1/(global unmasked count)
 * otherwise (DESIGN section 5). Returns sum_n token_weight[n] * loss_n in
 * double. With backward, ACCUMULATES d(that sum)/d(parameters) into the
 * gradient arena; the caller zeroes it (fm_model_zero_grad) once per step. */
double fm_model_forward_backward(FmModel *m, const FmModelInput *in, const float *token_weight, bool backward);
/* The same with the loss left in backend memory at loss_d (one double), not
 * read back: a device step reads its micro-batches' losses once, at its end.
 * Only where fm_model_loss_on_device (the backend has xent_fwd_bwd_dev; tp = 1). */
void fm_model_forward_backward_dev(FmModel *m, const FmModelInput *in, const float *token_weight, bool backward,
                                   double *loss_d);
bool fm_model_loss_on_device(const FmModel *m);
void fm_model_zero_grad(FmModel *m);
/* Called by fm_model_forward_backward's backward with each range [lo, hi) of
 * the gradient arena that this micro-batch's backward has finished (its
 * values final), in backward order: the tensors outside the blocks that are
 * not embeddings (final norm, an untied LM head) with the last block's, block
 * l's slice of every stacked tensor (FM_TF_LAYER) once block l's backward is
 * done, from the last block to the first, then the embeddings (FM_TF_EMBED:
 * a tied LM head is wte) at the end. The ranges of one backward are
 * disjoint and cover the arena; the order depends only on the model. The
 * exact reduction starts each range's exchange from here (train.c). NULL: off. */
typedef void (*FmGradReady)(void *ctx, int64_t lo, int64_t hi);
void fm_model_set_grad_ready(FmModel *m, FmGradReady fn, void *ctx);
/* Deck precision c=bf16: the backend rounds GEMM operands to bf16
 * (set_compute_bf16) and the model rounds the activations a bf16 GPU run
 * keeps in bf16 (matmul, attention, RoPE, GELU and SwiGLU outputs); the
 * residual stream, norm statistics and gradients stay fp32. */
void fm_model_set_compute_bf16(FmModel *m, bool on);

/* Forward only, then the full-vocabulary logits of n_rows positions into
 * logits_out (host, n_rows x V, row-major). rows[i] indexes the flattened
 * (B, T) positions (b*T + t); rows NULL means all B*T positions in order. For
 * generation pass the last position of each sequence. */
void fm_model_logits(FmModel *m, const FmModelInput *in, const int64_t *rows, int64_t n_rows, float *logits_out);

/* ---- generation: prefill + key/value-cache decode ------------------------ */
/* Prefill is fm_model_logits on a model made without recompute, with B
 * sequences laid out (B, T) (prompt b in row b, positions 0..T-1, padded
 * after its end with any token; rows = b*T + len_b - 1): the forward keeps
 * every layer's k and v, which are the key/value cache (L, B, T, NKV*HS),
 * preallocated at create. A decode model then runs one new position per
 * sequence through the same forward code (T = 1), writing its k and v into
 * that cache and attending keys 0..pos[b] (backend attention_decode).
 *
 * Make the decode model of m (created with recompute off; FM_EINVAL with a
 * message when m recomputes or the backend lacks attention_decode). It
 * shares m's weights and cache: m must outlive it, and a forward of m
 * (prefill) starts a new batch of sequences. Free it with fm_model_free. */
int fm_model_gen_create(FmModel **dec, FmModel *m, FILE *err);
/* One decode step: tokens[b] (host, B) sits at position pos[b] (host, B; the
 * cache must hold positions 0..pos[b]-1 of sequence b, from the prefill or
 * earlier steps; pos[b] < T). logits_out (host, B x V): the next-token
 * logits of each sequence, equal to fm_model_logits at row b*T + pos[b] of
 * the whole sequence within 1e-5 (tests/unit/test_generate.c). */
void fm_model_decode(FmModel *dec, const int32_t *tokens, const int32_t *pos, float *logits_out);

/* Residual-stream variance after each block of the last forward (&log
 * act_stats): var_per_layer[l] = mean(x^2) - mean(x)^2 over the B*T*C values
 * of block l's output, summed in double. Returns L. */
int fm_model_act_stats(FmModel *m, double *var_per_layer);

/* Accessors. Parameter and gradient arenas are backend memory laid out by the
 * parameter table; fm_model_param/grad give one tensor by canonical name
 * (NULL when the model has none, e.g. "lm_head" when tied). */
const FmTensorTable *fm_model_params(const FmModel *m);
const FmTensorTable *fm_model_act_table(const FmModel *m);
const FmModelDims *fm_model_get_dims(const FmModel *m);
/* The dims of m's parameter table (as fm_model_get_dims, but T is the
 * model's seq_len when m was made with a shorter context: importers use it). */
const FmModelDims *fm_model_param_dims(const FmModel *m);
const FmModelKind *fm_model_get_kind(const FmModel *m);
const FmBackend *fm_model_backend(const FmModel *m);
float *fm_model_param_arena(FmModel *m);
float *fm_model_grad_arena(FmModel *m);
float *fm_model_param(FmModel *m, const char *name);
float *fm_model_grad(FmModel *m, const char *name);
int64_t fm_model_batch(const FmModel *m); /* b */

/* Vocab-parallel cross-entropy over a tensor-parallel group (vocab_xent.c):
 * this rank holds rows [v0, v0+Vl) of the output projection w (Vl, C) of a
 * V-row vocabulary split over tp's ranks; x (N, C), targets and weight (N)
 * are the same on every rank. Returns sum_n weight[n] * (lse_n - z_n,t) (the
 * same on every rank); with dx/dw non-NULL (as the fused xent_fwd_bwd op),
 * dx (N, C) += the whole input gradient (the ranks' parts summed in rank
 * order, the same bits everywhere) and dw (Vl, C) += this shard's gradient. No rank holds more than
 * N x min(Vl, 2048) logits. Host memory (CPU backend). scratch:
 * fm_vocab_xent_scratch floats. */
double fm_vocab_xent_fwd_bwd(FmComm *tp, const FmBackend *be, float *dx, float *dw, const float *x, const float *w,
                             const int32_t *targets, const float *weight, int64_t N, int64_t C, int64_t v0, int64_t Vl,
                             float *scratch);
int64_t fm_vocab_xent_scratch(const FmComm *tp, int64_t N, int64_t C, int64_t Vl);
/* The same for tp = P ranks (the plan's figure, no communicator). */
int64_t fm_vocab_xent_scratch_p(int P, int64_t N, int64_t C, int64_t Vl);

#endif
