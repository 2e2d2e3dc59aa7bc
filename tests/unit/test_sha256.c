/* test_sha256.c: SHA-256 against the FIPS 180-2 appendix B known answers
 * (one block "abc", the two-block 448-bit message, one million 'a'), and the
 * incremental API fed in uneven pieces against the one-shot digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/hash.h"

static void hex_of(const void *p, size_t n, char hex[65]) {
  uint8_t d[32];
  fm_sha256(p, n, d);
  fm_hex(d, 32, hex);
}

FM_TEST(fips_abc) {
  char hex[65];
  hex_of("abc", 3, hex);
  FM_EXPECT_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

FM_TEST(fips_448bit) {
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  char hex[65];
  hex_of(m, strlen(m), hex);
  FM_EXPECT_EQ_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

FM_TEST(fips_million_a) {
  char *m = malloc(1000000);
  memset(m, 'a', 1000000);
  char hex[65];
  hex_of(m, 1000000, hex);
  FM_EXPECT_EQ_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* Incremental, in pieces that straddle block boundaries. */
  FmSha256 s;
  fm_sha256_init(&s);
  size_t off = 0, step = 1;
  while (off < 1000000) {
    size_t n = step < 1000000 - off ? step : 1000000 - off;
    fm_sha256_update(&s, m + off, n);
    off += n;
    step = step * 7 % 131 + 1;
  }
  uint8_t d[32];
  fm_sha256_final(&s, d);
  fm_hex(d, 32, hex);
  FM_EXPECT_EQ_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(m);
}

