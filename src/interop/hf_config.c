/* hf_config.c: Hugging Face config.json, written on export and read and
 * checked against the deck's model on import, through the model's adapter
 * (hf_<name>.c: its keys), with the checks adapters share. The deck is the truth: config.json never fills in dims. Keys
 * a file leaves out take transformers' class defaults, as transformers does. Keys that change the math fmhpc does not
 * implement (rope_scaling, biases in Llama, GPT-2's erf GELU or layer-scaled attention) are errors. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_internal.h"

/* ---- writing ---------------------------------------------------------- */
/* The shortest decimal that reads back as v, always with a '.' or exponent so
 * Python reads a float. */
void fm__hf_put_real(FILE *out, double v) {
  char buf[40];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  fputs(buf, out);
  if (!strpbrk(buf, ".eEn")) fputs(".0", out);
}

int fm__hf_config_write_tmp(const char *path, const FmModelKind *k, const FmModelDims *d, char **tmp_path, FILE *err) {
  *tmp_path = NULL;
  const FmHfKind *h = fm__hf_kind(k);
  if (!h) {
    if (err) fprintf(err, "%s: model '%s' has no Hugging Face config mapping\n", path, k->name);
    return FM_EUNSUPPORTED;
  }
  FmStr tmp;
  fm_str_init(&tmp);
  fm_str_printf(&tmp, "%s.tmp.%ld", path, (long)getpid()); /* ranks sharing a directory do not collide */
  FILE *o = fopen(tmp.s, "w");
  if (!o) {
    if (err) fprintf(err, "%s: cannot create: %s\n", tmp.s, strerror(errno));
    fm_str_free(&tmp);
    return FM_EIO;
  }
  h->write_config(o, d);
  int rc = fflush(o) != 0 || ferror(o) || fsync(fileno(o)) != 0 ? FM_EIO : 0;
  if (rc && err) fprintf(err, "%s: cannot write: %s\n", tmp.s, strerror(errno));
  if (fclose(o) != 0 && !rc) {
    if (err) fprintf(err, "%s: cannot write: %s\n", tmp.s, strerror(errno));
    rc = FM_EIO;
  }
  if (rc) {
    remove(tmp.s);
    fm_str_free(&tmp);
  } else {
    *tmp_path = tmp.s;
  }
  return rc;
}

int fm_hf_config_write(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err) {
  char *tmp = NULL;
  int rc = fm__hf_config_write_tmp(path, k, d, &tmp, err);
  if (!rc && rename(tmp, path) != 0) {
    if (err) fprintf(err, "%s: cannot rename %s over it: %s\n", path, tmp, strerror(errno));
    remove(tmp);
    rc = FM_EIO;
  }
  free(tmp);
  return rc;
}

/* ---- reading and checking --------------------------------------------- */
void fm__hf_problem(FmHfCheck *c, const char *fmt, ...) {
  c->rc = FM_EDECK;
  if (!c->err) return;
  fprintf(c->err, "%s: ", c->path);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->err, fmt, ap);
  va_end(ap);
  fputc('\n', c->err);
}

/* A key's value, or NULL when absent or JSON null (both mean the default). */
const FmJson *fm__hf_get(const FmHfCheck *c, const char *key) {
  const FmJson *v = fm_json_get(c->root, key);
  return v && v->type != FM_JSON_NULL ? v : NULL;
}

