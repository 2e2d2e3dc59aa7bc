/* store_bin.c: packed shards as raw little-endian arrays, one file per array
 * (stem.tokens.bin u32, stem.loss_mask.bin u8, stem.segment_ids.bin i32,
 * stem.position_ids.bin i32 when stored), each (N, R) row-major, described by
 * the JSON manifest prep writes next to them. The writer has rank 0 create
 * each file at its final size as .partial, every rank pwrite its rows at
 * computed offsets, then rank 0 renames; the reader maps the files. */
#include "fmhpc/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Arr {
  const char *suffix;
  size_t elem;
} Arr;
static const Arr arrays[4] = {
    {"tokens", 4}, {"loss_mask", 1}, {"segment_ids", 4}, {"position_ids", 4}};

static int little_endian(void) {
  uint32_t one = 1;
  uint8_t b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static int pwrite_all(int fd, const void *buf, size_t n, off_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(fd, p, n < FM_WRITE_CHUNK ? n : FM_WRITE_CHUNK, off); /* pieces: see FM_WRITE_CHUNK */
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
    off += k;
  }
  return 0;
}

static int agree(FmComm *comm, int rc) {
  int32_t r = rc, worst = 0;
  fm_comm_allreduce(comm, &r, &worst, 1, FM_DT_I32, FM_OP_MIN);
  return worst;
}

int fm__bin_write_shard(const char *stem, const FmShardMeta *m, const FmShardPart *part, FmComm *comm, FILE *err) {
  if (!little_endian()) {
    if (err && comm->rank == 0) fprintf(err, "%s: .bin shards are little-endian; this host is not\nhint: use format='h5'\n", stem);
    return FM_EUNSUPPORTED;
  }
  int64_t R = m->seq_len + 1;
  int narr = m->position_ids && strcmp(m->position_ids, "none") != 0 ? 4 : 3;
  const void *bufs[4] = {part->tokens, part->loss_mask, part->segment_ids, part->position_ids};
  size_t plen = strlen(stem) + 64;
  char *path = fm_xmalloc(plen), *partial = fm_xmalloc(plen);
  int rc = 0;
  for (int a = 0; a < narr; a++) {
    snprintf(path, plen, "%s.%s.bin", stem, arrays[a].suffix);
    snprintf(partial, plen, "%s.partial", path);
    if (comm->rank == 0) {
      int fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ftruncate(fd, (off_t)(m->n_seq * R * (int64_t)arrays[a].elem)) != 0) {
        fm_err("%s: cannot create: %s\nhint: check that &prep output is a writable directory", partial,
               strerror(errno));
        rc = FM_EIO;
      }
      if (fd >= 0) close(fd);
    }
    if ((rc = agree(comm, rc))) break;
    int fd = open(partial, O_WRONLY);
    if (fd < 0) rc = FM_EIO;
    const char *src = bufs[a];
    for (int64_t k = 0; fd >= 0 && k < part->nruns && !rc; k++) {
      size_t n = (size_t)(part->run_count[k] * R) * arrays[a].elem;
      if (pwrite_all(fd, src, n, (off_t)(part->run_start[k] * R * (int64_t)arrays[a].elem))) rc = FM_EIO;
      src += n;
    }
    if (fd >= 0 && fsync(fd) != 0) rc = FM_EIO;
    if (fd >= 0) close(fd);
    if (rc) fm_err("%s: write failed: %s", partial, strerror(errno));
    fm__idle_barrier(comm); /* ranks write different numbers of rows */
    if ((rc = agree(comm, rc))) break;
    if (comm->rank == 0 && rename(partial, path) != 0) {
      fm_err("%s: cannot rename to %s: %s", partial, path, strerror(errno));
      rc = FM_EIO;
    }
    if ((rc = agree(comm, rc))) break;
  }
  free(path);
  free(partial);
  return rc;
}

/* ---- reader: mmap ---------------------------------------------------------- */
typedef struct BinReader {
  FmShardReader ops;
  int64_t n_seq, R;
  void *map[4];
  size_t len[4];
} BinReader;

static int bin_read(FmShardReader *base, const int64_t *rows, int64_t n, bool coll, uint32_t *tok, uint8_t *mask,
                    int32_t *pos, int32_t *seg) {
  BinReader *r = (BinReader *)base;
  void *dst[4] = {tok, mask, seg, pos};
  for (int a = 0; a < 4; a++) {
    if (!r->map[a] || !dst[a]) continue;
    size_t row_bytes = (size_t)r->R * arrays[a].elem;
    for (int64_t i = 0; i < n; i++)
      memcpy((char *)dst[a] + (size_t)i * row_bytes, (const char *)r->map[a] + (size_t)rows[i] * row_bytes,
             row_bytes);
  }
  return 0;
}

static void bin_close(FmShardReader *base) {
  BinReader *r = (BinReader *)base;
  for (int a = 0; a < 4; a++)
    if (r->map[a]) munmap(r->map[a], r->len[a]);
  free(r);
}

int fm__bin_shard_open(FmShardReader **out, const char *stem, const FmStoreInfo *info, int64_t n_seq, FILE *err) {
  *out = NULL;
  BinReader *r = fm_xcalloc(1, sizeof *r);
  r->ops.read = bin_read;
  r->ops.close = bin_close;
  r->n_seq = n_seq;
  r->R = info->row_len;
  size_t plen = strlen(stem) + 64;
  char *path = fm_xmalloc(plen);
  int rc = 0;
  if (n_seq < 0 || r->R < 1 || n_seq > INT64_MAX / 8 / r->R) { /* the byte sizes below must not wrap */
    if (err) fprintf(err, "%s: %lld rows of %lld ids are more than a file can hold\n", stem, (long long)n_seq,
                     (long long)r->R);
    rc = FM_EFORMAT;
  }
  for (int a = 0; a < (info->has_position_ids ? 4 : 3) && !rc; a++) {
    snprintf(path, plen, "%s.%s.bin", stem, arrays[a].suffix);
    size_t want = (size_t)(n_seq * r->R) * arrays[a].elem;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      if (err) fprintf(err, "%s: cannot open: %s\nhint: the manifest lists it; was the prep output moved?\n", path,
                       strerror(errno));
      rc = FM_EIO;
    } else if ((size_t)st.st_size != want) {
      if (err)
        fprintf(err, "%s: %lld bytes, the manifest says %lld rows of %lld x %zu bytes = %zu\n", path,
                (long long)st.st_size, (long long)n_seq, (long long)r->R, arrays[a].elem, want);
      rc = FM_EFORMAT;
    } else if (want > 0) {
      r->map[a] = mmap(NULL, want, PROT_READ, MAP_SHARED, fd, 0);
      if (r->map[a] == MAP_FAILED) {
        r->map[a] = NULL;
        if (err) fprintf(err, "%s: mmap failed: %s\n", path, strerror(errno));
        rc = FM_EIO;
      } else {
        r->len[a] = want;
      }
    }
    if (fd >= 0) close(fd);
  }
  free(path);
  if (rc) {
    bin_close(&r->ops);
    return rc;
  }
  *out = &r->ops;
  return 0;
}
