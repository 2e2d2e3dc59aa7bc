/* test_sha256.c: SHA-256 against the FIPS 180-2 appendix B known answers
 * (one block "abc", the two-block 448-bit message, one million 'a'), and the
 * incremental API fed in uneven pieces against the one-shot digest. */
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
