/* reduce.c: exact (int64 fixed point) and fast (fp32) data-parallel gradient
 * reduction onto ZeRO-1 shards, the parameter all-gather, and the global
 * gradient norm. See dist.h for the scheme and why it gives the same bits
 * for any number of data-parallel ranks. */
#include "fmhpc/dist.h"

#include "fmhpc/backend.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

/* With shm: rank r's part of the window holds its accumulator (P*S int64),
 * then its shard for the parameter all-gather (S floats). */
static float *shm_gather_of(const FmReduce *g, int r) {
  void *part = (char *)fm_comm_shm_part(g->shm, r) + (size_t)(g->P * g->S) * sizeof(int64_t);
  return part;
}

int fm_reduce_create(FmReduce *g, int64_t n, int64_t M, bool exact, FmComm *dp) {
  memset(g, 0, sizeof *g);
  g->exact = exact;
  g->P = dp->size;
  g->r = dp->rank;
  g->n = n;
  g->M = M;
  g->comm = dp;
  g->lo = fm_xcalloc((size_t)g->P, sizeof *g->lo);
  g->hi = fm_xcalloc((size_t)g->P, sizeof *g->hi);
  for (int r = 0; r < g->P; r++) {
    fm_zero_range(n, FM_DIST_BLOCK, g->P, r, &g->lo[r], &g->hi[r]);
    if (g->hi[r] - g->lo[r] > g->S) g->S = g->hi[r] - g->lo[r];
  }
  if (g->S == 0) g->S = 1;
  g->nblocks = (n + FM_DIST_BLOCK - 1) / FM_DIST_BLOCK;
  g->exp2 = fm_xcalloc((size_t)g->nblocks, sizeof *g->exp2);
  g->amax = fm_xcalloc((size_t)g->nblocks, sizeof *g->amax);
  g->amax_prev = fm_xcalloc((size_t)g->nblocks, sizeof *g->amax_prev);
  /* Before any step: assume gradients of a mean loss stay below 1 (a larger
   * one just costs one redo of the first step). */
  for (int64_t b = 0; b < g->nblocks; b++) g->amax_prev[b] = 1.0f;
  /* One micro-batch may add up to 2^62 / 2^ceil(log2 M), so M of them fit,
   * and at most 2^51, which the rounding trick in add_block needs. */
  int lg = 0;
  while (((int64_t)1 << lg) < M) lg++;
  g->limit = (int64_t)1 << (62 - lg < 51 ? 62 - lg : 51);
  if (exact) { /* ranks of one node: the accumulator and the all-gather's part in a shared window */
    const int64_t acc_bytes = g->P * g->S * (int64_t)sizeof *g->acc;
    FM_CHECK(fm_comm_shm_create(dp, acc_bytes + g->S * (int64_t)sizeof *g->gather, &g->shm));
  }
  if (g->shm) {
    g->acc = fm_comm_shm_part(g->shm, g->r);
    g->gather = shm_gather_of(g, g->r);
    /* not zeroed here: only [0, len) of a slot is ever read, every read value is first
     * written (the first micro-batch stores; a rank with none zeroes in fm_reduce_finish),
     * and pages untouched stay unbacked (the NCCL path never uses the window) */
  } else if (exact) {
    g->acc = fm_xcalloc((size_t)(g->P * g->S), sizeof *g->acc);
    if (g->P > 1) { /* one rank's slot is the sum itself */
      g->acc_shard = fm_xcalloc((size_t)g->S, sizeof *g->acc_shard);
      g->ring = fm_comm_ring_create(dp, g->S);
    }
  }
  /* The parameter all-gather without a window (one rank's has nothing to
   * move) goes in place over MPI where the counts fit its ints; otherwise it
   * stages through sendf (S) and shardf (P*S), allocated here, as fast mode's
   * reduce-scatter stages the whole gradient (sendf and shardf P*S each). */
  if (!g->shm && g->P > 1 && n <= INT_MAX && strcmp(dp->kind, "mpi") == 0) {
    g->ag_count = fm_xcalloc((size_t)g->P, sizeof *g->ag_count);
    g->ag_displ = fm_xcalloc((size_t)g->P, sizeof *g->ag_displ);
    for (int r = 0; r < g->P; r++) g->ag_count[r] = (int)(g->hi[r] - g->lo[r]), g->ag_displ[r] = (int)g->lo[r];
  }
  if (!g->shm && (!exact || (g->P > 1 && !g->ag_count))) {
    g->sendf = fm_xcalloc((size_t)(exact ? g->S : g->P * g->S), sizeof *g->sendf);
    g->shardf = fm_xcalloc((size_t)(g->P * g->S), sizeof *g->shardf);
  }
  /* The grad norm's buffers: each rank's blocks, at most ceil(nblocks/P)+1.
   * Sized here so that no step allocates (STYLE rule 8). */
  for (int r = 0; r < g->P; r++) {
    int64_t nb = fm_clip_nblocks(g->lo[r], g->hi[r], FM_DIST_BLOCK);
    if (nb > g->norm_nb) g->norm_nb = nb;
  }
  if (g->norm_nb == 0) g->norm_nb = 1;
  g->norm_mine = fm_xcalloc((size_t)g->norm_nb, sizeof *g->norm_mine);
  g->norm_all = fm_xcalloc((size_t)(g->norm_nb * g->P), sizeof *g->norm_all);
  g->norm_ordered = fm_xcalloc((size_t)g->nblocks + 1, sizeof *g->norm_ordered);
  return 0;
}

