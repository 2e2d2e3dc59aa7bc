/* test_model_fwd_bwd.c: FmModel forward/backward on the CPU backend for tiny
 * GPT-2 and Llama models (tests/model/model_testing.h): whole-model gradients
 * against central finite differences of the model's own loss, bitwise
 * promises (recompute on/off, masked targets, the document mask), weight init
 * (seeded, split-independent, the stated std per tensor), activation
 * statistics and logits against the loss. The float64 and PyTorch references
 * are tests/model/ref_models.py. */
#include "../model/model_testing.h"
#include "fm_test.h"

static const float *grads(FmModel *m) { return fm_model_grad_arena(m); }

/* Bitwise equality of two doubles (the design promises bits). */
static bool same_bits(double a, double b) {
  uint64_t ua, ub;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  return ua == ub;
}

static double loss_of(FmModel *m, const TinyBatch *b) { return fm_model_forward_backward(m, &b->in, b->weight, false); }

/* ---- gradient check ---------------------------------------------------------- */

/* Central differences in double of the fp32 model's loss L (a weighted mean
 * near 3.6). eps = 1e-2 against weights of size 0.25..1: the truncation
 * error eps^2/6 |L'''| is about 2e-5 and the fp32 rounding of L (a few ulp of
 * 3.6, ~1e-6) divided by 2 eps adds about 5e-5, so a coordinate passes with
 * |fd - g| <= 1e-4 + 5e-3 |g|, and the directional derivative along a random
 * unit direction over every parameter (|g.u| well above those errors)
 * within 2e-3 relative. Every tensor gets at least 8 coordinates, ~200 in all. */
static void gradcheck(const char *arch, bool tied) {
  FmModel *m = tiny_model(arch, tied, false);
  FM_REQUIRE(m);
  TinyBatch b;
  tiny_batch(&b, fm_model_get_dims(m)->V, 5);
  fm_model_zero_grad(m);
  fm_model_forward_backward(m, &b.in, b.weight, true);
  const FmTensorTable *tab = fm_model_params(m);
  const int64_t P = tab->numel;
  float *g = malloc((size_t)P * sizeof(float));
  memcpy(g, grads(m), (size_t)P * sizeof(float));
  float *w = fm_model_param_arena(m);
  const double eps = 1e-2;
  int checked = 0, bad = 0;
  double worst = 0;
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    const int64_t k = 8 + 200 * t->numel / P;
    double gmax = 0;
    for (int64_t j = 0; j < t->numel; j++) gmax = fmax(gmax, fabs(g[t->offset + j]));
    for (int64_t s = 0; s < k; s++) {
      int64_t j = (int64_t)(fm_rng_block(9, FM_RNG_DATA, (uint32_t)i, (uint64_t)s).v[0] % (uint64_t)t->numel);
      /* Embedding rows of tokens not in the batch have zero gradient: look
       * at the largest-gradient element for half the samples. */
      if (s % 2 == 1)
        for (int64_t jj = 0; jj < t->numel; jj++)
          if (fabs(g[t->offset + jj]) == gmax) j = jj;
      float *p = w + t->offset + j;
      const float w0 = *p;
      *p = (float)(w0 + eps);
      const double lp = loss_of(m, &b);
      *p = (float)(w0 - eps);
      const double lm = loss_of(m, &b);
      *p = w0;
      /* the step actually taken, in float */
      const double fd = (lp - lm) / ((double)(float)(w0 + eps) - (double)(float)(w0 - eps));
      const double ga = g[t->offset + j], err = fabs(fd - ga);
      worst = fmax(worst, err / (1e-4 + 5e-3 * fabs(ga)));
      if (err > 1e-4 + 5e-3 * fabs(ga)) {
        if (bad++ < 10) fprintf(stderr, "%s %s[%lld]: fd %.8g vs grad %.8g\n", arch, t->name, (long long)j, fd, ga);
      }
      checked++;
    }
  }
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT(checked >= 150);
  /* Directional derivative along u (unit norm, every parameter). */
  double *u = malloc((size_t)P * sizeof(double)), un = 0, gu = 0;
  for (int64_t j = 0; j < P; j++) {
    u[j] = fm_rng_normal(11, FM_RNG_DATA, 3, (uint64_t)j);
    un += u[j] * u[j];
  }
  float *w0 = malloc((size_t)P * sizeof(float));
  memcpy(w0, w, (size_t)P * sizeof(float));
  for (int64_t j = 0; j < P; j++) {
    u[j] /= sqrt(un);
    gu += u[j] * g[j];
  }
  const double h = 2e-2;
  for (int64_t j = 0; j < P; j++) w[j] = (float)(w0[j] + h * u[j]);
  const double lp = loss_of(m, &b);
  for (int64_t j = 0; j < P; j++) w[j] = (float)(w0[j] - h * u[j]);
  const double lm = loss_of(m, &b);
  memcpy(w, w0, (size_t)P * sizeof(float));
  const double dd = (lp - lm) / (2 * h);
  fprintf(stderr, "%s%s: %d coordinates, worst err/tol %.3g; directional fd %.9g vs g.u %.9g (rel %.2e)\n", arch,
          tied ? " tied" : "", checked, worst, dd, gu, fabs(dd - gu) / fabs(gu));
  FM_EXPECT_NEAR(dd, gu, 2e-3, 0);
  free(u);
  free(w0);
  free(g);
  fm_model_free(m);
}

