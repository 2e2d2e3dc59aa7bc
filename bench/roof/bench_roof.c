/* bench_roof.c: the machine's limits the roofline bounds of bench/before_after.sh
 * are computed from, measured in the same run (not constants):
 *   one thread's OpenBLAS sgemm 2048^3 in GFLOP per CPU-second of that thread
 *   (best of 5): the GEMM roof per CPU-second, which a loaded machine does not
 *   lower (the step's share of peak per CPU-s is taken against it);
 *   memcpy GB/s on one thread and on THREADS threads (bytes copied per second,
 *   MiB_COPY MiB buffers, best of 5): what a rank's copy of a message or a
 *   pass over an array can reach;
 *   file writes into DIR (a plain pwrite loop of 1 MiB blocks, MiB_FILE MiB,
 *   no fsync): into a file deleted right after (the page cache's copy alone)
 *   and into three files kept until the end (what a prep shard costs: the
 *   kernel also has to write the dirty pages back; the rate over all three),
 *   in GB/s and in GB per CPU-second of the writer.
 *   bench_roof THREADS MiB_COPY MiB_FILE DIR
 * prints one RESULT line. */
#include <cblas.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../bench_util.h"

void openblas_set_num_threads(int);

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double sgemm_gflop_per_cpu_s(void) {
  const int n = 2048;
  float *a = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
  for (int i = 0; i < n * n; i++) a[i] = (float)(i % 13) * 0.01f;
  openblas_set_num_threads(1);
  double best = 1e30;
  for (int k = 0; k < 5; k++) {
    const double t0 = thread_cpu();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
    const double dt = thread_cpu() - t0;
    if (dt < best) best = dt;
  }
  free(a);
  free(c);
  return 2.0 * n * (double)n * n / best / 1e9;
}

static double copy_gb_s(char *dst, const char *src, size_t bytes, int threads) {
  double best = 1e30;
  for (int k = 0; k < 6; k++) { /* the first pass faults the pages in */
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
      const size_t lo = bytes * t / nt, hi = bytes * (t + 1) / nt;
      memcpy(dst + lo, src + lo, hi - lo);
    }
    double dt = now() - t0;
    if (k > 0 && dt < best) best = dt;
  }
  return (double)bytes / best / 1e9;
}

/* Write `mib` MiB into DIR/name in 1 MiB pwrites; GB/s of the writes + close
 * (wall), and *per_cpu the GB per CPU-second of this thread (the kernel's copy
 * into the page cache is the writer's system time; waits for writeback are not
 * CPU time). */
static double write_gb_s(const char *dir, const char *name, const char *blk, int mib, int del, double *per_cpu) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const double t0 = now(), c0 = thread_cpu();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    perror(path);
    exit(1);
  }
  for (int i = 0; i < mib; i++)
    if (pwrite(fd, blk, 1 << 20, (off_t)i << 20) != 1 << 20) {
      perror(path);
      exit(1);
    }
  close(fd);
  if (del) unlink(path);
  const double gb = (double)mib * 1048576.0 / 1e9;
  *per_cpu = gb / (thread_cpu() - c0);
  return gb / (now() - t0);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: bench_roof THREADS MiB_COPY MiB_FILE DIR\n");
    return 2;
  }
  const int threads = atoi(argv[1]), mib_file = atoi(argv[3]);
  const size_t bytes = (size_t)atoi(argv[2]) << 20;
  const double gemm = sgemm_gflop_per_cpu_s();
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  const double c1 = copy_gb_s(b, a, bytes, 1), cn = copy_gb_s(b, a, bytes, threads);
  free(a), free(b);
  char *blk = malloc(1 << 20);
  memset(blk, 7, 1 << 20);
  double wd = 0, wdc = 0, wk = 0, wkc = 0;
  for (int k = 0; k < 3; k++) { /* best of 3; deleted first, so the kept files' writeback cannot slow it */
    double c;
    const double x = write_gb_s(argv[4], "roof_deleted", blk, mib_file, 1, &c);
    if (x > wd) wd = x, wdc = c;
  }
  for (int k = 0; k < 3; k++) { /* kept: the rate over all three (the dirty pages pile up) */
    char name[32];
    double c;
    snprintf(name, sizeof name, "roof_kept%d", k);
    wk += 1 / write_gb_s(argv[4], name, blk, mib_file, 0, &c);
    wkc += 1 / c;
  }
  wk = 3 / wk, wkc = 3 / wkc;
  for (int k = 0; k < 3; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/roof_kept%d", argv[4], k);
    unlink(path);
  }
  free(blk);
  printf("sgemm 2048^3 on one thread: %.2f GFLOP per CPU-s\n", gemm);
  printf(
      "memcpy: 1 thread %.2f GB/s, %d threads %.2f GB/s; %d MiB file writes: deleted at once %.2f GB/s (%.2f GB per "
      "CPU-s), kept %.2f GB/s (%.2f GB per CPU-s)\n",
      c1, threads, cn, mib_file, wd, wdc, wk, wkc);
  printf(
      "RESULT roof sgemm_gflop_cpu_s=%.3f memcpy1_gb_s=%.3f memcpyn_gb_s=%.3f write_deleted_gb_s=%.3f "
      "write_kept_gb_s=%.3f write_deleted_gb_cpu_s=%.3f write_kept_gb_cpu_s=%.3f\n",
      gemm, c1, cn, wd, wk, wdc, wkc);
  return 0;
}
