/* init.c: weight initialisation. Every value is a pure function of the seed
 * and the element's index in the flat parameter vector (DESIGN section 6), so
 * a rank holding any slice of the vector computes its part alone and the same
 * seed gives the same weights on any rank count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/rng.h"
#include "model_internal.h"

/* The std of a tensor's normal init (see fm_model_init_weights). */
static double init_std_of(const FmTensor *t, int64_t L, double init_std, bool residual_scaled) {
  if (strcmp(t->name, "wpe") == 0) return 0.5 * init_std; /* OpenAI GPT-2 model.py: wpe 0.01, wte 0.02 */
  if ((t->flags & FM_TF_RESIDUAL) && residual_scaled) return init_std / sqrt(2.0 * (double)L);
  return init_std;
}

void fm_model_init_range(float *out, const FmTensorTable *tab, int64_t L, int64_t begin, int64_t end, uint64_t seed,
                         double init_std, bool residual_scaled) {
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    const int64_t lo = t->offset > begin ? t->offset : begin;
    const int64_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
    if (lo >= hi) continue;
    const double std = init_std_of(t, L, init_std, residual_scaled);
    const bool ones = t->flags & FM_TF_ONES, zeros = t->flags & FM_TF_ZEROS;
#pragma omp parallel for schedule(static)
    for (int64_t g = lo; g < hi; g++) {
      float v = ones ? 1.0f : 0.0f;
      if (!ones && !zeros) v = (float)(std * fm_rng_normal(seed, FM_RNG_INIT, 0, (uint64_t)g));
      out[g - begin] = v;
    }
  }
}

/* Under tp > 1: each canonical tensor made whole, then this rank's shard
 * kept, so every tp gives the canonical weights of tp = 1. */
static void init_tp(FmModel *m, uint64_t seed, double init_std, bool residual_scaled) {
  int64_t most = 0;
  for (int i = 0; i < m->cparams.n; i++) most = m->cparams.t[i].numel > most ? m->cparams.t[i].numel : most;
  float *whole = fm_xmalloc((size_t)most * sizeof *whole); /* once, before any step */
  for (int i = 0; i < m->cparams.n; i++) {
    const FmTensor *ct = &m->cparams.t[i];
    fm_model_init_range(whole, &m->cparams, m->cd.L, ct->offset, ct->offset + ct->numel, seed, init_std,
                        residual_scaled);
    fm_tp_copy(ct, &m->params.t[i], m->tp_rank, m->tp_size, m->param + m->params.t[i].offset, whole, 0);
  }
  free(whole);
}

void fm_model_init_weights(FmModel *m, uint64_t seed, double init_std, bool residual_scaled) {
  if (fm__tp_on(m)) {
    init_tp(m, seed, init_std, residual_scaled);
    return;
  }
  const int64_t chunk = (int64_t)1 << 20;
  float *host = fm_xmalloc((size_t)chunk * sizeof(float)); /* once, before any step */
  for (int64_t b = 0; b < m->params.numel; b += chunk) {
    const int64_t e = b + chunk < m->params.numel ? b + chunk : m->params.numel;
    fm_model_init_range(host, &m->params, m->d.L, b, e, seed, init_std, residual_scaled);
    m->be->copy_to_device(m->param + b, host, (e - b) * (int64_t)sizeof(float));
  }
  free(host);
}
