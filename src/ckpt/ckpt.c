/* ckpt.c: parallel-HDF5 checkpoints (layout, checksums and commit protocol
 * in include/fmhpc/ckpt.h). Every HDF5 call is checked and its failure
 * returned, never aborted: a full disk must end in a clear message and an
 * intact previous checkpoint. Every status is agreed over all ranks after
 * each collective step (a dataset's creation, its attributes; a flat array's
 * independent data writes once, after all of them), so no rank enters a
 * collective the others have left. The signal flag lives here too; the
 * train loop reduces it (train.c). */
#define _GNU_SOURCE /* fallocate(2): posix_fallocate would emulate it by writing every block */
#include "fmhpc/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fmhpc/data.h" /* fm__idle_barrier */
#include "fmhpc/hash.h"

enum { WHY = 12288 }; /* messages hold two paths */

/* ---- signals ---------------------------------------------------------- */

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

void fm_ckpt_signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}
int fm_ckpt_signal_pending(void) { return g_signal != 0; }
void fm_ckpt_signal_clear(void) { g_signal = 0; }

/* ---- profile ------------------------------------------------------------ */

/* Where the last write's time went (fm_ckpt_last_profile); g_on only while
 * fm_ckpt_write runs, so reads add nothing. */
static FmCkptProfile g_prof;
static int g_on;

static void prof_add(double *field, double t0) {
  if (g_on) *field += fm_now_s() - t0;
}

void fm_ckpt_last_profile(FmCkptProfile *p) { *p = g_prof; }

static double cpu_s(void) {
  struct timespec t;
  return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0 ? (double)t.tv_sec + 1e-9 * (double)t.tv_nsec : 0.0;
}

/* ---- agreement ---------------------------------------------------------- */

/* All ranks agree on a status: the first failing rank's status and message
 * (why) arrive on every rank. */
static int agree(FmComm *c, int rc, char *why) {
  int32_t mine = rc ? c->rank : c->size, first = 0;
  const double t0 = fm_now_s();
  fm_comm_allreduce(c, &mine, &first, 1, FM_DT_I32, FM_OP_MIN);
  prof_add(&g_prof.agree, t0);
  if (first == c->size) return 0;
  int32_t st = rc;
  fm_comm_bcast(c, &st, 1, FM_DT_I32, first);
  char *msg = c->rank == first ? why : NULL;
  fm_comm_bcast_str(c, &msg, first);
  if (c->rank != first) {
    snprintf(why, WHY, "%s", msg ? msg : "(no message)");
    free(msg);
  }
  return st;
}

/* ---- checksums ---------------------------------------------------------- */

_Static_assert(FM_DIST_BLOCK == FM_SHA_PIECE, "shards align to checksum pieces (sha256-blocks-v1)");

/* Pieces of the flat range [a, b) cut at multiples of FM_DIST_BLOCK. */
static int64_t npieces(int64_t a, int64_t b) { return b > a ? (b - 1) / FM_DIST_BLOCK - a / FM_DIST_BLOCK + 1 : 0; }

/* The digest table of one flat array: tensor i's pieces take the slots
 * slot[i] .. slot[i+1]-1 (32 bytes each), in element order. */
typedef struct Digests {
  int64_t *slot; /* (n + 1) */
  uint8_t *d;    /* (slot[n], 32), zeroed */
} Digests;

static Digests digests_new(const FmTensorTable *tab) {
  Digests g = {fm_xmalloc(sizeof(int64_t) * (size_t)(tab->n + 1)), NULL};
  g.slot[0] = 0;
  for (int i = 0; i < tab->n; i++)
    g.slot[i + 1] = g.slot[i] + npieces(tab->t[i].offset, tab->t[i].offset + tab->t[i].numel);
  g.d = fm_xcalloc((size_t)(g.slot[tab->n] > 0 ? g.slot[tab->n] : 1), 32);
  return g;
}

static void digests_free(Digests *g) {
  free(g->slot);
  free(g->d);
}

/* The digests of k <= 4 pieces, side by side (fm_sha256_update_multi). */
static void hash_batch(const void *const m[], const size_t n[], uint8_t *const out[], int k) {
  FmSha256 s[4];
  FmSha256 *const ctx[4] = {&s[0], &s[1], &s[2], &s[3]};
  for (int j = 0; j < k; j++) fm_sha256_init(&s[j]);
  fm_sha256_update_multi(ctx, m, n, k);
  for (int j = 0; j < k; j++) fm_sha256_final(&s[j], out[j]);
}

/* Hash tensor i's pieces that lie whole in the flat range [x, y) (base =
 * element lo) into their slots, four at a time (hash_batch; the lengths may
 * differ: a tensor's first and last pieces are shorter). */
static void hash_pieces(const FmTensorTable *tab, int i, Digests *g, const float *base, int64_t lo, int64_t x,
                        int64_t y) {
  const int64_t a = tab->t[i].offset, b = a + tab->t[i].numel;
  const void *m[4] = {NULL};
  size_t n[4] = {0};
  uint8_t *out[4] = {NULL};
  int held = 0; /* pieces waiting for the batch to fill */
  for (int64_t blk = x / FM_DIST_BLOCK; y > x && blk <= (y - 1) / FM_DIST_BLOCK; blk++) {
    const int64_t ps = blk * FM_DIST_BLOCK > a ? blk * FM_DIST_BLOCK : a;
    const int64_t pe = (blk + 1) * FM_DIST_BLOCK < b ? (blk + 1) * FM_DIST_BLOCK : b;
    const int64_t k = g->slot[i] + blk - a / FM_DIST_BLOCK;
    if (ps < x || pe > y) continue; /* partly outside: another rank's or another call's */
    m[held] = base + (ps - lo), n[held] = (size_t)(pe - ps) * sizeof(float), out[held] = g->d + 32 * k;
    if (++held == 4) hash_batch(m, n, out, held), held = 0;
  }
  if (held) hash_batch(m, n, out, held);
}

/* The pieces' digests from every rank (zeros elsewhere: bitwise OR) and each
 * tensor's checksum, the SHA-256 of its pieces' digests. hex: (n, 65). */
static int digests_combine(const FmTensorTable *tab, Digests *g, FmComm *c, char (*hex)[65]) {
  int rc = fm_comm_allreduce(c, g->d, g->d, g->slot[tab->n] * 32, FM_DT_U8, FM_OP_BOR);
  for (int i = 0; i < tab->n; i++) {
    uint8_t out[32];
    fm_sha256(g->d + 32 * g->slot[i], (size_t)(32 * (g->slot[i + 1] - g->slot[i])), out);
    fm_hex(out, 32, hex[i]);
  }
  return rc ? FM_EMPI : 0;
}

/* Every piece of the flat array that lies whole in this rank's [lo, hi)
 * (base = element lo), hashed into g. */
static void hash_range(const FmTensorTable *tab, Digests *g, const float *base, int64_t lo, int64_t hi) {
  for (int i = 0; i < tab->n; i++) {
    const int64_t a = tab->t[i].offset, b = a + tab->t[i].numel;
    hash_pieces(tab, i, g, base, lo, a > lo ? a : lo, b < hi ? b : hi);
  }
}

/* The checksums of the tensors of one flat array (params or one optimizer
 * state) from the shard [lo, hi) each rank holds (base = element lo): each rank
 * hashes its pieces into a zeroed table, the table is OR-reduced, and each
 * tensor's checksum is the SHA-256 of its pieces' digests. hex: (n, 65). */
static int array_digests(const FmTensorTable *tab, const float *base, int64_t lo, int64_t hi, FmComm *c,
                         char (*hex)[65]) {
  Digests g = digests_new(tab);
  hash_range(tab, &g, base, lo, hi);
  const int rc = digests_combine(tab, &g, c, hex);
  digests_free(&g);
  return rc;
}

/* The same for a small array every rank holds whole (n elements of esize). */
static void local_digest(const void *data, int64_t n, size_t esize, char hex[65]) {
  FmShaPieces p;
  fm_sha_pieces_init(&p, esize);
  fm_sha_pieces_update(&p, data, n);
  fm_sha_pieces_final(&p, hex);
}

/* ---- HDF5 helpers (0 or FM_EHDF5; nothing aborts) ------------------------ */

