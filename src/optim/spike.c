/* spike.c: loss-spike skipping: a step whose loss sits more than z_max
 * standard deviations above the mean of the last `window` accepted losses is
 * skipped (optim.h). All state is plain values, so a checkpoint keeps it. */
#include <math.h>
#include <stdlib.h>

#include "fmhpc/core.h"
#include "fmhpc/optim.h"

void fm_spike_init(FmSpike *s, int64_t window, double z_max) {
  s->window = window;
  s->z_max = z_max;
  s->buf = fm_xcalloc((size_t)window, sizeof(double));
  s->count = s->head = s->skipped = s->consecutive = 0;
}

void fm_spike_init_from_deck(FmSpike *s, const FmDeck *deck) {
  fm_spike_init(s, deck->c.train.spike_window, deck->c.train.spike_z);
}

void fm_spike_free(FmSpike *s) {
  free(s->buf);
  s->buf = NULL;
}

/* z of `loss` against the full window; sums run oldest to newest. */
static double window_z(const FmSpike *s, double loss) {
  const int64_t n = s->window;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += s->buf[(s->head + i) % n];
  const double mean = sum / (double)n;
  double ss = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double d = s->buf[(s->head + i) % n] - mean;
    ss += d * d;
  }
  const double sd = sqrt(ss / (double)(n - 1));
  return sd > 0.0 ? (loss - mean) / sd : 0.0;
}

bool fm_spike_check(FmSpike *s, double loss, double *z) {
  double zz = 0.0;
  bool spike = !isfinite(loss);
  if (!spike && s->count >= s->window) {
    zz = window_z(s, loss);
    spike = zz > s->z_max;
  }
  if (z) *z = isfinite(loss) ? zz : NAN;
  if (spike) {
    s->skipped++;
    s->consecutive++;
    return true;
  }
  s->buf[s->head] = loss;
  s->head = (s->head + 1) % s->window;
  s->count++;
  s->consecutive = 0;
  return false;
}
