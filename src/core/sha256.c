/* sha256.c: SHA-256 as specified in FIPS 180-4 section 6.2 (the test vectors
 * of FIPS 180-2 appendix B are in tests/unit/test_sha256.c). Portable C: the
 * message schedule and compression follow the standard's notation. On x86-64
 * CPUs with the SHA extensions (Intel since Goldmont/Ice Lake, AMD since Zen)
 * the compression runs on them instead, chosen once by CPUID: store and
 * checkpoint checksums hash every byte written and read, and the portable
 * form was 30% of a prep's time. Same digests (test_sha256 compares both).
 * One message waits on sha256rnds2's latency (~1.8 GB per CPU-second on a
 * Zen EPYC); fm_sha256_update_multi runs 2-4 independent messages side by
 * side, up to ~3.3 GB/CPU-s against the instruction's throughput bound of
 * ~3.5 (bench/sha). */
#include "fmhpc/hash.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define FM_SHA_X86 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const uint8_t p[64]) {
  uint32_t w[64];
  for (size_t t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void compress_blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks) {
  for (; nblocks; nblocks--, p += 64) compress(h, p);
}

#ifdef FM_SHA_X86
/* The SHA extensions keep the state as ABEF and CDGH (lane 3 first); each
 * sha256rnds2 does two rounds from the low two words of W+K, sha256msg1/msg2
 * extend the message schedule four words at a time (Intel's SHA extensions
 * reference, "New Instructions Supporting the Secure Hash Algorithm"). */
__attribute__((target("sha,ssse3,sse4.1"))) static void compress_blocks_shani(uint32_t h[8], const uint8_t *p,
                                                                              size_t nblocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1); /* CDAB */
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B); /* EFGH */
  __m128i abef = _mm_alignr_epi8(dcba, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, dcba, 0xF0);
  for (; nblocks; nblocks--, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i w[4]; /* w[g % 4] holds W[4g .. 4g+3] when group g's rounds run */
    for (size_t i = 0; i < 4; i++) w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
    for (int g = 0; g < 16; g++) {
      const __m128i wk = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)&K[(size_t)4 * g]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
      if (g < 12) { /* W[4g+16 ..] = W[t-16] + s0(W[t-15]) + W[t-7] + s1(W[t-2]) */
        __m128i t = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
        w[g & 3] = _mm_sha256msg2_epu32(t, w[(g + 3) & 3]);
      }
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B), dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0)); /* DCBA */
  _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));    /* HGFE */
}

/* Two to four messages at once (fm_sha256_update_multi): each sha256rnds2
 * waits for the one before it (a chain of 32 per block), so one message
 * leaves the unit idle between them; the other messages' rounds fill those
 * gaps. The same steps as compress_blocks_shani, written out per lane (a, b,
 * c, d: a state pair and four schedule registers each) so that the compiler
 * keeps what fits in registers. Lane L's names: abefL, cdghL, w0L .. w3L. */
#define SHA_UPD(x, y, z, w)  _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(x, y), _mm_alignr_epi8(w, z, 4)), w)
#define SHA_K(L, X)          const __m128i k##L##_ = _mm_add_epi32(X##L, k_)
#define SHA_R1(L)            cdgh##L = _mm_sha256rnds2_epu32(cdgh##L, abef##L, k##L##_)
#define SHA_R2(L)            abef##L = _mm_sha256rnds2_epu32(abef##L, cdgh##L, _mm_shuffle_epi32(k##L##_, 0x0E))
#define SHA_U(L, X, Y, Z, W) X##L = SHA_UPD(X##L, Y##L, Z##L, W##L)
#define SHA_KLOAD(q, r)      const __m128i k_ = _mm_loadu_si128((const __m128i *)&K[16 * (q) + 4 * (r)])
#define SHA_GROUP2(q, r, X, Y, Z, W) \
  do {                               \
    SHA_KLOAD(q, r);                 \
    SHA_K(a, X);                     \
    SHA_K(b, X);                     \
    SHA_R1(a), SHA_R1(b);            \
    SHA_R2(a), SHA_R2(b);            \
    if ((q) < 3) {                   \
      SHA_U(a, X, Y, Z, W);          \
      SHA_U(b, X, Y, Z, W);          \
    }                                \
  } while (0)
#define SHA_GROUP3(q, r, X, Y, Z, W) \
  do {                               \
    SHA_KLOAD(q, r);                 \
    SHA_K(a, X);                     \
    SHA_K(b, X);                     \
    SHA_K(c, X);                     \
    SHA_R1(a), SHA_R1(b), SHA_R1(c); \
    SHA_R2(a), SHA_R2(b), SHA_R2(c); \
    if ((q) < 3) {                   \
      SHA_U(a, X, Y, Z, W);          \
      SHA_U(b, X, Y, Z, W);          \
      SHA_U(c, X, Y, Z, W);          \
    }                                \
  } while (0)