FM_TEST(gradcheck_gpt2) { gradcheck("gpt2", true); }
FM_TEST(gradcheck_gpt2_untied) { gradcheck("gpt2", false); }
FM_TEST(gradcheck_llama) { gradcheck("llama", false); }
FM_TEST(gradcheck_llama_tied) { gradcheck("llama", true); }

/* ---- the grad_ready hook (the exact reduction's per-layer buckets) ------------ */

typedef struct {
  const FmModel *m;
  float *seen;   /* each range's gradient as it was when reported */
  int64_t *hits; /* times each element was reported */
  int64_t calls;
  int64_t prev_l; /* the block of the last block slice reported */
  bool outside;   /* an embedding was reported */
  int64_t out_of_order;
} ReadyLog;

static void log_ready(void *ctx, int64_t lo, int64_t hi) {
  ReadyLog *g = ctx;
  const float *grad = fm_model_grad_arena((FmModel *)g->m);
  memcpy(g->seen + lo, grad + lo, (size_t)(hi - lo) * sizeof(float));
  for (int64_t i = lo; i < hi; i++) g->hits[i]++;
  g->calls++;
  const FmTensorTable *tab = fm_model_params(g->m);
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    if (lo < t->offset || lo >= t->offset + t->numel) continue;
    if (t->flags & FM_TF_LAYER) {
      const int64_t l = (lo - t->offset) / (t->numel / t->shape[0]);
      g->out_of_order += g->outside || l > g->prev_l;
      g->prev_l = l;
    } else if (t->flags & FM_TF_EMBED) {
      g->outside = true;
    } else { /* the head: with the last block, before any other */
      g->out_of_order += g->outside || g->prev_l < fm_model_get_dims(g->m)->L - 1;
    }
  }
}

/* Every element reported exactly once per backward, with its final value (the
 * gradient at report time equals the gradient after the backward pass, on
 * the second micro-batch too, where it accumulates), block slices from the
 * last block to the first: what fm_reduce_bucket relies on. */
