/* test_model.c: model tensor tables and the --check plan. Parameter counts
 * are compared with the published sizes of the reference models (Hugging
 * Face's GPT-2 124M, Meta's Llama-2-7B) and with the flagship's count worked
 * out by hand in the issue; shapes with the HF architecture definitions. */
#include "fm_test.h"
#include "fmhpc/model.h"
#include "fmhpc/train.h"

/* Bind a deck file from inputs/ plus overrides; FM_OK or the bind status. */
static int load(FmDeck *d, const char *deck, int nover, const char *const *over) {
  char path[512], *text = NULL;
  snprintf(path, sizeof path, "%s/inputs/%s", FMHPC_SOURCE_DIR, deck);
  if (fm_read_file(path, &text, NULL)) return FM_EIO;
  FmDeckSource src[8] = {{path, text, false}};
  for (int i = 0; i < nover; i++) src[1 + i] = (FmDeckSource){"<command line>", over[i], true};
  fm_deck_init(d);
  int rc = fm_deck_bind(d, 1 + nover, src, stderr);
  free(text);
  return rc;
}

static int64_t count_params(const char *deck, int nover, const char *const *over) {
  FmDeck d;
  if (load(&d, deck, nover, over)) return -1;
  FmModelDims dims;
  const FmModelKind *k;
  if (fm_model_dims(&dims, &k, &d, stderr)) return -2;
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &dims);
  int64_t n = tab.numel;
  fm_table_free(&tab);
  fm_deck_free(&d);
  return n;
}

FM_TEST(flagship_param_count) { FM_EXPECT_EQ_INT(count_params("llama_1p2b.in", 0, NULL), 1203807744); }

FM_TEST(gpt2_small_matches_hf) {
  /* GPT2LMHeadModel("gpt2").num_parameters() = 124,439,808 (tied). */
  FM_EXPECT_EQ_INT(count_params("gpt2_small.in", 0, NULL), 124439808);
  /* Untied adds one V x C output matrix. */
  const char *untie[] = {"model%tie_embeddings=F"};
  FM_EXPECT_EQ_INT(count_params("gpt2_small.in", 1, untie), 124439808 + 50257LL * 768);
}

FM_TEST(llama2_7b_matches_meta) {
  /* Llama-2-7b: 6,738,415,616 parameters (LlamaForCausalLM, untied). */
  FM_EXPECT_EQ_INT(count_params("llama2.in", 0, NULL), 6738415616LL);
}

FM_TEST(llama_shapes_follow_hf) {
  FmDeck d;
  FM_REQUIRE(load(&d, "llama_1p2b.in", 0, NULL) == 0);
  FmModelDims dims;
  const FmModelKind *k;
  FM_REQUIRE(fm_model_dims(&dims, &k, &d, stderr) == 0);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &dims);
  const FmTensor *wk = fm_table_find(&tab, "h.attn.wk");
  FM_REQUIRE(wk);
  /* k_proj: out = num_key_value_heads * head_dim = 4 * 64, in = 1536. */
  FM_EXPECT_EQ_INT(wk->ndim, 3);
  FM_EXPECT_EQ_INT(wk->shape[0], 24);
  FM_EXPECT_EQ_INT(wk->shape[1], 256);
  FM_EXPECT_EQ_INT(wk->shape[2], 1536);
  const FmTensor *down = fm_table_find(&tab, "h.mlp.w_down");
  FM_REQUIRE(down);
  FM_EXPECT_EQ_INT(down->shape[1], 1536);
  FM_EXPECT_EQ_INT(down->shape[2], 6912);
  FM_EXPECT(down->flags & FM_TF_RESIDUAL);
  FM_EXPECT(fm_table_find(&tab, "lm_head") != NULL); /* untied */
  /* Offsets are contiguous: each tensor starts where the previous ended. */
  for (int i = 1; i < tab.n; i++) FM_EXPECT_EQ_INT(tab.t[i].offset, tab.t[i - 1].offset + tab.t[i - 1].numel);
  fm_table_free(&tab);
  fm_deck_free(&d);
}

