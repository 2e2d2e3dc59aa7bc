/* json.c: the strict JSON reader behind json.h. Recursive descent into nodes
 * and strings carved from one arena (a 280K-merge tokenizer.json is millions
 * of nodes: one free, no per-node malloc). Two passes would avoid reallocs;
 * instead arrays and objects collect children on a scratch stack and copy
 * them into the arena once complete. */
#include "fmhpc/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"

/* FM_JSON_NO_SIMD: the 8-byte word paths on x86-64 too (to check them against the SSE2 ones) */
#if defined(__SSE2__) && !defined(FM_JSON_NO_SIMD)
#define FM_JSON_SSE2 1
#include <emmintrin.h>
#endif

/* ---- arena: a list of big blocks -------------------------------------- */
typedef struct Block {
  struct Block *next;
  size_t used, cap;
  char data[];
} Block;

static void *arena_alloc(void **arena, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Block *b = *arena;
  if (!b || b->used + n > b->cap) {
    size_t cap = n > (1u << 20) ? n : (1u << 20);
    Block *nb = fm_xmalloc(sizeof *nb + cap);
    nb->next = b;
    nb->used = 0;
    nb->cap = cap;
    *arena = b = nb;
  }
  void *p = b->data + b->used;
  b->used += n;
  return p;
}

static void arena_free(void *arena) {
  for (Block *b = arena; b;) {
    Block *n = b->next;
    free(b);
    b = n;
  }
}

/* ---- parser ------------------------------------------------------------ */
typedef struct Parser {
  const char *p, *end, *start;
  void **arena;
  int depth, max_depth;
  FmJsonError *err;
  int failed;
  /* scratch stack of children being collected */
  FmJson *stack;
  const char **kstack;
  size_t *klens;
  int64_t sp, cap;
} Parser;

static void fail(Parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(Parser *ps, const char *fmt, ...) {
  if (ps->failed) return;
  ps->failed = 1;
  if (!ps->err) return;
  int line = 1, col = 1;
  for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
    if (*q == '\n') {
      line++;
      col = 1;
    } else if (((unsigned char)*q & 0xC0) != 0x80) {
      col++; /* count characters, not UTF-8 continuation bytes */
    }
  }
  ps->err->offset = ps->p - ps->start;
  ps->err->line = line;
  ps->err->col = col;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->err->msg, sizeof ps->err->msg, fmt, ap);
  va_end(ap);
}

static void skip_ws(Parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static void push(Parser *ps, const FmJson *v, const char *key, size_t klen) {
  if (ps->sp == ps->cap) {
    ps->cap = ps->cap ? 2 * ps->cap : 256;
    ps->stack = fm_xrealloc(ps->stack, (size_t)ps->cap * sizeof *ps->stack);
    ps->kstack = fm_xrealloc(ps->kstack, (size_t)ps->cap * sizeof *ps->kstack);
    ps->klens = fm_xrealloc(ps->klens, (size_t)ps->cap * sizeof *ps->klens);
  }
  ps->stack[ps->sp] = *v;
  ps->kstack[ps->sp] = key;
  ps->klens[ps->sp] = klen;
  ps->sp++;
}

int64_t fm_utf8_check(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    uint64_t w8;
    if (i + 8 <= n && (memcpy(&w8, u + i, 8), (w8 & 0x8080808080808080ull) == 0)) { /* 8 ASCII bytes */
      i += 8;
      continue;
    }
    unsigned c = u[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return (int64_t)i;
    if (i + (size_t)len > n) return (int64_t)i;
    for (int k = 1; k < len; k++) {
      if ((u[i + k] & 0xC0) != 0x80) return (int64_t)i;
      cp = (cp << 6) | (u[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (int64_t)i;
    i += (size_t)len;
  }
  return -1;
}

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

#if !defined(FM_JSON_SSE2) /* the 8-byte word scans */
/* Bytes of x equal to b (a byte times ONES): the high bit of each such byte
 * of the result is set, and the result is 0 exactly when there is none. */
#define ONES  0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
static inline uint64_t bytes_eq(uint64_t x, uint64_t b) {
  uint64_t y = x ^ b;
  return (y - ONES) & ~y & HIGHS;
}
/* 0 exactly when no byte of x is below 0x20 (a control character). */
static inline uint64_t bytes_ctl(uint64_t x) { return (x - 0x20 * ONES) & ~x & HIGHS; }
/* 8 bytes at p with the first in memory as the lowest-order byte on any host:
 * the scans below take the lowest flag (count-trailing-zeros) for the first
 * byte, which on a big-endian host needs the swap (from review). */
static inline uint64_t load_le64(const char *p) {
  uint64_t x;
  memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  x = __builtin_bswap64(x);
#endif
  return x;
}
#endif

/* The quote that closes a string literal whose text starts at p (a
 * backslash escapes the byte after it), or end when none does. With SSE2
 * (x86-64 has it always) 16 bytes a step: the backslashes of a step are
 * walked in order (one that is itself escaped escapes nothing), and the first
 * quote not escaped closes; a backslash in the last byte escapes the next
 * step's first. Else 8 bytes at a time in a word to the next quote or
 * backslash. */
static const char *closing_quote(const char *p, const char *end) {
#if defined(FM_JSON_SSE2)
  unsigned carry = 0; /* the byte at p is escaped */
  const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\');
  for (; p + 16 <= end; p += 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    unsigned mq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vq)),
             mb = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vb)), esc = carry;
    for (unsigned m = mb; m; m &= m - 1) { /* bit i + 1 of esc: byte i + 1 is escaped by the backslash at i */
      unsigned i = (unsigned)__builtin_ctz(m);
      if (!(esc >> i & 1)) esc |= 2u << i;
    }
    unsigned q = mq & ~esc;
    if (q) return p + __builtin_ctz(q); /* the lowest bit is the first such byte */
    carry = esc >> 16 & 1;
  }
  for (; p < end; p++) {
    if (carry) {
      carry = 0;
      continue;
    }
    if (*p == '"') return p;
    carry = *p == '\\';
  }
  return end;
#else
  for (;;) {
    for (; p + 8 <= end; p += 8) {
      uint64_t x = load_le64(p), hit = bytes_eq(x, '"' * ONES) | bytes_eq(x, '\\' * ONES);
      if (hit) {
        p += __builtin_ctzll(hit) >> 3;
        break;
      }
    }
    while (p < end && *p != '"' && *p != '\\') p++;
    if (p >= end || *p == '"') return p;
    p += 2; /* a backslash and the byte it escapes */
    if (p > end) return end;
  }
#endif
}

