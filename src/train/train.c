/* train.c: task='train', the step loop. It should read like pseudocode:
 *
 *   for each step:
 *     read this rank's micro-batches; count the step's unmasked targets (all ranks)
 *     forward + backward each micro-batch; reduce gradients onto ZeRO-1 shards
 *     global grad norm; skip on a loss spike or NaN; clip; optimizer on the shard
 *     all-gather the updated parameters; log; validate every N steps
 *
 * What makes the bits independent of the rank count lives in reduce.c (exact
 * gradient sums), data/sampler.c (stateless sample order) and here: the loss is
 * gathered per micro-batch and summed in micro-batch order, validation batches
 * likewise. Setup, evaluation and reporting are below the loop. */
#define _GNU_SOURCE /* fopencookie: setup messages kept per rank */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fmhpc/ckpt.h"
#include "fmhpc/data.h"
#include "fmhpc/dist.h"
#include "fmhpc/eval.h"
#include "fmhpc/hash.h"
#include "fmhpc/interop.h"
#include "fmhpc/json.h"
#include "fmhpc/metrics.h"
#include "fmhpc/model.h"
#include "fmhpc/optim.h"
#include "fmhpc/rng.h"
#include "fmhpc/train.h"

typedef struct Run {
  const FmDeck *deck;
  const FmConfig *c;
  FmComm *dp;
  FmComm *tp;  /* the mesh's tensor-parallel group (size 1: none) */
  bool lead;   /* dp rank 0 and tp rank 0: writes metrics, the summary and final/ */
  float *gtmp; /* tp > 1: (S) the shard with replicated tensors zeroed on tp ranks > 0 (the global norm) */
  const FmBackend *be;
  int use_nccl; /* &parallel comm resolved (fm_comm_choose): device collectives over NCCL */
  const FmModelKind *kind;
  FmModelDims dims;
  FmModel *model;
  FmStore *train, *valid;
  FmSampler sampler;
  int64_t B, b, M, T, first, count; /* this rank's micro-batches [first, first+count) */
  FmBatch *mb;                      /* (count) micro-batches of the current step */
  float *weights;                   /* (count, b*T) token weights */
  int64_t *ids;                     /* (b) sample ids of one micro-batch */
  double *mloss, *mloss_all;        /* per micro-batch loss sums: mine, all (M) */
  double *mloss_d; /* device backend: (count) the losses as the device leaves them, read once a step; else NULL */
  bool mloss_own;  /* mloss_d is ours (else fm_reduce_readback's: read with the exact exchange's flags) */
  FmReduce red;
  FmOptim *opt;
  FmSchedule sched;
  FmSpike spike;
  float *gshard;   /* (S) this rank's reduced shard (hi-lo floats) as the host exchange writes it */
  float *gshard_d; /* device backend: (S) this rank's reduced shard, hi-lo floats, on the device: what the norm, clip
                      and optimizer read. Filled from gshard after fm_reduce_finish (comm 'mpi'); a device
                      exchange (NCCL) writes it directly. NULL on a host backend */
  float *wh, *gh;  /* the weights and one gradient as the host sees them: the model's arenas on a host
                      backend; on a device backend (CUDA) host copies: gh for the host reduction paths, wh a
                      mirror of the device's weights refreshed by host_mirror() (checkpoints, the final
                      hash and export) and the all-gather's staging */
  float *gfull;    /* &parallel zero = 0: (numel) the whole gradient, for the replicated optimizer; else NULL */
  float *gfull_d;  /* ... and on a device backend its copy on the device */
  double *norm_d;  /* device backend: (red.norm_nb) the grad norm's block partials */
  float **state_shard; /* &parallel zero = 0: each optimizer state array at this rank's shard (checkpoints) */
  FmMetrics *metrics;
  double flops_per_step, peak_flops_rank;
  int64_t skipped;
  int64_t bad_run;    /* consecutive steps with a non-finite loss or gradient */
  int64_t nan_at[3];  /* FMHPC_TEST_NAN_AT: first step (1-based), last step, rank; nan_at[0] = 0: off */
  int64_t nan_offset; /* ... and the element it poisons */
  bool buckets;       /* exact mode on the CPU path: the last micro-batch's exchange starts during its backward */
  char ckpt_dir[4096];
  char run_id[FM_CKPT_RUN_ID_LEN]; /* made at a fresh start, carried by checkpoints */
  char *deck_text;                 /* the resolved deck, stored in checkpoints */
  char *resume_changes;            /* metrics.jsonl record of keys changed since the checkpoint, or NULL */
  FILE *ids_log;                   /* tests: FMHPC_TEST_SAMPLE_IDS=PATH appends each rank's sample ids to PATH.<rank> */
  bool locked;                     /* the lead rank holds out_dir's lock (lock_fd) */
  int lock_fd;
} Run;

static FmModelInput model_input(const FmBatch *mb, const int32_t *targets) {
  FmModelInput in = {mb->tokens, targets ? targets : mb->targets, mb->position_ids, mb->segment_ids};
  return in;
}

/* ---- device buffers ----------------------------------------------------- */
/* On a backend whose buffers the host cannot read (CUDA), forward, backward
 * and the update run on the device: the fp32 master weights (the model's
 * arena) and the optimizer state (fm_optim_use_device) live there, the
 * reduced shard is gshard_d, and the grad norm's block partials, the clip and
 * the AdamW/Lion/Sophia update are device ops. What still crosses per step
 * with comm 'mpi' is the exchange's host staging: exact mode's int64
 * accumulator (fm_reduce_finish) or fast mode's summed gradient (grad_to_host),
 * the reduced shard up (one copy), and at dp > 1 the parameter all-gather
 * (my shard down, the others' up); &parallel zero = 0 also stages the whole
 * gradient. The host mirrors wh and the optimizer's state arrays are refreshed
 * only where the host reads them (host_mirror: checkpoint writes, the final
 * hash and export) and loaded up once on a resume. tp > 1 on a device keeps the
 * old host update (weights copied back each step). On the CPU backend wh and
 * gh are the arenas and these copy nothing. */
static void grad_to_host(Run *r) {
  if (r->gh == fm_model_grad_arena(r->model)) return;
  r->be->copy_to_host(r->gh, fm_model_grad_arena(r->model), fm_model_params(r->model)->numel * (int64_t)sizeof(float));
}

static void weights_to_device(Run *r) {
  if (r->wh == fm_model_param_arena(r->model)) return;
  r->be->copy_to_device(fm_model_param_arena(r->model), r->wh,
                        fm_model_params(r->model)->numel * (int64_t)sizeof(float));
}

/* The host mirrors of the device's weights and optimizer state, brought up to
 * date where the host reads them (a checkpoint write, the final hash and
 * export); never inside a step. */
static void host_mirror(Run *r) {
  if (r->wh == fm_model_param_arena(r->model)) return;
  r->be->copy_to_host(r->wh, fm_model_param_arena(r->model), fm_model_params(r->model)->numel * (int64_t)sizeof(float));
  fm_optim_state_to_host(r->opt);
}

/* Where the step's work runs, for the log: the CPU's GEMM, or the device's share. */
static const char *where_ops(const Run *r) {
  if (r->be->host_accessible) return fm_cpu_blas_info();
  if (!r->gshard_d) { /* tp > 1: the update on host copies */
    if (r->red.nccl)
      return "model ops, the exact quantisation and its exchange (NCCL) on the device, optimizer on host";
    return r->red.dev ? "model ops and the exact quantisation on the device, collectives and optimizer on host copies"
                      : "model ops on the device, reduction and optimizer on host copies";
  }
  if (r->red.nccl && !r->red.exact)
    return "model ops, the fp32 gradient sum (NCCL), grad norm, clip and optimizer (fp32 weights and state "
           "resident) on the device";
  if (r->red.nccl)
    return "model ops, the exact quantisation and its exchange (NCCL), grad norm, clip and optimizer (fp32 weights "
           "and state resident) on the device";
  return r->red.dev ? "model ops, the exact quantisation, grad norm, clip and optimizer (fp32 weights and state "
                      "resident) on the device, collectives over MPI on host copies"
                    : "model ops, grad norm, clip and optimizer (fp32 weights and state resident) on the device, "
                      "reduction over MPI on host copies";
}

/* ---- the step --------------------------------------------------------- */

/* Read this rank's micro-batches of `step` and set token weights to
 * mask / (unmasked targets of the whole step, all ranks). -1 when a batch is
 * bad on any rank (its message printed there): every rank stops alike. */
static int64_t read_step(Run *r, int64_t step) {
  int64_t mine = 0, all = 0, bad = 0;
  for (int64_t i = 0; i < r->count; i++) {
    fm_sampler_micro_ids(&r->sampler, step, r->first + i, r->ids);
    if (r->ids_log) /* FMHPC_TEST_SAMPLE_IDS */
      for (int64_t j = 0; j < r->b; j++)
        fprintf(r->ids_log, "step %lld slot %lld sample %lld\n", (long long)step + 1,
                (long long)fm_sampler_samples_at(&r->sampler, step) + (r->first + i) * r->b + j, (long long)r->ids[j]);
    /* a bad row (ids out of range ...) is the store's message; the reads stay collective */
    if (fm_store_read_batch_coll(r->train, r->ids, r->b, &r->mb[i])) bad = 1;
    for (int64_t n = 0; n < r->b * r->T; n++) mine += r->mb[i].loss_mask[n];
  }
  FM_CHECK(fm_comm_allreduce(r->dp, &bad, &bad, 1, FM_DT_I64, FM_OP_MAX));
  if (bad) return -1;
  FM_CHECK(fm_comm_allreduce(r->dp, &mine, &all, 1, FM_DT_I64, FM_OP_SUM));
  const float w = all > 0 ? (float)(1.0 / (double)all) : 0.0f;
  for (int64_t i = 0; i < r->count; i++)
    for (int64_t n = 0; n < r->b * r->T; n++) r->weights[i * r->b * r->T + n] = r->mb[i].loss_mask[n] ? w : 0.0f;
  return all;
}

