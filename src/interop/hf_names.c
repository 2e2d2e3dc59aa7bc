/* hf_names.c: each model's Hugging Face name map, one table per model next to
 * the others: which HF tensor holds which slice of which canonical (stacked)
 * tensor, and in which layout. Adding a model adds one table here. File I/O is
 * elsewhere (safetensors.c, hf.c).
 *
 * Layouts: our linear weights are (out, in) row-major like torch.nn.Linear.
 * HF Llama's q_proj ... down_proj are nn.Linear, so they map as they are;
 * HF's q/k rows are already in the rotate_half order (pairs i, i + HS/2) that
 * fmhpc's RoPE uses, so no permutation is needed. GPT-2 uses Conv1D, which
 * stores (in, out): c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are the
 * transposes of ours. c_attn's 3C outputs are q, k, v in that order, each
 * NH heads of HS, as our wqkv rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/interop.h"

typedef struct HfMap {
  const char *canon; /* canonical tensor (stacked (L, ...) when per_layer) */
  const char *hf;    /* HF name, or its suffix after "<layer prefix><i>." */
  bool per_layer;
  bool transpose; /* HF stores the transpose (Conv1D) */
} HfMap;

typedef struct HfModelMap {
  const char *model;            /* FmModelKind name */
  const char *base_prefix;      /* HF base_model_prefix + "." */
  const char *layer_prefix;     /* per-layer names are layer_prefix + i + "." + hf */
  const char *const *ignorable; /* suffixes of non-parameter buffers */
  const HfMap *map;
  int n;
} HfModelMap;

static const HfMap gpt2_map[] = {
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

static const HfMap llama_map[] = {
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

static const HfModelMap models[] = {
    {"gpt2", "transformer.", "transformer.h.", gpt2_ignorable, gpt2_map, (int)(sizeof gpt2_map / sizeof gpt2_map[0])},
    {"llama", "model.", "model.layers.", llama_ignorable, llama_map, (int)(sizeof llama_map / sizeof llama_map[0])},
};

static const HfModelMap *find_map(const FmModelKind *k) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].model, k->name) == 0) return &models[i];
  return NULL;
}

const char *fm_hf_base_prefix(const FmModelKind *k) {
  const HfModelMap *m = find_map(k);
  return m ? m->base_prefix : "";
}

bool fm_hf_ignorable(const FmModelKind *k, const char *hf_name) {
  const HfModelMap *m = find_map(k);
  if (!m) return false;
  size_t n = strlen(hf_name);
  for (const char *const *s = m->ignorable; *s; s++) {
    size_t sn = strlen(*s);
    if (n > sn && strcmp(hf_name + n - sn, *s) == 0) return true;
  }
  return false;
}

static const HfMap *find_entry(const HfModelMap *m, const char *canon) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->map[i].canon, canon) == 0) return &m->map[i];
  return NULL;
}

/* One HF tensor: layer `layer` (or -1) of canonical tensor t. */
static int add_tensor(FmHfTensor *o, const HfModelMap *m, const HfMap *e, const FmTensor *t, int layer, FILE *err) {
  memset(o, 0, sizeof *o);
  const int first = e->per_layer ? 1 : 0; /* dims of one slice start here */
  const int nd = t->ndim - first;
  if (nd < 1 || nd > 2 || (e->transpose && nd != 2)) {
    if (err)
      fprintf(err, "hf_names.c: canonical tensor %s has %d dims; its HF map expects %s\n", t->name, t->ndim,
              e->transpose ? "a matrix" : "a vector or matrix");
    return FM_EINVAL;
  }
  int len = e->per_layer ? snprintf(o->name, sizeof o->name, "%s%d.%s", m->layer_prefix, layer, e->hf)
                         : snprintf(o->name, sizeof o->name, "%s", e->hf);
  if (len < 0 || (size_t)len >= sizeof o->name) {
    if (err) fprintf(err, "hf_names.c: HF name of %s layer %d is too long\n", t->name, layer);
    return FM_EINVAL;
  }
  o->src = t;
  o->layer = e->per_layer ? layer : -1;
  o->transpose = e->transpose;
  o->ndim = nd;
  o->numel = 1;
  for (int i = 0; i < nd; i++) {
    o->shape[i] = t->shape[first + (e->transpose ? nd - 1 - i : i)];
    o->numel *= o->shape[i];
  }
  o->offset = t->offset + (e->per_layer ? (int64_t)layer * o->numel : 0);
  return 0;
}

int fm_hf_tensors(FmHfTensor **out, int *n, const FmModelKind *k, const FmModelDims *d, const FmTensorTable *params,
                  FILE *err) {
  *out = NULL;
  *n = 0;
  const HfModelMap *m = find_map(k);
  if (!m) {
    if (err)
      fprintf(err, "model '%s' has no Hugging Face name map\nhint: add one in src/interop/hf_names.c\n", k->name);
    return FM_EUNSUPPORTED;
  }
  int64_t count = 0;
  for (int i = 0; i < params->n; i++) {
    const HfMap *e = find_entry(m, params->t[i].name);
    if (!e) {
      if (err)
        fprintf(err, "model '%s': parameter %s has no Hugging Face name\nhint: add it to src/interop/hf_names.c\n",
                k->name, params->t[i].name);
      return FM_EUNSUPPORTED;
    }
    if (e->per_layer && (params->t[i].ndim < 1 || params->t[i].shape[0] != d->L)) {
      if (err)
        fprintf(err, "model '%s': parameter %s is not stacked (L, ...) as its HF map expects\n", k->name,
                params->t[i].name);
      return FM_EINVAL;
    }
    count += e->per_layer ? d->L : 1;
  }
  FmHfTensor *o = fm_xcalloc((size_t)count + 1, sizeof *o);
  int j = 0, rc = 0;
  for (int i = 0; i < params->n && !rc; i++) {
    const FmTensor *t = &params->t[i];
    const HfMap *e = find_entry(m, t->name);
    for (int64_t l = 0; l < (e->per_layer ? d->L : 1) && !rc; l++) rc = add_tensor(&o[j++], m, e, t, (int)l, err);
  }
  if (rc) {
    free(o);
    return rc;
  }
  *out = o;
  *n = j;
  return 0;
}
