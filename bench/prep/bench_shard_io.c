/* bench_shard_io.c: the part of prep's cost that does not depend on how prep
 * is written (bench/prep/run.sh and bench/before_after.sh print the bound it
 * sets). For a shard of BYTES bytes (13 an id: tokens u32, mask u8, segment
 * and position ids i32) and an input of IN_BYTES, as prep's phase 2 streams a
 * shard: rows built a chunk at a time in one reused buffer (4 MiB), each
 * chunk copied into the page cache of a file that is kept (write() in
 * 1 MiB pieces, FM_WRITE_CHUNK) and hashed as prep hashes it (the four
 * datasets' parts of the chunk side by side, fm_sha256_update_multi, in the
 * shard's proportions 4:1:4:4), then SHA-256 of the input (the manifest's
 * checksums; one stream). CPU seconds of each, the median of REPS tries, the
 * files kept until the end (a prep's shard stays; pages freed at once are
 * cheaper to get again in this VM, so deleting between tries would flatter).
 *   bench_shard_io DIR BYTES IN_BYTES REPS
 * Output: "shard_io: fill <s> write <s> sha <s> (CPU s, median of REPS)". */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/hash.h"
#include "../bench_util.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 5) return fprintf(stderr, "usage: bench_shard_io DIR BYTES IN_BYTES REPS\n"), 2;
  size_t n = (size_t)atoll(argv[2]), nin = (size_t)atoll(argv[3]);
  int reps = atoi(argv[4]);
  if (reps < 1 || reps > 15 || n == 0) return fprintf(stderr, "bench_shard_io: bad arguments\n"), 2;
  double t[3][15];
  size_t path_len = strlen(argv[1]) + 32;
  char *path = malloc(path_len);
  enum { CHUNK = 4 << 20, PIECE = 1 << 20 }; /* PIECE: FM_WRITE_CHUNK of data.h (which needs mpi.h) */
  uint8_t *b = malloc(CHUNK), d[32];
  if (!b) return fprintf(stderr, "bench_shard_io: out of memory\n"), 1;
  for (int r = 0; r < reps; r++) {
    snprintf(path, path_len, "%s/shard_io_%d.bin", argv[1], r);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return perror(path), 1;
    t[0][r] = t[1][r] = t[2][r] = 0;
    for (size_t at = 0; at < n;) {
      size_t c = n - at < CHUNK ? n - at : CHUNK;
      double c0 = cpu_now();
      memset(b, 0x5a + r, c); /* the chunk's rows */
      double c1 = cpu_now();
      for (size_t o = 0; o < c;) {
        size_t k = c - o < PIECE ? c - o : PIECE;
        ssize_t w = write(fd, b + o, k);
        if (w <= 0) return perror(path), 1;
        o += (size_t)w;
      }
      double c2 = cpu_now();
      { /* tokens, loss mask, segment ids, position ids: 4, 1, 4, 4 bytes an id */
        FmSha256 h[4];
        FmSha256 *const ctx[4] = {&h[0], &h[1], &h[2], &h[3]};
        const size_t ids = c / 13, n4[4] = {4 * ids, ids, 4 * ids, c - 9 * ids};
        const void *const data[4] = {b, b + n4[0], b + n4[0] + n4[1], b + n4[0] + n4[1] + n4[2]};
        for (int k = 0; k < 4; k++) fm_sha256_init(&h[k]);
        fm_sha256_update_multi(ctx, data, n4, 4);
        for (int k = 0; k < 4; k++) fm_sha256_final(&h[k], d);
      }
      t[0][r] += c1 - c0;
      t[1][r] += c2 - c1;
      t[2][r] += cpu_now() - c2;
      at += c;
    }
    double c3 = cpu_now();
    close(fd);
    for (size_t at = 0; at < nin; at += CHUNK) fm_sha256(b, nin - at < CHUNK ? nin - at : CHUNK, d); /* the input */
    t[2][r] += cpu_now() - c3;
  }
  free(b);
  for (int r = 0; r < reps; r++) {
    snprintf(path, path_len, "%s/shard_io_%d.bin", argv[1], r);
    unlink(path);
  }
  free(path);
  for (int k = 0; k < 3; k++) qsort(t[k], (size_t)reps, sizeof t[k][0], cmp_d);
  printf("shard_io: fill %.3f write %.3f sha %.3f (CPU s, median of %d)\n", t[0][reps / 2], t[1][reps / 2],
         t[2][reps / 2], reps);
  return 0;
}
