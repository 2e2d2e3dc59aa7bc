/* plan.c: what a run will cost before it starts (fmhpc --check): exact
 * parameter counts from the model's tensor table, bytes per rank for each
 * arena at the chosen dp x tp, the bytes one rank sends per step over tp and
 * over dp, FLOPs, and whether it fits &parallel device_mem_gib (if not, the
 * smallest tp, micro-batch and recompute that do). The arena sizes are the
 * ones the step loop allocates (model tables, dist/reduce.c's buffers), so
 * the two are kept in one place. All byte counts are int64, every product
 * checked (fm_mul_i64): a plan that overflows is refused, never wrapped. */
#include "fmhpc/train.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"
#include "fmhpc/optim.h"

/* The CUDA backend's fixed cuBLASLt workspace (src/tensor/cuda/gemm.cu, FM__GEMM_WS_BYTES). */
#define FM_PLAN_GEMM_WS ((int64_t)32 << 20)

/* Checked int64 arithmetic: the first overflow sets *bad and the result is 0. */
static int64_t mul(bool *bad, int64_t a, int64_t b) {
  int64_t r = 0;
  if (fm_mul_i64(a, b, &r)) *bad = true;
  return *bad ? 0 : r;
}
static int64_t add(bool *bad, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) *bad = true;
  return *bad ? 0 : r;
}
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

static int64_t params_on_rank(const FmTensorTable *tab, int tp) {
  int64_t n = 0;
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    n += t->tp == FM_TP_NONE ? t->numel : ceil_div(t->numel, tp);
  }
  return n;
}

/* The shapes one tp rank holds in Megatron's layout: whole KV heads with
 * their query heads, a 1/tp slice of the MLP width and of the vocabulary;
 * the residual stream and the norms stay whole. Its activation table is the
 * model's own table at these dims. */
static FmModelDims tp_local_dims(const FmModelDims *d, int tp) {
  FmModelDims l = *d;
  l.NH = d->NH / tp;
  l.NKV = d->NKV / tp;
  l.F = ceil_div(d->F, tp);
  l.V = ceil_div(d->V, tp);
  return l;
}

/* The largest ZeRO-1 shard of n elements over dp ranks (fm_zero_range's). */
static int64_t largest_shard(int64_t n, int dp) {
  int64_t s = 1;
  for (int r = 0; r < dp; r++) {
    int64_t lo = 0, hi = 0;
    fm_zero_range(n, FM_DIST_BLOCK, dp, r, &lo, &hi);
    if (hi - lo > s) s = hi - lo;
  }
  return s;
}

typedef struct Layout {
  int tp, dp;
  int64_t b; /* micro-batch */
  bool recompute;
} Layout;