/* An integer key (default def when absent) equal to the deck's value. */
void fm__hf_check_int(FmHfCheck *c, const char *key, int64_t def, const char *deck_key, int64_t deck_val) {
  const FmJson *v = fm__hf_get(c, key);
  if (v && (v->type != FM_JSON_NUM || !v->is_int)) {
    fm__hf_problem(c, "\"%s\" must be an integer, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  int64_t x = v ? v->i : def;
  if (x != deck_val) {
    fm__hf_problem(c, "\"%s\" = %lld%s but the deck's &model %s gives %lld", key, (long long)x, v ? "" : " (default)",
                   deck_key, (long long)deck_val);
    fm_str_printf(&c->fix, " %s = %lld", deck_key, (long long)x);
  }
}

/* A real key, compared as fp32 (the precision it is used at). */
void fm__hf_check_real(FmHfCheck *c, const char *key, double def, const char *deck_key, double deck_val) {
  const FmJson *v = fm__hf_get(c, key);
  if (v && v->type != FM_JSON_NUM) {
    fm__hf_problem(c, "\"%s\" must be a number, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  double x = v ? v->num : def;
  if ((float)x != (float)deck_val) {
    fm__hf_problem(c, "\"%s\" = %g%s but the deck's &model %s = %g", key, x, v ? "" : " (default)", deck_key, deck_val);
    fm_str_printf(&c->fix, " %s = %g", deck_key, x);
  }
}

void fm__hf_check_bool(FmHfCheck *c, const char *key, bool def, const char *deck_key, bool deck_val) {
  const FmJson *v = fm__hf_get(c, key);
  if (v && v->type != FM_JSON_BOOL) {
    fm__hf_problem(c, "\"%s\" must be true or false, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  bool x = v ? v->b : def;
  if (x != deck_val) {
    fm__hf_problem(c, "\"%s\" = %s%s but the deck's &model %s = %s", key, x ? "true" : "false", v ? "" : " (default)",
                   deck_key, deck_val ? ".true." : ".false.");
    fm_str_printf(&c->fix, " %s = %s", deck_key, x ? ".true." : ".false.");
  }
}

/* A key fmhpc supports only at one value (want; absent means def). */
void fm__hf_check_fixed_bool(FmHfCheck *c, const char *key, bool def, bool want, const char *why) {
  const FmJson *v = fm__hf_get(c, key);
  bool x = v && v->type == FM_JSON_BOOL ? v->b : def;
  if ((v && v->type != FM_JSON_BOOL) || x != want)
    fm__hf_problem(c, "\"%s\" must be %s: %s", key, want ? "true" : "false", why);
}

/* A string key that must be one of `ok` (NULL-terminated); absent means def. */
void fm__hf_check_str(FmHfCheck *c, const char *key, const char *def, const char *const *ok, const char *why) {
  const FmJson *v = fm__hf_get(c, key);
  if (v && v->type != FM_JSON_STR) {
    fm__hf_problem(c, "\"%s\" must be a string, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  const char *x = v ? v->s : def;
  for (const char *const *s = ok; *s; s++)
    if (strcmp(x, *s) == 0) return;
  fm__hf_problem(c, "\"%s\" = \"%.60s\": %s", key, x, why);
}

/* Integer keys that a check computes with (a default of 4 * n_embd, of
 * hidden_size / num_attention_heads) must be in range before any arithmetic:
 * n_embd = 4e18 is reported, not multiplied. Each out of range is reported;
 * false when any is. Non-integers are left to fm__hf_check_int. */
bool fm__hf_check_ranges(FmHfCheck *c, const FmHfRange *r, int n) {
  bool ok = true;
  for (int i = 0; i < n; i++) {
    const FmJson *v = fm__hf_get(c, r[i].key);
    if (!v || v->type != FM_JSON_NUM || !v->is_int || (v->i >= r[i].lo && v->i <= r[i].hi)) continue;
    fm__hf_problem(c, "\"%s\" = %lld: must be in [%lld, %lld]", r[i].key, (long long)v->i, (long long)r[i].lo,
                   (long long)r[i].hi);
    ok = false;
  }
  return ok;
}

/* stat() first: open() of a FIFO blocks, and fm_read_file reads a device
 * such as /dev/zero until memory runs out. */
int fm__hf_read_json_file(const char *path, char **text, size_t *len) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISREG(st.st_mode) || st.st_size > FM_HF_MAX_JSON_BYTES) {
    errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
    return -1;
  }
  return fm_read_file(path, text, len);
}

/* A key twice in one object of config.json: Python's json (so transformers)
 * keeps the last value, fm_json_get the first; the two would build
 * different models from one file. The first such key, or NULL. */
typedef struct KeyRef {
  const char *s;
  size_t n;
} KeyRef;
static int cmp_key(const void *a, const void *b) {
  const KeyRef *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return memcmp(x->s, y->s, x->n);
}
static const KeyRef *twice(const FmJson *v, KeyRef *scratch, KeyRef *found) {
  if (v->type == FM_JSON_OBJ && v->n > 1) {
    for (int64_t i = 0; i < v->n; i++) scratch[i] = (KeyRef){v->keys[i], v->keylens[i]};
    qsort(scratch, (size_t)v->n, sizeof *scratch, cmp_key);
    for (int64_t i = 1; i < v->n; i++)
      if (!cmp_key(&scratch[i - 1], &scratch[i])) {
        *found = scratch[i];
        return found;
      }
  }
  if (v->type == FM_JSON_OBJ || v->type == FM_JSON_ARR)
    for (int64_t i = 0; i < v->n; i++)
      if (twice(&v->items[i], scratch, found)) return found;
  return NULL;
}

int fm_hf_config_check(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (err)
      fprintf(err, "%s: cannot open: %s\nhint: a Hugging Face model directory has config.json and model.safetensors\n",
              path, strerror(errno));
    return FM_EIO;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > FM_HF_MAX_JSON_BYTES) {
    if (err) fprintf(err, "%s: not a config.json (not a regular file, or over 16 MiB)\n", path);
    return FM_EFORMAT;
  }
  char *text = NULL;
  size_t len = 0;
  if (fm_read_file(path, &text, &len) != 0) {
    if (err) fprintf(err, "%s: cannot read: %s\n", path, strerror(errno));
    return FM_EIO;
  }
  FmJsonDoc doc;
  FmJsonError je;
  memset(&je, 0, sizeof je);
  if (fm_json_parse(&doc, text, len, 64, &je) != 0) {
    if (err) fprintf(err, "%s:%d:%d: %s\n", path, je.line, je.col, je.msg);
    free(text);
    return FM_EFORMAT;
  }
  KeyRef *scratch = fm_xmalloc((len / 4 + 1) * sizeof *scratch), dup; /* a member takes at least 4 bytes: "":0 */
  const bool dups = twice(&doc.root, scratch, &dup) != NULL;
  free(scratch);
  if (dups) {
    if (err) {
      fprintf(err, "%s: key ", path);
      fm_json_write_str(err, dup.s, dup.n < 60 ? dup.n : 60);
      fprintf(err, " appears twice in one object (transformers keeps the last value; which one is meant?)\n"
                   "hint: keep one of them\n");
    }
    fm_json_free(&doc);
    free(text);
    return FM_EFORMAT;
  }
  FmHfCheck c = {.path = path, .root = &doc.root, .err = err};
  const FmHfKind *h = fm__hf_kind(k);
  fm_str_init(&c.fix);
  const FmJson *mt = doc.root.type == FM_JSON_OBJ ? fm_json_get(&doc.root, "model_type") : NULL;
  if (doc.root.type != FM_JSON_OBJ) {
    fm__hf_problem(&c, "not a JSON object");
  } else if (!mt || mt->type != FM_JSON_STR) {
    fm__hf_problem(&c, "no \"model_type\" string; the deck's &model arch is '%s'", k->name);
  } else if (strcmp(mt->s, k->name) != 0) {
    fm__hf_problem(&c, "\"model_type\" = \"%.40s\" but the deck's &model arch = '%s'", mt->s, k->name);
  } else if (h) {
    h->check_config(&c, d);
  } else {
    if (err) fprintf(err, "%s: model '%s' has no Hugging Face config mapping\n", path, k->name);
    c.rc = FM_EUNSUPPORTED;
  }
  if (c.rc == FM_EDECK && c.fix.len && err)
    fprintf(err, "hint: to match this model, set in the deck: &model%s /\n", c.fix.s);
  else if (c.rc == FM_EDECK && err)
    fprintf(err, "hint: this model cannot be loaded into fmhpc's %s as it is\n", k->name);
  fm_str_free(&c.fix);
  fm_json_free(&doc);
  free(text);
  return c.rc;
}
