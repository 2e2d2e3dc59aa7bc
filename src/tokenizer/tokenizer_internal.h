/* tokenizer_internal.h: the FmTokenizer layout and the builder shared by
 * src/tokenizer/: vocab.c (byte mapping, maps, builder, pattern, hash),
 * bpe.c (the merge loop), tokenizer.c (encode/decode), load.c (loaders),
 * save.c (tokenizer.json writer) and bpe_train.c. Not a public
 * interface: other modules use include/fmhpc/tokenizer.h. */
#ifndef FMHPC_TOKENIZER_INTERNAL_H
#define FMHPC_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fmhpc/tokenizer.h"

/* How a pair's priority is defined. MERGES: the index of (left, right) in a
 * merges list (GPT-2 vocab.bpe, HF tokenizer.json). RANKS: the rank of the
 * concatenation left+right in the vocabulary (tiktoken: rank == id). Both
 * then merge the leftmost pair of lowest priority, one pair at a time. */
enum { FM__TOK_MERGES = 0, FM__TOK_RANKS = 1 };

/* What `\s` means in a pattern. The engines disagree on a few code points:
 * UNICODE is the White_Space property (Rust regex in tiktoken and HF
 * tokenizers, Python): U+0009-000D, U+0020, U+0085, U+00A0, U+1680,
 * U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000. JS is ECMAScript's
 * WhiteSpace + LineTerminator (gpt-3-encoder, gpt-tokenizer,
 * transformers.js): the same without U+0085 and with U+FEFF (the BOM).
 * PCRE2's own \s (with U+180E) is never used: patterns are rewritten with
 * an explicit class before compiling. */
enum { FM__TOK_WS_UNICODE = 0, FM__TOK_WS_JS = 1 };

/* Per-id flags. */
enum { FM__TOK_MODEL = 1, FM__TOK_ADDED = 2, FM__TOK_SPECIAL = 4 };

/* Open-addressing map from byte strings (held in the tokenizer's pool) to
 * ids. */
typedef struct FmTokBSlot {
  uint32_t off, len; /* len == UINT32_MAX: empty */
  int32_t id;
  uint32_t h32;
} FmTokBSlot;
typedef struct FmTokBMap {
  FmTokBSlot *slot;
  uint64_t cap, n; /* cap a power of two */
} FmTokBMap;

/* Open-addressing map from (left, right) id pairs to (priority, merged id). */
typedef struct FmTokPSlot {
  uint64_t key; /* UINT64_MAX: empty */
  int32_t prio, merged;
} FmTokPSlot;
typedef struct FmTokPMap {
  FmTokPSlot *slot;
  uint64_t cap, n;
} FmTokPMap;

struct FmTokenizer {
  int algo;              /* FM__TOK_MERGES or FM__TOK_RANKS */
  bool ignore_merges;    /* a pre-token that is itself in the vocab is emitted whole */
  bool add_prefix_space; /* HF ByteLevel add_prefix_space */
  char *pattern;         /* pre-tokenizer regex as declared, NULL: no split */
  int ws;                /* FM__TOK_WS_*: what \s in pattern means */
  char *effective;       /* pattern with \s/\S spelled out: what is compiled and hashed */
  pcre2_code *re;
  bool jit;
  int64_t n_ids; /* largest id + 1 */
  uint32_t *off, *len; /* token bytes in pool; len UINT32_MAX: a hole */
  uint8_t *flags;
  char *pool;
  size_t pool_len, pool_cap;
  int64_t ids_cap;
  FmTokBMap vocab; /* model tokens: bytes -> id */
  FmTokPMap pairs;
  int32_t (*merges)[2]; /* MERGES: the list in priority order */
  int64_t n_merges, merges_cap;
  int32_t byte_id[256];
  int32_t *added; /* ids of added tokens (matched in text as a whole) */
  int n_added;
  uint8_t added_first[256]; /* 1 when some added token starts with this byte */
  int32_t eos;
  uint64_t serial; /* identifies this tokenizer to thread-local caches */
  char hash[65];
};