static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *val) {
  hid_t sp = H5Screate(H5S_SCALAR);
  if (sp < 0) return FM_EHDF5;
  hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  int ok = a >= 0 && H5Awrite(a, mtype, val) >= 0;
  if (a >= 0 && H5Aclose(a) < 0) ok = 0;
  H5Sclose(sp);
  return ok ? 0 : FM_EHDF5;
}
static int attr_i64(hid_t obj, const char *name, int64_t v) {
  return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
static int attr_f64(hid_t obj, const char *name, double v) {
  return attr_write(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
static int attr_str(hid_t obj, const char *name, const char *val) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return FM_EHDF5;
  int rc = H5Tset_size(t, strlen(val) + 1) < 0 ? FM_EHDF5 : attr_write(obj, name, t, t, val);
  H5Tclose(t);
  return rc;
}
/* A variable-length string: the text lives in the file's global heap, not in
 * the object header, so it has no 64 KiB limit (the whole resolved deck). */
static int attr_vlstr(hid_t obj, const char *name, const char *val) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return FM_EHDF5;
  int rc = H5Tset_size(t, H5T_VARIABLE) < 0 ? FM_EHDF5 : attr_write(obj, name, t, t, &val);
  H5Tclose(t);
  return rc;
}
/* A numeric attribute holds one value of the class read (an array, a string
 * or a float read as an integer would overrun v or be converted silently). */
static int attr_is_scalar(hid_t a, int float_ok) {
  hid_t sp = H5Aget_space(a), t = H5Aget_type(a);
  H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  int ok = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1 && (c == H5T_INTEGER || (float_ok && c == H5T_FLOAT));
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  return ok;
}
static int attr_read_i64(hid_t obj, const char *name, int64_t *v) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return FM_ECKPT;
  int rc = !attr_is_scalar(a, 0) || H5Aread(a, H5T_NATIVE_INT64, v) < 0 ? FM_ECKPT : 0;
  H5Aclose(a);
  return rc;
}
static int attr_read_f64(hid_t obj, const char *name, double *v) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return FM_ECKPT;
  int rc = !attr_is_scalar(a, 1) || H5Aread(a, H5T_NATIVE_DOUBLE, v) < 0 ? FM_ECKPT : 0;
  H5Aclose(a);
  return rc;
}
/* A string attribute into buf (truncated to n-1). */
static int attr_read_str(hid_t obj, const char *name, char *buf, size_t n) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return FM_ECKPT;
  hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
  size_t sz = ft >= 0 ? H5Tget_size(ft) : 0;
  int rc = FM_ECKPT;
  if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) sz = 0; /* an array of strings would overrun tmp */
  if (sp >= 0) H5Sclose(sp);
  if (sz > 0 && H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) > 0) {
    /* variable-length (h5py's default for str): HDF5 allocates the string */
    char *v = NULL;
    hid_t mt = H5Tcopy(ft);
    if (mt >= 0 && H5Aread(a, mt, &v) >= 0 && v) {
      snprintf(buf, n, "%s", v);
      rc = 0;
    }
    if (v) H5free_memory(v);
    if (mt >= 0) H5Tclose(mt);
  } else if (sz > 0 && H5Tget_class(ft) == H5T_STRING) {
    char *tmp = fm_xcalloc(sz + 1, 1);
    hid_t mt = H5Tcopy(ft);
    if (mt >= 0 && H5Aread(a, mt, tmp) >= 0) {
      snprintf(buf, n, "%s", tmp);
      rc = 0;
    }
    if (mt >= 0) H5Tclose(mt);
    free(tmp);
  }
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return rc;
}

/* A string attribute, malloc'd; NULL if absent or not one string. fmhpc
 * writes an ASCII variable-length string (attr_vlstr); other writers' forms
 * are read too: h5py's default for str is variable-length UTF-8, and
 * numpy bytes are fixed-length (HDF5 does not convert between character
 * sets, so the memory type takes the file's). */
static char *attr_read_vlstr(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) return NULL;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return NULL;
  hid_t ft = H5Aget_type(a), t = ft >= 0 ? H5Tcopy(ft) : -1, sp = H5Aget_space(a);
  char *out = NULL;
  int one = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1; /* an array would overrun v */
  if (sp >= 0) H5Sclose(sp);
  if (one && t >= 0 && H5Tget_class(ft) == H5T_STRING) {
    if (H5Tis_variable_str(ft) > 0) {
      char *v = NULL;
      if (H5Aread(a, t, &v) >= 0 && v) out = fm_xstrdup(v);
      if (v) H5free_memory(v);
    } else {
      const size_t sz = H5Tget_size(ft);
      char *v = sz > 0 ? fm_xcalloc(sz + 1, 1) : NULL;
      if (v && H5Aread(a, t, v) >= 0)
        out = v; /* NUL-terminated by the extra byte */
      else
        free(v);
    }
  }
  if (t >= 0) H5Tclose(t);
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return out;
}

/* Select the elements [x, y) (row-major order) of a dataspace of `shape` as a
 * union of at most 2*ndim hyperslabs: the largest aligned sub-block first. */
static int select_flat(hid_t sp, int ndim, const hsize_t *shape, int64_t x, int64_t y) {
  if (ndim < 1 || ndim > FM_MAX_DIMS || H5Sselect_none(sp) < 0) return FM_EHDF5;
  int64_t st[FM_MAX_DIMS];
  st[ndim - 1] = 1;
  for (int d = ndim - 2; d >= 0; d--) st[d] = st[d + 1] * (int64_t)shape[d + 1];
  while (x < y) {
    int d = 0;
    while (d < ndim - 1 && !(x % st[d] == 0 && x + st[d] <= y)) d++;
    hsize_t start[FM_MAX_DIMS] = {0}, count[FM_MAX_DIMS] = {0};
    int64_t rem = x;
    for (int q = 0; q < ndim; q++) {
      start[q] = (hsize_t)(rem / st[q]);
      rem %= st[q];
      count[q] = q < d ? 1 : shape[q];
    }
    int64_t k = (y - x) / st[d];
    const int64_t room = (int64_t)(shape[d] - start[d]);
    k = k < room ? k : room;
    count[d] = (hsize_t)k;
    if (H5Sselect_hyperslab(sp, H5S_SELECT_OR, start, NULL, count, NULL) < 0) return FM_EHDF5;
    x += k * st[d];
  }
  return 0;
}

typedef struct H5 {
  hid_t f, dxpl; /* dxpl: collective transfers */
  int fd;        /* write: the file once more, for writeback hints (-1: none) */
  FmComm *comm;
  const char *path;
  char why[WHY];
} H5;

/* Create dataset `name` (collective): contiguous, its whole extent allocated
 * at creation (so it has its file offset before any write), never filled.
 * Intermediate groups are created. -1 with h->why on failure. */
static hid_t dset_create(H5 *h, const char *name, hid_t fsp, hid_t ftype) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE), d = -1;
  if (dcpl >= 0 && lcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0 &&
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0 && H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 &&
      H5Pset_create_intermediate_group(lcpl, 1) >= 0)
    d = H5Dcreate2(h->f, name, ftype, fsp, lcpl, dcpl, H5P_DEFAULT);
  if (d < 0) snprintf(h->why, WHY, "%s: cannot create dataset %s", h->path, name);
  if (lcpl >= 0) H5Pclose(lcpl);
  if (dcpl >= 0) H5Pclose(dcpl);
  return d;
}

/* Write or read (rw 'w'/'r') this rank's part [x, y) of one tensor-shaped
 * dataset, collectively. buf holds elements x..y-1. ftype used on create. */
static int dset_io(H5 *h, int rw, const char *name, int ndim, const int64_t *shape64, hid_t ftype, hid_t mtype,
                   int64_t x, int64_t y, void *buf, const char *sha_hex, char *stored_hex, int64_t flat_off) {
  hsize_t shape[FM_MAX_DIMS];
  for (int d = 0; d < ndim; d++) shape[d] = (hsize_t)shape64[d];
  hid_t fsp = -1, msp = -1, d = -1;
  int rc = FM_EHDF5;
  double t0 = fm_now_s();
  if (rw == 'w') {
    fsp = H5Screate_simple(ndim, shape, NULL);
    d = fsp < 0 ? -1 : dset_create(h, name, fsp, ftype);
    if (d < 0) goto done;
  } else {
    d = H5Dopen2(h->f, name, H5P_DEFAULT);
    if (d < 0) {
      snprintf(h->why, WHY, "%s: dataset %s is missing", h->path, name);
      rc = FM_ECKPT;
      goto done;
    }
    fsp = H5Dget_space(d);
    hsize_t got[FM_MAX_DIMS + 4];
    int nd = fsp >= 0 ? H5Sget_simple_extent_ndims(fsp) : -1;
    int same = nd == ndim && nd <= FM_MAX_DIMS && H5Sget_simple_extent_dims(fsp, got, NULL) == nd;
    for (int q = 0; same && q < nd; q++) same = got[q] == shape[q];
    if (!same) {
      snprintf(h->why, WHY,
               "%s: dataset %s does not have the model's shape (%lld elements in %d dims expected): "
               "the checkpoint is from a different model or deck",
               h->path, name, (long long)(y > x ? y : x), ndim);
      rc = FM_ECKPT;
      goto done;
    }
    if (attr_read_str(d, "sha256", stored_hex, 65)) {
      snprintf(h->why, WHY, "%s: dataset %s has no sha256 attribute", h->path, name);
      rc = FM_ECKPT;
      goto done;
    }
  }
  if (fsp < 0 || select_flat(fsp, ndim, shape, x, y)) goto done;
  hsize_t mdim = (hsize_t)(y > x ? y - x : 1);
  msp = H5Screate_simple(1, &mdim, NULL);
  if (msp < 0 || (y <= x && H5Sselect_none(msp) < 0)) goto done;
  prof_add(&g_prof.dset_meta, t0);
  t0 = fm_now_s();
  herr_t e = rw == 'w' ? H5Dwrite(d, mtype, msp, fsp, h->dxpl, buf) : H5Dread(d, mtype, msp, fsp, h->dxpl, buf);
  prof_add(&g_prof.dset_write, t0);
  t0 = fm_now_s();
  if (e < 0) {
    snprintf(h->why, WHY, "%s: cannot %s dataset %s%s", h->path, rw == 'w' ? "write" : "read", name,
             rw == 'w' ? " (disk full or quota exceeded?)" : "");
    rc = rw == 'w' ? FM_EIO : FM_ECKPT;
    goto done;
  }
  rc = 0;
  if (rw == 'w' && (attr_str(d, "sha256", sha_hex) || attr_i64(d, "flat_offset", flat_off))) {
    snprintf(h->why, WHY, "%s: cannot write the sha256 attribute of %s", h->path, name);
    rc = FM_EHDF5;
  }
done:
  if (rc && !h->why[0]) snprintf(h->why, WHY, "%s: HDF5 error on dataset %s", h->path, name);
  if (msp >= 0) H5Sclose(msp);
  if (fsp >= 0) H5Sclose(fsp);
  if (d >= 0 && H5Dclose(d) < 0 && !rc) rc = FM_EHDF5;
  prof_add(&g_prof.dset_meta, t0);
  return rc;
}

