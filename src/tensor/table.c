/* table.c: tensor tables. A table is an ordered list of descriptors laid out
 * contiguously in one arena; allocation, checkpointing, HF export and ZeRO
 * sharding all walk the same table. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/tensor.h"

void fm_table_init(FmTensorTable *tab) { memset(tab, 0, sizeof *tab); }

FmTensor *fm_table_add(FmTensorTable *tab, const char *name, FmDType dt, uint32_t flags, FmTpSplit tp, int ndim,
                       const int64_t *shape) {
  if (ndim < 1 || ndim > FM_MAX_DIMS) fm_abort_one(1, "tensor %s: %d dims (1..%d allowed)", name, ndim, FM_MAX_DIMS);
  size_t len = strlen(name);
  if (len >= sizeof(((FmTensor *)0)->name)) fm_abort_one(1, "tensor name too long: %s", name);
  if (tab->n == tab->cap) {
    tab->cap = tab->cap ? 2 * tab->cap : 64;
    tab->t = fm_xrealloc(tab->t, (size_t)tab->cap * sizeof *tab->t);
  }
  FmTensor *t = &tab->t[tab->n++];
  memset(t, 0, sizeof *t);
  memcpy(t->name, name, len + 1);
  t->ndim = ndim;
  t->dtype = dt;
  t->flags = flags;
  t->tp = tp;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->numel *= shape[i];
  }
  t->offset = tab->numel;
  tab->numel += t->numel;
  return t;
}

const FmTensor *fm_table_find(const FmTensorTable *tab, const char *name) {
  for (int i = 0; i < tab->n; i++)
    if (strcmp(tab->t[i].name, name) == 0) return &tab->t[i];
  return NULL;
}

void fm_table_free(FmTensorTable *tab) {
  free(tab->t);
  memset(tab, 0, sizeof *tab);
}
