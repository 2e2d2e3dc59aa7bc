/* vocab.c: the FmTokenizer tables and the builder every loader and the
 * trainer use (tokenizer_internal.h): GPT-2's byte <-> code point mapping,
 * the vocab (bytes -> id) and pair ((left, right) -> priority) maps, ids and
 * merges, the pre-tokenizer pattern with \s spelled out per engine and
 * compiled when the tokenizer is finished, the canonical hash, and the
 * public accessors. The merge loop is bpe.c, encoding tokenizer.c. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/hash.h"
#include "tokenizer_internal.h"

/* ---- GPT-2 bytes_to_unicode ------------------------------------------- */
/* Printable bytes map to themselves; the 68 others (0-32, 127-160, 173) to
 * 256, 257, ... in byte order (openai/gpt-2 src/encoder.py). */
static int byte_is_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

uint32_t fm__tok_byte_to_cp(uint8_t b) {
  if (byte_is_printable(b)) return b;
  uint32_t n = 0;
  for (int x = 0; x < b; x++) n += !byte_is_printable(x);
  return 256 + n;
}

int fm__tok_cp_to_byte(uint32_t cp) {
  static int inv[324];
  static int ready;
  if (!ready) { /* idempotent: racing threads write the same values */
    for (int i = 0; i < 324; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[fm__tok_byte_to_cp((uint8_t)b)] = b;
    ready = 1;
  }
  return cp < 324 ? inv[cp] : -1;
}

int64_t fm__tok_bytelevel_decode(const char *s, size_t n, char *out) {
  const uint8_t *p = (const uint8_t *)s;
  int64_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (p[i] < 0x80) cp = p[i], i += 1;
    else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F), i += 2;
    else return -1; /* every ByteLevel code point is below U+0800 */
    int b = fm__tok_cp_to_byte(cp);
    if (b < 0) return -1;
    out[k++] = (char)b;
  }
  return k;
}

void fm__tok_bytelevel_encode(FmStr *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = fm__tok_byte_to_cp((uint8_t)s[i]);
    char u[2];
    if (cp < 0x80) {
      u[0] = (char)cp;
      fm_str_catn(b, u, 1);
    } else {
      u[0] = (char)(0xC0 | (cp >> 6));
      u[1] = (char)(0x80 | (cp & 0x3F));
      fm_str_catn(b, u, 2);
    }
  }
}

/* ---- hashing and maps ------------------------------------------------- */
uint64_t fm__tok_hash_bytes(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    s += 8, n -= 8;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)s[i] << (8 * i);
  h = (h ^ v) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

