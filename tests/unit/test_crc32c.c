/* test_crc32c.c: CRC-32C against published known answers: the CRC catalogue's
 * check value ("123456789" -> 0xE3069283) and the four 32-byte vectors of
 * RFC 3720 appendix B.4 (iSCSI); pieces chained equal the one-shot value; the
 * TFRecord mask against its formula written out by hand for one value. */
#include "fm_test.h"
#include "fmhpc/hash.h"

FM_TEST(check_value) { FM_EXPECT_EQ_INT(fm_crc32c(0, "123456789", 9), 0xE3069283u); }

FM_TEST(rfc3720_vectors) {
  uint8_t b[32];
  memset(b, 0, sizeof b);
  FM_EXPECT_EQ_INT(fm_crc32c(0, b, 32), 0x8A9136AAu);
  memset(b, 0xff, sizeof b);
  FM_EXPECT_EQ_INT(fm_crc32c(0, b, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
  FM_EXPECT_EQ_INT(fm_crc32c(0, b, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
  FM_EXPECT_EQ_INT(fm_crc32c(0, b, 32), 0x113FDB5Cu);
}

FM_TEST(chained) {
  const char *m = "The quick brown fox jumps over the lazy dog";
  const size_t n = strlen(m);
  const uint32_t whole = fm_crc32c(0, m, n);
  FM_EXPECT_EQ_INT(whole, 0x22620404u); /* the same sentence's CRC-32C as commonly published */
  for (size_t cut = 0; cut <= n; cut += 7) FM_EXPECT_EQ_INT(fm_crc32c(fm_crc32c(0, m, cut), m + cut, n - cut), whole);
  FM_EXPECT_EQ_INT(fm_crc32c(0, m, 0), 0u);
}

FM_TEST(tfrecord_mask) {
  /* 0xE3069283 rotated right by 15 is 0x2507C60D; plus 0xa282ead8 is 0xC78AB0E5. */
  FM_EXPECT_EQ_INT(fm_crc32c_mask(0xE3069283u), 0xC78AB0E5u);
  FM_EXPECT_EQ_INT(fm_crc32c_mask(0), 0xa282ead8u);
}
