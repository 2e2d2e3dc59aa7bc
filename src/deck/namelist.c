/* namelist.c: the Fortran-namelist grammar (see namelist.h). It knows no
 * fmhpc groups or keys and never prints: it checks the shape of the text,
 * converts literals, and hands `key = values` to the binder's visitor.
 *
 * Accepted (as WRF, Quantum ESPRESSO and CESM users write it): `&group ... /`
 * or `... &end`; separators are commas, blanks and newlines; `!` comments to
 * the end of a line; names are case-insensitive; strings in '...' or "..."
 * with a doubled quote for a quote, ending on their own line; logicals
 * .true. .false. .t. .f. T F; integers; reals with e or d exponents; arrays
 * `a = 1, 2`; elements `a(2) = 0.5`; repeats `4*0.0`. Not accepted: null
 * values (`a = 1,,2` or `4*`), `$group ... $end`, text outside a group. */
#include "namelist.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"

typedef struct Parser {
  const char *p;          /* next character */
  const char *line_start; /* for columns */
  int line;
  const FmNlVisitor *v;
  FmNlError *e;
  const char *override; /* the override text in override mode, else NULL */
  char group[FM_NL_NAME_MAX], key[FM_NL_NAME_MAX];
  bool skip;       /* the visitor rejected the current group */
  FmNlValue *vals; /* the current assignment's values */
  int nvals, cap;
  int64_t text; /* bytes of their strings */
} Parser;

static int col_of(const Parser *P) { return (int)(P->p - P->line_start) + 1; }

/* Record a grammar error at (line, col) with the current group/key as
 * context. Override errors also quote the override, since several can share
 * the name "<command line>". */
static int fail_at(Parser *P, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_at(Parser *P, int line, int col, const char *fmt, ...) {
  FmNlError *e = P->e;
  e->line = line;
  e->col = col;
  snprintf(e->group, sizeof e->group, "%s", P->group);
  snprintf(e->key, sizeof e->key, "%s", P->key);
  int n = 0;
  if (P->override) n = snprintf(e->msg, sizeof e->msg, "malformed override '%s': ", P->override);
  if (n < 0 || (size_t)n >= sizeof e->msg) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
  va_end(ap);
  /* the deck's bytes quoted in a message: a control byte (an escape sequence) must not reach the terminal, and a
   * message that is not UTF-8 (a cut character, a stray byte) shows such bytes as '?' */
  const bool utf8 = fm_utf8_check(e->msg, strlen(e->msg)) < 0;
  for (char *c = e->msg; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f || (!utf8 && (unsigned char)*c >= 0x80)) *c = '?';
  return FM_EDECK;
}

/* The character at p for a message: itself when printable ASCII, else its
 * code point (U+00A0, a no-break space pasted from a web page, looks like a
 * blank), or its byte when it is not UTF-8. */
static const char *char_desc(const char *p, char *buf, size_t n) {
  const unsigned char b = (unsigned char)*p;
  const int len = b < 0x80 ? 1 : b >= 0xF0 && b < 0xF8 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  int k = 0;
  while (k < len && p[k]) k++;
  if (b >= 0x20 && b < 0x7f) {
    snprintf(buf, n, "'%c'", b);
  } else if (len > 1 && k == len && fm_utf8_check(p, (size_t)len) < 0) {
    uint32_t cp = b & (0x7f >> len);
    for (int i = 1; i < len; i++) cp = cp << 6 | ((unsigned char)p[i] & 0x3f);
    snprintf(buf, n, "character U+%04X%s", (unsigned)cp, cp == 0xA0 ? " (a no-break space: retype it as a blank)" : "");
  } else {
    snprintf(buf, n, "byte 0x%02X", b);
  }
  return buf;
}
#define FAIL(P, ...) fail_at((P), (P)->line, col_of(P), __VA_ARGS__)

/* ---- characters ------------------------------------------------------- */
static bool is_name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }
/* What may follow a value: a blank, a separator, a comment or the end. */
static bool is_value_end(char c) { return c == '\0' || strchr(" \t\r\n\f\v,/!", c) != NULL; }

/* Blanks, newlines and comments; nothing else. */
static void skip_blank(Parser *P) {
  for (;;) {
    char c = *P->p;
    if (c == '\n') {
      P->p++;
      P->line++;
      P->line_start = P->p;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      P->p++;
    } else if (c == '!') {
      while (*P->p && *P->p != '\n') P->p++;
    } else {
      return;
    }
  }
}

