/* minhash.c: the pure parts of task='dedup' (include/fmhpc/clean.h): text
 * normalisation, character 3-gram shingles, MinHash signatures, LSH band
 * keys, and the cleaning filters. No I/O, no MPI: dedup_task.c drives them. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/clean.h"
#include "fmhpc/rng.h"

const char *fm_drop_name(FmDropReason r) {
  static const char *names[] = {
#define FM__XX(name, s) s,
      FM_DROP_TABLE(FM__XX)
#undef FM__XX
  };
  return (unsigned)r < FM_DROP_COUNT ? names[r] : "unknown";
}

int fm_minhash_init(FmMinHash *m, int K, int bands, int rows, uint64_t seed) {
  if (K < 1 || K > FM_DEDUP_MAX_PERM || bands < 1 || rows < 1 || bands * rows != K) return FM_EINVAL;
  m->K = K;
  m->bands = bands;
  m->rows = rows;
  for (int k = 0; k < K; k++) { /* hash k's key: Philox block (seed, PREP, step 0x4D48 'MH', k) */
    FmRng4 b = fm_rng_block(seed, FM_RNG_PREP, 0x4D48u, (uint64_t)k);
    m->seed[k] = (uint64_t)b.v[0] << 32 | b.v[1];
  }
  return 0;
}

static int is_ascii_space(uint32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* One code point from valid UTF-8 (JSON strings are checked on parse); a
 * stray byte counts as itself so that nothing is lost. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
  uint32_t c = s[*i];
  int extra = (c & 0xE0u) == 0xC0u ? 1 : (c & 0xF0u) == 0xE0u ? 2 : (c & 0xF8u) == 0xF0u ? 3 : 0;
  if (*i + (size_t)extra >= n) extra = 0;
  (*i)++;
  if (extra) c &= 0x3Fu >> extra;
  for (int k = 0; k < extra; k++) c = c << 6 | (s[(*i)++] & 0x3Fu);
  return c;
}