/* ---- the vocab and pair maps' lookups (vocab.c builds them) ------------ */
static inline uint64_t fm__tok_pair_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }
static inline uint64_t fm__tok_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static inline int32_t fm__tok_bmap_get(const FmTokBMap *m, const char *pool, const char *s, size_t n, uint64_t h) {
  if (!m->cap) return -1;
  uint32_t h32 = (uint32_t)h;
  for (uint64_t j = h & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
    const FmTokBSlot *e = &m->slot[j];
    if (e->len == UINT32_MAX) return -1;
    if (e->h32 == h32 && e->len == n && memcmp(pool + e->off, s, n) == 0) return e->id;
  }
}

static inline const FmTokPSlot *fm__tok_pmap_get(const FmTokPMap *m, int32_t l, int32_t r) {
  uint64_t k = fm__tok_pair_key(l, r);
  for (uint64_t j = fm__tok_mix64(k) & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
    const FmTokPSlot *e = &m->slot[j];
    if (e->key == k) return e;
    if (e->key == UINT64_MAX) return NULL;
  }
}

/* GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): byte -> code point. */
uint32_t fm__tok_byte_to_cp(uint8_t b);
/* Inverse: code point -> byte, or -1 when cp is not a ByteLevel character. */
int fm__tok_cp_to_byte(uint32_t cp);
/* Decode a ByteLevel string (UTF-8 of byte-level code points) to bytes into
 * out (room for n bytes); returns the byte count or -1. */
int64_t fm__tok_bytelevel_decode(const char *s, size_t n, char *out);
/* Encode bytes as a ByteLevel UTF-8 string into b. */
void fm__tok_bytelevel_encode(FmStr *b, const char *s, size_t n);

uint64_t fm__tok_hash_bytes(const void *p, size_t n);

FmTokenizer *fm__tok_new(int algo);
/* Set id's bytes and flags (grows the id space). FM_MODEL tokens go into the
 * vocab map. Returns 0, or FM_EFORMAT when id already holds other bytes or
 * the model vocab already has these bytes under another id (*other set). */
int fm__tok_set(FmTokenizer *t, int32_t id, const char *s, size_t n, int flags, int32_t *other);
/* Model-vocab id of bytes s[0..n), or -1. */
int32_t fm__tok_lookup(const FmTokenizer *t, const char *s, size_t n);
/* The same, trying id guess first (a loader's likely id: merges usually
 * create ids in order), so that a right guess costs no map probe. */
int32_t fm__tok_lookup_near(const FmTokenizer *t, const char *s, size_t n, int32_t guess);
/* Append a merge (MERGES); merged must be the model-vocab id of
 * bytes(l)+bytes(r). Later duplicates of a pair replace earlier ones, as HF
 * tokenizers' HashMap does. */
void fm__tok_add_merge(FmTokenizer *t, int32_t l, int32_t r, int32_t merged);
/* Room for ids 0..n_ids-1, n_model more vocab entries, pool_bytes of token
 * bytes in all and n_merges more merges, so that a loader that knows its
 * sizes up front fills the tables without regrowing them (capacity only:
 * the tables' contents do not depend on it). Any count may be 0. */
void fm__tok_reserve(FmTokenizer *t, int64_t n_ids, int64_t n_model, size_t pool_bytes, int64_t n_merges);
/* Set the pre-tokenizer pattern (NULL: none). */
void fm__tok_set_pattern(FmTokenizer *t, const char *pattern);
/* The pattern with \s and \S replaced by the explicit class of flavour ws
 * (malloc'd). */
char *fm__tok_spell_ws(const char *pattern, int ws);
/* Finish: byte ids (every byte must be a token), the RANKS pair map, the
 * regex (compiled with UTF|UCP, JIT when available), added tokens, EOS and
 * hash. Errors name `src`. */
int fm__tok_finish(FmTokenizer *t, const char *src, FILE *err);

/* The GPT-2 byte-level BPE step over one pre-token (exposed for tests that
 * force the long-word path). */
int64_t fm__tok_bpe(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out);
/* Split text (no added tokens) into pre-tokens exactly as encoding does,
 * handing each to fn (training counts words with it). */
typedef void (*FmTokPieceFn)(void *ctx, const char *s, size_t n);
int fm__tok_pretokenize(const FmTokenizer *t, FmTokCache *c, const char *text, size_t n, FmTokPieceFn fn, void *ctx);
/* Pre-tokens longer than this use the heap-based merge loop (tests lower it). */
extern size_t fm__tok_small_max;

#endif
