/* test_minhash.c: MinHash, LSH banding and the cleaning filters of task='dedup'
 * (src/clean/minhash.c) against exact values: the estimator against the exact
 * Jaccard of synthetic shingle sets at known similarity, the LSH candidate
 * rate against the S-curve 1 - (1 - J^r)^b, independence of the seeded hashes,
 * normalisation and shingling by hand, and every filter rule on hand-made
 * strings (one positive and one negative each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/clean.h"
#include "fmhpc/rng.h"

/* A pair of sets with |A & B| = s, |A - B| = |B - A| = d: J = s / (s + 2d).
 * Elements are distinct random 63-bit values (disjoint ranges by tag). */
static void make_pair(uint64_t *a, uint64_t *b, int s, int d, uint64_t pair) {
  for (int i = 0; i < s; i++) a[i] = b[i] = fm_mix64(pair << 20 | (uint64_t)i) >> 1;
  for (int i = 0; i < d; i++) {
    a[s + i] = fm_mix64(pair << 20 | (uint64_t)(s + i)) >> 1;
    b[s + i] = fm_mix64(pair << 20 | (uint64_t)(s + d + i)) >> 1;
  }
}

/* 200 pairs with J from 0.05 to 0.95; returns mean error, mean |error|, max
 * |error| in units of the binomial sigma sqrt(J(1-J)/K), and the largest |error|. */
static void estimator_errors(int K, double *bias, double *mae, double *max_z, double *max_abs) {
  FmMinHash m;
  FM_REQUIRE(fm_minhash_init(&m, K, K, 1, 7) == 0);
  enum { NP = 200, NMAX = 2000 };
  uint64_t *a = malloc(NMAX * sizeof *a), *b = malloc(NMAX * sizeof *b);
  uint64_t *sa = malloc((size_t)K * sizeof *sa), *sb = malloc((size_t)K * sizeof *sb);
  *bias = *mae = *max_z = *max_abs = 0;
  for (int p = 0; p < NP; p++) {
    int n = 200 + 5 * p; /* |A u B| = s + 2d */
    double target = 0.05 + 0.9 * p / (NP - 1);
    int s = (int)lround(target * n), d = (n - s) / 2;
    double J = (double)s / (s + 2 * d);
    make_pair(a, b, s, d, (uint64_t)p + 1);
    fm_minhash_sign(&m, a, s + d, sa); /* sets need not be sorted for signing */
    fm_minhash_sign(&m, b, s + d, sb);
    double e = fm_minhash_estimate(&m, sa, sb) - J, sig = sqrt(J * (1 - J) / K);
    *bias += e / NP;
    *mae += fabs(e) / NP;
    *max_z = fmax(*max_z, fabs(e) / sig);
    *max_abs = fmax(*max_abs, fabs(e));
  }
  free(a);
  free(b);
  free(sa);
  free(sb);
}

FM_TEST(estimate_vs_exact_jaccard_128) {
  double bias, mae, max_z, max_abs;
  estimator_errors(128, &bias, &mae, &max_z, &max_abs);
  printf("K=128, 200 pairs, J in [0.05, 0.95]: bias %+.4f, mean |err| %.4f, max |err| %.4f (%.2f sigma)\n", bias, mae,
         max_abs, max_z);
  /* Unbiased: the mean of 200 errors has sigma <= 0.0031. Each error is
   * binomial with sigma up to 0.044 (J = 0.5), so single pairs may exceed
   * 0.05; the mean |err| may not, and none may exceed 4 sigma. */
  FM_EXPECT(fabs(bias) <= 0.01);
  FM_EXPECT(mae <= 0.05);
  FM_EXPECT(max_z <= 4.0);
}

FM_TEST(estimate_vs_exact_jaccard_1024) {
  double bias, mae, max_z, max_abs;
  estimator_errors(1024, &bias, &mae, &max_z, &max_abs);
  printf("K=1024, 200 pairs: bias %+.4f, mean |err| %.4f, max |err| %.4f (%.2f sigma)\n", bias, mae, max_abs, max_z);
  FM_EXPECT(max_abs <= 0.05); /* sigma <= 0.0156: every pair within 0.05 */
  FM_EXPECT(fabs(bias) <= 0.004);
}

