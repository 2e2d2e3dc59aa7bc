/* load.c: the one model loader (fm_model_load): the model the deck describes,
 * its weights initialised from the deck or imported from an HF directory,
 * the import status agreed by every rank; and the store-against-model check
 * (fm_model_check_store). train, eval, generate and ifd all start here. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmhpc/ckpt.h"
#include "fmhpc/core.h"
#include "fmhpc/interop.h"

/* A file (step_N.h5), not a directory: an fmhpc checkpoint. */
static bool is_checkpoint(const char *path) {
  struct stat sb;
  const size_t n = strlen(path);
  return (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) || (n > 3 && strcmp(path + n - 3, ".h5") == 0);
}

/* A checkpoint's weights mean what the &model of its stored deck says; the
 * parameter count alone does not tell two models apart (n_head at one width,
 * norm_eps, rope_theta). The model that deck describes (fm_model_dims) must
 * be this one by fm_model_dims_diff, the rule resume applies too
 * (train/compat.c; seq_len is free here: for GPT-2 it is in the shapes, for
 * Llama it changes no weight).
 * Every rank reads the same file, so every rank decides alike. */
static int check_ckpt_model(const FmModel *m, const char *path, const char *stored, FILE *err) {
  if (!stored) {
    fm_warn0("%s stores no deck: its &model cannot be compared with this deck's (the parameter count matches)", path);
    return 0;
  }
  FmDeck old;
  fm_deck_init(&old);
  FmDeckSource src = {path, stored, false};
  FmModelDims d;
  const FmModelKind *k = NULL;
  if (fm_deck_bind(&old, 1, &src, NULL) || fm_model_dims(&d, &k, &old, NULL)) {
    fm_warn0("%s: the deck it stores does not bind in this version: its &model cannot be compared with this deck's",
             path);
    fm_deck_free(&old);
    return 0;
  }
  fm_deck_free(&old);
  FmModelDiff diff[16];
  const int n = fm_model_dims_diff(k, &d, fm_model_get_kind(m), fm_model_param_dims(m), diff, 16);
  FmStr fix;
  fm_str_init(&fix);
  for (int i = 0; i < n && i < 16; i++) {
    if (err && !i)
      fprintf(err,
              "fmhpc: %s: the checkpoint holds another model than this deck's &model (the same number of "
              "parameters, but its weights mean something else here):\n",
              path);
    if (err)
      fprintf(err, "  &model %s = %s in the checkpoint, %s in this deck\n", diff[i].key, diff[i].then, diff[i].now);
    fm_str_printf(&fix, " %s = %s", diff[i].key, diff[i].then);
  }
  if (n && err) fprintf(err, "hint: to match this checkpoint, set in the deck: &model%s /\n", fix.s);
  fm_str_free(&fix);
  return n ? FM_EDECK : 0;
}

/* The weights of an fmhpc checkpoint: its /params, every checksum verified
 * (collective over comm), into the model its stored deck describes. */
static int import_checkpoint(FmModel *m, float *w, const char *path, FmComm *comm, FILE *err) {
  if (!comm) {
    if (err) fprintf(err, "fmhpc: %s: loading a checkpoint needs the ranks' communicator (internal)\n", path);
    return FM_EINVAL;
  }
  char why[12288], *stored = NULL;
  int rc = fm_ckpt_read_params(path, fm_model_params(m), w, comm, &stored, why, sizeof why);
  if (rc && err) fprintf(err, "fmhpc: %s\nhint: a model is an fmhpc checkpoint (step_N.h5) or an HF directory\n", why);
  if (!rc) rc = check_ckpt_model(m, path, stored, err);
  free(stored);
  return rc;
}

static int import_into(FmModel *m, float *w, const char *hf_dir, FmComm *comm, FILE *err) {
  if (is_checkpoint(hf_dir)) return import_checkpoint(m, w, hf_dir, comm, err);
  const FmModelDims *d = fm_model_param_dims(m);
  int rc = fm_hf_import(hf_dir, fm_model_get_kind(m), d, fm_model_params(m), w, err);
  if (!comm) return rc;
  int32_t bad = rc != 0, any = 0; /* import errors are usually seen by every rank alike; be sure */
  FM_CHECK(fm_comm_allreduce(comm, &bad, &any, 1, FM_DT_I32, FM_OP_MAX));
  return rc ? rc : (any ? FM_EIO : 0);
}

/* On a device backend the weights are read into host memory, then copied. */
int fm_model_import(FmModel *m, const char *hf_dir, FmComm *comm, FILE *err) {
  const FmBackend *be = fm_model_backend(m);
  if (be->host_accessible) return import_into(m, fm_model_param_arena(m), hf_dir, comm, err);
  const int64_t bytes = fm_model_params(m)->numel * (int64_t)sizeof(float);
  float *w = fm_xmalloc((size_t)bytes);
  int rc = import_into(m, w, hf_dir, comm, err);
  if (!rc) be->copy_to_device(fm_model_param_arena(m), w, bytes);
  free(w);
  return rc;
}

int fm_model_load(FmLoadedModel *out, const FmDeck *deck, const FmModelLoadOpts *o, FmComm *comm, FILE *err) {
  const FmConfig *c = &deck->c;
  memset(out, 0, sizeof *out);
  int rc = fm_model_dims(&out->dims, &out->kind, deck, err);
  if (rc) return rc;
  const FmBackend *be = o->be ? o->be : fm_backend_cpu();
  if (o->tp && o->tp->size > 1 && (o->context > 0 || (o->hf_dir && o->hf_dir[0]))) {
    if (err)
      fprintf(err, "fmhpc: &parallel tp = %d: %s is not sharded over tensor-parallel ranks yet\nhint: use tp = 1\n",
              o->tp->size, o->context > 0 ? "generation" : "loading weights (&model init_from)");
    return FM_EINVAL;
  }
  rc = o->context > 0
           ? fm_model_create_ctx(&out->model, out->kind, &out->dims, be, o->micro_batch, o->context, err)
           : fm_model_create_tp(&out->model, out->kind, &out->dims, be, o->micro_batch, o->recompute, o->tp, err);
  if (rc) return rc;
  fm_model_set_compute_bf16(out->model, c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16);
  if (o->hf_dir && o->hf_dir[0]) return fm_model_import(out->model, o->hf_dir, comm, err);
  if (o->init)
    fm_model_init_weights(out->model, (uint64_t)c->run.seed, c->model.init_std, c->model.residual_scaled_init);
  return 0;
}

int fm_model_check_store(const FmDeck *deck, const FmModelDims *d, const char *path, int64_t seq_len,
                         int64_t vocab_size, FILE *err) {
  if (seq_len != d->T) {
    fm_deck_error(deck, err, FM_KEY_model_seq_len, "the store %s holds sequences of %lld tokens", path,
                  (long long)seq_len);
    if (err)
      fprintf(err, "hint: prep with &prep seq_len = %lld, or set &model seq_len = %lld\n", (long long)d->T,
              (long long)seq_len);
    return FM_EDECK;
  }
  if (vocab_size > d->V) {
    fm_deck_error(deck, err, FM_KEY_model_vocab_size, "the store %s's tokenizer has %lld ids", path,
                  (long long)vocab_size);
    return FM_EDECK;
  }
  return 0;
}