void fm_dedup_normalise(const char *text, size_t n, uint32_t **cp, int64_t *ncp) {
  uint32_t *out = fm_xmalloc((n + 1) * sizeof *out);
  int64_t k = 0;
  int pending_space = 0;
  for (size_t i = 0; i < n;) {
    uint32_t c = utf8_next((const unsigned char *)text, n, &i);
    if (is_ascii_space(c)) {
      pending_space = k > 0;
      continue;
    }
    if (pending_space) out[k++] = ' ';
    pending_space = 0;
    out[k++] = c >= 'A' && c <= 'Z' ? c + 32 : c;
  }
  *cp = out;
  *ncp = k;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

int64_t fm_dedup_shingles(const uint32_t *cp, int64_t n, uint64_t **sh) {
  int64_t m = n == 0 ? 0 : n < 3 ? 1 : n - 2;
  uint64_t *s = fm_xmalloc((size_t)(m > 0 ? m : 1) * sizeof *s);
  for (int64_t i = 0; i < m; i++) {
    uint64_t c0 = cp[i], c1 = i + 1 < n ? cp[i + 1] : 0, c2 = i + 2 < n ? cp[i + 2] : 0;
    s[i] = c0 << 42 | c1 << 21 | c2;
  }
  qsort(s, (size_t)m, sizeof *s, cmp_u64);
  int64_t u = 0;
  for (int64_t i = 0; i < m; i++)
    if (u == 0 || s[i] != s[u - 1]) s[u++] = s[i];
  *sh = s;
  return u;
}

void fm_minhash_sign(const FmMinHash *m, const uint64_t *sh, int64_t nsh, uint64_t *sig) {
  for (int k = 0; k < m->K; k++) sig[k] = UINT64_MAX;
  for (int64_t i = 0; i < nsh; i++)
    for (int k = 0; k < m->K; k++) {
      uint64_t h = fm_mix64(sh[i] ^ m->seed[k]);
      sig[k] = h < sig[k] ? h : sig[k];
    }
}

void fm_minhash_text(const FmMinHash *m, const char *text, size_t n, uint64_t *sig) {
  uint32_t *cp;
  int64_t ncp;
  uint64_t *sh;
  fm_dedup_normalise(text, n, &cp, &ncp);
  int64_t nsh = fm_dedup_shingles(cp, ncp, &sh);
  fm_minhash_sign(m, sh, nsh, sig);
  free(sh);
  free(cp);
}

double fm_minhash_estimate(const FmMinHash *m, const uint64_t *a, const uint64_t *b) {
  int eq = 0;
  for (int k = 0; k < m->K; k++) eq += a[k] == b[k];
  return (double)eq / m->K;
}

void fm_minhash_bands(const FmMinHash *m, const uint64_t *sig, uint64_t *keys) {
  for (int b = 0; b < m->bands; b++) {
    uint64_t h = fm_mix64((uint64_t)b + 0x9E3779B97F4A7C15ull);
    for (int r = 0; r < m->rows; r++) h = fm_mix64(h ^ sig[b * m->rows + r]);
    keys[b] = h;
  }
}

/* ---- cleaning filters --------------------------------------------------- */
static int is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_alnum(unsigned char c) { return is_alpha(c) || (c >= '0' && c <= '9'); }
static int lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* A tag at s[i] == '<': '/'? name, then '>' or "/>", or blanks and attributes
 * (no '<' '>' '\n'; empty, "/" or holding '=') then '>'. "a < b" and
 * "x<y and z>w" (no '=') are not tags. */
static bool tag_at(const char *s, size_t n, size_t i) {
  size_t j = i + 1;
  if (j < n && s[j] == '/') j++;
  if (j >= n || !is_alpha((unsigned char)s[j])) return false;
  while (j < n && is_alnum((unsigned char)s[j])) j++;
  if (j < n && s[j] == '>') return true;
  if (j + 1 < n && s[j] == '/' && s[j + 1] == '>') return true;
  if (j >= n || (s[j] != ' ' && s[j] != '\t')) return false;
  bool eq = false, other = false;
  for (size_t k = j; k < n; k++) {
    char c = s[k];
    if (c == '<' || c == '\n') return false;
    if (c == '>') return eq || !other;
    if (c == '=')
      eq = true;
    else if (c != ' ' && c != '\t' && c != '/')
      other = true;
  }
  return false;
}

bool fm_dedup_has_html(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] == '<' && tag_at(s, n, i)) return true;
  return false;
}

static bool prefix_ci(const char *s, size_t n, size_t i, const char *p) {
  size_t k = 0;
  for (; p[k]; k++)
    if (i + k >= n || lower((unsigned char)s[i + k]) != p[k]) return false;
  return true;
}

bool fm_dedup_has_url(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (prefix_ci(s, n, i, "http://") || prefix_ci(s, n, i, "https://")) return true;
    if (prefix_ci(s, n, i, "www.") && (i == 0 || !is_alnum((unsigned char)s[i - 1]))) return true;
  }
  return false;
}

static bool md_line(const char *s, size_t n) {
  size_t i = 0;
  while (i < n && i < 3 && s[i] == ' ') i++;
  if (prefix_ci(s, n, i, "```") || prefix_ci(s, n, i, "~~~")) return true;
  size_t h = i;
  while (h < n && s[h] == '#') h++;
  if (h > i && h - i <= 6 && h < n && (s[h] == ' ' || s[h] == '\t')) return true;
  bool pipe = false, only = true;
  for (size_t k = 0; k < n; k++) {
    char c = s[k];
    if (c == '|')
      pipe = true;
    else if (c != '-' && c != ':' && c != ' ' && c != '\t')
      only = false;
  }
  if (pipe && only)
    for (size_t k = 0; k + 2 < n; k++)
      if (s[k] == '-' && s[k + 1] == '-' && s[k + 2] == '-') return true;
  return false;
}