/* Candidate rate of pairs at J against P = 1 - (1 - J^r)^b. */
FM_TEST(lsh_follows_s_curve) {
  FmMinHash m;
  FM_REQUIRE(fm_minhash_init(&m, 128, 32, 4, 11) == 0);
  enum { NPAIR = 400, S = 300 };
  static uint64_t a[S], b[S];
  uint64_t sa[128], sb[128], ka[32], kb[32];
  const double Js[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.7};
  for (int t = 0; t < 6; t++) {
    int s = (int)lround(Js[t] * S), d = (S - s) / 2;
    double J = (double)s / (s + 2 * d);
    int hits = 0;
    for (int p = 0; p < NPAIR; p++) {
      make_pair(a, b, s, d, (uint64_t)(t * 10000 + p + 1));
      fm_minhash_sign(&m, a, s + d, sa);
      fm_minhash_sign(&m, b, s + d, sb);
      fm_minhash_bands(&m, sa, ka);
      fm_minhash_bands(&m, sb, kb);
      int hit = 0;
      for (int k = 0; k < 32; k++) hit |= ka[k] == kb[k];
      hits += hit;
    }
    double P = 1 - pow(1 - pow(J, 4), 32), got = (double)hits / NPAIR, sig = sqrt(P * (1 - P) / NPAIR);
    printf("J %.3f: candidate rate %.3f, S-curve %.3f\n", J, got, P);
    FM_EXPECT(fabs(got - P) <= 4 * sig + 0.01);
  }
}

/* Distinct hash functions behave as independent permutations: for pairs at
 * J = 0.5 each hash matches with rate J and two hashes both match with J^2. */
FM_TEST(hash_functions_independent) {
  FmMinHash m, m2;
  FM_REQUIRE(fm_minhash_init(&m, 128, 32, 4, 3) == 0);
  FM_REQUIRE(fm_minhash_init(&m2, 128, 32, 4, 4) == 0);
  for (int k = 0; k < 128; k++)
    for (int l = 0; l < k; l++) FM_EXPECT(m.seed[k] != m.seed[l]);
  FM_EXPECT(memcmp(m.seed, m2.seed, sizeof m.seed) != 0);
  enum { NPAIR = 500, S = 200 };
  static uint64_t a[S], b[S];
  uint64_t sa[128], sb[128];
  static int match[NPAIR][128];
  for (int p = 0; p < NPAIR; p++) {
    make_pair(a, b, 100, 50, (uint64_t)p + 77);
    fm_minhash_sign(&m, a, 150, sa);
    fm_minhash_sign(&m, b, 150, sb);
    for (int k = 0; k < 128; k++) match[p][k] = sa[k] == sb[k];
  }
  double worst_single = 0, both = 0;
  int npairs = 0;
  for (int k = 0; k < 128; k++) {
    int c = 0;
    for (int p = 0; p < NPAIR; p++) c += match[p][k];
    worst_single = fmax(worst_single, fabs((double)c / NPAIR - 0.5));
  }
  for (int k = 0; k < 128; k += 8)
    for (int l = k + 1; l < 128; l += 9) {
      int c = 0;
      for (int p = 0; p < NPAIR; p++) c += match[p][k] & match[p][l];
      both += (double)c / NPAIR;
      npairs++;
    }
  both /= npairs;
  printf("per-hash match rate: max |rate - 0.5| = %.3f; joint rate %.4f (independent: 0.25)\n", worst_single, both);
  FM_EXPECT(worst_single <= 4 * sqrt(0.25 / NPAIR) + 0.01); /* 128 hashes: 4 sigma */
  FM_EXPECT(fabs(both - 0.25) <= 0.02);
}

static char *norm_str(const char *s) {
  uint32_t *cp;
  int64_t n;
  fm_dedup_normalise(s, strlen(s), &cp, &n);
  char *out = malloc((size_t)n * 4 + 1);
  size_t k = 0;
  for (int64_t i = 0; i < n; i++) { /* re-encode (tests use at most 2-byte UTF-8) */
    if (cp[i] < 0x80)
      out[k++] = (char)cp[i];
    else {
      out[k++] = (char)(0xC0 | cp[i] >> 6);
      out[k++] = (char)(0x80 | (cp[i] & 0x3F));
    }
  }
  out[k] = 0;
  free(cp);
  return out;
}

