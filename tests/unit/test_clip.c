/* test_clip.c: the global gradient norm over fixed blocks is the same bits
 * for 1..4 simulated ranks (shards from fm_zero_range, block sums gathered by
 * copy, then summed in block order) and for 1 or 4 threads; it agrees with a
 * long double norm of the whole vector to 1e-14; the clip factor follows
 * torch.nn.utils.clip_grad_norm_; and the shard map covers the vector. */
#include <omp.h>
#include <stdlib.h>

#include "fm_test.h"
#include "fmhpc/dist.h"

/* The norm as the train loop computes it over `ranks` shards. */
static double sharded_norm(const float *g, int64_t n, int64_t block, int ranks) {
  const int64_t nb = fm_clip_nblocks(0, n, block);
  double *all = malloc(sizeof(double) * (size_t)nb);
  for (int r = 0; r < ranks; r++) {
    int64_t lo, hi;
    fm_zero_range(n, block, ranks, r, &lo, &hi);
    double *mine = malloc(sizeof(double) * (size_t)(fm_clip_nblocks(lo, hi, block) + 1));
    if (fm_clip_block_sumsq(g + lo, lo, hi, block, mine) != 0) FM__FAIL("block_sumsq failed for rank %d", r);
    memcpy(all + lo / block, mine, sizeof(double) * (size_t)fm_clip_nblocks(lo, hi, block)); /* the all-gather */
    free(mine);
  }
  const double norm = fm_clip_norm(all, nb);
  free(all);
  return norm;
}

FM_TEST(norm_bitwise_across_ranks_and_threads) {
  const int64_t n = 3 * FM_DIST_BLOCK + 12345;
  float *g = malloc(sizeof(float) * (size_t)n);
  uint32_t x = 2463534242u;
  long double ref = 0.0L;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    g[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 100.0f : 0.01f);
    ref += (long double)g[i] * g[i];
  }
  omp_set_num_threads(1);
  const double one = sharded_norm(g, n, FM_DIST_BLOCK, 1);
  FM_EXPECT_NEAR(one, sqrtl(ref), 1e-14, 0);
  omp_set_num_threads(4);
  for (int ranks = 1; ranks <= 4; ranks++) {
    const double got = sharded_norm(g, n, FM_DIST_BLOCK, ranks);
    FM_EXPECT(memcmp(&got, &one, sizeof got) == 0);
  }
  /* Small blocks: many shards, uneven, some ranks empty. */
  const double small = sharded_norm(g, 1000, 64, 1);
  for (int ranks = 2; ranks <= 20; ranks++) {
    const double got = sharded_norm(g, 1000, 64, ranks);
    FM_EXPECT(memcmp(&got, &small, sizeof got) == 0);
  }
  free(g);
}

FM_TEST(block_sums_in_element_order) {
  float g[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  double b[3];
  FM_REQUIRE(fm_clip_block_sumsq(g, 0, 10, 4, b) == 0);
  FM_EXPECT(b[0] == 30.0 && b[1] == 174.0 && b[2] == 181.0);
  FM_EXPECT_EQ_INT(fm_clip_nblocks(0, 10, 4), 3);
  FM_EXPECT_EQ_INT(fm_clip_nblocks(8, 10, 4), 1);
  FM_EXPECT_EQ_INT(fm_clip_nblocks(8, 8, 4), 0);
  FM_EXPECT_EQ_INT(fm_clip_block_sumsq(g, 2, 10, 4, b), FM_EINVAL); /* shard start inside a block */
  FM_EXPECT(fm_clip_norm(b, 3) == sqrt(385.0));
}

/* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1. */
FM_TEST(clip_scale_as_torch) {
  FM_EXPECT(fm_clip_scale(0.5, 1.0) == 1.0);
  FM_EXPECT(fm_clip_scale(1.0, 1.0) == 1.0 / (1.0 + 1e-6));
  FM_EXPECT(fm_clip_scale(4.0, 1.0) == 1.0 / (4.0 + 1e-6));
  FM_EXPECT(fm_clip_scale(1e9, 0.0) == 1.0); /* grad_clip = 0 disables */
  FM_EXPECT(isnan(fm_clip_scale(INFINITY, 1.0)));
  FM_EXPECT(isnan(fm_clip_scale(NAN, 1.0)));
}

/* Shards tile [0, n) in rank order on block boundaries. */
FM_TEST(zero_range_tiles_the_vector) {
  static const int64_t ns[] = {0, 1, 63, 64, 65, 1000, 4096};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
    for (int P = 1; P <= 9; P++) {
      int64_t prev = 0;
      for (int r = 0; r < P; r++) {
        int64_t lo, hi;
        fm_zero_range(ns[k], 64, P, r, &lo, &hi);
        FM_EXPECT(lo == prev && hi >= lo && (lo % 64 == 0));
        FM_EXPECT(hi % 64 == 0 || hi == ns[k]);
        prev = hi;
      }
      FM_EXPECT_EQ_INT(prev, ns[k]);
    }
  int64_t lo, hi; /* 1000 elements = 16 blocks over 3 ranks: 5, 5, 6 blocks */
  fm_zero_range(1000, 64, 3, 1, &lo, &hi);
  FM_EXPECT(lo == 320 && hi == 640);
}