/* "[x](y)" starting at s[i] == '['. */
static bool md_link_at(const char *s, size_t n, size_t i) {
  size_t j = i + 1;
  while (j < n && s[j] != ']' && s[j] != '\n' && s[j] != '[') j++;
  if (j == i + 1 || j + 1 >= n || s[j] != ']' || s[j + 1] != '(') return false;
  size_t k = j + 2;
  while (k < n && s[k] != ')' && s[k] != ' ' && s[k] != '\t' && s[k] != '\n') k++;
  return k > j + 2 && k < n && s[k] == ')';
}

bool fm_dedup_has_markdown(const char *s, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '\n') {
      if (md_line(s + start, i - start)) return true;
      start = i + 1;
    }
    if (i < n && s[i] == '[' && md_link_at(s, n, i)) return true;
  }
  return false;
}

/* Fraction of values[0..n) equal to an earlier one (an open-addressing set). */
static double dup_fraction(const uint64_t *v, int64_t n) {
  if (n <= 0) return 0.0;
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  uint64_t *tab = fm_xcalloc(cap, sizeof *tab);
  unsigned char *used = fm_xcalloc(cap, 1);
  int64_t dup = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t p = (size_t)fm_mix64(v[i]) & (cap - 1);
    while (used[p] && tab[p] != v[i]) p = (p + 1) & (cap - 1);
    if (used[p]) dup++;
    used[p] = 1;
    tab[p] = v[i];
  }
  free(tab);
  free(used);
  return (double)dup / (double)n;
}

enum { CHAR_GRAM = 10, WORD_GRAM = 3 };

double fm_dedup_char_repeat(const uint32_t *cp, int64_t n) {
  if (n < CHAR_GRAM) return 0.0;
  int64_t m = n - CHAR_GRAM + 1;
  uint64_t *h = fm_xmalloc((size_t)m * sizeof *h);
  for (int64_t i = 0; i < m; i++) {
    uint64_t x = 0;
    for (int k = 0; k < CHAR_GRAM; k++) x = fm_mix64(x ^ cp[i + k]);
    h[i] = x;
  }
  double f = dup_fraction(h, m);
  free(h);
  return f;
}

double fm_dedup_word_repeat(const uint32_t *cp, int64_t n) {
  uint64_t *w = fm_xmalloc((size_t)(n + 1) * sizeof *w);
  int64_t nw = 0;
  for (int64_t i = 0; i < n;) { /* normalised: words are separated by one space */
    if (cp[i] == ' ') {
      i++;
      continue;
    }
    uint64_t x = 0x51ED27ull;
    while (i < n && cp[i] != ' ') x = fm_mix64(x ^ cp[i++]);
    w[nw++] = x;
  }
  double f = 0.0;
  if (nw >= WORD_GRAM) {
    int64_t m = nw - WORD_GRAM + 1;
    for (int64_t i = 0; i < m; i++) w[i] = fm_mix64(fm_mix64(w[i] ^ 1) ^ w[i + 1]) ^ fm_mix64(w[i + 2] + 2);
    f = dup_fraction(w, m);
  }
  free(w);
  return f;
}

FmDropReason fm_dedup_clean(const FmCleanRules *r, const char *text, size_t n) {
  uint32_t *cp;
  int64_t ncp;
  fm_dedup_normalise(text, n, &cp, &ncp);
  FmDropReason why = FM_DROP_KEPT;
  if (ncp < r->min_chars)
    why = FM_DROP_TOO_SHORT;
  else if (r->drop_html && fm_dedup_has_html(text, n))
    why = FM_DROP_HTML;
  else if (r->drop_urls && fm_dedup_has_url(text, n))
    why = FM_DROP_URL;
  else if (r->drop_markdown && fm_dedup_has_markdown(text, n))
    why = FM_DROP_MARKDOWN;
  else if (fm_dedup_char_repeat(cp, ncp) > r->max_char_repeat_ratio)
    why = FM_DROP_CHAR_REPETITION;
  else if (fm_dedup_word_repeat(cp, ncp) > r->max_word_repeat_ratio)
    why = FM_DROP_WORD_REPETITION;
  free(cp);
  return why;
}