void fm_reduce_use_device(FmReduce *g, const FmBackend *be) {
  if (!g->exact || !be->quant_add || g->dev) return;
  g->dev = be;
  g->d_acc = fm_backend_alloc(be, g->P * g->S * (int64_t)sizeof *g->d_acc, FM_MEM_REDUCE);
  g->d_amax = fm_backend_alloc(be, g->nblocks * (int64_t)sizeof *g->d_amax, FM_MEM_REDUCE);
  g->d_flags = fm_backend_alloc(be, 2 * (int64_t)sizeof *g->d_flags, FM_MEM_REDUCE);
  g->d_exp2 = fm_backend_alloc(be, g->nblocks * (int64_t)sizeof *g->d_exp2, FM_MEM_REDUCE);
}

void fm_reduce_use_nccl(FmReduce *g, FmComm *nccl, float *shard_d) {
  if (!g->dev || !g->dev->dequant || g->nccl) return;
  const FmBackend *be = g->dev;
  g->nccl = nccl;
  g->d_acc_shard = be->alloc(g->S * (int64_t)sizeof *g->d_acc_shard);
  g->d_flags_all = be->alloc(2 * (int64_t)sizeof *g->d_flags_all);
  if (!shard_d) g->d_own = be->alloc(g->S * (int64_t)sizeof *g->d_own);
  if (be->block_scales) g->d_amax_prev = be->alloc(g->nblocks * (int64_t)sizeof *g->d_amax_prev);
  g->d_shard = shard_d ? shard_d : g->d_own;
  g->d_send = be->alloc(g->S * (int64_t)sizeof *g->d_send);
  be->memset(g->d_send, 0, g->S * (int64_t)sizeof *g->d_send); /* the padding stays zero */
  g->d_gather = be->alloc(g->P * g->S * (int64_t)sizeof *g->d_gather);
}

void *fm_reduce_readback(FmReduce *g, int64_t bytes, void *host_dst) {
  if (!g->exact || !g->nccl || !g->d_flags_all || bytes <= 0 || g->rb_bytes) return NULL;
  const FmBackend *be = g->dev;
  be->free(g->d_flags_all); /* the flags (8 bytes), then the caller's: one buffer, one copy */
  g->d_flags_all = be->alloc(8 + bytes);
  g->rb_bytes = bytes;
  g->rb_dst = host_dst;
  g->rb_host = fm_xmalloc((size_t)(8 + bytes));
  return (char *)g->d_flags_all + 8;
}

void fm_reduce_use_nccl_fast(FmReduce *g, const FmBackend *be, FmComm *nccl, const float *grad_d, float *shard_d) {
  if (g->exact || g->nccl || !be->block_sumsq || !grad_d || !shard_d) return;
  g->dev = be; /* fm_reduce_on_device stays false: it is exact mode's */
  g->nccl = nccl;
  g->d_grad = grad_d;
  g->d_shard = shard_d;
  g->d_sendf = be->alloc(g->P * g->S * (int64_t)sizeof *g->d_sendf);
  be->memset(g->d_sendf, 0, g->P * g->S * (int64_t)sizeof *g->d_sendf); /* the padding stays zero */
  g->d_blocks = be->alloc(g->norm_nb * (int64_t)sizeof *g->d_blocks);
  g->d_send = be->alloc(g->S * (int64_t)sizeof *g->d_send); /* the parameter all-gather's */
  be->memset(g->d_send, 0, g->S * (int64_t)sizeof *g->d_send);
  g->d_gather = be->alloc(g->P * g->S * (int64_t)sizeof *g->d_gather);
}

void fm_reduce_free(FmReduce *g) {
  if (g->d_sendf) {
    g->dev->free(g->d_sendf);
    g->dev->free(g->d_blocks);
    g->dev->free(g->d_send);
    g->dev->free(g->d_gather);
    g->d_send = g->d_gather = NULL;
  }
  if (g->nccl && g->exact) {
    g->dev->free(g->d_acc_shard);
    g->dev->free(g->d_flags_all);
    g->dev->free(g->d_own);
    g->dev->free(g->d_send);
    g->dev->free(g->d_gather);
    g->dev->free(g->d_amax_prev);
  }
  free(g->rb_host);
  if (g->dev && g->exact) {
    g->dev->free(g->d_acc);
    g->dev->free(g->d_amax);
    g->dev->free(g->d_flags);
    g->dev->free(g->d_exp2);
  }
  free(g->lo);
  free(g->hi);
  free(g->exp2);
  free(g->amax);
  free(g->amax_prev);
  if (!g->shm) free(g->acc); /* else the window's */
  fm_comm_shm_free(g->shm);
  free(g->acc_shard);
  fm_comm_ring_free(g->ring);
  fm_comm_osum_free(g->osum);
  free(g->sendf);
  free(g->shardf);
  free(g->ag_count);
  free(g->ag_displ);
  free(g->norm_mine);
  free(g->norm_all);
  free(g->norm_ordered);
  memset(g, 0, sizeof *g);
}

void fm_reduce_scales_to_host(FmReduce *g) {
  if (!g->amax_on_dev) return;
  g->dev->copy_to_host(g->amax_prev, g->d_amax_prev, g->nblocks * (int64_t)sizeof *g->amax_prev);
  g->amax_on_dev = false;
}