FM_TEST(normalise_and_shingles) {
  char *s = norm_str("  Hello\t\n WORLD \xc3\x89t\xc3\xa9  ");
  FM_EXPECT_EQ_STR(s, "hello world \xc3\x89t\xc3\xa9"); /* only ASCII is lowercased */
  free(s);
  uint32_t cp[] = {'a', 'a', 'a', 'a', 'a'};
  uint64_t *sh;
  FM_EXPECT_EQ_INT(fm_dedup_shingles(cp, 5, &sh), 1); /* a set: "aaa" once */
  FM_EXPECT(sh[0] == ((uint64_t)'a' << 42 | (uint64_t)'a' << 21 | 'a'));
  free(sh);
  FM_EXPECT_EQ_INT(fm_dedup_shingles(cp, 2, &sh), 1); /* short text: one padded shingle */
  free(sh);
  FM_EXPECT_EQ_INT(fm_dedup_shingles(cp, 0, &sh), 0);
  free(sh);
  uint32_t abcd[] = {'a', 'b', 'c', 0x4E2D, 'b', 'c'}; /* abc bc? c?b ?bc: 4 distinct */
  FM_EXPECT_EQ_INT(fm_dedup_shingles(abcd, 6, &sh), 4);
  free(sh);
  /* identical texts up to case and spacing: estimate 1 */
  FmMinHash m;
  fm_minhash_init(&m, 128, 32, 4, 1);
  uint64_t x[128], y[128];
  const char *t1 = "The Quick  brown fox", *t2 = "the quick brown\nFOX";
  fm_minhash_text(&m, t1, strlen(t1), x);
  fm_minhash_text(&m, t2, strlen(t2), y);
  FM_EXPECT(fm_minhash_estimate(&m, x, y) == 1.0);
  FM_EXPECT_EQ_INT(fm_minhash_init(&m, 128, 16, 4, 1), FM_EINVAL);
}

#define HTML(s) fm_dedup_has_html(s, strlen(s))
#define URL(s)  fm_dedup_has_url(s, strlen(s))
#define MD(s)   fm_dedup_has_markdown(s, strlen(s))

FM_TEST(filter_html) {
  FM_EXPECT(HTML("see <p>this</p>"));
  FM_EXPECT(HTML("a </div> b"));
  FM_EXPECT(HTML("line<br/>break"));
  FM_EXPECT(HTML("<a href=\"x.html\">link</a>"));
  FM_EXPECT(HTML("<br />"));
  FM_EXPECT(!HTML("a < b and c > d"));
  FM_EXPECT(!HTML("if x<y and z>w then"));
  FM_EXPECT(!HTML("<3 love"));
  FM_EXPECT(!HTML("plain text"));
}

FM_TEST(filter_url) {
  FM_EXPECT(URL("go to http://example.org now"));
  FM_EXPECT(URL("HTTPS://EXAMPLE.ORG"));
  FM_EXPECT(URL("www.example.org"));
  FM_EXPECT(URL("(see www.x.y)"));
  FM_EXPECT(!URL("the awww. moment"));
  FM_EXPECT(!URL("http is a protocol; www is a web"));
}

FM_TEST(filter_markdown) {
  FM_EXPECT(MD("code:\n```c\nint x;\n```"));
  FM_EXPECT(MD("   ~~~\nx"));
  FM_EXPECT(MD("# Title\ntext"));
  FM_EXPECT(MD("intro\n### Section"));
  FM_EXPECT(MD("| a | b |\n|---|---|\n| 1 | 2 |"));
  FM_EXPECT(MD(":--- | ---:"));
  FM_EXPECT(MD("see [the docs](docs/x.md) here"));
  FM_EXPECT(!MD("a line with # inside"));
  FM_EXPECT(!MD("#hashtag"));
  FM_EXPECT(!MD("    ``` indented four (code, not a fence here)"));
  FM_EXPECT(!MD("a - b -- c --- d"));
  FM_EXPECT(!MD("[x] (y) and [a](b c)"));
  FM_EXPECT(!MD("the word ` tick"));
}

