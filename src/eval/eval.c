/* eval.c: the evaluation loop shared by training's validation and
 * task='eval', and task='eval''s detail pass (token accuracy, per-document
 * results from the logits). Forward only; per-batch loss sums and counts are
 * gathered and added in batch order (any rank count gives the same bits).
 * IFD lives in ifd.c. */
#include "fmhpc/eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/interop.h"
#include "fmhpc/progress.h"

/* Rank 0's progress after its k-th read of K: about (k + 1) * P of nb
 * batches done, counted from `base` (the detail pass follows the loss pass). */
static void tick(FmProgress *pg, int64_t base, int64_t k, int64_t P, int64_t nb) {
  if (pg) fm_progress_tick(pg, base + ((k + 1) * P < nb ? (k + 1) * P : nb));
}

static double eval_loss(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, int64_t *ntok, FmProgress *pg) {
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
    tick(pg, 0, k, P, nb);
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

double fm_eval_loss(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, int64_t *ntok) {
  return eval_loss(m, st, buf, nb, dp, ntok, NULL);
}

/* One document's result as gathered: batch, sample, segment, loss sum,
 * counted targets, correct targets (all exact in double). */
enum { DOC_F = 6 };

typedef struct DocList {
  double *v;
  int64_t n, cap; /* documents */
} DocList;

static void doc_push(DocList *l, const double *d) {
  if (l->n == l->cap) {
    l->cap = l->cap * 2 + 64;
    l->v = fm_xrealloc(l->v, (size_t)(l->cap * DOC_F) * sizeof *l->v);
  }
  memcpy(l->v + l->n * DOC_F, d, DOC_F * sizeof *d);
  l->n++;
}

/* Cross-entropy (double) and whether the argmax (lowest id of ties) is the target. */
static double row_xent(const float *z, int64_t V, int32_t target, int *correct) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (z[v] > z[best]) best = v;
  double s = 1.0; /* exp(z[best] - z[best]) */
  for (int64_t v = 0; v < V; v++)
    if (v != best) s += exp((double)z[v] - (double)z[best]);
  *correct = best == target;
  return log(s) + (double)z[best] - (double)z[target];
}

/* Documents of one micro-batch (n rows of T) into l; counts into *cor, *cnt. */
static void batch_docs(DocList *l, const FmBatch *buf, const float *logits, int64_t V, int64_t n, int64_t batch,
                       const int64_t *ids, int64_t *cor, int64_t *cnt) {
  const int64_t T = buf->T;
  for (int64_t s = 0; s < n; s++) {
    double d[DOC_F] = {0};
    for (int64_t t = 0; t <= T; t++) {
      const int64_t j = s * T + t;
      const int32_t seg = t < T ? buf->segment_ids[j] : -1;
      if (t == T || t == 0 || seg != (int32_t)d[2]) { /* a run ends (or the row starts) */
        if (t > 0 && d[2] != 0 && d[4] > 0) doc_push(l, d);
        d[0] = (double)batch, d[1] = (double)ids[s], d[2] = seg, d[3] = d[4] = d[5] = 0;
      }
      if (t == T || !buf->loss_mask[j]) continue;
      int ok = 0;
      const double xe = row_xent(logits + j * V, V, buf->targets[j], &ok);
      (*cnt)++;
      *cor += ok;
      if (seg == 0) continue; /* a counted target in padding: totals only */
      d[3] += xe;
      d[4] += 1;
      d[5] += ok;
    }
  }
}

static void write_docs(FILE *f, const double *all, const int64_t *counts, int64_t maxc, int P, int64_t nb) {
  int64_t *at = fm_xcalloc((size_t)P, sizeof *at);
  for (int64_t i = 0; i < nb; i++) {
    const int r = (int)(i % P);
    for (; at[r] < counts[r]; at[r]++) {
      const double *d = all + ((int64_t)r * maxc + at[r]) * DOC_F;
      if ((int64_t)d[0] != i) break;
      fprintf(f,
              "{\"batch\": %lld, \"sample\": %lld, \"segment\": %lld, \"loss_sum\": %.9e, \"tokens\": %lld, "
              "\"loss\": %.9e, \"correct\": %lld, \"accuracy\": %.9e}\n",
              (long long)d[0], (long long)d[1], (long long)d[2], d[3], (long long)d[4], d[3] / d[4], (long long)d[5],
              d[5] / d[4]);
    }
  }
  free(at);
}

