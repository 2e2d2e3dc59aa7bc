/* test_optim.c: AdamW, Lion and Sophia-G shard updates against float64
 * references written here from the papers (AdamW: Loshchilov & Hutter,
 * Algorithm 2 with torch's bias corrections; Lion: Chen et al. 2023, Program
 * 1; Sophia: Liu et al. 2023, Algorithm 3 with the GNB estimator), weight
 * decay masks from tensor flags, bitwise independence of shard splits and
 * thread counts, the state table and the registry. Tolerance against float64:
 * 1e-6 relative on weights, 1e-6 relative + 1e-12 absolute on state, after 12
 * steps on gradients spanning four decades. (torch itself: tests/optim.) */
#include <omp.h>
#include <stdlib.h>

#include "deck_testing.h"
#include "fm_test.h"
#include "fmhpc/optim.h"

/* Deterministic test data: a splitmix64 stream mapped to [-1, 1). */
static uint64_t rng_state;
static double rnd(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* A table with every kind of parameter: MATRIX, NORM, BIAS, EMBED, MATRIX. */
static void make_table(FmTensorTable *tab, int64_t scale) {
  static const struct {
    const char *name;
    uint32_t flags;
    int64_t n;
  } spec[] = {{"wte", FM_TF_EMBED, 70},
              {"h.ln1.w", FM_TF_NORM | FM_TF_ONES, 16},
              {"h.attn.w", FM_TF_MATRIX, 96},
              {"h.attn.b", FM_TF_BIAS, 24},
              {"lm_head", FM_TF_MATRIX | FM_TF_RESIDUAL, 50}};
  fm_table_init(tab);
  for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
    int64_t n = spec[i].n * scale;
    fm_table_add(tab, spec[i].name, FM_DT_F32, spec[i].flags, FM_TP_NONE, 1, &n);
  }
}

/* Per-element decay (1/0) of the table under p, from the flags. */
static double *decay_mask(const FmTensorTable *tab, const FmOptimParams *p) {
  double *d = malloc(sizeof(double) * (size_t)tab->numel);
  for (int i = 0; i < tab->n; i++)
    for (int64_t j = 0; j < tab->t[i].numel; j++) d[tab->t[i].offset + j] = fm_optim_decays(p, tab->t[i].flags);
  return d;
}

typedef struct Case {
  FmTensorTable tab;
  int64_t n, steps;
  float *w0, *g, *ghat; /* (n), (steps, n), (steps, n) */
  double *lr;           /* (steps) */
} Case;

static Case make_case(int64_t steps, int64_t scale, uint64_t seed) {
  Case c;
  rng_state = seed;
  make_table(&c.tab, scale);
  c.n = c.tab.numel;
  c.steps = steps;
  c.w0 = malloc(sizeof(float) * (size_t)c.n);
  c.g = malloc(sizeof(float) * (size_t)(c.n * steps));
  c.ghat = malloc(sizeof(float) * (size_t)(c.n * steps));
  c.lr = malloc(sizeof(double) * (size_t)steps);
  for (int64_t i = 0; i < c.n; i++) c.w0[i] = (float)rnd();
  for (int64_t i = 0; i < c.n * steps; i++) {
    const double scl = pow(10.0, -4.0 * (double)(i % c.n) / (double)c.n); /* 1 .. 1e-4 */
    c.g[i] = (float)(rnd() * scl);
    c.ghat[i] = (float)(rnd() * scl * 3.0);
  }
  for (int64_t t = 0; t < steps; t++) c.lr[t] = 1e-3 * (1.0 - 0.05 * (double)t);
  return c;
}

static void free_case(Case *c) {
  free(c->w0);
  free(c->g);
  free(c->ghat);
  free(c->lr);
  fm_table_free(&c->tab);
}

static FmOptimParams params_for(const char *name) {
  FmOptimParams p = {.kind = fm_optim_find(name), .weight_decay = 0.1, .sophia_gamma = 0.05, .sophia_k = 3};
  if (strcmp(name, "adamw") == 0) p.beta1 = 0.9, p.beta2 = 0.95, p.eps = 1e-8;
  if (strcmp(name, "lion") == 0) p.beta1 = 0.9, p.beta2 = 0.99, p.weight_decay = 0.5;
  if (strcmp(name, "sophia") == 0) p.beta1 = 0.965, p.beta2 = 0.99, p.eps = 1e-12;
  return p;
}