/* Every rank's writes to the window before it are seen by every rank after
 * it; reads before it are done everywhere (so a part may be written again). */
static int shm_sync(FmReduce *g) {
  g->acc_read = g->gather_read = false;
  return fm_comm_shm_sync(g->shm);
}

/* round(v * 2^s) for the scale 2^s, by the 1.5*2^52 trick (add_block's
 * comment): y = v*2^s + M leaves the integer in y's low mantissa bits, read
 * back by subtracting M's bit pattern. Plain + and * under -ffp-contract=off:
 * the same integer in scalar and vector code. */
#define QUANT_MAGIC 6755399441055744.0 /* 1.5 * 2^52 */
static inline int64_t quantise_one(float v, double scale) {
  const double magic = QUANT_MAGIC;
  int64_t magic_bits, bits;
  memcpy(&magic_bits, &magic, sizeof magic_bits);
  const double y = (double)v * scale + magic;
  memcpy(&bits, &y, sizeof bits);
  return bits - magic_bits;
}

/* The store pass of add_block with streaming (non-temporal) stores, where
 * the accumulator is too large for the caches (stream_min bytes and up): a
 * plain store first reads each destination line it will overwrite whole, so
 * 8 bytes stored cost 16 of memory traffic; a streaming store writes the line
 * without reading it. The integers are quantise_one's: per lane the same
 * IEEE operations (float to double, times 2^s, plus 1.5*2^52, all exact or
 * correctly rounded) and the same integer subtraction. Measured on a 2-vCPU
 * KVM Xeon (one thread, 124M elements): 130 ms plain, 70 ms streaming. The
 * caller reads the integers back only after a window sync or the exchange,
 * so the stores' weak ordering is closed by the fence here. stream_usable
 * says where it runs (x86-64 with AVX2); elsewhere stream_store stores
 * plainly. */
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) static void stream_store_avx2(int64_t *restrict dst, const float *restrict src,
                                                              int64_t count, double scale) {
  const double magic = QUANT_MAGIC;
  int64_t magic_bits;
  memcpy(&magic_bits, &magic, sizeof magic_bits);
  int64_t i = 0;
  for (; i < count && ((uintptr_t)(dst + i) & 31u); i++) dst[i] = quantise_one(src[i], scale); /* to 32 bytes */
  const __m256d vs = _mm256_set1_pd(scale), vm = _mm256_set1_pd(magic);
  const __m256i vb = _mm256_set1_epi64x(magic_bits);
  for (; i + 4 <= count; i += 4) {
    const __m256d y = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(src + i)), vs), vm);
    _mm256_stream_si256((__m256i *)(void *)(dst + i), _mm256_sub_epi64(_mm256_castpd_si256(y), vb));
  }
  for (; i < count; i++) dst[i] = quantise_one(src[i], scale);
  _mm_sfence();
}
#endif

static int64_t stream_min = (int64_t)64 << 20;

int64_t fm__reduce_set_stream_min(int64_t bytes) {
  const int64_t old = stream_min;
  stream_min = bytes >= 0 ? bytes : (int64_t)64 << 20;
  return old;
}

static bool stream_usable(int64_t acc_bytes) {
#if defined(__GNUC__) && defined(__x86_64__)
  return acc_bytes >= stream_min && __builtin_cpu_supports("avx2");
#else
  (void)acc_bytes;
  return false;
#endif
}

static void stream_store(int64_t *restrict dst, const float *restrict src, int64_t count, double scale) {
#if defined(__GNUC__) && defined(__x86_64__)
  stream_store_avx2(dst, src, count, scale);
#else
  for (int64_t i = 0; i < count; i++) dst[i] = quantise_one(src[i], scale);
#endif
}

void fm_reduce_begin(FmReduce *g) {
  const bool dev_scales = g->d_amax_prev && fm_reduce_on_device(g);
  if (!dev_scales) { /* the host path's scales come from the latest maxima, by the CPU op (one formula) */
    fm_reduce_scales_to_host(g);
    fm_cpu_block_scales(g->exp2, g->amax_prev, g->nblocks, g->limit);
  }
  for (int64_t b = 0; b < g->nblocks; b++) g->amax[b] = 0.0f;
  if (dev_scales) { /* the scales from the device's maxima, on the device: no copy (the maxima go up only when the
                       host's are newer: the first step, a resumed checkpoint, after the host path) */
    const FmBackend *be = g->dev;
    if (!g->amax_on_dev) be->copy_to_device(g->d_amax_prev, g->amax_prev, g->nblocks * (int64_t)sizeof *g->amax_prev);
    g->amax_on_dev = true;
    be->block_scales(g->d_exp2, g->d_amax_prev, g->nblocks, g->limit);
    be->memset(g->d_acc, 0, g->P * g->S * (int64_t)sizeof *g->d_acc);
    be->memset(g->d_amax, 0, g->nblocks * (int64_t)sizeof *g->d_amax);
    be->memset(g->d_flags, 0, 2 * (int64_t)sizeof *g->d_flags);
  } else if (fm_reduce_on_device(g)) {
    const FmBackend *be = g->dev;
    be->copy_to_device(g->d_exp2, g->exp2, g->nblocks * (int64_t)sizeof *g->exp2);
    be->memset(g->d_acc, 0, g->P * g->S * (int64_t)sizeof *g->d_acc);
    be->memset(g->d_amax, 0, g->nblocks * (int64_t)sizeof *g->d_amax);
    be->memset(g->d_flags, 0, 2 * (int64_t)sizeof *g->d_flags);
  }
  /* The host path's first micro-batch stores its integers (add_block), so the
   * accumulator is not zeroed here: one pass less over P*S int64. Before a
   * rank writes its part of a window that another rank read, every rank has
   * passed a sync after that read. */
  g->fresh = g->exact && !fm_reduce_on_device(g);
  g->stream = g->fresh && stream_usable(g->P * g->S * (int64_t)sizeof *g->acc);
  if (g->shm && g->acc_read) FM_CHECK(shm_sync(g));
  g->overflow = 0;
  g->nonfinite = 0;
  g->rb_read = false;
  g->first_bad = INT64_MAX;
  g->bucketed = 0;
  g->deferred = NULL;
}

