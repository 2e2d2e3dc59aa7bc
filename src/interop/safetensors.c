/* safetensors.c: the safetensors reader and writer, from the format's spec
 * (huggingface/safetensors README and its reference implementation):
 *   8 bytes   N, unsigned little-endian: the header length
 *   N bytes   JSON object {name: {dtype, shape, data_offsets: [begin, end]},
 *             "__metadata__": {string: string}}, starting with '{', padded
 *             with spaces
 *   the rest  the data region; offsets are relative to its start, and the
 *             tensors cover it exactly (no holes, no overlaps).
 * Every header field is untrusted: each check below has its own message
 * naming the file, the tensor and the rule. Data is read with pread, never
 * mapped. What lives elsewhere: HF names and layouts (hf_names.c), config.json
 * (hf_config.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmhpc/interop.h"
#include "fmhpc/json.h"

/* ---- dtypes ----------------------------------------------------------- */
static const char *const dtype_names[] = {
#define FM__X(name, size) #name,
    FM_ST_DTYPES(FM__X)
#undef FM__X
};
static const size_t dtype_sizes[] = {
#define FM__X(name, size) size,
    FM_ST_DTYPES(FM__X)
#undef FM__X
};

const char *fm_st_dtype_name(FmStDType t) { return (unsigned)t < FM_ST_NDTYPES ? dtype_names[t] : "?"; }
size_t fm_st_dtype_size(FmStDType t) { return (unsigned)t < FM_ST_NDTYPES ? dtype_sizes[t] : 0; }

int fm_st_dtype_parse(const char *name) {
  for (int i = 0; i < FM_ST_NDTYPES; i++)
    if (strcmp(dtype_names[i], name) == 0) return i;
  return -1;
}

static bool host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- errors ----------------------------------------------------------- */
/* A name from the file, printed safely: JSON-escaped, at most 120 bytes. */
static void put_name(FILE *err, const char *s) {
  size_t n = strlen(s), max = 120;
  if (n <= max) {
    fm_json_write_str(err, s, n);
    return;
  }
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) max--; /* whole UTF-8 characters */
  fm_json_write_str(err, s, max);
  fprintf(err, "... (%zu bytes)", n);
}

/* "path: tensor "name": rule" and a hint line; returns FM_EFORMAT. */
static int bad(FILE *err, const char *path, const char *tensor, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(FILE *err, const char *path, const char *tensor, const char *hint, const char *fmt, ...) {
  if (!err) return FM_EFORMAT;
  fprintf(err, "%s: ", path);
  if (tensor) {
    fputs("tensor ", err);
    put_name(err, tensor);
    fputs(": ", err);
  }
  va_list ap;
  va_start(ap, fmt);
  fm_vsay(err, hint, fmt, ap);
  va_end(ap);
  return FM_EFORMAT;
}

/* A short printable copy of a name from the file, for inside a message. */
static const char *printable(char *buf, size_t n, const char *s) {
  size_t i = 0;
  for (; s[i] && i + 1 < n; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i];
  buf[i] = 0;
  return buf;
}

static const char *const hint_corrupt =
    "the file is truncated or corrupted, or not a safetensors file: copy or download it again";

/* ---- reading ---------------------------------------------------------- */
/* pread all n bytes at off; FM_EIO on an error or a short read. */
static int pread_all(int fd, void *buf, size_t n, int64_t off, const char *path, FILE *err) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (err)
        fprintf(err, "%s: cannot read %zu bytes at offset %lld: %s\n", path, n, (long long)off,
                r < 0 ? strerror(errno) : "unexpected end of file (the file shrank while being read?)");
      return FM_EIO;
    }
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return 0;
}

/* Sorting views of tensors (a struct, so sizeof is of an aggregate). */
typedef struct Ref {
  const FmStTensor *t;
} Ref;

static int cmp_by_name(const void *a, const void *b) {
  return strcmp(((const FmStTensor *)a)->name, ((const FmStTensor *)b)->name);
}

