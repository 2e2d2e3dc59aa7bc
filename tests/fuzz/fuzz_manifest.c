/* fuzz_manifest: a store manifest (src/data/store.c open_manifest, and the
 * .bin shard reader it opens, src/data/store_bin.c). Input: a byte choosing
 * &data format (auto, bin, h5), then the manifest JSON. Its directory holds
 * two real .bin shards written at start, s0 (3 rows) and s1 (2 rows) of
 * seq_len 7 with position ids, one token of s1 out of a 100-token vocabulary;
 * "file" may name them or anything else. When the store opens, every sample
 * is read the way training reads batches, and one by one. */
#include "fmhpc/core.h"
#include "fmhpc/data.h"
#include "fuzz_common.h"

enum { R = 8 };
static char dir[512];

static void write_shard(const char *stem, int n, uint32_t bad_at) {
  uint32_t tok[5 * R];
  uint8_t mask[5 * R];
  int32_t seg[5 * R], pos[5 * R];
  for (int i = 0; i < n * R; i++) {
    tok[i] = (uint32_t)(i * 7 % 100);
    mask[i] = (uint8_t)(i % 3 != 0);
    seg[i] = i / 4;
    pos[i] = i % 4;
  }
  if (bad_at < (uint32_t)(n * R)) tok[bad_at] = 150;
  const void *bufs[4] = {tok, mask, seg, pos};
  const char *suffix[4] = {"tokens", "loss_mask", "segment_ids", "position_ids"};
  const size_t elem[4] = {4, 1, 4, 4};
  for (int a = 0; a < 4; a++) {
    char name[64], path[600];
    snprintf(name, sizeof name, "%s.%s.bin", stem, suffix[a]);
    fz_write(path, sizeof path, name, bufs[a], (size_t)n * R * elem[a]);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  snprintf(dir, sizeof dir, "%s", fz_dir());
  fm_log_set_quiet(1);
  write_shard("s0", 3, UINT32_MAX);
  write_shard("s1", 2, 13);
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *formats[3] = {"auto", "bin", "h5"};
  if (size < 1) return 0;
  char path[600];
  fz_write(path, sizeof path, "train.json", data + 1, size - 1);
  FmStore *st = NULL;
  FzErr e;
  int rc = fm_store_open(&st, path, formats[data[0] % 3], NULL, fz_err_open(&e));
  fz_said(&e, rc, "fm_store_open");
  if (rc) return 0;
  const FmStoreInfo *in = fm_store_info(st);
  if (in->seq_len < 1 || in->n_seq < 0 || in->row_len != in->seq_len + 1 || in->vocab_size < 1) {
    fprintf(stderr, "fuzz_manifest: a store opened with seq_len %lld, n_seq %lld, vocab_size %lld\n",
            (long long)in->seq_len, (long long)in->n_seq, (long long)in->vocab_size);
    abort();
  }
  FmBatch b;
  fm_batch_alloc(&b, 2, in->seq_len);
  for (int64_t i = 0; i < in->n_seq && i < 64; i += 2) {
    int64_t ids[2] = {i, in->n_seq - 1 - i};
    rc = fm_store_read_batch(st, ids, 2, &b);
    if (rc && rc != FM_EFORMAT) abort();
  }
  fm_batch_free(&b);
  size_t R1 = (size_t)in->row_len;
  uint32_t *tok = malloc(R1 * 4);
  uint8_t *mask = malloc(R1);
  int32_t *seg = malloc(R1 * 4), *pos = malloc(R1 * 4);
  for (int64_t i = 0; i < in->n_seq && i < 64; i++)
    if (fm_store_read_row(st, i, tok, mask, seg, pos)) abort();
  free(tok), free(mask), free(seg), free(pos);
  fm_store_close(st);
  return 0;
}