/* Any tp rank's flag (tp > 1): a redo or a skip runs on the whole group,
 * whose forward and backward exchange activations. */
static int tp_any(const Run *r, int flag) {
  int32_t mine = flag != 0, any = mine;
  if (r->tp->size > 1) FM_CHECK(fm_comm_allreduce(r->tp, &mine, &any, 1, FM_DT_I32, FM_OP_MAX));
  return any;
}

/* The model's backward finished [lo, hi) of the last micro-batch's gradient:
 * quantised and its exchange started while the backward goes on (reduce.c). */
static void bucket_ready(void *ctx, int64_t lo, int64_t hi) {
  Run *r = ctx;
  fm_reduce_bucket(&r->red, r->gh, lo, hi);
}

/* Forward + backward of every micro-batch, reduced onto this rank's shard
 * (computed again with wider scales if the exact reduction overflowed).
 * Returns the step's loss summed in micro-batch order (any rank count). */
static double grads_of_step(Run *r, int64_t t, const int32_t *const *targets, bool *nonfinite) {
  float *grad = r->gh;
  /* Buckets, unless the test hook poisons a gradient after its backward (every rank decides alike). */
  const bool buckets = r->buckets && !(r->nan_at[0] && t >= r->nan_at[0] && t <= r->nan_at[1]);
  do {
    fm_reduce_begin(&r->red);
    fm_model_zero_grad(r->model);
    for (int64_t i = 0; i < r->count; i++) {
      if (r->red.exact && i > 0) fm_model_zero_grad(r->model);
      FmModelInput in = model_input(&r->mb[i], targets ? targets[i] : NULL);
      const bool bucket = buckets && i == r->count - 1;
      if (bucket) fm_model_set_grad_ready(r->model, bucket_ready, r);
      if (r->mloss_d) /* on the device: no read per micro-batch */
        fm_model_forward_backward_dev(r->model, &in, r->weights + i * r->b * r->T, true, r->mloss_d + i);
      else
        r->mloss[i] = fm_model_forward_backward(r->model, &in, r->weights + i * r->b * r->T, true);
      fm_model_set_grad_ready(r->model, NULL, NULL);
      if (i == 0 && r->nan_at[0] && t >= r->nan_at[0] && t <= r->nan_at[1] && r->dp->rank == r->nan_at[2]) {
        const float nan = NAN; /* the test hook: one rank's gradient poisoned */
        r->be->copy_to_device(fm_model_grad_arena(r->model) + r->nan_offset, &nan, sizeof nan);
      }
      if (fm_reduce_on_device(&r->red)) {
        fm_reduce_add_device(&r->red, fm_model_grad_arena(r->model));
      } else if (r->red.exact && !bucket) {
        grad_to_host(r);
        fm_reduce_add(&r->red, grad);
      }
    }
    if (!r->red.exact && !r->red.d_sendf) grad_to_host(r); /* fast mode over MPI: the sum on host copies */
  } while (tp_any(r, fm_reduce_finish(&r->red, grad, r->gshard, nonfinite)));
  if (r->mloss_d && !fm_reduce_readback_done(&r->red)) /* one read (NCCL: already, with the flags) */
    r->be->copy_to_host(r->mloss, r->mloss_d, r->count * (int64_t)sizeof *r->mloss);
  *nonfinite = tp_any(r, *nonfinite);
  if (r->gshard_d && !r->red.nccl && !*nonfinite) /* the exchange ran on the host (MPI): one copy of the shard */
    r->be->copy_to_device(r->gshard_d, r->gshard,
                          (fm_reduce_hi(&r->red) - fm_reduce_lo(&r->red)) * (int64_t)sizeof(float));
  FM_CHECK(fm_comm_allgather(r->dp, r->mloss, r->mloss_all, r->count, FM_DT_F64));
  double loss = 0;
  for (int64_t m = 0; m < r->M; m++) loss += r->mloss_all[m];
  return loss;
}

/* The global gradient norm. At tp > 1 each tp rank's dp group computes the
 * norm of its local vector (dp-independent blocks, reduce.c) with the
 * replicated tensors (norms, row-parallel biases, GPT-2's wpe: the same
 * gradient on every tp rank) counted by tp rank 0 only; the squares are
 * then added in tp rank order: the same bits for any dp at a fixed tp. */
static double grad_norm(Run *r) {
  if (r->gshard_d) return fm_reduce_grad_norm_device(&r->red, r->be, r->gshard_d, r->norm_d); /* tp 1 */
  if (r->tp->size == 1) return fm_reduce_grad_norm(&r->red, r->gshard);
  const int64_t lo = fm_reduce_lo(&r->red), hi = fm_reduce_hi(&r->red);
  memcpy(r->gtmp, r->gshard, (size_t)(hi - lo) * sizeof *r->gtmp);
  const FmTensorTable *pt = fm_model_params(r->model);
  for (int i = 0; r->tp->rank > 0 && i < pt->n; i++) {
    if (!fm_model_tp_replicated(r->model, i)) continue;
    const int64_t a = pt->t[i].offset > lo ? pt->t[i].offset : lo;
    const int64_t b = pt->t[i].offset + pt->t[i].numel < hi ? pt->t[i].offset + pt->t[i].numel : hi;
    if (a < b) memset(r->gtmp + (a - lo), 0, (size_t)(b - a) * sizeof *r->gtmp);
  }
  const double n = fm_reduce_grad_norm(&r->red, r->gtmp);
  double mine = n * n, all[64], ss = 0;
  if (r->tp->size > 64) fm_abort_one(1, "tp = %d: at most 64", r->tp->size);
  FM_CHECK(fm_comm_allgather(r->tp, &mine, all, 1, FM_DT_F64));
  for (int q = 0; q < r->tp->size; q++) ss += all[q];
  return sqrt(ss);
}

/* The gradient the optimizer takes: this rank's shard (ZeRO-1), or with
 * &parallel zero = 0 the whole vector gathered from the shards. */
static float *opt_grad(Run *r) {
  const int64_t lo = fm_reduce_lo(&r->red), len = fm_reduce_hi(&r->red) - lo;
  if (r->gshard_d) { /* the shard is on the device (grads_of_step) */
    if (!r->gfull) return r->gshard_d;
    if (r->red.nccl) { /* NCCL: gathered on the device */
      r->be->copy(r->gfull_d + lo, r->gshard_d, len * (int64_t)sizeof(float));
      FM_CHECK(fm_reduce_allgather_device(&r->red, r->gfull_d));
      return r->gfull_d;
    }
    r->be->copy_to_host(r->gfull + lo, r->gshard_d, len * (int64_t)sizeof(float)); /* MPI: host staging */
    FM_CHECK(fm_reduce_allgather(&r->red, r->gfull));
    r->be->copy_to_device(r->gfull_d, r->gfull, fm_model_params(r->model)->numel * (int64_t)sizeof(float));
    return r->gfull_d;
  }
  if (!r->gfull) return r->gshard;
  memcpy(r->gfull + lo, r->gshard, (size_t)len * sizeof(float));
  FM_CHECK(fm_reduce_allgather(&r->red, r->gfull));
  return r->gfull;
}

/* What an optimizer's per-step hook may ask (FmOptimStepIo; Sophia's
 * Hessian estimate): logits of some rows of one micro-batch, and the step's
 * gradient with other labels, reduced onto this rank's shard. */
typedef struct HookCtx {
  Run *r;
  int64_t t;
} HookCtx;

static void hook_logits(void *ctx, int64_t micro, const int64_t *rows, int64_t nrows, float *out) {
  Run *r = ((HookCtx *)ctx)->r;
  FmModelInput in = model_input(&r->mb[micro], NULL);
  fm_model_logits(r->model, &in, rows, nrows, out);
}

static const float *hook_grad_shard(void *ctx, const int32_t *const *targets, bool *nonfinite) {
  HookCtx *h = ctx;
  grads_of_step(h->r, h->t, targets, nonfinite);
  return opt_grad(h->r); /* the optimizer's range: the shard, or all of it (zero = 0) */
}

/* Numerical policy: a step with a non-finite loss or gradient on any rank is
 * skipped on every rank (the flags are reduced) and counted; nothing of it
 * reaches the weights, the optimizer state or the reduction's scales, so no
 * checkpoint can hold it. max_bad_steps in a row stop the run. */