/* Memory and communication of one layout into p (p->model, dims, optim set). */
static void plan_cost(FmPlan *p, const FmDeck *deck, const FmTensorTable *tab, Layout lay, bool *bad) {
  const FmConfig *c = &deck->c;
  const FmModelDims *d = &p->dims;
  const bool bf16 = c->choice[FM_KEY_train_precision] == FM_PRECISION_BF16;
  const bool exact = c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT;
  const bool zero = c->parallel.zero != 0;
  const int64_t n = params_on_rank(tab, lay.tp), S = largest_shard(n, lay.dp), P = lay.dp;
  const int64_t cb = bf16 ? 2 : 4, mine = zero ? S : n; /* optimizer-side elements on this rank */
  p->n_params_rank = n;
  p->shard = S;
  p->compute_bytes = (int)cb;
  p->params = mul(bad, n, cb);
  p->master = bf16 ? mul(bad, mine, 4) : 0; /* with f32 compute the weights are the master */
  p->grads = mul(bad, n, 4);
  /* dist/reduce.c: exact: int64 accumulator (P*S) and shard (S); the all-gather goes in place, but above
   * INT_MAX elements (one MPI call) it stages through f32 S and P*S; fast: f32 P*S twice. Exact with every dp
   * rank on one node: the accumulator (P*S int64) and the all-gather's S floats only, in a shared window
   * (fm_comm_shm): less; the figure here is the ring's (a plan does not know the nodes). */
  const int64_t ring = add(bad, mul(bad, P, S), S);
  const int64_t staged = n > INT_MAX ? mul(bad, ring, 4) : 0;
  p->grad_accum = exact ? add(bad, mul(bad, ring, 8), staged) : mul(bad, mul(bad, P, S), 8);
  p->optim_state = mul(bad, mul(bad, mine, 4), p->optim->state_per_param);
  const FmModelDims l = tp_local_dims(d, lay.tp);
  p->act = mul(bad, fm_model_act_elems(p->model, &l, lay.b, false), cb);
  p->act_recompute = mul(bad, fm_model_act_elems(p->model, &l, lay.b, true), cb);
  /* Device only: flash attention's grow-once copies (attention_flash.cu: bf16 q and dout of b*T x NH*HS,
   * k and v of b*T x NKV*HS, fp32 D of b*NH*T), used at c=bf16 with head size 64 or 128; the cuBLASLt
   * workspace. tp > 1 (host backends): the tp sums' and the vocab-parallel cross-entropy's scratch. */
  const int64_t Nt = mul(bad, lay.b, d->T);
  p->attn_scratch = 0;
  if (p->on_device && bf16 && (d->HS == 64 || d->HS == 128))
    p->attn_scratch =
        add(bad, mul(bad, mul(bad, Nt, 2 * (l.NH + l.NKV)), mul(bad, d->HS, 2)), mul(bad, mul(bad, Nt, l.NH), 4));
  p->gemm_ws = p->on_device ? FM_PLAN_GEMM_WS : 0;
  p->dev_grad =
      p->on_device && lay.tp == 1 ? add(bad, mul(bad, S, 4), zero ? 0 : mul(bad, n, 4)) : 0; /* tp > 1: host update */
  p->tp_scratch = 0;
  if (lay.tp > 1 && !*bad)
    p->tp_scratch = mul(bad,
                        add(bad, fm_comm_sum_ordered_scratch_p(lay.tp, mul(bad, Nt, d->C)),
                            fm_vocab_xent_scratch_p(lay.tp, Nt, d->C, l.V)),
                        4);
  int64_t fixed = add(bad, add(bad, p->params, p->master), add(bad, p->grads, p->grad_accum));
  fixed = add(bad, fixed, p->optim_state);
  fixed = add(bad, fixed, p->on_device ? add(bad, add(bad, p->attn_scratch, p->gemm_ws), p->dev_grad) : p->tp_scratch);
  p->total = add(bad, fixed, lay.recompute ? p->act_recompute : p->act);

  /* Over tp, per micro-batch (Megatron, no sequence parallelism): each layer
   * sums b*T*C activations twice forward (after the row-parallel o_proj and
   * down projection) and twice backward (the input gradients of the
   * column-parallel QKV and gate/up, or c_fc), twice more when recompute
   * runs the forward again; plus the vocab-parallel embedding's forward sum
   * and the LM head's input gradient. A sum is fm_comm_sum_ordered (an
   * all-gather, then adds in rank order): each rank sends (tp-1) copies. */
  const int64_t mb_rank = c->train.global_batch / lay.b / P, bT = mul(bad, lay.b, d->T);
  const int64_t sums = add(bad, add(bad, mul(bad, 4, d->L), 2), lay.recompute ? mul(bad, 2, d->L) : 0);
  const int64_t tp1 = lay.tp - 1;
  p->tp_act = mul(bad, mul(bad, mul(bad, tp1 * 4, mul(bad, bT, d->C)), sums), mb_rank);
  /* Vocab-parallel cross-entropy: each rank's row max, sum of exponentials and target logit (3 doubles per
   * row, b*T rows) all-gathered once and combined in rank order (its input gradient is one of the sums above). */
  p->tp_xent = mul(bad, mul(bad, tp1 * 8 * 3, bT), mb_rank);
  /* Over dp, per step: the ring reduce-scatter of P blocks of S (int64 exact, f32 fast), the f32 all-gather of
   * S per rank, and in exact mode the max of the per-block scales (a ring all-reduce of nb floats) and the
   * norm's block sums (an all-gather of ceil(S/block) doubles). */
  p->dp_grad = mul(bad, mul(bad, P - 1, S), exact ? 8 : 4);
  p->dp_gather = mul(bad, mul(bad, P - 1, S), 4);
  const int64_t nb = ceil_div(n, FM_DIST_BLOCK);
  p->dp_scales =
      add(bad, exact ? mul(bad, 2 * (P - 1), ceil_div(nb, P) * 4) : 0, mul(bad, P - 1, ceil_div(S, FM_DIST_BLOCK) * 8));
}

