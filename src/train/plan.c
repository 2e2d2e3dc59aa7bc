/* plan.c: what a run will cost before it starts (fmhpc --check): exact
 * parameter counts from the model's tensor table, bytes per rank for each
 * arena, and FLOPs. The arena sizes here are the ones the step loop will
 * allocate, so the two are kept in one place. */
#include "fmhpc/train.h"

#include <string.h>

static int64_t params_on_rank(const FmTensorTable *tab, int tp) {
  int64_t n = 0;
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    n += t->tp == FM_TP_NONE ? t->numel : (t->numel + tp - 1) / tp;
  }
  return n;
}

static int plan_layout(FmPlan *p, const FmDeck *deck, int world_size, FILE *err) {
  const FmConfig *c = &deck->c;
  p->world = world_size;
  p->tp = (int)c->parallel.tp;
  if (world_size % p->tp != 0) {
    fm_deck_error(deck, err, FM_KEY_parallel_tp, "must divide the number of ranks (%d)", world_size);
    return FM_EDECK;
  }
  if (p->dims.NKV % p->tp != 0) { /* Megatron's QKV split: a tp rank owns whole KV heads and their query heads */
    char valid[128] = "";
    size_t used = 0;
    for (int64_t d = 1; d <= p->dims.NKV && used < sizeof valid; d++)
      if (p->dims.NKV % d == 0) {
        const int w = snprintf(valid + used, sizeof valid - used, "%s%lld", used ? ", " : "", (long long)d);
        if (w < 0) break;
        used += (size_t)w;
      }
    fm_deck_error(deck, err, FM_KEY_parallel_tp,
                  "must divide the model's %lld key/value heads (each tp rank owns whole KV heads): "
                  "valid tp values are %s",
                  (long long)p->dims.NKV, valid);
    return FM_EDECK;
  }
  p->dp = world_size / p->tp;
  p->micro_batches = c->train.global_batch / c->train.micro_batch;
  if (p->micro_batches % p->dp != 0) {
    fm_deck_error(deck, err, FM_KEY_train_global_batch,
                  "gives %lld micro-batches of %lld, which %d data-parallel ranks cannot share equally "
                  "(use a rank count whose dp divides %lld)",
                  (long long)p->micro_batches, (long long)c->train.micro_batch, p->dp, (long long)p->micro_batches);
    return FM_EDECK;
  }
  return 0;
}

int fm_plan_make(FmPlan *p, const FmDeck *deck, int world_size, FILE *err) {
  memset(p, 0, sizeof *p);
  const FmConfig *c = &deck->c;
  int rc = fm_model_dims(&p->dims, &p->model, deck, err);
  p->optim = fm_optim_find(c->optim.name);
  if (!p->optim) {
    fm_deck_error(deck, err, FM_KEY_optim_name, "no such optimizer in optimizers.def");
    rc = FM_EDECK;
  }
  if (rc == 0) rc = plan_layout(p, deck, world_size, err);
  if (rc) return rc;

  FmTensorTable tab;
  fm_model_param_table(&tab, p->model, &p->dims);
  p->n_params = tab.numel;
  p->n_params_rank = params_on_rank(&tab, p->tp);
  fm_table_free(&tab);

  const double n = (double)p->n_params_rank;
  const int bf16 = c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16;
  const int zero = (int)c->parallel.zero;
  const double shard = zero ? 1.0 / p->dp : 1.0;
  p->compute_bytes = bf16 ? 2 : 4;
  p->params = n * p->compute_bytes;
  p->master = bf16 ? n * 4 * shard : 0; /* with f32 compute the weights are the master */
  p->grads = n * 4;
  p->grad_accum = n * (c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT ? 8 : 4);
  p->optim_state = n * 4 * p->optim->state_per_param * shard;
  const int64_t b = c->train.micro_batch;
  /* From the activation table the model allocates (and its batch buffers). */
  p->act = (double)fm_model_act_elems(p->model, &p->dims, b, false) * p->compute_bytes / p->tp;
  p->act_recompute = (double)fm_model_act_elems(p->model, &p->dims, b, true) * p->compute_bytes / p->tp;
  p->tokens_per_step = c->train.global_batch * p->dims.T;
  p->flops_per_token = p->model->train_flops_per_token(&p->dims);
  p->flops_per_step = p->flops_per_token * (double)p->tokens_per_step;
  return 0;
}

static void row(FILE *out, const char *what, double bytes, const char *note) {
  char b[32];
  fprintf(out, "  %-28s %12s   %s\n", what, fm_fmt_bytes(b, sizeof b, bytes), note);
}

void fm_plan_print(const FmPlan *p, const FmDeck *deck, FILE *out) {
  const FmConfig *c = &deck->c;
  const FmModelDims *d = &p->dims;
  char n1[32], n2[32];
  fprintf(out, "== plan for %d rank%s: dp %d x tp %d ==\n", p->world, p->world == 1 ? "" : "s", p->dp, p->tp);
  fprintf(out, "model      %s (%s)\n", p->model->name, p->model->desc);
  fprintf(out, "           C %lld, L %lld, NH %lld, NKV %lld, HS %lld, F %lld, V %lld, T %lld, %s embeddings\n",
          (long long)d->C, (long long)d->L, (long long)d->NH, (long long)d->NKV, (long long)d->HS, (long long)d->F,
          (long long)d->V, (long long)d->T, d->tied ? "tied" : "untied");
  char why[256];
  int st = 0;
  const FmBackend *be = fm_backend_choose(c->train.backend, 1, 1, why, (int)sizeof why, &st);
  fprintf(out, "backend    %s (%s)\n", be ? be->name : "none: training would stop", why);
  fprintf(out, "parameters %s (%s per rank after the tp split)\n", fm_fmt_count(n1, sizeof n1, p->n_params),
          fm_fmt_count(n2, sizeof n2, p->n_params_rank));
  fprintf(out, "batch      %lld sequences = %lld micro-batches of %lld, %lld per dp rank; %s tokens per step\n",
          (long long)c->train.global_batch, (long long)p->micro_batches, (long long)c->train.micro_batch,
          (long long)(p->micro_batches / p->dp), fm_fmt_count(n1, sizeof n1, p->tokens_per_step));
  fprintf(out, "memory per rank (%s, %s, ZeRO-%lld):\n", c->train.precision, p->optim->name,
          (long long)c->parallel.zero);
  row(out, "weights (compute copy)", p->params, p->compute_bytes == 2 ? "bf16" : "fp32 (also the master)");
  if (p->master > 0) row(out, "fp32 master shard", p->master, c->parallel.zero ? "1/dp of the weights" : "full");
  row(out, "gradients", p->grads, "fp32, one micro-batch");
  row(out, "gradient accumulator", p->grad_accum,
      c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT ? "int64 fixed point (determinism='exact')" : "fp32");
  char note[64];
  snprintf(note, sizeof note, "%d fp32 values per parameter%s", p->optim->state_per_param,
           c->parallel.zero ? ", 1/dp" : "");
  row(out, "optimizer state", p->optim_state, note);
  const double fixed = p->params + p->master + p->grads + p->grad_accum + p->optim_state;
  row(out, "activations", p->act, "micro-batch, recompute off");
  row(out, "activations (recompute)", p->act_recompute, "micro-batch, recompute on");
  row(out, "total", fixed + (c->model.recompute ? p->act_recompute : p->act),
      c->model.recompute ? "with recompute (deck)" : "without recompute (deck)");
  fprintf(out, "compute    %.4g GFLOP per token (6N + attention), %.4g TFLOP per step\n", p->flops_per_token / 1e9,
          p->flops_per_step / 1e12);
}