/* Quantise and add elements [i0, i1) of one block (same scale) into dst,
 * which holds element i0 at dst[0]. Returns the block's max |g|. A NULL dst:
 * the max and the flags only (the deferred path, fm_reduce_bucket).
 * Two passes so the second has no branches and vectorises: the block's max
 * (and NaN/Inf) first, then, when the max fits, every value rounded to the
 * nearest integer by the 1.5*2^52 trick: y = v*2^s + M leaves round(v*2^s)
 * in y's low mantissa bits (exact: v*2^s is a power-of-two scaling, and
 * |v*2^s| < 2^51 by the limit), read back by subtracting M's bit pattern. */
static float add_block(int64_t *restrict dst, const float *restrict src, int64_t count, int32_t s, int64_t limit,
                       bool store, bool stream, int32_t *overflow, int64_t *first_bad) {
  const double scale = ldexp(1.0, s);
  /* The max on the bit patterns of |v|: for floats >= 0 their order as
   * integers is the float order, and Inf and NaN have the largest (from
   * 0x7f800000), so one unsigned max gives the max and whether any value is
   * not finite. An integer max vectorises; a float max does not (NaN's
   * semantics), and its scalar chain took 180 ms over GPT-2's 124M
   * gradient, the whole quantise pass 230 ms. */
  uint32_t umax = 0;
  for (int64_t i = 0; i < count; i++) {
    uint32_t u;
    memcpy(&u, src + i, sizeof u);
    u &= 0x7fffffffu;
    umax = u > umax ? u : umax;
  }
  float amax = 0.0f;
  if (umax >= 0x7f800000u) { /* NaN or Inf: the first one, and the max of the others as before */
    int64_t i = 0;
    while (fabsf(src[i]) <= FLT_MAX) i++;
    *first_bad = i;
    for (i = 0; i < count; i++) amax = fabsf(src[i]) > amax ? fabsf(src[i]) : amax;
    return amax;
  }
  memcpy(&amax, &umax, sizeof amax);
  if ((double)amax * scale > (double)limit) {
    *overflow = 1;
    return amax;
  }
  if (!dst) return amax;
  if (store && stream) {
    stream_store(dst, src, count, scale);
    return amax;
  }
  if (store) { /* the step's first micro-batch: no zeroing pass before it (a block it skips for a flag above
                  holds stale integers, but a flagged step's sums are never used) */
    for (int64_t i = 0; i < count; i++) dst[i] = quantise_one(src[i], scale);
    return amax;
  }
  for (int64_t i = 0; i < count; i++) dst[i] += quantise_one(src[i], scale);
  return amax;
}

/* Quantise grad[lo, hi), a range inside rank r's shard, into r's slot of the
 * accumulator: the blocks it touches, each cut to the range (add_block on a
 * part of a block gives the part's integers, maxima and flags: a max and an OR
 * do not depend on how the block is cut; shards start on block boundaries, so
 * a block never straddles two shards). */
static void quantise_range(FmReduce *g, const float *grad, int r, int64_t lo, int64_t hi, bool check_only) {
  if (lo >= hi) return;
  int32_t overflow = 0;
  int64_t first = INT64_MAX;
  const int64_t b0 = lo / FM_DIST_BLOCK, b1 = (hi - 1) / FM_DIST_BLOCK + 1;
#pragma omp parallel for schedule(static) reduction(| : overflow) reduction(min : first) if (b1 - b0 > 1)
  for (int64_t b = b0; b < b1; b++) {
    const int64_t i0 = b * FM_DIST_BLOCK > lo ? b * FM_DIST_BLOCK : lo;
    const int64_t i1 = (b + 1) * FM_DIST_BLOCK < hi ? (b + 1) * FM_DIST_BLOCK : hi;
    int32_t of = 0;
    int64_t bad = -1;
    float a = add_block(check_only ? NULL : g->acc + (int64_t)r * g->S + (i0 - g->lo[r]), grad + i0, i1 - i0,
                        g->exp2[b], g->limit, g->fresh, g->stream, &of, &bad);
    if (a > g->amax[b]) g->amax[b] = a;
    overflow |= of;
    if (bad >= 0 && i0 + bad < first) first = i0 + bad;
  }
  g->overflow |= overflow;
  if (first != INT64_MAX) {
    g->nonfinite = 1;
    if (first < g->first_bad) g->first_bad = first;
  }
}

