/* optim.h: optimizers, learning-rate schedules and loss-spike skipping: the
 * library code the train loop calls once per step on this rank's shard.
 * Everything here works on host (CPU-backend) memory, or, after
 * fm_optim_use_device, on a device's (the same update ops' CUDA kernels), and is bitwise
 * independent of the OpenMP thread count and of the number of data-parallel
 * ranks (DESIGN section 6). Not here: the shard map, gradient reduction,
 * global-norm clipping (dist.h), collectives (runtime.h), the sampled-label
 * backward pass Sophia needs (model/train), checkpoint files (ckpt).
 *
 * Registry. src/deck/optimizers.def lists each optimizer, one line; its file
 * defines its FmOptimKind: deck parameters, fp32 state tensors (as many as it
 * needs), update and optional per-step hook. `fmhpc --check` sizes memory
 * from the state count and ZeRO-1 shards the state with the parameters.
 *
 * Update rules (t is the 1-based optimizer step, lr the value for step t from
 * fm_lr_at, wd = weight_decay where the parameter decays and 0 elsewhere):
 *
 *   adamw   As torch.optim.AdamW (Loshchilov & Hutter 2019; decoupled decay):
 *             m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *             w = w - lr*((m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd*w)
 *           (the shared body of fm_cpu_adamw_update, so the CUDA backend's
 *           adamw_update gives the same bits).
 *   lion    Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
 *           Program 1 / Algorithm 2, with (b1, b2) = &optim lion_betas:
 *             c = b1*m + (1-b1)*g;  w = w - lr*(sign(c) + wd*w)
 *             m = b2*m + (1-b2)*g          (sign(0) = 0, as torch.sign)
 *   sophia  Sophia-G, Liu et al. 2023, "Sophia: A Scalable Stochastic
 *           Second-order Optimizer for Language Model Pre-training",
 *           Algorithm 3 with the Gauss-Newton-Bartlett estimator (Algorithm 2),
 *           in the form of Levanter's optim/sophia.py (_sophia_gradient_transform
 *           followed by add_decayed_weights and scale(-lr)), with (b1, b2) =
 *           sophia_betas, gamma = sophia_rho, eps = sophia_eps:
 *             m = b1*m + (1-b1)*g
 *             mh = m/(1-b1^t) if sophia_debias (Levanter) else m (paper)
 *             u = clip(mh / max(gamma*h, eps), -1, 1)
 *             w = w - lr*(u + wd*w)   (decay added after the clip: not clipped)
 *           h is updated only by fm_optim_sophia_hessian_update, which
 *           Sophia's per-step hook (fm_optim_before_step) calls:
 *             h = b2*h + (1-b2)*(ghat*ghat*B)
 *           where ghat is the gradient of the mean loss over B tokens whose
 *           labels were sampled from the model's own softmax (Algorithm 2:
 *           hhat = B * ghat (.) ghat). Timing follows the paper's Algorithm 3:
 *           on steps t with fm_optim_hessian_due (t mod k == 1, i.e. t = 1,
 *           k+1, 2k+1, ...) the hook samples labels, has the train loop
 *           compute ghat at the current weights (FmOptimStepIo) and updates
 *           h BEFORE fm_optim_step(t). A label is a pure function of (seed,
 *           step, global token index): the uniform u = fm_rng_uniform(seed,
 *           FM_RNG_HESSIAN, step, index) times the row's softmax sum, and the
 *           label the first id whose running sum exceeds it.
 *           (Levanter instead refreshes h after steps k, 2k, ... from the
 *           pre-update weights and so runs its first k steps with h = 0; the
 *           paper's order gives every step a curvature estimate.) NaN in m
 *           or h propagates; it is never clipped away.
 *
 * Weight decay mask, from each tensor's flags (first match wins): NORM decays
 * iff decay_norms, BIAS iff decay_biases, EMBED iff decay_embeddings, MATRIX
 * always, anything else never. Tensors are contiguous ranges of the flat
 * vector, so the mask is a short list of segments (fm_optim_segments). */
#ifndef FMHPC_OPTIM_H
#define FMHPC_OPTIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/tensor.h"

