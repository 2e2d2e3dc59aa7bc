/* test_optim_torch.c: the optimizers and the cosine schedule against torch
 * 1.13 (tests/optim/torch_ref.py writes the reference files first; ctest runs
 * it as the fixture optim.torch_ref). AdamW is torch.optim.AdamW; Lion is the
 * script's transcription of the paper's Program 1. Tolerance after 10 steps in
 * fp32: 1e-6 relative plus 1e-9 absolute (one part in 1e6 of a step of lr
 * ~1e-3, for weights and state values near zero; measured on torch 1.13:
 * AdamW within 4.7e-7 relative, Lion bit-identical). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fm_test.h"
#include "fmhpc/optim.h"

#define REF_DIR FMHPC_BINARY_DIR "/tests/optim_ref/"

typedef struct Ref {
  int64_t n_decay, n_nodecay, steps, nstate;
  double beta1, beta2, eps, wd;
  double *lr;
  float *w0, *g, *w, *state;
} Ref;

static void read_exact(void *p, size_t size, size_t n, FILE *f) {
  if (fread(p, size, n, f) != n) {
    fprintf(stderr, "short read in a reference file\n");
    exit(1);
  }
}

/* Load REF_DIR/<name>; a missing oracle (skip, or a failure in CI) if the fixture did not write it. */
static Ref load(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", REF_DIR, name);
  FILE *f = fopen(path, "rb");
  if (!f) fm_test_missing_oracle("no torch reference: optim.torch_ref did not write it (python3-torch missing?)");
  Ref r;
  int64_t h[4];
  double hp[4];
  read_exact(h, sizeof h[0], 4, f);
  read_exact(hp, sizeof hp[0], 4, f);
  r.n_decay = h[0], r.n_nodecay = h[1], r.steps = h[2], r.nstate = h[3];
  r.beta1 = hp[0], r.beta2 = hp[1], r.eps = hp[2], r.wd = hp[3];
  const size_t n = (size_t)(r.n_decay + r.n_nodecay);
  r.lr = malloc(sizeof(double) * (size_t)r.steps);
  r.w0 = malloc(sizeof(float) * n);
  r.g = malloc(sizeof(float) * n * (size_t)r.steps);
  r.w = malloc(sizeof(float) * n);
  r.state = malloc(sizeof(float) * n * (size_t)r.nstate);
  read_exact(r.lr, sizeof(double), (size_t)r.steps, f);
  read_exact(r.w0, sizeof(float), n, f);
  read_exact(r.g, sizeof(float), n * (size_t)r.steps, f);
  read_exact(r.w, sizeof(float), n, f);
  read_exact(r.state, sizeof(float), n * (size_t)r.nstate, f);
  fclose(f);
  return r;
}

static void ref_free(Ref *r) {
  free(r->lr);
  free(r->w0);
  free(r->g);
  free(r->w);
  free(r->state);
}

/* |x - ref| <= atol + 1e-6*|ref| everywhere; reports the worst element. */
static void expect_close(const float *x, const float *ref, int64_t n, double atol, const char *what) {
  int64_t worst = 0;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double e = fabs((double)x[i] - ref[i]) / (atol + 1e-6 * fabs((double)ref[i]));
    if (!(e <= worst_err)) worst_err = e, worst = i;
  }
  if (!(worst_err <= 1.0))
    FM__FAIL("%s[%lld]: %.9g vs torch %.9g (rtol 1e-6, atol %g)", what, (long long)worst, (double)x[worst],
             (double)ref[worst], atol);
}

/* Run `name` over the reference inputs (a MATRIX tensor, then a NORM one) and
 * compare weights and state with torch's. */
static void run_against(const char *optim, const char *file) {
  Ref r = load(file);
  FmTensorTable tab;
  fm_table_init(&tab);
  fm_table_add(&tab, "w", FM_DT_F32, FM_TF_MATRIX, FM_TP_NONE, 1, &r.n_decay);
  fm_table_add(&tab, "norm", FM_DT_F32, FM_TF_NORM, FM_TP_NONE, 1, &r.n_nodecay);
  FmOptimParams p = {
      .kind = fm_optim_find(optim), .beta1 = r.beta1, .beta2 = r.beta2, .eps = r.eps, .weight_decay = r.wd};
  const int64_t n = tab.numel;
  FmOptim *o = fm_optim_create(&p, &tab, 0, n, stderr);
  FM_REQUIRE(o != NULL);
  float *w = malloc(sizeof(float) * (size_t)n);
  memcpy(w, r.w0, sizeof(float) * (size_t)n);
  for (int64_t t = 1; t <= r.steps; t++) fm_optim_step(o, w, r.g + (t - 1) * n, t, (float)r.lr[t - 1]);
  expect_close(w, r.w, n, 1e-9, "w");
  expect_close(fm_optim_state_data(o), r.state, n * r.nstate, 1e-9, "state");
  /* The weights moved: a comparison of unchanged inputs would prove nothing. */
  FM_EXPECT(fabs((double)w[0] - r.w0[0]) > 1e-4);
  fm_optim_free(o);
  free(w);
  fm_table_free(&tab);
  ref_free(&r);
}

FM_TEST(adamw_vs_torch) { run_against("adamw", "adamw.bin"); }

FM_TEST(lion_vs_torch) { run_against("lion", "lion.bin"); }

/* fm_lr_at after warmup W is CosineAnnealingLR(T_max = T-W, eta_min = f*lr)
 * after t-W scheduler steps (torch's recursive form: 1e-12 relative). */
FM_TEST(cosine_vs_torch) {
  FILE *f = fopen(REF_DIR "cosine.bin", "rb");
  if (!f) fm_test_missing_oracle("no torch reference: optim.torch_ref did not write it (python3-torch missing?)");
  int64_t h[2];
  double hp[2];
  read_exact(h, sizeof h[0], 2, f);
  read_exact(hp, sizeof hp[0], 2, f);
  double *lrs = malloc(sizeof(double) * (size_t)h[1]);
  read_exact(lrs, sizeof(double), (size_t)h[1], f);
  fclose(f);
  for (int64_t W = 0; W <= 7; W += 7) {
    FmSchedule s = {
        .kind = fm_schedule_find("cosine"), .lr = hp[0], .min_lr_ratio = hp[1] / hp[0], .warmup = W, .steps = W + h[0]};
    for (int64_t k = 0; k < h[1]; k++) FM_EXPECT_NEAR(fm_lr_at(&s, W + k), lrs[k], 1e-12, 0.0);
  }
  free(lrs);
}
