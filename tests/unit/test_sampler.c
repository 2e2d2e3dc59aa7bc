/* test_sampler.c: the stateless sampler against tests/data/sampler_ref.py (an
 * independent Python model of Philox + Feistel + cycle walking), bijection
 * for many n, epochs that differ, and micro-batch ownership that does not
 * depend on the data-parallel size. */
#include "fm_test.h"
#include "fmhpc/data.h"

FM_TEST(reference_values) {
  static const int64_t e0[10] = {7, 8, 0, 5, 2, 4, 6, 1, 9, 3}, e1[10] = {1, 2, 3, 6, 5, 4, 7, 9, 8, 0};
  for (int i = 0; i < 10; i++) {
    FM_EXPECT_EQ_INT(fm_feistel_perm(1234, 0, 10, i), e0[i]);
    FM_EXPECT_EQ_INT(fm_feistel_perm(1234, 1, 10, i), e1[i]);
  }
  FM_EXPECT_EQ_INT(fm_feistel_perm(7, 3, 1000003, 0), 343362);
  FM_EXPECT_EQ_INT(fm_feistel_perm(7, 3, 1000003, 1), 492980);
  FM_EXPECT_EQ_INT(fm_feistel_perm(7, 3, 1000003, 999999), 75515);
  /* slots: k = step*B + j, epoch k / N */
  static const int64_t slots[16] = {7, 8, 0, 5, 2, 4, 6, 1, 9, 3, 1, 2, 3, 6, 5, 4};
  FmSampler s;
  FM_REQUIRE(fm_sampler_init(&s, 10, 4, 2, 1, 0, 1234, stderr) == 0);
  for (int k = 0; k < 16; k++) FM_EXPECT_EQ_INT(fm_sampler_index(&s, k / 4, k % 4), slots[k]);
}

FM_TEST(bijection) {
  static const int64_t ns[] = {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 4097, 65537};
  for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
    int64_t n = ns[t];
    char *seen = calloc((size_t)n, 1);
    int dup = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = fm_feistel_perm(99, 5, n, i);
      FM_REQUIRE(v >= 0 && v < n);
      dup += seen[v]++;
    }
    FM_EXPECT_EQ_INT(dup, 0);
    free(seen);
  }
  int same = 0; /* two epochs are different orders */
  for (int64_t i = 0; i < 1000; i++) same += fm_feistel_perm(99, 0, 1000, i) == fm_feistel_perm(99, 1, 1000, i);
  FM_EXPECT(same < 20);
}

FM_TEST(ownership_independent_of_dp) {
  /* B = 24, b = 2: M = 12 micro-batches; P = 1, 2, 3, 4, 6, 12 all see the same ids per micro-batch */
  int64_t ref[12][2], ids[2];
  FmSampler s1;
  FM_REQUIRE(fm_sampler_init(&s1, 1000, 24, 2, 1, 0, 42, stderr) == 0);
  for (int m = 0; m < 12; m++) fm_sampler_micro_ids(&s1, 7, m, ref[m]);
  static const int ps[] = {1, 2, 3, 4, 6, 12};
  for (size_t t = 0; t < 6; t++) {
    int covered = 0;
    for (int r = 0; r < ps[t]; r++) {
      FmSampler s;
      FM_REQUIRE(fm_sampler_init(&s, 1000, 24, 2, ps[t], r, 42, stderr) == 0);
      int64_t first, count;
      fm_sampler_my_micro(&s, &first, &count);
      FM_EXPECT_EQ_INT(first, r * 12 / ps[t]);
      FM_EXPECT_EQ_INT(count, 12 / ps[t]);
      for (int64_t m = first; m < first + count; m++) {
        fm_sampler_micro_ids(&s, 7, m, ids);
        FM_EXPECT_EQ_INT(ids[0], ref[m][0]);
        FM_EXPECT_EQ_INT(ids[1], ref[m][1]);
        covered++;
      }
    }
    FM_EXPECT_EQ_INT(covered, 12);
  }
  FmSampler bad;
  FM_EXPECT_EQ_INT(fm_sampler_init(&bad, 1000, 24, 2, 5, 0, 42, NULL), FM_EINVAL); /* 5 does not divide 12 */
  FM_EXPECT_EQ_INT(fm_sampler_init(&bad, 1000, 24, 5, 1, 0, 42, NULL), FM_EINVAL); /* 5 does not divide 24 */
}