typedef struct FmOptim FmOptim;
typedef struct FmOptimParams FmOptimParams;
typedef void (*FmOptimStepFn)(FmOptim *o, float *w, const float *g, int64_t t, float lr);

/* The shape of the training run, for a hook's buffers (sized once, at setup). */
typedef struct FmOptimRunShape {
  int64_t nmicro;      /* this rank's micro-batches per step */
  int64_t first_micro; /* the global index of this rank's first one */
  int64_t b, T, V;     /* sequences per micro-batch, tokens per sequence, vocabulary */
  uint64_t seed;       /* &run seed */
} FmOptimRunShape;

/* What a per-step hook may ask of the train loop for step `step` (0-based;
 * the optimizer step is t = step + 1). */
typedef struct FmOptimStepIo {
  int64_t step;
  int64_t ntokens; /* unmasked targets of the step over all ranks */
  void *ctx;       /* the train loop's, passed back to the two calls */
  /* Logits (nrows, V) into out of rows (b*T + t indices) of micro-batch `micro`. */
  void (*logits)(void *ctx, int64_t micro, const int64_t *rows, int64_t nrows, float *out);
  /* The gradient of the step's weighted loss with targets[micro] (b*T each)
   * for labels, reduced onto this rank's shard: returns the shard (element
   * lo onward); *nonfinite when any rank saw NaN/Inf. */
  const float *(*grad_shard)(void *ctx, const int32_t *const *targets, bool *nonfinite);
} FmOptimStepIo;

/* An optional per-step hook: buffers sized at fm_optim_setup_run (never per
 * step), work done before each step's update (fm_optim_before_step), freed
 * with the optimizer. */
typedef struct FmOptimHook {
  void (*setup)(FmOptim *o, const FmOptimRunShape *s);
  void (*before_step)(FmOptim *o, const FmOptimStepIo *io);
  void (*free)(FmOptim *o);
} FmOptimHook;

typedef struct FmOptimKind {
  const char *name;
  const char *desc;
  int state_per_param;            /* fp32 values per parameter (AdamW: m, v) */
  const char *const *state_names; /* state_per_param tensor names: "optim.m", "optim.v" */
  /* This optimizer's &optim keys into p (betas, eps and its own); the
   * shared ones (weight decay and its mask) are set before. FM_EDECK at the key. */
  int (*params)(FmOptimParams *p, const FmDeck *deck, FILE *err);
  FmOptimStepFn step;      /* the shard update (adamw.c, lion.c, sophia.c) */
  const FmOptimHook *hook; /* NULL: no per-step work */
} FmOptimKind;

const FmOptimKind *fm_optim_find(const char *name);
int fm_optim_count(void);
const FmOptimKind *fm_optim_at(int i);

/* Hyperparameters, from the deck (fm_optim_params_from_deck) or set by hand
 * (tests). beta1/beta2 are the chosen optimizer's pair (betas, lion_betas or
 * sophia_betas). */
struct FmOptimParams {
  const FmOptimKind *kind;
  double beta1, beta2, eps, weight_decay;
  bool decay_norms, decay_biases, decay_embeddings;
  double sophia_gamma; /* &optim sophia_rho */
  int64_t sophia_k;    /* Hessian refresh interval */
  bool sophia_bias_correction;
};

/* Fill p from &optim; rule errors (unknown name, wrong beta count) go to err
 * at the key's origin and return FM_EDECK. */
int fm_optim_params_from_deck(FmOptimParams *p, const FmDeck *deck, FILE *err);

/* A run of elements [lo, hi) of the flat vector with one decay setting. */
typedef struct FmOptimSeg {
  int64_t lo, hi;
  bool decay;
} FmOptimSeg;

/* ZeRO-1: an optimizer owns the slice [lo, hi) of the flat parameter vector
 * described by `params` (0 <= lo <= hi <= params->numel; lo == hi is an empty
 * shard) and fp32 state for that slice only, zero-initialised. Returns NULL
 * (with a message on err) if [lo, hi) is not inside the table. */