/* The run of plain bytes at q (up to end: no backslash, no control byte)
 * copied to o; returns its length and ORs its bytes into *high (bit 7: not
 * ASCII). With SSE2 it stores 16 bytes at a time before it knows where the run
 * ends, so o must have room for 16 bytes wherever q + 16 <= end: parse_string's
 * output never runs ahead of its input, and its buffer is the literal's size. */
static size_t copy_run(char *o, const char *q, const char *end, unsigned *high) {
  const char *s = q;
  unsigned h = 0;
#if defined(FM_JSON_SSE2)
  const __m128i vb = _mm_set1_epi8('\\'), v1f = _mm_set1_epi8(0x1F);
  for (; q + 16 <= end; q += 16, o += 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
    _mm_storeu_si128((__m128i *)(void *)o, x);
    __m128i ctl = _mm_cmpeq_epi8(_mm_max_epu8(x, v1f), v1f); /* bytes <= 0x1F */
    unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, vb), ctl));
    unsigned top = (unsigned)_mm_movemask_epi8(x); /* bit 7 of each byte */
    if (m) {
      unsigned k = (unsigned)__builtin_ctz(m);
      *high |= h | ((top & ((1u << k) - 1)) ? 0x80u : 0);
      return (size_t)(q - s) + k;
    }
    h |= top ? 0x80u : 0;
  }
#else
  for (; q + 8 <= end; q += 8) {
    uint64_t x = load_le64(q), hit = bytes_eq(x, '\\' * ONES) | bytes_ctl(x);
    if (hit) { /* the run ends at the first flagged byte, inside this word */
      int k = __builtin_ctzll(hit) >> 3;
      h |= (x & ((1ull << (8 * k)) - 1) & HIGHS) ? 0x80u : 0;
      q += k;
      memcpy(o, s, (size_t)(q - s));
      *high |= h;
      return (size_t)(q - s);
    }
    h |= (x & HIGHS) ? 0x80u : 0;
  }
  memcpy(o, s, (size_t)(q - s));
  o += q - s;
#endif
  while (q < end && *q != '\\' && (unsigned char)*q >= 0x20) {
    h |= (unsigned char)*q & 0x80u;
    *o++ = *q++;
  }
  *high |= h;
  return (size_t)(q - s);
}

/* A string literal at ps->p (the opening quote). Decoded UTF-8 never grows
 * past the literal's own length, so one allocation of that size suffices.
 * The scans skip 16 (SSE2) or 8 bytes at a time where none is a quote, a
 * backslash or a control character (what the byte loops after them stop at). */
