/* bench_util.h: the clocks the benchmarks share (header only; bench/ is not
 * part of the library). */
#ifndef FMHPC_BENCH_UTIL_H
#define FMHPC_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static inline int bench_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1), sorted in a copy: v keeps its order. */
static inline double median(const double *v, int64_t n) {
  double *t = malloc((size_t)n * sizeof *t);
  memcpy(t, v, (size_t)n * sizeof *t);
  qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
  const double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  free(t);
  return m;
}

/* user + system CPU seconds of the process (all threads): on a shared,
 * loaded machine the wall clock counts time the process was not running */
static inline double cpu_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
         1e-6 * (double)u.ru_stime.tv_usec;
}

/* monotonic wall clock, seconds */
static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