static int cmp_by_offsets(const void *a, const void *b) {
  const FmStTensor *x = ((const Ref *)a)->t, *y = ((const Ref *)b)->t;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* A non-negative integer that fits int64 (the JSON reader keeps it exact). */
static bool json_count(const FmJson *v, int64_t *out) {
  if (v->type != FM_JSON_NUM || !v->is_int || v->i < 0) return false;
  *out = v->i;
  return true;
}

static bool has_nul(const char *s, size_t len) { return strlen(s) != len; }

static int parse_metadata(FmStFile *f, const FmJson *v, FILE *err) {
  if (v->type != FM_JSON_OBJ)
    return bad(err, f->path, NULL, "the spec allows only a string-to-string map there",
               "\"__metadata__\" is a JSON %s, not an object", fm_json_type_name(v->type));
  char pb[64];
  f->meta = fm_xcalloc((size_t)v->n + 1, sizeof *f->meta);
  for (int64_t i = 0; i < v->n; i++) {
    const FmJson *s = &v->items[i];
    if (s->type != FM_JSON_STR)
      return bad(err, f->path, NULL, "the spec allows only a string-to-string map there",
                 "\"__metadata__\" member \"%s\" is a JSON %s, not a string", printable(pb, sizeof pb, v->keys[i]),
                 fm_json_type_name(s->type));
    if (has_nul(v->keys[i], v->keylens[i]) || has_nul(s->s, s->len))
      return bad(err, f->path, NULL, NULL, "\"__metadata__\" holds a NUL character");
    f->meta[f->nmeta].key = fm_xstrdup(v->keys[i]);
    f->meta[f->nmeta].value = fm_xstrdup(s->s);
    f->nmeta++;
  }
  return 0;
}

static int parse_shape(FmStFile *f, FmStTensor *t, const FmJson *v, FILE *err) {
  if (v->type != FM_JSON_ARR)
    return bad(err, f->path, t->name, NULL, "\"shape\" is a JSON %s, not an array of sizes",
               fm_json_type_name(v->type));
  if (v->n > FM_ST_MAX_DIMS)
    return bad(err, f->path, t->name, NULL, "shape has %lld dimensions; fmhpc reads at most %d", (long long)v->n,
               FM_ST_MAX_DIMS);
  t->ndim = (int)v->n;
  for (int d = 0; d < t->ndim; d++)
    if (!json_count(&v->items[d], &t->shape[d]))
      return bad(err, f->path, t->name, hint_corrupt, "shape[%d] is not a non-negative integer", d);
  return 0;
}

static int parse_offsets(FmStFile *f, FmStTensor *t, const FmJson *v, FILE *err) {
  if (v->type != FM_JSON_ARR || v->n != 2)
    return bad(err, f->path, t->name, NULL, "\"data_offsets\" must be an array [begin, end]");
  if (!json_count(&v->items[0], &t->begin) || !json_count(&v->items[1], &t->end))
    return bad(err, f->path, t->name, hint_corrupt, "data_offsets must be non-negative integers");
  return 0;
}

/* One header entry: {dtype, shape, data_offsets}, checked on its own. */
static int parse_tensor(FmStFile *f, FmStTensor *t, const FmJson *v, int64_t data_len, FILE *err) {
  if (v->type != FM_JSON_OBJ)
    return bad(err, f->path, t->name, NULL, "entry is a JSON %s, not an object {dtype, shape, data_offsets}",
               fm_json_type_name(v->type));
  const FmJson *dt = NULL, *shape = NULL, *offs = NULL;
  char pb[64];
  for (int64_t i = 0; i < v->n; i++) {
    const char *k = v->keys[i];
    const FmJson **slot = !strcmp(k, "dtype")          ? &dt
                          : !strcmp(k, "shape")        ? &shape
                          : !strcmp(k, "data_offsets") ? &offs
                                                       : NULL;
    if (!slot)
      return bad(err, f->path, t->name, "an entry has exactly dtype, shape and data_offsets", "unknown member \"%s\"",
                 printable(pb, sizeof pb, k));
    if (*slot) return bad(err, f->path, t->name, NULL, "member \"%s\" appears twice", k);
    *slot = &v->items[i];
  }
  if (!dt || !shape || !offs)
    return bad(err, f->path, t->name, "an entry has exactly dtype, shape and data_offsets", "no \"%s\"",
               !dt      ? "dtype"
               : !shape ? "shape"
                        : "data_offsets");
  if (dt->type != FM_JSON_STR) return bad(err, f->path, t->name, NULL, "\"dtype\" is not a string");
  int code = fm_st_dtype_parse(dt->s);
  if (code < 0)
    return bad(err, f->path, t->name,
               "known dtypes: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64",
               "unknown dtype \"%s\"", printable(pb, sizeof pb, dt->s));
  t->dtype = (FmStDType)code;
  int rc = parse_shape(f, t, shape, err);
  if (!rc) rc = parse_offsets(f, t, offs, err);
  if (rc) return rc;
  /* numel * size must equal end - begin, without overflow. */
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] != 0 && numel > INT64_MAX / t->shape[d])
      return bad(err, f->path, t->name, hint_corrupt, "shape's element count overflows 64 bits");
    numel *= t->shape[d];
  }
  const int64_t size = (int64_t)fm_st_dtype_size(t->dtype);
  if (size == 0 || numel > INT64_MAX / size)
    return bad(err, f->path, t->name, hint_corrupt, "shape's byte count overflows 64 bits");
  t->numel = numel;
  const int64_t nbytes = numel * size;
  if (t->begin > t->end)
    return bad(err, f->path, t->name, hint_corrupt, "data_offsets [%lld, %lld] end before they begin",
               (long long)t->begin, (long long)t->end);
  if (t->end > data_len)
    return bad(err, f->path, t->name, hint_corrupt,
               "data_offsets [%lld, %lld] run past the data region, which is %lld bytes (file truncated?)",
               (long long)t->begin, (long long)t->end, (long long)data_len);
  if (t->end - t->begin != nbytes)
    return bad(err, f->path, t->name, hint_corrupt,
               "shape and dtype give %lld bytes (%lld x %s) but data_offsets [%lld, %lld] hold %lld", (long long)nbytes,
               (long long)numel, fm_st_dtype_name(t->dtype), (long long)t->begin, (long long)t->end,
               (long long)(t->end - t->begin));
  return 0;
}

