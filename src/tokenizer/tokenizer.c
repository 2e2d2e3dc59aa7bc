/* tokenizer.c: byte-level BPE encode and decode, the builder every loader
 * uses (tokenizer_internal.h), the per-thread encode cache and the canonical
 * hash. Loaders live in load.c, the tokenizer.json writer in save.c,
 * training in bpe_train.c.
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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/hash.h"
#include "tokenizer_internal.h"

size_t fm__tok_small_max = 256;

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

static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }
static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static void bmap_grow(FmTokBMap *m, const char *pool) {
  uint64_t ncap = m->cap ? m->cap * 2 : 1024;
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

static int32_t bmap_get(const FmTokBMap *m, const char *pool, const char *s, size_t n, uint64_t h) {
  if (!m->cap) return -1;
  uint32_t h32 = (uint32_t)h;
  for (uint64_t j = h & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
    const FmTokBSlot *e = &m->slot[j];
    if (e->len == UINT32_MAX) return -1;
    if (e->h32 == h32 && e->len == n && memcmp(pool + e->off, s, n) == 0) return e->id;
  }
}

static void pmap_grow(FmTokPMap *m) {
  uint64_t ncap = m->cap ? m->cap * 2 : 1024;
  FmTokPSlot *ns = fm_xmalloc(ncap * sizeof *ns);
  for (uint64_t i = 0; i < ncap; i++) ns[i].key = UINT64_MAX;
  for (uint64_t i = 0; i < m->cap; i++) {
    if (m->slot[i].key == UINT64_MAX) continue;
    uint64_t j = mix64(m->slot[i].key) & (ncap - 1);
    while (ns[j].key != UINT64_MAX) j = (j + 1) & (ncap - 1);
    ns[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = ns;
  m->cap = ncap;
}

static void pmap_put(FmTokPMap *m, int32_t l, int32_t r, int32_t prio, int32_t merged) {
  if ((m->n + 1) * 2 > m->cap) pmap_grow(m);
  uint64_t k = pair_key(l, r);
  uint64_t j = mix64(k) & (m->cap - 1);
  while (m->slot[j].key != UINT64_MAX && m->slot[j].key != k) j = (j + 1) & (m->cap - 1);
  if (m->slot[j].key == UINT64_MAX) m->n++;
  m->slot[j] = (FmTokPSlot){k, prio, merged};
}

static inline const FmTokPSlot *pmap_get(const FmTokPMap *m, int32_t l, int32_t r) {
  uint64_t k = pair_key(l, r);
  for (uint64_t j = mix64(k) & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
    const FmTokPSlot *e = &m->slot[j];
    if (e->key == k) return e;
    if (e->key == UINT64_MAX) return NULL;
  }
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
  return bmap_get(&t->vocab, t->pool, s, n, fm__tok_hash_bytes(s, n));
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
    uint64_t h = fm__tok_hash_bytes(s, n);
    int32_t have = bmap_get(&t->vocab, t->pool, s, n, h);
    if (have >= 0 && have != id) {
      if (other) *other = have;
      return FM_EFORMAT;
    }
    if ((t->vocab.n + 1) * 2 > t->vocab.cap) bmap_grow(&t->vocab, t->pool);
    uint64_t j = h & (t->vocab.cap - 1);
    while (t->vocab.slot[j].len != UINT32_MAX) j = (j + 1) & (t->vocab.cap - 1);
    t->vocab.slot[j] = (FmTokBSlot){t->off[id], (uint32_t)n, id, (uint32_t)h};
    t->vocab.n++;
  }
  t->flags[id] |= (uint8_t)flags;
  if (id >= t->n_ids) t->n_ids = (int64_t)id + 1;
  return 0;
}

int32_t fm__tok_concat_id(const FmTokenizer *t, int32_t l, int32_t r) {
  size_t nl = t->len[l], nr = t->len[r];
  char stack[512], *buf = nl + nr <= sizeof stack ? stack : fm_xmalloc(nl + nr);
  memcpy(buf, t->pool + t->off[l], nl);
  memcpy(buf + nl, t->pool + t->off[r], nr);
  int32_t id = fm__tok_lookup(t, buf, nl + nr);
  if (buf != stack) free(buf);
  return id;
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
  for (int64_t id = 0; id < t->n_ids; id++) {
    if (!(t->flags[id] & FM__TOK_MODEL) || t->len[id] < 2) continue;
    const char *s = t->pool + t->off[id];
    for (uint32_t k = 1; k < t->len[id]; k++) {
      int32_t l = fm__tok_lookup(t, s, k), r = fm__tok_lookup(t, s + k, t->len[id] - k);
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
    t->re = pcre2_compile((PCRE2_SPTR)t->effective, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eoff, NULL);
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
static void h_u64(FmSha256 *s, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  fm_sha256_update(s, b, 8);
}

/* Canonical form: algorithm, flags, pattern, every id's bytes and flags,
 * the merges in priority order. Storage details (JSON key order, "a b" vs
 * [a, b] merges, encoder.json vs tokenizer.json) do not enter. */
