/* optim_internal.h: the optimizer object shared by optim.c and the update
 * rules (adamw.c, lion.c, sophia.c). Private to src/optim/. The elementwise
 * bodies are backend ops (fmhpc/ops.def: adamw_update, lion_update,
 * sophia_update, sophia_hessian_update; bodies in src/tensor/elementwise.h).
 *
 * Bits: the bodies use only correctly rounded + - * / and comparisons on
 * float, and hyperparameters are rounded to float once, from double (1 - beta
 * computed in double, as torch's scalar arithmetic does). A loop over
 * elements therefore gives the same bits for any thread count or shard split. */
#ifndef FMHPC_OPTIM_INTERNAL_H
#define FMHPC_OPTIM_INTERNAL_H

#include "fmhpc/optim.h"

struct FmOptim {
  FmOptimParams p;
  const FmBackend *be; /* the update ops: the CPU table, or the device's after fm_optim_use_device */
  int64_t lo, hi;      /* the shard of the flat vector */
  float *state;        /* state_per_param * (hi - lo) values, one allocation (host; a mirror once on a device) */
  float *dstate;       /* fm_optim_use_device: the same layout in the device's memory (the live state); else NULL */
  FmTensorTable table; /* state tensors over `state` */
  FmOptimSeg *seg;     /* decay segments covering [lo, hi), in order */
  int nseg;
  float **arrays; /* (state_per_param) pointers into `state`, for checkpoints */
  void *hook;     /* the kind's hook state (FmOptimHook), or NULL */
};

/* The state array `j` (in the kind's state_names order) of the shard, where
 * the update ops read it: the device's copy after fm_optim_use_device. */
static inline float *fm__optim_state(FmOptim *o, int j) {
  return (o->dstate ? o->dstate : o->state) + (int64_t)j * (o->hi - o->lo);
}

#define FM_OPTIM(n) extern const FmOptimKind fm__optim_##n;
#include "fmhpc/optimizers.def"
#undef FM_OPTIM

/* A (beta1, beta2) array key: exactly two values (optim.c). */
int fm__optim_take_betas(FmOptimParams *p, const FmDeck *deck, int key, const double *v, int n, FILE *err);

#endif
