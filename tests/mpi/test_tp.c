/* test_tp.c: tensor-parallel layers (src/model: Megatron-LM layout) over
 * the world's 1-4 ranks as one tp group, against the unsharded model run on
 * each rank alone, for a small GPT-2 and a small GQA Llama: the same
 * canonical weights after init (bitwise), the loss and every canonical weight
 * gradient (every sharded layer: column-parallel q/k/v and fused qkv,
 * row-parallel o_proj/c_proj/down with their biases added once, vocab-parallel
 * embedding and LM head, replicated norms) equal within fp32 rounding, and
 * the same bits run to run at a fixed tp. The dims divide by 1-4 and the
 * vocabulary does not (an uneven vocab split). */
#include "fm_test.h"
#include "fmhpc/model.h"

enum { B = 2, T = 8 };

static FmModelDims dims_of(const char *arch) {
  FmModelDims d = {.C = 48,
                   .L = 2,
                   .NH = 12,
                   .NKV = 12,
                   .HS = 4,
                   .F = 96,
                   .V = 101,
                   .T = T,
                   .tied = true,
                   .norm_eps = 1e-5,
                   .rope_theta = 10000.0};
  if (arch[0] == 'l') { /* GQA: 24 query heads over 12 KV heads, head size != C / NH, untied */
    d.NH = 24;
    d.F = 72;
    d.tied = false;
  }
  return d;
}

typedef struct Out {
  double loss;
  float *w, *g; /* canonical */
  int64_t n;
} Out;

static void run(Out *o, const char *arch, FmComm *tp, bool recompute) {
  int status = 0;
  const FmBackend *be = fm_backend_get("cpu", &status);
  const FmModelKind *k = fm_model_find(arch);
  const FmModelDims d = dims_of(arch);
  FmModel *m = NULL;
  FM_CHECK(fm_model_create_tp(&m, k, &d, be, B, recompute, tp, stderr));
  fm_model_init_weights(m, 99, 0.2, true);
  int32_t tok[B * T], tgt[B * T], pos[B * T];
  float wt[B * T];
  for (int i = 0; i < B * T; i++) {
    tok[i] = (int32_t)((i * 37 + 5) % d.V);
    tgt[i] = (int32_t)((i * 53 + 11) % d.V);
    pos[i] = i % T;
    wt[i] = i % 7 == 3 ? 0.0f : 1.0f / (B * T);
  }
  const FmModelInput in = {tok, tgt, pos, NULL};
  fm_model_zero_grad(m);
  o->loss = fm_model_forward_backward(m, &in, wt, true);
  const FmTensorTable *ct = fm_model_canon_params(m);
  o->n = ct->numel;
  o->w = malloc(sizeof(float) * (size_t)o->n);
  o->g = malloc(sizeof(float) * (size_t)o->n);
  fm_model_tp_gather(m, fm_model_param_arena(m), o->w);
  fm_model_tp_gather(m, fm_model_grad_arena(m), o->g);
  /* scatter is gather's inverse */
  float *back = malloc(sizeof(float) * (size_t)fm_model_params(m)->numel);
  fm_model_tp_scatter(m, o->g, back);
  FM_EXPECT(memcmp(back, fm_model_grad_arena(m), sizeof(float) * (size_t)fm_model_params(m)->numel) == 0);
  free(back);
  fm_model_free(m);
}

static void check(const char *arch) {
  FmComm *world = fm_comm_mpi_create(MPI_COMM_WORLD);
  Out ref, sh, again, rc;
  run(&ref, arch, NULL, false); /* the unsharded model, this rank alone */
  run(&sh, arch, world, false);
  run(&again, arch, world, false);
  run(&rc, arch, world, true);
  FM_REQUIRE(ref.n == sh.n && ref.n > 10000);
  FM_EXPECT(memcmp(ref.w, sh.w, sizeof(float) * (size_t)ref.n) == 0); /* canonical init at any tp */
  FM_EXPECT_NEAR(sh.loss, ref.loss, 1e-6, 0.0);
  double gmax = 0, worst = 0;
  for (int64_t i = 0; i < ref.n; i++) gmax = fabs(ref.g[i]) > gmax ? fabs(ref.g[i]) : gmax;
  int64_t bad = 0, nonzero = 0;
  for (int64_t i = 0; i < ref.n; i++) {
    const double e = fabs((double)sh.g[i] - (double)ref.g[i]);
    worst = e > worst ? e : worst;
    bad += e > 1e-5 * gmax;
    nonzero += ref.g[i] != 0.0f;
  }
  FM_EXPECT(nonzero > ref.n / 2); /* the comparison covers real gradients */
  FM_EXPECT_EQ_INT(bad, 0);
  /* a fixed tp gives the same bits run to run, and with recompute */
  FM_EXPECT(sh.loss == again.loss);
  FM_EXPECT(memcmp(sh.g, again.g, sizeof(float) * (size_t)sh.n) == 0);
  FM_EXPECT(memcmp(sh.g, rc.g, sizeof(float) * (size_t)sh.n) == 0);
  if (world->rank == 0)
    printf("%s tp=%d: loss %.9g vs unsharded %.9g, %lld gradients, worst |diff| %.3g (max |g| %.3g)\n", arch,
           world->size, sh.loss, ref.loss, (long long)ref.n, worst, gmax);
  Out *all[] = {&ref, &sh, &again, &rc};
  for (int i = 0; i < 4; i++) {
    free(all[i]->w);
    free(all[i]->g);
  }
  fm_comm_destroy(world);
}

FM_TEST(tp_gpt2_matches_unsharded) { check("gpt2"); }
FM_TEST(tp_llama_gqa_matches_unsharded) { check("llama"); }
