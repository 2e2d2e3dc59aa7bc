/* reduce.h: data-parallel gradient reduction and the ZeRO-1 layout (train/).
 *
 * Exact mode (DESIGN section 6): each micro-batch gradient is added into an
 * int64 fixed-point accumulator, q = round(g * 2^s[blk]) with one power-of-two
 * scale per block of FM_CLIP_BLOCK elements. Integer sums are exact and
 * associative, so the accumulated value does not depend on which rank added
 * which micro-batch, nor on the order the collective adds ranks: the same bits
 * for any data-parallel rank count. The int64 sums are reduce-scattered to the
 * ZeRO-1 shard owners and converted to fp32 once.
 *
 * Scales: s[blk] comes from the previous step's exact block maximum of |g|
 * (a max is exact under any reduction order) with 4096x headroom, and leaves
 * room for the sum of all M micro-batches in 62 bits. A value that does not
 * fit sets an overflow flag; the flag and the maxima are reduced over ranks,
 * identically everywhere, and the step is computed again with scales from
 * this step's maxima. Precision: about min(51, 62 - log2 M) - 13 bits below
 * the block's largest value, more than fp32 carries.
 *
 * Fast mode: fp32 gradients summed by the model over micro-batches and
 * reduce-scattered as floats: the order the collective adds them changes the
 * bits between rank counts (kept to measure what exact mode buys).
 *
 * The flat parameter vector is split by fm_zero_range in whole blocks; the
 * collectives move a padded layout where rank r's shard sits at r*S. */
#ifndef FMHPC_REDUCE_H
#define FMHPC_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "fmhpc/runtime.h"

typedef struct FmReduce {
  bool exact;
  int P, r;               /* data-parallel size and rank */
  int64_t n;              /* parameters */
  int64_t M;              /* micro-batches per step (all ranks) */
  int64_t S;              /* padded shard length: max over ranks */
  int64_t *lo, *hi;       /* (P) each rank's shard [lo, hi) */
  int64_t nblocks;        /* scale blocks over the whole vector */
  int32_t *exp2;          /* (nblocks) scale exponent s of this step */
  float *amax;            /* (nblocks) max |g| over this step's micro-batches */
  float *amax_prev;       /* (nblocks) the previous step's, reduced over ranks */
  int64_t *acc;           /* (P*S) int64 accumulator, padded layout (exact) */
  int64_t *acc_shard;     /* (S) reduce-scatter result (exact) */
  FmRing *ring;           /* the int64 reduce-scatter's pipeline (exact) */
  float *sendf, *shardf;  /* (P*S), (S) float staging (fast mode, all-gather) */
  int64_t norm_nb;        /* most norm blocks any rank's shard touches */
  double *norm_mine;      /* (norm_nb) this rank's block sums of squares */
  double *norm_all;       /* (P*norm_nb) every rank's, gathered */
  double *norm_ordered;   /* (nblocks+1) the same in block order */
  int64_t limit;          /* largest |q| one micro-batch may add */
  int32_t overflow;       /* this rank saw a value beyond limit */
  int32_t nonfinite;      /* this rank saw NaN or Inf */
  int64_t first_bad;      /* after a non-finite finish: the first NaN/Inf element (any rank), else -1 */
  int64_t redone;         /* steps computed again after an overflow */
  FmComm *comm;
} FmReduce;

int fm_reduce_create(FmReduce *g, int64_t n, int64_t M, bool exact, FmComm *dp);
void fm_reduce_free(FmReduce *g);
/* This rank's shard. */
static inline int64_t fm_reduce_lo(const FmReduce *g) { return g->lo[g->r]; }
static inline int64_t fm_reduce_hi(const FmReduce *g) { return g->hi[g->r]; }

/* Start a step (or its redo): scales from amax_prev, accumulator zeroed. */
void fm_reduce_begin(FmReduce *g);
/* Exact mode: add one micro-batch gradient (n floats, host). */
void fm_reduce_add(FmReduce *g, const float *grad);
/* Finish: reduce over ranks and write this rank's shard of the summed
 * gradient (hi - lo floats) to shard_out. Fast mode reads the model's
 * accumulated fp32 gradient from `grad`. Returns 1 when the step must be
 * computed again (overflow seen on some rank; scales are widened), else 0.
 * *nonfinite tells whether any rank saw NaN/Inf; then first_bad names the
 * first such element, the shard is not written, no redo is asked for and the
 * scales stay those of the last finite step (an Inf must not become one). */
int fm_reduce_finish(FmReduce *g, const float *grad, float *shard_out, bool *nonfinite);
/* After the optimizer updated this rank's shard of w (in place in the full
 * vector w), gather every shard so all ranks hold the whole vector. */
int fm_reduce_allgather(FmReduce *g, float *w);
/* Global gradient norm over the shards, in blocks whose boundaries do not
 * depend on P (fm_clip_block_sumsq on each shard, gathered exactly). */
double fm_reduce_grad_norm(FmReduce *g, const float *shard);

#endif