/* A short quote of the text at p for messages: up to the next separator. */
static int snippet_len(const char *p) {
  int n = 0;
  while (p[n] && !strchr(" \t\r\n,/!=()'\"", p[n]) && n < 24) n++;
  return n > 0 ? n : (p[0] ? 1 : 0);
}

/* A byte of a character outside ASCII, other than a no-break space (which
 * the blank-like message names where it stands). */
static bool non_ascii(const char *p) {
  const unsigned char b = (unsigned char)p[0];
  return b >= 0x80 && !(b == 0xC2 && (unsigned char)p[1] == 0xA0);
}

/* A group or key name, lower-cased into buf. */
static int read_name(Parser *P, char *buf) {
  int n = 0;
  const char *start = P->p;
  while (is_name_char(P->p[n])) n++;
  if (non_ascii(start + n)) {
    /* a letter outside ASCII inside a name (&rérun): the whole word is quoted, not the part before it as a name */
    int m = n;
    while (m < 64 && (is_name_char(start[m]) || non_ascii(start + m))) m++;
    char what[96];
    return fail_at(P, P->line, col_of(P) + n, "name '%.*s' has %s: names are ASCII letters, digits and '_'", m, start,
                   char_desc(start + n, what, sizeof what));
  }
  if (n >= FM_NL_NAME_MAX)
    return FAIL(P, "name '%.*s...' is too long (at most %d characters)", 16, start, FM_NL_NAME_MAX - 1);
  for (int i = 0; i < n; i++) buf[i] = (char)tolower((unsigned char)start[i]);
  buf[n] = '\0';
  P->p += n;
  return 0;
}

/* ---- literals --------------------------------------------------------- */
static int lex_string(Parser *P, FmNlValue *v) {
  char q = *P->p;
  int col = col_of(P);
  FmStr s;
  fm_str_init(&s);
  const char *c = P->p + 1;
  for (;; c++) {
    if (*c == '\0' || *c == '\n') {
      fm_str_free(&s);
      return fail_at(P, P->line, col,
                     "unterminated string: no closing %c on this line (strings end on the line they start)", q);
    }
    if (*c == q) {
      if (c[1] != q) break;
      c++; /* a doubled quote is one quote */
    }
    fm_str_catn(&s, c, 1);
  }
  v->kind = FM_NL_STR;
  v->s = s.s;
  P->p = c + 1;
  return 0;
}

/* .true. .false. .t. .f. */
static int lex_logical(Parser *P, FmNlValue *v) {
  const char *c = P->p + 1;
  char word[8] = "";
  int n = 0;
  while (n < 7 && isalpha((unsigned char)c[n])) {
    word[n] = (char)tolower((unsigned char)c[n]);
    n++;
  }
  word[n] = '\0';
  bool t = !strcmp(word, "t") || !strcmp(word, "true");
  bool f = !strcmp(word, "f") || !strcmp(word, "false");
  if (c[n] != '.' || !(t || f))
    return FAIL(P, "bad logical '%.*s': expected .true., .false., T or F", snippet_len(P->p), P->p);
  v->kind = FM_NL_BOOL;
  v->b = t;
  P->p = c + n + 1;
  return 0;
}

static int count_digits(const char *c) {
  int n = 0;
  while (isdigit((unsigned char)c[n])) n++;
  return n;
}

/* [+-] digits [. digits] [(e|d) [+-] digits]: an integer when it has neither
 * a point nor an exponent. Anything glued on (1.2.3, 1e, 12abc) is an error,
 * not a shorter number followed by junk. */
static int lex_number(Parser *P, FmNlValue *v) {
  const char *s = P->p, *c = s;
  if (*c == '+' || *c == '-') c++;
  int nint = count_digits(c), nfrac = 0, nexp = -1;
  c += nint;
  bool point = *c == '.';
  if (point) {
    nfrac = count_digits(c + 1);
    c += 1 + nfrac;
  }
  if (*c == 'e' || *c == 'E' || *c == 'd' || *c == 'D') {
    const char *x = c + 1;
    if (*x == '+' || *x == '-') x++;
    nexp = count_digits(x);
    c = x + nexp;
  }
  if (nint + nfrac == 0 || nexp == 0 || is_name_char(*c) || *c == '.') {
    int n = (int)(c - s);
    while (s[n] && (is_name_char(s[n]) || s[n] == '.' || s[n] == '+' || s[n] == '-')) n++;
    return FAIL(P, "malformed number '%.*s'", n, s);
  }
  int n = (int)(c - s);
  char buf[80];
  if (n >= (int)sizeof buf) return FAIL(P, "number '%.*s...' is too long", 16, s);
  memcpy(buf, s, (size_t)n);
  buf[n] = '\0';
  errno = 0;
  if (!point && nexp < 0) {
    v->kind = FM_NL_INT;
    v->i = strtoll(buf, NULL, 10);
    if (errno == ERANGE) { /* the key's type decides: a REAL takes it, an INTEGER is refused with the limit */
      v->kind = FM_NL_REAL;
      v->big = true;
      v->r = strtod(buf, NULL);
    }
  } else {
    for (char *d = buf; *d; d++)
      if (*d == 'd' || *d == 'D') *d = 'e'; /* Fortran double-precision exponent */
    v->kind = FM_NL_REAL;
    v->r = strtod(buf, NULL);
    /* Underflow rounds (to 0 or a subnormal) like any compiler would; only an
     * overflow has no faithful value. */
    if (errno == ERANGE && (v->r > 1.0 || v->r < -1.0))
      return FAIL(P, "real number %s is out of range of a double", buf);
  }
  P->p = c;
  return 0;
}