static void compute_hash(FmTokenizer *t) {
  FmSha256 s;
  fm_sha256_init(&s);
  fm_sha256_update(&s, "fmhpc-tokenizer-v1", 18);
  h_u64(&s, (uint64_t)t->algo);
  h_u64(&s, t->ignore_merges);
  h_u64(&s, t->add_prefix_space);
  h_u64(&s, t->effective ? strlen(t->effective) : UINT64_MAX);
  if (t->effective) fm_sha256_update(&s, t->effective, strlen(t->effective));
  h_u64(&s, (uint64_t)t->n_ids);
  for (int64_t id = 0; id < t->n_ids; id++) {
    h_u64(&s, t->len[id] == UINT32_MAX ? UINT64_MAX : t->len[id]);
    if (t->len[id] == UINT32_MAX) continue;
    h_u64(&s, t->flags[id]);
    fm_sha256_update(&s, t->pool + t->off[id], t->len[id]);
  }
  h_u64(&s, (uint64_t)t->n_merges);
  for (int64_t i = 0; i < t->n_merges; i++) h_u64(&s, pair_key(t->merges[i][0], t->merges[i][1]));
  uint8_t d[32];
  fm_sha256_final(&s, d);
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

/* ---- the merge loop ---------------------------------------------------- */
/* Small pre-tokens: arrays, a linear scan for the leftmost minimum. */
static int64_t bpe_small(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  int32_t prio[512], mer[512];
  int64_t m = (int64_t)n;
  for (size_t i = 0; i < n; i++) out[i] = t->byte_id[s[i]];
  for (int64_t i = 0; i + 1 < m; i++) {
    const FmTokPSlot *e = pmap_get(&t->pairs, out[i], out[i + 1]);
    prio[i] = e ? e->prio : INT32_MAX;
    mer[i] = e ? e->merged : -1;
  }
  while (m > 1) {
    int64_t best = -1;
    int32_t bp = INT32_MAX;
    for (int64_t i = 0; i + 1 < m; i++)
      if (prio[i] < bp) bp = prio[i], best = i;
    if (best < 0) break;
    out[best] = mer[best];
    memmove(out + best + 1, out + best + 2, (size_t)(m - best - 2) * sizeof *out);
    memmove(prio + best + 1, prio + best + 2, (size_t)(m - best - 2) * sizeof *prio);
    memmove(mer + best + 1, mer + best + 2, (size_t)(m - best - 2) * sizeof *mer);
    m--;
    for (int64_t i = best - 1; i <= best; i++) {
      if (i < 0 || i + 1 >= m) continue;
      const FmTokPSlot *e = pmap_get(&t->pairs, out[i], out[i + 1]);
      prio[i] = e ? e->prio : INT32_MAX;
      mer[i] = e ? e->merged : -1;
    }
  }
  return m;
}

/* Long pre-tokens (runs of punctuation or spaces, base64 blobs): symbols in
 * a linked list and a binary heap of (priority, position), stale entries
 * skipped on pop, as HF tokenizers' Word::merge_all. Same merges as
 * bpe_small, in O(n log n). */
typedef struct HeapE {
  int32_t prio;
  int32_t pos;
  int32_t merged;
  int32_t right; /* the symbol id right of pos when pushed */
} HeapE;
static int heap_less(const HeapE *a, const HeapE *b) {
  return a->prio != b->prio ? a->prio < b->prio : a->pos < b->pos;
}
static void heap_push(HeapE *h, int64_t *n, HeapE e) {
  int64_t i = (*n)++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_less(&e, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = e;
}
static HeapE heap_pop(HeapE *h, int64_t *n) {
  HeapE top = h[0], e = h[--(*n)];
  int64_t i = 0;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
    if (!heap_less(&h[c], &e)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = e;
  return top;
}

static int64_t bpe_long(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  int32_t *sym = fm_xmalloc(n * sizeof *sym), *prev = fm_xmalloc(n * sizeof *prev), *next = fm_xmalloc(n * sizeof *next);
  HeapE *heap = fm_xmalloc(2 * n * sizeof *heap + sizeof *heap);
  int64_t nh = 0;
  for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]], prev[i] = (int32_t)i - 1, next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  for (size_t i = 0; i + 1 < n; i++) {
    const FmTokPSlot *e = pmap_get(&t->pairs, sym[i], sym[i + 1]);
    if (e) heap_push(heap, &nh, (HeapE){e->prio, (int32_t)i, e->merged, sym[i + 1]});
  }
  while (nh > 0) {
    HeapE top = heap_pop(heap, &nh);
    int32_t p = top.pos, q = next[p];
    /* Stale: the symbol was merged away or its pair changed since the push. */
    if (sym[p] < 0 || q < 0 || sym[q] != top.right) continue;
    const FmTokPSlot *cur = pmap_get(&t->pairs, sym[p], sym[q]);
    if (!cur || cur->merged != top.merged || cur->prio != top.prio) continue;
    sym[p] = top.merged;
    sym[q] = -1;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) {
      const FmTokPSlot *e = pmap_get(&t->pairs, sym[prev[p]], sym[p]);
      if (e) heap_push(heap, &nh, (HeapE){e->prio, prev[p], e->merged, sym[p]});
    }
    if (next[p] >= 0) {
      const FmTokPSlot *e = pmap_get(&t->pairs, sym[p], sym[next[p]]);
      if (e) heap_push(heap, &nh, (HeapE){e->prio, p, e->merged, sym[next[p]]});
    }
  }
  int64_t m = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) out[m++] = sym[i];
  free(sym), free(prev), free(next), free(heap);
  return m;
}

int64_t fm__tok_bpe(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  if (n == 0) return 0;
  return n <= fm__tok_small_max && n <= 512 ? bpe_small(t, s, n, out) : bpe_long(t, s, n, out);
}

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
    int32_t id = bmap_get(&t->vocab, t->pool, s, n, hv);
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
      fm_err("tokenizer: pre-tokenizer regex failed at byte %zu: %s\n", from, (char *)msg);
      return FM_EINVAL;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* an empty match isolates nothing: step one character */
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
