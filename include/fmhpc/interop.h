/* interop.h: Hugging Face interop. safetensors files read and written from the
 * format's specification (src/interop/safetensors.c), the HF tensor names and
 * layouts and the config.json keys of each model (its adapter
 * src/interop/hf_<name>.c, one per models.def line; walked by hf_names.c and
 * hf_config.c), the directory-level import/export that joins
 * them, and the one model loader every task uses (src/interop/load.c). Not here: checkpoints (src/ckpt/, HDF5) and
 * tokenizer files (data/).
 *
 * A safetensors file is untrusted input: the reader checks the header length
 * (<= 100 MB and inside the file), that the header is one JSON object, every
 * dtype, shape and data_offsets pair, that sizes agree (overflow-checked),
 * that tensors neither overlap nor leave holes and cover the data region
 * exactly (the spec: "the byte buffer needs to be entirely indexed, and
 * cannot contain holes"), and that names are unique. A bad file is FM_EFORMAT
 * with a message naming the file, the tensor and the rule, never a crash.
 * Data is read with pread (no mmap: a file truncated while mapped would be a
 * SIGBUS, not an error). */
#ifndef FMHPC_INTEROP_H
#define FMHPC_INTEROP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/model.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tensor.h"

/* ---- safetensors ------------------------------------------------------ */

/* The format's dtypes, in its order (increasing alignment), which the writer
 * sorts by as the reference implementation does. */
#define FM_ST_DTYPES(X)                                                                                                \
  X(BOOL, 1)                                                                                                           \
  X(U8, 1) X(I8, 1) X(F8_E5M2, 1) X(F8_E4M3, 1) X(I16, 2) X(U16, 2) X(F16, 2) X(BF16, 2) X(I32, 4) X(U32, 4) X(F32, 4) \
      X(F64, 8) X(I64, 8) X(U64, 8)

typedef enum {
#define FM__X(name, size) FM_ST_##name,
  FM_ST_DTYPES(FM__X)
#undef FM__X
      FM_ST_NDTYPES
} FmStDType;

const char *fm_st_dtype_name(FmStDType t); /* "F32" */
size_t fm_st_dtype_size(FmStDType t);
/* Parse a dtype name; -1 when unknown. */
int fm_st_dtype_parse(const char *name);

#define FM_ST_MAX_DIMS   8
#define FM_ST_MAX_HEADER 100000000 /* bytes, the reference implementation's limit */

typedef struct FmStTensor {
  char *name; /* reader: owned by the file; writer: the caller's */
  FmStDType dtype;
  int ndim; /* 0 is a scalar */
  int64_t shape[FM_ST_MAX_DIMS];
  int64_t numel;
  int64_t begin, end; /* byte range in the data region (reader; the writer fills them) */
  const void *data;   /* writer: little-endian bytes, or NULL to use the fill callback */
} FmStTensor;

typedef struct FmStMeta {
  char *key, *value;
} FmStMeta;

typedef struct FmStFile {
  char *path;
  int fd;
  int64_t data_start; /* 8 + header length */
  int n;
  FmStTensor *t; /* sorted by name (fm_st_find bisects) */
  int nmeta;
  FmStMeta *meta;
} FmStFile;

/* Open and validate a safetensors file (header only; data stays on disk).
 * FM_EIO (cannot open/read) or FM_EFORMAT (invalid) with a message on err. */
int fm_st_open(FmStFile *f, const char *path, FILE *err);
void fm_st_close(FmStFile *f);
const FmStTensor *fm_st_find(const FmStFile *f, const char *name);
const char *fm_st_meta(const FmStFile *f, const char *key); /* NULL when absent */
/* Read a tensor's bytes as stored (end - begin bytes). */
int fm_st_read_raw(const FmStFile *f, const FmStTensor *t, void *out, FILE *err);
/* Read a floating tensor into fp32: F32 as is, F16 and BF16 exactly, F64
 * rounded to nearest. Other dtypes are FM_EFORMAT naming the tensor. */
int fm_st_read_f32(const FmStFile *f, const FmStTensor *t, float *out, FILE *err);

/* Where the writer gets bytes of a tensor whose data is NULL: fill buf with
 * its end - begin bytes. Returns 0 or an FM_E* status. */
typedef int (*FmStFill)(void *ctx, const FmStTensor *t, void *buf);

/* Write n tensors and nmeta metadata strings to path as the reference
 * implementation does: tensors ordered by dtype (widest first) then name,
 * compact header JSON with __metadata__ first, padded with spaces to a
 * multiple of 8 bytes, data contiguous. Atomic: written to a temporary file
 * in the same directory, fsynced, renamed over path. Fills t[i].begin/end. */
int fm_st_write(const char *path, int n, FmStTensor *t, int nmeta, const FmStMeta *meta, FmStFill fill, void *ctx,
                FILE *err);
/* fm_st_write up to the rename: the fsynced temporary's name in *tmp_path
 * (caller renames or unlinks it, and frees the name), to commit it together
 * with other files. On failure nothing is left and *tmp_path is NULL. */
int fm_st_write_tmp(const char *path, int n, FmStTensor *t, int nmeta, const FmStMeta *meta, FmStFill fill,
                    void *ctx, char **tmp_path, FILE *err);

/* ---- Hugging Face models ---------------------------------------------- */

