/* hf_llama.c: Llama's Hugging Face adapter (LlamaForCausalLM, LlamaConfig): the
 * tensor name map and config.json written on export and checked on import.
 *
 * Layouts: our linear weights are (out, in) row-major like torch.nn.Linear,
 * and HF Llama's q_proj ... down_proj are nn.Linear, so they map as they are;
 * HF's q/k rows are already in the rotate_half order (pairs i, i + HS/2) that
 * fmhpc's RoPE uses, so no permutation is needed. */
#include <string.h>

#include "hf_internal.h"

static const FmHfMapEntry llama_map[] = {
    {"wte", "model.embed_tokens.weight", false, false},               /* (V, C) */
    {"h.attn_norm.w", "input_layernorm.weight", true, false},         /* (C) */
    {"h.attn.wq", "self_attn.q_proj.weight", true, false},            /* (NH*HS, C) */
    {"h.attn.wk", "self_attn.k_proj.weight", true, false},            /* (NKV*HS, C) */
    {"h.attn.wv", "self_attn.v_proj.weight", true, false},            /* (NKV*HS, C) */
    {"h.attn.wo", "self_attn.o_proj.weight", true, false},            /* (C, NH*HS) */
    {"h.mlp_norm.w", "post_attention_layernorm.weight", true, false}, /* (C) */
    {"h.mlp.w_gate", "mlp.gate_proj.weight", true, false},            /* (F, C) */
    {"h.mlp.w_up", "mlp.up_proj.weight", true, false},                /* (F, C) */
    {"h.mlp.w_down", "mlp.down_proj.weight", true, false},            /* (C, F) */
    {"norm.w", "model.norm.weight", false, false},                    /* (C) */
    {"lm_head", "lm_head.weight", false, false},                      /* (V, C), untied only */
};
/* RoPE frequencies older transformers versions saved. */
static const char *const llama_ignorable[] = {".self_attn.rotary_emb.inv_freq", NULL};

static void write_llama(FILE *o, const FmModelDims *d) {
  fprintf(o, "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"attention_bias\": false,\n");
  fprintf(o, "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %lld,\n", (long long)d->HS,
          (long long)d->C);
  fprintf(o, "  \"intermediate_size\": %lld,\n  \"max_position_embeddings\": %lld,\n  \"mlp_bias\": false,\n",
          (long long)d->F, (long long)d->T);
  fprintf(o, "  \"model_type\": \"llama\",\n  \"num_attention_heads\": %lld,\n  \"num_hidden_layers\": %lld,\n",
          (long long)d->NH, (long long)d->L);
  fprintf(o, "  \"num_key_value_heads\": %lld,\n  \"rms_norm_eps\": ", (long long)d->NKV);
  fm__hf_put_real(o, d->norm_eps);
  fprintf(o, ",\n  \"rope_scaling\": null,\n  \"rope_theta\": ");
  fm__hf_put_real(o, d->rope_theta);
  fprintf(o, ",\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\",\n  \"vocab_size\": %lld\n}\n",
          d->tied ? "true" : "false", (long long)d->V);
}

/* RoPE: plain only. transformers writes it as "rope_scaling": null or
 * {"rope_type": "default"} ("type" before 4.45), and since v5 as
 * "rope_parameters": {"rope_type": "default", "rope_theta": ...}, where
 * rope_theta may no longer be a top-level key. */
