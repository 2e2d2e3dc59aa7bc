/* eval.c: the evaluation loop shared by training's validation and
 * task='eval'. Forward only; per-batch loss sums and counts are gathered and
 * added in batch order (any rank count gives the same bits). */
#include "fmhpc/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/interop.h"
#include "fmhpc/metrics.h"

double fm_eval_loss(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, int64_t *ntok) {
  const int64_t P = dp->size, K = (nb + P - 1) / P, b = fm_model_batch(m);
  const int64_t N = fm_store_info(st)->n_seq, bt = b * fm_model_get_dims(m)->T;
  double *mine = fm_xcalloc((size_t)(2 * K), sizeof *mine), *all = fm_xcalloc((size_t)(2 * K * P), sizeof *all);
  float *w = fm_xcalloc((size_t)bt, sizeof *w);
  int64_t *ids = fm_xcalloc((size_t)b, sizeof *ids);
  for (int64_t k = 0; k < K; k++) { /* every rank reads K times: the reads are collective */
    const int64_t i = k * P + dp->rank;
    const int64_t n = i < nb ? b : 0;
    for (int64_t s = 0; s < n; s++) ids[s] = (i * b + s) % N;
    FM_CHECK(fm_store_read_batch_coll(st, ids, n, buf));
    if (!n) continue;
    int64_t cnt = 0;
    for (int64_t j = 0; j < bt; j++) {
      cnt += buf->loss_mask[j];
      w[j] = buf->loss_mask[j] ? 1.0f : 0.0f;
    }
    FmModelInput in = {buf->tokens, buf->targets, buf->position_ids, buf->segment_ids};
    mine[2 * k] = fm_model_forward_backward(m, &in, w, false);
    mine[2 * k + 1] = (double)cnt; /* exact below 2^53 */
  }
  FM_CHECK(fm_comm_allgather(dp, mine, all, 2 * K, FM_DT_F64));
  double sum = 0, cnt = 0;
  for (int64_t i = 0; i < nb; i++) { /* batch i was rank i % P's (i / P)-th */
    const int64_t at = (i % P) * 2 * K + 2 * (i / P);
    sum += all[at];
    cnt += all[at + 1];
  }
  free(mine);
  free(all);
  free(w);
  free(ids);
  *ntok = (int64_t)cnt;
  return cnt > 0 ? sum / cnt : NAN;
}

int fm_eval_task(const FmDeck *deck, FmComm *world, FILE *log) {
  const FmConfig *c = &deck->c;
  FILE *err = world->rank == 0 ? stderr : NULL;
  const char *data = c->data.valid[0] ? c->data.valid : c->data.train;
  if (!c->eval.model[0]) {
    fm_deck_error(deck, err, FM_KEY_eval_model, "task = 'eval' needs a model: an HF directory (config.json + "
                  "model.safetensors), e.g. a training run's out_dir/final");
    return FM_EDECK;
  }
  if (!data[0]) {
    fm_deck_error(deck, err, FM_KEY_data_valid, "task = 'eval' needs a store (&data valid or train)");
    return FM_EDECK;
  }
  FmModelDims dims;
  const FmModelKind *kind;
  int rc = fm_model_dims(&dims, &kind, deck, err);
  if (rc) return rc;
  int status = 0;
  const FmBackend *be = fm_backend_get("cpu", &status);
  FmModel *m = NULL;
  FmStore *st = NULL;
  FmBatch buf = {0};
  if (!rc) rc = fm_model_create(&m, kind, &dims, be, c->train.micro_batch, false, err);
  if (!rc) {
    FmHfHyper h = {c->model.norm_eps, c->model.rope_theta};
    rc = fm_hf_import(c->eval.model, kind, &dims, &h, fm_model_params(m), fm_model_param_arena(m), err);
  }
  int32_t ok = rc == 0, all_ok = 0; /* import errors are seen by every rank alike; be sure */
  fm_comm_allreduce(world, &ok, &all_ok, 1, FM_DT_I32, FM_OP_MIN);
  if (all_ok) rc = fm_store_open(&st, data, c->data.format, world, err);
  if (all_ok && !rc && fm_store_info(st)->seq_len != dims.T) {
    fm_deck_error(deck, err, FM_KEY_model_seq_len, "the store %s holds sequences of %lld tokens", data,
                  (long long)fm_store_info(st)->seq_len);
    rc = FM_EDECK;
  }
  if (all_ok && !rc) {
    fm_model_set_compute_bf16(m, strstr(c->train.precision, "c=bf16") != NULL);
    fm_batch_alloc(&buf, c->train.micro_batch, dims.T);
    int64_t ntok = 0;
    const double loss = fm_eval_loss(m, st, &buf, c->eval.batches, world, &ntok);
    if (world->rank == 0) {
      fprintf(log, "eval: %s on %s: loss %.6f, perplexity %.4f over %lld tokens (%lld micro-batches of %lld)\n",
              c->eval.model, data, loss, exp(loss), (long long)ntok, (long long)c->eval.batches,
              (long long)c->train.micro_batch);
      char path[4096];
      snprintf(path, sizeof path, "%s/eval.json", c->run.out_dir);
      FILE *f = fm_mkdirs(c->run.out_dir) == 0 ? fopen(path, "w") : NULL;
      if (f) {
        fprintf(f, "{\"task\": \"eval\", \"loss\": %.9e, \"loss_hex\": \"%a\", \"perplexity\": %.9e, \"tokens\": %lld}\n",
                loss, loss, exp(loss), (long long)ntok);
        fclose(f);
      } else {
        fm_warn0("cannot write %s", path);
      }
    }
    fm_batch_free(&buf);
  }
  if (st) fm_store_close(st);
  if (m) fm_model_free(m);
  return all_ok ? rc : (rc ? rc : FM_EIO);
}