static double rep(double (*f)(const uint32_t *, int64_t), const char *s) {
  uint32_t *cp;
  int64_t n;
  fm_dedup_normalise(s, strlen(s), &cp, &n);
  double r = f(cp, n);
  free(cp);
  return r;
}

FM_TEST(filter_repetition) {
  /* 20 x 'a': 11 ten-gram positions, 10 repeat */
  FM_EXPECT_NEAR(rep(fm_dedup_char_repeat, "aaaaaaaaaaaaaaaaaaaa"), 10.0 / 11.0, 0, 1e-12);
  FM_EXPECT(rep(fm_dedup_char_repeat, "hahahahahahahahahahahaha") > 0.5);
  FM_EXPECT_NEAR(rep(fm_dedup_char_repeat, "the quick brown fox jumps over the lazy dog"), 0.0, 0, 0);
  FM_EXPECT_NEAR(rep(fm_dedup_char_repeat, "short"), 0.0, 0, 0);
  /* the cat the cat the cat the cat: 6 word 3-grams, 4 repeat */
  FM_EXPECT_NEAR(rep(fm_dedup_word_repeat, "the cat the cat the cat the cat"), 4.0 / 6.0, 0, 1e-12);
  FM_EXPECT_NEAR(rep(fm_dedup_word_repeat, "one two three four five six"), 0.0, 0, 0);
  FM_EXPECT_NEAR(rep(fm_dedup_word_repeat, "a b"), 0.0, 0, 0);
}

FM_TEST(clean_order_and_thresholds) {
  FmCleanRules r = {.min_chars = 16,
                    .max_char_repeat_ratio = 0.3,
                    .max_word_repeat_ratio = 0.3,
                    .drop_html = true,
                    .drop_urls = true,
                    .drop_markdown = true};
  const char *ok = "Define the word cat.\na small domesticated carnivore";
#define CLEAN(s) fm_dedup_clean(&r, s, strlen(s))
  FM_EXPECT_EQ_INT(CLEAN(ok), FM_DROP_KEPT);
  FM_EXPECT_EQ_INT(CLEAN("too   short  "), FM_DROP_TOO_SHORT);
  FM_EXPECT_EQ_INT(CLEAN("a long enough text with <b>bold</b>"), FM_DROP_HTML);
  FM_EXPECT_EQ_INT(CLEAN("a long enough text at https://x.org"), FM_DROP_URL);
  FM_EXPECT_EQ_INT(CLEAN("a long enough text\n# with a header"), FM_DROP_MARKDOWN);
  FM_EXPECT_EQ_INT(CLEAN("zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"), FM_DROP_CHAR_REPETITION);
  FM_EXPECT_EQ_INT(CLEAN("buy now buy now buy now buy now buy now"), FM_DROP_CHAR_REPETITION);
  r.max_char_repeat_ratio = 1.0; /* word repetition alone */
  FM_EXPECT_EQ_INT(CLEAN("buy now buy now buy now buy now buy now"), FM_DROP_WORD_REPETITION);
  r.max_char_repeat_ratio = 0.3;
  r.drop_html = r.drop_urls = r.drop_markdown = false; /* switched off: kept */
  FM_EXPECT_EQ_INT(CLEAN("a long enough text with <b>bold</b>"), FM_DROP_KEPT);
  FM_EXPECT_EQ_INT(CLEAN("a long enough text at https://x.org"), FM_DROP_KEPT);
  FM_EXPECT_EQ_INT(CLEAN("a long enough text\n# with a header"), FM_DROP_KEPT);
  r.max_word_repeat_ratio = 1.0;
  r.max_char_repeat_ratio = 1.0;
  FM_EXPECT_EQ_INT(CLEAN("buy now buy now buy now buy now buy now"), FM_DROP_KEPT);
  FM_EXPECT_EQ_STR(fm_drop_name(FM_DROP_DUPLICATE), "duplicate");
#undef CLEAN
}
