/* hf.c: Hugging Face model directories: fm_hf_export writes config.json and
 * model.safetensors from a parameter table's weights; fm_hf_import reads them
 * (or the shards model.safetensors.index.json names) back into the table's
 * layout; fm_interop_export_task is &run task = 'export'. The name maps live
 * in hf_names.c, config.json in hf_config.c, the file format in
 * safetensors.c. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmhpc/interop.h"
#include "fmhpc/json.h"
#include "hf_internal.h"

static char *join(const char *dir, const char *name) {
  FmStr s;
  fm_str_init(&s);
  fm_str_printf(&s, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
  return s.s;
}

/* ---- export ----------------------------------------------------------- */
typedef struct ExportCtx {
  const FmHfTensor *ht; /* parallel to st */
  const FmStTensor *st;
  const float *w;
} ExportCtx;

/* Conv1D weights: HF (in, out) from our (out, in) slice. */
static int fill_transposed(void *ctx, const FmStTensor *t, void *buf) {
  const ExportCtx *x = ctx;
  const FmHfTensor *h = &x->ht[t - x->st];
  const int64_t rows = h->shape[1], cols = h->shape[0]; /* ours: (rows, cols) */
  const float *src = x->w + h->offset;
  float *dst = buf;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
  return 0;
}

/* After a failed rename, remove() of the temporary is the caller's. */
static int rename_into_place(const char *tmp, const char *path, FILE *err) {
  if (rename(tmp, path) == 0) return 0;
  if (err) fprintf(err, "%s: cannot rename %s over it: %s\n", path, tmp, strerror(errno));
  return FM_EIO;
}

/* So the renames themselves are durable (best effort: some file systems
 * refuse fsync on directories). */
static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

int fm_hf_export(const char *dir, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                 const float *weights, FILE *err) {
  FmHfTensor *ht = NULL;
  int n = 0;
  int rc = fm_hf_tensors(&ht, &n, k, d, params, err);
  if (!rc && fm_mkdirs(dir)) {
    if (err) fprintf(err, "%s: cannot create directory: %s\n", dir, strerror(errno));
    rc = FM_EIO;
  }
  if (rc) {
    free(ht);
    return rc;
  }
  FmStTensor *st = fm_xcalloc((size_t)n + 1, sizeof *st);
  for (int i = 0; i < n; i++) {
    st[i].name = ht[i].name;
    st[i].dtype = FM_ST_F32;
    st[i].ndim = ht[i].ndim;
    for (int j = 0; j < ht[i].ndim; j++) st[i].shape[j] = ht[i].shape[j];
    st[i].data = ht[i].transpose ? NULL : weights + ht[i].offset;
  }
  ExportCtx ctx = {ht, st, weights};
  FmStMeta meta = {"format", "pt"};
  char *cfg = join(dir, "config.json"), *model = join(dir, "model.safetensors");
  /* Both files are written and fsynced under temporary names before either
   * is renamed into place, so a failed write leaves the old pair as it was
   * rather than new weights beside an old config.json. */
  char *model_tmp = NULL, *cfg_tmp = NULL;
  rc = fm_st_write_tmp(model, n, st, 1, &meta, fill_transposed, &ctx, &model_tmp, err);
  if (!rc) rc = fm__hf_config_write_tmp(cfg, k, d, &cfg_tmp, err);
  if (!rc) rc = rename_into_place(cfg_tmp, cfg, err);
  if (!rc) rc = rename_into_place(model_tmp, model, err);
  if (!rc) fsync_dir(dir);
  if (rc && cfg_tmp) remove(cfg_tmp);
  if (rc && model_tmp) remove(model_tmp);
  if (rc)
    rmdir(dir); /* left empty by the failure (a full disk): not left looking like an export; one with files stays */
  free(cfg_tmp);
  free(model_tmp);
  free(cfg);
  free(model);
  free(st);
  free(ht);
  return rc;
}

/* ---- import ----------------------------------------------------------- */
typedef struct Files {
  int n;
  FmStFile *f;
  bool **used; /* per file, per tensor */
} Files;

static void files_close(Files *fs) {
  for (int i = 0; i < fs->n; i++) {
    fm_st_close(&fs->f[i]);
    free(fs->used[i]);
  }
  free(fs->f);
  free(fs->used);
  memset(fs, 0, sizeof *fs);
}

