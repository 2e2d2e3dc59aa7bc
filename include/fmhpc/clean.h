/* clean.h: task='dedup' (SFT cleaning): near-duplicate removal by MinHash
 * with LSH banding, and text-cleaning filters. The pure parts (normalise,
 * shingle, sign, band, filter) are public for tests; the task streams JSONL
 * records and writes the kept ones byte-identical. Tokenizers, packing and
 * IFD scoring live elsewhere (tokenizer.h, data.h, eval.h). Code: src/clean/.
 *
 * Definitions (docs: inputs/dedup.in):
 *   text       the deck's fields of a record (JSON strings) joined by '\n'
 *   normalise  ASCII A-Z lowercased (other code points unchanged); every run
 *              of ASCII whitespace (space \t \n \r \f \v) becomes one space;
 *              leading and trailing spaces removed
 *   shingles   the SET of character 3-grams of the normalised text, over
 *              Unicode code points; a 3-gram (c0,c1,c2) is the exact 63-bit
 *              integer c0<<42 | c1<<21 | c2 (no hashing, no collisions). A
 *              text of 1 or 2 code points has one shingle (missing code
 *              points are 0); an empty text has none
 *   MinHash    K seeded 64-bit hashes h_k(x) = mix64(x ^ s_k) (mix64 is
 *              SplitMix64's finaliser, a bijection; s_k from Philox keyed by
 *              the seed); sig[k] = min over shingles of h_k. The estimate of
 *              J(A,B) is the fraction of k with sig_A[k] == sig_B[k] (Broder
 *              1997; unbiased, variance J(1-J)/K)
 *   LSH        K = bands * rows; band key of band b = mix64 chain of b and
 *              the rows minima of that band. A pair becomes a candidate when
 *              any band key is equal: P = 1 - (1 - J^rows)^bands (S-curve) */
#ifndef FMHPC_CLEAN_H
#define FMHPC_CLEAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/core.h"
#include "fmhpc/deck.h"
#include "fmhpc/runtime.h"

enum { FM_DEDUP_MAX_PERM = 1024 };

/* Why a record was dropped; FM_DROP_KEPT for a kept one. Filters are tried
 * in this order and the first that fires is the reason. */
#define FM_DROP_TABLE(XX)                \
  XX(KEPT, "kept")                       \
  XX(TOO_SHORT, "too_short")             \
  XX(HTML, "html")                       \
  XX(URL, "url")                         \
  XX(MARKDOWN, "markdown")               \
  XX(CHAR_REPETITION, "char_repetition") \
  XX(WORD_REPETITION, "word_repetition") \
  XX(DUPLICATE, "duplicate")
typedef enum {
#define FM__XX(name, s) FM_DROP_##name,
  FM_DROP_TABLE(FM__XX)
#undef FM__XX
      FM_DROP_COUNT
} FmDropReason;
const char *fm_drop_name(FmDropReason r);

/* Hash functions of one run: K seeds from (seed). */
typedef struct FmMinHash {
  int K, bands, rows;
  uint64_t seed[FM_DEDUP_MAX_PERM];
} FmMinHash;
/* FM_EINVAL unless 1 <= K <= FM_DEDUP_MAX_PERM and bands * rows == K. */
int fm_minhash_init(FmMinHash *m, int K, int bands, int rows, uint64_t seed);

static inline uint64_t fm_mix64(uint64_t x) { /* SplitMix64 finaliser (Steele et al. 2014) */
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

/* Normalise UTF-8 text[0..n) into code points (*cp malloc'd, *ncp of them). */
void fm_dedup_normalise(const char *text, size_t n, uint32_t **cp, int64_t *ncp);
/* Sorted distinct shingles of code points cp[0..n) into *sh (malloc'd). */
int64_t fm_dedup_shingles(const uint32_t *cp, int64_t n, uint64_t **sh);
/* sig[0..K) for a shingle set (all UINT64_MAX when empty). */
void fm_minhash_sign(const FmMinHash *m, const uint64_t *sh, int64_t nsh, uint64_t *sig);
/* The whole chain from UTF-8 text. */
void fm_minhash_text(const FmMinHash *m, const char *text, size_t n, uint64_t *sig);
double fm_minhash_estimate(const FmMinHash *m, const uint64_t *a, const uint64_t *b);
/* keys[0..bands) of a signature. */
void fm_minhash_bands(const FmMinHash *m, const uint64_t *sig, uint64_t *keys);

/* Cleaning filters (thresholds from &dedup). Each rule, on the text (fields
 * joined by '\n'; lines split at '\n'):
 *   too_short        fewer than min_chars code points after normalisation
 *   html             a tag: '<' '/'? [A-Za-z][A-Za-z0-9]* then '>' or '/>',
 *                    or a blank, attributes (no '<' '>' '\n'; blank, "/" or
 *                    holding '=') and '>': "<p>", "</div>", "<br/>",
 *                    "<a href=x>" are tags; "a < b", "x<y and z>w" are not
 *   url              "http://", "https://" or "www." (ASCII case-insensitive),
 *                    "www." only at the start or after a non-alphanumeric
 *   markdown         a line whose first non-blank (at most 3 spaces of indent)
 *                    is "```" or "~~~"; a header line "#".."######" then a
 *                    space; a table rule line: only '|' '-' ':' and blanks,
 *                    with a '|' and "---"; a link "[x](y)": '[' text without
 *                    ']' '\n', "](", a target without blanks or ')', ')'
 *   char_repetition  fraction of character 10-gram positions (normalised code
 *                    points) whose 10-gram occurred earlier in the text
 *                    > max_char_repeat_ratio (texts under 10 code points: 0)
 *   word_repetition  fraction of word 3-gram positions (words: runs of
 *                    non-space in the normalised text) whose 3-gram occurred
 *                    earlier > max_word_repeat_ratio (under 3 words: 0) */
typedef struct FmCleanRules {
  int64_t min_chars;
  double max_char_repeat_ratio, max_word_repeat_ratio;
  bool drop_html, drop_urls, drop_markdown;
} FmCleanRules;
FmDropReason fm_dedup_clean(const FmCleanRules *r, const char *text, size_t n);
bool fm_dedup_has_html(const char *s, size_t n);
bool fm_dedup_has_url(const char *s, size_t n);
bool fm_dedup_has_markdown(const char *s, size_t n);
double fm_dedup_char_repeat(const uint32_t *cp, int64_t n);
double fm_dedup_word_repeat(const uint32_t *cp, int64_t n);

/* task='dedup': every rank of world; rank 0 talks to log. Returns 0 or the
 * same FM_E* on every rank. */
int fm_dedup_task(const FmDeck *deck, FmComm *world, FILE *log);

#endif
