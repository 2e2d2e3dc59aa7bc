/* hf_gpt2.c: GPT-2's Hugging Face adapter (GPT2LMHeadModel, GPT2Config): the
 * tensor name map and config.json written on export and checked on import.
 *
 * Layouts: our linear weights are (out, in) row-major like torch.nn.Linear.
 * GPT-2 uses Conv1D, which stores (in, out): c_attn, attn.c_proj, mlp.c_fc and
 * mlp.c_proj are the transposes of ours. c_attn's 3C outputs are q, k, v in
 * that order, each NH heads of HS, as our wqkv rows. */
#include "hf_internal.h"

static const FmHfMapEntry gpt2_map[] = {
    {"wte", "transformer.wte.weight", false, false},    /* (V, C) */
    {"wpe", "transformer.wpe.weight", false, false},    /* (T, C) */
    {"h.ln1.w", "ln_1.weight", true, false},            /* (C) */
    {"h.ln1.b", "ln_1.bias", true, false},              /* (C) */
    {"h.attn.wqkv", "attn.c_attn.weight", true, true},  /* (C, 3C) = ours (3C, C) transposed */
    {"h.attn.bqkv", "attn.c_attn.bias", true, false},   /* (3C) */
    {"h.attn.wo", "attn.c_proj.weight", true, true},    /* (C, C) transposed */
    {"h.attn.bo", "attn.c_proj.bias", true, false},     /* (C) */
    {"h.ln2.w", "ln_2.weight", true, false},            /* (C) */
    {"h.ln2.b", "ln_2.bias", true, false},              /* (C) */
    {"h.mlp.w1", "mlp.c_fc.weight", true, true},        /* (C, F) = ours (F, C) transposed */
    {"h.mlp.b1", "mlp.c_fc.bias", true, false},         /* (F) */
    {"h.mlp.w2", "mlp.c_proj.weight", true, true},      /* (F, C) = ours (C, F) transposed */
    {"h.mlp.b2", "mlp.c_proj.bias", true, false},       /* (C) */
    {"lnf.w", "transformer.ln_f.weight", false, false}, /* (C) */
    {"lnf.b", "transformer.ln_f.bias", false, false},   /* (C) */
    {"lm_head", "lm_head.weight", false, false},        /* (V, C), untied only */
};
/* The causal-mask buffers older transformers versions saved. */
static const char *const gpt2_ignorable[] = {".attn.bias", ".attn.masked_bias", NULL};

static void write_gpt2(FILE *o, const FmModelDims *d) {
  fprintf(o, "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n");
  fprintf(o, "  \"layer_norm_epsilon\": ");
  fm__hf_put_real(o, d->norm_eps);
  fprintf(o, ",\n  \"model_type\": \"gpt2\",\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n  \"n_head\": %lld,\n",
          (long long)d->T, (long long)d->C, (long long)d->NH);
  if (d->F == 4 * d->C)
    fprintf(o, "  \"n_inner\": null,\n");
  else
    fprintf(o, "  \"n_inner\": %lld,\n", (long long)d->F);
  fprintf(o, "  \"n_layer\": %lld,\n  \"n_positions\": %lld,\n  \"scale_attn_by_inverse_layer_idx\": false,\n",
          (long long)d->L, (long long)d->T);
  fprintf(o, "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\",\n",
          d->tied ? "true" : "false");
  fprintf(o, "  \"vocab_size\": %lld\n}\n", (long long)d->V);
}

static void check_gpt2(FmHfCheck *c, const FmModelDims *d) {
  static const char *const gelu_tanh[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  static const FmHfRange sizes[] = {
      {"n_embd", 1, FM_HF_MAX_SIZE},      {"n_layer", 1, FM_HF_MAX_SIZE},    {"n_head", 1, 65536},
      {"n_positions", 1, FM_HF_MAX_SIZE}, {"vocab_size", 1, FM_HF_MAX_SIZE}, {"n_inner", 1, FM_HF_MAX_SIZE}};
  if (!fm__hf_check_ranges(c, sizes, (int)(sizeof sizes / sizeof sizes[0]))) return;
  fm__hf_check_str(c, "activation_function", "gelu_new", gelu_tanh, "fmhpc's GPT-2 uses the tanh GELU (gelu_new)");
  fm__hf_check_int(c, "n_embd", 768, "d_model", d->C);
  fm__hf_check_int(c, "n_layer", 12, "n_layer", d->L);
  fm__hf_check_int(c, "n_head", 12, "n_head", d->NH);
  fm__hf_check_int(c, "n_positions", 1024, "seq_len", d->T);
  fm__hf_check_int(c, "vocab_size", 50257, "vocab_size", d->V);
  const FmJson *embd = fm__hf_get(c, "n_embd");
  int64_t C = embd && embd->type == FM_JSON_NUM && embd->is_int ? embd->i : 768;
  if (fm__hf_get(c, "n_inner") || C == d->C) fm__hf_check_int(c, "n_inner", 4 * C, "d_ff", d->F); /* null: 4 * n_embd */
  fm__hf_check_real(c, "layer_norm_epsilon", 1e-5, "norm_eps", d->norm_eps);
  fm__hf_check_bool(c, "tie_word_embeddings", true, "tie_embeddings", d->tied);
  fm__hf_check_fixed_bool(c, "scale_attn_weights", true, true, "fmhpc scales attention scores by 1/sqrt(head size)");
  fm__hf_check_fixed_bool(c, "scale_attn_by_inverse_layer_idx", false, false,
                          "fmhpc does not scale attention by layer");
}

const FmHfKind fm_hf_gpt2 = {"gpt2",         "transformer.", "transformer.h.",
                             gpt2_ignorable, gpt2_map,       (int)(sizeof gpt2_map / sizeof gpt2_map[0]),
                             write_gpt2,     check_gpt2};