/* A tp rank owns whole KV heads (GPT-2: heads) and d_ff/tp of the MLP. */
static int valid_tp(const FmPlan *p, int tp) {
  return p->world % tp == 0 && p->dims.NKV % tp == 0 && p->dims.F % tp == 0;
}

/* The deck's micro-batch count must split evenly over dp. */
static bool micro_ok(const FmDeck *deck, int64_t b, int dp) {
  const int64_t B = deck->c.train.global_batch;
  return B % b == 0 && (B / b) % dp == 0;
}

static int desc_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

/* The divisors of B up to bmax, largest first, in a malloc'd array (*n of
 * them): the only micro-batches micro_ok can take, found in O(sqrt B) steps
 * (B is up to 2^40: a walk down from the deck's micro-batch was O(b)). */
static int64_t *micro_candidates(int64_t B, int64_t bmax, int64_t *n) {
  int64_t cap = 64, k = 0;
  int64_t *d = fm_xmalloc((size_t)cap * sizeof *d);
  for (int64_t i = 1; i <= B / i; i++) {
    if (B % i != 0) continue;
    const int64_t pair[2] = {i, B / i};
    for (int j = 0; j < (pair[0] == pair[1] ? 1 : 2); j++) {
      if (pair[j] > bmax) continue;
      if (k == cap) d = fm_xrealloc(d, (size_t)(cap *= 2) * sizeof *d);
      d[k++] = pair[j];
    }
  }
  qsort(d, (size_t)k, sizeof *d, desc_i64);
  *n = k;
  return d;
}

/* Smallest tp first; with it the largest micro-batch up to the deck's, first
 * with the deck's recompute, then with recompute on. */