static void grad_ready_final(const char *arch, bool tied) {
  FmModel *m = tiny_model(arch, tied, false);
  FM_REQUIRE(m);
  TinyBatch b;
  tiny_batch(&b, fm_model_get_dims(m)->V, 7);
  const FmTensorTable *tab = fm_model_params(m);
  const int64_t n = tab->numel, L = fm_model_get_dims(m)->L;
  ReadyLog g = {m, fm_xcalloc((size_t)n, sizeof(float)), fm_xcalloc((size_t)n, sizeof(int64_t)), 0, L, false, 0};
  fm_model_zero_grad(m);
  for (int rep = 0; rep < 2; rep++) {
    memset(g.hits, 0, (size_t)n * sizeof *g.hits);
    g.calls = 0, g.prev_l = L, g.outside = false, g.out_of_order = 0;
    fm_model_set_grad_ready(m, log_ready, &g);
    fm_model_forward_backward(m, &b.in, b.weight, true);
    fm_model_set_grad_ready(m, NULL, NULL);
    int64_t once = 0, layered = 0;
    for (int64_t i = 0; i < n; i++) once += g.hits[i] == 1;
    FM_EXPECT_EQ_INT(once, n);
    FM_EXPECT(memcmp(g.seen, grads(m), (size_t)n * sizeof(float)) == 0);
    for (int i = 0; i < tab->n; i++) layered += (tab->t[i].flags & FM_TF_LAYER) != 0;
    FM_EXPECT(layered > 0);
    FM_EXPECT_EQ_INT(g.out_of_order, 0); /* blocks from the last to the first, the other tensors after them */
    FM_EXPECT_EQ_INT(g.calls, layered * L + (tab->n - layered)); /* one range per block slice, one per other tensor */
  }
  /* and nothing is reported once the hook is off */
  g.calls = 0;
  fm_model_forward_backward(m, &b.in, b.weight, true);
  FM_EXPECT_EQ_INT(g.calls, 0);
  free(g.seen);
  free(g.hits);
  fm_model_free(m);
}

FM_TEST(grad_ready_final_gpt2) { grad_ready_final("gpt2", true); }
FM_TEST(grad_ready_final_gpt2_untied) { grad_ready_final("gpt2", false); }
FM_TEST(grad_ready_final_llama) { grad_ready_final("llama", false); }
FM_TEST(grad_ready_final_llama_tied) { grad_ready_final("llama", true); }

/* ---- bitwise promises --------------------------------------------------------- */

/* Recompute only changes when activations are made: same bits. */
static void recompute_bits(const char *arch, bool bf16) {
  FmModel *a = tiny_model(arch, false, false), *r = tiny_model(arch, false, true);
  FM_REQUIRE(a && r);
  TinyBatch b;
  tiny_batch(&b, fm_model_get_dims(a)->V, 5);
  fm_model_set_compute_bf16(a, bf16);
  fm_model_set_compute_bf16(r, bf16);
  const int64_t P = fm_model_params(a)->numel;
  for (int rep = 0; rep < 2; rep++) { /* twice: gradients accumulate over micro-batches */
    const double la = fm_model_forward_backward(a, &b.in, b.weight, true);
    const double lr = fm_model_forward_backward(r, &b.in, b.weight, true);
    FM_EXPECT(same_bits(la, lr));
  }
  FM_EXPECT(memcmp(grads(a), grads(r), (size_t)P * sizeof(float)) == 0);
  /* and the recompute arena is smaller */
  FM_EXPECT(fm_model_act_table(r)->numel < fm_model_act_table(a)->numel);
  fm_model_set_compute_bf16(a, false);
  fm_model_free(a);
  fm_model_free(r);
}

FM_TEST(recompute_identical_bits_gpt2) { recompute_bits("gpt2", false); }
FM_TEST(recompute_identical_bits_llama) { recompute_bits("llama", false); }
FM_TEST(recompute_identical_bits_bf16) {
  recompute_bits("gpt2", true);
  recompute_bits("llama", true);
}