static int report_nonfinite(const Run *r, int64_t t, double loss) {
  const FmTensorTable *pt = fm_model_params(r->model);
  const int64_t e = r->red.first_bad;
  char what[160];
  /* finite loss and no rank's own gradient non-finite: the fp32 sum over ranks (determinism = 'fast') overflowed */
  snprintf(what, sizeof what, "%s",
           isfinite(loss) ? "the fp32 sum of the ranks' gradients (each rank's own gradient finite: the sum overflowed)"
                          : "the loss (every gradient finite)");
  for (int i = 0; e >= 0 && i < pt->n; i++)
    if (e >= pt->t[i].offset && e < pt->t[i].offset + pt->t[i].numel)
      snprintf(what, sizeof what, "the gradient of %s (element %lld)", pt->t[i].name, (long long)(e - pt->t[i].offset));
  const int64_t max = r->c->train.max_bad_steps;
  fm_warn0("step %lld: non-finite %s, first in %s: step skipped (%lld in a row, &train max_bad_steps = %lld)",
           (long long)t, isfinite(loss) ? "gradient" : "loss", what, (long long)r->bad_run, (long long)max);
  if (r->bad_run < max) return 0;
  if (r->lead)
    fprintf(stderr,
            "fmhpc: step %lld: %lld steps in a row with a non-finite loss or gradient (first non-finite: %s): "
            "stopping; the weights and checkpoints hold no step with NaN/Inf\n"
            "hint: lower &optim lr, check the data, or raise &train max_bad_steps\n",
            (long long)t, (long long)r->bad_run, what);
  return FM_ENUMERIC;
}

/* The step's update, by &parallel zero. 1: each rank updates its shard of
 * the weights and state, then the weights are all-gathered. 0: the optimizer
 * state is replicated: the gradient shards are all-gathered and every rank
 * updates the whole vector (elementwise, so the same bits as ZeRO-1). */
static void update(Run *r, int64_t t, double lr) {
  float *w = r->gshard_d ? fm_model_param_arena(r->model) : r->wh; /* device: the resident fp32 weights */
  if (r->gfull) {
    fm_optim_step(r->opt, w, opt_grad(r), t, (float)lr);
    if (!r->gshard_d) weights_to_device(r);
    return;
  }
  const int64_t lo = fm_reduce_lo(&r->red);
  fm_optim_step(r->opt, w + lo, opt_grad(r), t, (float)lr);
  if (!r->gshard_d) { /* host weights (the CPU backend, or tp > 1 on a device: copied back) */
    FM_CHECK(fm_reduce_allgather(&r->red, w));
    weights_to_device(r);
    return;
  }
  if (r->red.P == 1) return;
  if (r->red.nccl) { /* NCCL: the all-gather on device buffers */
    FM_CHECK(fm_reduce_allgather_device(&r->red, w));
    return;
  }
  /* MPI all-gather through host staging: my shard down, the others' up */
  r->be->copy_to_host(r->wh + lo, w + lo, (fm_reduce_hi(&r->red) - lo) * (int64_t)sizeof(float));
  FM_CHECK(fm_reduce_allgather(&r->red, r->wh));
  for (int q = 0; q < r->red.P; q++)
    if (q != r->red.r && r->red.hi[q] > r->red.lo[q])
      r->be->copy_to_device(w + r->red.lo[q], r->wh + r->red.lo[q],
                            (r->red.hi[q] - r->red.lo[q]) * (int64_t)sizeof(float));
}

static int train_step(Run *r, int64_t step, FmStepRecord *rec) {
  const double t0 = fm_now_s();
  const int64_t t = step + 1; /* optimizer steps count from 1 */
  const int64_t ntokens = read_step(r, step);
  if (ntokens < 0) return FM_EDATA; /* stated by the store */
  const double t_data = fm_now_s();
  HookCtx hc = {r, t};
  const FmOptimStepIo io = {step, ntokens, &hc, hook_logits, hook_grad_shard};
  fm_optim_before_step(r->opt, &io);

  const double t_grads = fm_now_s();
  bool nonfinite = false;
  const double loss = grads_of_step(r, t, NULL, &nonfinite);
  nonfinite = nonfinite || !isfinite(loss); /* the loss is the same sum on every rank */
  const double t_update = fm_now_s();
  const double norm = nonfinite ? NAN : grad_norm(r);
  const double lr = fm_lr_at(&r->sched, t);
  r->bad_run = nonfinite ? r->bad_run + 1 : 0;
  bool skip = nonfinite || (r->c->train.spike_skip && fm_spike_check(&r->spike, loss, NULL));
  if (!skip) {
    const double scale = fm_clip_scale(norm, r->c->train.grad_clip);
    const int64_t len = fm_reduce_hi(&r->red) - fm_reduce_lo(&r->red);
    if (scale != 1.0 && r->gshard_d)
      r->be->scale_f64(r->gshard_d, scale, len);
    else if (scale != 1.0)
      for (int64_t i = 0; i < len; i++) r->gshard[i] = (float)((double)r->gshard[i] * scale);
    update(r, t, lr);
  } else {
    r->skipped++;
  }
  const double t1 = fm_now_s(), dt = t1 - t0;
  *rec = (FmStepRecord){.step = t,
                        .loss = loss,
                        .lr = lr,
                        .grad_norm = norm,
                        .tokens = ntokens,
                        .step_s = dt,
                        .tokens_per_s = (double)(r->B * r->T) / dt,
                        .data_s = t_data - t0,
                        .compute_s = t_update - t_grads,
                        .update_s = t1 - t_update,
                        .skipped = skip,
                        .redone = r->red.redone};
  rec->mfu = r->peak_flops_rank > 0 ? r->flops_per_step / dt / (r->peak_flops_rank * r->dp->size * r->tp->size) : 0;
  return nonfinite ? report_nonfinite(r, t, loss) : 0;
}

/* ---- setup ------------------------------------------------------------ */

/* This rank's sustained GEMM rate on an n^3 problem at the backend's compute
 * precision: a measured roof, not the vendor's. */
static double measure_peak(const FmBackend *be, int64_t n) {
  const int64_t bytes = n * n * (int64_t)sizeof(float);
  float *h = fm_xcalloc((size_t)(n * n), sizeof *h);
  for (int64_t i = 0; i < n * n; i++) h[i] = (float)(i % 7) * 0.1f;
  float *a = be->alloc(bytes), *c = be->alloc(bytes);
  be->copy_to_device(a, h, bytes);
  be->matmul_fwd(c, a, a, NULL, n, n, n);
  if (be->synchronize) be->synchronize();
  double best = 1e30;
  for (int k = 0; k < 3; k++) {
    double t0 = fm_now_s();
    be->matmul_fwd(c, a, a, NULL, n, n, n);
    if (be->synchronize) be->synchronize(); /* a device queues the GEMM: time its end */
    double dt = fm_now_s() - t0;
    best = dt < best ? dt : best;
  }
  be->free(a);
  be->free(c);
  free(h);
  return 2.0 * (double)(n * n * n) / best;
}

/* Vendors' dense peaks (no sparsity), TFLOP/s: bf16 on the tensor cores, and
 * fp32 without them (the c=f32 GEMMs are CUBLAS_COMPUTE_32F, no TF32). By
 * cudaGetDeviceProperties' name; the first entry the name contains wins. */
static const struct {
  const char *name;
  double bf16, fp32;
} gpu_peaks[] = {{"H200 NVL", 835.0, 60.0}, {"GH200", 989.4, 66.9}, {"H200", 989.4, 66.9}, {"H100 PCIe", 756.0, 51.2},
                 {"H100 NVL", 835.0, 60.0}, {"H100", 989.4, 66.9},  {"A100", 312.0, 19.5}};

static double gpu_peak(const char *name, bool bf16) {
  for (size_t i = 0; name && i < sizeof gpu_peaks / sizeof gpu_peaks[0]; i++)
    if (strstr(name, gpu_peaks[i].name)) return (bf16 ? gpu_peaks[i].bf16 : gpu_peaks[i].fp32) * 1e12;
  return 0;
}

/* MFU's peak per rank when &log peak_tflops is 0 (train.h), and where it
 * came from (logged). The CPU: this rank's measured fp32 GEMM rate on 512^3 (no vendor
 * figure fits every CPU and thread count). A GPU: the vendor's dense peak of
 * the device at the compute precision; a device the table lacks: measured
 * on a GEMM large enough to fill it (512^3 is launch-bound there: it gave an
 * H200 11.6 TFLOP/s and an MFU of 1333%). */
double fm_train_mfu_peak(const FmBackend *be, bool bf16, char *src, size_t n) {
  if (be->host_accessible) {
    snprintf(src, n, "measured: this rank's fp32 GEMM on 512^3");
    return measure_peak(be, 512);
  }
  char name[256] = "";
  const double vendor =
      be->device_name && be->device_name(name, (int64_t)sizeof name) == FM_OK ? gpu_peak(name, bf16) : 0;
  if (vendor > 0) {
    snprintf(src, n, "%s, the vendor's dense %s peak", name, bf16 ? "bf16 tensor-core" : "fp32 (no TF32)");
    return vendor;
  }
  /* n^3 from 512, doubled while one GEMM takes under 2 ms, up to 4096: a
   * GPU reaches the size that fills it, an emulated device stays small */
  double best = 0;
  int64_t k = 512;
  for (;; k *= 2) {
    const double rate = measure_peak(be, k);
    best = rate > best ? rate : best;
    if (k >= 4096 || 2.0 * (double)(k * k * k) / rate > 2e-3) break;
  }
  snprintf(src, n, "measured: %s GEMM on %lld^3 on %s (not in the vendor table)", bf16 ? "bf16" : "fp32", (long long)k,
           name[0] ? name : "an unnamed device");
  return best;
}

