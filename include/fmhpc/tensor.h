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
};

/* Tensor-parallel split of a parameter (Megatron): none, by output rows
 * (column-parallel linear), by input columns (row-parallel), or by vocab. */
typedef enum { FM_TP_NONE, FM_TP_COL, FM_TP_ROW, FM_TP_VOCAB } FmTpSplit;

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

#include "fmhpc/backend.h"

#endif
