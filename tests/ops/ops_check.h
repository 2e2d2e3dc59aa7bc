/* tests/ops/ops_check.h: what the model-op tests (tests/unit/test_ops_*.c)
 * share: a seeded RNG, float64 copies, error measures against a float64
 * reference, and central finite differences of a float64 loss.
 *
 * Error measures, both printed so a run shows the margins:
 *   rel = ||a - ref||_2 / ||ref||_2            (the gradient as a whole)
 *   max = max_i |a_i - ref_i| / max_i |ref_i|   (every element, scaled to the tensor)
 * OPS_EXPECT_CLOSE fails when either exceeds its tolerance. */
#ifndef FM_TESTS_OPS_CHECK_H
#define FM_TESTS_OPS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"

static uint64_t ops_rng = 0x243F6A8885A308D3ull;
static inline void ops_seed(uint64_t s) { ops_rng = s * 0x9E3779B97F4A7C15ull + 1; }
static inline uint64_t ops_next(void) { /* splitmix64 */
  uint64_t z = (ops_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double ops_uniform(double lo, double hi) { return lo + (hi - lo) * (double)(ops_next() >> 11) * 0x1p-53; }
static inline void ops_fill(float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)ops_uniform(lo, hi);
}
static inline float *ops_alloc(int64_t n) { return (float *)calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static inline double *ops_dalloc(int64_t n) { return (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static inline double *ops_to_double(const float *x, int64_t n) {
  double *d = ops_dalloc(n);
  for (int64_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static inline float *ops_copy(const float *x, int64_t n) {
  float *y = ops_alloc(n);
  memcpy(y, x, (size_t)n * sizeof(float));
  return y;
}

typedef struct OpsErr {
  double rel, max;
} OpsErr;

static inline OpsErr ops_err(const float *a, const double *ref, int64_t n) {
  double num = 0, den = 0, emax = 0, rmax = 0;
  for (int64_t i = 0; i < n; i++) {
    const double e = (double)a[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    if (fabs(e) > emax || e != e) emax = e != e ? INFINITY : fabs(e);
    if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
  }
  OpsErr r = {den > 0 ? sqrt(num / den) : sqrt(num), rmax > 0 ? emax / rmax : emax};
  return r;
}

/* Worst errors seen by a binary, printed at exit by the test that asks. */
#define OPS_EXPECT_CLOSE(what, a, ref, n, tol_rel, tol_max)                                                         \
  do {                                                                                                              \
    OpsErr ops__e = ops_err((a), (ref), (n));                                                                       \
    printf("  %-34s rel %.2e (tol %.0e)  max %.2e (tol %.0e)\n", (what), ops__e.rel, (double)(tol_rel), ops__e.max, \
           (double)(tol_max));                                                                                      \
    if (!(ops__e.rel <= (tol_rel)) || !(ops__e.max <= (tol_max)))                                                   \
      FM__FAIL("%s: rel %.3g (tol %.3g), max %.3g (tol %.3g)", (what), ops__e.rel, (double)(tol_rel), ops__e.max,   \
               (double)(tol_max));                                                                                  \
  } while (0)

/* Central differences of f at x (n doubles, perturbed in place and restored):
 * grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. In float64 with h = 1e-6 the
 * truncation error is O(h^2 f''') ~ 1e-12 and the rounding error ~ 1e-16/h. */
typedef double (*OpsLossFn)(void *ctx);
static inline void ops_fd(double *grad, double *x, int64_t n, OpsLossFn f, void *ctx, double h) {
  for (int64_t i = 0; i < n; i++) {
    const double v = x[i];
    x[i] = v + h;
    const double lp = f(ctx);
    x[i] = v - h;
    const double lm = f(ctx);
    x[i] = v;
    grad[i] = (lp - lm) / (2.0 * h);
  }
}

/* Bitwise equality of two float arrays; returns the number of differing elements. */
static inline int64_t ops_bits_differ(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof(float)) != 0;
  return d;
}

#endif