static int open_data(Run *r, FILE *err) {
  const FmConfig *c = r->c;
  int rc = fm_store_open(&r->train, c->data.train, c->data.format, r->dp, err);
  if (rc) return rc;
  const FmStoreInfo *ti = fm_store_info(r->train);
  rc = fm_model_check_store(r->deck, &r->dims, c->data.train, ti->seq_len, ti->vocab_size, err);
  if (rc) return rc;
  if (c->data.valid[0]) {
    rc = fm_store_open(&r->valid, c->data.valid, c->data.format, r->dp, err);
    if (rc) return rc;
    const FmStoreInfo *vi = fm_store_info(r->valid);
    rc = fm_model_check_store(r->deck, &r->dims, c->data.valid, vi->seq_len, vi->vocab_size, err);
    if (rc) return rc;
    if (strcmp(vi->tokenizer_hash, ti->tokenizer_hash) != 0) {
      fm_deck_error(r->deck, err, FM_KEY_data_valid,
                    "was made by another tokenizer than &data train = '%s' (%.16s, %.16s)", c->data.train,
                    vi->tokenizer_hash, ti->tokenizer_hash);
      if (err) fprintf(err, "hint: prep train and valid with the same &prep tokenizer\n");
      return FM_EDECK;
    }
  }
  return fm_sampler_init(&r->sampler, ti->n_seq, r->B, r->b, r->dp->size, r->dp->rank, (uint64_t)c->run.seed, err);
}

/* FMHPC_TEST_NAN_AT=FIRST[-LAST]:RANK:TENSOR (tests only): in steps FIRST to
 * LAST (1-based; LAST defaults to FIRST) rank RANK's gradient gets a NaN in
 * element 0 of the parameter TENSOR, after its first micro-batch. */
static void test_nan_hook_setup(Run *r) {
  const char *at = getenv("FMHPC_TEST_NAN_AT");
  if (!at) return;
  char name[128] = "";
  long long first = 0, last = 0, rank = 0;
  if (sscanf(at, "%lld-%lld:%lld:%127s", &first, &last, &rank, name) != 4) {
    if (sscanf(at, "%lld:%lld:%127s", &first, &rank, name) != 3)
      fm_abort_one(1, "FMHPC_TEST_NAN_AT='%s': expected FIRST[-LAST]:RANK:TENSOR", at);
    last = first;
  }
  const FmTensorTable *pt = fm_model_params(r->model);
  for (int i = 0; i < pt->n && first >= 1 && !r->nan_at[0]; i++)
    if (!strcmp(pt->t[i].name, name)) {
      r->nan_offset = pt->t[i].offset;
      r->nan_at[0] = first;
    }
  if (!r->nan_at[0]) fm_abort_one(1, "FMHPC_TEST_NAN_AT='%s': no step >= 1 or no parameter tensor '%s'", at, name);
  r->nan_at[1] = last;
  r->nan_at[2] = rank;
}

int fm_train_backend_needs(const FmConfig *c) {
  return FM_NEED_MODEL | (c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16 ? FM_NEED_BF16 : 0);
}

static int setup(Run *r, const FmDeck *deck, FmMesh *mesh, FILE *err) {
  FmComm *dp = mesh->dp_comm, *tp = mesh->tp_comm;
  memset(r, 0, sizeof *r);
  r->deck = deck;
  r->c = &deck->c;
  r->dp = dp;
  r->tp = tp;
  r->lead = dp->rank == 0 && tp->rank == 0;
  const FmConfig *c = r->c;
  if (c->train.threads > 0) omp_set_num_threads((int)c->train.threads);
  int status = 0;
  char why[256];
  r->be = fm_backend_choose(c->train.backend, fm_train_backend_needs(c), why, (int)sizeof why, &status);
  /* every rank the same kind of backend, before any collective that depends on it (the GPU binding) */
  int agree = fm_runtime_agree_backend(r->be ? (r->be->host_accessible ? 1 : 2) : 0, "train");
  if (agree) return agree;
  if (!r->be) {
    fm_deck_error(deck, err, FM_KEY_train_backend, "training cannot use this backend: %s", why);
    if (err)
      fprintf(err, "hint: backend = 'auto' or 'cpu' (auto takes CUDA when the build and the device have every op)\n");
    return FM_EDECK;
  }
  fm_log0("backend: %s (%s)", r->be->name, why);
  FmPlan plan; /* the plan's figures, named in an out-of-memory report of a device allocation */
  if (!r->be->host_accessible && fm_plan_make(&plan, deck, dp->size * tp->size, NULL) == 0)
    fm_plan_mem_figures(&plan, deck);
  /* &parallel comm (fm_comm_choose): 'auto' is NCCL on the CUDA backend, MPI
   * on the CPU; 'nccl' on the CPU backend is a deck error with a hint. NCCL
   * carries the exact reduction's exchange on the device (fm_reduce_use_nccl);
   * the small host collectives (token counts, losses, norm partials) stay MPI.
   * On CUDA, with either comm, each rank binds its node-local GPU
   * (fm_runtime_bind_gpu; NCCL takes one rank per GPU) before the model
   * allocates anything there. */
  const char *comm_hint = NULL;
  int comm_rc = fm_comm_choose(c->choice[FM_KEY_parallel_comm], !r->be->host_accessible, &r->use_nccl, why, sizeof why,
                               &comm_hint);
  if (comm_rc) {
    fm_deck_error(deck, err, FM_KEY_parallel_comm, "%s", why);
    if (err && comm_hint) fprintf(err, "hint: %s\n", comm_hint);
    return FM_EDECK;
  }
  fm_log0("comm: %s (%s)", r->use_nccl ? "nccl" : "mpi", why);
  if (!r->be->host_accessible) { /* every comm: each rank on its node-local GPU, before anything is allocated */
    int shared = 0, st = fm_runtime_bind_gpu(&mesh->device, &shared);
    if (!st && shared && r->use_nccl && c->choice[FM_KEY_parallel_comm] == FM_COMM_AUTO) {
      r->use_nccl = 0; /* 'auto' takes what runs: MPI (shared is agreed over the world) */
      fm_log0("comm: mpi (auto: ranks of a node share a GPU, which NCCL refuses)");
    }
    if (!st && shared && r->use_nccl) {
      if (err)
        fprintf(err,
                "fmhpc: &parallel comm = 'nccl' needs one GPU per rank, and ranks of a node share one (see the "
                "warning above)\nhint: one rank per GPU, or comm = 'mpi'\n");
      st = FM_EINVAL;
    }
    if (st) return st;
  }
  if (r->use_nccl) {
    int st = fm_mesh_nccl(mesh);
    if (st) {
      if (err)
        fprintf(err,
                "fmhpc: &parallel comm: the NCCL communicators could not be created (%s; see above)\n"
                "hint: comm = 'mpi' reduces host copies over MPI\n",
                fm_strerror(st));
      return st;
    }
  }
  /* deck rules first: a wrong schedule is reported before a store is opened */
  if (fm_schedule_from_deck(&r->sched, deck, err)) return FM_EDECK;
  if (!c->data.train[0]) { /* before the model is built (20 s of the 124M's allocation and init here) */
    fm_deck_error(r->deck, err, FM_KEY_data_train, "training needs a store (prep's train.json or a .h5 shard)");
    return FM_EDECK;
  }
  r->B = c->train.global_batch;
  r->b = c->train.micro_batch;
  r->M = r->B / r->b;
  const FmModelLoadOpts lo = {r->be, r->b, c->model.recompute, c->model.init_from, true, 0, tp};
  FmLoadedModel lm;
  int rc = fm_model_dims(&lm.dims, NULL, deck, NULL);
  if (!rc && (rc = fm_model_check_tp(&lm.dims, tp->size, deck, err))) return rc;
  rc = fm_model_load(&lm, deck, &lo, dp, err);
  r->kind = lm.kind;
  r->dims = lm.dims;
  r->model = lm.model;
  if (rc) return rc;
  r->T = r->dims.T;
  const int64_t numel = fm_model_params(r->model)->numel;
  r->wh = fm_model_param_arena(r->model);
  r->gh = fm_model_grad_arena(r->model);
  if (!r->be->host_accessible) { /* host copies of the device's weights and gradient */
    r->wh = fm_xcalloc((size_t)numel, sizeof *r->wh);
    r->gh = fm_xcalloc((size_t)numel, sizeof *r->gh);
    r->be->copy_to_host(r->wh, fm_model_param_arena(r->model), numel * (int64_t)sizeof(float));
  }
  if ((rc = open_data(r, err))) return rc;
  fm_sampler_my_micro(&r->sampler, &r->first, &r->count);

  const FmTensorTable *pt = fm_model_params(r->model);
  fm_reduce_create(&r->red, pt->numel, r->M, c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT, dp);
  if (!r->be->host_accessible) fm_reduce_use_device(&r->red, r->be); /* exact: quantised on the device */
  { /* per-layer buckets: exact, the gradient in host memory, tp = 1; FMHPC_REDUCE_BUCKETS=0 turns them off (bench) */
    const char *env = getenv("FMHPC_REDUCE_BUCKETS");
    int32_t on = r->red.exact && r->be->host_accessible && tp->size == 1 && !(env && strcmp(env, "0") == 0), all = 0;
    FM_CHECK(fm_comm_allreduce(dp, &on, &all, 1, FM_DT_I32, FM_OP_MIN));
    r->buckets = all != 0;
    if (r->buckets && dp->size > 1 && !r->red.shm)
      fm_log0("reduce: exact, per-layer buckets (each layer's gradient exchange starts during the last backward)");
    if (r->red.shm) /* reduce.c: every dp rank on this node */
      fm_log0("reduce: exact, owner sums and all-gather through a shared-memory window (FMHPC_REDUCE_SHM=0: the ring)");
  }
  const bool replicated = c->parallel.zero == 0;
  if (replicated) r->gfull = fm_xcalloc((size_t)pt->numel, sizeof *r->gfull);
  if ((rc = fm_optim_create_from_deck(&r->opt, deck, pt, replicated ? 0 : fm_reduce_lo(&r->red),
                                      replicated ? pt->numel : fm_reduce_hi(&r->red), err)))
    return rc;
  if (replicated) {
    const int n = fm_optim_state_table(r->opt)->n;
    r->state_shard = fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof *r->state_shard);  // NOLINT(bugprone-sizeof-expression)
    for (int i = 0; i < n; i++) r->state_shard[i] = fm_optim_state_arrays(r->opt)[i] + fm_reduce_lo(&r->red);
  }
  if (tp->size > 1 && fm_optim_params(r->opt)->kind->hook) { /* Sophia samples labels from full-vocabulary logits */
    fm_deck_error(deck, err, FM_KEY_optim_name,
                  "'%s' samples from full-vocabulary logits each step, which are not gathered over &parallel tp = %d",
                  fm_optim_params(r->opt)->kind->name, tp->size);
    if (err) fprintf(err, "hint: adamw or lion under tp > 1, or tp = 1\n");
    return FM_EDECK;
  }
  fm_spike_init_from_deck(&r->spike, deck);

  r->ids = fm_xcalloc((size_t)r->b, sizeof *r->ids);
  const char *ids_path = getenv("FMHPC_TEST_SAMPLE_IDS");
  if (ids_path) {
    char p[4200];
    snprintf(p, sizeof p, "%s.%d", ids_path, dp->rank);
    r->ids_log = fopen(p, "a");
  }
  r->mb = fm_xcalloc((size_t)(r->count > 0 ? r->count : 1), sizeof *r->mb);
  for (int64_t i = 0; i < (r->count > 0 ? r->count : 1); i++) fm_batch_alloc(&r->mb[i], r->b, r->T);
  r->weights = fm_xcalloc((size_t)(r->count * r->b * r->T), sizeof *r->weights);
  r->mloss = fm_xcalloc((size_t)r->count, sizeof *r->mloss);
  r->mloss_all = fm_xcalloc((size_t)r->M, sizeof *r->mloss_all);
  r->gshard = fm_xcalloc((size_t)r->red.S, sizeof *r->gshard);
  if (tp->size > 1) r->gtmp = fm_xcalloc((size_t)r->red.S, sizeof *r->gtmp);
  if (!r->be->host_accessible && tp->size == 1) { /* the update on the device: weights and state stay there */
    r->gshard_d = fm_backend_alloc(r->be, r->red.S * (int64_t)sizeof *r->gshard_d, FM_MEM_REDUCE);
    r->norm_d = fm_backend_alloc(r->be, r->red.norm_nb * (int64_t)sizeof *r->norm_d, FM_MEM_REDUCE);
    if (replicated) r->gfull_d = fm_backend_alloc(r->be, pt->numel * (int64_t)sizeof *r->gfull_d, FM_MEM_REDUCE);
    fm_optim_use_device(r->opt, r->be);
    fm_backend_name_buffer(fm_model_param_arena(r->model), pt->numel * (int64_t)sizeof(float), "weights");
    fm_backend_name_buffer(r->gshard_d, r->red.S * (int64_t)sizeof *r->gshard_d, "grad shard");
  }
  /* exact mode: the exchange on the device, writing the reduced shard straight into gshard_d (NULL under tp > 1:
   * finish copies it to the host shard) */
  if (r->use_nccl) fm_reduce_use_nccl(&r->red, mesh->dp_nccl, r->gshard_d);
  if (r->gshard_d && fm_model_loss_on_device(r->model) && r->count > 0) { /* the losses stay on the device */
    const int64_t bytes = r->count * (int64_t)sizeof *r->mloss_d;
    r->mloss_d = fm_reduce_readback(&r->red, bytes, r->mloss); /* NCCL: read with the step's flags */
    r->mloss_own = !r->mloss_d;
    if (r->mloss_own) r->mloss_d = r->be->alloc(bytes);
  }
  /* fast mode (tp = 1): the fp32 sum of the device gradient over NCCL into gshard_d */
  if (r->use_nccl && r->gshard_d)
    fm_reduce_use_nccl_fast(&r->red, r->be, mesh->dp_nccl, fm_model_grad_arena(r->model), r->gshard_d);
  if (r->use_nccl && !r->red.nccl)
    fm_log0("comm: determinism = 'fast' sums fp32 host copies over MPI; NCCL carries the exact reduction only");
  const FmOptimRunShape shape = {r->count, r->first, r->b, r->T, r->dims.V, (uint64_t)c->run.seed};
  fm_optim_setup_run(r->opt, &shape);
  test_nan_hook_setup(r);
  r->flops_per_step = r->kind->train_flops_per_token(&r->dims) * (double)(r->B * r->T);
  char src[384] = "&log peak_tflops";
  r->peak_flops_rank =
      c->log.peak_tflops > 0
          ? c->log.peak_tflops * 1e12
          : fm_train_mfu_peak(r->be, c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16, src, sizeof src);
  fm_log0("MFU: against %.4g TFLOP/s a rank (%s)", r->peak_flops_rank / 1e12, src);
  return 0;
}