/* Pieces per write of array_write: 4 (1 MiB of fp32), each write's
 * writeback started at once (writeback_start); 1 MiB is what dd bs=1M
 * writes: on Linux 6.18 (ext4, a KVM guest) a write of 2 MiB or more took
 * 4-6x the time of the same bytes in 1 MiB writes (measured with pwrite
 * alone: 1.4 GB in 6.3 s against 1.0 s), the large page-cache folios the
 * kernel then allocates being the difference. */
enum { WRITE_PIECES = 4 };

/* Start the disk's writeback of file bytes [off, off + n) now rather than
 * at the commit's fsync (which then waits only for the last of them): a
 * hint, whose failure changes nothing (the fsync is what makes it durable). */
static void writeback_start(const H5 *h, haddr_t off, int64_t n) {
#ifdef SYNC_FILE_RANGE_WRITE
  if (h->fd >= 0 && off != HADDR_UNDEF) (void)sync_file_range(h->fd, (off64_t)off, (off64_t)n, SYNC_FILE_RANGE_WRITE);
#else
  (void)h, (void)off, (void)n;
#endif
}

/* This rank's part [x, y) of tensor t (base = element lo) into its open
 * dataset d, with independent transfers (the part is one contiguous run of
 * the file). 0 or FM_EIO. */
static int part_write(H5 *h, const char *group, hid_t d, const FmTensorTable *tab, int i, const float *base, int64_t lo,
                      int64_t x, int64_t y) {
  const FmTensor *t = &tab->t[i];
  hsize_t shape[FM_MAX_DIMS];
  for (int q = 0; q < t->ndim; q++) shape[q] = (hsize_t)t->shape[q];
  const haddr_t off = H5Dget_offset(d); /* contiguous and allocated at creation */
  int rc = 0;
  for (int64_t cx = x, cy; cx < y && !rc; cx = cy) {
    cy = (cx / FM_DIST_BLOCK + WRITE_PIECES) * FM_DIST_BLOCK; /* piece-aligned: no piece straddles two writes */
    cy = cy < y ? cy : y;
    const hsize_t m = (hsize_t)(cy - cx);
    hid_t fsp = H5Screate_simple(t->ndim, shape, NULL), msp = H5Screate_simple(1, &m, NULL);
    double t0 = fm_now_s();
    rc = fsp < 0 || msp < 0 || select_flat(fsp, t->ndim, shape, cx - t->offset, cy - t->offset) ||
                 H5Dwrite(d, H5T_NATIVE_FLOAT, msp, fsp, H5P_DEFAULT, base + (cx - lo)) < 0
             ? FM_EIO
             : 0;
    if (!rc) writeback_start(h, off + (haddr_t)(cx - t->offset) * sizeof(float), (cy - cx) * (int64_t)sizeof(float));
    prof_add(&g_prof.dset_write, t0);
    if (msp >= 0) H5Sclose(msp);
    if (fsp >= 0) H5Sclose(fsp);
  }
  if (rc)
    snprintf(h->why, WHY, "%s: cannot write dataset %s/%s (disk full or quota exceeded?)", h->path, group, t->name);
  return rc;
}

typedef struct Flush {
  int fd, err; /* err: fdatasync's errno, 0 when it succeeded */
} Flush;

static void *flush_run(void *arg) {
  Flush *f = arg;
  int r;
  while ((r = fdatasync(f->fd)) != 0 && errno == EINTR) continue;
  f->err = r ? errno : 0;
  return NULL;
}

/* This rank's pieces of the array just written (base = element lo, its
 * shard [lo, hi)) hashed from memory, while a thread flushes the file
 * (fdatasync on the rank's own descriptor; the data only, the commit's fsync
 * comes after). The writes only started the disk's writeback
 * (writeback_start), which in this KVM guest then lags: hashed piece by piece
 * after each write, 0.6 s of the 1.5 GB (GPT-2 124M + AdamW, 2 ranks) were
 * still to write at the commit's fsync, and the whole write took 1.36-1.52 s;
 * flushed while the rank hashes, 1.08-1.28 s, beside dd conv=fsync's
 * 1.03-1.15 s (bench/ckpt, best of 4, four rounds side by side; at 1 rank
 * 1.39-1.51 s against 0.93-1.08 s). A failed flush fails the write (its error
 * is then this descriptor's to report: the commit's fsync might not see it). */
static int hash_flushing(H5 *h, const char *group, const FmTensorTable *tab, Digests *g, const float *base, int64_t lo,
                         int64_t hi) {
  Flush f = {h->fd, 0};
  pthread_t th;
  const int flushing = h->fd >= 0 && pthread_create(&th, NULL, flush_run, &f) == 0; /* else the commit's fsync */
  double t0 = fm_now_s();
  hash_range(tab, g, base, lo, hi);
  prof_add(&g_prof.hash, t0);
  t0 = fm_now_s();
  if (flushing) pthread_join(th, NULL);
  prof_add(&g_prof.flush, t0);
  if (!f.err) return 0;
  snprintf(h->why, WHY, "%s: cannot flush %s to disk: %s (disk full, quota exceeded or an I/O error?)", h->path, group,
           strerror(f.err));
  return FM_EIO;
}

/* One flat array written as per-tensor datasets "<group>/<name>": every
 * dataset created (collective metadata, agreed one by one), then each rank
 * writes its shard's parts independently (no collective in between, so the
 * ranks' writes overlap instead of taking turns dataset by dataset) and
 * hashes them while the file is flushed (hash_flushing), one agreement, the
 * digests combined, and the sha256 attributes written (collective). */
static int array_write(H5 *h, const char *group, const FmTensorTable *tab, const float *base, int64_t lo, int64_t hi) {
  hid_t *ds = fm_xmalloc(sizeof *ds * (size_t)(tab->n > 0 ? tab->n : 1));
  char(*hex)[65] = fm_xcalloc((size_t)(tab->n > 0 ? tab->n : 1), sizeof *hex);
  Digests g = digests_new(tab);
  int rc = 0, nopen = 0;
  double t0 = fm_now_s();
  for (; nopen < tab->n && !rc; nopen++) {
    const FmTensor *t = &tab->t[nopen];
    hsize_t shape[FM_MAX_DIMS];
    for (int q = 0; q < t->ndim; q++) shape[q] = (hsize_t)t->shape[q];
    char name[160];
    snprintf(name, sizeof name, "%s/%s", group, t->name);
    h->why[0] = '\0';
    hid_t fsp = H5Screate_simple(t->ndim, shape, NULL);
    ds[nopen] = fsp < 0 ? -1 : dset_create(h, name, fsp, H5T_IEEE_F32LE);
    if (fsp >= 0) H5Sclose(fsp);
    rc = ds[nopen] < 0 || attr_i64(ds[nopen], "flat_offset", t->offset) ? FM_EHDF5 : 0;
    if (rc && !h->why[0]) snprintf(h->why, WHY, "%s: cannot create dataset %s", h->path, name);
    rc = agree(h->comm, rc, h->why); /* agreed: every rank leaves the loop after the same dataset, so the
                                         closes below are the same set (a failed create is ds < 0, skipped) */
  }
  prof_add(&g_prof.dset_meta, t0);
  for (int i = 0; i < tab->n && !rc; i++) {
    const int64_t a = tab->t[i].offset, b = a + tab->t[i].numel;
    const int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    if (y > x) rc = part_write(h, group, ds[i], tab, i, base, lo, x, y);
  }
  if (!rc) rc = hash_flushing(h, group, tab, &g, base, lo, hi);
  fm__idle_barrier(h->comm); /* the ranks finish unevenly: the first waits asleep, not polling a core away */
  rc = agree(h->comm, rc, h->why);
  if (!rc) {
    t0 = fm_now_s();
    rc = agree(h->comm, digests_combine(tab, &g, h->comm, hex), h->why);
    prof_add(&g_prof.hash, t0);
  }
  t0 = fm_now_s();
  for (int i = 0; i < tab->n && !rc; i++) {
    rc = attr_str(ds[i], "sha256", hex[i]);
    if (rc) snprintf(h->why, WHY, "%s: cannot write the sha256 attribute of %s/%s", h->path, group, tab->t[i].name);
    rc = agree(h->comm, rc, h->why);
  }
  for (int i = 0; i < nopen; i++) /* collective: every rank opened the same ones */
    if (ds[i] >= 0 && H5Dclose(ds[i]) < 0 && !rc) rc = FM_EHDF5;
  prof_add(&g_prof.dset_meta, t0);
  if (rc && !h->why[0]) snprintf(h->why, WHY, "%s: HDF5 error closing the datasets of %s", h->path, group);
  digests_free(&g);
  free(hex);
  free(ds);
  return agree(h->comm, rc, h->why);
}

