/* test_rng.c: Philox4x32-10 against Random123's published known-answer
 * vectors, and the statistics of the uniform and normal streams. */
#include "fm_test.h"
#include "fmhpc/rng.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1, uint32_t e0,
                uint32_t e1, uint32_t e2, uint32_t e3) {
  FmRng4 c = {{c0, c1, c2, c3}};
  FmRng4 r = fm_philox4x32_10(c, k0, k1);
  FM_EXPECT_EQ_INT(r.v[0], e0);
  FM_EXPECT_EQ_INT(r.v[1], e1);
  FM_EXPECT_EQ_INT(r.v[2], e2);
  FM_EXPECT_EQ_INT(r.v[3], e3);
}

FM_TEST(philox_known_answers) {
  /* Random123 tests/kat_vectors: philox4x32 10 rounds. */
  kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
      0x6d5451fd);
  kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
      0x24126ea1);
}

FM_TEST(streams_are_pure_functions) {
  /* The same (seed, purpose, step, index) gives the same value, whatever was
   * drawn before; any change of a coordinate gives another value. */
  float a = fm_rng_uniform(7, FM_RNG_INIT, 0, 12345);
  for (int i = 0; i < 100; i++) (void)fm_rng_uniform(7, FM_RNG_INIT, 0, (uint64_t)i);
  FM_EXPECT_BITS_EQ_F32(a, fm_rng_uniform(7, FM_RNG_INIT, 0, 12345));
  FM_EXPECT(a != fm_rng_uniform(8, FM_RNG_INIT, 0, 12345));
  FM_EXPECT(a != fm_rng_uniform(7, FM_RNG_DATA, 0, 12345));
  FM_EXPECT(a != fm_rng_uniform(7, FM_RNG_INIT, 1, 12345));
  FM_EXPECT(a != fm_rng_uniform(7, FM_RNG_INIT, 0, 12345 + (1ull << 32)));
}

FM_TEST(uniform_and_normal_moments) {
  const int n = 200000;
  double s1 = 0, s2 = 0, u1 = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; i++) {
    double z = fm_rng_normal(42, FM_RNG_INIT, 0, (uint64_t)i);
    s1 += z;
    s2 += z * z;
    double u = fm_rng_uniform(42, FM_RNG_DATA, 3, (uint64_t)i);
    u1 += u;
    if (u < umin) umin = u;
    if (u > umax) umax = u;
  }
  /* Standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032;
   * bounds at about 5 sigma. */
  FM_EXPECT_NEAR(s1 / n, 0.0, 0, 0.011);
  FM_EXPECT_NEAR(s2 / n, 1.0, 0, 0.016);
  FM_EXPECT_NEAR(u1 / n, 0.5, 0, 0.0033);
  FM_EXPECT(umin >= 0.0 && umax < 1.0);
}