static int parse_string(Parser *ps, const char **out, size_t *outlen) {
  const char *q = ps->p + 1;
  const char *close = closing_quote(q, ps->end);
  if (close >= ps->end) {
    fail(ps, "unterminated string");
    return -1;
  }
  char *o = arena_alloc(ps->arena, (size_t)(close - q) + 1);
  size_t n = 0;
  while (q < close) {
    unsigned char c = (unsigned char)*q;
    if (c < 0x20) {
      ps->p = q;
      fail(ps, "control character 0x%02x in string (must be escaped)", c);
      return -1;
    }
    if (c != '\\') {
      const char *run = q;
      unsigned high = 0;
      size_t k = copy_run(o + n, q, close, &high);
      int64_t bad = high & 0x80u ? fm_utf8_check(run, k) : -1; /* ASCII is valid UTF-8 */
      if (bad >= 0) {
        ps->p = run + bad;
        fail(ps, "invalid UTF-8 in string");
        return -1;
      }
      q += k;
      n += k;
      continue;
    }
    char e = q[1];
    q += 2;
    switch (e) {
      case '"': o[n++] = '"'; break;
      case '\\': o[n++] = '\\'; break;
      case '/': o[n++] = '/'; break;
      case 'b': o[n++] = '\b'; break;
      case 'f': o[n++] = '\f'; break;
      case 'n': o[n++] = '\n'; break;
      case 'r': o[n++] = '\r'; break;
      case 't': o[n++] = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (q + 4 > close || hex4(q, &cp)) {
          ps->p = q - 2;
          fail(ps, "bad \\u escape (needs 4 hex digits)");
          return -1;
        }
        q += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* high surrogate: a low one must follow */
          if (q + 6 > close || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
            ps->p = q - 6;
            fail(ps, "lone high surrogate \\u%04X", cp);
            return -1;
          }
          q += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          ps->p = q - 6;
          fail(ps, "lone low surrogate \\u%04X", cp);
          return -1;
        }
        n += put_utf8(o + n, cp);
        break;
      }
      default:
        ps->p = q - 2;
        fail(ps, "bad escape '\\%c'", e);
        return -1;
    }
  }
  o[n] = '\0';
  *out = o;
  *outlen = n;
  ps->p = close + 1;
  return 0;
}

static int parse_number(Parser *ps, FmJson *v) {
  const char *q = ps->p, *s = q;
  if (q < ps->end && *q == '-') q++;
  if (q >= ps->end || *q < '0' || *q > '9') {
    fail(ps, "bad number");
    return -1;
  }
  if (*q == '0' && q + 1 < ps->end && q[1] >= '0' && q[1] <= '9') {
    fail(ps, "leading zero in number");
    return -1;
  }
  while (q < ps->end && *q >= '0' && *q <= '9') q++;
  int integral = 1;
  if (q < ps->end && *q == '.') {
    integral = 0;
    q++;
    if (q >= ps->end || *q < '0' || *q > '9') {
      ps->p = q;
      fail(ps, "digit expected after '.'");
      return -1;
    }
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    integral = 0;
    q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    if (q >= ps->end || *q < '0' || *q > '9') {
      ps->p = q;
      fail(ps, "digit expected in exponent");
      return -1;
    }
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  size_t n = (size_t)(q - s);
  if (integral && n <= 18) {
    /* At most 18 digits: exact in int64 (strtoll's value, no overflow), and
     * (double) rounds that integer to nearest as strtod rounds its decimal:
     * the same fields without the two library calls (ids in tokenizer
     * files are millions of such numbers). "-0" stays a negative zero. */
    bool neg = *s == '-';
    long long ll = 0;
    for (const char *d = s + neg; d < q; d++) ll = ll * 10 + (*d - '0');
    v->type = FM_JSON_NUM;
    v->i = neg ? -ll : ll;
    v->num = neg && ll == 0 ? -0.0 : (double)v->i;
    v->is_int = true;
    ps->p = q;
    return 0;
  }
  char buf[64];
  char *tmp = n < sizeof buf ? buf : fm_xmalloc(n + 1);
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  v->type = FM_JSON_NUM;
  v->num = strtod(tmp, NULL);
  if (integral) {
    errno = 0;
    long long ll = strtoll(tmp, NULL, 10);
    v->is_int = errno == 0;
    v->i = ll;
  }
  if (tmp != buf) free(tmp);
  ps->p = q;
  return 0;
}

static int parse_value(Parser *ps, FmJson *v);

static int parse_container(Parser *ps, FmJson *v, int is_obj) {
  if (++ps->depth > ps->max_depth) {
    fail(ps, "nesting deeper than %d", ps->max_depth);
    return -1;
  }
  char close = is_obj ? '}' : ']';
  ps->p++;
  int64_t base = ps->sp;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
  } else {
    for (;;) {
      const char *key = NULL;
      size_t klen = 0;
      skip_ws(ps);
      if (is_obj) {
        if (ps->p >= ps->end || *ps->p != '"') {
          fail(ps, "object key (a string) expected");
          return -1;
        }
        if (parse_string(ps, &key, &klen)) return -1;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
          fail(ps, "':' expected after object key");
          return -1;
        }
        ps->p++;
      }
      FmJson item;
      if (parse_value(ps, &item)) return -1;
      push(ps, &item, key, klen);
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == close) {
          fail(ps, "trailing comma");
          return -1;
        }
        continue;
      }
      if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        break;
      }
      fail(ps, "',' or '%c' expected", close);
      return -1;
    }
  }
  int64_t n = ps->sp - base;
  memset(v, 0, sizeof *v);
  v->type = is_obj ? FM_JSON_OBJ : FM_JSON_ARR;
  v->n = n;
  if (n > 0) { /* an empty container has no items (and the stack may be NULL) */
    v->items = arena_alloc(ps->arena, (size_t)n * sizeof *v->items);
    memcpy(v->items, ps->stack + base, (size_t)n * sizeof *v->items);
    if (is_obj) {
      v->keys = arena_alloc(ps->arena, (size_t)n * sizeof *v->keys);
      v->keylens = arena_alloc(ps->arena, (size_t)n * sizeof *v->keylens);
      memcpy(v->keys, ps->kstack + base, (size_t)n * sizeof *v->keys);
      memcpy(v->keylens, ps->klens + base, (size_t)n * sizeof *v->keylens);
    }
  }
  ps->sp = base;
  ps->depth--;
  return 0;
}

