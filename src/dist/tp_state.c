/* tp_state.c: checkpoints stay canonical under tensor parallelism (dist.h,
 * FmDistCanon). A checkpoint holds every tensor unsharded; under tp > 1 a
 * rank holds the ZeRO-1 shard [lo, hi) of its tp-local vector. Writing, each
 * flat array is all-gathered over dp (the local vector whole), then over tp
 * (the canonical vector whole, fm_model_tp_gather), and tp rank 0's dp
 * group writes the canonical ZeRO-1 shards as at tp = 1. Reading, every dp
 * group reads the canonical shards, all-gathers them over dp and keeps its
 * tp shard (fm_model_tp_scatter): any tp reads any tp's file. The exact
 * reduction's block scales are per tp shard: stored as every tp rank's
 * blocks in rank order and then tp itself, so a resume at the same tp
 * restores them (the same bits) and another tp starts from fresh scales
 * (ckpt.h: scales_skipped; an overflow then redoes the first step). */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"

void fm_dist_canon_init(FmDistCanon *c, const FmDistState *loc, FmModel *m, const FmReduce *red, FmComm *dp,
                        FmComm *tp) {
  memset(c, 0, sizeof *c);
  const FmTensorTable *ct = fm_model_canon_params(m);
  c->cn = ct->numel;
  c->n = loc->hi - loc->lo;
  c->local_numel = fm_model_params(m)->numel;
  int64_t lo = 0, hi = 0;
  fm_zero_range(c->cn, FM_DIST_BLOCK, dp->size, dp->rank, &lo, &hi);
  fm_dist_state_init(&c->s, ct, lo, hi);
  /* every tp rank's block count (the tables differ in the vocab rows) */
  int64_t mine = red->nblocks, *all = fm_xcalloc((size_t)tp->size, sizeof *all);
  FM_CHECK(fm_comm_allgather(tp, &mine, all, 1, FM_DT_I64));
  c->nb_max = 0;
  c->nb_before = 0;
  c->n_amax = 1;
  for (int q = 0; q < tp->size; q++) {
    c->nb_max = all[q] > c->nb_max ? all[q] : c->nb_max;
    if (q < tp->rank) c->nb_before += all[q];
    c->n_amax += all[q];
  }
  c->nb_all = all;
  for (int i = 0; i < loc->n; i++) {
    const FmDistEntry *e = &loc->e[i];
    if (e->layout == FM_DIST_FLAT_SHARD) {
      c->buf[i] = fm_xcalloc((size_t)c->cn, sizeof(float));
      fm_dist_state_add(&c->s, e->name, e->layout, c->buf[i] + lo, 0);
    } else if (!strcmp(e->name, "reduce/amax_prev")) {
      c->amax = fm_xcalloc((size_t)c->n_amax, sizeof *c->amax);
      fm_dist_state_add(&c->s, e->name, e->layout, c->amax, c->n_amax);
    } else {
      fm_dist_state_add(&c->s, e->name, e->layout, e->data, e->n);
    }
  }
  c->tmp = fm_xcalloc((size_t)c->local_numel, sizeof *c->tmp);
  int64_t smax = 0;
  for (int r = 0; r < dp->size; r++) {
    int64_t a = 0, b = 0;
    fm_zero_range(c->cn, FM_DIST_BLOCK, dp->size, r, &a, &b);
    smax = b - a > smax ? b - a : smax;
  }
  c->smax = smax;
  c->stage = fm_xcalloc((size_t)(smax * (dp->size + 1)), sizeof *c->stage);
}

void fm_dist_canon_free(FmDistCanon *c) {
  for (int i = 0; i < FM_DIST_MAX_STATE; i++) free(c->buf[i]);
  free(c->amax);
  free(c->tmp);
  free(c->stage);
  free(c->nb_all);
  memset(c, 0, sizeof *c);
}

void fm_dist_canon_gather(FmDistCanon *c, const FmDistState *loc, FmModel *m, FmReduce *red, FmComm *tp) {
  for (int i = 0; i < loc->n; i++) {
    const FmDistEntry *e = &loc->e[i];
    if (e->layout == FM_DIST_FLAT_SHARD) {
      memcpy(c->tmp + loc->lo, e->data, (size_t)c->n * sizeof(float));
      FM_CHECK(fm_reduce_allgather(red, c->tmp)); /* the local vector whole on every dp rank */
      fm_model_tp_gather(m, c->tmp, c->buf[i]);   /* the canonical vector whole on every rank */
    } else if (c->amax) {
      if (strcmp(e->name, "reduce/amax_prev") != 0) continue;
      float *mine = fm_xcalloc((size_t)c->nb_max, sizeof *mine),
            *all = fm_xcalloc((size_t)(c->nb_max * tp->size), sizeof *all);
      memcpy(mine, e->data, (size_t)e->n * sizeof *mine);
      FM_CHECK(fm_comm_allgather(tp, mine, all, c->nb_max, FM_DT_F32));
      int64_t k = 0;
      for (int q = 0; q < tp->size; q++)
        for (int64_t j = 0; j < c->nb_all[q]; j++) c->amax[k++] = all[(int64_t)q * c->nb_max + j];
      c->amax[k] = (float)tp->size; /* the layout's tag */
      free(mine);
      free(all);
    }
  }
}

int fm_dist_canon_scatter(FmDistCanon *c, FmDistState *loc, FmModel *m, FmComm *dp, FmComm *tp, int scales_read) {
  int restored = 0;
  for (int i = 0; i < loc->n; i++) {
    FmDistEntry *e = &loc->e[i];
    if (e->layout == FM_DIST_FLAT_SHARD) {
      /* the canonical shards [lo_r, hi_r) read by each dp rank, all-gathered */
      float *send = c->stage + c->smax * dp->size;
      memset(send, 0, (size_t)c->smax * sizeof *send);
      memcpy(send, c->buf[i] + c->s.lo, (size_t)(c->s.hi - c->s.lo) * sizeof *send);
      FM_CHECK(fm_comm_allgather(dp, send, c->stage, c->smax, FM_DT_F32));
      for (int r = 0; r < dp->size; r++) {
        int64_t a = 0, b = 0;
        fm_zero_range(c->cn, FM_DIST_BLOCK, dp->size, r, &a, &b);
        memcpy(c->buf[i] + a, c->stage + (int64_t)r * c->smax, (size_t)(b - a) * sizeof(float));
      }
      fm_model_tp_scatter(m, c->buf[i], c->tmp);
      memcpy(e->data, c->tmp + loc->lo, (size_t)c->n * sizeof(float));
    } else if (c->amax && !strcmp(e->name, "reduce/amax_prev")) {
      if (scales_read && c->amax[c->n_amax - 1] == (float)tp->size) {
        memcpy(e->data, c->amax + c->nb_before, (size_t)e->n * sizeof(float));
        restored = 1;
      }
    }
  }
  return restored;
}
