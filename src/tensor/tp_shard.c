/* tp_shard.c: where a tensor-parallel shard sits in its canonical tensor (tensor.h,
 * fm_tp_copy). A shard has the canonical tensor's shape with one
 * dimension cut (the first that differs); which slice of that dimension rank
 * r of P keeps depends on the tensor's split:
 *   FM_TP_COL, FM_TP_ROW, FM_TP_VOCAB  [floor(r*n/P), floor((r+1)*n/P))
 *   FM_TP_COL3                         that slice of each of the three equal
 *                                      parts (GPT-2's q|k|v rows)
 * so every canonical element lives on exactly one rank, or on all of them
 * for FM_TP_NONE. */
#include <string.h>

#include "fmhpc/tensor.h"

/* The canonical index along the split dimension of shard index j. */
static int64_t canon_index(FmTpSplit split, int64_t nc, int64_t nl, int r, int P, int64_t j) {
  if (split == FM_TP_COL3) {
    const int64_t pc = nc / 3, pl = nl / 3;
    return (j / pl) * pc + fm_tp_begin(pc, r, P) + j % pl;
  }
  return fm_tp_begin(nc, r, P) + j;
}

void fm_tp_copy(const FmTensor *ct, const FmTensor *lt, int r, int P, float *shard, float *canon, int to_canon) {
  int d = 0;
  while (d < ct->ndim && ct->shape[d] == lt->shape[d]) d++;
  if (ct->ndim != lt->ndim || d == ct->ndim) { /* replicated, or tp = 1 */
    if (ct->numel != lt->numel || ct->ndim != lt->ndim)
      fm_abort_one(1, "fm_tp_copy: %s: shard of %lld elements for a tensor of %lld", ct->name, (long long)lt->numel,
                   (long long)ct->numel);
    if (to_canon)
      memcpy(canon, shard, (size_t)ct->numel * sizeof *canon);
    else
      memcpy(shard, canon, (size_t)ct->numel * sizeof *shard);
    return;
  }
  const int64_t nc = ct->shape[d], nl = lt->shape[d];
  const int64_t expect = ct->tp == FM_TP_COL3 ? 3 * (fm_tp_begin(nc / 3, r + 1, P) - fm_tp_begin(nc / 3, r, P))
                                              : fm_tp_begin(nc, r + 1, P) - fm_tp_begin(nc, r, P);
  if (ct->tp == FM_TP_NONE || nl != expect || (ct->tp == FM_TP_COL3 && nc % 3 != 0))
    fm_abort_one(1, "fm_tp_copy: %s: a shard of %lld of %lld along dimension %d is not rank %d of %d's part", ct->name,
                 (long long)nl, (long long)nc, d, r, P);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; i++) outer *= ct->shape[i];
  for (int i = d + 1; i < ct->ndim; i++) inner *= ct->shape[i];
  const size_t bytes = (size_t)inner * sizeof(float);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < nl; j++) {
      float *s = shard + (o * nl + j) * inner;
      float *c = canon + (o * nc + canon_index(ct->tp, nc, nl, r, P, j)) * inner;
      if (to_canon)
        memcpy(c, s, bytes);
      else
        memcpy(s, c, bytes);
    }
}