#define SHA_GROUP4(q, r, X, Y, Z, W)            \
  do {                                          \
    SHA_KLOAD(q, r);                            \
    SHA_K(a, X);                                \
    SHA_K(b, X);                                \
    SHA_K(c, X);                                \
    SHA_K(d, X);                                \
    SHA_R1(a), SHA_R1(b), SHA_R1(c), SHA_R1(d); \
    SHA_R2(a), SHA_R2(b), SHA_R2(c), SHA_R2(d); \
    if ((q) < 3) {                              \
      SHA_U(a, X, Y, Z, W);                     \
      SHA_U(b, X, Y, Z, W);                     \
      SHA_U(c, X, Y, Z, W);                     \
      SHA_U(d, X, Y, Z, W);                     \
    }                                           \
  } while (0)
/* Lane L's state from h[L] into abefL, cdghL; its block at p[L] into w0L .. w3L; the state back. */
#define SHA_LOAD(L, i)                                                                      \
  __m128i abef##L, cdgh##L;                                                                 \
  do {                                                                                      \
    const __m128i t0 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[i][0]), 0xB1); \
    const __m128i t1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[i][4]), 0x1B); \
    abef##L = _mm_alignr_epi8(t0, t1, 8), cdgh##L = _mm_blend_epi16(t1, t0, 0xF0);          \
  } while (0)
#define SHA_BLOCK(L, i)                                                                   \
  const __m128i abef##L##0 = abef##L, cdgh##L##0 = cdgh##L;                               \
  __m128i w0##L = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[i] + 0)), bswap);  \
  __m128i w1##L = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[i] + 16)), bswap); \
  __m128i w2##L = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[i] + 32)), bswap); \
  __m128i w3##L = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p[i] + 48)), bswap); \
  p[i] += 64
#define SHA_ADD(L) abef##L = _mm_add_epi32(abef##L, abef##L##0), cdgh##L = _mm_add_epi32(cdgh##L, cdgh##L##0)
#define SHA_STORE(L, i)                                                                         \
  do {                                                                                          \
    const __m128i t0 = _mm_shuffle_epi32(abef##L, 0x1B), t1 = _mm_shuffle_epi32(cdgh##L, 0xB1); \
    _mm_storeu_si128((__m128i *)&h[i][0], _mm_blend_epi16(t0, t1, 0xF0));                       \
    _mm_storeu_si128((__m128i *)&h[i][4], _mm_alignr_epi8(t1, t0, 8));                          \
  } while (0)
/* groups 4q .. 4q+3 of a block: w0..w3 hold W[16q ..], rotating as in the single form */
#define SHA_BLOCK_ROUNDS(G)     \
  for (int q = 0; q < 4; q++) { \
    G(q, 0, w0, w1, w2, w3);    \
    G(q, 1, w1, w2, w3, w0);    \
    G(q, 2, w2, w3, w0, w1);    \
    G(q, 3, w3, w0, w1, w2);    \
  }

/* nblocks blocks of each of 2 (3, 4) messages, message i at p[i] (advanced past them) into state h[i]. */
__attribute__((target("sha,ssse3,sse4.1"))) static void compress_blocks_shani_x2(uint32_t *const h[],
                                                                                 const uint8_t *p[], size_t nblocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  SHA_LOAD(a, 0);
  SHA_LOAD(b, 1);
  for (; nblocks; nblocks--) {
    SHA_BLOCK(a, 0);
    SHA_BLOCK(b, 1);
    SHA_BLOCK_ROUNDS(SHA_GROUP2)
    SHA_ADD(a), SHA_ADD(b);
  }
  SHA_STORE(a, 0);
  SHA_STORE(b, 1);
}

__attribute__((target("sha,ssse3,sse4.1"))) static void compress_blocks_shani_x3(uint32_t *const h[],
                                                                                 const uint8_t *p[], size_t nblocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  SHA_LOAD(a, 0);
  SHA_LOAD(b, 1);
  SHA_LOAD(c, 2);
  for (; nblocks; nblocks--) {
    SHA_BLOCK(a, 0);
    SHA_BLOCK(b, 1);
    SHA_BLOCK(c, 2);
    SHA_BLOCK_ROUNDS(SHA_GROUP3)
    SHA_ADD(a), SHA_ADD(b), SHA_ADD(c);
  }
  SHA_STORE(a, 0);
  SHA_STORE(b, 1);
  SHA_STORE(c, 2);
}

__attribute__((target("sha,ssse3,sse4.1"))) static void compress_blocks_shani_x4(uint32_t *const h[],
                                                                                 const uint8_t *p[], size_t nblocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  SHA_LOAD(a, 0);
  SHA_LOAD(b, 1);
  SHA_LOAD(c, 2);
  SHA_LOAD(d, 3);
  for (; nblocks; nblocks--) {
    SHA_BLOCK(a, 0);
    SHA_BLOCK(b, 1);
    SHA_BLOCK(c, 2);
    SHA_BLOCK(d, 3);
    SHA_BLOCK_ROUNDS(SHA_GROUP4)
    SHA_ADD(a), SHA_ADD(b), SHA_ADD(c), SHA_ADD(d);
  }
  SHA_STORE(a, 0);
  SHA_STORE(b, 1);
  SHA_STORE(c, 2);
  SHA_STORE(d, 3);
}
#undef SHA_BLOCK_ROUNDS
#undef SHA_STORE
#undef SHA_ADD
#undef SHA_BLOCK
#undef SHA_LOAD
#undef SHA_GROUP4
#undef SHA_GROUP3
#undef SHA_GROUP2
#undef SHA_KLOAD
#undef SHA_U
#undef SHA_R2
#undef SHA_R1
#undef SHA_K
#undef SHA_UPD

static int cpu_has_sha(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1)) return 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