static int files_add(Files *fs, const char *path, FILE *err) {
  fs->f = fm_xrealloc(fs->f, (size_t)(fs->n + 1) * sizeof *fs->f);
  fs->used = fm_xrealloc(fs->used, (size_t)(fs->n + 1) * sizeof *fs->used);
  int rc = fm_st_open(&fs->f[fs->n], path, err);
  if (rc) return rc;
  fs->used[fs->n] = fm_xcalloc((size_t)fs->f[fs->n].n + 1, sizeof **fs->used);
  fs->n++;
  return 0;
}

/* A shard name from the index: a plain file name in the same directory. */
static bool safe_shard_name(const char *s, size_t len) {
  return len > 0 && len < 256 && strlen(s) == len && !strchr(s, '/') && s[0] != '.';
}

/* model.safetensors.index.json: {"weight_map": {tensor: shard file}}. */
static int open_shards(Files *fs, const char *dir, const char *index, FILE *err) {
  char *text = NULL;
  size_t len = 0;
  if (fm__hf_read_json_file(index, &text, &len) != 0) {
    const int e = errno;
    if (err && e == EINVAL)
      fprintf(err, "%s: not a regular file\n", index);
    else if (err && e == EFBIG)
      fprintf(err, "%s: over 16 MiB: not a shard index\n", index);
    else if (err)
      fprintf(err, "%s: cannot read: %s\n", index, strerror(e));
    return e == EINVAL || e == EFBIG ? FM_EFORMAT : FM_EIO;
  }
  FmJsonDoc doc;
  FmJsonError je;
  memset(&je, 0, sizeof je);
  int rc = 0;
  if (fm_json_parse(&doc, text, len, 64, &je) != 0) {
    if (err) fprintf(err, "%s:%d:%d: %s\n", index, je.line, je.col, je.msg);
    free(text);
    return FM_EFORMAT;
  }
  const FmJson *wm = fm_json_get(&doc.root, "weight_map");
  if (!wm || wm->type != FM_JSON_OBJ) {
    if (err) fprintf(err, "%s: no \"weight_map\" object\n", index);
    rc = FM_EFORMAT;
  }
  for (int64_t i = 0; wm && !rc && i < wm->n; i++) {
    const FmJson *v = &wm->items[i];
    if (v->type != FM_JSON_STR || !safe_shard_name(v->s, v->len)) {
      if (err)
        fprintf(err, "%s: weight_map entry %lld is not a plain file name in the same directory\n", index, (long long)i);
      rc = FM_EFORMAT;
      break;
    }
    bool seen = false;
    for (int j = 0; j < fs->n && !seen; j++) {
      const char *base = strrchr(fs->f[j].path, '/');
      seen = strcmp(base ? base + 1 : fs->f[j].path, v->s) == 0;
    }
    if (seen) continue;
    char *p = join(dir, v->s);
    rc = files_add(fs, p, err);
    free(p);
  }
  if (!rc && fs->n == 0) {
    if (err) fprintf(err, "%s: \"weight_map\" names no files\n", index);
    rc = FM_EFORMAT;
  }
  fm_json_free(&doc);
  free(text);
  return rc;
}

static int open_model_files(Files *fs, const char *dir, FILE *err) {
  char *single = join(dir, "model.safetensors"), *index = join(dir, "model.safetensors.index.json");
  struct stat st;
  int rc;
  if (stat(single, &st) == 0 || stat(index, &st) != 0)
    rc = files_add(fs, single, err);
  else
    rc = open_shards(fs, dir, index, err);
  free(single);
  free(index);
  return rc;
}

/* Find an HF tensor by name, or by its name without the base-model prefix. */
static const FmStTensor *files_find(const Files *fs, const char *name, const char *prefix, int *which) {
  size_t pl = strlen(prefix);
  for (int pass = 0; pass < 2; pass++) {
    const char *q = name;
    if (pass == 1) {
      if (!pl || strncmp(name, prefix, pl) != 0) break;
      q = name + pl;
    }
    for (int i = 0; i < fs->n; i++) {
      const FmStTensor *t = fm_st_find(&fs->f[i], q);
      if (t) {
        *which = i;
        return t;
      }
    }
  }
  return NULL;
}