/* An unquoted word: T and F are logicals; anything else is kept as a word so
 * the binder can tell the user to quote it. */
static void lex_word(Parser *P, FmNlValue *v) {
  int n = 0;
  while (is_name_char(P->p[n])) n++;
  if (n == 1 && (tolower((unsigned char)*P->p) == 't' || tolower((unsigned char)*P->p) == 'f')) {
    v->kind = FM_NL_BOOL;
    v->b = tolower((unsigned char)*P->p) == 't';
  } else {
    v->kind = FM_NL_WORD;
    v->s = fm_xstrndup(P->p, (size_t)n);
  }
  P->p += n;
}

static bool is_number_start(const char *c) {
  if (*c == '+' || *c == '-') c++;
  return isdigit((unsigned char)c[0]) || (c[0] == '.' && isdigit((unsigned char)c[1]));
}

/* One literal at P->p, its text and position recorded for messages. */
static int lex_value(Parser *P, FmNlValue *v) {
  memset(v, 0, sizeof *v);
  v->text = P->p;
  v->line = P->line;
  v->col = col_of(P);
  char c = *P->p;
  int rc = 0;
  if (c == '\'' || c == '"') {
    rc = lex_string(P, v);
  } else if (is_number_start(P->p)) {
    rc = lex_number(P, v);
  } else if (c == '.' && isalpha((unsigned char)P->p[1])) {
    rc = lex_logical(P, v);
  } else if (is_name_start(c)) {
    lex_word(P, v);
  } else {
    rc = FAIL(P, "expected a value, got '%.*s'", snippet_len(P->p), P->p);
  }
  v->len = (int)(P->p - v->text);
  return rc;
}

/* ---- value lists ------------------------------------------------------ */
static void free_value(FmNlValue *v) {
  if (v->kind == FM_NL_STR || v->kind == FM_NL_WORD) free((char *)v->s);
  v->s = NULL;
}

static void clear_values(Parser *P) {
  for (int i = 0; i < P->nvals; i++) free_value(&P->vals[i]);
  P->nvals = 0;
  P->text = 0;
}

/* Appends `count` copies of v; each copy owns its own string. */
static void push_value(Parser *P, const FmNlValue *v, int64_t count) {
  for (int64_t k = 0; k < count; k++) {
    if (P->nvals == P->cap) {
      P->cap = P->cap ? 2 * P->cap : 8;
      P->vals = fm_xrealloc(P->vals, (size_t)P->cap * sizeof *P->vals);
    }
    FmNlValue *d = &P->vals[P->nvals++];
    *d = *v;
    if (k > 0 && v->s) d->s = fm_xstrdup(v->s);
  }
}