/* One flat array (params or a state) as per-tensor datasets "<group>/<name>". */
static int array_io(H5 *h, int rw, const char *group, const FmTensorTable *tab, float *base, int64_t lo, int64_t hi) {
  if (rw == 'w') return array_write(h, group, tab, base, lo, hi);
  char(*hex)[65] = fm_xcalloc((size_t)(tab->n > 0 ? tab->n : 1), sizeof *hex);
  int rc = 0;
  char(*stored)[65] = fm_xcalloc((size_t)(tab->n > 0 ? tab->n : 1), sizeof *stored);
  for (int i = 0; i < tab->n && !rc; i++) {
    const FmTensor *t = &tab->t[i];
    const int64_t a = t->offset, b = a + t->numel;
    const int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    char name[160];
    snprintf(name, sizeof name, "%s/%s", group, t->name);
    h->why[0] = '\0';
    rc = dset_io(h, rw, name, t->ndim, t->shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x - a, y > x ? y - a : x - a,
                 y > x ? base + (x - lo) : base, hex[i], stored[i], a);
    rc = agree(h->comm, rc, h->why);
  }
  if (rw == 'r' && !rc) {
    rc = agree(h->comm, array_digests(tab, base, lo, hi, h->comm, hex), h->why);
    for (int i = 0; i < tab->n && !rc; i++) {
      if (strcmp(hex[i], stored[i]) == 0) continue;
      snprintf(h->why, WHY,
               "%s: dataset %s/%s: SHA-256 mismatch (stored %.16s..., computed %.16s...): the file is corrupt", h->path,
               group, tab->t[i].name, stored[i], hex[i]);
      rc = FM_ECKPT;
    }
  }
  free(hex);
  free(stored);
  return rc;
}

/* A small array every rank holds whole: rank 0 writes it, every rank reads
 * and checks it. */
static int small_io(H5 *h, int rw, const char *name, void *data, int64_t n, int is_f64) {
  char hex[65], stored[65] = "";
  local_digest(data, n, is_f64 ? 8 : 4, hex);
  const int64_t shape[1] = {n};
  const int me = rw == 'r' || h->comm->rank == 0;
  h->why[0] = '\0';
  int rc = dset_io(h, rw, name, 1, shape, is_f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE,
                   is_f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, 0, me ? n : 0, data, hex, stored, 0);
  if (!rc && rw == 'r') {
    local_digest(data, n, is_f64 ? 8 : 4, hex);
    if (strcmp(hex, stored) != 0) {
      snprintf(h->why, WHY,
               "%s: dataset %s: SHA-256 mismatch (stored %.16s..., computed %.16s...): the file is corrupt", h->path,
               name, stored, hex);
      rc = FM_ECKPT;
    }
  }
  return agree(h->comm, rc, h->why);
}