typedef void (*CompressFn)(uint32_t h[8], const uint8_t *p, size_t nblocks);
static CompressFn compress_blocks;

static CompressFn pick_compress(void) {
#ifdef FM_SHA_X86
  if (cpu_has_sha()) return compress_blocks_shani;
#endif
  return compress_blocks_portable;
}

const char *fm__sha256_impl(int which) {
  if (which == 0) compress_blocks = compress_blocks_portable;
#ifdef FM_SHA_X86
  else if (which == 1 && cpu_has_sha()) compress_blocks = compress_blocks_shani;
#endif
  else if (which >= 0) compress_blocks = pick_compress();
  if (!compress_blocks) compress_blocks = pick_compress();
  return compress_blocks == compress_blocks_portable ? "portable" : "x86 SHA extensions";
}

void fm_sha256_init(FmSha256 *s) {
  static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, H0, sizeof H0);
  s->nbytes = 0;
  s->nbuf = 0;
}

void fm_sha256_update(FmSha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->nbytes += n;
  if (s->nbuf) {
    size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += take, p += take, n -= take;
    if (s->nbuf < 64) return;
    if (!compress_blocks) compress_blocks = pick_compress(); /* a benign race: every thread stores the same */
    compress_blocks(s->h, s->buf, 1);
    s->nbuf = 0;
  }
  if (n >= 64) {
    if (!compress_blocks) compress_blocks = pick_compress();
    compress_blocks(s->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
  }
  memcpy(s->buf, p, n);
  s->nbuf = n;
}

void fm_sha256_final(FmSha256 *s, uint8_t out[32]) {
  uint64_t bits = s->nbytes * 8;
  uint8_t pad[72] = {0x80};
  size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf; /* 1 bit, zeros, 64-bit length */
  for (int i = 0; i < 8; i++) pad[npad + i] = (uint8_t)(bits >> (56 - 8 * i));
  fm_sha256_update(s, pad, npad + 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(s->h[i] >> (24 - 8 * j));
}

void fm_sha256(const void *data, size_t n, uint8_t out[32]) {
  FmSha256 s;
  fm_sha256_init(&s);
  fm_sha256_update(&s, data, n);
  fm_sha256_final(&s, out);
}

/* Whole blocks of up to 4 lanes: lane i has nb[i] blocks at p[i] for state h[i]. The lanes run side by side while
 * two or more have blocks left (all of them as long as the shortest, then the rest), the last one alone. */
static void compress_lanes(uint32_t *h[], const uint8_t *p[], size_t nb[], int k) {
#ifdef FM_SHA_X86
  if (compress_blocks == compress_blocks_shani) {
    for (;;) {
      int j = 0; /* the lanes with blocks left moved to the front, in any order */
      for (int i = 0; i < k; i++)
        if (nb[i]) {
          uint32_t *th = h[i];
          const uint8_t *tp = p[i];
          const size_t tn = nb[i];
          h[i] = h[j], p[i] = p[j], nb[i] = nb[j];
          h[j] = th, p[j] = tp, nb[j] = tn, j++;
        }
      k = j;
      if (k < 2) break;
      size_t m = nb[0];
      for (int i = 1; i < k; i++) m = nb[i] < m ? nb[i] : m;
      if (k == 2)
        compress_blocks_shani_x2(h, p, m);
      else if (k == 3)
        compress_blocks_shani_x3(h, p, m);
      else
        compress_blocks_shani_x4(h, p, m);
      for (int i = 0; i < k; i++) nb[i] -= m;
    }
  }
#endif
  for (int i = 0; i < k; i++)
    if (nb[i]) compress_blocks(h[i], p[i], nb[i]);
}

void fm_sha256_update_multi(FmSha256 *const ctx[], const void *const data[], const size_t n[], int k) {
  if (!compress_blocks) compress_blocks = pick_compress(); /* a benign race: every thread stores the same */
  for (int c0 = 0; c0 < k; c0 += 4) {
    const int kk = k - c0 < 4 ? k - c0 : 4;
    uint32_t *h[4] = {NULL};
    const uint8_t *p[4] = {NULL}, *tail[4] = {NULL};
    size_t nb[4] = {0}, rest[4] = {0};
    for (int i = 0; i < kk; i++) {
      FmSha256 *s = ctx[c0 + i];
      const size_t n_i = n[c0 + i];
      /* the partial block completed (or the bytes buffered, when too few) the one-at-a-time way */
      const size_t head = s->nbuf ? (64 - s->nbuf < n_i ? 64 - s->nbuf : n_i) : 0;
      if (head) fm_sha256_update(s, data[c0 + i], head);
      if (n_i == head) continue; /* all of it buffered (data may be NULL where n is 0) */
      h[i] = s->h;               /* here the buffer is empty */
      p[i] = (const uint8_t *)data[c0 + i] + head;
      nb[i] = (n_i - head) / 64;
      rest[i] = (n_i - head) % 64;
      tail[i] = p[i] + nb[i] * 64;
      s->nbytes += nb[i] * 64;
    }
    compress_lanes(h, p, nb, kk); /* reorders h, p, nb */
    for (int i = 0; i < kk; i++)  /* the tail, under a block, into the empty buffer */
      if (rest[i]) fm_sha256_update(ctx[c0 + i], tail[i], rest[i]);
  }
}

void fm_hex(const uint8_t *bytes, size_t n, char *hex) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) hex[2 * i] = d[bytes[i] >> 4], hex[2 * i + 1] = d[bytes[i] & 15];
  hex[2 * n] = 0;
}