static void plan_fit(FmPlan *p, const FmDeck *deck, const FmTensorTable *tab, bool *bad) {
  FmPlan q = *p;
  const bool rec0 = deck->c.model.recompute;
  int64_t nb = 0;
  int64_t *cand = micro_candidates(deck->c.train.global_batch, deck->c.train.micro_batch, &nb);
  for (int tp = 1; tp <= p->world; tp++) {
    if (!valid_tp(p, tp)) continue;
    for (int pass = 0; pass < (rec0 ? 1 : 2); pass++)
      for (int64_t i = 0; i < nb; i++) {
        const int64_t b = cand[i];
        if (!micro_ok(deck, b, p->world / tp)) continue;
        const Layout lay = {tp, p->world / tp, b, rec0 || pass == 1};
        plan_cost(&q, deck, tab, lay, bad);
        if (*bad) goto done;
        if (q.total <= p->device_mem) {
          p->fit_tp = tp;
          p->fit_micro = b;
          p->fit_recompute = lay.recompute;
          p->fit_total = q.total;
          goto done;
        }
      }
  }
done:
  free(cand);
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
  if (p->dims.F % p->tp != 0) /* a tp rank owns d_ff/tp of the MLP's columns: the training's rule, and its words */
    return fm_model_check_tp(&p->dims, p->tp, deck, err);
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
  FmSchedule sched; /* the schedule's rules (warmup <= steps, each kind's own), as training checks them */
  if (fm_schedule_from_deck(&sched, deck, err)) rc = FM_EDECK;
  FmOptimParams op; /* the optimizer's own rules (two betas for lion and sophia), as training checks them */
  if (p->optim && fm_optim_params_from_deck(&op, deck, err)) rc = FM_EDECK;
  if (rc == 0) rc = plan_layout(p, deck, world_size, err);
  if (rc == 0 && p->tp > 1 && p->optim->hook) { /* as training refuses it (train.c): --check says so too */
    fm_deck_error(deck, err, FM_KEY_optim_name,
                  "'%s' samples from full-vocabulary logits each step, which are not gathered over &parallel tp = %d",
                  p->optim->name, p->tp);
    if (err) fprintf(err, "hint: adamw or lion under tp > 1, or tp = 1\n");
    rc = FM_EDECK;
  }
  if (rc) return rc;
  char why[256];
  int st = 0;
  const FmBackend *be = fm_backend_choose(c->train.backend, fm_train_backend_needs(c), why, (int)sizeof why, &st);
  p->on_device = be && !be->host_accessible;
  /* &parallel comm, as training resolves it (train.c): 'nccl' where NCCL
   * cannot carry it is the same deck error here. Except planning on a node
   * without a GPU (a login node) in a build with NCCL under backend = 'auto':
   * the plan is for the GPU nodes, so it is said, not refused. */
  const char *comm_hint = NULL;
  int use_nccl = 0;
  if (be && !p->on_device && c->choice[FM_KEY_parallel_comm] == FM_COMM_NCCL && fm_comm_nccl_built() &&
      fm_strcasecmp(c->train.backend, "auto") == 0) {
    use_nccl = 1;
    snprintf(p->comm_why, sizeof p->comm_why,
             "asked for; this node has no usable GPU, so the plan below is the CPU backend's and training here "
             "would stop: plan on a GPU node for device memory");
  } else if (be && fm_comm_choose(c->choice[FM_KEY_parallel_comm], p->on_device, &use_nccl, p->comm_why,
                                  sizeof p->comm_why, &comm_hint)) {
    fm_deck_error(deck, err, FM_KEY_parallel_comm, "%s", p->comm_why);
    if (err && comm_hint) fprintf(err, "hint: %s\n", comm_hint);
    return FM_EDECK;
  }
  p->use_nccl = use_nccl != 0;

  FmTensorTable tab;
  fm_model_param_table(&tab, p->model, &p->dims);
  p->n_params = tab.numel;
  bool bad = false;
  const Layout lay = {p->tp, p->dp, c->train.micro_batch, c->model.recompute};
  plan_cost(p, deck, &tab, lay, &bad);
  p->device_mem = (int64_t)(c->parallel.device_mem_gib * 1073741824.0);
  p->device_free = -1;
  int64_t dev_free = -1, dev_total = -1; /* no device_mem_gib: the device's own size (cudaMemGetInfo) */
  if (p->device_mem <= 0 && p->on_device && be->device_mem && be->device_mem(&dev_free, &dev_total) == 0 &&
      dev_total > 0) {
    p->device_mem = dev_total;
    p->device_free = dev_free;
    p->device_measured = true;
  }
  if (!bad && p->device_mem > 0 && p->total > p->device_mem) plan_fit(p, deck, &tab, &bad);
  fm_table_free(&tab);
  if (bad) {
    fm_deck_error(deck, err, FM_KEY_train_global_batch,
                  "the plan's bytes per rank or per step overflow int64 at this model and batch "
                  "(a smaller global_batch, micro_batch or model)");
    return FM_EDECK;
  }
  p->tokens_per_step = c->train.global_batch * p->dims.T;
  p->flops_per_token = p->model->train_flops_per_token(&p->dims);
  p->flops_per_step = p->flops_per_token * (double)p->tokens_per_step;
  return 0;
}

void fm_plan_mem_figures(const FmPlan *p, const FmDeck *deck) {
  fm_mem_plan_set(FM_MEM_WEIGHTS, p->params);
  fm_mem_plan_set(FM_MEM_GRADS, p->grads);
  fm_mem_plan_set(FM_MEM_ACT, deck->c.model.recompute ? p->act_recompute : p->act);
  fm_mem_plan_set(FM_MEM_REDUCE, p->grad_accum + p->dev_grad);
  fm_mem_plan_set(FM_MEM_OPTIM, p->optim_state);
  fm_mem_plan_set(FM_MEM_ATTN, p->attn_scratch);
  fm_mem_plan_set(FM_MEM_GEMM_WS, p->gemm_ws);
}