static hid_t open_fapl(FmComm *c) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  if (H5Pset_fapl_mpio(fapl, c->mpi, MPI_INFO_NULL) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
      H5Pset_coll_metadata_write(fapl, 1) < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

/* ---- run state ---------------------------------------------------------- */

static char *cpu_model(void) {
  char *text = NULL;
  if (fm_read_file("/proc/cpuinfo", &text, NULL) == 0) {
    char *p = strstr(text, "model name");
    char *colon = p ? strchr(p, ':') : NULL;
    if (colon) {
      char *eol = strchr(colon, '\n');
      char *s = fm_xstrndup(colon + 2, eol ? (size_t)(eol - colon - 2) : strlen(colon + 2));
      free(text);
      return s;
    }
  }
  free(text);
  return fm_xstrdup("unknown");
}

/* The exact reduction's block count (its scales' dataset), 0 without one. */
static int64_t ckpt_nblocks(const FmCkptState *s) {
  const FmDistEntry *e = fm_dist_state_find(&s->dist, "reduce/amax_prev");
  return e ? e->n : 0;
}

/* The layout this fmhpc writes and reads; a file of another version (a
 * newer fmhpc's) is refused by name, not read as this one. A file without
 * the attribute is read as version 1. */
#define FM_CKPT_FORMAT_VERSION 1
#define VERSION_WHY                                                                                                 \
  "%s: format_version %lld: this fmhpc reads checkpoint format version %d (a checkpoint of another fmhpc version: " \
  "resume or load it with that one)"

static int write_run_state(H5 *h, const FmCkptState *s) {
  char *host = NULL, *cpu = NULL, *mpiv = NULL;
  if (h->comm->rank == 0) {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(buf, &len);
    char *nl = strchr(buf, '\n');
    if (nl) *nl = '\0';
    mpiv = fm_xstrdup(buf);
    char hn[256] = "unknown";
    gethostname(hn, sizeof hn - 1);
    host = fm_xstrdup(hn);
    cpu = cpu_model();
  }
  /* attributes must hold the same value on every rank: rank 0's */
  fm_comm_bcast_str(h->comm, &host, 0);
  fm_comm_bcast_str(h->comm, &cpu, 0);
  fm_comm_bcast_str(h->comm, &mpiv, 0);
  char *plans = h->comm->rank == 0 && s->gemm_plans && s->gemm_plans[0] ? fm_xstrdup(s->gemm_plans) : NULL;
  fm_comm_bcast_str(h->comm, &plans, 0); /* one value on every rank (a NULL stays NULL everywhere) */
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  char h5v[64];
  snprintf(h5v, sizeof h5v, "%u.%u.%u (parallel)", maj, min, rel);
  hid_t root = H5Gopen2(h->f, "/", H5P_DEFAULT);
  int rc = root < 0 ? FM_EHDF5 : 0;
  const FmSpike *sp = s->spike;
  if (!rc)
    rc = attr_str(root, "format", "fmhpc-ckpt") | attr_i64(root, "format_version", FM_CKPT_FORMAT_VERSION) |
         attr_str(root, "checksum_scheme",
                  "sha256-blocks-v1: SHA-256 of the SHA-256 digests of the pieces cut at "
                  "multiples of 65536 elements of the flat parameter vector (of the "
                  "dataset for /reduce, /spike), little-endian bytes") |
         attr_i64(root, "step", s->step) | attr_i64(root, "samples", s->samples) | attr_i64(root, "seed", s->seed) |
         attr_str(root, "rng", "counter-based (seed, purpose, step, index): no state beyond seed and step") |
         attr_i64(root, "skipped", s->skipped) | attr_i64(root, "redone", s->redone) |
         attr_i64(root, "spike_window", sp->window) | attr_i64(root, "spike_count", sp->count) |
         attr_i64(root, "spike_head", sp->head) | attr_i64(root, "spike_skipped", sp->skipped) |
         attr_i64(root, "spike_consecutive", sp->consecutive) | attr_f64(root, "spike_z_max", sp->z_max) |
         attr_str(root, "optimizer", s->optim_name) | attr_str(root, "model", s->model_name) |
         attr_str(root, "run_name", s->run_name ? s->run_name : "") | attr_str(root, "run_id", s->run_id) |
         attr_i64(root, "n_params", s->dist.params->numel) | attr_i64(root, "world_size", h->comm->size) |
         attr_i64(root, "nblocks", ckpt_nblocks(s)) | attr_str(root, "fmhpc_version", FM_VERSION_STRING) |
         attr_str(root, "git", FMHPC_GIT_REV) | attr_str(root, "hdf5_version", h5v) |
         attr_str(root, "mpi_version", mpiv) | attr_str(root, "host", host) | attr_str(root, "cpu", cpu) |
         attr_vlstr(root, "deck", s->deck_text);
  if (!rc && plans) rc = attr_vlstr(root, "gemm_plans", plans);
  if (root >= 0) H5Gclose(root);
  free(plans);
  free(host);
  free(cpu);
  free(mpiv);
  if (rc) {
    snprintf(h->why, WHY, "%s: cannot write the run-state attributes", h->path);
    rc = FM_EHDF5;
  }
  return agree(h->comm, rc, h->why);
}

/* The counters a resume indexes or loops with, each in its range: the file's
 * checksums cover the datasets, not these attributes, so a damaged or edited
 * value must stop here (a spike_head past the window wrote out of bounds; a
 * negative sample count never ended the sampler's walk). 1, or 0 with why. */
static int run_state_in_range(H5 *h, const FmCkptState *s) {
  const FmSpike *sp = s->spike;
  const int64_t big = (int64_t)1 << 62;
  const struct {
    const char *name;
    int64_t v, lo, hi;
  } a[] = {{"step", s->step, 0, big},
           {"samples", s->samples, 0, big},
           {"skipped", s->skipped, 0, big},
           {"redone", s->redone, 0, big},
           {"spike_count", sp->count, 0, big},
           {"spike_head", sp->head, 0, sp->window > 0 ? sp->window - 1 : 0},
           {"spike_skipped", sp->skipped, 0, big},
           {"spike_consecutive", sp->consecutive, 0, big}};
  for (size_t i = 0; i < sizeof a / sizeof *a; i++)
    if (a[i].v < a[i].lo || a[i].v > a[i].hi) {
      snprintf(h->why, WHY,
               "%s: run-state attribute %s = %lld is outside [%lld, %lld]: the file is damaged or was edited "
               "(its checksums cover the datasets, not these attributes)",
               h->path, a[i].name, (long long)a[i].v, (long long)a[i].lo, (long long)a[i].hi);
      return 0;
    }
  return 1;
}

static int read_run_state(H5 *h, FmCkptState *s) {
  hid_t root = H5Gopen2(h->f, "/", H5P_DEFAULT);
  char fmt[32] = "", opt[64] = "";
  int64_t np = -1, window = -1, nb = -1, version = 1;
  FmSpike *sp = s->spike;
  int rc = root < 0 ? FM_ECKPT : 0;
  if (!rc)
    rc = attr_read_str(root, "format", fmt, sizeof fmt) | attr_read_str(root, "optimizer", opt, sizeof opt) |
         attr_read_i64(root, "n_params", &np) | attr_read_i64(root, "spike_window", &window) |
         attr_read_i64(root, "nblocks", &nb) | attr_read_i64(root, "step", &s->step) |
         attr_read_i64(root, "samples", &s->samples) | attr_read_i64(root, "seed", &s->seed) |
         attr_read_i64(root, "skipped", &s->skipped) | attr_read_i64(root, "redone", &s->redone) |
         attr_read_i64(root, "spike_count", &sp->count) | attr_read_i64(root, "spike_head", &sp->head) |
         attr_read_i64(root, "spike_skipped", &sp->skipped) |
         attr_read_i64(root, "spike_consecutive", &sp->consecutive) | attr_read_f64(root, "spike_z_max", &sp->z_max);
  if (!rc && H5Aexists(root, "format_version") > 0) rc = attr_read_i64(root, "format_version", &version);
  s->run_id[0] = '\0'; /* absent before run ids */
  if (!rc && H5Aexists(root, "run_id") > 0) rc = attr_read_str(root, "run_id", s->run_id, sizeof s->run_id);
  free(s->deck_read);
  s->deck_read = root >= 0 ? attr_read_vlstr(root, "deck") : NULL;
  free(s->gemm_plans_read);
  s->gemm_plans_read = root >= 0 ? attr_read_vlstr(root, "gemm_plans") : NULL;
  if (root >= 0) H5Gclose(root);
  if (rc || strcmp(fmt, "fmhpc-ckpt") != 0)
    snprintf(h->why, WHY, "%s: not an fmhpc checkpoint or its run-state attributes are unreadable", h->path);
  else if (version != FM_CKPT_FORMAT_VERSION)
    snprintf(h->why, WHY, VERSION_WHY, h->path, (long long)version, FM_CKPT_FORMAT_VERSION);
  else if (np != s->dist.params->numel)
    snprintf(h->why, WHY, "%s: holds %lld parameters, the model has %lld: the checkpoint is from a different model",
             h->path, (long long)np, (long long)s->dist.params->numel);
  else if (nb != ckpt_nblocks(s) && (nb == 0) != (ckpt_nblocks(s) == 0))
    snprintf(h->why, WHY,
             "%s: attribute nblocks = %lld, but this run's exact reduction has %lld blocks of scales (0: none, as "
             "determinism = 'fast' writes): the attribute is damaged, or the run's determinism differs",
             h->path, (long long)nb, (long long)ckpt_nblocks(s));
  else if (strcmp(opt, s->optim_name) != 0)
    snprintf(h->why, WHY, "%s: optimizer '%s', the deck says '%s'", h->path, opt, s->optim_name);
  else if (window != sp->window)
    snprintf(h->why, WHY, "%s: loss-spike window %lld, the deck says %lld (&train spike_window)", h->path,
             (long long)window, (long long)sp->window);
  else if (!run_state_in_range(h, s))
    ; /* why says which attribute */
  else {
    s->scales_skipped = nb != ckpt_nblocks(s); /* another tp layout's scales (ckpt.h) */
    return agree(h->comm, 0, h->why);
  }
  return agree(h->comm, FM_ECKPT, h->why);
}

/* Test hook FMHPC_CKPT_TEST_HOLD=N:POINT:FILE (rank 0): at POINT of step N's
 * write, create FILE.held and wait (at most 120 s) for FILE.go, so a test can
 * fill the disk or change permissions at a known moment. The other ranks wait
 * in the next collective. */
static void test_hold(const FmCkptState *s, FmComm *c, const char *point) {
  const char *v = getenv("FMHPC_CKPT_TEST_HOLD");
  long long n = 0;
  int off = 0;
  char pt[16];
  if (!v || c->rank != 0 || sscanf(v, "%lld:%15[a-z]:%n", &n, pt, &off) != 2 || n != s->step || strcmp(pt, point) != 0)
    return;
  char held[4200], go[4200];
  snprintf(held, sizeof held, "%s.held", v + off);
  snprintf(go, sizeof go, "%s.go", v + off);
  FILE *f = fopen(held, "w");
  if (f) fclose(f);
  fprintf(stderr, "FMHPC_CKPT_TEST_HOLD: step %lld held at '%s' until %s exists\n", n, point, go);
  fflush(stderr);
  for (int i = 0; i < 1200 && access(go, F_OK) != 0; i++) nanosleep(&(struct timespec){0, 100000000}, NULL);
}

/* Everything after the file is open: the same sequence for both directions,
 * the run state then the sharded-state table (dist.h) in its order. */
static int body_io(H5 *h, int rw, FmCkptState *s) {
  const double t0 = fm_now_s();
  int rc = rw == 'w' ? write_run_state(h, s) : read_run_state(h, s);
  prof_add(&g_prof.run_state, t0);
  const FmDistState *d = &s->dist;
  const char *kill = getenv("FMHPC_CKPT_TEST_KILL_AT");
  for (int i = 0; i < d->n && !rc; i++) {
    const FmDistEntry *e = &d->e[i];
    if (e->layout == FM_DIST_FLAT_SHARD)
      rc = array_io(h, rw, e->name, d->params, e->data, d->lo, d->hi);
    else if (rw == 'r' && s->scales_skipped && !strcmp(e->name, "reduce/amax_prev"))
      continue;
    else
      rc = small_io(h, rw, e->name, e->data, e->n, e->layout == FM_DIST_WHOLE_F64);
    if (i == 0 && rw == 'w' && kill && atoll(kill) == s->step && h->comm->rank == h->comm->size - 1) {
      fprintf(stderr, "FMHPC_CKPT_TEST_KILL_AT=%s: rank %d kills itself mid-write of %s\n", kill, h->comm->rank,
              h->path);
      fflush(stderr);
      raise(SIGKILL);
    }
    if (i == 0 && rw == 'w') test_hold(s, h->comm, "write");
  }
  return rc;
}

/* ---- commit protocol ------------------------------------------------------ */

static int fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return FM_EIO;
  int rc = fsync(fd) == 0 ? 0 : FM_EIO;
  close(fd);
  return rc;
}

static int step_of(const char *name, const char *suffix, long long *step) {
  int n = 0;
  if (sscanf(name, "step_%lld%n", step, &n) != 1) return 0;
  return strcmp(name + n, suffix) == 0;
}

static int cmp_desc(const void *a, const void *b) {
  const char *x = strrchr(*(char *const *)a, '/'), *y = strrchr(*(char *const *)b, '/');
  long long sx = 0, sy = 0;
  step_of(x + 1, ".h5", &sx);
  step_of(y + 1, ".h5", &sy);
  return sx < sy ? 1 : sx > sy ? -1 : 0;
}