/* The spec: the tensors index the whole data region, no holes, no overlaps. */
static int check_coverage(const FmStFile *f, int64_t data_len, FILE *err) {
  Ref *by = fm_xmalloc(((size_t)f->n + 1) * sizeof *by);
  for (int i = 0; i < f->n; i++) by[i].t = &f->t[i];
  qsort(by, (size_t)f->n, sizeof *by, cmp_by_offsets);
  int rc = 0;
  int64_t pos = 0;
  char pb[128];
  for (int i = 0; i < f->n && !rc; i++) {
    const FmStTensor *t = by[i].t;
    if (t->begin < pos)
      rc = bad(err, f->path, t->name, hint_corrupt, "data_offsets [%lld, %lld] overlap those of tensor \"%s\"",
               (long long)t->begin, (long long)t->end, printable(pb, sizeof pb, by[i - 1].t->name));
    else if (t->begin > pos)
      rc = bad(err, f->path, t->name, "the spec requires tensors to cover the data region without holes",
               "data_offsets begin at %lld, leaving a hole of %lld bytes after %s", (long long)t->begin,
               (long long)(t->begin - pos), i ? "the previous tensor" : "the start of the data region");
    pos = t->end;
  }
  if (!rc && pos != data_len)
    rc = bad(err, f->path, NULL, "the spec requires tensors to cover the data region without holes",
             "%lld bytes after the last tensor's data (data region %lld bytes, tensors end at %lld)",
             (long long)(data_len - pos), (long long)data_len, (long long)pos);
  free(by);
  return rc;
}

static int check_unique(const FmStFile *f, FILE *err) {
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->t[i - 1].name, f->t[i].name) == 0)
      return bad(err, f->path, f->t[i].name, "the spec disallows duplicate names", "appears twice in the header");
  return 0;
}

/* Parse the header JSON (already read) into f. */
static int parse_header(FmStFile *f, const char *text, int64_t len, int64_t data_len, FILE *err) {
  if (len < 2 || text[0] != '{')
    return bad(err, f->path, NULL, hint_corrupt,
               "the header does not start with '{' (the spec requires a JSON object)");
  FmJsonDoc doc;
  FmJsonError je;
  memset(&je, 0, sizeof je);
  if (fm_json_parse(&doc, text, (size_t)len, 64, &je) != 0)
    return bad(err, f->path, NULL, hint_corrupt, "header JSON at line %d, column %d (byte %lld of the file): %s",
               je.line, je.col, (long long)je.offset + 8, je.msg);
  int rc = 0;
  const FmJson *root = &doc.root;
  if (root->type != FM_JSON_OBJ) {
    rc = bad(err, f->path, NULL, NULL, "the header is a JSON %s, not an object", fm_json_type_name(root->type));
    goto done;
  }
  f->t = fm_xcalloc((size_t)root->n + 1, sizeof *f->t);
  bool seen_meta = false;
  for (int64_t i = 0; i < root->n && !rc; i++) {
    const char *key = root->keys[i];
    if (has_nul(key, root->keylens[i])) {
      rc = bad(err, f->path, NULL, hint_corrupt, "a tensor name holds a NUL character");
    } else if (strcmp(key, "__metadata__") == 0) {
      if (seen_meta)
        rc = bad(err, f->path, NULL, "the spec disallows duplicate names", "\"__metadata__\" appears twice");
      seen_meta = true;
      if (!rc) rc = parse_metadata(f, &root->items[i], err);
    } else {
      FmStTensor *t = &f->t[f->n++];
      t->name = fm_xstrdup(key);
      rc = parse_tensor(f, t, &root->items[i], data_len, err);
    }
  }
  if (!rc) {
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_by_name);
    rc = check_unique(f, err);
  }
  if (!rc) rc = check_coverage(f, data_len, err);
