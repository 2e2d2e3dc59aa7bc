/* tokenizer.c: byte-level BPE encode and decode: added tokens, the
 * pre-tokenizer regex run over valid UTF-8, and the per-thread encode cache.
 * The tables and their builder live in vocab.c, the merge loop in bpe.c,
 * loaders in load.c, the tokenizer.json writer in save.c, training in
 * bpe_train.c.
 *
 * Encoding follows the reference implementations step by step:
 *   1. added tokens are cut out first (special ones only when asked), as HF
 *      tokenizers' AddedVocabulary and tiktoken's encode(allowed_special);
 *   2. each remaining segment is split by the pre-tokenizer regex (PCRE2
 *      with UTF+UCP, JIT): every match is a pre-token, and text between
 *      matches too (HF Split behavior Isolated);
 *   3. each pre-token's bytes start as byte tokens and the leftmost adjacent
 *      pair of lowest priority is merged until none is left. This is HF
 *      tokenizers' Word::merge_all (priority = merge index, ties by position)
 *      and tiktoken's byte_pair_merge (priority = rank of the concatenation,
 *      leftmost minimum); GPT-2's encoder.py merges every occurrence of the
 *      best bigram in one left-to-right pass, which is the same sequence of
 *      leftmost merges.
 *   With ignore_merges (Llama 3's tokenizer.json, and tiktoken's
 *   "if the piece is in the encoder, return it") a pre-token that is itself
 *   in the vocabulary is emitted whole.
 * Text that is not valid UTF-8 (no reference accepts it) is still encoded
 * losslessly: each maximal invalid byte run is one pre-token. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "tokenizer_internal.h"

/* ---- per-thread cache ----------------------------------------------------- */
typedef struct CacheSlot {
  uint64_t h; /* 0: empty */
  uint32_t koff, klen, ioff, ni;
} CacheSlot;

struct FmTokCache {
  uint64_t serial; /* first member: fm_tok_free checks it */
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jstack;
  CacheSlot *slot;
  uint64_t cap, n;
  char *kpool;
  size_t klen, kcap;
  int32_t *ipool;
  size_t ilen, icap;
  int32_t *scratch;
  size_t scratch_cap;
  char *seg;
  size_t seg_cap;
};

static _Thread_local FmTokCache *tls_cache;

void fm_tok_free(FmTokenizer *t) {
  if (!t) return;
  if (tls_cache && tls_cache->serial == t->serial) {
    fm_tok_cache_free(tls_cache);
    tls_cache = NULL;
  }
  free(t->pattern);
  free(t->effective);
  if (t->re) pcre2_code_free(t->re);
  free(t->off);
  free(t->len);
  free(t->flags);
  free(t->pool);
  free(t->vocab.slot);
  free(t->pairs.slot);
  free(t->merges);
  free(t->added);
  free(t);
}

enum { CACHE_SLOTS = 1 << 17, CACHE_MAX_KEY = 128 };

FmTokCache *fm_tok_cache_new(const FmTokenizer *t) {
  FmTokCache *c = fm_xcalloc(1, sizeof *c);
  c->serial = t->serial;
  if (t->re) {
    c->md = pcre2_match_data_create(1, NULL);
    c->mctx = pcre2_match_context_create(NULL);
    c->jstack = pcre2_jit_stack_create((size_t)32 * 1024, (size_t)8 * 1024 * 1024, NULL);
    pcre2_jit_stack_assign(c->mctx, NULL, c->jstack);
  }
  c->cap = CACHE_SLOTS;
  c->slot = fm_xcalloc(c->cap, sizeof *c->slot);
  return c;
}

void fm_tok_cache_free(FmTokCache *c) {
  if (!c) return;
  if (c->md) pcre2_match_data_free(c->md);
  if (c->mctx) pcre2_match_context_free(c->mctx);
  if (c->jstack) pcre2_jit_stack_free(c->jstack);
  free(c->slot), free(c->kpool), free(c->ipool), free(c->scratch), free(c->seg);
  free(c);
}

static void cache_clear(FmTokCache *c) {
  memset(c->slot, 0, c->cap * sizeof *c->slot);
  c->n = c->klen = c->ilen = 0;
}

static void push_ids(int32_t **ids, int64_t *len, int64_t *cap, const int32_t *src, int64_t n) {
  if (*len + n > *cap) {
    int64_t nc = *cap ? *cap : 256;
    while (nc < *len + n) nc *= 2;
    *ids = fm_xrealloc(*ids, (size_t)nc * sizeof **ids);
    *cap = nc;
  }
  memcpy(*ids + *len, src, (size_t)n * sizeof *src);
  *len += n;
}

