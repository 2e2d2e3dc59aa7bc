/* test_generate.c: generation. The decode attention op against the full
 * forward's rows; the key/value-cache decode of the tiny GPT-2 and Llama
 * (GQA) against fm_model_logits over the whole sequence at every position
 * (logits within 1e-5, greedy argmax equal); the sampler (seeded draws
 * reproducible, top-k = 1 and a tiny top-p are greedy, frequencies follow
 * softmax(logits / temperature)). */
#include "fm_test.h"

#include "../model/model_testing.h"
#include "fmhpc/backend.h"
#include "fmhpc/core.h"
#include "fmhpc/generate.h"

static float urand(uint64_t i) { return 2.0f * fm_rng_uniform(99, FM_RNG_DATA, 3, i) - 1.0f; }

/* Rows t = pos[b] of attention_fwd over (B, T) equal the decode op reading
 * the same k and v as its cache: T = 70 spans two key tiles; GQA 4/2. */
FM_TEST(attention_decode_equals_forward_row) {
  const int64_t B = 2, T = 70, NH = 4, NKV = 2, HS = 8, Q = NH * HS, KV = NKV * HS;
  float *q = malloc((size_t)(B * T * Q) * 4), *k = malloc((size_t)(B * T * KV) * 4), *v = malloc((size_t)(B * T * KV) * 4);
  float *out = malloc((size_t)(B * T * Q) * 4), *lse = malloc((size_t)(B * NH * T) * 4);
  for (int64_t i = 0; i < B * T * Q; i++) q[i] = urand((uint64_t)i);
  for (int64_t i = 0; i < B * T * KV; i++) k[i] = urand((uint64_t)(1000000 + i)), v[i] = urand((uint64_t)(2000000 + i));
  fm_cpu_attention_fwd(out, lse, q, k, v, Q, KV, NULL, B, T, NH, NKV, HS);
  const int32_t cases[3][2] = {{69, 0}, {30, 64}, {63, 5}};
  int bitwise = 0, total = 0;
  for (int c = 0; c < 3; c++) {
    float qd[2 * 32], od[2 * 32];
    for (int64_t b = 0; b < B; b++) memcpy(qd + b * Q, q + (b * T + cases[c][b]) * Q, (size_t)Q * 4);
    fm_cpu_attention_decode(od, qd, k, v, Q, KV, cases[c], B, T, NH, NKV, HS);
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < Q; j++) {
        const float ref = out[(b * T + cases[c][b]) * Q + j], got = od[b * Q + j];
        FM_EXPECT_NEAR(got, ref, 1e-6, 1e-7);
        bitwise += memcmp(&got, &ref, 4) == 0;
        total++;
      }
  }
  printf("attention_decode: %d of %d values bitwise equal to attention_fwd (the rest within 1e-6)\n", bitwise, total);
  free(q), free(k), free(v), free(out), free(lse);
}

/* Greedy decoding of the tiny model with its KV cache, checked at every
 * position against a second model (same weights) running the full forward
 * over the sequence so far. Prompts of 3 and 1 tokens, up to T = 9. */
static void check_decode(const char *arch, bool tied) {
  FmModel *m = tiny_model(arch, tied, false), *ref = tiny_model(arch, tied, false), *dec = NULL;
  FM_REQUIRE(m && ref);
  FM_REQUIRE(fm_model_gen_create(&dec, m, stderr) == 0);
  const int64_t B = TINY_B, T = TINY_T, V = fm_model_get_dims(m)->V;
  int32_t tokens[TINY_N] = {0}, pos[TINY_N], rtok[TINY_N] = {0};
  int64_t len[TINY_B] = {3, 1}, rows[TINY_B];
  const int32_t prompt[TINY_B][3] = {{5, 17, 30}, {11, 0, 0}};
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      pos[b * T + t] = (int32_t)t;
      if (t < len[b] && t < 3) tokens[b * T + t] = prompt[b][t]; /* t < 3: GCC -O3 cannot see len <= 3 */
    }
  float logits[TINY_B * 37], full[TINY_B * 37];
  for (int64_t b = 0; b < B; b++) rows[b] = b * T + len[b] - 1;
  const FmModelInput in = {tokens, NULL, pos, NULL};
  fm_model_logits(m, &in, rows, B, logits); /* prefill fills the cache */
  int steps = 0, argmax_equal = 0;
  double worst = 0.0;
  for (;;) {
    /* The reference: the whole sequences so far through the full forward. */
    memcpy(rtok, tokens, sizeof rtok);
    const FmModelInput rin = {rtok, NULL, pos, NULL};
    fm_model_logits(ref, &rin, rows, B, full);
    for (int64_t i = 0; i < B * V; i++) {
      FM_EXPECT_NEAR(logits[i], full[i], 1e-5, 1e-5);
      const double e = fabs((double)logits[i] - full[i]);
      if (e > worst) worst = e;
    }
    int32_t next[TINY_B], dpos[TINY_B];
    bool any = false;
    for (int64_t b = 0; b < B; b++) {
      next[b] = fm_sample_argmax(logits + b * V, V);
      FM_EXPECT_EQ_INT(next[b], fm_sample_argmax(full + b * V, V));
      argmax_equal += next[b] == fm_sample_argmax(full + b * V, V);
      if (len[b] < T) {
        tokens[b * T + len[b]] = next[b];
        len[b]++;
        any = true;
      }
      dpos[b] = (int32_t)(len[b] - 1);
      rows[b] = b * T + len[b] - 1;
    }
    steps++;
    if (!any) break;
    int32_t dtok[TINY_B] = {tokens[rows[0]], tokens[rows[1]]};
    fm_model_decode(dec, dtok, dpos, logits);
  }
  printf("%s tied=%d: %d positions x %lld sequences, argmax equal %d, max |decode - full| logit %.3g\n", arch,
         (int)tied, steps, (long long)B, argmax_equal, worst);
  FM_EXPECT_EQ_INT(argmax_equal, steps * B);
  FM_EXPECT(steps >= 8);
  fm_model_free(dec);
  fm_model_free(m);
  fm_model_free(ref);
}