static void put_shape(FILE *err, int nd, const int64_t *shape) {
  fputc('[', err);
  for (int i = 0; i < nd; i++) fprintf(err, "%s%lld", i ? ", " : "", (long long)shape[i]);
  fputc(']', err);
}

/* A weight that is NaN or infinite (a model saved after it diverged, a
 * damaged file) makes every output NaN: refused at the import, naming the
 * first such element in the file's order, not found steps later. */
static int finite_weights(const FmStFile *f, const FmStTensor *t, const float *x, int64_t n, FILE *err) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i += 4096) { /* branch-free blocks: the scan vectorises */
    const int64_t e = i + 4096 < n ? i + 4096 : n;
    int any = 0;
    for (int64_t j = i; j < e; j++) any |= !isfinite(x[j]);
    for (int64_t j = i; any && j < e && bad < 0; j++)
      if (!isfinite(x[j])) bad = j;
  }
  if (bad < 0) return 0;
  if (err) {
    fprintf(err, "%s: tensor %s: element %lld of ", f->path, t->name, (long long)bad);
    put_shape(err, t->ndim, t->shape);
    fprintf(err, " is %s: a model's weights must be finite\nhint: the model was saved after it diverged, or the file is "
                 "damaged: use an earlier checkpoint\n", isnan(x[bad]) ? "NaN" : "infinite");
  }
  return FM_EFORMAT;
}

/* Read one HF tensor into its slice of weights (transposing Conv1D). */
static int load_one(const Files *fs, int fi, const FmStTensor *t, const FmHfTensor *h, float *weights, float *scratch,
                    FILE *err) {
  const FmStFile *f = &fs->f[fi];
  bool same = t->ndim == h->ndim;
  for (int i = 0; same && i < h->ndim; i++) same = t->shape[i] == h->shape[i];
  if (!same) {
    if (err) {
      fprintf(err, "%s: tensor %s: shape ", f->path, t->name);
      put_shape(err, t->ndim, t->shape);
      fprintf(err, " but the deck's model needs ");
      put_shape(err, h->ndim, h->shape);
      fprintf(err, " (fmhpc's %s%s)\nhint: the file does not match its own config.json, or is of another model\n",
              h->src->name, h->layer >= 0 ? ", one layer" : "");
    }
    return FM_EFORMAT;
  }
  if (!h->transpose) {
    int rc = fm_st_read_f32(f, t, weights + h->offset, err);
    return rc ? rc : finite_weights(f, t, weights + h->offset, h->numel, err);
  }
  int rc = fm_st_read_f32(f, t, scratch, err);
  if (!rc) rc = finite_weights(f, t, scratch, h->numel, err);
  const int64_t rows = h->shape[1], cols = h->shape[0]; /* ours (rows, cols); file (cols, rows) */
  float *dst = weights + h->offset;
  for (int64_t j = 0; !rc && j < cols; j++)
    for (int64_t i = 0; i < rows; i++) dst[i * cols + j] = scratch[j * rows + i];
  return rc;
}

/* A tensor no parameter took: a known buffer, a tied lm_head equal to the
 * embedding, or an error. */
static int leftover(const Files *fs, int fi, const FmStTensor *t, const FmModelKind *k, const FmModelDims *d,
                    const FmTensorTable *params, const float *weights, float *scratch, FILE *err) {
  const FmStFile *f = &fs->f[fi];
  if (fm_hf_ignorable(k, t->name)) return 0;
  const FmTensor *wte = fm_table_find(params, "wte");
  if (d->tied && wte && strcmp(t->name, "lm_head.weight") == 0 && t->ndim == 2 && t->shape[0] == d->V &&
      t->shape[1] == d->C) {
    int rc = fm_st_read_f32(f, t, scratch, err);
    if (rc) return rc;
    if (memcmp(scratch, weights + wte->offset, (size_t)wte->numel * sizeof(float)) == 0) return 0;
    if (err)
      fprintf(err,
              "%s: tensor lm_head.weight differs from the token embedding, but the deck ties them\n"
              "hint: set &model tie_embeddings = .false. (and tie_word_embeddings false in config.json)\n",
              f->path);
    return FM_EFORMAT;
  }
  if (err) {
    fprintf(err, "%s: tensor ", f->path);
    fm_json_write_str(err, t->name, strlen(t->name) < 200 ? strlen(t->name) : 200); /* untrusted: escaped */
    fprintf(err, " is not a parameter of fmhpc's %s\nhint: is this a checkpoint of another architecture?\n", k->name);
  }
  return FM_EFORMAT;
}

