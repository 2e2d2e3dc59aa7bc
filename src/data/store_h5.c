/* store_h5.c: packed shards in HDF5. The writer (prep's side) creates one
 * shard collectively, every rank writing its runs of rows in independent
 * H5Dwrites of at most FM_WRITE_CHUNK bytes; the file is built by the same calls
 * whatever the rank count (contiguous datasets, early allocation, no object
 * timestamps), so its bytes depend only on the data. The reader serves the
 * store interface (store.c) with independent or collective hyperslab reads.
 * Layout (docs/data-format.md): /tokens u32 (N, R), /loss_mask u8 (N, R),
 * /segment_ids i32 (N, R), /position_ids i32 (N, R) when stored,
 * /provenance (JSON string), attributes on the root group. */
#include "fmhpc/data.h"

#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ATTR_MAX = 60000 }; /* keep attributes compact (HDF5's 64 KiB header limit) */

typedef struct Dset {
  const char *name;
  hid_t ftype, mtype;
} Dset;

static void attr_str(hid_t obj, const char *name, const char *val) {
  hid_t t = H5Tcopy(H5T_C_S1);
  FM_CHECK_H5(t);
  FM_CHECK_H5(H5Tset_size(t, strlen(val) + 1));
  FM_CHECK_H5(H5Tset_strpad(t, H5T_STR_NULLTERM));
  hid_t sp = H5Screate(H5S_SCALAR);
  FM_CHECK_H5(sp);
  hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  FM_CHECK_H5(a);
  FM_CHECK_H5(H5Awrite(a, t, val));
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}

static void attr_i64(hid_t obj, const char *name, int64_t v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  FM_CHECK_H5(sp);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  FM_CHECK_H5(a);
  FM_CHECK_H5(H5Awrite(a, H5T_NATIVE_INT64, &v));
  H5Aclose(a);
  H5Sclose(sp);
}