FM_TEST(decode_equals_full_forward_gpt2) {
  check_decode("gpt2", true);
  check_decode("gpt2", false);
}

FM_TEST(decode_equals_full_forward_llama_gqa) {
  check_decode("llama", false);
  check_decode("llama", true);
}

FM_TEST(decode_needs_kept_activations) {
  FmModel *m = tiny_model("llama", false, true), *dec = NULL;
  FM_REQUIRE(m);
  FM_EXPECT_EQ_INT(fm_model_gen_create(&dec, m, NULL), FM_EINVAL);
  FM_EXPECT(dec == NULL);
  fm_model_free(m);
}

static void fixed_logits(float *l, int64_t V) {
  for (int64_t i = 0; i < V; i++) l[i] = 3.0f * urand((uint64_t)(5000 + i));
}

FM_TEST(sample_seeded_and_greedy_limits) {
  enum { V = 50 };
  float l[V];
  FmSampleCand cand[V];
  fixed_logits(l, V);
  const int32_t greedy = fm_sample_argmax(l, V);
  FmSampleOpts o = {1.0, 0, 1.0, 7};
  int differ = 0;
  for (int64_t pos = 0; pos < 200; pos++) {
    const int32_t a = fm_sample_token(l, V, &o, pos, 3, cand), b = fm_sample_token(l, V, &o, pos, 3, cand);
    FM_EXPECT_EQ_INT(a, b); /* a pure function of (seed, position, sequence) */
    FmSampleOpts o2 = o;
    o2.seed = 8;
    differ += fm_sample_token(l, V, &o2, pos, 3, cand) != a;
    FmSampleOpts k1 = o, p0 = o, t0 = o;
    k1.top_k = 1;
    p0.top_p = 1e-9;
    t0.temperature = 0.0;
    FM_EXPECT_EQ_INT(fm_sample_token(l, V, &k1, pos, 3, cand), greedy);
    FM_EXPECT_EQ_INT(fm_sample_token(l, V, &p0, pos, 3, cand), greedy);
    FM_EXPECT_EQ_INT(fm_sample_token(l, V, &t0, pos, 3, cand), greedy);
  }
  FM_EXPECT(differ > 100); /* another seed is another stream */
}

/* Frequencies over 40000 draws (sequence index varies) against
 * softmax(logits / 0.7) restricted to the top 5: within 0.012 (> 4 sigma). */
FM_TEST(sample_frequencies_follow_softmax) {
  enum { V = 20, N = 40000 };
  float l[V];
  FmSampleCand cand[V];
  fixed_logits(l, V);
  const FmSampleOpts o = {0.7, 5, 1.0, 11};
  int count[V] = {0};
  for (int64_t s = 0; s < N; s++) count[fm_sample_token(l, V, &o, 4, s, cand)]++;
  /* reference: the 5 largest logits */
  double p[V] = {0}, z = 0;
  float thr;
  {
    float sorted[V];
    memcpy(sorted, l, sizeof sorted);
    for (int i = 0; i < V; i++)
      for (int j = i + 1; j < V; j++)
        if (sorted[j] > sorted[i]) {
          const float t = sorted[i];
          sorted[i] = sorted[j];
          sorted[j] = t;
        }
    thr = sorted[4];
  }
  for (int i = 0; i < V; i++)
    if (l[i] >= thr) z += p[i] = exp((double)l[i] / 0.7);
  for (int i = 0; i < V; i++) FM_EXPECT_NEAR((double)count[i] / N, p[i] / z, 0.0, 0.012);
  /* top-p keeps the smallest prefix reaching the mass: with top_p = the top
   * token's share minus a little, only the top token is ever drawn */
  const int32_t top = fm_sample_argmax(l, V);
  double ztot = 0;
  for (int i = 0; i < V; i++) ztot += exp((double)l[i]);
  const FmSampleOpts op = {1.0, 0, 0.99 * exp((double)l[top]) / ztot, 12};
  for (int64_t s = 0; s < 500; s++) FM_EXPECT_EQ_INT(fm_sample_token(l, V, &op, 0, s, cand), top);
}