FM_TEST(empty) {
  char hex[65];
  hex_of("", 0, hex);
  FM_EXPECT_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* sha256-blocks-v1 streamed in chunks that straddle pieces, against Python's
 * hashlib: sha256(b''.join(sha256(piece) for each 65536-element piece)). */
FM_TEST(pieces_streamed) {
  uint8_t *b = malloc(150000);
  for (int i = 0; i < 150000; i++) b[i] = (uint8_t)(i % 251);
  FmShaPieces p;
  char hex[65];
  fm_sha_pieces_init(&p, 1);
  for (int64_t i = 0; i < 150000; i += 999) fm_sha_pieces_update(&p, b + i, 150000 - i < 999 ? 150000 - i : 999);
  fm_sha_pieces_final(&p, hex);
  FM_EXPECT_EQ_STR(hex, "8b67e422f2f2889fed0c067ccc0813df2753ad86358613db9495245ca86a1115");
  free(b);
  uint32_t *w = malloc(70000 * sizeof *w);
  for (uint32_t i = 0; i < 70000; i++) w[i] = i; /* little-endian hosts only, as the stores */
  fm_sha_pieces_init(&p, 4);
  fm_sha_pieces_update(&p, w, 70000);
  fm_sha_pieces_final(&p, hex);
  FM_EXPECT_EQ_STR(hex, "54cc25f00ca558e4839759a885638400006d52981fa4dbe43fe019625ac39e91");
  free(w);
}

/* The portable compression and the x86 SHA-extensions one (when this CPU has
 * them: CI machines vary, the line printed says which ran) each give the FIPS
 * answers, and the same digests on 2,000 messages of every length 0..999 and
 * a few large ones fed in uneven pieces. */
FM_TEST(implementations_agree) {
  static const struct {
    const char *msg, *hex;
  } fips[] = {{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
              {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
              {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}};
  const size_t N = 3 << 20;
  uint8_t *m = malloc(N);
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < N; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, m[i] = (uint8_t)x;
  uint8_t(*ref)[32] = malloc(1000 * sizeof *ref), big_ref[3][32];
  const size_t big[3] = {64 * 1000, N - 1, N};
  int nimpl = 0;
  for (int which = 0; which < 2; which++) {
    const char *name = fm__sha256_impl(which);
    if (which == 1 && strcmp(name, "portable") == 0) {
      printf("this CPU has no SHA extensions: only the portable compression ran\n");
      break;
    }
    nimpl++;
    for (size_t k = 0; k < sizeof fips / sizeof fips[0]; k++) {
      char hex[65];
      hex_of(fips[k].msg, strlen(fips[k].msg), hex);
      FM_EXPECT_EQ_STR(hex, fips[k].hex);
    }
    for (size_t n = 0; n < 1000; n++) {
      uint8_t d[32];
      fm_sha256(m + n, n, d);
      if (which == 0)
        memcpy(ref[n], d, 32);
      else
        FM_EXPECT(memcmp(ref[n], d, 32) == 0);
    }
    for (int b = 0; b < 3; b++) {
      FmSha256 s;
      fm_sha256_init(&s);
      for (size_t off = 0, step = 1; off < big[b]; step = step * 31 % 100003 + 1) {
        size_t n = step < big[b] - off ? step : big[b] - off;
        fm_sha256_update(&s, m + off, n);
        off += n;
      }
      uint8_t d[32];
      fm_sha256_final(&s, d);
      if (which == 0)
        memcpy(big_ref[b], d, 32);
      else
        FM_EXPECT(memcmp(big_ref[b], d, 32) == 0);
    }
    printf("%s: FIPS answers and 1,003 messages checked\n", name);
  }
  FM_EXPECT(nimpl >= 1);
  fm__sha256_impl(-1);
  free(ref);
  free(m);
}

/* The messages and lengths of the hashlib value below (see its comment): the
 * 3 MiB xorshift message (returned, malloc'd) and the lengths in lens, *nl of
 * them (HASHLIB_NLENS, which the tests check). */
#define HASHLIB_NLENS 315
static uint8_t *hashlib_fixture(size_t lens[HASHLIB_NLENS], size_t *count) {
  const size_t N = 3 << 20;
  uint8_t *m = malloc(N);
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < N; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, m[i] = (uint8_t)x;
  size_t nl = 0;
  for (size_t n = 0; n < 300; n++) lens[nl++] = n;
  static const size_t ks[] = {5, 16, 100, 1023};
  for (size_t k = 0; k < 4; k++)
    for (size_t d = 0; d < 3; d++) lens[nl++] = 64 * ks[k] + d - 1; /* -1, 0, +1 */
  lens[nl++] = 262144, lens[nl++] = 262145, lens[nl++] = (1 << 20) + 13;
  *count = nl;
  return m;
}

/* Two lanes of fm_sha256_update_multi: a fed pa and b fed pb, n bytes each. */
static void update2(FmSha256 *a, const void *pa, FmSha256 *b, const void *pb, size_t n) {
  FmSha256 *const ctx[2] = {a, b};
  const void *const data[2] = {pa, pb};
  const size_t len[2] = {n, n};
  fm_sha256_update_multi(ctx, data, len, 2);
}

/* Two messages of one length hashed side by side (update2 from fresh states:
 * the 2-lane compression) and fm_sha256 on 315 lengths (0..299, around multiples of 64 up to
 * 64 Ki, 256 Ki +0/+1, 1 Mi + 13), each with both compressions: the digests
 * of the pairs, concatenated in order, hash to the value Python's hashlib
 * gives for the same messages:
 *   m: 3 Mi bytes, x = 88172645463325252; x ^= x << 13; x ^= x >> 7;
 *      x ^= x << 17 (mod 2^64); byte i = x & 0xff
 *   for n: sha256(m[n%7 : n%7+n]).digest(), sha256(m[1000+n : 1000+2n]).digest()
 * A CPU without the SHA extensions runs the portable path only and says so. */
FM_TEST(x2_and_lengths_match_hashlib) {
  size_t lens[HASHLIB_NLENS], nl = 0;
  uint8_t *m = hashlib_fixture(lens, &nl);
  FM_EXPECT(nl == HASHLIB_NLENS);
  int nimpl = 0;
  for (int which = 0; which < 2; which++) {
    const char *name = fm__sha256_impl(which);
    if (which == 1 && strcmp(name, "portable") == 0) {
      printf("this CPU has no SHA extensions: the 2-lane path checked on the portable compression only\n");
      break;
    }
    FmSha256 all1, all2; /* one from fm_sha256, one from the 2-lane path */
    fm_sha256_init(&all1);
    fm_sha256_init(&all2);
    for (size_t i = 0; i < nl; i++) {
      const size_t n = lens[i];
      uint8_t d0[32], d1[32];
      fm_sha256(m + n % 7, n, d0);
      fm_sha256(m + 1000 + n, n, d1);
      fm_sha256_update(&all1, d0, 32);
      fm_sha256_update(&all1, d1, 32);
      FmSha256 s0, s1;
      fm_sha256_init(&s0), fm_sha256_init(&s1);
      update2(&s0, m + n % 7, &s1, m + 1000 + n, n);
      fm_sha256_final(&s0, d0), fm_sha256_final(&s1, d1);
      fm_sha256_update(&all2, d0, 32);
      fm_sha256_update(&all2, d1, 32);
    }
    uint8_t d[32];
    char hex1[65], hex2[65];
    fm_sha256_final(&all1, d);
    fm_hex(d, 32, hex1);
    fm_sha256_final(&all2, d);
    fm_hex(d, 32, hex2);
    FM_EXPECT_EQ_STR(hex1, "cd48f44fe48dde3819367e9542ac061f37424a77c91abecb32bda3cd28dd6ab9");
    FM_EXPECT_EQ_STR(hex2, "cd48f44fe48dde3819367e9542ac061f37424a77c91abecb32bda3cd28dd6ab9");
    printf("%s: fm_sha256 and the 2-lane path on %zu lengths (%zu messages each) match hashlib\n", name, nl, 2 * nl);
    nimpl++;
  }
  FM_EXPECT(nimpl >= 1);
  fm__sha256_impl(-1);
  free(m);
}

/* update2 in pieces (streamed checksums of two datasets side by side, as
 * prep's and the store's do with more lanes): the 315 pairs of x2_and_lengths_match_hashlib fed in
 * pseudo-random pieces (1..200 or 1..5000 bytes, the same for both states)
 * give hashlib's value above, with both compressions; and two states whose
 * buffered bytes differ (one fed 5 bytes first: the one-at-a-time path) give
 * what fm_sha256_update gives. */
FM_TEST(update_x2_in_pieces) {
  size_t lens[HASHLIB_NLENS], nl = 0;
  uint8_t *m = hashlib_fixture(lens, &nl);
  FM_EXPECT(nl == HASHLIB_NLENS);
  int nimpl = 0;
  for (int which = 0; which < 2; which++) {
    const char *name = fm__sha256_impl(which);
    if (which == 1 && strcmp(name, "portable") == 0) break;
    FmSha256 all;
    fm_sha256_init(&all);
    for (size_t i = 0; i < nl; i++) {
      const size_t n = lens[i];
      FmSha256 a, b;
      fm_sha256_init(&a);
      fm_sha256_init(&b);
      uint64_t y = n + 1;
      for (size_t o = 0; o < n;) {
        y = y * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t k = 1 + (size_t)(y >> 33) % (i % 2 ? 200 : 5000);
        if (k > n - o) k = n - o;
        update2(&a, m + n % 7 + o, &b, m + 1000 + n + o, k);
        o += k;
      }
      uint8_t d0[32], d1[32];
      fm_sha256_final(&a, d0);
      fm_sha256_final(&b, d1);
      fm_sha256_update(&all, d0, 32);
      fm_sha256_update(&all, d1, 32);
    }
    uint8_t d[32];
    char hex[65];
    fm_sha256_final(&all, d);
    fm_hex(d, 32, hex);
    FM_EXPECT_EQ_STR(hex, "cd48f44fe48dde3819367e9542ac061f37424a77c91abecb32bda3cd28dd6ab9");
    FmSha256 a, b, ra, rb; /* buffers out of step */
    fm_sha256_init(&a), fm_sha256_init(&b), fm_sha256_init(&ra), fm_sha256_init(&rb);
    fm_sha256_update(&b, m, 5);
    fm_sha256_update(&rb, m, 5);
    for (size_t o = 0; o < 10000; o += 333) {
      update2(&a, m + 77 + o, &b, m + 500 + o, 333);
      fm_sha256_update(&ra, m + 77 + o, 333);
      fm_sha256_update(&rb, m + 500 + o, 333);
    }
    uint8_t e[4][32];
    fm_sha256_final(&a, e[0]), fm_sha256_final(&ra, e[1]), fm_sha256_final(&b, e[2]), fm_sha256_final(&rb, e[3]);
    FM_EXPECT(memcmp(e[0], e[1], 32) == 0);
    FM_EXPECT(memcmp(e[2], e[3], 32) == 0);
    printf("%s: update2 in pieces on %zu lengths matches hashlib; out-of-step buffers match\n", name, nl);
    nimpl++;
  }
  FM_EXPECT(nimpl >= 1);
  fm__sha256_impl(-1);
  free(m);
}

/* fm_sha256_update_multi (prep's shard checksums: 3 or 4 datasets side by side, of different lengths): 240 trials
 * of 1 to 6 states, each state started with a prefix fed by fm_sha256_update (a partial block buffered, or none),
 * then 1 to 3 multi calls with a length per state: 0, 1, 63, 64, 65, 127, 128, 129, 4096, 65539 or 0..2999,
 * at unaligned places of the hashlib fixture's message (NULL data where a length is 0, in odd trials). After
 * each call every state equals the one fm_sha256_update gives; the digests, concatenated in order, hash to the
 * value Python's hashlib gives, with both compressions:
 *   m as in x2_and_lengths_match_hashlib; y = 2024; draw(r): y = y * 6364136223846793005 + 1442695040888963407
 *   (mod 2^64), return (y >> 33) % r; length(): special[draw(10)] if draw(2) else draw(3000)
 *   for t in range(240): k = 1 + t % 6; per state: off = draw(1 << 20), then length() bytes of prefix;
 *   calls = 1 + draw(3); per call, per state: length() more bytes; state i hashes m[off_i : its end]
 *   sha256(b''.join(sha256(message).digest() for each state in order)) */
static uint64_t multi_y;
static size_t multi_draw(size_t r) {
  multi_y = multi_y * 6364136223846793005ULL + 1442695040888963407ULL;
  return (size_t)(multi_y >> 33) % r;
}
static size_t multi_length(void) {
  static const size_t special[10] = {0, 1, 63, 64, 65, 127, 128, 129, 4096, 65539};
  return multi_draw(2) ? special[multi_draw(10)] : multi_draw(3000);
}
static int same_state(const FmSha256 *a, const FmSha256 *b) {
  return memcmp(a->h, b->h, sizeof a->h) == 0 && a->nbytes == b->nbytes && a->nbuf == b->nbuf &&
         memcmp(a->buf, b->buf, a->nbuf) == 0;
}

FM_TEST(update_multi_lanes) {
  size_t lens[HASHLIB_NLENS], nl = 0;
  uint8_t *m = hashlib_fixture(lens, &nl);
  int nimpl = 0;
  for (int which = 0; which < 2; which++) {
    const char *name = fm__sha256_impl(which);
    if (which == 1 && strcmp(name, "portable") == 0) {
      printf("this CPU has no SHA extensions: fm_sha256_update_multi checked on the portable compression only\n");
      break;
    }
    multi_y = 2024;
    FmSha256 outer;
    fm_sha256_init(&outer);
    int nstates = 0, nsame = 0, ncalls = 0;
    for (int t = 0; t < 240; t++) {
      const int k = 1 + t % 6;
      FmSha256 s[6], r[6]; /* r: the same bytes by fm_sha256_update */
      FmSha256 *ctx[6];
      size_t pos[6];
      for (int i = 0; i < k; i++) {
        fm_sha256_init(&s[i]);
        fm_sha256_init(&r[i]);
        ctx[i] = &s[i];
        pos[i] = multi_draw((size_t)1 << 20);
        const size_t pre = multi_length();
        fm_sha256_update(&s[i], m + pos[i], pre);
        fm_sha256_update(&r[i], m + pos[i], pre);
        pos[i] += pre;
      }
      const size_t calls = 1 + multi_draw(3);
      for (size_t c = 0; c < calls; c++) {
        const void *data[6];
        size_t n[6];
        for (int i = 0; i < k; i++) {
          n[i] = multi_length();
          data[i] = n[i] == 0 && t % 2 ? NULL : m + pos[i];
          fm_sha256_update(&r[i], m + pos[i], n[i]);
          pos[i] += n[i];
        }
        fm_sha256_update_multi(ctx, data, n, k);
        ncalls++;
        for (int i = 0; i < k; i++) nsame += same_state(&s[i], &r[i]), nstates++;
      }
      for (int i = 0; i < k; i++) {
        uint8_t d[32];
        fm_sha256_final(&s[i], d);
        fm_sha256_update(&outer, d, 32);
      }
    }
    uint8_t d[32];
    char hex[65];
    fm_sha256_final(&outer, d);
    fm_hex(d, 32, hex);
    FM_EXPECT_EQ_STR(hex, "c1b062a0a82233556a6645efdf407dfe72e1469767a9f059e10aa84fc4ba9a06");
    FM_EXPECT(nstates > 1000);
    FM_EXPECT(nsame == nstates);
    printf(
        "%s: fm_sha256_update_multi: %d calls, %d states after them as fm_sha256_update leaves them (of %d); "
        "840 digests match hashlib\n",
        name, ncalls, nsame, nstates);
    nimpl++;
  }
  FM_EXPECT(nimpl >= 1);
  fm__sha256_impl(-1);
  free(m);
}

/* fm_sha_pieces_update_multi (a store's shard checked: its datasets side by side): pieces_streamed's two arrays
 * (150,000 bytes, 70,000 4-byte words), each in two states, fed in chunks of different sizes per state (some 0,
 * chunks straddling the pieces at different places), give hashlib's values, with both compressions. */
FM_TEST(pieces_multi_match_hashlib) {
  uint8_t *b = malloc(150000);
  uint32_t *w = malloc(70000 * sizeof *w);
  for (int i = 0; i < 150000; i++) b[i] = (uint8_t)(i % 251);
  for (uint32_t i = 0; i < 70000; i++) w[i] = i;
  const char *want[2] = {"8b67e422f2f2889fed0c067ccc0813df2753ad86358613db9495245ca86a1115",
                         "54cc25f00ca558e4839759a885638400006d52981fa4dbe43fe019625ac39e91"};
  int nimpl = 0;
  for (int which = 0; which < 2; which++) {
    const char *name = fm__sha256_impl(which);
    if (which == 1 && strcmp(name, "portable") == 0) break;
    FmShaPieces p[4];
    FmShaPieces *const pp[4] = {&p[0], &p[1], &p[2], &p[3]};
    const int64_t total[4] = {150000, 70000, 150000, 70000}, step[4] = {999, 333, 4097, 65537};
    int64_t at[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) fm_sha_pieces_init(&p[i], i % 2 ? 4 : 1);
    int ncalls = 0;
    while (at[0] < total[0] || at[1] < total[1] || at[2] < total[2] || at[3] < total[3]) {
      const void *data[4];
      int64_t n[4];
      for (int i = 0; i < 4; i++) {
        n[i] = (ncalls + i) % 5 == 0 ? 0 : step[i]; /* now and then nothing */
        if (n[i] > total[i] - at[i]) n[i] = total[i] - at[i];
        data[i] = i % 2 ? (const void *)(w + at[i]) : (const void *)(b + at[i]);
        at[i] += n[i];
      }
      fm_sha_pieces_update_multi(pp, data, n, 4);
      ncalls++;
    }
    for (int i = 0; i < 4; i++) {
      char hex[65];
      fm_sha_pieces_final(&p[i], hex);
      FM_EXPECT_EQ_STR(hex, want[i % 2]);
    }
    printf("%s: fm_sha_pieces_update_multi, 4 states in %d calls, match hashlib\n", name, ncalls);
    nimpl++;
  }
  FM_EXPECT(nimpl >= 1);
  fm__sha256_impl(-1);
  free(b);
  free(w);
}
