/* optim_internal.h: the optimizer object shared by optim.c and the update
 * rules (adamw.c, lion.c, sophia.c), and the elementwise bodies of Lion and
 * Sophia. Private to src/optim/.
 *
 * Bits: the bodies use only + - * / and comparisons on float, each correctly
 * rounded (the build has -ffp-contract=off, so nothing fuses into an FMA), and
 * hyperparameters are rounded to float once, from double (1 - beta computed in
 * double, as torch's scalar arithmetic does). A loop over elements therefore
 * gives the same bits for any thread count or shard split. */
#ifndef FMHPC_OPTIM_INTERNAL_H
#define FMHPC_OPTIM_INTERNAL_H

#include "fmhpc/optim.h"

/* Loops shorter than this stay on one thread (the bits do not depend on it). */
#define FM_OPTIM_OMP_MIN ((int64_t)1 << 15)

struct FmOptim {
  FmOptimParams p;
  int64_t lo, hi;      /* the shard of the flat vector */
  float *state;        /* state_per_param * (hi - lo) values, one allocation */
  FmTensorTable table; /* state tensors over `state` */
  FmOptimSeg *seg;     /* decay segments covering [lo, hi), in order */
  int nseg;
};

/* The state array `j` (0: m, 1: v or h) of the shard. */
static inline float *fm__optim_state(FmOptim *o, int j) { return o->state + (int64_t)j * (o->hi - o->lo); }

#define FM_OPTIM(n, state, s0, s1, desc) \
  void fm__optim_step_##n(FmOptim *o, float *w, const float *g, int64_t t, float lr);
#include "optimizers.def"
#undef FM_OPTIM

/* Lion (Chen et al. 2023, Program 1): update with the interpolation c, then
 * move the momentum with beta2. */
static inline void fm__lion(float *w, float *m, float g, float lr, float b1, float omb1, float b2, float omb2,
                            float wd) {
  float c = b1 * *m + omb1 * g;
  float s = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c); /* torch.sign: 0 -> 0, NaN -> NaN */
  *w = *w - lr * (s + wd * *w);
  *m = b2 * *m + omb2 * g;
}

/* Sophia-G (Levanter's form; optim.h): bc1 = 1 - beta1^t, or 1 without bias
 * correction. The comparisons keep NaN (a NaN ratio is not clipped to +-1). */
static inline void fm__sophia(float *w, float *m, float h, float g, float lr, float b1, float omb1, float bc1,
                              float gamma, float eps, float wd) {
  float mi = b1 * *m + omb1 * g;
  float gh = gamma * h;
  float den = gh > eps ? gh : eps;
  float u = (mi / bc1) / den;
  u = u > 1.0f ? 1.0f : (u < -1.0f ? -1.0f : u);
  *w = *w - lr * (u + wd * *w);
  *m = mi;
}

/* Levanter's update_moment of B*ghat^2 (Algorithm 2, line 6). */
static inline void fm__sophia_hessian(float *h, float ghat, float B, float b2, float omb2) {
  *h = b2 * *h + omb2 * ((ghat * ghat) * B);
}

#endif