/* Rehash into ncap slots (a power of two above the entry count). */
static void bmap_resize(FmTokBMap *m, const char *pool, uint64_t ncap) {
  FmTokBSlot *ns = fm_xmalloc(ncap * sizeof *ns);
  for (uint64_t i = 0; i < ncap; i++) ns[i].len = UINT32_MAX;
  for (uint64_t i = 0; i < m->cap; i++) {
    if (m->slot[i].len == UINT32_MAX) continue;
    uint64_t h = fm__tok_hash_bytes(pool + m->slot[i].off, m->slot[i].len);
    uint64_t j = h & (ncap - 1);
    while (ns[j].len != UINT32_MAX) j = (j + 1) & (ncap - 1);
    ns[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = ns;
  m->cap = ncap;
}
static void bmap_grow(FmTokBMap *m, const char *pool) { bmap_resize(m, pool, m->cap ? m->cap * 2 : 1024); }

static void pmap_resize(FmTokPMap *m, uint64_t ncap) {
  FmTokPSlot *ns = fm_xmalloc(ncap * sizeof *ns);
  for (uint64_t i = 0; i < ncap; i++) ns[i].key = UINT64_MAX;
  for (uint64_t i = 0; i < m->cap; i++) {
    if (m->slot[i].key == UINT64_MAX) continue;
    uint64_t j = fm__tok_mix64(m->slot[i].key) & (ncap - 1);
    while (ns[j].key != UINT64_MAX) j = (j + 1) & (ncap - 1);
    ns[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = ns;
  m->cap = ncap;
}
static void pmap_grow(FmTokPMap *m) { pmap_resize(m, m->cap ? m->cap * 2 : 1024); }

/* The capacity the grow-on-demand rule ((n + 1) * 2 > cap: double) ends at
 * after n entries, so a map reserved for n never rehashes. */
static uint64_t map_cap_for(uint64_t n) {
  uint64_t c = 1024;
  while ((n + 1) * 2 > c) c *= 2;
  return c;
}

static void pmap_put(FmTokPMap *m, int32_t l, int32_t r, int32_t prio, int32_t merged) {
  if ((m->n + 1) * 2 > m->cap) pmap_grow(m);
  uint64_t k = fm__tok_pair_key(l, r);
  uint64_t j = fm__tok_mix64(k) & (m->cap - 1);
  while (m->slot[j].key != UINT64_MAX && m->slot[j].key != k) j = (j + 1) & (m->cap - 1);
  if (m->slot[j].key == UINT64_MAX) m->n++;
  m->slot[j] = (FmTokPSlot){k, prio, merged};
}

/* ---- builder ---------------------------------------------------------- */
static _Atomic uint64_t next_serial = 1;

FmTokenizer *fm__tok_new(int algo) {
  FmTokenizer *t = fm_xcalloc(1, sizeof *t);
  t->algo = algo;
  t->eos = -1;
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  t->pairs.cap = 0;
  pmap_grow(&t->pairs);
  t->serial = atomic_fetch_add(&next_serial, 1);
  return t;
}

static void grow_ids(FmTokenizer *t, int64_t need) {
  if (need <= t->ids_cap) return;
  int64_t ncap = t->ids_cap ? t->ids_cap : 1024;
  while (ncap < need) ncap *= 2;
  t->off = fm_xrealloc(t->off, (size_t)ncap * sizeof *t->off);
  t->len = fm_xrealloc(t->len, (size_t)ncap * sizeof *t->len);
  t->flags = fm_xrealloc(t->flags, (size_t)ncap);
  for (int64_t i = t->ids_cap; i < ncap; i++) t->len[i] = UINT32_MAX, t->off[i] = 0, t->flags[i] = 0;
  t->ids_cap = ncap;
}

int32_t fm__tok_lookup(const FmTokenizer *t, const char *s, size_t n) {
  return fm__tok_bmap_get(&t->vocab, t->pool, s, n, fm__tok_hash_bytes(s, n));
}

int32_t fm__tok_lookup_near(const FmTokenizer *t, const char *s, size_t n, int32_t guess) {
  /* The vocab holds each model token's bytes under one id, so an id that
   * is a model token with these bytes is the one the map would return. */
  if (guess >= 0 && guess < t->n_ids && t->len[guess] == n && (t->flags[guess] & FM__TOK_MODEL) &&
      memcmp(t->pool + t->off[guess], s, n) == 0)
    return guess;
  return fm__tok_lookup(t, s, n);
}

int fm__tok_set(FmTokenizer *t, int32_t id, const char *s, size_t n, int flags, int32_t *other) {
  grow_ids(t, (int64_t)id + 1);
  if (t->len[id] != UINT32_MAX) { /* seen: the same bytes may gain flags */
    if (t->len[id] != n || memcmp(t->pool + t->off[id], s, n) != 0) {
      if (other) *other = id;
      return FM_EFORMAT;
    }
  } else {
    if (t->pool_len + n + 1 > t->pool_cap) {
      t->pool_cap = (t->pool_len + n + 1) * 2;
      t->pool = fm_xrealloc(t->pool, t->pool_cap);
    }
    memcpy(t->pool + t->pool_len, s, n);
    t->pool[t->pool_len + n] = 0; /* specials are printed as strings */
    t->off[id] = (uint32_t)t->pool_len;
    t->len[id] = (uint32_t)n;
    t->pool_len += n + 1;
  }
  if ((flags & FM__TOK_MODEL) && !(t->flags[id] & FM__TOK_MODEL)) {
    if ((t->vocab.n + 1) * 2 > t->vocab.cap) bmap_grow(&t->vocab, t->pool);
    /* one probe: up to these bytes (already another id's) or a free slot */
    uint64_t h = fm__tok_hash_bytes(s, n), mask = t->vocab.cap - 1;
    uint32_t h32 = (uint32_t)h;
    uint64_t j = h & mask;
    for (;; j = (j + 1) & mask) {
      const FmTokBSlot *e = &t->vocab.slot[j];
      if (e->len == UINT32_MAX) break;
      if (e->h32 == h32 && e->len == n && memcmp(t->pool + e->off, s, n) == 0) {
        if (e->id == id) break; /* not reached: an id enters the map once, with FM__TOK_MODEL */
        if (other) *other = e->id;
        return FM_EFORMAT;
      }
    }
    if (t->vocab.slot[j].len == UINT32_MAX) {
      t->vocab.slot[j] = (FmTokBSlot){t->off[id], (uint32_t)n, id, h32};
      t->vocab.n++;
    }
  }
  t->flags[id] |= (uint8_t)flags;
  if (id >= t->n_ids) t->n_ids = (int64_t)id + 1;
  return 0;
}

void fm__tok_add_merge(FmTokenizer *t, int32_t l, int32_t r, int32_t merged) {
  if (t->n_merges == t->merges_cap) {
    t->merges_cap = t->merges_cap ? 2 * t->merges_cap : 1024;
    t->merges = fm_xrealloc(t->merges, (size_t)t->merges_cap * sizeof *t->merges);
  }
  t->merges[t->n_merges][0] = l;
  t->merges[t->n_merges][1] = r;
  pmap_put(&t->pairs, l, r, (int32_t)t->n_merges, merged);
  t->n_merges++;
}

void fm__tok_reserve(FmTokenizer *t, int64_t n_ids, int64_t n_model, size_t pool_bytes, int64_t n_merges) {
  if (n_ids > 0) grow_ids(t, n_ids);
  if (pool_bytes > t->pool_cap) {
    t->pool_cap = pool_bytes;
    t->pool = fm_xrealloc(t->pool, t->pool_cap);
  }
  if (n_model > 0) {
    uint64_t c = map_cap_for(t->vocab.n + (uint64_t)n_model);
    if (c > t->vocab.cap) bmap_resize(&t->vocab, t->pool, c);
  }
  if (n_merges > 0) {
    uint64_t c = map_cap_for(t->pairs.n + (uint64_t)n_merges);
    if (c > t->pairs.cap) pmap_resize(&t->pairs, c);
    if (t->n_merges + n_merges > t->merges_cap) {
      t->merges_cap = t->n_merges + n_merges;
      t->merges = fm_xrealloc(t->merges, (size_t)t->merges_cap * sizeof *t->merges);
    }
  }
}

/* Class contents (no brackets) for each flavour (see tokenizer_internal.h).
 * Non-ASCII members are literal UTF-8, which PCRE2, Oniguruma (HF) and
 * JavaScript all read the same way inside a class, so a pattern written out
 * to tokenizer.json means the same to every reader. */
#define WS_COMMON "\\t\\n\\x0b\\f\\r " "\xc2\xa0" "\xe1\x9a\x80" "\xe2\x80\x80" "-" "\xe2\x80\x8a" \
  "\xe2\x80\xa8" "\xe2\x80\xa9" "\xe2\x80\xaf" "\xe2\x81\x9f" "\xe3\x80\x80"
static const char *const ws_class[2] = {WS_COMMON "\xc2\x85", WS_COMMON "\xef\xbb\xbf"};

char *fm__tok_spell_ws(const char *p, int ws) {
  FmStr b;
  fm_str_init(&b);
  const char *cls = ws_class[ws == FM__TOK_WS_JS];
  int in_class = 0;
  for (size_t i = 0; p[i];) {
    if (p[i] == '\\' && p[i + 1] == 'Q') { /* \Q...\E is literal */
      const char *e = strstr(p + i + 2, "\\E");
      size_t n = e ? (size_t)(e - (p + i)) + 2 : strlen(p + i);
      fm_str_catn(&b, p + i, n);
      i += n;
    } else if (p[i] == '\\' && (p[i + 1] == 's' || (p[i + 1] == 'S' && !in_class))) {
      if (in_class) fm_str_cat(&b, cls);
      else fm_str_printf(&b, "[%s%s]", p[i + 1] == 'S' ? "^" : "", cls);
      i += 2;
    } else if (p[i] == '\\' && p[i + 1]) {
      fm_str_catn(&b, p + i, 2);
      i += 2;
    } else {
      if (!in_class && p[i] == '[') {
        in_class = 1;
        fm_str_catn(&b, p + i, 1), i++;
        if (p[i] == '^') fm_str_catn(&b, p + i, 1), i++;
        if (p[i] == ']') fm_str_catn(&b, p + i, 1), i++; /* a leading ] is literal */
        continue;
      }
      if (in_class && p[i] == ']') in_class = 0;
      fm_str_catn(&b, p + i, 1), i++;
    }
  }
  return b.s;
}

void fm__tok_set_pattern(FmTokenizer *t, const char *pattern) {
  free(t->pattern);
  t->pattern = pattern ? fm_xstrdup(pattern) : NULL;
}

/* RANKS: every split of a token into two tokens is a pair whose priority
 * is the token's rank (tiktoken's byte_pair_merge looks up the rank of
 * parts[i].start..parts[i+2].start, which is always such a split). */
static void build_rank_pairs(FmTokenizer *t) {
  /* r50k, cl100k and o200k have 2.15-2.33 pairs per token of two bytes or
   * more: a table sized for 2 rehashes at most once instead of ~10 times. */
  uint64_t multi = 0;
  for (int64_t id = 0; id < t->n_ids; id++) multi += (t->flags[id] & FM__TOK_MODEL) && t->len[id] >= 2;
  uint64_t c = map_cap_for(t->pairs.n + 2 * multi);
  if (c > t->pairs.cap) pmap_resize(&t->pairs, c);
  for (int64_t id = 0; id < t->n_ids; id++) {
    if (!(t->flags[id] & FM__TOK_MODEL) || t->len[id] < 2) continue;
    const char *s = t->pool + t->off[id];
    uint32_t n = t->len[id];
    for (uint32_t k = 1; k < n; k++) { /* one-byte parts: byte_id, set before this runs */
      int32_t l = k == 1 ? t->byte_id[(uint8_t)s[0]] : fm__tok_lookup(t, s, k);
      int32_t r = l < 0 ? -1 : k == n - 1 ? t->byte_id[(uint8_t)s[k]] : fm__tok_lookup(t, s + k, n - k);
      if (l >= 0 && r >= 0) pmap_put(&t->pairs, l, r, (int32_t)id, (int32_t)id);
    }
  }
}

typedef struct LenId {
  uint32_t len;
  int32_t id;
} LenId;
/* Longest first, so the first candidate that matches at a position is the
 * longest (HF AddedVocabulary and tiktoken both take the longest). */
static int cmp_len_id(const void *a, const void *b) {
  const LenId *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static void compute_hash(FmTokenizer *t);

int fm__tok_finish(FmTokenizer *t, const char *src, FILE *err) {
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    t->byte_id[b] = fm__tok_lookup(t, &c, 1);
    if (t->byte_id[b] < 0) {
      FmStr bl;
      fm_str_init(&bl);
      fm__tok_bytelevel_encode(&bl, &c, 1);
      if (err)
        fprintf(err,
                "%s: the vocabulary has no token for byte 0x%02x (ByteLevel \"%s\"): not a byte-level BPE\n"
                "hint: fmhpc supports byte-level BPE tokenizers (GPT-2, tiktoken, Llama 3, its own)\n",
                src, b, bl.s ? bl.s : "");
      fm_str_free(&bl);
      return FM_EFORMAT;
    }
  }
  if (t->algo == FM__TOK_RANKS) build_rank_pairs(t);
  free(t->effective);
  t->effective = NULL;
  if (t->re) pcre2_code_free(t->re);
  t->re = NULL;
  if (t->pattern) {
    int ec;
    PCRE2_SIZE eoff;
    t->effective = fm__tok_spell_ws(t->pattern, t->ws);
    /* MULTILINE: ^ and $ at line boundaries, as in Oniguruma's Ruby syntax, which HF tokenizers compile with */
    t->re = pcre2_compile((PCRE2_SPTR)t->effective, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE,
                          &ec, &eoff, NULL);
    if (!t->re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(ec, msg, sizeof msg);
      if (err)
        fprintf(err, "%s: pre-tokenizer regex does not compile at offset %zu: %s\n  pattern: %s\n", src,
                (size_t)eoff, (char *)msg, t->pattern);
      return FM_EFORMAT;
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
  }
  t->n_added = 0;
  free(t->added);
  t->added = fm_xmalloc(sizeof *t->added * (size_t)(t->n_ids + 1));
  LenId *li = fm_xmalloc(sizeof *li * (size_t)(t->n_ids + 1));
  memset(t->added_first, 0, sizeof t->added_first);
  for (int64_t id = 0; id < t->n_ids; id++)
    if ((t->flags[id] & FM__TOK_ADDED) && t->len[id] != UINT32_MAX && t->len[id] > 0) {
      li[t->n_added++] = (LenId){t->len[id], (int32_t)id};
      t->added_first[(uint8_t)t->pool[t->off[id]]] = 1;
    }
  qsort(li, (size_t)t->n_added, sizeof *li, cmp_len_id);
  for (int i = 0; i < t->n_added; i++) t->added[i] = li[i].id;
  free(li);
  /* End of document: the first of these that is a special token. */
  static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>"};
  t->eos = -1;
  for (size_t i = 0; i < sizeof eos_names / sizeof *eos_names && t->eos < 0; i++) t->eos = fm_tok_special_id(t, eos_names[i]);
  compute_hash(t);
  return 0;
}

/* ---- hash -------------------------------------------------------------- */
/* The canonical form goes to SHA-256 through a buffer: one update call per
 * 16 KiB instead of three per id (the digest depends only on the bytes). */
typedef struct HashBuf {
  FmSha256 s;
  size_t n;
  uint8_t b[16384];
} HashBuf;

static void h_put(HashBuf *h, const void *p, size_t n) {
  if (h->n + n > sizeof h->b) {
    fm_sha256_update(&h->s, h->b, h->n);
    h->n = 0;
    if (n > sizeof h->b) {
      fm_sha256_update(&h->s, p, n);
      return;
    }
  }
  memcpy(h->b + h->n, p, n);
  h->n += n;
}

static void h_u64(HashBuf *h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  h_put(h, b, 8);
}

/* Canonical form: algorithm, flags, pattern, every id's bytes and flags,
 * the merges in priority order. Storage details (JSON key order, "a b" vs
 * [a, b] merges, encoder.json vs tokenizer.json) do not enter. */
static void compute_hash(FmTokenizer *t) {
  HashBuf *h = fm_xmalloc(sizeof *h);
  h->n = 0;
  fm_sha256_init(&h->s);
  h_put(h, "fmhpc-tokenizer-v1", 18);
  h_u64(h, (uint64_t)t->algo);
  h_u64(h, t->ignore_merges);
  h_u64(h, t->add_prefix_space);
  h_u64(h, t->effective ? strlen(t->effective) : UINT64_MAX);
  if (t->effective) h_put(h, t->effective, strlen(t->effective));
  h_u64(h, (uint64_t)t->n_ids);
  for (int64_t id = 0; id < t->n_ids; id++) {
    h_u64(h, t->len[id] == UINT32_MAX ? UINT64_MAX : t->len[id]);
    if (t->len[id] == UINT32_MAX) continue;
    h_u64(h, t->flags[id]);
    h_put(h, t->pool + t->off[id], t->len[id]);
  }
  h_u64(h, (uint64_t)t->n_merges);
  for (int64_t i = 0; i < t->n_merges; i++) h_u64(h, fm__tok_pair_key(t->merges[i][0], t->merges[i][1]));
  fm_sha256_update(&h->s, h->b, h->n);
  uint8_t d[32];
  fm_sha256_final(&h->s, d);
  free(h);
  fm_hex(d, 32, t->hash);
}

/* ---- public accessors -------------------------------------------------- */
int64_t fm_tok_vocab_size(const FmTokenizer *t) { return t->n_ids; }
const char *fm_tok_hash(const FmTokenizer *t) { return t->hash; }
int32_t fm_tok_eos_id(const FmTokenizer *t) { return t->eos; }
const char *fm_tok_pattern(const FmTokenizer *t) { return t->pattern; }

int32_t fm_tok_special_id(const FmTokenizer *t, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < t->n_added; i++) {
    int32_t id = t->added[i];
    if ((t->flags[id] & FM__TOK_SPECIAL) && t->len[id] == n && !memcmp(t->pool + t->off[id], name, n)) return id;
  }
  return -1;
}

const char *fm_tok_token_bytes(const FmTokenizer *t, int32_t id, size_t *n) {
  if (id < 0 || id >= t->n_ids || t->len[id] == UINT32_MAX) return NULL;
  if (n) *n = t->len[id];
  return t->pool + t->off[id];
}

bool fm_tok_is_special(const FmTokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_ids && (t->flags[id] & FM__TOK_SPECIAL);
}