/* A scalar fixed-length string dataset written by rank 0 (collectively). */
static void string_dset(hid_t f, const char *name, const char *val, int rank, hid_t dxpl) {
  hid_t t = H5Tcopy(H5T_C_S1);
  FM_CHECK_H5(t);
  FM_CHECK_H5(H5Tset_size(t, strlen(val) + 1));
  hid_t sp = H5Screate(H5S_SCALAR), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  FM_CHECK_H5(sp);
  FM_CHECK_H5(H5Pset_obj_track_times(dcpl, 0));
  hid_t d = H5Dcreate2(f, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  FM_CHECK_H5(d);
  hid_t sel = H5Scopy(sp);
  if (rank != 0) FM_CHECK_H5(H5Sselect_none(sel));
  FM_CHECK_H5(H5Dwrite(d, t, sel, sel, dxpl, val));
  H5Sclose(sel);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

typedef struct H5Writer {
  FmShardWriter ops;
  FmComm *comm;
  char *path, *partial;
  hid_t f, fapl, fcpl, dxpl, dxpl_ind, dcpl, fsp, d[4];
  int nds;
  int64_t R;
} H5Writer;

/* The datasets in put's order (HDF5's type ids are set at run time). */
static Dset h5_dset(int i) {
  const Dset ds[4] = {{"tokens", H5T_STD_U32LE, H5T_NATIVE_UINT32},
                      {"loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8},
                      {"segment_ids", H5T_STD_I32LE, H5T_NATIVE_INT32},
                      {"position_ids", H5T_STD_I32LE, H5T_NATIVE_INT32}};
  return ds[i];
}

/* Independent writes (each rank its own hyperslabs; a collective transfer would gather them on aggregators first,
 * and hold a rank with fewer rows spinning until the others are done), in blocks of rows of at most FM_WRITE_CHUNK
 * bytes (of a 4-byte dataset): one H5Dwrite of a whole run is one pwrite, which copies into the page cache about 10x
 * slower in the VM of bench/prep. The same bytes in the file whatever the blocks. */
static int h5w_put(FmShardWriter *base, int64_t row, int64_t n, const uint32_t *tok, const uint8_t *mask,
                   const int32_t *seg, const int32_t *pos) {
  H5Writer *w = (H5Writer *)base;
  const void *bufs[4] = {tok, mask, seg, pos};
  const size_t esz[4] = {4, 1, 4, 4};
  int64_t R = w->R, blk = (int64_t)(FM_WRITE_CHUNK / ((size_t)R * 4));
  if (blk < 1) blk = 1;
  for (int i = 0; i < w->nds; i++) {
    const char *src = bufs[i];
    for (int64_t o = 0; o < n; o += blk) {
      int64_t k = n - o < blk ? n - o : blk;
      hsize_t start[2] = {(hsize_t)(row + o), 0}, count[2] = {(hsize_t)k, (hsize_t)R};
      FM_CHECK_H5(H5Sselect_hyperslab(w->fsp, H5S_SELECT_SET, start, NULL, count, NULL));
      hid_t bsp = H5Screate_simple(2, count, NULL);
      FM_CHECK_H5(bsp);
      FM_CHECK_H5(H5Dwrite(w->d[i], h5_dset(i).mtype, bsp, w->fsp, w->dxpl_ind, src));
      H5Sclose(bsp);
      src += (size_t)(k * R) * esz[i];
    }
  }
  return 0;
}

static int h5w_close(FmShardWriter *base, int rc) {
  H5Writer *w = (H5Writer *)base;
  FmComm *comm = w->comm;
  fm__idle_barrier(comm); /* ranks write different numbers of rows */
  for (int i = 0; i < w->nds; i++) H5Dclose(w->d[i]);
  H5Pclose(w->dxpl_ind);
  H5Pclose(w->dcpl);
  H5Sclose(w->fsp);
  H5Pclose(w->dxpl);
  FM_CHECK_H5(H5Fclose(w->f));
  H5Pclose(w->fapl);
  H5Pclose(w->fcpl);
  fm_comm_barrier(comm);
  int32_t r32 = rc, worst = 0;
  fm_comm_allreduce(comm, &r32, &worst, 1, FM_DT_I32, FM_OP_MIN);
  rc = 0;
  if (comm->rank == 0 && worst) unlink(w->partial); /* a shard some rank could not fill */
  if (comm->rank == 0 && !worst && rename(w->partial, w->path) != 0) {
    fm_err("%s: cannot rename to %s: %s", w->partial, w->path, strerror(errno));
    rc = FM_EIO;
  }
  if (!worst) { /* worst is every rank's: all or none take this branch */
    r32 = rc;
    fm_comm_allreduce(comm, &r32, &worst, 1, FM_DT_I32, FM_OP_MIN);
  }
  free(w->path);
  free(w->partial);
  free(w);
  return worst;
}

int fm__h5_shard_create(FmShardWriter **out, const char *path, const FmShardMeta *m, FmComm *comm, FILE *err) {
  *out = NULL;
  int64_t R = m->seq_len + 1;
  char *partial = fm_xmalloc(strlen(path) + 16);
  sprintf(partial, "%s.partial", path);

  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  FM_CHECK_H5(fapl);
  FM_CHECK_H5(H5Pset_fapl_mpio(fapl, comm->mpi, MPI_INFO_NULL));
  FM_CHECK_H5(H5Pset_all_coll_metadata_ops(fapl, 1));
  FM_CHECK_H5(H5Pset_coll_metadata_write(fapl, 1));
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  FM_CHECK_H5(fcpl);
  H5E_auto2_t efunc;
  void *edata;
  H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fcreate(partial, H5F_ACC_TRUNC, fcpl, fapl);
  H5Eset_auto2(H5E_DEFAULT, efunc, edata);
  int32_t ok = f >= 0, all_ok = 0;
  fm_comm_allreduce(comm, &ok, &all_ok, 1, FM_DT_I32, FM_OP_MIN);
  if (!all_ok) {
    if (err && comm->rank == 0)
      fprintf(err, "%s: cannot create the HDF5 shard\nhint: check that &prep output is a writable directory\n",
              partial);
    if (f >= 0) H5Fclose(f);
    H5Pclose(fapl);
    H5Pclose(fcpl);
    free(partial);
    return FM_EIO;
  }
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  FM_CHECK_H5(dxpl);
  FM_CHECK_H5(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));

  /* attributes: every rank writes the same values (collective metadata) */
  hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
  FM_CHECK_H5(root);
  attr_str(root, "format", "fmhpc-packed");
  attr_i64(root, "format_version", 1);
  attr_str(root, "fmhpc_version", FM_VERSION_STRING);
  attr_str(root, "split", m->split);
  attr_i64(root, "shard", m->shard);
  attr_i64(root, "n_shards", m->nshards);
  attr_i64(root, "first_seq", m->first_seq);
  attr_i64(root, "n_seq", m->n_seq);
  attr_i64(root, "seq_len", m->seq_len);
  attr_i64(root, "row_len", R);
  attr_i64(root, "vocab_size", m->vocab_size);
  attr_i64(root, "eos_id", m->eos_id);
  attr_i64(root, "pad_id", m->pad_id);
  attr_str(root, "packing", m->packing);
  attr_str(root, "position_ids", m->position_ids);
  attr_str(root, "tokenizer_hash", m->tokenizer_hash);
  if (strlen(m->sources) < ATTR_MAX) attr_str(root, "sources", m->sources);
  else attr_str(root, "sources", "(too long for an attribute: see the dataset /sources)");
  H5Gclose(root);
  if (strlen(m->sources) >= ATTR_MAX) string_dset(f, "sources", m->sources, comm->rank, dxpl);
  string_dset(f, "provenance", m->provenance, comm->rank, dxpl);

  /* the arrays, allocated now: each rank writes its rows with put */
  H5Writer *w = fm_xcalloc(1, sizeof *w);
  w->ops.put = h5w_put;
  w->ops.close = h5w_close;
  w->comm = comm;
  w->path = fm_xstrdup(path);
  w->partial = partial;
  w->f = f;
  w->fapl = fapl;
  w->fcpl = fcpl;
  w->dxpl = dxpl;
  w->R = R;
  hsize_t dims[2] = {(hsize_t)m->n_seq, (hsize_t)R};
  w->fsp = H5Screate_simple(2, dims, NULL);
  FM_CHECK_H5(w->fsp);
  w->dcpl = H5Pcreate(H5P_DATASET_CREATE);
  FM_CHECK_H5(w->dcpl);
  FM_CHECK_H5(H5Pset_obj_track_times(w->dcpl, 0));
  FM_CHECK_H5(H5Pset_alloc_time(w->dcpl, H5D_ALLOC_TIME_EARLY));
  FM_CHECK_H5(H5Pset_fill_time(w->dcpl, H5D_FILL_TIME_NEVER));
  w->nds = m->position_ids && strcmp(m->position_ids, "none") != 0 ? 4 : 3;
  w->dxpl_ind = H5Pcreate(H5P_DATASET_XFER);
  FM_CHECK_H5(w->dxpl_ind);
  FM_CHECK_H5(H5Pset_dxpl_mpio(w->dxpl_ind, H5FD_MPIO_INDEPENDENT));
  for (int i = 0; i < w->nds; i++) {
    w->d[i] = H5Dcreate2(f, h5_dset(i).name, h5_dset(i).ftype, w->fsp, H5P_DEFAULT, w->dcpl, H5P_DEFAULT);
    FM_CHECK_H5(w->d[i]);
  }
  *out = &w->ops;
  return 0;
}

int fm__h5_write_shard(const char *path, const FmShardMeta *m, const FmShardPart *part, FmComm *comm, FILE *err) {
  FmShardWriter *w;
  int rc = fm__h5_shard_create(&w, path, m, comm, err);
  return rc ? rc : w->close(w, fm__shard_put_part(w, part, m->seq_len + 1));
}

/* ---- reader ---------------------------------------------------------------- */
typedef struct H5Reader {
  FmShardReader ops;
  hid_t f, d[4]; /* tokens, loss_mask, segment_ids, position_ids (or -1) */
  hid_t dxpl_ind, dxpl_coll;
  int64_t n_seq, R;
} H5Reader;

static int h5_read(FmShardReader *base, const int64_t *rows, int64_t n, bool coll, uint32_t *tok, uint8_t *mask,
                   int32_t *pos, int32_t *seg) {
  H5Reader *r = (H5Reader *)base;
  hsize_t dims[2] = {(hsize_t)r->n_seq, (hsize_t)r->R};
  hid_t fsp = H5Screate_simple(2, dims, NULL);
  FM_CHECK_H5(fsp);
  FM_CHECK_H5(H5Sselect_none(fsp));
  for (int64_t i = 0; i < n;) { /* runs of consecutive rows */
    int64_t j = i + 1;
    while (j < n && rows[j] == rows[j - 1] + 1) j++;
    hsize_t start[2] = {(hsize_t)rows[i], 0}, count[2] = {(hsize_t)(j - i), (hsize_t)r->R};
    FM_CHECK_H5(H5Sselect_hyperslab(fsp, H5S_SELECT_OR, start, NULL, count, NULL));
    i = j;
  }
  hsize_t mdims[2] = {(hsize_t)(n ? n : 1), (hsize_t)r->R};
  hid_t msp = H5Screate_simple(2, mdims, NULL);
  FM_CHECK_H5(msp);
  if (n == 0) FM_CHECK_H5(H5Sselect_none(msp));
  uint8_t dummy[16] = {0};
  void *bufs[4] = {tok, mask, seg, pos};
  const hid_t mt[4] = {H5T_NATIVE_UINT32, H5T_NATIVE_UINT8, H5T_NATIVE_INT32, H5T_NATIVE_INT32};
  for (int i = 0; i < 4; i++) {
    if (r->d[i] < 0 || !bufs[i]) continue;
    FM_CHECK_H5(H5Dread(r->d[i], mt[i], msp, fsp, coll ? r->dxpl_coll : r->dxpl_ind, n ? bufs[i] : dummy));
  }
  H5Sclose(msp);
  H5Sclose(fsp);
  return 0;
}

static void h5_close(FmShardReader *base) {
  H5Reader *r = (H5Reader *)base;
  for (int i = 0; i < 4; i++)
    if (r->d[i] >= 0) H5Dclose(r->d[i]);
  H5Pclose(r->dxpl_ind);
  H5Pclose(r->dxpl_coll);
  H5Fclose(r->f);
  free(r);
}

static int read_attr_i64(hid_t f, const char *name, int64_t *v) {
  if (H5Aexists(f, name) <= 0) return FM_EFORMAT;
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  FM_CHECK_H5(a);
  /* one integer: an array would overrun v, a float or a string is not a size */
  hid_t sp = H5Aget_space(a), t = H5Aget_type(a);
  herr_t e = sp >= 0 && t >= 0 && H5Sget_simple_extent_npoints(sp) == 1 && H5Tget_class(t) == H5T_INTEGER
                 ? H5Aread(a, H5T_NATIVE_INT64, v)
                 : -1;
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  H5Aclose(a);
  return e < 0 ? FM_EFORMAT : 0;
}

static int read_attr_str(hid_t f, const char *name, char *buf, size_t cap) {
  if (H5Aexists(f, name) <= 0) return FM_EFORMAT;
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  FM_CHECK_H5(a);
  hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
  herr_t e = -1;
  int one = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1; /* an array of strings would overrun */
  if (sp >= 0) H5Sclose(sp);
  if (!one) {
    /* e stays -1 */
  } else if (t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
    /* variable-length (h5py's default for str): HDF5 allocates the string */
    char *v = NULL;
    e = H5Aread(a, t, &v);
    if (e >= 0 && !v) e = -1;
    if (e >= 0) snprintf(buf, cap, "%s", v);
    if (v) H5free_memory(v);
  } else if (t >= 0 && H5Tget_class(t) == H5T_STRING) { /* fixed length: a number is not a string */
    size_t sz = H5Tget_size(t);
    char *tmp = fm_xcalloc(sz + 1, 1);
    e = H5Aread(a, t, tmp);
    snprintf(buf, cap, "%s", tmp);
    free(tmp);
  }
  if (t >= 0) H5Tclose(t);
  H5Aclose(a);
  return e < 0 ? FM_EFORMAT : 0;
}

int fm__h5_shard_open(FmShardReader **out, const char *path, FmComm *comm, FmStoreInfo *info, int64_t *n_seq,
                      FILE *err) {
  *out = NULL;
  if (access(path, R_OK) != 0) {
    if (err) fprintf(err, "%s: cannot read the HDF5 shard: %s\nhint: run task='prep' first, or check &data train\n",
                     path, strerror(errno));
    return FM_EIO;
  }
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  FM_CHECK_H5(fapl);
  if (comm) FM_CHECK_H5(H5Pset_fapl_mpio(fapl, comm->mpi, MPI_INFO_NULL));
  H5E_auto2_t efunc;
  void *edata;
  H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  H5Reader *r = NULL;
  int rc = 0;
  if (f < 0) {
    if (err) fprintf(err, "%s: not an HDF5 file\n", path);
    rc = FM_EFORMAT;
    goto done;
  }
  r = fm_xcalloc(1, sizeof *r);
  r->ops.read = h5_read;
  r->ops.close = h5_close;
  r->f = f;
  int64_t seq_len = 0, vocab = 0, eos = 0, pad = 0;
  char fmt[32] = "";
  if (read_attr_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, "fmhpc-packed") != 0 ||
      read_attr_i64(f, "seq_len", &seq_len) || read_attr_i64(f, "vocab_size", &vocab) ||
      read_attr_i64(f, "eos_id", &eos) || read_attr_i64(f, "pad_id", &pad) ||
      read_attr_str(f, "packing", info->packing, sizeof info->packing) ||
      read_attr_str(f, "position_ids", info->position_ids, sizeof info->position_ids) ||
      read_attr_str(f, "tokenizer_hash", info->tokenizer_hash, sizeof info->tokenizer_hash)) {
    if (err)
      fprintf(err, "%s: not an fmhpc packed shard (attributes format='fmhpc-packed', seq_len, vocab_size, "
                   "eos_id, pad_id, packing, position_ids, tokenizer_hash expected)\n", path);
    rc = FM_EFORMAT;
    goto done;
  }
  if (fm__store_check_sizes(path, seq_len, 0, vocab, eos, pad, err)) {
    rc = FM_EFORMAT;
    goto done;
  }
  snprintf(info->format, sizeof info->format, "h5");
  info->seq_len = seq_len;
  info->row_len = r->R = seq_len + 1;
  info->vocab_size = vocab;
  info->eos_id = (int32_t)eos;
  info->pad_id = (int32_t)pad;
  static const char *const names[4] = {"tokens", "loss_mask", "segment_ids", "position_ids"};
  for (int i = 0; i < 4; i++) {
    r->d[i] = H5Lexists(f, names[i], H5P_DEFAULT) > 0 ? H5Dopen2(f, names[i], H5P_DEFAULT) : -1;
    hsize_t dims[2] = {0, 0};
    int nd = -1;
    if (r->d[i] >= 0) {
      hid_t sp = H5Dget_space(r->d[i]);
      nd = H5Sget_simple_extent_dims(sp, dims, NULL);
      H5Sclose(sp);
    }
    if ((i < 3 && r->d[i] < 0) || (r->d[i] >= 0 && (nd != 2 || dims[1] != (hsize_t)r->R))) {
      if (err) fprintf(err, "%s: dataset /%s missing or not (n_seq, %lld)\n", path, names[i], (long long)r->R);
      rc = FM_EFORMAT;
      goto done;
    }
    if (i == 0) r->n_seq = (int64_t)dims[0];
    else if (r->d[i] >= 0 && (int64_t)dims[0] != r->n_seq) {
      if (err) fprintf(err, "%s: /%s has %llu rows, /tokens %lld\n", path, names[i], dims[0], (long long)r->n_seq);
      rc = FM_EFORMAT;
      goto done;
    }
  }
  info->has_position_ids = r->d[3] >= 0;
  *n_seq = r->n_seq;
  r->dxpl_ind = H5Pcreate(H5P_DATASET_XFER);
  r->dxpl_coll = H5Pcreate(H5P_DATASET_XFER);
  if (comm) FM_CHECK_H5(H5Pset_dxpl_mpio(r->dxpl_coll, H5FD_MPIO_COLLECTIVE));
done:
  H5Eset_auto2(H5E_DEFAULT, efunc, edata);
  if (rc) {
    if (r) {
      for (int i = 0; i < 4; i++)
        if (r->d[i] > 0) H5Dclose(r->d[i]);
      free(r);
    }
    if (f >= 0) H5Fclose(f);
    return rc;
  }
  *out = &r->ops;
  return 0;
}
