/* dist.h: the one owner of sharded state (src/dist/, DESIGN section 2): the
 * block size every shard boundary is cut at, the ZeRO-1 shard map, the exact
 * data-parallel gradient reduction, the global gradient norm in a
 * rank-independent block order, the clip factor, the parameter all-gather,
 * and the table of sharded state (parameters, optimizer moments, reduce
 * scales, spike window) that checkpoints walk (ckpt.c).
 *
 * Layout today: the flat parameter vector (the model's tensor table) is
 * replicated over tensor-parallel ranks (tp = 1 only) and its optimizer state
 * is split over data-parallel ranks in whole FM_DIST_BLOCK blocks
 * (fm_zero_range).
 *
 * Exact mode (reduce.c) (DESIGN section 6): each micro-batch gradient is added into an
 * int64 fixed-point accumulator, q = round(g * 2^s[blk]) with one power-of-two
 * scale per block of FM_DIST_BLOCK elements. Integer sums are exact and
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
 * reduce-scatters move a padded layout where rank r's shard sits at r*S (the
 * all-gather without a window goes in place, unpadded, where one MPI call
 * carries it). */
#ifndef FMHPC_DIST_H
#define FMHPC_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "fmhpc/model.h"
#include "fmhpc/optim.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tensor.h"

/* The one block size: ZeRO-1 shards, the exact reduction's scales, the
 * global norm's partial sums and the checkpoint checksums are all cut at
 * multiples of it. Its boundaries depend only on the element index, never on
 * the rank count (DESIGN section 5). */
#define FM_DIST_BLOCK ((int64_t)1 << 16)

/* ---- ZeRO-1 shard map (zero.c) ------------------------------------------ */
/* Rank r of P owns [lo, hi): the n elements cut into `align`-element blocks
 * (the last may be short) and the blocks dealt out contiguously, rank r
 * getting blocks [floor(r*nb/P), floor((r+1)*nb/P)). Boundaries are
 * multiples of align (or n), so global-norm blocks never straddle ranks. */
void fm_zero_range(int64_t n, int64_t align, int nranks, int rank, int64_t *lo, int64_t *hi);

/* ---- global-norm clipping (clip.c) -------------------------------------- */
/* Number of blocks of `block` elements that [lo, hi) covers (lo a multiple of
 * block; hi a multiple of block or the end of the vector). */
int64_t fm_clip_nblocks(int64_t lo, int64_t hi, int64_t block);
/* out_blocks[j] = sum of g[i]^2 over block j of the shard, in double, in
 * element order; g points at element lo. FM_EINVAL unless lo is a multiple of
 * block. Each block is one thread's sequential sum: same bits for any thread
 * count. The train loop all-gathers the block sums (exactly: they are copied,
 * not added) and calls fm_clip_norm over all blocks in global order. */
int fm_clip_block_sumsq(const float *g, int64_t lo, int64_t hi, int64_t block, double *out_blocks);
/* sqrt of the sum of the block sums, added in block order. */
double fm_clip_norm(const double *block_sumsq, int64_t nblocks);
/* The factor to multiply gradients by, as torch.nn.utils.clip_grad_norm_:
 * min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables (1). A non-finite
 * norm gives NaN: the caller skips that step. */
double fm_clip_scale(double norm, double max_norm);