/* A literal, or a repeat `r*literal` (r a positive integer, no blanks). */
static int parse_item(Parser *P) {
  FmNlValue v;
  int rc = lex_value(P, &v);
  if (rc) return rc;
  int64_t count = 1;
  if (*P->p == '*' && (v.kind == FM_NL_INT || v.kind == FM_NL_REAL)) {
    if (v.kind != FM_NL_INT || v.i <= 0)
      return fail_at(P, v.line, v.col, "bad repeat count '%.*s*': must be a positive integer", v.len, v.text);
    if (v.i > FM_NL_MAX_VALUES - P->nvals)
      return fail_at(P, v.line, v.col, "repeat count %lld is too large (at most %d values)", (long long)v.i,
                     FM_NL_MAX_VALUES);
    count = v.i;
    const char *rep = v.text;
    P->p++;
    if (is_value_end(*P->p))
      return fail_at(P, v.line, v.col,
                     "expected a value right after '%.*s' (null values are not supported; write e.g. 4*0.0)",
                     (int)(P->p - rep), rep);
    if ((rc = lex_value(P, &v))) return rc;
    v.text = rep; /* messages quote the whole repeat */
    v.len = (int)(P->p - rep);
    v.col = (int)(rep - P->line_start) + 1;
  }
  if (!is_value_end(*P->p)) {
    free_value(&v);
    char what[80];
    return FAIL(P, "unexpected %s after the value '%.*s'; separate values with commas or blanks",
                char_desc(P->p, what, sizeof what), v.len, v.text);
  }
  if (P->nvals + count > FM_NL_MAX_VALUES) {
    free_value(&v);
    return fail_at(P, v.line, v.col, "too many values (at most %d)", FM_NL_MAX_VALUES);
  }
  /* a repeat copies its string: 65536 copies of a 20 kB string took 1.3 GB and seconds before any check */
  const int64_t bytes = v.s && (v.kind == FM_NL_STR || v.kind == FM_NL_WORD) ? (int64_t)strlen(v.s) + 1 : 0;
  if (bytes * count > FM_NL_MAX_TEXT - P->text) {
    free_value(&v);
    return fail_at(P, v.line, v.col, "the values hold more than %d MiB of text (repeats expanded)",
                   FM_NL_MAX_TEXT >> 20);
  }
  P->text += bytes * count;
  push_value(P, &v, count);
  return 0;
}

/* A name followed by '=' or '(' starts the next assignment, not a value. */
static bool next_is_key(const Parser *P) {
  Parser look = *P;
  while (is_name_char(*look.p)) look.p++;
  skip_blank(&look);
  return *look.p == '=' || *look.p == '(';
}

static bool starts_value(const Parser *P) {
  char c = *P->p;
  if (is_name_start(c)) return !next_is_key(P);
  return c == '\'' || c == '"' || c == '.' || c == '+' || c == '-' || isdigit((unsigned char)c);
}

/* Values up to the next key, '/', '&' or the end. A comma separates values;
 * one after the last value is allowed, an empty value between two is not. */
static int parse_values(Parser *P, bool allow_none) {
  clear_values(P);
  bool after_comma = false;
  for (;;) {
    skip_blank(P);
    if (*P->p == ',') {
      if (P->nvals == 0 || after_comma) return FAIL(P, "empty value: null values are not supported");
      after_comma = true;
      P->p++;
      continue;
    }
    if (!starts_value(P)) break;
    int rc = parse_item(P);
    if (rc) return rc;
    after_comma = false;
  }
  if (P->nvals == 0 && !allow_none) {
    if (*P->p == '/') return FAIL(P, "expected a value after '='; quote text that holds a '/': key = '/path/to'");
    return FAIL(P, "expected a value after '='");
  }
  return 0;
}

/* ---- assignments and groups -------------------------------------------- */
/* `key = values` or `key(i) = values`. */
static int parse_assignment(Parser *P) {
  FmNlAssign a = {0};
  a.line = P->line;
  a.col = col_of(P);
  int rc = read_name(P, P->key);
  if (rc) return rc;
  skip_blank(P);
  if (*P->p == '(') {
    P->p++;
    skip_blank(P);
    FmNlValue ix = {0};
    a.index_line = P->line;
    a.index_col = col_of(P);
    if (!is_number_start(P->p))
      return FAIL(P, "bad array index '%.*s': expected an integer, as in %s(2)", snippet_len(P->p), P->p, P->key);
    if ((rc = lex_value(P, &ix))) return rc;
    if (ix.kind != FM_NL_INT)
      return fail_at(P, ix.line, ix.col, "bad array index '%.*s': expected an integer, as in %s(2)", ix.len, ix.text,
                     P->key);
    a.has_index = true;
    a.index = ix.i;
    skip_blank(P);
    if (*P->p != ')') return FAIL(P, "expected ')' after the array index of '%s' (arrays have one index)", P->key);
    P->p++;
    skip_blank(P);
  }
  if (*P->p != '=') return FAIL(P, "expected '=' after '%s', got '%.*s'", P->key, snippet_len(P->p), P->p);
  P->p++;
  if ((rc = parse_values(P, false))) return rc;
  if (!P->skip) {
    a.group = P->group;
    a.key = P->key;
    a.nvalues = P->nvals;
    a.values = P->vals;
    P->v->assign(P->v->ctx, &a);
  }
  clear_values(P);
  P->key[0] = '\0';
  return 0;
}

/* Assignments up to '/' or &end. An unterminated group is reported where it
 * opened: that is the line the user has to look at. */