static int eval_detail(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, FILE *per_doc, int64_t *correct,
                       int64_t *ntok, FmProgress *pg) {
  const int64_t P = dp->size, K = (nb + P - 1) / P, b = fm_model_batch(m);
  const int64_t N = fm_store_info(st)->n_seq, T = fm_model_get_dims(m)->T, V = fm_model_get_dims(m)->V;
  float *logits = fm_xmalloc((size_t)(b * T * V) * sizeof *logits);
  int64_t *ids = fm_xcalloc((size_t)b, sizeof *ids), tot[2] = {0, 0}, sum[2] = {0, 0};
  DocList l = {0};
  int rc = 0;
  for (int64_t k = 0; k < K; k++) { /* every rank reads K times: the reads are collective */
    const int64_t i = k * P + dp->rank;
    const int64_t n = i < nb ? b : 0;
    for (int64_t s = 0; s < n; s++) ids[s] = (i * b + s) % N;
    const int rrc = fm_store_read_batch_coll(st, ids, n, buf);
    if (rrc && !rc) rc = rrc;
    if (!n || rrc) continue;
    FmModelInput in = {buf->tokens, buf->targets, buf->position_ids, buf->segment_ids};
    fm_model_logits(m, &in, NULL, b * T, logits);
    batch_docs(&l, buf, logits, V, n, i, ids, &tot[0], &tot[1]);
    tick(pg, nb, k, P, nb);
  }
  free(logits);
  free(ids);
  int32_t bad = rc != 0, anybad = 0;
  FM_CHECK(fm_comm_allreduce(dp, &bad, &anybad, 1, FM_DT_I32, FM_OP_MAX));
  FM_CHECK(fm_comm_allreduce(dp, tot, sum, 2, FM_DT_I64, FM_OP_SUM));
  *correct = sum[0];
  *ntok = sum[1];
  int64_t want = per_doc != NULL; /* rank 0 decides */
  FM_CHECK(fm_comm_bcast(dp, &want, 1, FM_DT_I64, 0));
  if (want) {
    int64_t *counts = fm_xcalloc((size_t)P, sizeof *counts), maxc = 1;
    FM_CHECK(fm_comm_allgather(dp, &l.n, counts, 1, FM_DT_I64));
    for (int64_t r = 0; r < P; r++) maxc = counts[r] > maxc ? counts[r] : maxc;
    double *mine = fm_xcalloc((size_t)(maxc * DOC_F), sizeof *mine);
    double *all = fm_xcalloc((size_t)(maxc * DOC_F * P), sizeof *all);
    if (l.n) memcpy(mine, l.v, (size_t)(l.n * DOC_F) * sizeof *mine);
    FM_CHECK(fm_comm_allgather(dp, mine, all, maxc * DOC_F, FM_DT_F64));
    if (per_doc) write_docs(per_doc, all, counts, maxc, (int)P, nb);
    free(mine);
    free(all);
    free(counts);
  }
  free(l.v);
  return anybad ? (rc ? rc : FM_EIO) : 0;
}

int fm_eval_detail(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, FILE *per_doc, int64_t *correct,
                   int64_t *ntok) {
  return eval_detail(m, st, buf, nb, dp, per_doc, correct, ntok, NULL);
}