/* Retention's unlinks run on a thread of rank 0 (no MPI, no HDF5 in it):
 * removing a 1.5 GB file took 0.3-0.5 s on ext4 mounted with discard, time
 * the step loop need not wait for. The next write, fm_ckpt_list (hence
 * every resume and listing in this process) and exit wait for it, so what
 * they see is as if the unlinks had run inline; another process may see the
 * old file a moment longer, and a crash leaves it for the next retention. */
static pthread_t g_retain;
static int g_retaining;

static void *retain_run(void *arg) {
  char **doomed = arg;
  for (char **p = doomed; *p; p++) {
    unlink(*p);
    free(*p);
  }
  free(doomed);
  return NULL;
}

static void retain_wait(void) {
  if (!g_retaining) return;
  pthread_join(g_retain, NULL);
  g_retaining = 0;
}

/* Unlink the NULL-terminated, malloc'd paths (taking them) in the background. */
static void retain_start(char **doomed) {
  static int registered;
  retain_wait();
  if (!doomed[0]) {
    free(doomed);
    return;
  }
  if (!registered) registered = atexit(retain_wait) == 0;
  if (registered && pthread_create(&g_retain, NULL, retain_run, doomed) == 0)
    g_retaining = 1;
  else
    retain_run(doomed); /* no thread (or no exit hook to wait for it): inline, as before */
}

int fm_ckpt_list(const char *dir, char ***paths) {
  retain_wait(); /* the previous write's retention first: the listing is what it left */
  *paths = NULL;
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    long long st;
    if (!step_of(e->d_name, ".h5", &st)) continue;
    if (n == cap) *paths = fm_xrealloc(*paths, sizeof **paths * (size_t)(cap = cap ? 2 * cap : 16));
    (*paths)[n] = fm_xmalloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf((*paths)[n++], "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (n > 1) qsort(*paths, (size_t)n, sizeof **paths, cmp_desc);
  return n;
}

static void free_list(char **p, int n) {
  for (int i = 0; p && i < n; i++) free(p[i]);
  free(p);
}

/* Rank 0 alone: the run id a checkpoint file carries ("" when it has none or
 * cannot be read), through HDF5's serial driver. */
static void file_run_id(const char *path, char id[FM_CKPT_RUN_ID_LEN]) {
  id[0] = '\0';
  H5E_auto2_t efunc;
  void *edata;
  H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t root = f >= 0 ? H5Gopen2(f, "/", H5P_DEFAULT) : -1;
  if (root >= 0 && H5Aexists(root, "run_id") > 0 && attr_read_str(root, "run_id", id, FM_CKPT_RUN_ID_LEN)) id[0] = '\0';
  if (root >= 0) H5Gclose(root);
  if (f >= 0) H5Fclose(f);
  H5Eset_auto2(H5E_DEFAULT, efunc, edata);
}

/* Keep in paths[0..n) (newest first) only the checkpoints of run `id`;
 * returns the new count, the others freed. */
static int only_run(char **paths, int n, const char *id) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    char fid[FM_CKPT_RUN_ID_LEN];
    file_run_id(paths[i], fid);
    if (strcmp(fid, id) == 0)
      paths[m++] = paths[i];
    else
      free(paths[i]);
  }
  return m;
}

void fm_ckpt_new_run_id(FmComm *comm, int64_t seed, char id[FM_CKPT_RUN_ID_LEN]) {
  char *s = NULL;
  if (comm->rank == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ull; /* FNV-1a over what makes this start unique */
    const uint64_t parts[4] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid(), (uint64_t)seed};
    for (int i = 0; i < 4; i++)
      for (int k = 0; k < 64; k += 8) h = (h ^ ((parts[i] >> k) & 0xffu)) * 1099511628211ull;
    for (const char *c = host; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    s = fm_xmalloc(FM_CKPT_RUN_ID_LEN);
    snprintf(s, FM_CKPT_RUN_ID_LEN, "%016llx", (unsigned long long)h);
  }
  FM_CHECK(fm_comm_bcast_str(comm, &s, 0));
  snprintf(id, FM_CKPT_RUN_ID_LEN, "%s", s);
  free(s);
}

/* Test hook FMHPC_CKPT_TEST_KILL_COMMIT=N:P: rank 0 SIGKILLs itself inside
 * step N's commit, at point P: 1 after the fsync of the .partial, 2 after its
 * rename to step_N.h5 (before `latest` moves), 3 after `latest` moved (before
 * retention). A crash inside the commit, for the kill campaign. */
static void test_kill_commit(int64_t step, int point) {
  const char *v = getenv("FMHPC_CKPT_TEST_KILL_COMMIT");
  long long n = 0;
  int p = 0;
  if (!v || sscanf(v, "%lld:%d", &n, &p) != 2 || n != step || p != point) return;
  fprintf(stderr, "FMHPC_CKPT_TEST_KILL_COMMIT=%s: rank 0 kills itself in the commit of step %lld\n", v, n);
  fflush(stderr);
  raise(SIGKILL);
}

/* Rank 0: rename into place, point `latest` at it (latest.tmp was written by
 * prepare_dir), prune this run's older checkpoints (another run's files in
 * the directory are not ours to delete). This run's checkpoints of a later
 * step than the one just written were left by the line it went back from (a
 * resume from an earlier checkpoint): they are neither counted in keep nor
 * pruned, so the file `latest` now names is always kept (counting them would
 * delete it, with keep no larger than their number), and they stay the
 * user's to remove; rank 0 says so once. One of them is replaced only when
 * this line writes the same step again. */
static int commit(const char *dir, const char *partial, const char *final, int64_t step, int keep, const char *run_id,
                  char *why) {
  char tmp[4200], latest[4200];
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  snprintf(latest, sizeof latest, "%s/latest", dir);
  double t0 = fm_now_s();
  const int synced = fsync_path(partial, 0) == 0;
  prof_add(&g_prof.fsync, t0);
  t0 = fm_now_s();
  test_kill_commit(step, 1);
  if (!synced || rename(partial, final) != 0 || fsync_path(dir, 1)) {
    snprintf(why, WHY, "%s: cannot fsync or rename into %s: %s", partial, final, strerror(errno));
    return FM_EIO;
  }
  test_kill_commit(step, 2);
  if (rename(tmp, latest) != 0 || fsync_path(dir, 1)) {
    snprintf(why, WHY, "%s: cannot update %s (%s); %s is complete but `latest` still names the previous checkpoint",
             dir, latest, strerror(errno), final);
    unlink(tmp);
    return FM_EIO;
  }
  test_kill_commit(step, 3);
  prof_add(&g_prof.rename, t0);
  t0 = fm_now_s();
  char **paths = NULL;
  int n = fm_ckpt_list(dir, &paths);
  n = only_run(paths, n, run_id);
  char **doomed = fm_xcalloc((size_t)(n > keep ? n - keep : 0) + 1, sizeof *doomed);
  int nd = 0, kept = 0, later = 0;
  long long first_later = 0;
  for (int i = 0; i < n && paths; i++) { /* newest first */
    long long st = 0;
    step_of(strrchr(paths[i], '/') + 1, ".h5", &st);
    if (st > step) {
      later++, first_later = st;
      free(paths[i]);
    } else if (kept < keep) {
      kept++;
      free(paths[i]);
    } else {
      doomed[nd++] = paths[i];
    }
  }
  free(paths);
  static bool told;
  if (later && !told) {
    told = true;
    fm_warn0(
        "checkpoint: %s holds %d checkpoint(s) of this run at later steps than %lld (from step %lld: left "
        "when this run went back to an earlier checkpoint); retention keeps them outside &ckpt keep and never "
        "deletes them (remove them when no longer wanted); one is replaced only if this run writes that step "
        "again",
        dir, later, (long long)step, first_later);
  }
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    long long st;
    if (!step_of(e->d_name, ".h5.partial", &st) || st >= step) continue;
    doomed = fm_xrealloc(doomed, sizeof *doomed * (size_t)(nd + 2));
    doomed[nd] = fm_xmalloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf(doomed[nd++], "%s/%s", dir, e->d_name);
  }
  if (d) closedir(d);
  doomed[nd] = NULL;
  retain_start(doomed);
  prof_add(&g_prof.retain, t0);
  return 0;
}

/* The bytes a checkpoint file takes at most: its data, plus 1 MiB and 16 KiB
 * per dataset of HDF5 metadata (superblock, object headers, the sha256 and
 * flat_offset attributes, the run-state attributes and the deck). The
 * reservation covers it, so no write inside HDF5 needs a new disk block. */
static double ckpt_bytes(const FmCkptState *s) {
  double need = 1048576.0;
  for (int i = 0; i < s->dist.n; i++) {
    const FmDistEntry *e = &s->dist.e[i];
    const int ndset = e->layout == FM_DIST_FLAT_SHARD ? s->dist.params->n : 1;
    need += 16384.0 * ndset + (e->layout == FM_DIST_FLAT_SHARD
                                   ? (double)s->dist.params->numel * 4.0
                                   : (double)e->n * (e->layout == FM_DIST_WHOLE_F64 ? 8.0 : 4.0));
  }
  return need + (s->deck_text ? (double)strlen(s->deck_text) : 0.0) +
         (s->gemm_plans ? (double)strlen(s->gemm_plans) : 0.0);
}