void fm_reduce_add(FmReduce *g, const float *grad) {
  for (int r = 0; r < g->P; r++) quantise_range(g, grad, r, g->lo[r], g->hi[r], false);
  g->fresh = false;
}

/* The rank whose shard holds element i. */
static int owner_of(const FmReduce *g, int64_t i) {
  int r = 0;
  while (r + 1 < g->P && i >= g->hi[r]) r++;
  return r;
}

void fm_reduce_bucket(FmReduce *g, const float *grad, int64_t lo, int64_t hi) {
  if (!g->exact || fm_reduce_on_device(g) || lo < 0 || hi > g->n || lo > hi)
    fm_abort_one(1, "fm_reduce_bucket: [%lld, %lld) of %lld, %s (a programming error)", (long long)lo, (long long)hi,
                 (long long)g->n, g->exact ? "on the device path" : "fast mode");
  if (lo == hi) return;
  if (g->P == 1 && g->fresh) { /* one rank, the step's only micro-batch: no store */
    if (g->deferred && g->deferred != grad)
      fm_abort_one(1, "fm_reduce_bucket: another gradient vector within one step (a programming error)");
    quantise_range(g, grad, 0, lo, hi, true);
    g->deferred = grad;
    g->bucketed += hi - lo;
    return;
  }
  for (int r = owner_of(g, lo); r < g->P && g->lo[r] < hi; r++)
    quantise_range(g, grad, r, lo > g->lo[r] ? lo : g->lo[r], hi < g->hi[r] ? hi : g->hi[r], false);
  g->bucketed += hi - lo;
  if (g->shm) return;                                               /* the owners read the sums in fm_reduce_finish */
  if (!g->osum && g->P > 1) g->osum = fm_comm_osum_create(g->comm); /* its staging: only once buckets are used */
  if (!g->osum) return;                                             /* one rank: the accumulator is the shard */
  for (int r = owner_of(g, lo); r < g->P && g->lo[r] < hi; r++) {
    const int64_t a = lo > g->lo[r] ? lo : g->lo[r], e = hi < g->hi[r] ? hi : g->hi[r];
    if (a < e) FM_CHECK(fm_comm_osum_piece(g->osum, r, g->acc + (int64_t)r * g->S + (a - g->lo[r]), e - a));
  }
  FM_CHECK(fm_comm_osum_progress(g->osum));
}

/* After fm_reduce_bucket: every range given (the caller's contract), and the
 * exchange done (its result is used, or dropped before a redo or a skip). */
static void drain_buckets(FmReduce *g) {
  if (g->bucketed && g->bucketed != g->n)
    fm_abort_one(1, "fm_reduce_finish: %lld of %lld gradient elements given by fm_reduce_bucket (a programming error)",
                 (long long)g->bucketed, (long long)g->n);
  if (g->bucketed && g->osum) FM_CHECK(fm_comm_osum_wait(g->osum));
}

void fm_reduce_add_device(FmReduce *g, const float *dgrad) {
  for (int r = 0; r < g->P; r++) /* each rank's shard into its slot of the padded layout */
    g->dev->quant_add(g->d_acc + (int64_t)r * g->S, g->d_amax, g->d_flags, dgrad, g->d_exp2, g->lo[r], g->hi[r],
                      FM_DIST_BLOCK, g->limit);
}

/* Every rank learns the first non-finite element of the step (a min over
 * ranks: all of them take this path, the flags being agreed). */
static void agree_first_bad(FmReduce *g) {
  int64_t first = INT64_MAX;
  FM_CHECK(fm_comm_allreduce(g->comm, &g->first_bad, &first, 1, FM_DT_I64, FM_OP_MIN));
  g->first_bad = first == INT64_MAX ? -1 : first;
}

/* fm_reduce_finish's device path over NCCL (fm_reduce_use_nccl): the same
 * decisions as the host path below, from the same agreed values. */
static int finish_nccl(FmReduce *g, float *shard_out, bool *nonfinite) {
  const FmBackend *be = g->dev;
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo;
  int32_t all[2];
  FM_CHECK(fm_comm_allreduce(g->nccl, g->d_flags, g->d_flags_all, 2, FM_DT_I32, FM_OP_MAX));
  if (g->rb_bytes) { /* the flags and the caller's bytes in one read */
    be->copy_to_host(g->rb_host, g->d_flags_all, 8 + g->rb_bytes);
    memcpy(all, g->rb_host, sizeof all);
    memcpy(g->rb_dst, g->rb_host + 8, (size_t)g->rb_bytes);
    g->rb_read = true;
  } else {
    be->copy_to_host(all, g->d_flags_all, sizeof all);
  }
  g->overflow = all[0];
  g->nonfinite = all[1];
  *nonfinite = false;
  if (all[1]) { /* every rank computes the step again on the host path, which names the element */
    g->locate = true;
    return 1;
  }
  if (g->d_amax_prev) { /* the next scales (or the redo's) stay on the device: fm_reduce_begin */
    FM_CHECK(fm_comm_allreduce(g->nccl, g->d_amax, g->d_amax_prev, g->nblocks, FM_DT_F32, FM_OP_MAX));
    g->amax_on_dev = true;
  } else {
    FM_CHECK(fm_comm_allreduce(g->nccl, g->d_amax, g->d_amax, g->nblocks, FM_DT_F32, FM_OP_MAX));
    be->copy_to_host(g->amax_prev, g->d_amax, g->nblocks * (int64_t)sizeof *g->amax_prev);
  }
  if (all[0]) {
    g->redone++;
    return 1;
  }
  FM_CHECK(fm_comm_reduce_scatter(g->nccl, g->d_acc, g->d_acc_shard, g->S, FM_DT_I64, FM_OP_SUM));
  be->dequant(g->d_shard, g->d_acc_shard, g->d_exp2, lo, len, FM_DIST_BLOCK);
  if (g->d_shard == g->d_own) be->copy_to_host(shard_out, g->d_own, len * (int64_t)sizeof *shard_out);
  return 0;
}