/* The float run over [lo, hi) of the case; returns w (n) and the optimizer. */
static FmOptim *run_shard(const Case *c, const FmOptimParams *p, int64_t lo, int64_t hi, float *w) {
  FmOptim *o = fm_optim_create(p, &c->tab, lo, hi, stderr);
  for (int64_t t = 1; t <= c->steps; t++) {
    if (fm_optim_hessian_due(o, t)) fm_optim_sophia_hessian_update(o, c->ghat + (t - 1) * c->n + lo, 64);
    fm_optim_step(o, w + lo, c->g + (t - 1) * c->n + lo, t, (float)c->lr[t - 1]);
  }
  return o;
}

/* |x - ref| <= atol + rtol * max(|ref|, scale) per element; scale (may be
 * NULL) is the same recurrence over |g|: a moment that is a sum of terms of
 * both signs is only as accurate as its terms, not as its (small) value. */
static void expect_close(const float *x, const double *ref, const double *scale, int64_t n, double rtol, double atol,
                         const char *what) {
  int64_t worst = 0;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double mag = scale && scale[i] > fabs(ref[i]) ? scale[i] : fabs(ref[i]);
    const double e = fabs((double)x[i] - ref[i]) / (atol + rtol * mag);
    if (!(e <= worst_err)) worst_err = e, worst = i;
  }
  if (!(worst_err <= 1.0))
    FM__FAIL("%s[%lld]: %.9g vs float64 %.17g (rtol %g, atol %g)", what, (long long)worst, (double)x[worst], ref[worst],
             rtol, atol);
}

/* ---- float64 references ------------------------------------------------ */
/* The scale of a momentum: its recurrence over |g| (see expect_close). */
static double *momentum_scale(const Case *c, double beta) {
  double *a = calloc((size_t)c->n, sizeof(double));
  for (int64_t t = 0; t < c->steps; t++)
    for (int64_t i = 0; i < c->n; i++) a[i] = beta * a[i] + (1.0 - beta) * fabs((double)c->g[t * c->n + i]);
  return a;
}

static void ref_adamw(const Case *c, const FmOptimParams *p, double *w, double *m, double *v) {
  double *dk = decay_mask(&c->tab, p);
  for (int64_t i = 0; i < c->n; i++) w[i] = c->w0[i], m[i] = v[i] = 0.0;
  for (int64_t t = 1; t <= c->steps; t++) {
    const double lr = (float)c->lr[t - 1], b1 = p->beta1, b2 = p->beta2;
    for (int64_t i = 0; i < c->n; i++) {
      const double g = c->g[(t - 1) * c->n + i];
      w[i] *= 1.0 - lr * p->weight_decay * dk[i]; /* decoupled decay first, as torch */
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      const double mhat = m[i] / (1.0 - pow(b1, (double)t)), vhat = v[i] / (1.0 - pow(b2, (double)t));
      w[i] -= lr * mhat / (sqrt(vhat) + p->eps);
    }
  }
  free(dk);
}

static void ref_lion(const Case *c, const FmOptimParams *p, double *w, double *m) {
  double *dk = decay_mask(&c->tab, p);
  for (int64_t i = 0; i < c->n; i++) w[i] = c->w0[i], m[i] = 0.0;
  for (int64_t t = 1; t <= c->steps; t++) {
    const double lr = (float)c->lr[t - 1];
    for (int64_t i = 0; i < c->n; i++) {
      const double g = c->g[(t - 1) * c->n + i];
      const double u = p->beta1 * m[i] + (1.0 - p->beta1) * g;
      const double s = (u > 0) - (u < 0);
      w[i] -= lr * (s + p->weight_decay * dk[i] * w[i]);
      m[i] = p->beta2 * m[i] + (1.0 - p->beta2) * g;
    }
  }
  free(dk);
}

/* Algorithm 3 line by line: h refreshed when t mod k = 1 (line 7) from the
 * GNB estimate B*ghat^2 (Algorithm 2), decay as a separate step (line 12),
 * then the clipped step (line 13). `bias` divides m by 1-beta1^t (Levanter). */
