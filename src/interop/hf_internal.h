/* hf_internal.h: one model's Hugging Face adapter (src/interop/hf_<name>.c,
 * one per models.def line: its tensor name map and its config.json writer and
 * checker) and the config.json helpers adapters share. hf_names.c walks the
 * maps and hf_config.c does the file I/O; neither names a model. Adding a
 * model's HF interop is its adapter file; the registry comes from models.def. */
#ifndef FMHPC_HF_INTERNAL_H
#define FMHPC_HF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/interop.h"
#include "fmhpc/json.h"

/* One canonical tensor's HF name and layout. */
typedef struct FmHfMapEntry {
  const char *canon; /* canonical tensor (stacked (L, ...) when per_layer) */
  const char *hf;    /* HF name, or its suffix after "<layer prefix><i>." */
  bool per_layer;
  bool transpose; /* HF stores the transpose (Conv1D) */
} FmHfMapEntry;

/* A config.json being checked against the deck's model. */
typedef struct FmHfCheck {
  const char *path;
  const FmJson *root;
  FILE *err;
  int rc;
  FmStr fix; /* deck settings that would match the file */
} FmHfCheck;

typedef struct FmHfKind {
  const char *model;            /* FmModelKind name: its models.def line */
  const char *base_prefix;      /* HF base_model_prefix + "." */
  const char *layer_prefix;     /* per-layer names are layer_prefix + i + "." + hf */
  const char *const *ignorable; /* suffixes of non-parameter buffers (NULL-terminated) */
  const FmHfMapEntry *map;
  int n;
  /* config.json's keys in alphabetical order, two-space indent, as transformers writes them. */
  void (*write_config)(FILE *o, const FmModelDims *d);
  /* Every key against the deck's dims (model_type already matched). */
  void (*check_config)(FmHfCheck *c, const FmModelDims *d);
} FmHfKind;

/* An integer config.json key's allowed range (see fm__hf_check_ranges). */
typedef struct FmHfRange {
  const char *key;
  int64_t lo, hi;
} FmHfRange;

/* The adapter of model kind k (fm_hf_<name> of its models.def line), or NULL. */
const FmHfKind *fm__hf_kind(const FmModelKind *k);

/* ---- config.json helpers (hf_config.c) ---- */
/* fm_hf_config_write up to the rename: the fsynced temporary (path.tmp.PID)
 * in *tmp_path, for the caller to rename or remove, and free. */
int fm__hf_config_write_tmp(const char *path, const FmModelKind *k, const FmModelDims *d, char **tmp_path, FILE *err);
void fm__hf_put_real(FILE *out, double v);
void fm__hf_problem(FmHfCheck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const FmJson *fm__hf_get(const FmHfCheck *c, const char *key);
void fm__hf_check_int(FmHfCheck *c, const char *key, int64_t def, const char *deck_key, int64_t deck_val);
void fm__hf_check_real(FmHfCheck *c, const char *key, double def, const char *deck_key, double deck_val);
void fm__hf_check_bool(FmHfCheck *c, const char *key, bool def, const char *deck_key, bool deck_val);
void fm__hf_check_fixed_bool(FmHfCheck *c, const char *key, bool def, bool want, const char *why);
void fm__hf_check_str(FmHfCheck *c, const char *key, const char *def, const char *const *ok, const char *why);
bool fm__hf_check_ranges(FmHfCheck *c, const FmHfRange *r, int n);
/* The largest a size key may be (a head count's limit is the deck's, 65536). */
#define FM_HF_MAX_SIZE INT32_MAX

/* config.json, or a shard index, as text: a regular file of at most
 * FM_HF_MAX_JSON_BYTES (a FIFO would block, /dev/zero never ends). 0, or -1
 * with errno set (EINVAL: not a regular file; EFBIG: too large). */
enum { FM_HF_MAX_JSON_BYTES = 16 << 20 };
int fm__hf_read_json_file(const char *path, char **text, size_t *len);

#endif