/* A masked token's target changes nothing: loss and gradient bits. */
static void masked_target(const char *arch) {
  FmModel *m = tiny_model(arch, true, false);
  FM_REQUIRE(m);
  TinyBatch b;
  tiny_batch(&b, fm_model_get_dims(m)->V, 5);
  FM_REQUIRE(b.weight[0] == 0.0f && b.weight[TINY_T + 5] == 0.0f);
  const int64_t P = fm_model_params(m)->numel;
  fm_model_zero_grad(m);
  const double l0 = fm_model_forward_backward(m, &b.in, b.weight, true);
  float *g0 = malloc((size_t)P * sizeof(float));
  memcpy(g0, grads(m), (size_t)P * sizeof(float));
  b.targets[0] = (b.targets[0] + 7) % 37;
  b.targets[TINY_T + 5] = (b.targets[TINY_T + 5] + 11) % 37;
  fm_model_zero_grad(m);
  const double l1 = fm_model_forward_backward(m, &b.in, b.weight, true);
  FM_EXPECT(same_bits(l0, l1));
  FM_EXPECT(memcmp(g0, grads(m), (size_t)P * sizeof(float)) == 0);
  /* and an unmasked one does change the loss (the test can fail) */
  b.targets[3] = (b.targets[3] + 5) % 37;
  FM_EXPECT(loss_of(m, &b) != l0);
  free(g0);
  fm_model_free(m);
}

FM_TEST(masked_target_changes_nothing_gpt2) { masked_target("gpt2"); }
FM_TEST(masked_target_changes_nothing_llama) { masked_target("llama"); }

/* Changing a token of document 2 leaves document 1's logits the same bits
 * (row 0: document 1 is t < 4), and the other row's logits too. */
static void document_mask(const char *arch) {
  FmModel *m = tiny_model(arch, false, false);
  FM_REQUIRE(m);
  const int64_t V = fm_model_get_dims(m)->V;
  TinyBatch b;
  tiny_batch(&b, V, 5);
  float *z0 = malloc((size_t)(TINY_N * V) * sizeof(float)), *z1 = malloc((size_t)(TINY_N * V) * sizeof(float));
  fm_model_logits(m, &b.in, NULL, 0, z0);
  b.tokens[6] = (b.tokens[6] + 1) % (int32_t)V; /* row 0, document 2 */
  fm_model_logits(m, &b.in, NULL, 0, z1);
  FM_EXPECT(memcmp(z0, z1, (size_t)(4 * V) * sizeof(float)) == 0);
  FM_EXPECT(memcmp(z0 + TINY_T * V, z1 + TINY_T * V, (size_t)(TINY_T * V) * sizeof(float)) == 0);
  /* document 2 from the changed token on does see it */
  FM_EXPECT(memcmp(z0 + 6 * V, z1 + 6 * V, (size_t)V * sizeof(float)) != 0);
  FM_EXPECT(memcmp(z0 + 8 * V, z1 + 8 * V, (size_t)V * sizeof(float)) != 0);
  /* without segment ids, position 8 of row 0 sees document 1 too */
  TinyBatch nb = b;
  nb.in.seg = NULL;
  nb.in.tokens = nb.tokens;
  nb.in.targets = nb.targets;
  nb.in.pos = nb.pos;
  fm_model_logits(m, &nb.in, NULL, 0, z1);
  FM_EXPECT(memcmp(z0 + 8 * V, z1 + 8 * V, (size_t)V * sizeof(float)) != 0);
  free(z0);
  free(z1);
  fm_model_free(m);
}

FM_TEST(document_mask_isolates_gpt2) { document_mask("gpt2"); }
FM_TEST(document_mask_isolates_llama) { document_mask("llama"); }

/* ---- logits, loss, act stats --------------------------------------------------- */

/* The loss equals sum_n w_n (logsumexp(z_n) - z_n[target]) of the logits
 * fm_model_logits returns, in double: 1e-6 relative (fp32 logits). Rows
 * picked out of order give the same bits as the full set. */
static void logits_match_loss(const char *arch) {
  FmModel *m = tiny_model(arch, false, false);
  FM_REQUIRE(m);
  const int64_t V = fm_model_get_dims(m)->V;
  TinyBatch b;
  tiny_batch(&b, V, 5);
  const double loss = loss_of(m, &b);
  float *z = malloc((size_t)(TINY_N * V) * sizeof(float));
  fm_model_logits(m, &b.in, NULL, 0, z);
  double ref = 0;
  for (int64_t n = 0; n < TINY_N; n++) {
    double mx = z[n * V];
    for (int64_t v = 1; v < V; v++) mx = fmax(mx, z[n * V + v]);
    double s = exp(z[n * V] - mx);
    for (int64_t v = 1; v < V; v++) s += exp(z[n * V + v] - mx);
    ref += b.weight[n] * (mx + log(s) - z[n * V + b.targets[n]]);
  }
  FM_EXPECT_NEAR(loss, ref, 1e-6, 0);
  const int64_t rows[3] = {17, 8, 0};
  float zr[3 * 37];
  fm_model_logits(m, &b.in, rows, 3, zr);
  for (int i = 0; i < 3; i++) FM_EXPECT(memcmp(zr + i * V, z + rows[i] * V, (size_t)V * sizeof(float)) == 0);
  free(z);
  fm_model_free(m);
}

