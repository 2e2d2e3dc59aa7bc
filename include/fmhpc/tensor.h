/* tensor.h: tensor descriptors and tables (parameters, gradients, optimizer
 * state and activations are tables over one arena each), and the backend op
 * table FmBackend with identical signatures on CPU and CUDA. The CPU op is the
 * readable specification; each CUDA op is tested against it (tests/kernels). */
#ifndef FMHPC_TENSOR_H
#define FMHPC_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "fmhpc/core.h"

#define FM_MAX_DIMS 4

/* What a parameter is, for weight decay, init and tensor-parallel splits. */
enum {
  FM_TF_MATRIX = 1u << 0,   /* a weight matrix: decayed by default */
  FM_TF_NORM = 1u << 1,     /* norm gain */
  FM_TF_BIAS = 1u << 2,     /* bias */
  FM_TF_EMBED = 1u << 3,    /* token or position embedding */
  FM_TF_RESIDUAL = 1u << 4, /* output projection into the residual stream: scaled init */
  FM_TF_ONES = 1u << 5,     /* initialised to 1 (norm gains) */
  FM_TF_ZEROS = 1u << 6,    /* initialised to 0 (biases) */
  FM_TF_LAYER = 1u << 7,    /* stacked over the blocks: shape (L, ...), block l's slice l */
};

/* Tensor-parallel split of a parameter (Megatron): none, by output rows
 * (column-parallel linear), by output rows of each of three stacked parts
 * (GPT-2's fused q|k|v: rank r keeps its heads' rows of q, of k and of v), by
 * input columns (row-parallel), or by vocab rows (rank r of P: rows
 * [r*V/P, (r+1)*V/P), the one uneven split). src/dist/tp.c maps shards to
 * the canonical tensor. */
typedef enum { FM_TP_NONE, FM_TP_COL, FM_TP_ROW, FM_TP_VOCAB, FM_TP_COL3 } FmTpSplit;

typedef struct FmTensor {
  char name[64]; /* canonical name, e.g. "h.3.attn.wq" */
  int ndim;
  int64_t shape[FM_MAX_DIMS];
  FmDType dtype;
  int64_t numel;
  int64_t offset; /* element offset in its arena */
  uint32_t flags;
  FmTpSplit tp;
} FmTensor;

typedef struct FmTensorTable {
  FmTensor *t;
  int n, cap;
  int64_t numel; /* sum over the table */
} FmTensorTable;

void fm_table_init(FmTensorTable *tab);
/* Append a tensor; its offset is the running total (tables are contiguous). */
FmTensor *fm_table_add(FmTensorTable *tab, const char *name, FmDType dt, uint32_t flags, FmTpSplit tp, int ndim,
                       const int64_t *shape);
const FmTensor *fm_table_find(const FmTensorTable *tab, const char *name);
void fm_table_free(FmTensorTable *tab);

/* ---- tensor-parallel shards (src/tensor/tp_shard.c) ---------------------- */
/* Under tp > 1 each rank's model holds a parameter table of its own (the
 * tp-local dims: n_head/tp heads, d_ff/tp, its vocab rows) whose tensors are
 * shards of the canonical (unsharded) tensors that checkpoints and HF export
 * hold. The first element of rank r of P's part of n along a split
 * dimension (FmTpSplit): */
static inline int64_t fm_tp_begin(int64_t n, int r, int P) { return (int64_t)r * n / P; }
/* Copy between rank r of P's shard lt (packed, lt's shape) and the canonical
 * tensor ct (packed, ct's shape; ct->tp is the split): to_canon != 0 writes
 * the shard's elements into canon (the rest of canon untouched), 0 slices
 * canon into shard. Aborts when lt is not that rank's shard of ct. */
void fm_tp_copy(const FmTensor *ct, const FmTensor *lt, int r, int P, float *shard, float *canon, int to_canon);

#include "fmhpc/backend.h"

#endif