/* Fast mode over NCCL (fm_reduce_use_nccl_fast): the fp32 sum on the device. */
static int finish_fast_nccl(FmReduce *g, bool *nonfinite) {
  const FmBackend *be = g->dev;
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo, nb = fm_clip_nblocks(lo, lo + len, FM_DIST_BLOCK);
  for (int r = 0; r < g->P; r++)
    if (g->hi[r] > g->lo[r])
      be->copy(g->d_sendf + (int64_t)r * g->S, g->d_grad + g->lo[r], (g->hi[r] - g->lo[r]) * (int64_t)sizeof(float));
  FM_CHECK(fm_comm_reduce_scatter(g->nccl, g->d_sendf, g->d_shard, g->S, FM_DT_F32, FM_OP_SUM));
  int32_t nf = 0, all = 0;
  if (nb > 0) { /* a NaN/Inf of any rank's gradient is in the sum, so in some shard's block sums */
    be->block_sumsq(g->d_blocks, g->d_shard, len, FM_DIST_BLOCK);
    be->copy_to_host(g->norm_mine, g->d_blocks, nb * (int64_t)sizeof *g->norm_mine);
    for (int64_t b = 0; b < nb; b++) nf |= !isfinite(g->norm_mine[b]);
  }
  FM_CHECK(fm_comm_allreduce(g->comm, &nf, &all, 1, FM_DT_I32, FM_OP_MAX));
  *nonfinite = all != 0;
  if (all) { /* rare: name the first NaN/Inf element of any rank's own gradient, as the host path does */
    be->copy_to_host(g->sendf, g->d_grad, g->n * (int64_t)sizeof *g->sendf); /* sendf holds P*S >= n */
    for (int64_t i = 0; i < g->n && g->first_bad == INT64_MAX; i++)
      if (!isfinite(g->sendf[i])) g->first_bad = i;
    agree_first_bad(g);
  }
  return 0;
}

/* With shm: this rank's shard summed straight from every rank's slot in the
 * window and turned into fp32 in the same pass (the ring's result, bitwise:
 * wrapping int64 sums are exact in any order; the same rounding as below).
 * Chunks of SUM_CHUNK keep the partial sums in L1 so the adds vectorise. */
enum { SUM_CHUNK = 1024 };
static void shm_owner_sum(FmReduce *g, float *shard_out) {
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo, nb = (len + FM_DIST_BLOCK - 1) / FM_DIST_BLOCK;
  const int64_t mine = (int64_t)g->r * g->S;
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t b = 0; b < nb; b++) { /* shards start on block boundaries */
    const double inv = ldexp(1.0, -g->exp2[lo / FM_DIST_BLOCK + b]);
    const int64_t i1 = (b + 1) * FM_DIST_BLOCK < len ? (b + 1) * FM_DIST_BLOCK : len;
    uint64_t sum[SUM_CHUNK];
    for (int64_t c0 = b * FM_DIST_BLOCK; c0 < i1; c0 += SUM_CHUNK) {
      const int64_t k = i1 - c0 < SUM_CHUNK ? i1 - c0 : SUM_CHUNK;
      const int64_t *a = (const int64_t *)fm_comm_shm_part(g->shm, 0) + mine + c0;
      for (int64_t i = 0; i < k; i++) sum[i] = (uint64_t)a[i];
      for (int p = 1; p < g->P; p++) {
        a = (const int64_t *)fm_comm_shm_part(g->shm, p) + mine + c0;
        for (int64_t i = 0; i < k; i++) sum[i] += (uint64_t)a[i];
      }
      for (int64_t i = 0; i < k; i++) shard_out[c0 + i] = (float)((double)(int64_t)sum[i] * inv);
    }
  }
  g->acc_read = true;
}

/* The sums [i0, i1) of this rank's shard (offsets from its start) as floats:
 * sum * 2^-s with the block's scale exponent s, rounded once. Shards start on
 * block boundaries, so shard offset i is in block lo / BLOCK + i / BLOCK. */
static void dequant_range(const FmReduce *g, const int64_t *sum, float *out, int64_t i0, int64_t i1) {
  const int64_t b0 = fm_reduce_lo(g) / FM_DIST_BLOCK;
  for (int64_t i = i0; i < i1;) {
    const int64_t b = i / FM_DIST_BLOCK, end = (b + 1) * FM_DIST_BLOCK < i1 ? (b + 1) * FM_DIST_BLOCK : i1;
    const double inv = ldexp(1.0, -g->exp2[b0 + b]);
    for (; i < end; i++) out[i] = (float)((double)sum[i] * inv);
  }
}