/* One HF tensor and the slice of a canonical tensor it maps to: layer
 * `layer` of a stacked (L, ...) tensor, or the whole tensor (layer -1).
 * GPT-2's Conv1D weights are stored (in, out), the transpose of our
 * (out, in): `transpose` says so. */
typedef struct FmHfTensor {
  char name[96];       /* "transformer.h.3.attn.c_attn.weight" */
  const FmTensor *src; /* canonical tensor in the parameter table */
  int layer;           /* -1: all of src */
  bool transpose;      /* HF stores the (rows, cols) matrix as (cols, rows) */
  int ndim;
  int64_t shape[2]; /* HF shape */
  int64_t numel;
  int64_t offset; /* element offset of the slice in the weights arena */
} FmHfTensor;

/* The HF tensors of a model (every tensor HF saves, in canonical order; a
 * tied output projection is not one). *n set; caller frees. FM_EUNSUPPORTED
 * for a model without an HF name map. */
int fm_hf_tensors(FmHfTensor **out, int *n, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                  FILE *err);
/* Buffers HF checkpoints keep that are not parameters (GPT-2's attn.bias
 * causal mask, Llama's rotary_emb.inv_freq): import skips them. */
bool fm_hf_ignorable(const FmModelKind *k, const char *hf_name);
/* HF's base-model prefix ("transformer." for GPT-2, "model." for Llama):
 * checkpoints saved from the base model lack it, and import accepts that. */
const char *fm_hf_base_prefix(const FmModelKind *k);

/* config.json. Write the HF config of a model (GPT2Config / LlamaConfig). */
int fm_hf_config_write(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err);
/* Read config.json and check it against the model the deck describes. The
 * deck is the truth: dims are never filled in from config.json, since a run
 * must say in its deck what it trains. A mismatch is FM_EDECK naming the
 * config.json key with its value and the deck key with its value, and a hint
 * with the deck line that matches the file. */
int fm_hf_config_check(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err);

/* Write dir/config.json and dir/model.safetensors (fp32, HF names and
 * layouts) from weights laid out as params (host memory). Creates dir. */
int fm_hf_export(const char *dir, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                 const float *weights, FILE *err);
/* Fill weights (laid out as params) from dir/config.json and
 * dir/model.safetensors, or the shards dir/model.safetensors.index.json
 * names. Every parameter must be found with its HF shape; F32, F16, BF16 and
 * F64 are converted to fp32; a tensor the model does not have is an error
 * (except fm_hf_ignorable buffers); a tied model accepts an lm_head.weight
 * equal to the embedding. */
int fm_hf_import(const char *dir, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                 float *weights, FILE *err);

/* ---- the model loader (load.c) ------------------------------------------ */
/* One loader for every task that runs a model (train, eval, generate, ifd). */
typedef struct FmModelLoadOpts {
  const FmBackend *be; /* NULL: the CPU backend */
  int64_t micro_batch; /* sequences per forward (b) */
  bool recompute;      /* per-layer activation recompute (training) */
  const char *hf_dir;  /* import these HF weights (config.json checked against the deck) or a checkpoint file; NULL or
                          "": none */
  bool init;           /* without hf_dir: initialise from &run seed and &model init_std (training); false
                          leaves the weights zero for a later fm_model_import */
  int64_t context;     /* generation: activations (the key/value cache) for this many positions, <= seq_len
                          (fm_model_create_ctx); 0: seq_len */
  FmComm *tp;          /* tensor-parallel group (fm_model_create_tp), or NULL: none */
} FmModelLoadOpts;

typedef struct FmLoadedModel {
  const FmModelKind *kind;
  FmModelDims dims;
  FmModel *model; /* the caller frees it (fm_model_free) */
} FmLoadedModel;

/* The model the deck's &model describes (fm_model_dims), made on o->be for
 * o->micro_batch sequences, bf16 compute when &train precision asks for it,
 * its weights imported from o->hf_dir or initialised as o says. With comm
 * the import status is agreed: every rank of comm returns an error when one
 * rank's import failed. Errors are reported on err (rank 0's stderr or NULL). */
int fm_model_load(FmLoadedModel *out, const FmDeck *deck, const FmModelLoadOpts *o, FmComm *comm, FILE *err);
/* Import the HF directory hf_dir into m's weights (fm_hf_import); with comm,
 * agreed as in fm_model_load. A file (an fmhpc checkpoint, step_N.h5) is read
 * instead: its /params, every checksum verified; that read is collective and
 * needs comm. fm_model_load's hf_dir takes either too. */
int fm_model_import(FmModel *m, const char *hf_dir, FmComm *comm, FILE *err);
/* A store of sequences of seq_len tokens from a tokenizer of vocab_size ids
 * (path names it) against the model: FM_EDECK at &model seq_len (with a hint)
 * or &model vocab_size when it does not fit. */
int fm_model_check_store(const FmDeck *deck, const FmModelDims *d, const char *path, int64_t seq_len,
                         int64_t vocab_size, FILE *err);

/* &run task = 'export': the weights &model init_from names (an fmhpc
 * checkpoint, step_N.h5, or an HF directory), loaded as fm_model_load loads
 * them, written in HF format to out_dir/hf by rank 0; without init_from a
 * deck error. Every rank returns the same status. */
int fm_interop_export_task(const FmDeck *deck, FmComm *world, FILE *err);

#endif