static void check_rope(FmHfCheck *c, const FmModelDims *d) {
  const char *key = fm__hf_get(c, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  const FmJson *r = fm__hf_get(c, key), *type = NULL;
  if (r && r->type == FM_JSON_OBJ) {
    type = fm_json_get(r, "rope_type");
    if (!type) type = fm_json_get(r, "type");
  }
  if (r && (!type || type->type != FM_JSON_STR || strcmp(type->s, "default") != 0)) {
    fm__hf_problem(c,
                   "\"%s\" asks for %s%.40s%s: fmhpc implements plain RoPE only (null, or rope_type \"default\"), e.g. "
                   "Llama 2 and 3, not 3.1's scaled RoPE",
                   key, type && type->type == FM_JSON_STR ? "rope_type \"" : "a RoPE without a rope_type",
                   type && type->type == FM_JSON_STR ? type->s : "", type && type->type == FM_JSON_STR ? "\"" : "");
    return;
  }
  const FmJson *root = c->root;
  if (r && fm_json_get(r, "rope_theta") && !fm__hf_get(c, "rope_theta")) c->root = r; /* v5: theta inside */
  fm__hf_check_real(c, "rope_theta", 10000.0, "rope_theta", d->rope_theta);
  c->root = root;
}

static void check_llama(FmHfCheck *c, const FmModelDims *d) {
  static const char *const silu[] = {"silu", NULL};
  static const FmHfRange sizes[] = {
      {"hidden_size", 1, FM_HF_MAX_SIZE},       {"intermediate_size", 1, FM_HF_MAX_SIZE},
      {"num_hidden_layers", 1, FM_HF_MAX_SIZE}, {"num_attention_heads", 1, 65536},
      {"num_key_value_heads", 1, 65536},        {"head_dim", 1, 65536},
      {"vocab_size", 1, FM_HF_MAX_SIZE},        {"max_position_embeddings", 1, FM_HF_MAX_SIZE}};
  if (!fm__hf_check_ranges(c, sizes, (int)(sizeof sizes / sizeof sizes[0]))) return;
  fm__hf_check_str(c, "hidden_act", "silu", silu, "fmhpc's Llama MLP is SwiGLU (silu)");
  fm__hf_check_int(c, "hidden_size", 4096, "d_model", d->C);
  fm__hf_check_int(c, "intermediate_size", 11008, "d_ff", d->F);
  fm__hf_check_int(c, "num_hidden_layers", 32, "n_layer", d->L);
  const FmJson *nh = fm__hf_get(c, "num_attention_heads"), *hid = fm__hf_get(c, "hidden_size");
  int64_t NH = nh && nh->type == FM_JSON_NUM && nh->is_int ? nh->i : 32;
  int64_t C = hid && hid->type == FM_JSON_NUM && hid->is_int ? hid->i : 4096;
  fm__hf_check_int(c, "num_attention_heads", 32, "n_head", d->NH);
  /* Defaults derived from keys already reported are not reported again. */
  if (fm__hf_get(c, "num_key_value_heads") || NH == d->NH)
    fm__hf_check_int(c, "num_key_value_heads", NH, "n_kv_head", d->NKV);
  if (fm__hf_get(c, "head_dim") || (NH == d->NH && C == d->C))
    fm__hf_check_int(c, "head_dim", NH > 0 ? C / NH : 0, "head_dim", d->HS);
  fm__hf_check_int(c, "vocab_size", 32000, "vocab_size", d->V);
  fm__hf_check_real(c, "rms_norm_eps", 1e-6, "norm_eps", d->norm_eps);
  check_rope(c, d);
  fm__hf_check_bool(c, "tie_word_embeddings", false, "tie_embeddings", d->tied);
  fm__hf_check_fixed_bool(c, "attention_bias", false, false, "fmhpc's Llama has no attention biases");
  fm__hf_check_fixed_bool(c, "mlp_bias", false, false, "fmhpc's Llama has no MLP biases");
  const FmJson *mp = fm__hf_get(c, "max_position_embeddings");
  if (mp && (mp->type != FM_JSON_NUM || !mp->is_int))
    fm__hf_problem(c, "\"max_position_embeddings\" must be an integer");
  else if (mp && mp->i < d->T) {
    fm__hf_problem(c, "\"max_position_embeddings\" = %lld but the deck's &model seq_len = %lld is longer",
                   (long long)mp->i, (long long)d->T);
    fm_str_printf(&c->fix, " seq_len = %lld", (long long)mp->i);
  }
}

const FmHfKind fm_hf_llama = {"llama",         "model.",   "model.layers.",
                              llama_ignorable, llama_map,  (int)(sizeof llama_map / sizeof llama_map[0]),
                              write_llama,     check_llama};