int fm_eval_task(const FmDeck *deck, FmComm *world, FILE *log) {
  const FmConfig *c = &deck->c;
  FILE *err = world->rank == 0 ? stderr : NULL;
  const char *data = c->data.valid[0] ? c->data.valid : c->data.train;
  if (!c->eval.model[0]) {
    fm_deck_error(deck, err, FM_KEY_eval_model,
                  "task = 'eval' needs a model: an HF directory (config.json + "
                  "model.safetensors), e.g. a training run's out_dir/final");
    return FM_EDECK;
  }
  if (!data[0]) {
    fm_deck_error(deck, err, FM_KEY_data_valid, "task = 'eval' needs a store (&data valid or train)");
    return FM_EDECK;
  }
  /* &train backend: the forward runs where training would (the same ops and choice). */
  char why[256];
  int st_be = 0;
  const int need = FM_NEED_MODEL | (c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16 ? FM_NEED_BF16 : 0);
  const FmBackend *be = fm_backend_choose(c->train.backend, need, why, (int)sizeof why, &st_be);
  int agree = fm_runtime_agree_backend(be ? (be->host_accessible ? 1 : 2) : 0, "eval");
  if (agree) return agree;
  if (!be) {
    fm_deck_error(deck, err, FM_KEY_train_backend, "eval cannot use this backend: %s", why);
    return FM_EDECK;
  }
  fm_log0("backend: %s (%s)", be->name, why);
  if (!be->host_accessible) { /* each rank on its node-local GPU before the model is loaded there */
    int dev = -1, shared = 0, st_gpu = fm_runtime_bind_gpu(&dev, &shared);
    if (st_gpu) return st_gpu;
  }
  const FmModelLoadOpts lo = {be, c->train.micro_batch, false, c->eval.model, false, 0, NULL};
  FmLoadedModel lm;
  int rc = fm_model_load(&lm, deck, &lo, world, err);
  const FmModelDims dims = lm.dims;
  FmModel *m = lm.model;
  FmStore *st = NULL;
  FmBatch buf = {0};
  const bool all_ok = rc == 0; /* the loader agreed the import status over world */
  if (all_ok) rc = fm_store_open(&st, data, c->data.format, world, err);
  if (all_ok && !rc) {
    const FmStoreInfo *si = fm_store_info(st);
    rc = fm_model_check_store(deck, &dims, data, si->seq_len, si->vocab_size, err);
  }
  if (all_ok && !rc) {
    fm_batch_alloc(&buf, c->train.micro_batch, dims.T);
    int64_t ntok = 0, correct = 0, ntok_acc = 0;
    char path[4096];
    FILE *docs = NULL;
    bool unwritten = false; /* rank 0: an output the deck asks for could not be written: status 1 */
    /* per_doc opened before both passes (its directory made, as eval.json's is): it failed after all the work, the
     * default one inside an out_dir not made yet */
    int32_t open_rc = 0;
    if (world->rank == 0 && c->eval.per_doc[0]) {
      docs = fm_mkdirs_parent(c->eval.per_doc) == 0 ? fopen(c->eval.per_doc, "w") : NULL;
      if (!docs) {
        fm_err("cannot write &eval per_doc = '%s': %s\nhint: set per_doc = '' for no per-document results",
               c->eval.per_doc, strerror(errno));
        open_rc = FM_EIO;
      }
    }
    FM_CHECK(fm_comm_bcast(world, &open_rc, 1, FM_DT_I32, 0));
    FmProgress pg; /* two passes over the batches: the loss, then the detail */
    fm_progress_start(&pg, world->rank == 0 && !open_rc ? log : NULL, "eval", "batches", 2 * c->eval.batches, -1);
    const double loss = open_rc ? NAN : eval_loss(m, st, &buf, c->eval.batches, world, &ntok, &pg);
    rc = open_rc ? open_rc : eval_detail(m, st, &buf, c->eval.batches, world, docs, &correct, &ntok_acc, &pg);
    if (docs) fclose(docs);
    const double acc = ntok_acc > 0 ? (double)correct / (double)ntok_acc : NAN;
    if (world->rank == 0 && !rc) {
      fprintf(log,
              "eval: %s on %s: loss %.6f, perplexity %.4f, token accuracy %.6f (%lld / %lld) over %lld tokens "
              "(%lld micro-batches of %lld)\n",
              c->eval.model, data, loss, exp(loss), acc, (long long)correct, (long long)ntok_acc, (long long)ntok,
              (long long)c->eval.batches, (long long)c->train.micro_batch);
      if (docs) fprintf(log, "eval: per-document results in %s\n", c->eval.per_doc);
      snprintf(path, sizeof path, "%s/eval.json", c->run.out_dir);
      FILE *f = fm_mkdirs(c->run.out_dir) == 0 ? fopen(path, "w") : NULL;
      if (f) {
        fprintf(f,
                "{\"task\": \"eval\", \"loss\": %.9e, \"loss_hex\": \"%a\", \"perplexity\": %.9e, \"tokens\": %lld, "
                "\"accuracy\": %.9e, \"correct\": %lld}\n",
                loss, loss, exp(loss), (long long)ntok, acc, (long long)correct);
        fclose(f);
      } else {
        fm_err("cannot write %s", path);
        unwritten = true;
      }
    }
    if (unwritten && !rc) rc = FM_EIO;
    fm_batch_free(&buf);
  }
  if (st) fm_store_close(st);
  if (m) fm_model_free(m);
  return rc;
}