FmOptim *fm_optim_create(const FmOptimParams *p, const FmTensorTable *params, int64_t lo, int64_t hi, FILE *err);
/* The same from the deck's &optim group. */
int fm_optim_create_from_deck(FmOptim **out, const FmDeck *deck, const FmTensorTable *params, int64_t lo, int64_t hi,
                              FILE *err);
void fm_optim_free(FmOptim *o);

/* The state on a device backend (be->host_accessible == 0; no-op otherwise
 * or when already there): allocated there once, filled from the host state,
 * and from then on the update ops (fm_optim_step, the Sophia Hessian update)
 * run with be's kernels on device pointers w, g and ghat. The host arrays
 * (fm_optim_state_data, _arrays) become a mirror, refreshed only by
 * fm_optim_state_to_host (checkpoint writes) and read back to the device by
 * fm_optim_state_to_device (a resume). The same bits as on the host: the
 * CUDA update ops are the CPU ops' bodies (elementwise.h). */
void fm_optim_use_device(FmOptim *o, const FmBackend *be);
void fm_optim_state_to_host(FmOptim *o);
void fm_optim_state_to_device(FmOptim *o);

/* One update of the shard: w and g point at element lo (hi-lo values each);
 * t >= 1 is the optimizer step (bias corrections use it); lr for this step. */
void fm_optim_step(FmOptim *o, float *w_shard, const float *g_shard, int64_t t, float lr);

/* The run's shape for the optimizer's hook (buffers sized here, once); a
 * no-op for optimizers without one. Call before the first step. */
void fm_optim_setup_run(FmOptim *o, const FmOptimRunShape *s);
/* The per-step hook, before fm_optim_step of step io->step (no-op without). */
void fm_optim_before_step(FmOptim *o, const FmOptimStepIo *io);

/* Sophia: whether step t refreshes the Hessian estimate (t mod k == 1, or
 * every step for k == 1); always false for other optimizers. */
bool fm_optim_hessian_due(const FmOptim *o, int64_t t);
/* Sophia: h = b2*h + (1-b2)*(ghat*ghat*batch_tokens) over the shard, where
 * ghat_shard (element lo onward) is the gradient of the mean loss over
 * batch_tokens tokens with sampled labels. FM_EINVAL for other optimizers. */
int fm_optim_sophia_hessian_update(FmOptim *o, const float *ghat_shard, int64_t batch_tokens);

/* The state of the shard as a tensor table over fm_optim_state_data(): one
 * 1-d tensor per state name ("optim.m", "optim.v" / "optim.h"), each hi-lo
 * values; element i of each is the state of flat parameter lo+i, so a
 * checkpoint can place it in the canonical unsharded layout with the
 * parameter table. Everything that affects later steps is in these arrays
 * (the step count is the train loop's). */
const FmTensorTable *fm_optim_state_table(const FmOptim *o);
float *fm_optim_state_data(FmOptim *o);
/* The state arrays and their names (fm_optim_state_table's n of each), for
 * a checkpoint. */
const char *const *fm_optim_state_names(const FmOptim *o);
float *const *fm_optim_state_arrays(const FmOptim *o);
int64_t fm_optim_lo(const FmOptim *o);
int64_t fm_optim_hi(const FmOptim *o);
const FmOptimParams *fm_optim_params(const FmOptim *o);
/* The decay segments covering [lo, hi) in order (for a device-side update). */
int fm_optim_segments(const FmOptim *o, const FmOptimSeg **segs);
/* Whether a tensor with these flags decays under p (the rule above). */
bool fm_optim_decays(const FmOptimParams *p, uint32_t flags);

/* ---- learning-rate schedules (schedule.c) ------------------------------- */
/* Registry: src/deck/schedules.def, one line per schedule; its file defines
 * its FmSchedKind. */
typedef struct FmSchedule FmSchedule;
typedef struct FmSchedKind {
  const char *name;
  const char *desc;
  /* The lr for step t > W (the warmup W is common to every schedule). */
  double (*after_warmup)(const FmSchedule *s, int64_t t);
  /* Optional rules on the deck's values (NULL: none); FM_EDECK at the key. */
  int (*check)(const FmSchedule *s, const FmDeck *deck, FILE *err);
} FmSchedKind;