int fm_hf_import(const char *dir, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                 float *weights, FILE *err) {
  char *cfg = join(dir, "config.json");
  int rc = fm_hf_config_check(cfg, k, d, err);
  free(cfg);
  if (rc) return rc;
  FmHfTensor *ht = NULL;
  int n = 0;
  Files fs = {0};
  rc = fm_hf_tensors(&ht, &n, k, d, params, err);
  if (!rc) rc = open_model_files(&fs, dir, err);
  int64_t max_numel = d->V * d->C;
  for (int i = 0; i < n; i++)
    if (ht[i].numel > max_numel) max_numel = ht[i].numel;
  float *scratch = rc ? NULL : fm_xmalloc((size_t)max_numel * sizeof *scratch);
  const char *prefix = fm_hf_base_prefix(k);
  for (int i = 0; i < n && !rc; i++) {
    int fi = 0;
    const FmStTensor *t = files_find(&fs, ht[i].name, prefix, &fi);
    if (!t || !fs.used) {
      if (err)
        fprintf(err, "%s: no tensor %s (fmhpc's %s%s)\nhint: the directory holds another model, or an incomplete one\n",
                dir, ht[i].name, ht[i].src->name, ht[i].layer >= 0 ? ", one layer" : "");
      rc = FM_EFORMAT;
      break;
    }
    if (fs.used[fi][t - fs.f[fi].t]) {
      if (err)
        fprintf(err, "%s: tensor %s is stored both with and without the '%s' prefix\n", fs.f[fi].path, t->name, prefix);
      rc = FM_EFORMAT;
      break;
    }
    fs.used[fi][t - fs.f[fi].t] = true;
    rc = load_one(&fs, fi, t, &ht[i], weights, scratch, err);
  }
  for (int fi = 0; fi < fs.n && !rc; fi++)
    for (int j = 0; j < fs.f[fi].n && !rc; j++)
      if (!fs.used[fi][j]) rc = leftover(&fs, fi, &fs.f[fi].t[j], k, d, params, weights, scratch, err);
  free(scratch);
  files_close(&fs);
  free(ht);
  return rc;
}

/* ---- &run task = 'export' --------------------------------------------- */
/* The weights &model init_from names (an fmhpc checkpoint, step_N.h5, or an
 * HF directory) through the one model loader, so a checkpoint is read as
 * eval and generate read it (collective, every checksum verified, its stored
 * &model compared with the deck's); rank 0 writes out_dir/hf. The model is
 * made for one position (no training activations). */
int fm_interop_export_task(const FmDeck *deck, FmComm *world, FILE *err) {
  if (!deck->c.model.init_from[0]) {
    fm_deck_error(deck, err, FM_KEY_model_init_from,
                  "task 'export' needs weights to export: an fmhpc checkpoint (step_N.h5) or a Hugging Face model "
                  "directory (config.json + model.safetensors)");
    return FM_EDECK;
  }
  FmLoadedModel lm;
  const FmModelLoadOpts o = {.micro_batch = 1, .hf_dir = deck->c.model.init_from, .context = 1};
  int rc = fm_model_load(&lm, deck, &o, world, err);
  int32_t status = 0; /* rank 0's export */
  if (!rc && world->rank == 0) {
    char *out = join(deck->c.run.out_dir, "hf");
    const FmTensorTable *tab = fm_model_params(lm.model);
    status = fm_hf_export(out, lm.kind, &lm.dims, tab, fm_model_param_arena(lm.model), err);
    if (!status) {
      char buf[32];
      fm_log0("export: wrote %s/config.json and model.safetensors (%s parameters, fp32) from %s", out,
              fm_fmt_count(buf, sizeof buf, tab->numel), deck->c.model.init_from);
    }
    free(out);
  }
  if (lm.model) fm_model_free(lm.model);
  if (rc) return rc; /* the load's status is every rank's already */
  int brc = fm_comm_bcast(world, &status, 1, FM_DT_I32, 0);
  return brc ? brc : status;
}
