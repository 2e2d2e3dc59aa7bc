/* test_store.c: shards written collectively by every rank (HDF5 and .bin,
 * each rank its own rows, in runs), then read back through the one store
 * interface: independent and collective batch reads where ranks ask for
 * different samples (and one asks for none), checked against the closed-form
 * contents: token (i, t) = 1000*i + t, mask (i + t) % 2, segment 1 + 2t/R. */
#include "fm_test.h"
#include "fmhpc/data.h"

#include <unistd.h>

enum { NSEQ = 23, T = 7, R = T + 1 };

static void fill_and_write(const char *path, bool h5, FmComm *c) {
  /* rank r owns rows i with (i / 3) % P == r, written as runs of <= 3 rows */
  int64_t rs[NSEQ], rc_[NSEQ], nruns = 0, n = 0;
  static uint32_t tok[NSEQ * R];
  static uint8_t mask[NSEQ * R];
  static int32_t seg[NSEQ * R], pos[NSEQ * R];
  for (int64_t i = 0; i < NSEQ; i++) {
    if ((i / 3) % c->size != c->rank) continue;
    if (nruns && rs[nruns - 1] + rc_[nruns - 1] == i) rc_[nruns - 1]++;
    else rs[nruns] = i, rc_[nruns++] = 1;
    for (int t = 0; t < R; t++) {
      tok[n * R + t] = (uint32_t)(1000 * i + t);
      mask[n * R + t] = (uint8_t)((i + t) % 2);
      seg[n * R + t] = 1 + 2 * t / R;
      pos[n * R + t] = t % 4;
    }
    n++;
  }
  FmShardMeta m = {"train", 0, 1, 0, NSEQ, T, 50257, 50256, 0, "bfd", "doc_reset", "abc123", "deadbeef  in.jsonl\n",
                   "{}"};
  FmShardPart part = {nruns, rs, rc_, tok, mask, pos, seg};
  int rc = h5 ? fm__h5_write_shard(path, &m, &part, c, stderr) : fm__bin_write_shard(path, &m, &part, c, stderr);
  FM_EXPECT_EQ_INT(rc, 0);
}

static void check_batch(const FmBatch *b, const int64_t *ids, int64_t n, bool has_pos) {
  for (int64_t k = 0; k < n; k++)
    for (int t = 0; t < T; t++) {
      int64_t i = ids[k], o = k * T + t;
      FM_EXPECT_EQ_INT(b->tokens[o], 1000 * i + t);
      FM_EXPECT_EQ_INT(b->targets[o], 1000 * i + t + 1);
      FM_EXPECT_EQ_INT(b->loss_mask[o], (i + t + 1) % 2);
      FM_EXPECT_EQ_INT(b->segment_ids[o], 1 + 2 * t / R);
      FM_EXPECT_EQ_INT(b->position_ids[o], has_pos ? t % 4 : t);
    }
}

static void read_back(const char *path, FmComm *c, bool has_pos) {
  FmStore *st;
  FM_REQUIRE(fm_store_open(&st, path, "auto", c, stderr) == 0);
  const FmStoreInfo *in = fm_store_info(st);
  FM_EXPECT_EQ_INT(in->n_seq, NSEQ);
  FM_EXPECT_EQ_INT(in->seq_len, T);
  FM_EXPECT_EQ_INT(in->vocab_size, 50257);
  FM_EXPECT_EQ_STR(in->tokenizer_hash, "abc123");
  FmBatch b;
  fm_batch_alloc(&b, 8, T);
  /* rank-dependent samples, with a repeat and out of order; the last rank reads nothing */
  int64_t ids[6] = {(5 * c->rank + 22) % NSEQ, 3, 3, (c->rank * 7) % NSEQ, 0, NSEQ - 1};
  int64_t n = c->rank == c->size - 1 && c->size > 1 ? 0 : 6;
  FM_EXPECT_EQ_INT(fm_store_read_batch_coll(st, ids, n, &b), 0);
  FM_EXPECT_EQ_INT(b.n, n);
  check_batch(&b, ids, n, has_pos);
  FM_EXPECT_EQ_INT(fm_store_read_batch(st, ids, 6, &b), 0);
  check_batch(&b, ids, 6, has_pos);
  int64_t bad = NSEQ;
  FM_EXPECT_EQ_INT(fm_store_read_batch(st, &bad, 1, &b), FM_ERANGE);
  fm_batch_free(&b);
  fm_store_close(st);
}

FM_TEST(h5_write_read) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  char path[256];
  snprintf(path, sizeof path, "%s/tests/test_store_np%d.h5", FMHPC_BINARY_DIR, c->size);
  fill_and_write(path, true, c);
  read_back(path, c, true);
  fm_comm_barrier(c);
  if (c->rank == 0) unlink(path);
  fm_comm_destroy(c);
}

FM_TEST(bin_write_read_manifest) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  char stem[256], man[300];
  snprintf(stem, sizeof stem, "%s/tests/test_store_np%d", FMHPC_BINARY_DIR, c->size);
  snprintf(man, sizeof man, "%s.json", stem);
  fill_and_write(stem, false, c);
  if (c->rank == 0) {
    const char *base = strrchr(stem, '/') + 1;
    FILE *f = fopen(man, "w");
    fprintf(f, "{\"format\": \"fmhpc-packed\", \"storage\": \"bin\", \"seq_len\": %d, \"n_seq\": %d, "
               "\"vocab_size\": 50257, \"eos_id\": 50256, \"pad_id\": 0, \"packing\": \"bfd\", "
               "\"position_ids\": \"doc_reset\", \"tokenizer_hash\": \"abc123\", "
               "\"shards\": [{\"file\": \"%s\", \"first_seq\": 0, \"n_seq\": %d}]}\n", T, NSEQ, base, NSEQ);
    fclose(f);
  }
  fm_comm_barrier(c);
  read_back(man, c, true);
  fm_comm_barrier(c);
  if (c->rank == 0) {
    static const char *const sfx[] = {"tokens", "loss_mask", "segment_ids", "position_ids"};
    for (int a = 0; a < 4; a++) {
      char p[320];
      snprintf(p, sizeof p, "%s.%s.bin", stem, sfx[a]);
      unlink(p);
    }
    unlink(man);
  }
  fm_comm_destroy(c);
}

FM_TEST(errors_name_the_file) {
  FmStore *st;
  FM_EXPECT_EQ_INT(fm_store_open(&st, "/nonexistent/train.json", "auto", NULL, NULL), FM_EIO);
  FM_EXPECT_EQ_INT(fm_store_open(&st, "/nonexistent/x.h5", "auto", NULL, NULL), FM_EIO);
  FM_EXPECT_EQ_INT(fm_store_open(&st, "/nonexistent/x.txt", "auto", NULL, NULL), FM_EINVAL);
}