/* One figure: readable size, exact bytes, and the formula it came from. */
static void row(FILE *out, const char *what, int64_t bytes, const char *formula) {
  char b[32], e[32];
  fprintf(out, "  %-26s %10s %19s B   %s\n", what, fm_fmt_bytes(b, sizeof b, (double)bytes),
          fm_fmt_count(e, sizeof e, bytes), formula);
}

static void print_memory(const FmPlan *p, const FmDeck *deck, FILE *out) {
  const FmConfig *c = &deck->c;
  const bool zero = c->parallel.zero != 0;
  char n1[32], n2[32], f[160];
  fprintf(out, "memory per rank (%s, %s, ZeRO-%lld; n = %s parameters on this rank, S = %s its largest dp shard):\n",
          c->train.precision, p->optim->name, (long long)c->parallel.zero,
          fm_fmt_count(n1, sizeof n1, p->n_params_rank), fm_fmt_count(n2, sizeof n2, p->shard));
  row(out, "weights (compute copy)", p->params,
      p->compute_bytes == 2 ? "n x 2 (bf16)" : "n x 4 (fp32, also the master)");
  if (p->master > 0) row(out, "fp32 master", p->master, zero ? "S x 4" : "n x 4");
  row(out, "gradients", p->grads, "n x 4 (fp32, one micro-batch)");
  row(out, "reduction buffers", p->grad_accum,
      c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT
          ? "(dp x S + S) x 8 (int64 accumulator + shard, determinism='exact'; n > 2^31-1: x 12, fp32 staging "
            "too; dp on one node: dp x S x 8 + S x 4, a shared window)"
          : "dp x S x 8 (fp32 staging)");
  snprintf(f, sizeof f, "%s x 4 x %d (fp32 state values per parameter)", zero ? "S" : "n", p->optim->state_per_param);
  row(out, "optimizer state", p->optim_state, f);
  snprintf(f, sizeof f, "model table at b = %lld, tp-local NH/tp, NKV/tp, F/tp, V/tp, x %d",
           (long long)c->train.micro_batch, p->compute_bytes);
  row(out, "activations", p->act, f);
  row(out, "activations (recompute)", p->act_recompute, "the same, one layer's kept at a time");
  if (p->attn_scratch > 0)
    row(out, "attention scratch", p->attn_scratch,
        "flash (c=bf16): bf16 q, dout b*T x NH/tp*HS and k, v b*T x NKV/tp*HS, x 2; fp32 D b*NH/tp*T x 4");
  if (p->gemm_ws > 0) row(out, "cuBLASLt workspace", p->gemm_ws, "fixed, one per process (32 MiB)");
  if (p->dev_grad > 0)
    row(out, "gradient shard (device)", p->dev_grad,
        zero ? "S x 4 (the summed shard the optimizer reads)" : "(S + n) x 4 (the summed shard, the full gradient)");
  if (p->tp_scratch > 0)
    row(out, p->on_device ? "tp scratch (host)" : "tp scratch", p->tp_scratch,
        "(tp sums tp x min(b*T*C, 2^20) + vocab xent tile, 6 b*T (tp+1), b*T*C and its sum's) x 4");
  row(out, "total", p->total, c->model.recompute ? "with recompute (deck)" : "without recompute (deck)");
}