FM_TEST(logits_match_loss_gpt2) { logits_match_loss("gpt2"); }
FM_TEST(logits_match_loss_llama) { logits_match_loss("llama"); }

/* act stats: one variance per block, positive, the same with recompute. */
FM_TEST(act_stats_per_layer) {
  FmModel *a = tiny_model("llama", false, false), *r = tiny_model("llama", false, true);
  FM_REQUIRE(a && r);
  TinyBatch b;
  tiny_batch(&b, 37, 5);
  loss_of(a, &b);
  fm_model_forward_backward(r, &b.in, b.weight, true);
  double va[2], vr[2];
  FM_EXPECT_EQ_INT(fm_model_act_stats(a, va), 2);
  FM_EXPECT_EQ_INT(fm_model_act_stats(r, vr), 2);
  for (int l = 0; l < 2; l++) {
    FM_EXPECT(va[l] > 0);
    FM_EXPECT(same_bits(va[l], vr[l]));
  }
  fm_model_free(a);
  fm_model_free(r);
}

/* ---- init ------------------------------------------------------------------------ */

static FmTensorTable init_table(const char *arch) {
  FmModelDims d = tiny_dims(arch, false);
  d.C = 128;
  d.HS = 32;
  d.F = 512;
  d.L = 4;
  d.V = 1000;
  d.T = 256;
  FmTensorTable tab;
  fm_model_param_table(&tab, fm_model_find(arch), &d);
  return tab;
}

static double tensor_std(const float *w, const FmTensor *t) {
  double s = 0, s2 = 0;
  for (int64_t j = 0; j < t->numel; j++) {
    s += w[t->offset + j];
    s2 += (double)w[t->offset + j] * w[t->offset + j];
  }
  const double mean = s / (double)t->numel;
  return sqrt(s2 / (double)t->numel - mean * mean);
}

/* std within 2% of what init states (the estimate's own sd is ~0.3% here):
 * matrices 0.02, residual projections 0.02/sqrt(2L), GPT-2's wpe 0.01; norms
 * exactly 1 and biases exactly 0. */
FM_TEST(init_std_per_tensor) {
  const char *arch[2] = {"gpt2", "llama"};
  for (int a = 0; a < 2; a++) {
    FmTensorTable tab = init_table(arch[a]);
    float *w = malloc((size_t)tab.numel * sizeof(float));
    fm_model_init_range(w, &tab, 4, 0, tab.numel, 1234, 0.02, true);
    for (int i = 0; i < tab.n; i++) {
      const FmTensor *t = &tab.t[i];
      if (t->flags & (FM_TF_ONES | FM_TF_ZEROS)) {
        const float want = (t->flags & FM_TF_ONES) ? 1.0f : 0.0f;
        for (int64_t j = 0; j < t->numel; j++) FM_EXPECT(w[t->offset + j] == want);
        continue;
      }
      double want = 0.02;
      if (t->flags & FM_TF_RESIDUAL) want = 0.02 / sqrt(8.0);
      if (strcmp(t->name, "wpe") == 0) want = 0.01;
      FM_EXPECT_NEAR(tensor_std(w, t), want, 0.02, 0);
    }
    free(w);
    fm_table_free(&tab);
  }
}

/* Element g's value depends only on (seed, g): any split of the flat vector
 * gives the same bits; the same seed the same bits; another seed others. */
