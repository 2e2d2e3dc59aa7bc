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

typedef struct BinWriter {
  FmShardWriter ops;
  FmComm *comm;
  int narr, fd[4];
  int64_t R;
  char *path[4], *partial[4];
} BinWriter;

static int bin_put(FmShardWriter *base, int64_t row, int64_t n, const uint32_t *tok, const uint8_t *mask,
                   const int32_t *seg, const int32_t *pos) {
  BinWriter *w = (BinWriter *)base;
  const void *bufs[4] = {tok, mask, seg, pos};
  for (int a = 0; a < w->narr; a++) {
    size_t e = arrays[a].elem;
    if (pwrite_all(w->fd[a], bufs[a], (size_t)(n * w->R) * e, (off_t)(row * w->R * (int64_t)e))) {
      fm_err("%s: write failed: %s", w->partial[a], strerror(errno));
      return FM_EIO;
    }
  }
  return 0;
}

static void bin_free(BinWriter *w) {
  for (int a = 0; a < 4; a++) {
    if (w->fd[a] >= 0) close(w->fd[a]);
    free(w->path[a]);
    free(w->partial[a]);
  }
  free(w);
}

static int bin_close_shard(FmShardWriter *base, int rc) {
  BinWriter *w = (BinWriter *)base;
  FmComm *comm = w->comm;
  for (int a = 0; a < w->narr; a++) {
    if (fsync(w->fd[a]) != 0 && !rc) {
      fm_err("%s: write failed: %s", w->partial[a], strerror(errno));
      rc = FM_EIO;
    }
    close(w->fd[a]);
    w->fd[a] = -1;
  }
  fm__idle_barrier(comm); /* ranks write different numbers of rows */
  int worst = agree(comm, rc);
  rc = 0;
  for (int a = 0; a < w->narr && comm->rank == 0; a++) {
    if (worst) {
      unlink(w->partial[a]); /* a shard some rank could not fill */
    } else if (!rc && rename(w->partial[a], w->path[a]) != 0) {
      fm_err("%s: cannot rename to %s: %s", w->partial[a], w->path[a], strerror(errno));
      rc = FM_EIO;
    }
  }
  if (!worst) worst = agree(comm, rc);
  bin_free(w);
  return worst;
}

int fm__bin_shard_create(FmShardWriter **out, const char *stem, const FmShardMeta *m, FmComm *comm, FILE *err) {
  *out = NULL;
  if (!little_endian()) {
    if (err && comm->rank == 0) fprintf(err, "%s: .bin shards are little-endian; this host is not\nhint: use format='h5'\n", stem);
    return FM_EUNSUPPORTED;
  }
  BinWriter *w = fm_xcalloc(1, sizeof *w);
  w->ops.put = bin_put;
  w->ops.close = bin_close_shard;
  w->comm = comm;
  w->R = m->seq_len + 1;
  w->narr = m->position_ids && strcmp(m->position_ids, "none") != 0 ? 4 : 3;
  size_t plen = strlen(stem) + 64;
  int rc = 0;
  for (int a = 0; a < 4; a++) w->fd[a] = -1;
  for (int a = 0; a < w->narr && !rc; a++) {
    w->path[a] = fm_xmalloc(plen);
    w->partial[a] = fm_xmalloc(plen);
    snprintf(w->path[a], plen, "%s.%s.bin", stem, arrays[a].suffix);
    snprintf(w->partial[a], plen, "%s.partial", w->path[a]);
    if (comm->rank == 0) {
      int fd = open(w->partial[a], O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ftruncate(fd, (off_t)(m->n_seq * w->R * (int64_t)arrays[a].elem)) != 0) {
        fm_err("%s: cannot create: %s\nhint: check that &prep output is a writable directory", w->partial[a],
               strerror(errno));
        rc = FM_EIO;
      }
      if (fd >= 0) close(fd);
    }
    rc = agree(comm, rc);
  }
  if (!rc) { /* rc is every rank's here */
    for (int a = 0; a < w->narr && !rc; a++) {
      w->fd[a] = open(w->partial[a], O_WRONLY);
      if (w->fd[a] < 0) {
        fm_err("%s: write failed: %s", w->partial[a], strerror(errno));
        rc = FM_EIO;
      }
    }
    rc = agree(comm, rc);
  }
  if (rc) {
    bin_free(w);
    return rc;
  }
  *out = &w->ops;
  return 0;
}

int fm__bin_write_shard(const char *stem, const FmShardMeta *m, const FmShardPart *part, FmComm *comm, FILE *err) {
  FmShardWriter *w;
  int rc = fm__bin_shard_create(&w, stem, m, comm, err);
  return rc ? rc : w->close(w, fm__shard_put_part(w, part, m->seq_len + 1));
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