static double free_bytes(const char *dir) {
  struct statvfs v;
  return statvfs(dir, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1.0;
}

const char *fm_ckpt_space_short(const char *dir, const FmCkptState *s, char *why, size_t n) {
  const double need = ckpt_bytes(s), avail = free_bytes(dir);
  if (getenv("FMHPC_CKPT_TEST_NO_SPACE_CHECK") || avail < 0 || avail >= need) return NULL;
  char a[32], b[32];
  snprintf(why, n, "%s: no space for a checkpoint: it needs about %s, %s is free (disk full or quota)", dir,
           fm_fmt_bytes(a, sizeof a, need), fm_fmt_bytes(b, sizeof b, avail));
  return why;
}

/* Rank 0, before anything is created: the directory, the free space, and
 * latest.tmp already holding the new name (so the commit only renames: it
 * needs no new disk block after the write). */
static int prepare_dir(const char *dir, const FmCkptState *s, const char *final, char *why) {
  if (fm_mkdirs(dir)) {
    snprintf(why, WHY, "%s: cannot create the checkpoint directory: %s (&ckpt dir)", dir, strerror(errno));
    return FM_EIO;
  }
  /* Another run's checkpoint of the same step is never replaced: a fresh
   * start in a used directory shares it (say_found), and the rename in
   * commit() would otherwise drop that run's file. A file with no readable
   * run id (damaged, or from before run ids) is not a checkpoint to keep. */
  char other[FM_CKPT_RUN_ID_LEN];
  file_run_id(final, other);
  if (other[0] && strcmp(other, s->run_id) != 0) {
    snprintf(why, WHY,
             "%s belongs to another run (run id %s; this run's is %s): a checkpoint never replaces another run's "
             "file (write this run's checkpoints elsewhere: &ckpt dir or &run out_dir; or move that run's files)",
             final, other, s->run_id);
    return FM_EIO;
  }
  if (fm_ckpt_space_short(dir, s, why, WHY)) return FM_EIO;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  FILE *f = fopen(tmp, "w");
  int ok = f && fprintf(f, "%s\n", strrchr(final, '/') + 1) > 0;
  ok = f && fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
  const int e = errno;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) {
    snprintf(why, WHY, "%s: cannot write %s: %s (&ckpt dir must be writable)", dir, tmp, strerror(e));
    unlink(tmp);
    return FM_EIO;
  }
  return 0;
}

/* Rank 0, before any rank opens the file: create it as an empty HDF5 file
 * (serially: an error here is rank 0's alone) and allocate its full size on
 * disk (fallocate(2); not posix_fallocate, which on a file system without it
 * writes every block). All ranks then open it read-write, which keeps the
 * allocation (a parallel H5Fcreate would truncate it), so a disk that fills
 * up later cannot fail a collective write or the close, whose ENOSPC the
 * ranks would meet at different points (see ckpt.h): the one ENOSPC is here,
 * agreed before any collective I/O. HDF5 truncates the file to its end at
 * the close. A file system without fallocate (EOPNOTSUPP) is written
 * unreserved, as before, with a warning. */
static int create_reserved(const char *dir, const char *partial, const FmCkptState *s, char *why) {
  const double need = ckpt_bytes(s);
  const char *what = "create";
  hid_t f = H5Fcreate(partial, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  int e = errno;
  if (f < 0 || H5Fclose(f) < 0) {
    e = e ? e : EIO;
  } else if (getenv("FMHPC_CKPT_TEST_NO_RESERVE")) {
    return 0;
  } else {
    what = "reserve";
    int fd = open(partial, O_WRONLY);
    e = fd < 0 || fallocate(fd, 0, 0, (off_t)need) != 0 ? errno : 0;
    if (fd >= 0) close(fd);
    if (e == EOPNOTSUPP || e == ENOSYS) {
      static int said;
      if (!said++)
        fm_warn0(
            "%s: the file system cannot reserve space (fallocate: %s): checkpoints are written "
            "unreserved, and a disk that fills during a write may hang the job",
            dir, strerror(e));
      return 0;
    }
    if (!e) return 0;
  }
  char a[32], b[32];
  snprintf(why, WHY,
           "%s: cannot %s the checkpoint file (%s): %s (%s free in %s); nothing was written and `latest` still "
           "names the previous checkpoint\nhint: free space in %s (or lower &ckpt keep) or make it writable, then "
           "resume",
           partial, what, fm_fmt_bytes(a, sizeof a, need), strerror(e), fm_fmt_bytes(b, sizeof b, free_bytes(dir)), dir,
           dir);
  return FM_EIO;
}

int fm_ckpt_write(const char *dir, const FmCkptState *s, int keep, FmComm *comm, FILE *err, char *written,
                  size_t written_len) {
  H5 h = {.f = -1, .dxpl = -1, .fd = -1, .comm = comm};
  char final[4200], partial[4300];
  snprintf(final, sizeof final, "%s/step_%08lld.h5", dir, (long long)s->step);
  snprintf(partial, sizeof partial, "%s.partial", final);
  h.path = partial;
  retain_wait(); /* the previous write's retention (it may free the space this one needs) */
  memset(&g_prof, 0, sizeof g_prof);
  g_on = 1;
  const double t_start = fm_now_s(), cpu_start = cpu_s();
  double t0 = t_start;
  test_hold(s, comm, "start");
  int rc = agree(comm, comm->rank == 0 ? prepare_dir(dir, s, final, h.why) : 0, h.why);
  prof_add(&g_prof.prepare, t0);
  if (rc) goto report;
  H5E_auto2_t efunc;
  void *edata;
  H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* our messages name the file and the dataset */
  test_hold(s, comm, "reserve");
  t0 = fm_now_s();
  rc = agree(comm, comm->rank == 0 ? create_reserved(dir, partial, s, h.why) : 0, h.why); /* the one agreed ENOSPC */
  prof_add(&g_prof.create, t0);
  t0 = fm_now_s();
  if (!rc) {
    hid_t fapl = open_fapl(comm);
    h.f = fapl >= 0 ? H5Fopen(partial, H5F_ACC_RDWR, fapl) : -1;
    if (h.f < 0) snprintf(h.why, WHY, "%s: cannot open the new file on every rank: %s", partial, strerror(errno));
    if (fapl >= 0) H5Pclose(fapl);
    rc = agree(comm, h.f < 0 ? FM_EIO : 0, h.why);
    h.fd = rc ? -1 : open(partial, O_WRONLY); /* writeback hints only (writeback_start): -1 is no error */
  }
  if (!rc) {
    h.dxpl = H5Pcreate(H5P_DATASET_XFER);
    int e = h.dxpl < 0 || H5Pset_dxpl_mpio(h.dxpl, H5FD_MPIO_COLLECTIVE) < 0;
    if (e) snprintf(h.why, WHY, "%s: cannot set collective transfers", partial);
    rc = agree(comm, e ? FM_EHDF5 : 0, h.why);
  }
  prof_add(&g_prof.open, t0);
  if (!rc) rc = body_io(&h, 'w', (FmCkptState *)s);
  if (h.dxpl >= 0) H5Pclose(h.dxpl);
  t0 = fm_now_s();
  if (h.f >= 0) { /* collective: every rank closes, whatever happened */
    const int e = H5Fclose(h.f) < 0;
    if (e && !rc)
      snprintf(h.why, WHY, "%s: closing (flushing) the file failed (disk full or quota exceeded?)", partial);
    rc = agree(comm, rc ? rc : e ? FM_EIO : 0, h.why);
  }
  if (h.fd >= 0) close(h.fd);
  prof_add(&g_prof.close, t0);
  H5Eset_auto2(H5E_DEFAULT, efunc, edata);
  if (!rc && comm->rank == 0) rc = commit(dir, partial, final, s->step, keep, s->run_id, h.why);
  if (rc && comm->rank == 0) { /* a failed write leaves nothing to mistake: no .partial, no latest.tmp */
    char tmp[4200];
    unlink(partial);
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    unlink(tmp);
  }
  rc = agree(comm, rc, h.why);
report:
  prof_add(&g_prof.total, t_start);
  g_prof.cpu = cpu_s() - cpu_start;
  g_on = 0;
  if (rc && err) fprintf(err, "fmhpc: checkpoint of step %lld failed: %s\n", (long long)s->step, h.why);
  if (!rc && written) snprintf(written, written_len, "%s", final);
  return rc;
}

void fm_ckpt_log_written(const char *path, double seconds) {
  struct stat st;
  if (stat(path, &st) != 0) { /* rank 0 just committed it; say so rather than guess a size */
    fm_log0("checkpoint: %s (%.2f s; size unknown: %s)", path, seconds, strerror(errno));
    return;
  }
  char b[32];
  const double mib = (double)st.st_size / (1024.0 * 1024.0);
  fm_log0("checkpoint: %s, %s in %.2f s (%.1f MiB/s)", path, fm_fmt_bytes(b, sizeof b, (double)st.st_size), seconds,
          seconds > 0 ? mib / seconds : 0.0);
}

/* Open path for reading, run body, close: the same steps for a resume and
 * for a weights-only read. */
typedef int (*ReadBody)(H5 *h, void *arg);
static int read_file(const char *path, FmComm *comm, char *why, size_t why_len, ReadBody body, void *arg) {
  H5 h = {.f = -1, .dxpl = -1, .fd = -1, .comm = comm, .path = path};
  H5E_auto2_t efunc;
  void *edata;
  H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t fapl = open_fapl(comm);
  h.f = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
  if (fapl >= 0) H5Pclose(fapl);
  if (h.f < 0) snprintf(h.why, WHY, "%s: cannot open as HDF5 (missing, truncated or corrupt)", path);
  int rc = agree(comm, h.f < 0 ? FM_ECKPT : 0, h.why);
  if (!rc) {
    h.dxpl = H5Pcreate(H5P_DATASET_XFER);
    int e = h.dxpl < 0 || H5Pset_dxpl_mpio(h.dxpl, H5FD_MPIO_COLLECTIVE) < 0;
    rc = agree(comm, e ? FM_EHDF5 : 0, h.why);
  }
  if (!rc) rc = body(&h, arg);
  if (h.dxpl >= 0) H5Pclose(h.dxpl);
  if (h.f >= 0) H5Fclose(h.f);
  H5Eset_auto2(H5E_DEFAULT, efunc, edata);
  if (why) snprintf(why, why_len, "%s", rc ? h.why : "");
  return rc;
}

/* Rank 0: what resume='auto' may load, in order: the file `latest` names,
 * then the older checkpoints of its run (a fallback past a damaged file);
 * another run's files in the same directory are never candidates. Without
 * `latest` (nothing was ever committed there by a run with run ids): none.
 * When the file `latest` names has no readable run id (cut short by a
 * crash or a full disk after its commit, damaged), its run is taken to be
 * that of the newest older checkpoint with one (said), so a damaged newest
 * file falls back to its predecessors instead of failing the resume. */
static int auto_candidates(const char *dir, char ***out) {
  char path[4200], name[256] = "";
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
  }
  name[strcspn(name, "\n")] = '\0';
  long long newest = 0;
  *out = NULL;
  if (!name[0] || !step_of(name, ".h5", &newest)) return 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char id[FM_CKPT_RUN_ID_LEN];
  file_run_id(path, id);
  char **all = NULL;
  int n = fm_ckpt_list(dir, &all), m = 0;
  const char *from = NULL; /* the older checkpoint whose run id stands in for the newest's */
  for (int i = 0; i < n && !from && !id[0]; i++) { /* newest first */
    long long st = 0;
    step_of(strrchr(all[i], '/') + 1, ".h5", &st);
    char older[FM_CKPT_RUN_ID_LEN];
    if (st >= newest) continue;
    file_run_id(all[i], older);
    if (older[0]) {
      snprintf(id, sizeof id, "%s", older);
      from = all[i];
    }
  }
  if (from)
    fm_warn0("resume: %s has no readable run id (cut short or damaged); its run is taken to be that of %s (run id %s)",
             path, from, id);
  *out = fm_xcalloc((size_t)n + 1, sizeof **out);
  (*out)[m++] = fm_xstrdup(path);
  n = only_run(all, n, id); /* "": checkpoints from before run ids fall back to each other */
  for (int i = 0; i < n; i++) {
    long long st = 0;
    step_of(strrchr(all[i], '/') + 1, ".h5", &st);
    if (st < newest)
      (*out)[m++] = all[i];
    else
      free(all[i]);
  }
  free(all);
  return m;
}