static void teardown(Run *r) {
  if (r->locked) close(r->lock_fd); /* releases the flock */
  for (int64_t i = 0; i < (r->count > 0 ? r->count : 1) && r->mb; i++) fm_batch_free(&r->mb[i]);
  free(r->mb);
  free(r->weights);
  free(r->ids);
  free(r->mloss);
  free(r->mloss_all);
  free(r->gshard);
  if (r->be) {
    r->be->free(r->gshard_d);
    r->be->free(r->norm_d);
    if (r->mloss_own) r->be->free(r->mloss_d);
    r->be->free(r->gfull_d);
  }
  if (r->model && r->wh != fm_model_param_arena(r->model)) free(r->wh);
  if (r->model && r->gh != fm_model_grad_arena(r->model)) free(r->gh);
  free(r->gtmp);
  free(r->gfull);
  free(r->state_shard);
  if (r->opt) fm_optim_free(r->opt);
  fm_spike_free(&r->spike);
  fm_reduce_free(&r->red);
  if (r->model) fm_model_free(r->model);
  if (r->train) fm_store_close(r->train);
  if (r->valid) fm_store_close(r->valid);
  free(r->deck_text);
  free(r->resume_changes);
  if (r->ids_log) fclose(r->ids_log);
}

/* ---- reporting -------------------------------------------------------- */

static void log_step(const Run *r, const FmStepRecord *s, double elapsed) {
  char tok[32], eta[32];
  const double per = elapsed / (double)s->step;
  const double left = per * (double)(r->c->train.steps - s->step);
  snprintf(eta, sizeof eta, "%dm%02ds", (int)(left / 60), (int)fmod(left, 60.0));
  fm_log0("step %5lld/%lld | loss %.4f | lr %.3e | gnorm %.3f | %s tok/s | MFU %.1f%% | %.0f ms | ETA %s%s",
          (long long)s->step, (long long)r->c->train.steps, s->loss, s->lr, s->grad_norm,
          fm_fmt_count(tok, sizeof tok, (int64_t)s->tokens_per_s), 100.0 * s->mfu, 1000.0 * s->step_s, eta,
          s->skipped ? " | SKIPPED" : "");
}

/* The GEMM plans the backend pinned during the first step (CUDA: one
 * cuBLASLt algorithm per precision and shape, kept for the run), once. */
static void log_gemm_plans(const Run *r) {
  const int64_t need = r->be->gemm_plans_text ? r->be->gemm_plans_text(NULL, 0) : 0;
  if (need <= 0) return;
  char *text = fm_xmalloc((size_t)need + 1);
  r->be->gemm_plans_text(text, need + 1);
  if (need > 0 && text[need - 1] == '\n') text[need - 1] = '\0';
  fm_log0("gemm plans (pinned at the first GEMM of each shape, used every step):\n%s", text);
  free(text);
}

/* &log act_stats: the residual stream's variance after each block, from the
 * last micro-batch's forward of this step (growth with depth is what the
 * residual-scaled init is meant to tame). */
static void log_act_stats(Run *r, int64_t step) {
  double var[1024];
  if (r->dims.L > 1024) return;
  int L = fm_model_act_stats(r->model, var);
  FmStr s;
  fm_str_init(&s);
  for (int l = 0; l < L; l++) fm_str_printf(&s, " %.4g", var[l]);
  fm_log0("act_stats step %lld (rank 0's last micro-batch): residual variance per layer:%s", (long long)step, s.s);
  fm_str_free(&s);
}

/* SHA-256 of the final fp32 weights: a run states what it produced, and two
 * runs that should agree bit for bit can be compared from their summaries. */
static void weights_hash(const float *w, int64_t n, char hex[65]) {
  uint8_t d[32];
  fm_sha256(w, (size_t)n * sizeof(float), d);
  fm_hex(d, 32, hex);
}

/* final_ckpt: "written", "failed" (the run's exit status is not 0, but what
 * it trained is in final/ and this summary) or "none" (&ckpt every = 0). */
/* summary.json through a temporary name: a write that fails (a full disk) is
 * said and leaves no empty or cut file; 0 or FM_EIO. */