static void ref_sophia(const Case *c, const FmOptimParams *p, bool bias, double *w, double *m, double *h) {
  double *dk = decay_mask(&c->tab, p);
  const double B = 64;
  for (int64_t i = 0; i < c->n; i++) w[i] = c->w0[i], m[i] = h[i] = 0.0;
  for (int64_t t = 1; t <= c->steps; t++) {
    const double lr = (float)c->lr[t - 1];
    for (int64_t i = 0; i < c->n; i++) {
      const double g = c->g[(t - 1) * c->n + i], gh = c->ghat[(t - 1) * c->n + i];
      m[i] = p->beta1 * m[i] + (1.0 - p->beta1) * g;
      if (t % p->sophia_k == 1 % p->sophia_k) h[i] = p->beta2 * h[i] + (1.0 - p->beta2) * B * gh * gh;
      w[i] -= lr * p->weight_decay * dk[i] * w[i];
      const double mm = bias ? m[i] / (1.0 - pow(p->beta1, (double)t)) : m[i];
      double r = mm / fmax(p->sophia_gamma * h[i], p->eps);
      r = r > 1 ? 1 : (r < -1 ? -1 : r);
      w[i] -= lr * r;
    }
  }
  free(dk);
}

/* ---- cases ------------------------------------------------------------- */
FM_TEST(adamw_vs_float64) {
  Case c = make_case(12, 1, 1);
  FmOptimParams p = params_for("adamw");
  float *w = malloc(sizeof(float) * (size_t)c.n);
  memcpy(w, c.w0, sizeof(float) * (size_t)c.n);
  FmOptim *o = run_shard(&c, &p, 0, c.n, w);
  double *rw = malloc(sizeof(double) * (size_t)c.n * 3), *rm = rw + c.n, *rv = rm + c.n;
  ref_adamw(&c, &p, rw, rm, rv);
  expect_close(w, rw, NULL, c.n, 1e-6, 0.0, "adamw w");
  double *ms = momentum_scale(&c, p.beta1);
  expect_close(fm_optim_state_data(o), rm, ms, c.n, 1e-6, 1e-12, "adamw m");
  free(ms);
  expect_close(fm_optim_state_data(o) + c.n, rv, NULL, c.n, 1e-6, 1e-12, "adamw v");
  double moved = 0.0; /* 12 steps of about lr each: the weights moved */
  for (int64_t i = 0; i < c.n; i++) moved += fabs((double)w[i] - c.w0[i]) / (double)c.n;
  FM_EXPECT(moved > 1e-3);
  fm_optim_free(o);
  free(w);
  free(rw);
  free_case(&c);
}

FM_TEST(lion_vs_float64) {
  Case c = make_case(12, 1, 2);
  FmOptimParams p = params_for("lion");
  float *w = malloc(sizeof(float) * (size_t)c.n);
  memcpy(w, c.w0, sizeof(float) * (size_t)c.n);
  FmOptim *o = run_shard(&c, &p, 0, c.n, w);
  double *rw = malloc(sizeof(double) * (size_t)c.n * 2), *rm = rw + c.n;
  ref_lion(&c, &p, rw, rm);
  expect_close(w, rw, NULL, c.n, 1e-6, 0.0, "lion w");
  double *ms = momentum_scale(&c, p.beta2);
  expect_close(fm_optim_state_data(o), rm, ms, c.n, 1e-6, 1e-12, "lion m");
  free(ms);
  fm_optim_free(o);
  free(w);
  free(rw);
  free_case(&c);
}

static void sophia_case(bool bias, uint64_t seed) {
  Case c = make_case(12, 1, seed);
  FmOptimParams p = params_for("sophia");
  p.sophia_bias_correction = bias;
  float *w = malloc(sizeof(float) * (size_t)c.n);
  memcpy(w, c.w0, sizeof(float) * (size_t)c.n);
  FmOptim *o = run_shard(&c, &p, 0, c.n, w);
  double *rw = malloc(sizeof(double) * (size_t)c.n * 3), *rm = rw + c.n, *rh = rm + c.n;
  ref_sophia(&c, &p, bias, rw, rm, rh);
  expect_close(w, rw, NULL, c.n, 1e-6, 0.0, "sophia w");
  double *ms = momentum_scale(&c, p.beta1);
  expect_close(fm_optim_state_data(o), rm, ms, c.n, 1e-6, 1e-12, "sophia m");
  free(ms);
  expect_close(fm_optim_state_data(o) + c.n, rh, NULL, c.n, 1e-6, 1e-12, "sophia h");
  /* Both regimes occur: some coordinates clipped (|ratio| = 1), some not. */
  int clipped = 0, unclipped = 0;
  for (int64_t i = 0; i < c.n; i++) {
    const double r = rm[i] / fmax(p.sophia_gamma * rh[i], p.eps);
    clipped += fabs(r) >= 1, unclipped += fabs(r) < 1;
  }
  FM_EXPECT(clipped > 10 && unclipped > 10);
  fm_optim_free(o);
  free(w);
  free(rw);
  free_case(&c);
}