static int literal(Parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, word, n) == 0) {
    ps->p += n;
    return 0;
  }
  fail(ps, "unexpected character '%c'", *ps->p);
  return -1;
}

static int parse_value(Parser *ps, FmJson *v) {
  memset(v, 0, sizeof *v);
  skip_ws(ps);
  if (ps->p >= ps->end) {
    fail(ps, "value expected, found end of input");
    return -1;
  }
  switch (*ps->p) {
    case '{': return parse_container(ps, v, 1);
    case '[': return parse_container(ps, v, 0);
    case '"':
      v->type = FM_JSON_STR;
      return parse_string(ps, &v->s, &v->len);
    case 't':
      v->type = FM_JSON_BOOL;
      v->b = true;
      return literal(ps, "true");
    case 'f':
      v->type = FM_JSON_BOOL;
      return literal(ps, "false");
    case 'n':
      v->type = FM_JSON_NULL;
      return literal(ps, "null");
    default: return parse_number(ps, v);
  }
}

int fm_json_parse(FmJsonDoc *doc, const char *text, size_t len, int max_depth, FmJsonError *err) {
  memset(doc, 0, sizeof *doc);
  Parser ps = {.p = text, .end = text + len, .start = text, .arena = &doc->arena,
               .max_depth = max_depth > 0 ? max_depth : 256, .err = err};
  int rc = parse_value(&ps, &doc->root);
  if (rc == 0) {
    skip_ws(&ps);
    if (ps.p != ps.end) {
      fail(&ps, "unexpected text after the JSON value");
      rc = -1;
    }
  }
  free(ps.stack);
  free(ps.kstack);
  free(ps.klens);
  if (rc) {
    fm_json_free(doc);
    return FM_EFORMAT;
  }
  return 0;
}

void fm_json_free(FmJsonDoc *doc) {
  arena_free(doc->arena);
  memset(doc, 0, sizeof *doc);
}

const FmJson *fm_json_get(const FmJson *obj, const char *key) {
  if (!obj || obj->type != FM_JSON_OBJ) return NULL;
  size_t n = strlen(key);
  for (int64_t i = 0; i < obj->n; i++)
    if (obj->keylens[i] == n && memcmp(obj->keys[i], key, n) == 0) return &obj->items[i];
  return NULL;
}

const char *fm_json_type_name(FmJsonType t) {
  static const char *const names[] = {"null", "boolean", "number", "string", "array", "object"};
  return (unsigned)t < 6 ? names[t] : "?";
}

void fm_json_write_str(FILE *out, const char *s, size_t n) {
  fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\r': fputs("\\r", out); break;
      case '\t': fputs("\\t", out); break;
      case '\b': fputs("\\b", out); break;
      case '\f': fputs("\\f", out); break;
      default:
        if (c < 0x20) {
          fprintf(out, "\\u%04x", c);
        } else if (c < 0x80) {
          fputc(c, out);
        } else { /* JSON text is UTF-8: a byte that starts no whole character (a token that ends inside one, as
                  * generation's can) is U+FFFD, as Python's decode(errors='replace') and HF tokenizers give */
          const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
          if (len > 1 && i + len <= n && fm_utf8_check(s + i, len) < 0) {
            fwrite(s + i, 1, len, out);
            i += len - 1;
          } else {
            fputs("\\ufffd", out);
          }
        }
    }
  }
  fputc('"', out);
}