static int write_summary(Run *r, const FmStepRecord *last, double val, double secs, const char *hash,
                         const char *final_ckpt) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/summary.json", r->c->run.out_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fm_err("cannot write the run summary %s: %s\nhint: is the file system full?", tmp, strerror(errno));
    return FM_EIO;
  }
  char vbuf[32] = "null"; /* no validation store: JSON has no NaN */
  if (isfinite(val)) snprintf(vbuf, sizeof vbuf, "%.9e", val);
  fputs("{\"name\": ", f);
  fm_json_write_str(f, r->c->run.name, strlen(r->c->run.name));
  fprintf(f,
          ", \"task\": \"train\", \"steps\": %lld, \"final_loss\": %.9e, \"final_loss_hex\": \"%a\", "
          "\"val_loss\": %s, \"tokens\": %lld, \"seconds\": %.3f, \"skipped\": %lld, \"redone\": %lld, "
          "\"dp\": %d, \"tp\": %d, \"weights_sha256\": \"%s\", \"params\": %lld, \"final_checkpoint\": \"%s\"}\n",
          (long long)last->step, last->loss, last->loss, vbuf, (long long)last->step * r->B * r->T, secs,
          (long long)r->skipped, (long long)r->red.redone, r->dp->size, r->tp->size, hash,
          (long long)fm_model_canon_params(r->model)->numel, final_ckpt);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    fm_err("cannot write the run summary %s: %s\nhint: is the file system full?", path, strerror(errno));
    remove(tmp);
    return FM_EIO;
  }
  return 0;
}

/* ---- checkpoints -------------------------------------------------------- */

/* The run's state as the checkpoint module sees it: dist's table of the
 * sharded arrays (pointers into Run) and the scalars. */
static FmCkptState ckpt_state(Run *r, int64_t step) {
  fm_reduce_scales_to_host(&r->red); /* the block maxima a checkpoint stores (on the device under NCCL) */
  FmCkptState s = {.spike = &r->spike,
                   .step = step,
                   .skipped = r->skipped,
                   .redone = r->red.redone,
                   .samples = fm_sampler_samples_at(&r->sampler, step), /* B may have changed on a resume */
                   .seed = r->c->run.seed,
                   .optim_name = fm_optim_params(r->opt)->kind->name,
                   .model_name = r->kind->name,
                   .deck_text = r->deck_text,
                   .run_name = r->c->run.name};
  fm_dist_state_of_run(&s.dist, fm_model_params(r->model), r->wh, &r->red, r->opt,
                       r->gfull ? r->state_shard : NULL /* zero = 0: the shards of replicated state */, &r->spike);
  snprintf(s.run_id, sizeof s.run_id, "%s", r->run_id);
  return s;
}

/* Under tp > 1 (dist.h, FmDistCanon): every dp group reads the canonical
 * file and keeps its tp shards; the verdict is agreed over tp. */
static int resume_tp(Run *r, FmCkptState *s, FILE *err, char *loaded, size_t n) {
  FmDistCanon c;
  fm_dist_canon_init(&c, &s->dist, r->model, &r->red, r->dp, r->tp);
  FmCkptState cs = *s;
  cs.dist = c.s;
  int rc = fm_ckpt_resume(r->c->ckpt.resume, r->ckpt_dir, &cs, r->dp, err, loaded, n);
  int32_t v[2] = {rc, -rc}, w[2] = {0, 0};
  FM_CHECK(fm_comm_allreduce(r->tp, v, w, 2, FM_DT_I32, FM_OP_MAX));
  if (w[0] != -w[1]) { /* a file one tp group could read and another not */
    if (err) fprintf(err, "fmhpc: resume: the tensor-parallel ranks disagree about %s\n", r->ckpt_dir);
    free(cs.deck_read);
    free(cs.gemm_plans_read);
    fm_dist_canon_free(&c);
    return FM_ECKPT;
  }
  if (rc == 0 && !fm_dist_canon_scatter(&c, &s->dist, r->model, r->dp, r->tp, !cs.scales_skipped))
    fm_log0("resume: the checkpoint was written at another tp: the exact reduction's block scales start fresh");
  const FmDistState keep = s->dist;
  *s = cs;
  s->dist = keep;
  fm_dist_canon_free(&c);
  return rc;
}

/* A checkpoint's GEMM plans (its gemm_plans attribute) pinned again before
 * the first step, so the resumed run computes with the algorithms the run
 * before it used; what could not be pinned is a warning naming the shape
 * and the algorithm chosen instead (gemm_plans_pin). */
static void pin_gemm_plans(Run *r, const char *recorded) {
  if (!recorded || !recorded[0] || !r->be->gemm_plans_pin) return;
  const int64_t cap = 65536;
  char *report = fm_xmalloc((size_t)cap);
  const int pinned = r->be->gemm_plans_pin(recorded, report, cap);
  const char *nl = strchr(recorded, '\n');
  if (pinned < 0)
    fm_log0("resume: the checkpoint's GEMM plans (%.*s) do not apply to backend %s", nl ? (int)(nl - recorded) : 0,
            recorded, r->be->name);
  else
    fm_log0("resume: %d GEMM plans pinned again from the checkpoint (%.*s)", pinned, nl ? (int)(nl - recorded) : 0,
            recorded);
  for (char *line = report, *e; pinned >= 0 && *line; line = e + 1) {
    e = strchr(line, '\n');
    if (!e) break;
    *e = '\0';
    fm_warn0("resume: %s", line);
  }
  free(report);
}

/* &ckpt resume: returns the step to start from (0: fresh), or an FM_E* < 0. */
static int64_t resume(Run *r, FILE *err, char *loaded, size_t n) {
  FmCkptState s = ckpt_state(r, 0);
  int rc = r->tp->size > 1 ? resume_tp(r, &s, err, loaded, n)
                           : fm_ckpt_resume(r->c->ckpt.resume, r->ckpt_dir, &s, r->dp, err, loaded, n);
  if (rc != 0) {
    free(s.deck_read);
    free(s.gemm_plans_read);
  }
  if (rc < 0) return rc;
  if (rc == 0 && s.scales_skipped && r->tp->size == 1)
    fm_log0("resume: the checkpoint was written at another tp: the exact reduction's block scales start fresh");
  if (rc > 0 || !s.run_id[0])
    fm_ckpt_new_run_id(r->dp, r->c->run.seed, r->run_id); /* a checkpoint from before ids: one now */
  else
    snprintf(r->run_id, sizeof r->run_id, "%s", s.run_id);
  if (r->tp->size > 1) FM_CHECK(fm_comm_bcast(r->tp, r->run_id, (int64_t)sizeof r->run_id, FM_DT_U8, 0));
  if (rc > 0) {
    if (strcmp(r->c->ckpt.resume, "none") != 0) fm_log0("resume: no checkpoint in %s: starting at step 0", r->ckpt_dir);
    fm_log0("run id %s (stored in this run's checkpoints)", r->run_id);
    return 0;
  }
  rc = fm_train_resume_compat(r->deck, s.deck_read, loaded, s.step, err, &r->resume_changes);
  free(s.deck_read);
  if (!rc) pin_gemm_plans(r, s.gemm_plans_read);
  free(s.gemm_plans_read);
  if (rc) return rc;
  fm_sampler_resume(&r->sampler, s.step, s.samples);
  FM_CHECK(fm_reduce_allgather(&r->red, r->wh)); /* every rank read only its shard */
  weights_to_device(r);
  const FmTensorTable *st = fm_optim_state_table(r->opt);
  for (int i = 0; r->gfull && i < st->n; i++) /* replicated optimizer state: every rank needs all of it */
    FM_CHECK(fm_reduce_allgather(&r->red, fm_optim_state_arrays(r->opt)[i]));
  fm_optim_state_to_device(r->opt); /* a device's resident state: loaded once, here */
  r->skipped = s.skipped;
  r->red.redone = s.redone;
  fm_log0(
      "resume: %s, step %lld (%lld samples seen, continued from there), every dataset's SHA-256 verified, written at "
      "%s; run id %s",
      loaded, (long long)s.step, (long long)s.samples, "any rank count (loaded as hyperslabs of this layout)",
      r->run_id);
  return s.step;
}

static int save(Run *r, int64_t step, FILE *err) {
  host_mirror(r);
  FmCkptState s = ckpt_state(r, step);
  char *plans = NULL; /* the pinned GEMM plans, recorded for a resume (CUDA) */
  const int64_t need = r->be->gemm_plans_record ? r->be->gemm_plans_record(NULL, 0) : 0;
  if (need > 0) {
    plans = fm_xmalloc((size_t)need + 1);
    r->be->gemm_plans_record(plans, need + 1);
    s.gemm_plans = plans;
  }
  char path[4300];
  const double t0 = fm_now_s();
  FmDistCanon c;
  if (r->tp->size > 1) { /* canonical tensors (dist.h, FmDistCanon): tp rank 0's dp group writes them */
    fm_dist_canon_init(&c, &s.dist, r->model, &r->red, r->dp, r->tp);
    fm_dist_canon_gather(&c, &s.dist, r->model, &r->red, r->tp);
    s.dist = c.s;
  }
  int rc = r->tp->rank == 0 ? fm_ckpt_write(r->ckpt_dir, &s, (int)r->c->ckpt.keep, r->dp, err, path, sizeof path) : 0;
  if (r->tp->size > 1) {
    FM_CHECK(fm_comm_bcast(r->tp, &rc, 1, FM_DT_I32, 0));
    fm_dist_canon_free(&c);
  }
  if (!rc && r->tp->rank == 0) fm_ckpt_log_written(path, fm_now_s() - t0);
  free(plans);
  return rc;
}

/* Rank 0 writes metrics, the summary and final/ into &run out_dir: found
 * unwritable before step 1, not after the last step (the caller shares the
 * verdict with every rank). */