static void print_comm(const FmPlan *p, const FmDeck *deck, FILE *out) {
  const FmConfig *c = &deck->c;
  const bool exact = c->choice[FM_KEY_train_determinism] == FM_DETERMINISM_EXACT;
  fprintf(out, "communication per step, bytes one rank sends (M/dp = %lld micro-batches of b = %lld on each rank):\n",
          (long long)(p->micro_batches / p->dp), (long long)c->train.micro_batch);
  fprintf(out, "  over tp (%d rank%s, inside a node; fixed-order sums: all-gather, then add in rank order)\n", p->tp,
          p->tp == 1 ? "" : "s");
  row(out, "activation sums", p->tp_act,
      c->model.recompute ? "(tp-1) x 4 x b*T*C x (4L+2 + 2L recompute) x M/dp" : "(tp-1) x 4 x b*T*C x (4L+2) x M/dp");
  row(out, "vocab-parallel xent", p->tp_xent, "(tp-1) x 8 x 3 b*T x M/dp (max, sum-exp, target logit: doubles)");
  fprintf(out, "  over dp (%d rank%s, across nodes)\n", p->dp, p->dp == 1 ? "" : "s");
  row(out, "gradient reduce-scatter", p->dp_grad, exact ? "(dp-1) x S x 8 (int64, exact)" : "(dp-1) x S x 4 (fp32)");
  row(out, c->parallel.zero ? "weight all-gather" : "gradient all-gather", p->dp_gather, "(dp-1) x S x 4 (fp32)");
  row(out, "scales, norm blocks", p->dp_scales,
      exact ? "2(dp-1) x ceil(nb/dp) x 4 + (dp-1) x ceil(S/65536) x 8, nb = ceil(n/65536)"
            : "(dp-1) x ceil(S/65536) x 8");
}

static void print_fit(const FmPlan *p, FILE *out) {
  char need[32], have[32], got[32], room[32], src[96] = "";
  fm_fmt_bytes(need, sizeof need, (double)p->total);
  if (p->device_mem <= 0) {
    fprintf(out, "fit        device memory unknown (set &parallel device_mem_gib to test the %s per rank)\n", need);
    return;
  }
  fm_fmt_bytes(have, sizeof have, (double)p->device_mem);
  if (p->device_measured) {
    char fr[32];
    snprintf(src, sizeof src, " (the device's, cudaMemGetInfo: %s free now)",
             fm_fmt_bytes(fr, sizeof fr, (double)p->device_free));
  }
  const int64_t head = p->device_mem - p->total;
  fm_fmt_bytes(room, sizeof room, (double)(head >= 0 ? head : -head));
  if (p->total <= p->device_mem) {
    fprintf(out, "fit        %s per rank of a %s device%s: fits, headroom %s\n", need, have, src, room);
    return;
  }
  fprintf(out, "fit        %s per rank of a %s device%s: DOES NOT FIT, short by %s\n", need, have, src, room);
  if (p->fit_tp == 0) {
    fprintf(out,
            "           no tp dividing %d ranks, %lld KV heads and d_ff %lld fits, at any micro-batch, with "
            "recompute: more ranks or a smaller model\n",
            p->world, (long long)p->dims.NKV, (long long)p->dims.F);
    return;
  }
  fprintf(out, "           smallest that fits: tp %d, micro_batch %lld, recompute %s (%s per rank):\n", p->fit_tp,
          (long long)p->fit_micro, p->fit_recompute ? "on" : "off",
          fm_fmt_bytes(got, sizeof got, (double)p->fit_total));
  fprintf(out, "           suggest: parallel%%tp=%d train%%micro_batch=%lld model%%recompute=%s\n", p->fit_tp,
          (long long)p->fit_micro, p->fit_recompute ? ".true." : ".false.");
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
  const FmBackend *be = fm_backend_choose(c->train.backend, fm_train_backend_needs(c), why, (int)sizeof why, &st);
  fprintf(out, "backend    %s (%s)\n", be ? be->name : "none: training would stop", why);
  if (be) fprintf(out, "comm       %s (%s)\n", p->use_nccl ? "nccl" : "mpi", p->comm_why);
  fprintf(out, "parameters %s (%s per rank after the tp split)\n", fm_fmt_count(n1, sizeof n1, p->n_params),
          fm_fmt_count(n2, sizeof n2, p->n_params_rank));
  fprintf(out, "batch      %lld sequences = %lld micro-batches of %lld, %lld per dp rank; %s tokens per step\n",
          (long long)c->train.global_batch, (long long)p->micro_batches, (long long)c->train.micro_batch,
          (long long)(p->micro_batches / p->dp), fm_fmt_count(n1, sizeof n1, p->tokens_per_step));
  print_memory(p, deck, out);
  print_comm(p, deck, out);
  print_fit(p, out);
  fprintf(out, "compute    %.4g GFLOP per token (6N + attention), %.4g TFLOP per step\n", p->flops_per_token / 1e9,
          p->flops_per_step / 1e12);
}