FM_TEST(llama_default_ffn_rule) {
  /* Llama's multiple_of=256 rule: C=4096 -> 11008; C=1536 -> 4096. */
  const char *o1[] = {"model%d_ff=0"};
  FmDeck d;
  FM_REQUIRE(load(&d, "llama2.in", 1, o1) == 0);
  FmModelDims dims;
  FM_REQUIRE(fm_model_dims(&dims, NULL, &d, stderr) == 0);
  FM_EXPECT_EQ_INT(dims.F, 11008);
  fm_deck_free(&d);
  FM_REQUIRE(load(&d, "llama_1p2b.in", 1, o1) == 0);
  FM_REQUIRE(fm_model_dims(&dims, NULL, &d, stderr) == 0);
  FM_EXPECT_EQ_INT(dims.F, 4096);
  fm_deck_free(&d);
}

FM_TEST(plan_bytes_and_flops) {
  FmDeck d;
  FM_REQUIRE(load(&d, "llama_1p2b.in", 0, NULL) == 0);
  FmPlan p;
  FM_REQUIRE(fm_plan_make(&p, &d, 4, stderr) == 0);
  const double N = 1203807744.0;
  FM_EXPECT_EQ_INT(p.dp, 4);
  FM_EXPECT_EQ_INT(p.micro_batches, 128);
  /* ZeRO-1 shards are whole 65536-element blocks: 18369 blocks over 4 ranks
   * split at 4592, 9184, 13776; the last rank's 4593 (ending at N) is the largest. */
  const double S = N - 13776.0 * 65536;
  FM_EXPECT_NEAR((double)p.shard, S, 0, 0);
  FM_EXPECT_NEAR((double)p.params, N * 2, 0, 0);                /* bf16 compute copy */
  FM_EXPECT_NEAR((double)p.master, S * 4, 0, 0);                /* fp32 master, the largest dp shard */
  FM_EXPECT_NEAR((double)p.grad_accum, (4 * S + S) * 8, 0, 0); /* int64 accumulator + shard (reduce.c) */
  FM_EXPECT_NEAR((double)p.optim_state, S * 8, 0, 0);           /* AdamW m, v of the shard */
  /* 6 x matmul params + 12 L (NH HS) T: matmul params exclude the embedding
   * lookup and the norms. */
  const double matmul = N - 100000.0 * 1536 - 1536.0 * (2 * 24 + 1);
  FM_EXPECT_NEAR(p.flops_per_token, 6 * matmul + 12.0 * 24 * 1536 * 2048, 1e-12, 0);
  FM_EXPECT_EQ_INT(p.tokens_per_step, 512 * 2048);
  fm_deck_free(&d);
}

/* The values GPT-2's activation table keeps for backward (its tensors not
 * named d*: those are backward scratch). */
static int64_t kept_by_table(const FmModelKind *k, const FmModelDims *d, bool recompute) {
  FmTensorTable t;
  fm_table_init(&t);
  k->acts(&t, d, 1, recompute);
  int64_t kept = 0;
  for (int i = 0; i < t.n; i++)
    if (t.t[i].name[0] != 'd') kept += t.t[i].numel;
  fm_table_free(&t);
  return kept;
}