static int check_out_dir(const char *dir, FILE *err) {
  if (fm_mkdirs(dir) == 0 && access(dir, W_OK | X_OK) == 0) return 0;
  if (err)
    fprintf(err,
            "fmhpc: &run out_dir = '%s': cannot create or write the directory: %s\n"
            "hint: point &run out_dir at a writable directory (run%%out_dir='runs/x' on the command line)\n",
            dir, strerror(errno));
  return FM_EIO;
}

/* One run per out_dir: the lead rank holds an exclusive flock on
 * out_dir/.fmhpc.lock for the run's life (released at exit, even a kill).
 * Two live runs in one directory (a requeued job beside the old one, a job
 * submitted twice) both wrote its checkpoints and tore metrics.jsonl. A file
 * system without flock (Lustre mounted without it) gets a warning. */
static int lock_out_dir(Run *r, const char *dir, FILE *err) {
  char path[4200], holder[256] = "";
  snprintf(path, sizeof path, "%s/.fmhpc.lock", dir);
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    fm_warn0("cannot open %s (%s): a second run into this out_dir would not be stopped", path, strerror(errno));
    return 0;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e != EWOULDBLOCK) {
      fm_warn0("cannot lock %s (%s): a second run into this out_dir would not be stopped", path, strerror(e));
      close(fd);
      return 0;
    }
    const ssize_t n = read(fd, holder, sizeof holder - 1);
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    if (err)
      fprintf(err,
              "fmhpc: &run out_dir = '%s' is in use by another run (%s): two runs in one out_dir write the same "
              "checkpoints and metrics.jsonl\nhint: wait for that run to end, or give this one another out_dir\n",
              dir, holder[0] ? holder : "its lock file names no process");
    close(fd);
    return FM_EIO;
  }
  char host[128] = "?";
  gethostname(host, sizeof host - 1);
  if (ftruncate(fd, 0) == 0) dprintf(fd, "pid %ld on %s\n", (long)getpid(), host);
  r->lock_fd = fd;
  r->locked = true;
  return 0;
}

/* The checkpoint directory, at the start: created and writable, so that a
 * mistyped or read-only &ckpt dir stops the run now, not at its first
 * checkpoint hours in (or at a preemption signal, with &ckpt every = 0). */
static int check_ckpt_dir(const char *dir, const char *set, FILE *err) {
  if (fm_mkdirs(dir) == 0 && access(dir, W_OK | X_OK) == 0) return 0;
  if (err)
    fprintf(err,
            "fmhpc: &ckpt dir = '%s'%s: cannot create or write the directory: %s\n"
            "hint: point &ckpt dir at a writable directory; the run would fail at its first checkpoint\n",
            dir, set[0] ? "" : " (out_dir/ckpt)", strerror(errno));
  return FM_EIO;
}

/* FMHPC_CKPT_TEST_SIGNAL_AT=N (tests only): after step N the last rank
 * raises SIGUSR1 on itself, a preemption at a known step; N = 0 raises it
 * during start-up (after setup, before step 1). */
static void test_signal_hook(const FmComm *dp, int64_t step) {
  const char *at = getenv("FMHPC_CKPT_TEST_SIGNAL_AT");
  if (at && atoll(at) == step && dp->rank == dp->size - 1) raise(SIGUSR1);
}

/* The other ranks' setup messages: kept, not printed. */
static ssize_t tee_write_quiet(void *cookie, const char *buf, size_t n) {
  fm_str_catn(cookie, buf, n);
  return (ssize_t)n;
}

/* Rank 0's error stream during setup: stderr, and a copy kept to compare. */
static ssize_t tee_write(void *cookie, const char *buf, size_t n) {
  fwrite(buf, 1, n, stderr);
  fm_str_catn(cookie, buf, n);
  return (ssize_t)n;
}

/* A setup error seen by some ranks only (a file one node cannot read) ends
 * every rank; the user reads rank 0's message, and when the lowest rank that
 * failed with a different message is another one, that rank's message too
 * (ranks other than 0 set up with their messages kept, not printed). */
static void say_setup_errors(FmComm *dp, int rc, const char *mine) {
  char *said0 = dp->rank == 0 ? fm_xstrdup(mine) : NULL;
  FM_CHECK(fm_comm_bcast_str(dp, &said0, 0));
  int32_t me = rc && mine[0] && strcmp(mine, said0) != 0 ? dp->rank : INT32_MAX, first = INT32_MAX;
  FM_CHECK(fm_comm_allreduce(dp, &me, &first, 1, FM_DT_I32, FM_OP_MIN));
  if (first == dp->rank) {
    fprintf(stderr, "fmhpc[rank %d]: %s", dp->rank, mine);
    fflush(stderr);
  }
  free(said0);
}