/* ---- exact data-parallel reduction (reduce.c) ---------------------------- */
typedef struct FmReduce {
  bool exact;
  bool fresh;             /* no micro-batch added since fm_reduce_begin: the next one stores (no zeroing pass) */
  bool stream;            /* that store bypasses the caches (an accumulator larger than them; reduce.c) */
  bool acc_read;          /* shm: some rank read acc since the last fm_comm_shm_sync (a write waits for one) */
  bool gather_read;       /* shm: the same for gather */
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
  int64_t *acc_shard;     /* (S) reduce-scatter result (exact, P > 1) */
  FmRing *ring;           /* the int64 reduce-scatter's pipeline (exact, P > 1) */
  FmOwnerSum *osum;       /* the per-bucket exchange (exact, mpi, P > 1), made by the first fm_reduce_bucket */
  FmShm *shm;             /* exact with every dp rank on one node (else NULL: ring, osum): acc and gather live in
                             this shared window; each owner sums its shard from every rank's acc, reads the
                             others' gather */
  float *gather;          /* (S) with shm: this rank's part of the parameter all-gather */
  int64_t bucketed;       /* elements of the step's last micro-batch given by fm_reduce_bucket */
  const float *deferred;  /* one rank, the step's only micro-batch given by buckets: its gradient, checked there
                             and turned into the shard by fm_reduce_finish in one pass (no int64 store; reduce.c) */
  float *sendf, *shardf;  /* (P*S, exact: S), (P*S) staging (fast mode; the all-gather at P > 1 where the
                             in-place one cannot run: at create, or once on first use for the max_count knob) */
  int *ag_count, *ag_displ; /* (P) each rank's range for the in-place all-gather (P > 1, no window, n <= INT_MAX) */
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
  const FmBackend *dev;   /* exact mode on a device backend: its quant_add quantises each micro-batch where the
                             gradient is (fm_reduce_use_device); NULL: the host path (add_block) */
  int64_t *d_acc;         /* (P*S) the accumulator on the device */
  float *d_amax;          /* (nblocks) */
  int32_t *d_flags;       /* (2) overflow, NaN/Inf */
  int32_t *d_exp2;        /* (nblocks) this step's scales: uploaded, or computed on the device (d_amax_prev) */
  bool locate;            /* the device saw NaN/Inf: the step is computed again on the host path to name it */
  FmComm *nccl;           /* the exchange over this device communicator (fm_reduce_use_nccl); NULL: MPI, host */
  int64_t *d_acc_shard;   /* (S) the reduce-scatter's sums on the device */
  int32_t *d_flags_all;   /* (2) the flags agreed over ranks */
  float *d_shard;         /* (S) the reduced shard on the device: the caller's, or d_own */
  float *d_own;           /* the shard's device buffer when the caller gave none (finish copies it to the host) */
  float *d_send;          /* (S) the parameter all-gather's staging on the device, zero past this rank's shard */
  float *d_gather;        /* (P*S) the gathered shards, padded layout */
  const float *d_grad;    /* fast mode over NCCL (fm_reduce_use_nccl_fast): the model's summed gradient (n) */
  float *d_sendf;         /* (P*S) its padded layout for the fp32 reduce-scatter, zero past each rank's range */
  double *d_blocks;       /* (norm_nb) the reduced shard's block sums of squares (the NaN/Inf check) */
  float *d_amax_prev;     /* NCCL and a block_scales op: (nblocks) amax_prev on the device, from which
                             fm_reduce_begin computes the scales there; NULL: the host computes them */
  bool amax_on_dev;       /* d_amax_prev is newer than amax_prev (fm_reduce_scales_to_host) */
  int64_t rb_bytes;       /* fm_reduce_readback: device bytes after d_flags_all read with the flags, to rb_dst */
  void *rb_dst;           /* ... the caller's host buffer */
  char *rb_host;          /* (8 + rb_bytes) the one copy's host staging */
  bool rb_read;           /* this step's last finish read them (fm_reduce_readback_done) */
} FmReduce;

int fm_reduce_create(FmReduce *g, int64_t n, int64_t M, bool exact, FmComm *dp);
/* amax_prev up to date on the host (a copy from the device when d_amax_prev
 * is newer): before a checkpoint reads it. */
void fm_reduce_scales_to_host(FmReduce *g);
void fm_reduce_free(FmReduce *g);
/* The accumulator size (bytes, P*S int64) from which a step's first
 * micro-batch is stored with streaming stores (default 64 MiB; < 0: the
 * default); returns the old value. Tests set 0 to run that path. */
int64_t fm__reduce_set_stream_min(int64_t bytes);
/* This rank's shard. */
static inline int64_t fm_reduce_lo(const FmReduce *g) { return g->lo[g->r]; }
static inline int64_t fm_reduce_hi(const FmReduce *g) { return g->hi[g->r]; }

/* Start a step (or its redo): scales from amax_prev, accumulator zeroed. */
void fm_reduce_begin(FmReduce *g);
/* Exact mode: add one micro-batch gradient (n floats, host). */
void fm_reduce_add(FmReduce *g, const float *grad);
/* Exact mode on a device backend with a quant_add op: each micro-batch is
 * quantised on the device into a device accumulator (the same integers as
 * add_block: bitwise), and fm_reduce_finish copies the accumulator, maxima
 * and flags to the host once per step for the collectives. A step whose
 * gradient holds NaN/Inf is computed again on the host path (finish returns
 * 1 without counting a redo), which names the first such element as on the
 * CPU; the scales stay. */