FM_TEST(activation_count_by_hand) {
  /* A tiny GPT-2 whose activation count is worked out term by term:
   * C=8, L=2, NH=2, F=32, V=16, T=4, b=1 -> BT=4. Per layer:
   * ln1 4*(8+2)=40, qkv 4*24=96, attn out 32, lse 1*2*4=8, residual 32,
   * ln2 40, fc + gelu 2*4*32=256, residual 32 -> 536. Outside: embeddings 32,
   * lnf 40 -> 72 (the per-token losses and logits live in the batch buffers,
   * not the table). */
  const char *o[] = {"model%d_model=8", "model%n_layer=2", "model%n_head=2", "model%vocab_size=16", "model%seq_len=4"};
  FmDeck d;
  FM_REQUIRE(load(&d, "gpt2_nano.in", 5, o) == 0);
  FmModelDims dims;
  const FmModelKind *k;
  FM_REQUIRE(fm_model_dims(&dims, &k, &d, stderr) == 0);
  FM_EXPECT_EQ_INT(kept_by_table(k, &dims, false), 2 * 536 + 72);
  /* Recompute keeps the two layer inputs (2*32, the first being the
   * embeddings, counted once), one live layer and lnf. */
  FM_EXPECT_EQ_INT(kept_by_table(k, &dims, true), 2 * 32 + 536 + 40);
  fm_deck_free(&d);
}

FM_TEST(model_rules_name_the_key) {
  const char *o[] = {"model%n_kv_head=5"}; /* 24 query heads over 5 KV heads */
  FmDeck d;
  FM_REQUIRE(load(&d, "llama_1p2b.in", 1, o) == 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&buf, &len);
  FmModelDims dims;
  FM_EXPECT_EQ_INT(fm_model_dims(&dims, NULL, &d, err), FM_EDECK);
  fclose(err);
  FM_EXPECT_CONTAINS(buf, "<command line>");
  FM_EXPECT_CONTAINS(buf, "n_kv_head");
  FM_EXPECT_CONTAINS(buf, "must divide n_head = 24");
  free(buf);
  fm_deck_free(&d);
}

/* fm_model_dims_diff, the one rule of "the same model" for loading and
 * resuming a checkpoint: resolved dims compared, rope_theta only where RoPE
 * is used, each difference with both values as a deck writes them. */
FM_TEST(dims_diff_resolved_and_rope) {
  const FmModelKind *g = fm_model_find("gpt2"), *l = fm_model_find("llama");
  FM_REQUIRE(g && l && !g->rope && l->rope);
  FmModelDims a = {.C = 64,
                   .L = 2,
                   .NH = 4,
                   .NKV = 4,
                   .HS = 16,
                   .F = 256,
                   .V = 300,
                   .T = 32,
                   .tied = true,
                   .norm_eps = 1e-5,
                   .rope_theta = 10000.0};
  FmModelDims b = a;
  FmModelDiff d[16];
  FM_EXPECT_EQ_INT(fm_model_dims_diff(g, &a, g, &b, d, 16), 0);
  b.rope_theta = 500000.0;
  b.T = 64;                                                     /* seq_len is the caller's */
  FM_EXPECT_EQ_INT(fm_model_dims_diff(g, &a, g, &b, d, 16), 0); /* GPT-2 has no RoPE */
  FM_EXPECT_EQ_INT(fm_model_dims_diff(l, &a, l, &b, d, 16), 1);
  FM_EXPECT_EQ_STR(d[0].key, "rope_theta");
  FM_EXPECT_EQ_STR(d[0].then, "10000.0");
  FM_EXPECT_EQ_STR(d[0].now, "500000.0");
  b = a;
  b.NH = 8;
  b.HS = 8;
  b.tied = false;
  FM_EXPECT_EQ_INT(fm_model_dims_diff(g, &a, l, &b, d, 2),
                   4); /* arch, n_head, head_dim, tie_embeddings: all counted, max filled */
  FM_EXPECT_EQ_STR(d[0].key, "arch");
  FM_EXPECT_EQ_STR(d[0].then, "'gpt2'");
  FM_EXPECT_EQ_STR(d[0].now, "'llama'");
  FM_EXPECT_EQ_STR(d[1].key, "n_head");
  FM_EXPECT_EQ_STR(d[1].then, "4");
  FM_EXPECT_EQ_STR(d[1].now, "8");
}
