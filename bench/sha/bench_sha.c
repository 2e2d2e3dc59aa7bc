/* bench_sha.c: SHA-256 throughput in GB per CPU-second of 1, 2, 3 and 4
 * messages hashed side by side (fm_sha256_update_multi; 1 is plain
 * fm_sha256_update), each message PIECE bytes (default 256 KiB: a
 * sha256-blocks-v1 piece of 4-byte elements, in the cache as in prep), and
 * the ratio to one message at a time; then prep's shard mix (tokens, segment
 * ids, position ids 4 B an element, the loss mask 1 B) as 4 lanes against 2+1+1;
 * and, on x86 with the SHA extensions, the machine's bound: a block is 32
 * sha256rnds2, so their throughput (8 independent chains) bounds any number
 * of lanes (one lane waits on their latency instead).
 *   bench_sha [PIECE_BYTES] [SECONDS_PER_ROW]     (bench/sha/run.sh builds it)
 * Output: "lanes <k> <GB/CPU-s> <ratio>" rows, "prep_mix ...", "bound ..." */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_util.h"
#include "fmhpc/hash.h"

static volatile uint8_t sink;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* n rounds of 8 independent sha256rnds2 chains */
__attribute__((target("sha,sse4.1"), noinline)) static int rnds2_chains(long n) {
  const __m128i k = _mm_set1_epi32((int)n);
  __m128i a[8];
  for (int i = 0; i < 8; i++) a[i] = _mm_set1_epi32(i);
  for (long i = 0; i < n; i++) {
    a[0] = _mm_sha256rnds2_epu32(a[0], a[1], k), a[2] = _mm_sha256rnds2_epu32(a[2], a[3], k);
    a[4] = _mm_sha256rnds2_epu32(a[4], a[5], k), a[6] = _mm_sha256rnds2_epu32(a[6], a[7], k);
    a[1] = _mm_sha256rnds2_epu32(a[1], a[0], k), a[3] = _mm_sha256rnds2_epu32(a[3], a[2], k);
    a[5] = _mm_sha256rnds2_epu32(a[5], a[4], k), a[7] = _mm_sha256rnds2_epu32(a[7], a[6], k);
  }
  __m128i t = a[0];
  for (int i = 1; i < 8; i++) t = _mm_add_epi32(t, a[i]);
  return _mm_cvtsi128_si32(t);
}
/* GB per CPU-second that sha256rnds2's throughput allows (64 bytes a block of 32) */
static double rnds2_bound(void) {
  const long n = 20000000;
  const double t0 = cpu_now();
  sink ^= (uint8_t)rnds2_chains(n);
  return (double)n * 8 / 32 * 64 / (cpu_now() - t0) / 1e9;
}
#endif

/* GB hashed per CPU-second: k messages of n bytes each, side by side, repeated for about secs CPU-seconds */
static double rate(uint8_t *const m[4], const size_t n[4], int k, double secs, int mix) {
  long reps = 0;
  double bytes = 0, t0 = cpu_now(), t;
  do {
    for (int r = 0; r < 16; r++, reps++) {
      FmSha256 s[4];
      FmSha256 *const ctx[4] = {&s[0], &s[1], &s[2], &s[3]};
      const void *const d[4] = {m[0], m[1], m[2], m[3]};
      for (int i = 0; i < k; i++) fm_sha256_init(&s[i]);
      if (mix) { /* prep's shard sums before the 4-lane form: tokens and segment ids as a pair, the others alone */
        fm_sha256_update_multi(ctx, d, n, 2); /* n[0] == n[1] */
        fm_sha256_update(&s[2], m[2], n[2]);
        fm_sha256_update(&s[3], m[3], n[3]);
      } else if (k == 1) {
        fm_sha256_update(&s[0], m[0], n[0]);
      } else {
        fm_sha256_update_multi(ctx, d, n, k);
      }
      uint8_t out[32];
      for (int i = 0; i < k; i++) fm_sha256_final(&s[i], out), sink ^= out[0];
      for (int i = 0; i < k; i++) bytes += (double)n[i];
    }
    t = cpu_now() - t0;
  } while (t < secs);
  return bytes / t / 1e9;
}

int main(int argc, char **argv) {
  const size_t piece = argc > 1 ? (size_t)atol(argv[1]) : (size_t)256 << 10;
  const double secs = argc > 2 ? atof(argv[2]) : 0.5;
  if (piece == 0 || secs <= 0) return fprintf(stderr, "usage: bench_sha [PIECE_BYTES] [SECONDS_PER_ROW]\n"), 2;
  uint8_t *m[4];
  for (int i = 0; i < 4; i++) {
    m[i] = malloc(piece + 1);
    if (!m[i]) return fprintf(stderr, "bench_sha: out of memory\n"), 1;
    for (size_t j = 0; j < piece; j++) m[i][j] = (uint8_t)(j * 131 + (size_t)i * 7);
  }
  printf("bench_sha: %s, messages of %zu bytes\n", fm__sha256_impl(-1), piece);
  const size_t n[4] = {piece, piece, piece, piece};
  double one = 0;
  for (int k = 1; k <= 4; k++) {
    const double g = rate(m, n, k, secs, 0);
    if (k == 1) one = g;
    printf("lanes %d %.3f GB/CPU-s %.2fx\n", k, g, g / one);
  }
  const size_t mix[4] = {piece, piece, piece, piece / 4}; /* tokens, segment ids, position ids, mask */
  const double before = rate(m, mix, 4, secs, 1), after = rate(m, mix, 4, secs, 0);
  printf("prep_mix 2+1+1 %.3f GB/CPU-s, 4 lanes %.3f GB/CPU-s, %.2fx\n", before, after, after / before);
#if defined(__x86_64__) && defined(__GNUC__)
  if (strcmp(fm__sha256_impl(-1), "portable") != 0)
    printf("bound: sha256rnds2 throughput %.3f GB/CPU-s\n", rnds2_bound());
#endif
  for (int i = 0; i < 4; i++) free(m[i]);
  return 0;
}