typedef struct Out {
  int32_t **ids;
  int64_t *len, *cap;
  FmTokPieceFn fn; /* pre-tokenize only: pieces go here */
  void *ctx;
} Out;

static void encode_piece(const FmTokenizer *t, FmTokCache *c, const char *s, size_t n, Out *o) {
  if (n == 0) return;
  if (o->fn || !o->len) { /* pre-tokenize only: pieces go to fn, nothing is encoded */
    if (o->fn) o->fn(o->ctx, s, n);
    return;
  }
  if (n == 1) {
    push_ids(o->ids, o->len, o->cap, &t->byte_id[(uint8_t)s[0]], 1);
    return;
  }
  uint64_t hv = fm__tok_hash_bytes(s, n), h = hv | 1; /* cache slots use 0 for empty */
  if (t->ignore_merges) {
    int32_t id = fm__tok_bmap_get(&t->vocab, t->pool, s, n, hv);
    if (id >= 0) {
      push_ids(o->ids, o->len, o->cap, &id, 1);
      return;
    }
  }
  uint64_t j = 0;
  if (n <= CACHE_MAX_KEY) {
    for (j = h & (c->cap - 1);; j = (j + 1) & (c->cap - 1)) {
      CacheSlot *e = &c->slot[j];
      if (!e->h) break;
      if (e->h == h && e->klen == n && !memcmp(c->kpool + e->koff, s, n)) {
        push_ids(o->ids, o->len, o->cap, c->ipool + e->ioff, e->ni);
        return;
      }
    }
  }
  if (n > c->scratch_cap) {
    c->scratch_cap = n * 2;
    c->scratch = fm_xrealloc(c->scratch, c->scratch_cap * sizeof *c->scratch);
  }
  int64_t m = fm__tok_bpe(t, (const uint8_t *)s, n, c->scratch);
  push_ids(o->ids, o->len, o->cap, c->scratch, m);
  if (n > CACHE_MAX_KEY) return;
  if (c->n * 2 >= c->cap) { /* full: start over (bounded memory, no LRU bookkeeping) */
    cache_clear(c);
    for (j = h & (c->cap - 1); c->slot[j].h; j = (j + 1) & (c->cap - 1)) {}
  }
  if (c->klen + n > c->kcap) {
    c->kcap = (c->klen + n) * 2;
    c->kpool = fm_xrealloc(c->kpool, c->kcap);
  }
  if (c->ilen + (size_t)m > c->icap) {
    c->icap = (c->ilen + (size_t)m) * 2;
    c->ipool = fm_xrealloc(c->ipool, c->icap * sizeof *c->ipool);
  }
  memcpy(c->kpool + c->klen, s, n);
  memcpy(c->ipool + c->ilen, c->scratch, (size_t)m * sizeof *c->scratch);
  c->slot[j] = (CacheSlot){h, (uint32_t)c->klen, (uint32_t)n, (uint32_t)c->ilen, (uint32_t)m};
  c->klen += n, c->ilen += (size_t)m, c->n++;
}