/* ---- sha256-blocks-v1 (hash.h) ---------------------------------------- */
void fm_sha_pieces_init(FmShaPieces *p, size_t esize) {
  fm_sha256_init(&p->outer);
  fm_sha256_init(&p->piece);
  p->in_piece = 0;
  p->esize = esize;
}

static void close_piece(FmShaPieces *p) {
  uint8_t d[32];
  fm_sha256_final(&p->piece, d);
  fm_sha256_update(&p->outer, d, 32);
  fm_sha256_init(&p->piece);
  p->in_piece = 0;
}

void fm_sha_pieces_update_multi(FmShaPieces *const p[], const void *const data[], const int64_t n[], int k) {
  enum { KMAX = 8 };
  for (int c0 = 0; c0 < k; c0 += KMAX) {
    const int kk = k - c0 < KMAX ? k - c0 : KMAX;
    const uint8_t *b[KMAX] = {NULL};
    int64_t left[KMAX] = {0};
    for (int i = 0; i < kk; i++) b[i] = data[c0 + i], left[i] = n[c0 + i];
    for (;;) { /* each state on to the end of its piece or of its data, side by side */
      FmSha256 *ctx[KMAX] = {NULL};
      const void *d[KMAX] = {NULL};
      size_t len[KMAX] = {0};
      int64_t take[KMAX] = {0};
      int j = 0;
      for (int i = 0; i < kk; i++) {
        FmShaPieces *q = p[c0 + i];
        take[i] = FM_SHA_PIECE - q->in_piece < left[i] ? FM_SHA_PIECE - q->in_piece : left[i];
        if (take[i] > 0) ctx[j] = &q->piece, d[j] = b[i], len[j] = (size_t)take[i] * q->esize, j++;
      }
      if (j == 0) break;
      fm_sha256_update_multi(ctx, d, len, j);
      for (int i = 0; i < kk; i++) {
        FmShaPieces *q = p[c0 + i];
        b[i] += (size_t)take[i] * q->esize;
        left[i] -= take[i];
        q->in_piece += take[i];
        if (q->in_piece == FM_SHA_PIECE) close_piece(q);
      }
    }
  }
}

void fm_sha_pieces_update(FmShaPieces *p, const void *data, int64_t n) {
  FmShaPieces *const ps[1] = {p};
  const void *const d[1] = {data};
  const int64_t ns[1] = {n};
  fm_sha_pieces_update_multi(ps, d, ns, 1); /* one lane: piece by piece, as the multi form walks them */
}

void fm_sha_pieces_final(FmShaPieces *p, char hex[65]) {
  if (p->in_piece > 0) close_piece(p);
  uint8_t out[32];
  fm_sha256_final(&p->outer, out);
  fm_hex(out, 32, hex);
}