FM_TEST(init_is_a_function_of_the_index) {
  FmTensorTable tab = init_table("llama");
  const int64_t P = tab.numel;
  float *whole = malloc((size_t)P * sizeof(float)), *parts = malloc((size_t)P * sizeof(float));
  float *again = malloc((size_t)P * sizeof(float));
  fm_model_init_range(whole, &tab, 4, 0, P, 77, 0.02, true);
  fm_model_init_range(again, &tab, 4, 0, P, 77, 0.02, true);
  FM_EXPECT(memcmp(whole, again, (size_t)P * sizeof(float)) == 0);
  /* 7 uneven slices with boundaries inside tensors, as 7 ranks would hold */
  int64_t cut[8] = {0, 1, 12345, 99999, 200003, P / 2 + 17, P - 5, P};
  for (int i = 0; i < 7; i++) fm_model_init_range(parts + cut[i], &tab, 4, cut[i], cut[i + 1], 77, 0.02, true);
  FM_EXPECT(memcmp(whole, parts, (size_t)P * sizeof(float)) == 0);
  fm_model_init_range(again, &tab, 4, 0, P, 78, 0.02, true);
  int64_t same = 0;
  for (int64_t j = 0; j < P; j++) same += whole[j] == again[j] && whole[j] != 0.0f && whole[j] != 1.0f;
  FM_EXPECT(same < P / 1000);
  free(whole);
  free(parts);
  free(again);
  fm_table_free(&tab);
}

/* fm_model_init_weights writes what fm_model_init_range computes. */
FM_TEST(init_weights_on_the_backend) {
  FmModel *m = tiny_model("gpt2", true, false);
  FM_REQUIRE(m);
  fm_model_init_weights(m, 3, 0.02, true);
  const FmTensorTable *tab = fm_model_params(m);
  float *w = malloc((size_t)tab->numel * sizeof(float));
  fm_model_init_range(w, tab, fm_model_get_dims(m)->L, 0, tab->numel, 3, 0.02, true);
  FM_EXPECT(memcmp(w, fm_model_param_arena(m), (size_t)tab->numel * sizeof(float)) == 0);
  FM_EXPECT(fm_model_param(m, "lm_head") == NULL); /* tied */
  FM_EXPECT(fm_model_grad(m, "wte") == fm_model_grad_arena(m));
  free(w);
  fm_model_free(m);
}

/* A backend without the model ops is refused with a message. */
FM_TEST(create_needs_model_ops) {
  FmBackend be = *fm_backend_cpu();
  be.attention_fwd = NULL;
  const FmModelDims d = tiny_dims("gpt2", true);
  FmModel *m = (FmModel *)&be;
  char *buf = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&buf, &len);
  FM_EXPECT_EQ_INT(fm_model_create(&m, fm_model_find("gpt2"), &d, &be, 2, false, err), FM_EINVAL);
  fclose(err);
  FM_EXPECT(m == NULL);
  FM_EXPECT_CONTAINS(buf, "attention_fwd");
  free(buf);
}

/* The planner's count (fm_model_act_elems, what --check prints) is exactly
 * what the model allocates beside its weights: the activation arena (kept
 * values and backward scratch) plus the batch buffers (token weights N,
 * logits rows b*C and b*V, the cross-entropy scratch), with or without
 * recompute. */
FM_TEST(activation_arena_matches_the_plan) {
  const char *arch[2] = {"gpt2", "llama"};
  for (int a = 0; a < 2; a++)
    for (int rc = 0; rc < 2; rc++) {
      FmModel *m = tiny_model(arch[a], false, rc);
      FM_REQUIRE(m);
      const FmModelDims *d = fm_model_get_dims(m);
      const FmTensorTable *acts = fm_model_act_table(m);
      const int64_t N = TINY_N;
      const int64_t batch = N + TINY_B * d->C + TINY_B * d->V + fm_cpu_xent_scratch(N, d->V);
      const int64_t plan = fm_model_act_elems(fm_model_find(arch[a]), d, TINY_B, rc);
      FM_EXPECT_EQ_INT(plan, acts->numel + batch);
      fm_model_free(m);
    }
}