const FmSchedKind *fm_schedule_find(const char *name); /* case-insensitive; NULL if none */
int fm_schedule_count(void);
const FmSchedKind *fm_schedule_at(int i);

struct FmSchedule {
  const FmSchedKind *kind;
  double lr;             /* peak */
  double min_lr_ratio;   /* final lr = min_lr_ratio * lr */
  double decay_fraction; /* wsd: the last D = round(decay_fraction*steps) steps decay */
  int64_t warmup;        /* warmup steps W */
  int64_t steps;         /* total optimizer steps T */
};

/* From &optim and &train steps; FM_EDECK (at the key) if warmup_steps > steps. */
int fm_schedule_from_deck(FmSchedule *s, const FmDeck *deck, FILE *err);
/* The lr for 1-based step t, in double (no state, so a resume is exact):
 *   t <= W:   lr * t / W                     (t = 1 gives lr/W, t = W gives lr)
 *   t >  W:   p = (t - W) / (T - W) in (0, 1], f = min_lr_ratio
 *     constant: lr
 *     cosine:   lr * (f + (1-f) * 0.5*(1 + cos(pi*p)))
 *     linear:   lr * (f + (1-f) * (1 - p))
 *     wsd:      warmup-stable-decay (Hu et al. 2024, MiniCPM; Haegele et al.
 *               2024): lr until the last D steps, D = round(decay_fraction*T)
 *               clamped to [1, T-W], then a LINEAR cooldown
 *               lr * (f + (1-f) * (T - t)/D)  (t = T gives f*lr)
 *     inv_sqrt: lr * sqrt(W / t)  (Vaswani et al. 2017, "Attention Is All You
 *               Need", section 5.3, with the peak lr in place of
 *               d_model^-0.5; fairseq's inverse_sqrt). It needs W >= 1 (W = 0
 *               would give 0 for every step: a deck error at warmup_steps),
 *               ignores min_lr_ratio and T, and keeps decaying past T.
 * so the last step T runs at exactly min_lr_ratio*lr (constant: lr;
 * inv_sqrt: lr*sqrt(W/T)), and t > T stays there (inv_sqrt: decays on). This is optax's
 * join_schedules(linear_schedule(0, lr, W), cosine_decay_schedule(lr, T-W, alpha=f)) evaluated at count = t, and
 * torch's CosineAnnealingLR(T_max=T-W, eta_min=f*lr) after t-W scheduler
 * steps. t <= 0 gives 0 when W > 0, lr when W = 0 (p = 0). */
double fm_lr_at(const FmSchedule *s, int64_t t);

/* ---- loss-spike skip (spike.c) ------------------------------------------ */
/* The last `window` ACCEPTED step losses (a ring, oldest at `head` once
 * full). A step's loss is a spike when the window is full and
 *   z = (loss - mean) / std > z_max
 * with mean and sample std (n-1) of the window in double, summed oldest to
 * newest. A spike is not added to the window. A non-finite loss is always a
 * spike. All fields are plain values so a checkpoint saves and restores them
 * exactly: buf (window doubles), count, head, skipped, consecutive. */
typedef struct FmSpike {
  int64_t window;
  double z_max;
  double *buf;         /* (window) accepted losses */
  int64_t count;       /* accepted losses seen (the window is full at >= window) */
  int64_t head;        /* next slot to write */
  int64_t skipped;     /* spikes so far */
  int64_t consecutive; /* spikes since the last accepted step */
} FmSpike;

void fm_spike_init(FmSpike *s, int64_t window, double z_max);
void fm_spike_init_from_deck(FmSpike *s, const FmDeck *deck);
/* Judge one step's loss: returns true (skip the update; counted) or false
 * (accepted; the loss enters the window). *z gets the z-score (0 before the
 * window is full or when the window's std is 0; may be NULL). */
bool fm_spike_check(FmSpike *s, double loss, double *z);
void fm_spike_free(FmSpike *s);

#endif