/* The deferred path (one rank, one micro-batch: fm_reduce_bucket): out[i]
 * from grad[i] as quantise_one then dequant_range would give it, in one pass
 * (block scale 2^s). y = v*2^s + 1.5*2^52 as in quantise_one; y - 1.5*2^52
 * is that integer exactly, as a double (|integer| <= limit <= 2^51: y and
 * the constant lie within a factor of 2, Sterbenz), so (y - 1.5*2^52) * 2^-s
 * is dequant_range's (double)integer * 2^-s, rounded once to float: the same
 * bits, with no int64 conversion (which AVX2 lacks) and no 8-byte store and
 * load. */
static void requant_range(int32_t s, const float *grad, float *out, int64_t i0, int64_t i1) {
  const double magic = QUANT_MAGIC, scale = ldexp(1.0, s), inv = ldexp(1.0, -s);
  for (int64_t i = i0; i < i1; i++) out[i] = (float)((((double)grad[i] * scale + magic) - magic) * inv);
}

typedef struct Dequant {
  const FmReduce *g;
  const int64_t *sum;
  float *out;
  int64_t len; /* this rank's shard; the ring's pieces cover the padded S */
} Dequant;

static void dequant_piece(void *ctx, int64_t off, int64_t len) {
  const Dequant *d = ctx;
  const int64_t end = off + len < d->len ? off + len : d->len;
  if (off < end) dequant_range(d->g, d->sum, d->out, off, end);
}

int fm_reduce_finish(FmReduce *g, const float *grad, float *shard_out, bool *nonfinite) {
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo;
  int32_t flags[2] = {g->overflow, g->nonfinite}, all[2];
  if (!g->exact && g->d_sendf) return finish_fast_nccl(g, nonfinite);
  if (!g->exact) {
    /* The model summed micro-batches in fp32; count NaN/Inf on the way. */
    int32_t nf = 0;
    for (int r = 0; r < g->P; r++) {
      const int64_t rlo = g->lo[r], rlen = g->hi[r] - rlo;
      memcpy(g->sendf + (int64_t)r * g->S, grad + rlo, (size_t)rlen * sizeof(float));
      if (rlen < g->S) memset(g->sendf + (int64_t)r * g->S + rlen, 0, (size_t)(g->S - rlen) * sizeof(float));
    }
    for (int64_t i = 0; i < g->n; i++) nf |= !isfinite(grad[i]);
    for (int64_t i = 0; nf && i < g->n && g->first_bad == INT64_MAX; i++)
      if (!isfinite(grad[i])) g->first_bad = i;
    flags[1] = nf;
    FM_CHECK(fm_comm_allreduce(g->comm, flags, all, 2, FM_DT_I32, FM_OP_MAX));
    if (all[1]) {
      *nonfinite = true;
      agree_first_bad(g);
      return 0;
    }
    FM_CHECK(fm_comm_reduce_scatter(g->comm, g->sendf, g->shardf, g->S, FM_DT_F32, FM_OP_SUM));
    memcpy(shard_out, g->shardf, (size_t)len * sizeof(float));
    *nonfinite = all[1] != 0;
    return 0;
  }
  const bool on_dev = fm_reduce_on_device(g);
  g->locate = false;
  if (on_dev && g->nccl) return finish_nccl(g, shard_out, nonfinite);
  if (on_dev) { /* the device's flags and maxima: one copy each per step */
    g->dev->copy_to_host(flags, g->d_flags, sizeof flags);
    g->dev->copy_to_host(g->amax, g->d_amax, g->nblocks * (int64_t)sizeof *g->amax);
    g->overflow = flags[0];
    g->nonfinite = flags[1];
  }
  FM_CHECK(fm_comm_allreduce(g->comm, flags, all, 2, FM_DT_I32, FM_OP_MAX));
  drain_buckets(g);
  if (all[1] && on_dev) { /* every rank computes the step again on the host path, which names the element */
    g->locate = true;
    return 1;
  }
  if (all[1]) { /* skipped by the caller: no redo, and the scales stay */
    *nonfinite = true;
    agree_first_bad(g);
    return 0;
  }
  /* The maxima of every rank's micro-batches: the next step's (or the
   * redo's) scales. A max is the same whatever order ranks are combined. */
  FM_CHECK(fm_comm_allreduce(g->comm, g->amax, g->amax_prev, g->nblocks, FM_DT_F32, FM_OP_MAX));
  *nonfinite = all[1] != 0;
  if (all[0]) {
    g->redone++;
    return 1;
  }
  if (g->fresh && !g->bucketed && !on_dev) /* no micro-batch on this rank (buckets store fresh too): zero sums */
    memset(g->acc, 0, (size_t)(g->P * g->S) * sizeof *g->acc);
  g->fresh = false;
  if (on_dev) g->dev->copy_to_host(g->acc, g->d_acc, g->P * g->S * (int64_t)sizeof *g->acc);
  if (g->shm) {
    FM_CHECK(shm_sync(g)); /* every rank's accumulator complete */
    shm_owner_sum(g, shard_out);
  } else if (g->P == 1 || (g->bucketed && g->osum)) { /* one rank: its slot is the sum; buckets: summed into it */
    if (g->deferred && grad != g->deferred)
      fm_abort_one(1, "fm_reduce_finish: not the gradient fm_reduce_bucket was given (a programming error)");
    const int64_t *sum = g->acc + (int64_t)g->r * g->S;
    const int64_t nb = (len + FM_DIST_BLOCK - 1) / FM_DIST_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) { /* each element on its own: any split */
      const int64_t i0 = b * FM_DIST_BLOCK, i1 = i0 + FM_DIST_BLOCK < len ? i0 + FM_DIST_BLOCK : len;
      if (g->deferred) /* one rank (lo 0): block b's scale, from the gradient itself */
        requant_range(g->exp2[b], grad, shard_out, i0, i1);
      else
        dequant_range(g, sum, shard_out, i0, i1);
    }
    g->deferred = NULL;
  } else { /* the ring: each piece of the sums becomes floats as soon as it is final, while in cache */
    Dequant dq = {g, g->acc_shard, shard_out, len};
    FM_CHECK(fm_comm_ring_reduce_scatter_i64(g->ring, g->acc, g->acc_shard, dequant_piece, &dq));
  }
  if (g->nccl && g->d_shard != g->d_own) /* the caller reads the device shard */
    g->dev->copy_to_device(g->d_shard, shard_out, len * (int64_t)sizeof *shard_out);
  return 0;
}

