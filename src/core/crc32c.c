/* crc32c.c: CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, as in
 * RFC 3720 appendix B.4), bit at a time: its one user, the TensorBoard event
 * writer, checksums a few hundred bytes per step, so clarity beats tables.
 * Known answers are in tests/unit/test_crc32c.c. */
#include "fmhpc/hash.h"

uint32_t fm_crc32c(uint32_t crc, const void *data, size_t n) {
  const uint8_t *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/* TFRecord's masking (tensorflow/core/lib/hash/crc32c.h: rotate right by 15,
 * add a constant), so that a CRC stored inside checksummed data does not
 * checksum to a fixed value. */
uint32_t fm_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