/* Rank 0, at a fresh start: a directory holding checkpoints (another run's,
 * or this deck's from before) is stated, never silently shared. */
static void say_found(const char *dir, const char *why) {
  char **paths = NULL;
  int n = fm_ckpt_list(dir, &paths);
  if (n > 0)
    fm_warn0(
        "%s: %s already holds %d checkpoint%s (newest %s); this run starts at step 0 with a new run id: "
        "retention and resume = 'auto' consider only its own checkpoints, its first one moves `latest`, and a "
        "checkpoint of a step whose file another run holds fails rather than replace it",
        why, dir, n, n == 1 ? "" : "s", strrchr(paths[0], '/') + 1);
  free_list(paths, n);
}

static int read_all(H5 *h, void *s) { return body_io(h, 'r', s); }

int fm_ckpt_read(const char *path, FmCkptState *s, FmComm *comm, char *why, size_t why_len) {
  return read_file(path, comm, why, why_len, read_all, s);
}

typedef struct ParamsArg {
  const FmTensorTable *params;
  float *w;
  char **deck; /* NULL, or gets the stored deck */
} ParamsArg;

/* Every rank reads the whole vector; the digests of identical pieces combine
 * to the same checksums, so the check is the resume's. */
static int read_params(H5 *h, void *arg) {
  const ParamsArg *p = arg;
  hid_t root = H5Gopen2(h->f, "/", H5P_DEFAULT);
  char fmt[32] = "";
  int64_t np = -1;
  int rc = root < 0 || attr_read_str(root, "format", fmt, sizeof fmt) || attr_read_i64(root, "n_params", &np);
  int64_t version = 1;
  if (!rc && H5Aexists(root, "format_version") > 0) rc = attr_read_i64(root, "format_version", &version);
  if (p->deck && root >= 0) {
    free(*p->deck);
    *p->deck = attr_read_vlstr(root, "deck");
  }
  if (root >= 0) H5Gclose(root);
  if (rc || strcmp(fmt, "fmhpc-ckpt") != 0)
    snprintf(h->why, WHY, "%s: not an fmhpc checkpoint (no format = 'fmhpc-ckpt' attribute)", h->path);
  else if (version != FM_CKPT_FORMAT_VERSION)
    snprintf(h->why, WHY, VERSION_WHY, h->path, (long long)version, FM_CKPT_FORMAT_VERSION);
  else if (np != p->params->numel)
    snprintf(h->why, WHY,
             "%s: holds %lld parameters, the model of &model has %lld: set &model as the run that wrote it", h->path,
             (long long)np, (long long)p->params->numel);
  rc = agree(h->comm, h->why[0] ? FM_ECKPT : 0, h->why);
  return rc ? rc : array_io(h, 'r', "params", p->params, p->w, 0, p->params->numel);
}

int fm_ckpt_read_params(const char *path, const FmTensorTable *params, float *w, FmComm *comm, char **deck, char *why,
                        size_t why_len) {
  ParamsArg a = {params, w, deck};
  return read_file(path, comm, why, why_len, read_params, &a);
}

int fm_ckpt_resume(const char *resume, const char *dir, FmCkptState *s, FmComm *comm, FILE *err, char *loaded,
                   size_t loaded_len) {
  char why[WHY];
  if (fm_strcasecmp(resume, "none") == 0) {
    if (comm->rank == 0) say_found(dir, "resume = 'none'");
    return 1;
  }
  if (fm_strcasecmp(resume, "auto") != 0) {
    int rc = fm_ckpt_read(resume, s, comm, why, sizeof why);
    if (rc && err)
      fprintf(err, "fmhpc: &ckpt resume = '%s': %s\nhint: resume = 'auto' takes the newest valid one in %s\n", resume,
              why, dir);
    if (!rc) snprintf(loaded, loaded_len, "%s", resume);
    return rc;
  }
  char **paths = NULL;
  int32_t n = comm->rank == 0 ? auto_candidates(dir, &paths) : 0;
  fm_comm_bcast(comm, &n, 1, FM_DT_I32, 0);
  if (n == 0 && comm->rank == 0) say_found(dir, "resume = 'auto' found no `latest`");
  int rc = 1;
  for (int i = 0; i < n && rc; i++) {
    char *p = comm->rank == 0 && paths ? paths[i] : NULL;
    fm_comm_bcast_str(comm, &p, 0);
    rc = fm_ckpt_read(p, s, comm, why, sizeof why);
    if (rc)
      fm_warn0("resume: skipping %s: %s", p, why);
    else
      snprintf(loaded, loaded_len, "%s", p);
    if (comm->rank != 0) free(p);
  }
  if (comm->rank == 0) free_list(paths, n);
  if (n > 0 && rc) {
    if (err)
      fprintf(err,
              "fmhpc: &ckpt resume = 'auto': none of the %d checkpoints in %s is valid (see above)\n"
              "hint: resume = 'none' starts over; resume = 'PATH' names one file\n",
              (int)n, dir);
    return FM_ECKPT;
  }
  return rc;
}
