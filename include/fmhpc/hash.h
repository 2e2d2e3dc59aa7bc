/* hash.h: SHA-256 (FIPS 180-4), one-shot and incremental, a hex helper, and
 * CRC-32C. Used for tokenizer hashes (fm_tok_hash), data/checkpoint checksums
 * and TensorBoard's record framing.
 * Nothing here is secret-handling code: no constant-time claims. */
#ifndef FMHPC_HASH_H
#define FMHPC_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct FmSha256 {
  uint32_t h[8];
  uint64_t nbytes;   /* message length so far */
  uint8_t buf[64];   /* partial block */
  size_t nbuf;
} FmSha256;

void fm_sha256_init(FmSha256 *s);
void fm_sha256_update(FmSha256 *s, const void *data, size_t n);
void fm_sha256_final(FmSha256 *s, uint8_t out[32]);
void fm_sha256(const void *data, size_t n, uint8_t out[32]);
/* fm_sha256_update(ctx[i], data[i], n[i]) for i < k, the same states after
 * as those k calls leave (lengths may differ, any of them 0; the states'
 * buffered partial blocks may differ; the k states must be distinct). With
 * the x86 SHA extensions up to 4 messages' whole blocks compress side by
 * side, faster per byte than one after the other. */
void fm_sha256_update_multi(FmSha256 *const ctx[], const void *const data[], const size_t n[], int k);
/* Tests and benchmarks: which compression the hashes use: 0 the portable C,
 * 1 the x86 SHA extensions when the CPU has them, -1 (or 2) leave/restore the
 * CPUID choice. Returns the one in use, "portable" or "x86 SHA extensions". */
const char *fm__sha256_impl(int which);
/* 2*n lowercase hex digits and a NUL into hex (room for 2*n+1). */
void fm_hex(const uint8_t *bytes, size_t n, char *hex);

/* sha256-blocks-v1, the checksum of checkpoints' and stores' datasets: the
 * SHA-256 of the SHA-256 digests of the pieces of FM_SHA_PIECE elements
 * (the last may be shorter) of an array's little-endian bytes. Pieces can
 * be hashed where they live (ranks of a checkpoint write); this streaming
 * form takes the elements in order, in chunks of any size. */
#define FM_SHA_PIECE ((int64_t)1 << 16)
typedef struct FmShaPieces {
  FmSha256 outer, piece;
  int64_t in_piece; /* elements in the current piece */
  size_t esize;
} FmShaPieces;
void fm_sha_pieces_init(FmShaPieces *p, size_t esize);
void fm_sha_pieces_update(FmShaPieces *p, const void *data, int64_t n);
/* fm_sha_pieces_update(p[i], data[i], n[i]) for i < k (distinct states),
 * the datasets' pieces hashed side by side (fm_sha256_update_multi). */
void fm_sha_pieces_update_multi(FmShaPieces *const p[], const void *const data[], const int64_t n[], int k);
void fm_sha_pieces_final(FmShaPieces *p, char hex[65]);

/* CRC-32C (Castagnoli) of data[0..n), continuing from crc (0 to start):
 * fm_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t fm_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t fm_crc32c_mask(uint32_t crc);

#endif
