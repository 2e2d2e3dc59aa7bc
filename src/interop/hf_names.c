/* hf_names.c: the Hugging Face tensor list of a model: its adapter's name map
 * (hf_<name>.c, one per models.def line) walked over the model's parameter
 * table: which HF tensor holds which slice of which canonical (stacked)
 * tensor, and in which layout. File I/O is elsewhere (safetensors.c, hf.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_internal.h"

#define FM_MODEL(n) extern const FmHfKind fm_hf_##n;
#include "fmhpc/models.def"
#undef FM_MODEL

static const FmHfKind *const adapters[] = {
#define FM_MODEL(n) &fm_hf_##n,
#include "fmhpc/models.def"
#undef FM_MODEL
};

const FmHfKind *fm__hf_kind(const FmModelKind *k) {
  for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++)
    if (strcmp(adapters[i]->model, k->name) == 0) return adapters[i];
  return NULL;
}

const char *fm_hf_base_prefix(const FmModelKind *k) {
  const FmHfKind *m = fm__hf_kind(k);
  return m ? m->base_prefix : "";
}

bool fm_hf_ignorable(const FmModelKind *k, const char *hf_name) {
  const FmHfKind *m = fm__hf_kind(k);
  if (!m) return false;
  size_t n = strlen(hf_name);
  for (const char *const *s = m->ignorable; *s; s++) {
    size_t sn = strlen(*s);
    if (n > sn && strcmp(hf_name + n - sn, *s) == 0) return true;
  }
  return false;
}

static const FmHfMapEntry *find_entry(const FmHfKind *m, const char *canon) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->map[i].canon, canon) == 0) return &m->map[i];
  return NULL;
}

/* One HF tensor: layer `layer` (or -1) of canonical tensor t. */
static int add_tensor(FmHfTensor *o, const FmHfKind *m, const FmHfMapEntry *e, const FmTensor *t, int layer, FILE *err) {
  memset(o, 0, sizeof *o);
  const int first = e->per_layer ? 1 : 0; /* dims of one slice start here */
  const int nd = t->ndim - first;
  if (nd < 1 || nd > 2 || (e->transpose && nd != 2)) {
    if (err)
      fprintf(err, "hf_names.c: canonical tensor %s has %d dims; its HF map expects %s\n", t->name, t->ndim,
              e->transpose ? "a matrix" : "a vector or matrix");
    return FM_EINVAL;
  }
  int len = e->per_layer ? snprintf(o->name, sizeof o->name, "%s%d.%s", m->layer_prefix, layer, e->hf)
                         : snprintf(o->name, sizeof o->name, "%s", e->hf);
  if (len < 0 || (size_t)len >= sizeof o->name) {
    if (err) fprintf(err, "hf_names.c: HF name of %s layer %d is too long\n", t->name, layer);
    return FM_EINVAL;
  }
  o->src = t;
  o->layer = e->per_layer ? layer : -1;
  o->transpose = e->transpose;
  o->ndim = nd;
  o->numel = 1;
  for (int i = 0; i < nd; i++) {
    o->shape[i] = t->shape[first + (e->transpose ? nd - 1 - i : i)];
    o->numel *= o->shape[i];
  }
  o->offset = t->offset + (e->per_layer ? (int64_t)layer * o->numel : 0);
  return 0;
}

int fm_hf_tensors(FmHfTensor **out, int *n, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                  FILE *err) {
  *out = NULL;
  *n = 0;
  const FmHfKind *m = fm__hf_kind(k);
  if (!m) {
    if (err)
      fprintf(err, "model '%s' has no Hugging Face name map\nhint: add its adapter, src/interop/hf_%s.c\n", k->name, k->name);
    return FM_EUNSUPPORTED;
  }
  int64_t count = 0;
  for (int i = 0; i < params->n; i++) {
    const FmHfMapEntry *e = find_entry(m, params->t[i].name);
    if (!e) {
      if (err)
        fprintf(err, "model '%s': parameter %s has no Hugging Face name\nhint: add it to src/interop/hf_%s.c\n",
                k->name, params->t[i].name, k->name);
      return FM_EUNSUPPORTED;
    }
    if (e->per_layer && (params->t[i].ndim < 1 || params->t[i].shape[0] != d->L)) {
      if (err)
        fprintf(err, "model '%s': parameter %s is not stacked (L, ...) as its HF map expects\n", k->name,
                params->t[i].name);
      return FM_EINVAL;
    }
    count += e->per_layer ? d->L : 1;
  }
  FmHfTensor *o = fm_xcalloc((size_t)count + 1, sizeof *o);
  int j = 0, rc = 0;
  for (int i = 0; i < params->n && !rc; i++) {
    const FmTensor *t = &params->t[i];
    const FmHfMapEntry *e = find_entry(m, t->name);
    for (int64_t l = 0; l < (e->per_layer ? d->L : 1) && !rc; l++) rc = add_tensor(&o[j++], m, e, t, (int)l, err);
  }
  if (rc) {
    free(o);
    return rc;
  }
  *out = o;
  *n = j;
  return 0;
}