FM_TEST(sophia_vs_float64_levanter_bias_correction) { sophia_case(true, 3); }

FM_TEST(sophia_vs_float64_paper) { sophia_case(false, 4); }

/* With g = 0 and zero state the step is decay alone: w*(1 - lr*wd) exactly
 * where the flags say decay, w untouched elsewhere (AdamW: 0/(0+eps) = 0). */
static void expect_mask(const FmOptimParams *p, const bool expect[5]) {
  FmTensorTable tab;
  make_table(&tab, 1);
  const int64_t n = tab.numel;
  float *w = malloc(sizeof(float) * (size_t)n), *g = calloc((size_t)n, sizeof(float));
  for (int64_t i = 0; i < n; i++) w[i] = 1.5f;
  FmOptim *o = fm_optim_create(p, &tab, 0, n, stderr);
  fm_optim_step(o, w, g, 1, 0.01f);
  for (int i = 0; i < tab.n; i++) {
    const float want = expect[i] ? 1.5f - 0.01f * (0.1f * 1.5f) : 1.5f;
    FM_EXPECT_BITS_EQ_F32(w[tab.t[i].offset], want);
    FM_EXPECT_BITS_EQ_F32(w[tab.t[i].offset + tab.t[i].numel - 1], want);
  }
  fm_optim_free(o);
  free(w);
  free(g);
  fm_table_free(&tab);
}

FM_TEST(weight_decay_mask_follows_flags) {
  FmOptimParams p = params_for("adamw");
  /* Table order: wte (EMBED), ln1.w (NORM), attn.w (MATRIX), attn.b (BIAS), lm_head (MATRIX). */
  expect_mask(&p, (const bool[5]){false, false, true, false, true});
  p.decay_norms = true;
  expect_mask(&p, (const bool[5]){false, true, true, false, true});
  p.decay_biases = true;
  p.decay_embeddings = true;
  expect_mask(&p, (const bool[5]){true, true, true, true, true});
  /* Segments: merged where neighbours agree, cut at the shard. */
  FmTensorTable tab;
  make_table(&tab, 1);
  FmOptimParams q = params_for("lion");
  FmOptim *o = fm_optim_create(&q, &tab, 80, 200, stderr);
  const FmOptimSeg *s;
  FM_REQUIRE(fm_optim_segments(o, &s) == 3);
  FM_EXPECT(s[0].lo == 80 && s[0].hi == 86 && !s[0].decay);   /* ln1.w tail */
  FM_EXPECT(s[1].lo == 86 && s[1].hi == 182 && s[1].decay);   /* attn.w */
  FM_EXPECT(s[2].lo == 182 && s[2].hi == 200 && !s[2].decay); /* attn.b, cut at 200 */
  fm_optim_free(o);
  o = fm_optim_create(&q, &tab, 0, 100, stderr); /* wte and ln1.w merge: neither decays */
  FM_REQUIRE(fm_optim_segments(o, &s) == 2);
  FM_EXPECT(s[0].lo == 0 && s[0].hi == 86 && !s[0].decay);
  FM_EXPECT(s[1].lo == 86 && s[1].hi == 100 && s[1].decay);
  fm_optim_free(o);
  fm_table_free(&tab);
}

/* ZeRO-1: shards at any boundary (inside tensors too) and any thread count
 * give the same bits as one whole-vector update. */
FM_TEST(shard_split_and_threads_bitwise) {
  static const char *names[] = {"adamw", "lion", "sophia"};
  Case c = make_case(5, 300, 5); /* n = 76,800: over the OpenMP threshold */
  float *whole = malloc(sizeof(float) * (size_t)c.n), *split = malloc(sizeof(float) * (size_t)c.n);
  for (int k = 0; k < 3; k++) {
    FmOptimParams p = params_for(names[k]);
    memcpy(whole, c.w0, sizeof(float) * (size_t)c.n);
    memcpy(split, c.w0, sizeof(float) * (size_t)c.n);
    omp_set_num_threads(1);
    FmOptim *o = run_shard(&c, &p, 0, c.n, whole);
    omp_set_num_threads(4);
    const int64_t cut[] = {0, 12345, 12346, 40000, c.n};
    for (int r = 0; r < 4; r++) {
      FmOptim *os = run_shard(&c, &p, cut[r], cut[r + 1], split);
      const int64_t ns = cut[r + 1] - cut[r];
      for (int j = 0; j < p.kind->state_per_param; j++)
        FM_EXPECT(memcmp(fm_optim_state_data(os) + j * ns, fm_optim_state_data(o) + j * c.n + cut[r],
                         sizeof(float) * (size_t)ns) == 0);
      fm_optim_free(os);
    }
    FM_EXPECT(memcmp(whole, split, sizeof(float) * (size_t)c.n) == 0);
    fm_optim_free(o);
  }
  free(whole);
  free(split);
  free_case(&c);
}