void fm_reduce_use_device(FmReduce *g, const FmBackend *be);
/* Whether this micro-batch goes to fm_reduce_add_device (else fm_reduce_add). */
static inline bool fm_reduce_on_device(const FmReduce *g) { return g->exact && g->dev && !g->locate; }
/* Add one micro-batch gradient (n floats, device memory of the backend). */
void fm_reduce_add_device(FmReduce *g, const float *dgrad);
/* Exact mode, host path: the step's last micro-batch given range by range
 * while the backward pass still runs, instead of fm_reduce_add: [lo, hi) of
 * `grad` (the whole host gradient vector; those elements final) is quantised
 * into the accumulator exactly as fm_reduce_add would (same integers, same
 * maxima and flags: every value is decided by its own block's scale, which
 * comes from amax_prev as before) and its exchange to the shard owners is
 * started at once, progressed by each later call; fm_reduce_finish then waits
 * for the rest. The ranges of one step must be disjoint, cover [0, n), and
 * come in the same order on every rank (the model's backward order). The
 * bits are those of fm_reduce_add + fm_reduce_finish: integer sums are exact
 * in any order, and the overflow / NaN decisions are still taken over all
 * ranks in fm_reduce_finish (an exchange started before a redo is drained
 * and dropped). At one rank, when no fm_reduce_add came before in the step,
 * the buckets only check their ranges (maxima, flags) and fm_reduce_finish,
 * which must then be given the same `grad`, unchanged since, quantises and
 * dequantises in one pass: the same bits, a quarter of the memory traffic. */
void fm_reduce_bucket(FmReduce *g, const float *grad, int64_t lo, int64_t hi);
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
/* The exact reduction's exchange on the device, over `nccl` (the dp group's
 * NCCL communicator, fm_mesh_nccl; after fm_reduce_use_device): finish then
 * agrees the flags by allreduce(max) of the device's flags, the block maxima
 * by allreduce(max) on the device (one copy of them to the host for the next
 * scales), reduce-scatters the int64 accumulator on the device (integer sums:
 * the same bits as the MPI ring for any algorithm and rank count) and turns
 * the sums into the fp32 shard with the backend's dequant op (the host's
 * rounding, bitwise) in `shard_d` (S floats of device memory). shard_d NULL:
 * a buffer of its own, copied to finish's shard_out. With shard_d given,
 * finish leaves the shard there (and, when a NaN/Inf sent the step to the host
 * path, in shard_out too); shard_out is not written on the device path. The
 * redo on NaN/Inf stays on the host over g->comm (MPI), as without NCCL. */
void fm_reduce_use_nccl(FmReduce *g, FmComm *nccl, float *shard_d);
/* Exact mode over NCCL: `bytes` of device memory (8-byte aligned) right after
 * the agreed flags, which fm_reduce_finish reads to host_dst in the flags'
 * copy: one read a step for both (train.c: the micro-batch losses). The
 * pointer (owned here), or NULL without that path. fm_reduce_readback_done:
 * the step's last finish read them (not after a redo on the host path). */
void *fm_reduce_readback(FmReduce *g, int64_t bytes, void *host_dst);
static inline bool fm_reduce_readback_done(const FmReduce *g) { return g->rb_read; }
/* Fast mode (fp32 sums) with a device backend and NCCL: fm_reduce_finish
 * sums the model's gradient `grad_d` (n floats of device memory, the
 * micro-batches already summed there) with an fp32 ncclReduceScatter straight
 * into `shard_d` (S floats of device memory); shard_out is not written. NaN/Inf:
 * the reduced shard's block sums of squares (be->block_sumsq, nb doubles to the
 * host) say whether any rank's gradient held one (sums carry them); then every
 * rank copies its gradient to the host once to name the first such element,
 * and the step is skipped as on the host path. Not bitwise across rank counts
 * (fp32 sums, by design); run to run at a fixed rank count as NCCL's
 * reduce-scatter is (a fixed algorithm and topology). No-op in exact mode. */
void fm_reduce_use_nccl_fast(FmReduce *g, const FmBackend *be, FmComm *nccl, const float *grad_d, float *shard_d);
/* fm_reduce_allgather over the device communicator: w is the whole vector in
 * device memory; this rank's shard of it goes to every rank. */
int fm_reduce_allgather_device(FmReduce *g, float *w);
/* Global gradient norm over the shards, in blocks whose boundaries do not
 * depend on P (fm_clip_block_sumsq on each shard, gathered exactly). */
double fm_reduce_grad_norm(FmReduce *g, const float *shard);
/* The same norm (the same bits) of this rank's shard held on a device:
 * be->block_sumsq writes the shard's per-block partials into blocks_d (at
 * least g->norm_nb doubles of be's memory), those few doubles are copied
 * back, and the rest is fm_reduce_grad_norm's exact gather and sum. */
