/* model.h: the model registry (src/model/models.def) and what each model
 * declares about itself: its dimensions from the deck, its parameter table
 * (one X-macro list per model), the activations a micro-batch keeps for the
 * backward pass, and its FLOPs per token. Forward/backward come later and
 * walk the same tables. */
#ifndef FMHPC_MODEL_H
#define FMHPC_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/tensor.h"

/* Dimensions in the one vocabulary of STYLE.md. */
typedef struct FmModelDims {
  int64_t C;   /* model width */
  int64_t L;   /* layers */
  int64_t NH;  /* query heads */
  int64_t NKV; /* key/value heads */
  int64_t HS;  /* head size */
  int64_t F;   /* feed-forward width */
  int64_t V;   /* vocabulary */
  int64_t T;   /* context length */
  bool tied;   /* output projection shares the token embedding */
} FmModelDims;

typedef struct FmModelKind {
  const char *name; /* "gpt2", "llama" */
  const char *desc;
  /* Derive dims from the deck; rule violations go to err via fm_deck_error. */
  int (*dims)(FmModelDims *d, const FmDeck *deck, FILE *err);
  /* Append the parameter tensors, in canonical order, to tab. */
  void (*params)(FmTensorTable *tab, const FmModelDims *d);
  /* Values a micro-batch of b sequences keeps for backward (elements),
   * with per-layer recompute (only layer inputs kept) or without. */
  int64_t (*act_elems)(const FmModelDims *d, int64_t b, bool recompute);
  /* Training FLOPs per token (forward + backward), matmuls and attention. */
  double (*train_flops_per_token)(const FmModelDims *d);
} FmModelKind;

const FmModelKind *fm_model_find(const char *name);
int fm_model_count(void);
const FmModelKind *fm_model_at(int i);

/* Dims from the deck via the deck's arch; FM_EDECK with a message on error. */
int fm_model_dims(FmModelDims *d, const FmModelKind **kind, const FmDeck *deck, FILE *err);
/* Shared dims rules (n_head | d_model, n_kv_head | n_head, ...). */
int fm__model_common_dims(FmModelDims *d, const FmDeck *deck, FILE *err);
/* Append one fp32 parameter; per-layer tensors get a leading L dimension and
 * d1 == 0 makes a vector. Used by the models' X-macro parameter lists. */
void fm__model_add_param(FmTensorTable *tab, const char *name, uint32_t flags, FmTpSplit tp, int per_layer,
                         int64_t L, int64_t d0, int64_t d1);
/* The whole parameter table of the deck's model (dims must be valid). */
void fm_model_param_table(FmTensorTable *tab, const FmModelKind *kind, const FmModelDims *d);

#endif
