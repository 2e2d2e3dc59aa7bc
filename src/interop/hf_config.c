/* hf_config.c: Hugging Face config.json for GPT-2 (GPT2Config) and Llama
 * (LlamaConfig): written on export, read and checked against the deck's model
 * on import. The deck is the truth: config.json never fills in dims. Keys a
 * file leaves out take transformers' class defaults, as transformers does.
 * Keys that change the math fmhpc does not implement (rope_scaling, biases in
 * Llama, GPT-2's erf GELU or layer-scaled attention) are errors. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmhpc/interop.h"
#include "fmhpc/json.h"

/* ---- writing ---------------------------------------------------------- */
/* The shortest decimal that reads back as v, always with a '.' or exponent so
 * Python reads a float. */
static void put_real(FILE *out, double v) {
  char buf[40];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  fputs(buf, out);
  if (!strpbrk(buf, ".eEn")) fputs(".0", out);
}

/* Keys in alphabetical order, two-space indent: as transformers writes them. */
static void write_gpt2(FILE *o, const FmModelDims *d) {
  fprintf(o, "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n");
  fprintf(o, "  \"layer_norm_epsilon\": ");
  put_real(o, d->norm_eps);
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

static void write_llama(FILE *o, const FmModelDims *d) {
  fprintf(o, "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"attention_bias\": false,\n");
  fprintf(o, "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %lld,\n", (long long)d->HS,
          (long long)d->C);
  fprintf(o, "  \"intermediate_size\": %lld,\n  \"max_position_embeddings\": %lld,\n  \"mlp_bias\": false,\n",
          (long long)d->F, (long long)d->T);
  fprintf(o, "  \"model_type\": \"llama\",\n  \"num_attention_heads\": %lld,\n  \"num_hidden_layers\": %lld,\n",
          (long long)d->NH, (long long)d->L);
  fprintf(o, "  \"num_key_value_heads\": %lld,\n  \"rms_norm_eps\": ", (long long)d->NKV);
  put_real(o, d->norm_eps);
  fprintf(o, ",\n  \"rope_scaling\": null,\n  \"rope_theta\": ");
  put_real(o, d->rope_theta);
  fprintf(o, ",\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\",\n  \"vocab_size\": %lld\n}\n",
          d->tied ? "true" : "false", (long long)d->V);
}

int fm_hf_config_write(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err) {
  const bool gpt2 = strcmp(k->name, "gpt2") == 0, llama = strcmp(k->name, "llama") == 0;
  if (!gpt2 && !llama) {
    if (err) fprintf(err, "%s: model '%s' has no Hugging Face config mapping\n", path, k->name);
    return FM_EUNSUPPORTED;
  }
  FmStr tmp;
  fm_str_init(&tmp);
  fm_str_printf(&tmp, "%s.tmp", path);
  FILE *o = fopen(tmp.s, "w");
  int rc = 0;
  if (!o) {
    if (err) fprintf(err, "%s: cannot create: %s\n", tmp.s, strerror(errno));
    fm_str_free(&tmp);
    return FM_EIO;
  }
  if (gpt2)
    write_gpt2(o, d);
  else
    write_llama(o, d);
  if (fflush(o) != 0 || ferror(o)) rc = FM_EIO;
  if (fclose(o) != 0) rc = FM_EIO;
  if (!rc && rename(tmp.s, path) != 0) rc = FM_EIO;
  if (rc) {
    if (err) fprintf(err, "%s: cannot write: %s\n", path, strerror(errno));
    remove(tmp.s);
  }
  fm_str_free(&tmp);
  return rc;
}

/* ---- reading and checking --------------------------------------------- */
typedef struct Check {
  const char *path;
  const FmJson *root;
  FILE *err;
  int rc;
  FmStr fix; /* deck settings that would match the file */
} Check;

static void problem(Check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(Check *c, const char *fmt, ...) {
  c->rc = FM_EDECK;
  if (!c->err) return;
  fprintf(c->err, "%s: ", c->path);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->err, fmt, ap);
  va_end(ap);
  fputc('\n', c->err);
}

/* A key's value, or NULL when absent or JSON null (both mean the default). */
static const FmJson *get(const Check *c, const char *key) {
  const FmJson *v = fm_json_get(c->root, key);
  return v && v->type != FM_JSON_NULL ? v : NULL;
}

/* An integer key (default def when absent) equal to the deck's value. */
static void check_int(Check *c, const char *key, int64_t def, const char *deck_key, int64_t deck_val) {
  const FmJson *v = get(c, key);
  if (v && (v->type != FM_JSON_NUM || !v->is_int)) {
    problem(c, "\"%s\" must be an integer, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  int64_t x = v ? v->i : def;
  if (x != deck_val) {
    problem(c, "\"%s\" = %lld%s but the deck's &model %s gives %lld", key, (long long)x, v ? "" : " (default)",
            deck_key, (long long)deck_val);
    fm_str_printf(&c->fix, " %s = %lld", deck_key, (long long)x);
  }
}

/* A real key, compared as fp32 (the precision it is used at). */
static void check_real(Check *c, const char *key, double def, const char *deck_key, double deck_val) {
  const FmJson *v = get(c, key);
  if (v && v->type != FM_JSON_NUM) {
    problem(c, "\"%s\" must be a number, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  double x = v ? v->num : def;
  if ((float)x != (float)deck_val) {
    problem(c, "\"%s\" = %g%s but the deck's &model %s = %g", key, x, v ? "" : " (default)", deck_key, deck_val);
    fm_str_printf(&c->fix, " %s = %g", deck_key, x);
  }
}

static void check_bool(Check *c, const char *key, bool def, const char *deck_key, bool deck_val) {
  const FmJson *v = get(c, key);
  if (v && v->type != FM_JSON_BOOL) {
    problem(c, "\"%s\" must be true or false, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  bool x = v ? v->b : def;
  if (x != deck_val) {
    problem(c, "\"%s\" = %s%s but the deck's &model %s = %s", key, x ? "true" : "false", v ? "" : " (default)",
            deck_key, deck_val ? ".true." : ".false.");
    fm_str_printf(&c->fix, " %s = %s", deck_key, x ? ".true." : ".false.");
  }
}

/* A key fmhpc supports only at one value (want; absent means def). */
static void check_fixed_bool(Check *c, const char *key, bool def, bool want, const char *why) {
  const FmJson *v = get(c, key);
  bool x = v && v->type == FM_JSON_BOOL ? v->b : def;
  if ((v && v->type != FM_JSON_BOOL) || x != want)
    problem(c, "\"%s\" must be %s: %s", key, want ? "true" : "false", why);
}

/* A string key that must be one of `ok` (NULL-terminated); absent means def. */
static void check_str(Check *c, const char *key, const char *def, const char *const *ok, const char *why) {
  const FmJson *v = get(c, key);
  if (v && v->type != FM_JSON_STR) {
    problem(c, "\"%s\" must be a string, not a JSON %s", key, fm_json_type_name(v->type));
    return;
  }
  const char *x = v ? v->s : def;
  for (const char *const *s = ok; *s; s++)
    if (strcmp(x, *s) == 0) return;
  problem(c, "\"%s\" = \"%.60s\": %s", key, x, why);
}

static void check_gpt2(Check *c, const FmModelDims *d) {
  static const char *const gelu_tanh[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  check_str(c, "activation_function", "gelu_new", gelu_tanh, "fmhpc's GPT-2 uses the tanh GELU (gelu_new)");
  check_int(c, "n_embd", 768, "d_model", d->C);
  check_int(c, "n_layer", 12, "n_layer", d->L);
  check_int(c, "n_head", 12, "n_head", d->NH);
  check_int(c, "n_positions", 1024, "seq_len", d->T);
  check_int(c, "vocab_size", 50257, "vocab_size", d->V);
  const FmJson *embd = get(c, "n_embd");
  int64_t C = embd && embd->type == FM_JSON_NUM && embd->is_int ? embd->i : 768;
  if (get(c, "n_inner") || C == d->C) check_int(c, "n_inner", 4 * C, "d_ff", d->F); /* null: 4 * n_embd */
  check_real(c, "layer_norm_epsilon", 1e-5, "norm_eps", d->norm_eps);
  check_bool(c, "tie_word_embeddings", true, "tie_embeddings", d->tied);
  check_fixed_bool(c, "scale_attn_weights", true, true, "fmhpc scales attention scores by 1/sqrt(head size)");
  check_fixed_bool(c, "scale_attn_by_inverse_layer_idx", false, false, "fmhpc does not scale attention by layer");
}

static void check_llama(Check *c, const FmModelDims *d) {
  static const char *const silu[] = {"silu", NULL};
  check_str(c, "hidden_act", "silu", silu, "fmhpc's Llama MLP is SwiGLU (silu)");
  check_int(c, "hidden_size", 4096, "d_model", d->C);
  check_int(c, "intermediate_size", 11008, "d_ff", d->F);
  check_int(c, "num_hidden_layers", 32, "n_layer", d->L);
  const FmJson *nh = get(c, "num_attention_heads"), *hid = get(c, "hidden_size");
  int64_t NH = nh && nh->type == FM_JSON_NUM && nh->is_int ? nh->i : 32;
  int64_t C = hid && hid->type == FM_JSON_NUM && hid->is_int ? hid->i : 4096;
  check_int(c, "num_attention_heads", 32, "n_head", d->NH);
  /* Defaults derived from keys already reported are not reported again. */
  if (get(c, "num_key_value_heads") || NH == d->NH) check_int(c, "num_key_value_heads", NH, "n_kv_head", d->NKV);
  if (get(c, "head_dim") || (NH == d->NH && C == d->C))
    check_int(c, "head_dim", NH > 0 ? C / NH : 0, "head_dim", d->HS);
  check_int(c, "vocab_size", 32000, "vocab_size", d->V);
  check_real(c, "rms_norm_eps", 1e-6, "norm_eps", d->norm_eps);
  check_real(c, "rope_theta", 10000.0, "rope_theta", d->rope_theta);
  check_bool(c, "tie_word_embeddings", false, "tie_embeddings", d->tied);
  check_fixed_bool(c, "attention_bias", false, false, "fmhpc's Llama has no attention biases");
  check_fixed_bool(c, "mlp_bias", false, false, "fmhpc's Llama has no MLP biases");
  const FmJson *mp = get(c, "max_position_embeddings");
  if (mp && (mp->type != FM_JSON_NUM || !mp->is_int))
    problem(c, "\"max_position_embeddings\" must be an integer");
  else if (mp && mp->i < d->T) {
    problem(c, "\"max_position_embeddings\" = %lld but the deck's &model seq_len = %lld is longer", (long long)mp->i,
            (long long)d->T);
    fm_str_printf(&c->fix, " seq_len = %lld", (long long)mp->i);
  }
  if (get(c, "rope_scaling"))
    problem(c,
            "\"rope_scaling\" is set: fmhpc implements plain RoPE only (rope_scaling null), e.g. Llama 2 and 3, "
            "not 3.1's scaled RoPE");
}

/* config.json is small; anything over this is not one. */
enum { MAX_CONFIG_BYTES = 16 << 20 };

int fm_hf_config_check(const char *path, const FmModelKind *k, const FmModelDims *d, FILE *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (err)
      fprintf(err, "%s: cannot open: %s\nhint: a Hugging Face model directory has config.json and model.safetensors\n",
              path, strerror(errno));
    return FM_EIO;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > MAX_CONFIG_BYTES) {
    if (err) fprintf(err, "%s: not a config.json (not a regular file, or over 16 MiB)\n", path);
    return FM_EFORMAT;
  }
  char *text = NULL;
  size_t len = 0;
  if (fm_read_file(path, &text, &len) != 0) {
    if (err) fprintf(err, "%s: cannot read: %s\n", path, strerror(errno));
    return FM_EIO;
  }
  FmJsonDoc doc;
  FmJsonError je;
  memset(&je, 0, sizeof je);
  if (fm_json_parse(&doc, text, len, 64, &je) != 0) {
    if (err) fprintf(err, "%s:%d:%d: %s\n", path, je.line, je.col, je.msg);
    free(text);
    return FM_EFORMAT;
  }
  Check c = {.path = path, .root = &doc.root, .err = err};
  fm_str_init(&c.fix);
  const FmJson *mt = doc.root.type == FM_JSON_OBJ ? fm_json_get(&doc.root, "model_type") : NULL;
  if (doc.root.type != FM_JSON_OBJ) {
    problem(&c, "not a JSON object");
  } else if (!mt || mt->type != FM_JSON_STR) {
    problem(&c, "no \"model_type\" string; the deck's &model arch is '%s'", k->name);
  } else if (strcmp(mt->s, k->name) != 0) {
    problem(&c, "\"model_type\" = \"%.40s\" but the deck's &model arch = '%s'", mt->s, k->name);
  } else if (strcmp(k->name, "gpt2") == 0) {
    check_gpt2(&c, d);
  } else if (strcmp(k->name, "llama") == 0) {
    check_llama(&c, d);
  } else {
    if (err) fprintf(err, "%s: model '%s' has no Hugging Face config mapping\n", path, k->name);
    c.rc = FM_EUNSUPPORTED;
  }
  if (c.rc == FM_EDECK && c.fix.len && err)
    fprintf(err, "hint: to match this model, set in the deck: &model%s /\n", c.fix.s);
  else if (c.rc == FM_EDECK && err)
    fprintf(err, "hint: this model cannot be loaded into fmhpc's %s as it is\n", k->name);
  fm_str_free(&c.fix);
  fm_json_free(&doc);
  free(text);
  return c.rc;
}
