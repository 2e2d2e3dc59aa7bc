/* model_testing.h: the tiny GPT-2 and Llama configurations and the micro-batch
 * that the model tests (tests/unit/test_model_fwd_bwd.c) and the reference
 * dump (tests/model/model_dump.c) share: two sequences of T = 9 tokens, each
 * holding two documents (segment ids 1 and 2, positions restarting at 0), and
 * four masked targets. Header-only: static functions. */
#ifndef FM_MODEL_TESTING_H
#define FM_MODEL_TESTING_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/model.h"
#include "fmhpc/rng.h"

#define TINY_B ((int64_t)2)
#define TINY_T ((int64_t)9)
#define TINY_N (TINY_B * TINY_T)

/* C=16, L=2, NH=4 (HS=4), V=37, T=9; GPT-2 F=64 (4C); Llama NKV=2, F=40. */
static inline FmModelDims tiny_dims(const char *arch, bool tied) {
  FmModelDims d;
  memset(&d, 0, sizeof d);
  d.C = 16;
  d.L = 2;
  d.NH = 4;
  d.HS = 4;
  d.V = 37;
  d.T = TINY_T;
  d.tied = tied;
  d.norm_eps = 1e-5;
  d.rope_theta = 10000.0;
  if (strcmp(arch, "llama") == 0) {
    d.NKV = 2;
    d.F = 40;
  } else {
    d.NKV = 4;
    d.F = 64;
  }
  return d;
}

typedef struct TinyBatch {
  int32_t tokens[TINY_N], targets[TINY_N], pos[TINY_N], seg[TINY_N];
  float weight[TINY_N];
  FmModelInput in;
} TinyBatch;

/* Row 0: documents [0, 4) and [4, 9); row 1: [0, 6) and [6, 9). Masked
 * targets (weight 0): row 0 t = 0, 1 (a prompt), row 1 t = 5 and 8 (ends of
 * documents). The others weigh 1/14: the mean over unmasked tokens. */
static inline void tiny_batch(TinyBatch *b, int64_t V, uint64_t seed) {
  static const int64_t split[TINY_B] = {4, 6};
  int unmasked = 0;
  for (int64_t r = 0; r < TINY_B; r++)
    for (int64_t t = 0; t < TINY_T; t++) {
      const int64_t n = r * TINY_T + t;
      b->tokens[n] = (int32_t)(fm_rng_block(seed, FM_RNG_DATA, 1, (uint64_t)n).v[0] % (uint32_t)V);
      b->targets[n] = (int32_t)(fm_rng_block(seed, FM_RNG_DATA, 2, (uint64_t)n).v[0] % (uint32_t)V);
      b->seg[n] = t < split[r] ? 1 : 2;
      b->pos[n] = (int32_t)(t < split[r] ? t : t - split[r]);
      const bool masked = (r == 0 && t < 2) || (r == 1 && (t == 5 || t == 8));
      b->weight[n] = masked ? 0.0f : 1.0f;
      unmasked += !masked;
    }
  for (int64_t n = 0; n < TINY_N; n++)
    if (b->weight[n] != 0.0f) b->weight[n] = 1.0f / (float)unmasked;
  b->in = (FmModelInput){b->tokens, b->targets, b->pos, b->seg};
}

/* Weights for gradient checks: far from init so every path matters. Matrices
 * and embeddings N(0, 0.25^2), norm gains 1 + N(0, 0.2^2), biases N(0, 0.2^2). */
static inline void tiny_randomize(FmModel *m, uint64_t seed) {
  const FmTensorTable *tab = fm_model_params(m);
  float *host = malloc((size_t)tab->numel * sizeof(float));
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    for (int64_t j = 0; j < t->numel; j++) {
      const int64_t g = t->offset + j;
      const double z = fm_rng_normal(seed, FM_RNG_INIT, 7, (uint64_t)g);
      double v = 0.25 * z;
      if (t->flags & FM_TF_NORM) v = 1.0 + 0.2 * z;
      if (t->flags & FM_TF_BIAS) v = 0.2 * z;
      host[g] = (float)v;
    }
  }
  fm_model_backend(m)->copy_to_device(fm_model_param_arena(m), host, tab->numel * (int64_t)sizeof(float));
  free(host);
}

static inline FmModel *tiny_model(const char *arch, bool tied, bool recompute) {
  const FmModelKind *k = fm_model_find(arch);
  const FmModelDims d = tiny_dims(arch, tied);
  FmModel *m = NULL;
  fm_log_set_quiet(1);
  if (!k || fm_model_create(&m, k, &d, fm_backend_cpu(), TINY_B, recompute, stderr) != 0) return NULL;
  tiny_randomize(m, 42);
  return m;
}

#endif