FM_TEST(state_table_and_registry) {
  FM_EXPECT_EQ_INT(fm_optim_find("adamw")->state_per_param, 2);
  FM_EXPECT_EQ_INT(fm_optim_find("LION")->state_per_param, 1);
  FM_EXPECT_EQ_INT(fm_optim_find("sophia")->state_per_param, 2);
  FM_EXPECT(fm_optim_find("sgd") == NULL);
  FmTensorTable tab;
  make_table(&tab, 1);
  static const char *names[] = {"adamw", "lion", "sophia"};
  static const char *want[][2] = {{"optim.m", "optim.v"}, {"optim.m", NULL}, {"optim.m", "optim.h"}};
  for (int k = 0; k < 3; k++) {
    FmOptimParams p = params_for(names[k]);
    FmOptim *o = fm_optim_create(&p, &tab, 10, 110, stderr);
    const FmTensorTable *st = fm_optim_state_table(o);
    FM_EXPECT_EQ_INT(st->n, p.kind->state_per_param);
    FM_EXPECT_EQ_INT(st->numel, 100 * p.kind->state_per_param);
    for (int j = 0; j < st->n; j++) {
      FM_EXPECT_EQ_STR(st->t[j].name, want[k][j]);
      FM_EXPECT_EQ_INT(st->t[j].offset, 100 * j);
      FM_EXPECT_EQ_INT(st->t[j].shape[0], 100);
    }
    FM_EXPECT_EQ_INT(fm_optim_lo(o), 10);
    FM_EXPECT_EQ_INT(fm_optim_hi(o), 110);
    /* Hessian refresh at t = 1, 4, 7 for k = 3; Sophia only. */
    const bool sophia = k == 2;
    FM_EXPECT(fm_optim_hessian_due(o, 1) == sophia && fm_optim_hessian_due(o, 4) == sophia);
    FM_EXPECT(!fm_optim_hessian_due(o, 2) && !fm_optim_hessian_due(o, 3) && !fm_optim_hessian_due(o, 0));
    float gh[100] = {0};
    FM_EXPECT_EQ_INT(fm_optim_sophia_hessian_update(o, gh, 8), sophia ? 0 : FM_EINVAL);
    fm_optim_free(o);
  }
  FmOptimParams p = params_for("adamw");
  FM_EXPECT(fm_optim_create(&p, &tab, 10, tab.numel + 1, NULL) == NULL);
  FM_EXPECT(fm_optim_create(&p, &tab, 20, 10, NULL) == NULL);
  fm_table_free(&tab);
}

/* The deck picks each optimizer's own betas and Sophia's eps. */
FM_TEST(params_from_deck) {
  static const struct {
    const char *override[2];
    const char *name;
    double b1, b2, eps;
  } cases[] = {{{"optim%name='adamw'", NULL}, "adamw", 0.9, 0.95, 1e-8},
               {{"optim%name='lion'", NULL}, "lion", 0.9, 0.99, 1e-8},
               {{"optim%name='sophia'", NULL}, "sophia", 0.965, 0.99, 1e-12},
               {{"optim%name='lion'", "optim%lion_betas=0.95, 0.98"}, "lion", 0.95, 0.98, 1e-8}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FmDeck d;
    fm_deck_init(&d);
    FmDeckSource src[2];
    int n = 0;
    for (; n < 2 && cases[i].override[n]; n++) src[n] = (FmDeckSource){"<command line>", cases[i].override[n], true};
    char *msgs = NULL;
    FM_REQUIRE(deck_bind_capture(&d, n, src, &msgs) == 0);
    free(msgs);
    FmOptimParams p;
    FM_REQUIRE(fm_optim_params_from_deck(&p, &d, stderr) == 0);
    FM_EXPECT_EQ_STR(p.kind->name, cases[i].name);
    FM_EXPECT(p.beta1 == cases[i].b1 && p.beta2 == cases[i].b2 && p.eps == cases[i].eps);
    FM_EXPECT(p.weight_decay == 0.1 && !p.decay_norms);
    if (strcmp(cases[i].name, "sophia") == 0) FM_EXPECT(p.sophia_k == 10 && p.sophia_bias_correction);
    fm_deck_free(&d);
  }
}