double fm_reduce_grad_norm_device(FmReduce *g, const FmBackend *be, const float *shard_d, double *blocks_d);

/* ---- the table of sharded state (state.c) --------------------------------- */
/* Every array a run must save to continue bit for bit, with its layout, in
 * the order a checkpoint stores it. The checkpoint code walks this table and
 * knows nothing of the modules the arrays belong to. */
typedef enum FmDistLayout {
  FM_DIST_FLAT_SHARD, /* f32 over the flat parameter vector (named and shaped by `params`); this rank
                         holds [lo, hi) and data points at element lo */
  FM_DIST_WHOLE_F32,  /* n f32 values every rank holds whole (the same on all) */
  FM_DIST_WHOLE_F64   /* n f64 values every rank holds whole */
} FmDistLayout;

enum { FM_DIST_MAX_STATE = 8 };

typedef struct FmDistEntry {
  char name[64]; /* the checkpoint group or dataset: "params", "optim/m", "reduce/amax_prev", "spike/losses" */
  FmDistLayout layout;
  void *data;
  int64_t n; /* elements (whole layouts); hi - lo for a flat shard */
} FmDistEntry;

typedef struct FmDistState {
  const FmTensorTable *params; /* canonical tensor names and shapes of the flat vector */
  int64_t lo, hi;              /* this rank's ZeRO-1 shard: multiples of FM_DIST_BLOCK (or numel) */
  int n;
  FmDistEntry e[FM_DIST_MAX_STATE];
} FmDistState;

void fm_dist_state_init(FmDistState *t, const FmTensorTable *params, int64_t lo, int64_t hi);
/* Append one array (aborts past FM_DIST_MAX_STATE: a programming error). */
void fm_dist_state_add(FmDistState *t, const char *name, FmDistLayout layout, void *data, int64_t n);
/* The entry named `name`, or NULL. */
const FmDistEntry *fm_dist_state_find(const FmDistState *t, const char *name);
/* A training run's table: "params" (w, the whole flat vector: the shard
 * [lo, hi) is saved, a load fills it and the caller all-gathers), one
 * "optim/<s>" per optimizer state array (the optimizer's, or `state` when
 * not NULL: the shards of replicated state under &parallel zero = 0), "reduce/amax_prev" (the exact
 * reduction's block maxima) and "spike/losses" when the spike window is on. */
void fm_dist_state_of_run(FmDistState *t, const FmTensorTable *params, float *w, const FmReduce *red, FmOptim *opt,
                          float *const *state, FmSpike *spike);

/* ---- checkpoints under tensor parallelism (tp_state.c) -------------------- */
/* The canonical twin of a run's local table (fm_dist_state_of_run): its
 * `s` is what fm_ckpt_write and fm_ckpt_read take (the canonical parameter
 * table, the canonical ZeRO-1 shard of this dp rank, one canonical array per
 * flat entry; /reduce/amax_prev as every tp rank's block scales in rank
 * order followed by tp). Whole entries other than the scales are shared. */
typedef struct FmDistCanon {
  FmDistState s;
  float *buf[FM_DIST_MAX_STATE]; /* (cn) canonical arrays of the flat entries, by local entry index */
  float *amax;                   /* (n_amax) */
  float *tmp;                    /* (local_numel) */
  float *stage;                  /* ((dp + 1) * smax) */
  int64_t *nb_all;               /* (tp) each tp rank's block count */
  int64_t cn, n, local_numel, smax, nb_max, nb_before, n_amax;
} FmDistCanon;

/* Collective over tp (block counts). */
void fm_dist_canon_init(FmDistCanon *c, const FmDistState *loc, FmModel *m, const FmReduce *red, FmComm *dp,
                        FmComm *tp);
void fm_dist_canon_free(FmDistCanon *c);
/* Before a write: the canonical arrays from every rank's shards (collective
 * over dp and tp; every rank ends with them whole). */
void fm_dist_canon_gather(FmDistCanon *c, const FmDistState *loc, FmModel *m, FmReduce *red, FmComm *tp);
/* After a read of c->s on every dp group: this rank's shards into loc's
 * arrays (collective over dp). scales_read: the file's scales were loaded
 * (not FmCkptState.scales_skipped). Returns 1 when the block scales were
 * restored (same tp), 0 when loc's are kept (another tp). */
int fm_dist_canon_scatter(FmDistCanon *c, FmDistState *loc, FmModel *m, FmComm *dp, FmComm *tp, int scales_read);

#endif
