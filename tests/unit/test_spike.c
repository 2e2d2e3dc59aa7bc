/* test_spike.c: loss-spike skipping on a synthetic series: nothing is
 * skipped before the window fills (even a huge loss), a planted spike after
 * that is skipped, counted and kept out of the window, the z-score matches a
 * direct two-pass computation, non-finite losses are always skipped, and a
 * copied state (as a checkpoint restores it) makes the same decisions. */
#include <stdlib.h>

#include "fm_test.h"
#include "fmhpc/optim.h"

/* A decaying loss with deterministic noise of amplitude ~0.02. */
static double series(int64_t t) { return 3.0 + 2.0 * exp(-0.01 * (double)t) + 0.02 * sin(1.7 * (double)t); }

FM_TEST(planted_spike_skipped_after_window_fills) {
  FmSpike s;
  fm_spike_init(&s, 20, 6.0);
  double z;
  for (int64_t t = 1; t <= 19; t++) FM_EXPECT(!fm_spike_check(&s, t == 5 ? 50.0 : series(t), &z) && z == 0.0);
  FM_EXPECT(!fm_spike_check(&s, series(20), &z)); /* 20th: the window fills with this one */
  FM_EXPECT_EQ_INT(s.skipped, 0);
  /* Steps 21..24 replace the early ones, step 5's 50.0 included by step 25. */
  for (int64_t t = 21; t <= 40; t++) FM_EXPECT(!fm_spike_check(&s, series(t), NULL));
  /* The planted spike: z against the window, computed here directly. */
  double mean = 0, ss = 0;
  for (int64_t t = 21; t <= 40; t++) mean += series(t) / 20.0;
  for (int64_t t = 21; t <= 40; t++) ss += (series(t) - mean) * (series(t) - mean);
  const double zref = (series(41) + 1.0 - mean) / sqrt(ss / 19.0);
  FM_EXPECT(fm_spike_check(&s, series(41) + 1.0, &z));
  FM_EXPECT_NEAR(z, zref, 1e-12, 0);
  FM_EXPECT(z > 6.0);
  FM_EXPECT_EQ_INT(s.skipped, 1);
  FM_EXPECT_EQ_INT(s.consecutive, 1);
  FM_EXPECT_EQ_INT(s.count, 40); /* not added to the window */
  /* Normal losses resume being accepted; the window is as before the spike. */
  FM_EXPECT(!fm_spike_check(&s, series(41), &z));
  FM_EXPECT(z < 6.0 && s.consecutive == 0);
  FM_EXPECT(fm_spike_check(&s, NAN, &z) && isnan(z));
  FM_EXPECT(fm_spike_check(&s, INFINITY, NULL));
  FM_EXPECT_EQ_INT(s.skipped, 3);
  FM_EXPECT_EQ_INT(s.consecutive, 2);
  fm_spike_free(&s);
}

FM_TEST(nonfinite_skipped_even_before_window_fills) {
  FmSpike s;
  fm_spike_init(&s, 100, 6.0);
  FM_EXPECT(!fm_spike_check(&s, 2.0, NULL));
  FM_EXPECT(fm_spike_check(&s, NAN, NULL));
  FM_EXPECT(s.skipped == 1 && s.count == 1);
  fm_spike_free(&s);
}

/* A flat window (std 0) never skips a finite loss: z is reported as 0. */
FM_TEST(flat_window_gives_zero_z) {
  FmSpike s;
  fm_spike_init(&s, 4, 3.0);
  for (int i = 0; i < 4; i++) fm_spike_check(&s, 1.0, NULL);
  double z = -1;
  FM_EXPECT(!fm_spike_check(&s, 1.5, &z) && z == 0.0);
  fm_spike_free(&s);
}

FM_TEST(restored_state_decides_the_same) {
  FmSpike a, b;
  fm_spike_init(&a, 16, 3.0);
  for (int64_t t = 1; t <= 37; t++) fm_spike_check(&a, series(t) + (t % 11 == 0 ? 0.5 : 0.0), NULL);
  fm_spike_init(&b, 16, 3.0); /* a checkpoint copies the plain fields */
  memcpy(b.buf, a.buf, sizeof(double) * 16);
  b.count = a.count, b.head = a.head, b.skipped = a.skipped, b.consecutive = a.consecutive;
  for (int64_t t = 38; t <= 120; t++) {
    const double loss = series(t) + (t % 11 == 0 ? 0.5 : 0.0);
    double za, zb;
    FM_EXPECT(fm_spike_check(&a, loss, &za) == fm_spike_check(&b, loss, &zb));
    FM_EXPECT(memcmp(&za, &zb, sizeof za) == 0);
  }
  FM_EXPECT(a.skipped == b.skipped && a.skipped > 0);
  fm_spike_free(&a);
  fm_spike_free(&b);
}