static int parse_group_body(Parser *P, int gline, int gcol) {
  for (;;) {
    skip_blank(P);
    char c = *P->p;
    if (c == ',') {
      P->p++;
    } else if (c == '\0') {
      return fail_at(P, gline, gcol, "unterminated group: end of file before its closing '/'");
    } else if (c == '/') {
      P->p++;
      return 0;
    } else if (c == '&') {
      int line = P->line, col = col_of(P);
      char name[FM_NL_NAME_MAX] = "";
      P->p++;
      if (!is_name_start(*P->p)) return FAIL(P, "expected a group name or 'end' right after '&'");
      if (read_name(P, name)) return FM_EDECK;
      if (!strcmp(name, "end")) return 0;
      return fail_at(P, line, col, "unterminated group: &%s starts before this group's closing '/'", name);
    } else if (is_name_start(c)) {
      int rc = parse_assignment(P);
      if (rc) return rc;
    } else {
      return FAIL(P, "expected a key name or the closing '/', got '%.*s'", snippet_len(P->p), P->p);
    }
  }
}

static void parser_init(Parser *P, const char *text, const FmNlVisitor *v, FmNlError *e) {
  memset(P, 0, sizeof *P);
  P->p = P->line_start = text;
  P->line = 1;
  P->v = v;
  P->e = e;
  memset(e, 0, sizeof *e);
}

static void parser_free(Parser *P) {
  clear_values(P);
  free(P->vals);
}

static int parse_deck(Parser *P) {
  for (;;) {
    skip_blank(P);
    if (*P->p == '\0') return 0;
    if (*P->p != '&')
      return FAIL(P, "text outside a group: '%.*s'; a deck holds only &group ... / blocks and ! comments",
                  snippet_len(P->p), P->p);
    int line = P->line, col = col_of(P);
    P->p++;
    if (!is_name_start(*P->p)) return FAIL(P, "expected a group name right after '&'");
    int rc = read_name(P, P->group);
    if (rc) return rc;
    if (!strcmp(P->group, "end")) {
      P->group[0] = '\0';
      return fail_at(P, line, col, "&end outside a group");
    }
    P->skip = !P->v->group(P->v->ctx, P->group, line, col);
    if ((rc = parse_group_body(P, line, col))) return rc;
    P->group[0] = '\0';
  }
}

int fm__nl_parse(const char *text, const FmNlVisitor *v, FmNlError *e) {
  Parser P;
  /* Editors on some sites save UTF-8 with a byte-order mark; it is not text. */
  if (!strncmp(text, "\xEF\xBB\xBF", 3)) text += 3;
  parser_init(&P, text, v, e);
  int rc = parse_deck(&P);
  parser_free(&P);
  return rc;
}

/* "group%key=values": the group is opened as if by &group, the one
 * assignment follows, and nothing may come after it. */
static int parse_override(Parser *P) {
  skip_blank(P);
  if (!is_name_start(*P->p)) return FAIL(P, "expected group%%key=value, as in optim%%lr=3e-4");
  int line = P->line, col = col_of(P);
  int rc = read_name(P, P->group);
  if (rc) return rc;
  if (*P->p != '%') return FAIL(P, "expected '%%' after the group name '%s' (group%%key=value)", P->group);
  P->p++;
  if (!is_name_start(*P->p)) return FAIL(P, "expected a key name after '%s%%'", P->group);
  P->skip = !P->v->group(P->v->ctx, P->group, line, col);
  if ((rc = parse_assignment(P))) return rc;
  skip_blank(P);
  if (*P->p != '\0')
    return FAIL(P, "unexpected '%.*s' after the value; one override sets one key", snippet_len(P->p), P->p);
  return 0;
}

int fm__nl_parse_override(const char *text, const FmNlVisitor *v, FmNlError *e) {
  Parser P;
  parser_init(&P, text, v, e);
  P.override = text;
  int rc = parse_override(&P);
  parser_free(&P);
  return rc;
}

int fm__nl_parse_values(const char *text, FmNlValue **out, int *n, FmNlError *e) {
  static const FmNlVisitor none = {0};
  Parser P;
  parser_init(&P, text, &none, e);
  int rc = parse_values(&P, true);
  if (!rc && (skip_blank(&P), *P.p != '\0')) rc = FAIL(&P, "unexpected '%.*s' after the values", snippet_len(P.p), P.p);
  if (rc) {
    parser_free(&P);
    *out = NULL;
    *n = 0;
    return rc;
  }
  *out = P.vals;
  *n = P.nvals;
  return 0;
}

void fm__nl_values_free(FmNlValue *v, int n) {
  for (int i = 0; i < n; i++) free_value(&v[i]);
  free(v);
}
