/* bench_util.h: the clocks the benchmarks share (header only; bench/ is not
 * part of the library). */
#ifndef FMHPC_BENCH_UTIL_H
#define FMHPC_BENCH_UTIL_H

#include <sys/resource.h>
#include <time.h>

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