done:
  fm_json_free(&doc);
  return rc;
}

int fm_st_open(FmStFile *f, const char *path, FILE *err) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->path = fm_xstrdup(path);
  if (!host_little_endian()) {
    if (err)
      fprintf(err, "%s: safetensors data is little-endian; this build reads it only on little-endian hosts\n", path);
    return FM_EUNSUPPORTED;
  }
  /* O_NONBLOCK: open() of a FIFO would wait for a writer forever; the
   * S_ISREG check below then refuses it. Regular files ignore the flag. */
  f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (f->fd < 0 || fstat(f->fd, &st) != 0) {
    if (err) fprintf(err, "%s: cannot open: %s\nhint: check the path and permissions\n", path, strerror(errno));
    fm_st_close(f);
    return FM_EIO;
  }
  int rc = 0;
  char *text = NULL;
  const int64_t size = (int64_t)st.st_size;
  unsigned char b8[8];
  if (!S_ISREG(st.st_mode)) {
    rc = bad(err, path, NULL, NULL, "not a regular file");
  } else if (size < 8) {
    rc = bad(err, path, NULL, hint_corrupt, "the file is %lld bytes, too short for the 8-byte header length",
             (long long)size);
  } else if (!(rc = pread_all(f->fd, b8, 8, 0, path, err))) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b8[i];
    if (n > FM_ST_MAX_HEADER)
      rc = bad(err, path, NULL, hint_corrupt, "header length %llu is over the format's 100 MB limit",
               (unsigned long long)n);
    else if ((int64_t)n > size - 8)
      rc = bad(err, path, NULL, hint_corrupt,
               "header length %llu runs past the end of the file (%lld bytes): the file is truncated",
               (unsigned long long)n, (long long)size);
    else {
      text = fm_xmalloc((size_t)n + 1);
      rc = pread_all(f->fd, text, (size_t)n, 8, path, err);
      text[n] = 0;
      f->data_start = 8 + (int64_t)n;
      if (!rc) rc = parse_header(f, text, (int64_t)n, size - f->data_start, err);
    }
  }
  free(text);
  if (rc) fm_st_close(f);
  return rc;
}