/* Length of the valid UTF-8 prefix of s[0..n) (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), which is what PCRE2_UTF accepts. */
static size_t utf8_prefix(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    int k;
    uint32_t cp, min;
    if ((s[i] & 0xE0) == 0xC0) k = 1, cp = s[i] & 0x1F, min = 0x80;
    else if ((s[i] & 0xF0) == 0xE0) k = 2, cp = s[i] & 0x0F, min = 0x800;
    else if ((s[i] & 0xF8) == 0xF0) k = 3, cp = s[i] & 0x07, min = 0x10000;
    else return i;
    if (i + (size_t)k >= n) return i;
    for (int j = 1; j <= k; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (s[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += (size_t)k + 1;
  }
  return n;
}

static int encode_valid(const FmTokenizer *t, FmTokCache *c, const char *s, size_t n, Out *o) {
  if (!t->re) {
    encode_piece(t, c, s, n, o);
    return 0;
  }
  size_t gap = 0, from = 0;
  while (from < n) {
    int rc = t->jit ? pcre2_jit_match(t->re, (PCRE2_SPTR)s, n, from, 0, c->md, c->mctx)
                    : pcre2_match(t->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fm_err("tokenizer: pre-tokenizer regex failed at byte %zu of a %zu-byte text: %s", from, n, (char *)msg);
      return FM_EINVAL;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* an empty match is a boundary (as HF's Split: 'x?' cuts "ab" into "a", "b"); step a character */
      encode_piece(t, c, s + gap, ms - gap, o);
      gap = ms;
      from = ms + 1;
      while (from < n && ((uint8_t)s[from] & 0xC0) == 0x80) from++;
      continue;
    }
    encode_piece(t, c, s + gap, ms - gap, o);
    encode_piece(t, c, s + ms, me - ms, o);
    gap = from = me;
  }
  encode_piece(t, c, s + gap, n - gap, o);
  return 0;
}

/* One segment between added tokens. */
static int encode_segment(const FmTokenizer *t, FmTokCache *c, const char *s, size_t n, Out *o) {
  if (n == 0) return 0;
  if (t->add_prefix_space && s[0] != ' ') { /* HF ByteLevel: prepend a space to each split */
    if (n + 1 > c->seg_cap) {
      c->seg_cap = 2 * (n + 1);
      c->seg = fm_xrealloc(c->seg, c->seg_cap);
    }
    c->seg[0] = ' ';
    memcpy(c->seg + 1, s, n);
    s = c->seg, n = n + 1;
  }
  const uint8_t *u = (const uint8_t *)s;
  size_t pos = 0;
  while (pos < n) {
    size_t v = utf8_prefix(u + pos, n - pos);
    if (v > 0) {
      int rc = encode_valid(t, c, s + pos, v, o);
      if (rc) return rc;
      pos += v;
      continue;
    }
    size_t bad = 1; /* the invalid run: up to where a valid character starts */
    while (pos + bad < n && utf8_prefix(u + pos + bad, n - pos - bad < 4 ? n - pos - bad : 4) == 0) bad++;
    encode_piece(t, c, s + pos, bad, o);
    pos += bad;
  }
  return 0;
}

/* The added token starting at s[0..n), longest first, or -1. */
static int32_t added_at(const FmTokenizer *t, const char *s, size_t n, bool allow_special) {
  for (int i = 0; i < t->n_added; i++) {
    int32_t id = t->added[i];
    if (!allow_special && (t->flags[id] & FM__TOK_SPECIAL)) continue;
    uint32_t len = t->len[id];
    if (len <= n && !memcmp(s, t->pool + t->off[id], len)) return id;
  }
  return -1;
}

static bool any_matchable(const FmTokenizer *t, bool allow_special) {
  for (int i = 0; i < t->n_added; i++)
    if (allow_special || !(t->flags[t->added[i]] & FM__TOK_SPECIAL)) return true;
  return false;
}

int64_t fm_tok_encode_cached(const FmTokenizer *t, FmTokCache *c, const char *text, size_t n, bool allow_special,
                             int32_t **ids, int64_t *len, int64_t *cap) {
  int64_t before = *len;
  Out o = {ids, len, cap, NULL, NULL};
  if (c->serial != t->serial) return FM_EINVAL;
  if (!any_matchable(t, allow_special)) {
    int rc = encode_segment(t, c, text, n, &o);
    return rc ? rc : *len - before;
  }
  size_t seg = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t->added_first[(uint8_t)text[i]]) continue;
    int32_t id = added_at(t, text + i, n - i, allow_special);
    if (id < 0) continue;
    int rc = encode_segment(t, c, text + seg, i - seg, &o);
    if (rc) return rc;
    push_ids(ids, len, cap, &id, 1);
    i += t->len[id] - 1;
    seg = i + 1;
  }
  int rc = encode_segment(t, c, text + seg, n - seg, &o);
  return rc ? rc : *len - before;
}

int64_t fm_tok_encode(const FmTokenizer *t, const char *text, size_t n, bool allow_special, int32_t **ids,
                      int64_t *len, int64_t *cap) {
  if (!tls_cache || tls_cache->serial != t->serial) {
    fm_tok_cache_free(tls_cache);
    tls_cache = fm_tok_cache_new(t);
  }
  return fm_tok_encode_cached(t, tls_cache, text, n, allow_special, ids, len, cap);
}

int fm_tok_decode(const FmTokenizer *t, const int32_t *ids, int64_t n, char **out, size_t *len, size_t *cap) {
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_ids || t->len[id] == UINT32_MAX) return FM_EINVAL;
    size_t k = t->len[id];
    if (*len + k + 1 > *cap) {
      size_t nc = *cap ? *cap : 256;
      while (nc < *len + k + 1) nc *= 2;
      *out = fm_xrealloc(*out, nc);
      *cap = nc;
    }
    memcpy(*out + *len, t->pool + t->off[id], k);
    *len += k;
  }
  if (*len + 1 > *cap) {
    *out = fm_xrealloc(*out, *len + 1);
    *cap = *len + 1;
  }
  (*out)[*len] = 0;
  return 0;
}

int fm__tok_pretokenize(const FmTokenizer *t, FmTokCache *c, const char *text, size_t n, FmTokPieceFn fn, void *ctx) {
  Out o = {NULL, NULL, NULL, fn, ctx};
  return encode_segment(t, c, text, n, &o);
}