/* The run on its data-parallel communicator (the mesh's dp_comm). */
static int train_on_dp(const FmDeck *deck, FmMesh *mesh, FILE *log) {
  FmComm *dp = mesh->dp_comm, *tp = mesh->tp_comm;
  Run r;
  const bool lead = dp->rank == 0 && tp->rank == 0;
  FILE *err = lead ? stderr : NULL;
  FmStr said;
  fm_str_init(&said);
  FILE *serr = lead ? fopencookie(&said, "w", (cookie_io_functions_t){.write = tee_write})
                    : fopencookie(&said, "w", (cookie_io_functions_t){.write = tee_write_quiet});
  setvbuf(serr, NULL, _IONBF, 0);
  /* first: a preemption signal during start-up (setup, the store's checksums, resume) was the default action, which
   * killed the rank (status 138), and the batch script did not requeue */
  fm_ckpt_signals_install();
  int rc = setup(&r, deck, mesh, serr);
  test_signal_hook(dp, 0);
  fclose(serr);
  int32_t ok = rc == 0, all_ok = 0; /* a setup error seen by some ranks (a file) ends all */
  fm_comm_allreduce(dp, &ok, &all_ok, 1, FM_DT_I32, FM_OP_MIN);
  all_ok = !tp_any(&r, !all_ok);
  if (!all_ok) say_setup_errors(dp, rc, said.s);
  fm_str_free(&said);
  if (!all_ok) {
    teardown(&r);
    return rc ? rc : FM_EIO;
  }
  const FmConfig *c = r.c;
  char path[4096], loaded[4096] = "";
  r.deck_text = fm_deck_text(deck);
  if (c->ckpt.dir[0])
    snprintf(r.ckpt_dir, sizeof r.ckpt_dir, "%s", c->ckpt.dir);
  else
    snprintf(r.ckpt_dir, sizeof r.ckpt_dir, "%s/ckpt", c->run.out_dir);
  const int64_t start = resume(&r, err, loaded, sizeof loaded);
  if (start < 0) {
    teardown(&r);
    return (int)start;
  }
  if (start > 0 && start >= c->train.steps) { /* a finished job run again (a requeue, a rerun script) */
    fm_log0(
        "resume: %s is at step %lld, &train steps = %lld: nothing to train; %s/summary.json, final/ and "
        "metrics.jsonl stay as the run that reached step %lld wrote them (raise &train steps to train further)",
        loaded, (long long)start, (long long)c->train.steps, c->run.out_dir, (long long)start);
    teardown(&r);
    return 0;
  }
  snprintf(path, sizeof path, "%s/metrics.jsonl", c->run.out_dir);
  if (r.lead) rc = check_out_dir(c->run.out_dir, err);
  if (r.lead && !rc) rc = lock_out_dir(&r, c->run.out_dir, err);
  if (r.lead && !rc) rc = check_ckpt_dir(r.ckpt_dir, c->ckpt.dir, err);
  if (r.lead && !rc && tp->size == 1) { /* said at start, not at the first checkpoint hours in (tp > 1: canonical
                                         * tensors, sized at the write) */
    FmCkptState s = ckpt_state(&r, start);
    char why[4400];
    if (fm_ckpt_space_short(r.ckpt_dir, &s, why, sizeof why))
      fm_warn0(
          "&ckpt dir %s; found at start, so the first checkpoint (&ckpt every = %lld, or a preemption) would fail\n"
          "hint: free space there or point &ckpt dir at a larger file system; each checkpoint checks again",
          why, (long long)c->ckpt.every);
  }
  if (r.lead && !rc)
    rc = start > 0 ? fm_metrics_open_resume(&r.metrics, c->log.metrics ? path : NULL, deck, start, loaded, err)
                   : fm_metrics_open(&r.metrics, c->log.metrics ? path : NULL, deck, err);
  FM_CHECK(fm_comm_bcast(dp, &rc, 1, FM_DT_I32, 0)); /* an unwritable out_dir stops every rank, not rank 0 alone */
  FM_CHECK(fm_comm_bcast(tp, &rc, 1, FM_DT_I32, 0));
  if (rc) {
    fm_metrics_close(r.metrics);
    teardown(&r);
    return rc;
  }
  { /* a signal during start-up: nothing new to checkpoint; the requeued job starts where this one would have */
    int32_t early = fm_ckpt_signal_pending();
    FM_CHECK(fm_comm_allreduce(dp, &early, &early, 1, FM_DT_I32, FM_OP_MAX));
    if (tp->size > 1) FM_CHECK(fm_comm_allreduce(tp, &early, &early, 1, FM_DT_I32, FM_OP_MAX));
    if (early) {
      fm_log0(
          "preempted during start-up, before step %lld: nothing new to checkpoint (%s); exit status %d asks the "
          "batch script to requeue",
          (long long)start + 1, start > 0 ? "a requeue resumes from the same checkpoint" : "a requeue starts afresh",
          FM_EXIT_REQUEUE);
      fm_metrics_close(r.metrics);
      teardown(&r);
      return FM_CKPT_PREEMPTED;
    }
  }
  if (r.resume_changes) fm_metrics_record(r.metrics, r.resume_changes);
  fm_log0(
      "train: run '%s', %s, %lld parameters, %lld steps of %lld x %lld tokens, dp %d x tp %d (%s collectives, "
      "ZeRO-%lld), %s reduction, %s",
      c->run.name, r.kind->name, (long long)fm_model_canon_params(r.model)->numel, (long long)c->train.steps,
      (long long)r.B, (long long)r.T, dp->size, tp->size, r.use_nccl ? "nccl (device buffers) and mpi" : dp->kind,
      (long long)c->parallel.zero, r.red.exact ? "exact" : "fast", where_ops(&r));

  FmStepRecord rec = {.step = start};
  const double t0 = fm_now_s();
  double last_save = t0;
  int preempted = 0;
  const char *final_ckpt = "none"; /* the last step's checkpoint: "written", "failed" (stated by fm_ckpt_write) */
  int final_failed = 0;
  for (int64_t step = start; step < c->train.steps && !rc; step++) {
    rc = train_step(&r, step, &rec);
    if (rc == FM_EDATA) break; /* a bad batch: no step record */
    fm_metrics_step(r.metrics, &rec);
    if (rc) break; /* too many non-finite steps (stated) */
    if (c->log.act_stats == rec.step) log_act_stats(&r, rec.step);
    if (rec.step == 1 || rec.step % c->log.every == 0 || rec.step == c->train.steps)
      log_step(&r, &rec, (fm_now_s() - t0) * (double)rec.step / (double)(rec.step - start));
    if (step == start) log_gemm_plans(&r);
    if (r.valid && c->eval.every > 0 && rec.step % c->eval.every == 0 && rec.step != c->train.steps) {
      int64_t nt;
      double v = fm_eval_loss(r.model, r.valid, &r.mb[0], c->eval.batches, dp, &nt);
      fm_metrics_eval(r.metrics, rec.step, v, nt);
      fm_log0("eval  %5lld | val_loss %.4f | ppl %.2f | %lld tokens", (long long)rec.step, v, exp(v), (long long)nt);
    }
    /* One reduction: any rank's signal, and rank 0's clock (hosts' clocks disagree). */
    test_signal_hook(dp, rec.step);
    int32_t flags[2] = {fm_ckpt_signal_pending(), dp->rank == 0 && c->ckpt.every_minutes > 0 &&
                                                      fm_now_s() - last_save >= 60 * c->ckpt.every_minutes};
    FM_CHECK(fm_comm_allreduce(dp, flags, flags, 2, FM_DT_I32, FM_OP_MAX));
    if (tp->size > 1) FM_CHECK(fm_comm_allreduce(tp, flags, flags, 2, FM_DT_I32, FM_OP_MAX));
    const bool every = c->ckpt.every > 0 && (rec.step % c->ckpt.every == 0 || rec.step == c->train.steps);
    if (every || flags[0] || flags[1]) {
      rc = save(&r, rec.step, err);
      last_save = fm_now_s();
      if (rec.step == c->train.steps) { /* the training is done: a failure still leaves final/ and the summary */
        final_ckpt = rc ? "failed" : "written";
        final_failed = rc;
        rc = 0;
      }
    }
    /* A signal at the last step ends the run as planned: a requeue would find nothing to train and the
     * summary and final/ would never be written. */
    if (flags[0] && !rc && rec.step < c->train.steps) {
      preempted = 1;
      break;
    }
  }
  if (rc || preempted) { /* a failed checkpoint (stated by fm_ckpt_write), divergence, or a signal: stop here */
    if (preempted)
      fm_log0("preempted: checkpointed step %lld in %s; exit status %d asks the batch script to requeue",
              (long long)rec.step, r.ckpt_dir, FM_EXIT_REQUEUE);
    fm_metrics_close(r.metrics);
    teardown(&r);
    return rc ? rc : FM_CKPT_PREEMPTED;
  }
  double val = NAN;
  if (r.valid) {
    int64_t nt;
    val = fm_eval_loss(r.model, r.valid, &r.mb[0], c->eval.batches, dp, &nt);
    fm_metrics_eval(r.metrics, rec.step, val, nt);
    fm_log0("eval  %5lld | val_loss %.4f | ppl %.2f | %lld tokens", (long long)rec.step, val, exp(val), (long long)nt);
  }
  const double secs = fm_now_s() - t0;
  char hash[65];
  /* The canonical (unsharded) weights: gathered over tp when sharded. */
  const FmTensorTable *ct = fm_model_canon_params(r.model);
  float *canon = tp->size > 1 ? fm_xmalloc((size_t)ct->numel * sizeof *canon) : NULL;
  host_mirror(&r);
  if (canon) fm_model_tp_gather(r.model, r.wh, canon); /* tp > 1 runs on host memory: wh is the arena */
  const float *wc = canon ? canon : r.wh;
  weights_hash(wc, ct->numel, hash);
  /* the weights first, then the summary, then the plot; each written or said, and only what was written is
   * announced (a full disk left final/ empty, summary.json of 0 bytes and a cut loss.png, all announced) */
  int exported = 0, summarised = 0;
  if (r.lead) {
    snprintf(path, sizeof path, "%s/final", c->run.out_dir);
    rc = fm_hf_export(path, r.kind, &r.dims, ct, wc, err);
    exported = rc == 0;
    summarised = write_summary(&r, &rec, val, secs, hash, final_ckpt) == 0;
    if (!rc && !summarised) rc = FM_EIO;
    if (c->log.plot) {
      fm_metrics_plot(r.metrics, log, 72, 16);
      if (!fm_metrics_plot_png(r.metrics, err)) fm_log0("wrote %s/loss.png", c->run.out_dir);
    }
  }
  free(canon);
  fm_comm_bcast(dp, &rc, 1, FM_DT_I32, 0);
  fm_comm_bcast(tp, &rc, 1, FM_DT_I32, 0);
  char vbuf[32] = "none (no &data valid)";
  if (r.valid) snprintf(vbuf, sizeof vbuf, "%.6f", val);
  fm_log0("done: %lld steps in %.1f s, final loss %.6f, val loss %s, %lld skipped, %lld redone; weights sha256 %s",
          (long long)rec.step, secs, rec.loss, vbuf, (long long)r.skipped, (long long)r.red.redone, hash);
  if (r.lead) { /* only what was written */
    const char *lost = fm_metrics_lost(r.metrics);
    char mj[96];
    snprintf(mj, sizeof mj, "metrics.jsonl%s%s%s", lost ? " (cut at " : "", lost ? lost : "", lost ? ")" : "");
    const char *names[] = {c->log.metrics ? mj : NULL, summarised ? "summary.json" : NULL,
                           exported ? "final/ (HF safetensors)" : NULL};
    FmStr wrote;
    fm_str_init(&wrote);
    for (int i = 0; i < 3; i++)
      if (names[i]) fm_str_printf(&wrote, "%s%s", wrote.len ? ", " : "", names[i]);
    if (wrote.len) fm_log0("wrote %s/%s", c->run.out_dir, wrote.s);
    fm_str_free(&wrote);
  }
  if (final_failed && err && exported)
    fprintf(err,
            "fmhpc: the checkpoint of the last step (%lld) failed (above): the run's weights are in %s/final%s, "
            "not in %s; exit status 1\n"
            "hint: free space in %s or make it writable, then run the deck again: resume = 'auto' continues from "
            "the newest checkpoint there and reaches the same weights\n",
            (long long)rec.step, c->run.out_dir,
            summarised ? " and summary.json (\"final_checkpoint\": \"failed\")" : "", r.ckpt_dir, r.ckpt_dir);
  else if (r.lead && !exported && err && !strcmp(final_ckpt, "written"))
    fprintf(err,
            "fmhpc: the export to %s/final failed (above): the weights of step %lld are in its checkpoint in %s; "
            "exit status 1\nhint: task = 'export' with &model init_from = that checkpoint writes them as HF "
            "safetensors; eval, generate and ifd read it as it is\n",
            c->run.out_dir, (long long)rec.step, r.ckpt_dir);
  else if (r.lead && !exported && err)
    fprintf(err,
            "fmhpc: the export to %s/final failed (above)%s: the weights of step %lld are not saved; exit status 1\n"
            "hint: free space in %s, then run the deck again: resume = 'auto' continues from the newest checkpoint "
            "there\n",
            c->run.out_dir,
            final_failed ? ", and so did the checkpoint of that step" : " and that step has no checkpoint",
            (long long)rec.step, r.ckpt_dir);
  fm_metrics_close(r.metrics);
  teardown(&r);
  return rc ? rc : final_failed;
}

/* world = dp x tp with tp innermost (runtime/mesh.c): every collective of the
 * loop runs over this rank's dp communicator. At tp = 1 it holds the world's
 * ranks in the world's order, so the bits are those of a run over the world. */
int fm_train_run(const FmDeck *deck, FmComm *world, FILE *log) {
  (void)world;
  FmMesh mesh;
  /* 0 devices: the mesh does not place ranks on GPUs; a CUDA run binds each
   * rank's node-local GPU at backend setup (fm_runtime_bind_gpu) */
  int rc = fm_mesh_create(&mesh, (int)deck->c.parallel.tp, 0);
  if (rc) return rc;
  rc = train_on_dp(deck, &mesh, log);
  fm_mesh_destroy(&mesh);
  return rc;
}