int fm_reduce_allgather(FmReduce *g, float *w) {
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo;
  if (g->P == 1) return 0; /* this rank's shard is the whole vector, in place */
  if (g->shm) {            /* this rank's shard into its part of the window, then the others' straight from theirs */
    int rc = g->gather_read ? shm_sync(g) : 0;
    if (rc) return rc;
    memcpy(g->gather, w + lo, (size_t)len * sizeof(float));
    if ((rc = shm_sync(g))) return rc;
    for (int r = 0; r < g->P; r++)
      if (r != g->r) memcpy(w + g->lo[r], shm_gather_of(g, r), (size_t)(g->hi[r] - g->lo[r]) * sizeof(float));
    g->gather_read = true;
    return 0;
  }
  if (g->ag_count) { /* straight into w: no staging copies */
    const int rc = fm_comm_allgatherv_inplace(g->comm, w, g->ag_count, g->ag_displ, FM_DT_F32);
    if (rc != FM_EUNSUPPORTED) return rc;
  }
  if (!g->shardf) { /* refused only through the max_count test knob: staging, allocated once */
    g->sendf = fm_xcalloc((size_t)g->S, sizeof *g->sendf);
    g->shardf = fm_xcalloc((size_t)(g->P * g->S), sizeof *g->shardf);
  }
  memcpy(g->sendf, w + lo, (size_t)len * sizeof(float));
  if (len < g->S) memset(g->sendf + len, 0, (size_t)(g->S - len) * sizeof(float));
  int rc = fm_comm_allgather(g->comm, g->sendf, g->shardf, g->S, FM_DT_F32);
  if (rc) return rc;
  for (int r = 0; r < g->P; r++)
    memcpy(w + g->lo[r], g->shardf + (int64_t)r * g->S, (size_t)(g->hi[r] - g->lo[r]) * sizeof(float));
  return 0;
}

int fm_reduce_allgather_device(FmReduce *g, float *w) {
  if (g->P == 1) return 0; /* this rank's shard is the whole vector, in place */
  const FmBackend *be = g->dev;
  const int64_t lo = fm_reduce_lo(g), len = fm_reduce_hi(g) - lo;
  be->copy(g->d_send, w + lo, len * (int64_t)sizeof *w);
  int rc = fm_comm_allgather(g->nccl, g->d_send, g->d_gather, g->S, FM_DT_F32);
  if (rc) return rc;
  for (int r = 0; r < g->P; r++)
    if (r != g->r && g->hi[r] > g->lo[r])
      be->copy(w + g->lo[r], g->d_gather + (int64_t)r * g->S, (g->hi[r] - g->lo[r]) * (int64_t)sizeof *w);
  return 0;
}

/* Rank r's block sums sit at all[r*maxb, r*maxb + its block count); a rank
 * with fewer blocks leaves its tail of `mine` at zero (never written). */
static double norm_of_partials(FmReduce *g) {
  const int64_t maxb = g->norm_nb;
  double *mine = g->norm_mine, *all = g->norm_all, *ordered = g->norm_ordered;
  FM_CHECK(fm_comm_allgather(g->comm, mine, all, maxb, FM_DT_F64));
  int64_t k = 0;
  for (int r = 0; r < g->P; r++) {
    int64_t nb = fm_clip_nblocks(g->lo[r], g->hi[r], FM_DIST_BLOCK);
    for (int64_t j = 0; j < nb; j++) ordered[k++] = all[(int64_t)r * maxb + j];
  }
  return fm_clip_norm(ordered, k);
}

double fm_reduce_grad_norm(FmReduce *g, const float *shard) {
  FM_CHECK(fm_clip_block_sumsq(shard, fm_reduce_lo(g), fm_reduce_hi(g), FM_DIST_BLOCK, g->norm_mine));
  return norm_of_partials(g);
}

double fm_reduce_grad_norm_device(FmReduce *g, const FmBackend *be, const float *shard_d, double *blocks_d) {
  const int64_t lo = fm_reduce_lo(g), hi = fm_reduce_hi(g), nb = fm_clip_nblocks(lo, hi, FM_DIST_BLOCK);
  be->block_sumsq(blocks_d, shard_d, hi - lo, FM_DIST_BLOCK);
  if (nb > 0) be->copy_to_host(g->norm_mine, blocks_d, nb * (int64_t)sizeof *g->norm_mine);
  return norm_of_partials(g);
}
