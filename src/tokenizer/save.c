/* save.c: write a Hugging Face tokenizer.json that HF tokenizers
 * and transformers.js load: model BPE (vocab, merges as "a b" strings, which
 * every tokenizers version reads), ByteLevel pre-tokenizer (or Split + ByteLevel
 * for a pattern other than GPT-2's), ByteLevel decoder, added tokens.
 * A tiktoken tokenizer (ranks) has no merges list: one is derived as
 * transformers' TikTokenConverter does (every split of a token into two
 * tokens, ordered by the token's rank, then the parts' ranks) and
 * ignore_merges is set, as in Llama 3's tokenizer.json. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"
#include "tokenizer_internal.h"

static void write_bl(FILE *f, const FmTokenizer *t, int32_t id, FmStr *b) {
  b->len = 0;
  if (b->s) b->s[0] = 0;
  fm__tok_bytelevel_encode(b, t->pool + t->off[id], t->len[id]);
  fm_json_write_str(f, b->s ? b->s : "", b->len);
}

typedef struct Merge3 {
  int32_t tok, l, r;
} Merge3;
static int cmp_merge3(const void *a, const void *b) {
  const Merge3 *x = a, *y = b;
  if (x->tok != y->tok) return x->tok < y->tok ? -1 : 1;
  if (x->l != y->l) return x->l < y->l ? -1 : 1;
  return x->r < y->r ? -1 : x->r > y->r;
}

/* The merges of a tokenizer: its list, or for ranks the derived one. */
static Merge3 *merges_of(const FmTokenizer *t, int64_t *n) {
  if (t->algo == FM__TOK_MERGES) {
    Merge3 *m = fm_xmalloc(sizeof *m * (size_t)(t->n_merges + 1));
    for (int64_t i = 0; i < t->n_merges; i++) m[i] = (Merge3){0, t->merges[i][0], t->merges[i][1]};
    *n = t->n_merges;
    return m;
  }
  int64_t k = 0, cap = 1024;
  Merge3 *m = fm_xmalloc(sizeof *m * (size_t)cap);
  for (int64_t id = 0; id < t->n_ids; id++) {
    if (!(t->flags[id] & FM__TOK_MODEL) || t->len[id] < 2) continue;
    const char *s = t->pool + t->off[id];
    for (uint32_t j = 1; j < t->len[id]; j++) {
      int32_t l = fm__tok_lookup(t, s, j), r = fm__tok_lookup(t, s + j, t->len[id] - j);
      if (l < 0 || r < 0) continue;
      if (k == cap) m = fm_xrealloc(m, sizeof *m * (size_t)(cap *= 2));
      m[k++] = (Merge3){(int32_t)id, l, r};
    }
  }
  qsort(m, (size_t)k, sizeof *m, cmp_merge3);
  *n = k;
  return m;
}

static void write_json(FILE *f, const FmTokenizer *t) {
  FmStr b;
  fm_str_init(&b);
  fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
  int first = 1;
  for (int64_t id = 0; id < t->n_ids; id++) {
    if (t->len[id] == UINT32_MAX || !(t->flags[id] & FM__TOK_ADDED)) continue;
    fprintf(f, "%s\n    {\"id\": %lld, \"content\": ", first ? "" : ",", (long long)id);
    fm_json_write_str(f, t->pool + t->off[id], t->len[id]);
    fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
               "\"special\": %s}",
            t->flags[id] & FM__TOK_SPECIAL ? "true" : "false");
    first = 0;
  }
  fprintf(f, "%s],\n  \"normalizer\": null,\n", first ? "" : "\n  ");
  const char *aps = t->add_prefix_space ? "true" : "false";
  if (t->pattern && t->ws == FM__TOK_WS_UNICODE && !strcmp(t->pattern, FM_TOK_PATTERN_GPT2)) {
    fprintf(f, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": %s, \"trim_offsets\": true, "
               "\"use_regex\": true},\n", aps);
  } else if (t->pattern) {
    fprintf(f, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n    {\"type\": \"Split\", "
               "\"pattern\": {\"Regex\": ");
    /* Plain \s unless the flavour is not the readers' (HF: Unicode). */
    const char *pat = t->ws == FM__TOK_WS_UNICODE ? t->pattern : t->effective;
    fm_json_write_str(f, pat, strlen(pat));
    fprintf(f, "}, \"behavior\": \"Isolated\", \"invert\": false},\n    {\"type\": \"ByteLevel\", "
               "\"add_prefix_space\": %s, \"trim_offsets\": true, \"use_regex\": false}]},\n", aps);
  } else {
    fprintf(f, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": %s, \"trim_offsets\": true, "
               "\"use_regex\": false},\n", aps);
  }
  fprintf(f, "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
             "\"trim_offsets\": true, \"use_regex\": true},\n");
  fprintf(f, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
             "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
             "    \"byte_fallback\": false,\n    \"ignore_merges\": %s,\n    \"vocab\": {",
          t->ignore_merges || t->algo == FM__TOK_RANKS ? "true" : "false");
  first = 1;
  for (int64_t id = 0; id < t->n_ids; id++) {
    if (t->len[id] == UINT32_MAX || !(t->flags[id] & FM__TOK_MODEL)) continue;
    fprintf(f, "%s\n      ", first ? "" : ",");
    write_bl(f, t, (int32_t)id, &b);
    fprintf(f, ": %lld", (long long)id);
    first = 0;
  }
  fprintf(f, "\n    },\n    \"merges\": [");
  int64_t nm;
  Merge3 *m = merges_of(t, &nm);
  for (int64_t i = 0; i < nm; i++) {
    FmStr pair;
    fm_str_init(&pair);
    fm__tok_bytelevel_encode(&pair, t->pool + t->off[m[i].l], t->len[m[i].l]);
    fm_str_cat(&pair, " ");
    fm__tok_bytelevel_encode(&pair, t->pool + t->off[m[i].r], t->len[m[i].r]);
    fprintf(f, "%s\n      ", i ? "," : "");
    fm_json_write_str(f, pair.s, pair.len);
    fm_str_free(&pair);
  }
  free(m);
  fprintf(f, "\n    ]\n  }\n}\n");
  fm_str_free(&b);
}

int fm_tok_save_json(const FmTokenizer *t, const char *path, FILE *err) {
  FmStr tmp;
  fm_str_init(&tmp);
  fm_str_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp.s, "w");
  if (!f) {
    if (err) fprintf(err, "%s: cannot write: %s\nhint: check that the directory exists and is writable\n", tmp.s, strerror(errno));
    fm_str_free(&tmp);
    return FM_EIO;
  }
  write_json(f, t);
  int bad = ferror(f);
  bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp.s, path) != 0) {
    if (err) fprintf(err, "%s: cannot write: %s\n", path, strerror(errno));
    remove(tmp.s);
    fm_str_free(&tmp);
    return FM_EIO;
  }
  fm_str_free(&tmp);
  return 0;
}