void fm_st_close(FmStFile *f) {
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  for (int i = 0; i < f->nmeta; i++) {
    free(f->meta[i].key);
    free(f->meta[i].value);
  }
  free(f->t);
  free(f->meta);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

const FmStTensor *fm_st_find(const FmStFile *f, const char *name) {
  int lo = 0, hi = f->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(f->t[mid].name, name);
    if (c == 0) return &f->t[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

const char *fm_st_meta(const FmStFile *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
  return NULL;
}

int fm_st_read_raw(const FmStFile *f, const FmStTensor *t, void *out, FILE *err) {
  return pread_all(f->fd, out, (size_t)(t->end - t->begin), f->data_start + t->begin, f->path, err);
}

/* IEEE binary16 -> binary32, exact (subnormals, infinities, NaNs kept). */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | man << 13;
  } else if (exp != 0) {
    bits = sign | (exp + 112u) << 23 | man << 13;
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: normalise */
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while (!(man & 0x400u));
    bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3FFu) << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

int fm_st_read_f32(const FmStFile *f, const FmStTensor *t, float *out, FILE *err) {
  if (t->dtype == FM_ST_F32) return fm_st_read_raw(f, t, out, err);
  if (t->dtype != FM_ST_F16 && t->dtype != FM_ST_BF16 && t->dtype != FM_ST_F64)
    return bad(err, f->path, t->name, "weights are read from F32, F16, BF16 or F64 tensors",
               "dtype %s is not a floating-point type fmhpc converts", fm_st_dtype_name(t->dtype));
  const size_t es = fm_st_dtype_size(t->dtype), chunk = 1 << 16; /* elements per read */
  unsigned char *buf = fm_xmalloc(chunk * es);
  int rc = 0;
  for (int64_t i0 = 0; i0 < t->numel && !rc; i0 += (int64_t)chunk) {
    size_t m = (size_t)(t->numel - i0 < (int64_t)chunk ? t->numel - i0 : (int64_t)chunk);
    rc = pread_all(f->fd, buf, m * es, f->data_start + t->begin + i0 * (int64_t)es, f->path, err);
    for (size_t j = 0; j < m && !rc; j++) {
      if (t->dtype == FM_ST_F64) {
        double v;
        memcpy(&v, buf + 8 * j, 8);
        out[i0 + (int64_t)j] = (float)v;
      } else {
        uint16_t h;
        memcpy(&h, buf + 2 * j, 2);
        out[i0 + (int64_t)j] = t->dtype == FM_ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
  }
  free(buf);
  return rc;
}

/* ---- writing ---------------------------------------------------------- */
/* The reference order: dtype descending (widest alignment first), then name. */
static int cmp_write_order(const void *a, const void *b) {
  const FmStTensor *x = ((const Ref *)a)->t, *y = ((const Ref *)b)->t;
  if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_ref_by_name(const void *a, const void *b) {
  return strcmp(((const Ref *)a)->t->name, ((const Ref *)b)->t->name);
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(((const FmStMeta *)a)->key, ((const FmStMeta *)b)->key);
}

static int write_all(int fd, const void *buf, size_t n, const char *path, FILE *err) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (err) fprintf(err, "%s: write failed: %s\nhint: is the file system full?\n", path, strerror(errno));
      return FM_EIO;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Header JSON of the sorted tensors, padded with spaces to a multiple of 8. */
static char *build_header(const Ref *ord, int n, const FmStMeta *meta, int nmeta, size_t *len) {
  char *s = NULL;
  size_t sl = 0;
  FILE *h = open_memstream(&s, &sl);
  if (!h) return NULL;
  fputc('{', h);
  if (nmeta > 0) {
    FmStMeta *m = fm_xmalloc((size_t)nmeta * sizeof *m);
    memcpy(m, meta, (size_t)nmeta * sizeof *m);
    qsort(m, (size_t)nmeta, sizeof *m, cmp_meta);
    fputs("\"__metadata__\":{", h);
    for (int i = 0; i < nmeta; i++) {
      if (i) fputc(',', h);
      fm_json_write_str(h, m[i].key, strlen(m[i].key));
      fputc(':', h);
      fm_json_write_str(h, m[i].value, strlen(m[i].value));
    }
    fputc('}', h);
    free(m);
  }
  for (int i = 0; i < n; i++) {
    const FmStTensor *t = ord[i].t;
    if (i || nmeta > 0) fputc(',', h);
    fm_json_write_str(h, t->name, strlen(t->name));
    fprintf(h, ":{\"dtype\":\"%s\",\"shape\":[", fm_st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) fprintf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    fprintf(h, "],\"data_offsets\":[%lld,%lld]}", (long long)t->begin, (long long)t->end);
  }
  fputc('}', h);
  fclose(h);
  size_t pad = (8 - sl % 8) % 8;
  s = fm_xrealloc(s, sl + pad + 1);
  memset(s + sl, ' ', pad);
  s[sl + pad] = 0;
  *len = sl + pad;
  return s;
}

/* Check the caller's tensors and lay them out: begin/end in write order. */
static int plan_write(const char *path, int n, FmStTensor *t, Ref *ord, FmStFill fill, FILE *err, int64_t *max_fill) {
  *max_fill = 0;
  for (int i = 0; i < n; i++) {
    FmStTensor *x = &t[i];
    if ((unsigned)x->dtype >= FM_ST_NDTYPES || x->ndim < 0 || x->ndim > FM_ST_MAX_DIMS || !x->name || !x->name[0]) {
      if (err) fprintf(err, "%s: tensor %d: bad dtype, rank or empty name\n", path, i);
      return FM_EINVAL;
    }
    int64_t numel = 1;
    for (int d = 0; d < x->ndim; d++) numel *= x->shape[d];
    x->numel = numel;
    if (!x->data && !fill) {
      if (err) fprintf(err, "%s: tensor %s has no data and no fill callback\n", path, x->name);
      return FM_EINVAL;
    }
    ord[i].t = x;
  }
  qsort(ord, (size_t)n, sizeof *ord, cmp_write_order);
  int64_t pos = 0;
  for (int i = 0; i < n; i++) {
    FmStTensor *x = &t[ord[i].t - t];
    x->begin = pos;
    x->end = pos + x->numel * (int64_t)fm_st_dtype_size(x->dtype);
    pos = x->end;
    if (!x->data && x->end - x->begin > *max_fill) *max_fill = x->end - x->begin;
  }
  Ref *by = fm_xmalloc(((size_t)n + 1) * sizeof *by); /* names unique across dtypes too */
  memcpy(by, ord, (size_t)n * sizeof *by);
  qsort(by, (size_t)n, sizeof *by, cmp_ref_by_name);
  int rc = 0;
  for (int i = 1; i < n && !rc; i++)
    if (strcmp(by[i - 1].t->name, by[i].t->name) == 0) {
      if (err) fprintf(err, "%s: tensor %s given twice\n", path, by[i].t->name);
      rc = FM_EINVAL;
    }
  free(by);
  return rc;
}

/* fsync the directory holding path, so the rename itself is durable. */
static void fsync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = !slash ? fm_xstrdup(".") : fm_xstrndup(path, slash == path ? 1 : (size_t)(slash - path));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd); /* best effort: some file systems refuse fsync on directories */
    close(fd);
  }
  free(dir);
}

int fm_st_write_tmp(const char *path, int n, FmStTensor *t, int nmeta, const FmStMeta *meta, FmStFill fill, void *ctx,
                    char **tmp_path, FILE *err) {
  *tmp_path = NULL;
  if (!host_little_endian()) {
    if (err)
      fprintf(err, "%s: safetensors data is little-endian; this build writes it only on little-endian hosts\n", path);
    return FM_EUNSUPPORTED;
  }
  Ref *ord = fm_xmalloc(((size_t)n + 1) * sizeof *ord);
  int64_t max_fill = 0;
  int rc = plan_write(path, n, t, ord, fill, err, &max_fill);
  if (rc) {
    free(ord);
    return rc;
  }
  size_t hlen = 0;
  char *header = build_header(ord, n, meta, nmeta, &hlen);
  if (!header) {
    if (err) fprintf(err, "%s: cannot build the header: %s\n", path, strerror(errno));
    free(ord);
    return FM_ENOMEM;
  }
  FmStr tmp;
  fm_str_init(&tmp);
  fm_str_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp.s, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (err)
      fprintf(err, "%s: cannot create: %s\nhint: does the directory exist and is it writable?\n", tmp.s,
              strerror(errno));
    rc = FM_EIO;
  }
  unsigned char b8[8];
  for (int i = 0; i < 8; i++) b8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  if (!rc) rc = write_all(fd, b8, 8, tmp.s, err);
  if (!rc) rc = write_all(fd, header, hlen, tmp.s, err);
  void *scratch = max_fill > 0 ? fm_xmalloc((size_t)max_fill) : NULL;
  for (int i = 0; i < n && !rc; i++) {
    const FmStTensor *x = ord[i].t;
    const void *bytes = x->data;
    if (!bytes) {
      rc = fill(ctx, x, scratch);
      if (rc && err) fprintf(err, "%s: producing tensor %s failed: %s\n", path, x->name, fm_strerror(rc));
      bytes = scratch;
    }
    if (!rc) rc = write_all(fd, bytes, (size_t)(x->end - x->begin), tmp.s, err);
  }
  if (!rc && fsync(fd) != 0) {
    if (err) fprintf(err, "%s: fsync failed: %s\n", tmp.s, strerror(errno));
    rc = FM_EIO;
  }
  if (fd >= 0 && close(fd) != 0 && !rc) {
    if (err) fprintf(err, "%s: close failed: %s\n", tmp.s, strerror(errno));
    rc = FM_EIO;
  }
  if (rc) {
    unlink(tmp.s);
    fm_str_free(&tmp);
  } else {
    *tmp_path = tmp.s;
  }
  free(scratch);
  free(header);
  free(ord);
  return rc;
}

int fm_st_write(const char *path, int n, FmStTensor *t, int nmeta, const FmStMeta *meta, FmStFill fill, void *ctx,
                FILE *err) {
  char *tmp = NULL;
  int rc = fm_st_write_tmp(path, n, t, nmeta, meta, fill, ctx, &tmp, err);
  if (!rc && rename(tmp, path) != 0) {
    if (err) fprintf(err, "%s: cannot rename %s over it: %s\n", path, tmp, strerror(errno));
    unlink(tmp);
    rc = FM_EIO;
  }
  if (!rc) fsync_dir_of(path);
  free(tmp);
  return rc;
}
