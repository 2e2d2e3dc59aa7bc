/* deck.c: the key registry and binding. keys.def is expanded here into one
 * table (name, type, default, range, help, and where the value lives in
 * FmConfig); everything else walks that table: defaults (parsed by the deck
 * grammar itself), binding of parsed assignments with type and range checks,
 * error messages with hints, the resolved-deck writer, --help-deck and the
 * deck-level cross-key rules. The grammar lives in namelist.c; rules that
 * belong to a model, optimizer or data store live in those modules and report
 * through fm_deck_error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/deck.h"
#include "fmhpc/json.h"
#include "namelist.h"

/* ---- the registry ------------------------------------------------------ */
typedef struct KeyEntry {
  FmKeyInfo info;
  size_t off;      /* offset in FmConfig of the value (an array's first element) */
  ptrdiff_t off_n; /* offset of name_n for an array key, -1 for a scalar */
} KeyEntry;

typedef struct GroupEntry {
  const char *name, *help;
} GroupEntry;

/* The choice lists of the registries, "a|b|c" from their .def lines (each
 * entry adds "|name"; the list starts after the first bar). */
static const char choices_tasks[] = ""
#define FM_TASK(n, fn, help) "|" #n
#include "fmhpc/tasks.def"
#undef FM_TASK
    ;
static const char choices_models[] = ""
#define FM_MODEL(n) "|" #n
#include "fmhpc/models.def"
#undef FM_MODEL
    ;
static const char choices_optimizers[] = ""
#define FM_OPTIM(n) "|" #n
#include "fmhpc/optimizers.def"
#undef FM_OPTIM
    ;
static const char choices_schedules[] = ""
#define FM_SCHED(n) "|" #n
#include "fmhpc/schedules.def"
#undef FM_SCHED
    ;
#define FM_CHOICES_TASKS      (choices_tasks + 1)
#define FM_CHOICES_MODELS     (choices_models + 1)
#define FM_CHOICES_OPTIMIZERS (choices_optimizers + 1)
#define FM_CHOICES_SCHEDULES  (choices_schedules + 1)

/* The repeated-key check keeps one bit per array element. */
#define FM_GROUP(g, help)
#define FM_KEY(g, name, type, def, range, help)
#define FM_KEYA(g, name, type, nmax, def, range, help) \
  _Static_assert((nmax) >= 1 && (nmax) <= 64, #g "%" #name ": nmax must be in 1..64");
#define FM_END(g)
#include "keys.def"
#undef FM_KEYA
#undef FM_KEY
#undef FM_GROUP

#define FM_GROUP(g, help)
#define FM_KEY(g, name, type, def, range, help) \
  {{#g, #name, FM_TYPE_##type, 1, def, range, help}, offsetof(FmConfig, g.name), -1},
#define FM_KEYA(g, name, type, nmax, def, range, help) \
  {{#g, #name, FM_TYPE_##type, nmax, def, range, help}, offsetof(FmConfig, g.name), offsetof(FmConfig, g.name##_n)},
static const KeyEntry keys[FM_NKEYS] = {
#include "keys.def"
};
#undef FM_KEYA
#undef FM_KEY
#undef FM_GROUP

#define FM_GROUP(g, help) {#g, help},
#define FM_KEY(g, name, type, def, range, help)
#define FM_KEYA(g, name, type, nmax, def, range, help)
static const GroupEntry groups[] = {
#include "keys.def"
};
#undef FM_KEYA
#undef FM_KEY
#undef FM_GROUP
#undef FM_END
enum { NGROUPS = (int)(sizeof groups / sizeof groups[0]) };

const FmKeyInfo *fm_deck_key_info(int key_id) { return key_id >= 0 && key_id < FM_NKEYS ? &keys[key_id].info : NULL; }

int fm_deck_find_key(const char *group, const char *name) {
  for (int k = 0; k < FM_NKEYS; k++)
    if (!fm_strcasecmp(keys[k].info.group, group) && !fm_strcasecmp(keys[k].info.name, name)) return k;
  return -1;
}

int fm_deck_ngroups(void) { return NGROUPS; }
const char *fm_deck_group_name(int i) { return i >= 0 && i < NGROUPS ? groups[i].name : NULL; }

static int find_group(const char *name) {
  for (int g = 0; g < NGROUPS; g++)
    if (!fm_strcasecmp(groups[g].name, name)) return g;
  return -1;
}

/* ---- typed access to FmConfig ------------------------------------------ */
static size_t type_size(FmKeyType t) {
  switch (t) {
    case FM_TYPE_INT:
      return sizeof(fm_deck_INT);
    case FM_TYPE_REAL:
      return sizeof(fm_deck_REAL);
    case FM_TYPE_BOOL:
      return sizeof(fm_deck_BOOL);
    case FM_TYPE_STR:
      return sizeof(fm_deck_STR);
  }
  return 0;
}

static void *elem_ptr(const FmConfig *c, int k, int i) {
  return (char *)c + keys[k].off + (size_t)i * type_size(keys[k].info.type);
}

static int *count_ptr(const FmConfig *c, int k) {
  return keys[k].off_n < 0 ? NULL : (int *)((char *)c + keys[k].off_n);
}

/* Values a key holds: 1 for a scalar, name_n for an array. */
static int key_count(const FmConfig *c, int k) {
  const int *n = count_ptr(c, k);
  return n ? *n : 1;
}

/* One converted value, before it is stored. A string points at the parsed
 * text, or at the canonical spelling of a choice in the registry. */
typedef struct Scalar {
  int64_t i;
  double r;
  bool b;
  const char *s;
  size_t slen;
} Scalar;

/* The index of s in the choice list "a|b|c" (case-insensitive), or -1. */
static int choice_index(const char *choices, const char *s) {
  int idx = 0;
  for (const char *p = choices; *p; idx++) {
    size_t len = strcspn(p, "|");
    char choice[FM_NL_NAME_MAX];
    snprintf(choice, sizeof choice, "%.*s", (int)len, p);
    if (fm_strcasecmp(choice, s) == 0) return idx;
    p += len + (p[len] == '|');
  }
  return -1;
}

static void store(FmConfig *c, int k, int i, const Scalar *v) {
  void *p = elem_ptr(c, k, i);
  switch (keys[k].info.type) {
    case FM_TYPE_INT:
      *(fm_deck_INT *)p = v->i;
      break;
    case FM_TYPE_REAL:
      *(fm_deck_REAL *)p = v->r;
      break;
    case FM_TYPE_BOOL:
      *(fm_deck_BOOL *)p = v->b;
      break;
    case FM_TYPE_STR:
      free(*(fm_deck_STR *)p);
      *(fm_deck_STR *)p = fm_xstrndup(v->s, v->slen);
      if (keys[k].info.nmax == 1 && keys[k].info.range[0])
        c->choice[k] = choice_index(keys[k].info.range, *(fm_deck_STR *)p);
      break;
  }
}

/* Store n values from element `first`. A whole-array assignment (no index)
 * replaces the array: its count becomes n and the elements after it are
 * cleared; an indexed one extends the count only as far as it reaches. */
static void commit(FmConfig *c, int k, int first, int n, const Scalar *v, bool indexed) {
  for (int i = 0; i < n; i++) store(c, k, first + i, &v[i]);
  int *cnt = count_ptr(c, k);
  if (!cnt) return;
  if (indexed) {
    if (first + n > *cnt) *cnt = first + n;
    return;
  }
  static const Scalar zero = {0, 0.0, false, "", 0};
  for (int i = n; i < keys[k].info.nmax; i++) store(c, k, i, &zero);
  *cnt = n;
}

/* ---- value text (for the written deck and messages) -------------------- */
/* Shortest %g that reads back to the same bits, tidied for people: whole
 * numbers as 10000.0 rather than 1e+04, exponents as 1e-5 rather than 1e-05,
 * and always a point or an exponent so the value reads as a real. */
static void fmt_real(FmStr *b, double x) {
  char buf[48];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  if (strchr(buf, 'e') && x == floor(x) && fabs(x) < 1e15) snprintf(buf, sizeof buf, "%.1f", x);
  char *e = strchr(buf, 'e');
  if (e) { /* e+04 -> e4, e-05 -> e-5 */
    char *d = e + 1, *s = e + 1;
    if (*s == '+')
      s++;
    else if (*s == '-')
      *d++ = *s++;
    while (*s == '0' && s[1]) s++;
    memmove(d, s, strlen(s) + 1);
  }
  fm_str_cat(b, buf);
  if (isfinite(x) && !strpbrk(buf, ".e")) fm_str_cat(b, ".0");
}

/* 'it''s': a quote inside is doubled, as the grammar reads it back. */
static void fmt_string(FmStr *b, const char *s) {
  fm_str_cat(b, "'");
  for (; *s; s++) {
    if (*s == '\'')
      fm_str_cat(b, "''");
    else
      fm_str_catn(b, s, 1);
  }
  fm_str_cat(b, "'");
}

static void fmt_elem(FmStr *b, const FmConfig *c, int k, int i) {
  const void *p = elem_ptr(c, k, i);
  switch (keys[k].info.type) {
    case FM_TYPE_INT:
      fm_str_printf(b, "%lld", (long long)*(const fm_deck_INT *)p);
      break;
    case FM_TYPE_REAL:
      fmt_real(b, *(const fm_deck_REAL *)p);
      break;
    case FM_TYPE_BOOL:
      fm_str_cat(b, *(const fm_deck_BOOL *)p ? ".true." : ".false.");
      break;
    case FM_TYPE_STR:
      fmt_string(b, *(fm_deck_STR const *)p);
      break;
  }
}

/* "0.9, 0.95"; empty for an array with no values. */
static void fmt_values(FmStr *b, const FmConfig *c, int k) {
  int n = key_count(c, k);
  for (int i = 0; i < n; i++) {
    if (i) fm_str_cat(b, ", ");
    fmt_elem(b, c, k, i);
  }
}

/* ---- messages ----------------------------------------------------------- */
/* "file:line:col: " or, for a registry default, "(default): ". */
static void put_where(FILE *err, const char *file, int line, int col) {
  if (file)
    fprintf(err, "%s:%d:%d: ", file, line, col);
  else
    fputs("(default): ", err);
}

/* The closest of several names, for "did you mean". Only close matches are
 * offered: a wild guess is worse than none. */
typedef struct Closest {
  const char *word;
  char best[FM_NL_NAME_MAX];
  int dist;
} Closest;

static void closest_offer(Closest *c, const char *cand, size_t len) {
  char buf[FM_NL_NAME_MAX];
  if (len >= sizeof buf) return;
  memcpy(buf, cand, len);
  buf[len] = '\0';
  int d = fm_edit_distance(c->word, buf);
  if (d < c->dist) {
    c->dist = d;
    memcpy(c->best, buf, len + 1);
  }
}

static bool closest_found(const Closest *c) {
  size_t n = strlen(c->word);
  int limit = n <= 3 ? 1 : n <= 8 ? 2 : 3;
  return c->dist > 0 && c->dist <= limit;
}

typedef struct Binder {
  FmDeck *d;
  FILE *err;
  const char *file; /* interned source name; NULL while binding defaults */
  bool is_override;
  int nerrors;
  int group_line, group_col; /* the current group's '&' (or override start) */
  uint64_t seen[FM_NKEYS];   /* elements set by this source */
  int seen_line[FM_NKEYS];
} Binder;

/* "file:line:col: &group key = value: message" and an optional hint line.
 * group, key and value may be NULL. */
static void report(Binder *B, int line, int col, const char *group, const char *key, const char *value,
                   const char *hint, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void report(Binder *B, int line, int col, const char *group, const char *key, const char *value,
                   const char *hint, const char *fmt, ...) {
  B->nerrors++;
  if (!B->err) return;
  put_where(B->err, B->file, line, col);
  if (group)
    fprintf(B->err, "&%s%s%s%s%s: ", group, key ? " " : "", key ? key : "", value ? " = " : "", value ? value : "");
  va_list ap;
  va_start(ap, fmt);
  fm_vsay(B->err, hint && *hint ? hint : NULL, fmt, ap);
  va_end(ap);
}

static void report_unknown_group(Binder *B, const char *group, const char *key) {
  Closest c = {group, "", 1000};
  FmStr all;
  fm_str_init(&all);
  for (int g = 0; g < NGROUPS; g++) {
    closest_offer(&c, groups[g].name, strlen(groups[g].name));
    fm_str_printf(&all, "%s&%s", g ? ", " : "", groups[g].name);
  }
  char hint[96] = "";
  if (closest_found(&c)) snprintf(hint, sizeof hint, "did you mean '&%s'?", c.best);
  report(B, B->group_line, B->group_col, group, key, NULL, hint, "unknown group; expected one of %s", all.s);
  fm_str_free(&all);
}

/* The hint for an unknown key: the group it belongs to when it is in
 * another one, else the closest key of this group, else none. */
static void report_unknown_key(Binder *B, const FmNlAssign *a) {
  Closest c = {a->key, "", 1000};
  const char *elsewhere = NULL;
  for (int k = 0; k < FM_NKEYS; k++) {
    if (!fm_strcasecmp(keys[k].info.group, a->group))
      closest_offer(&c, keys[k].info.name, strlen(keys[k].info.name));
    else if (!elsewhere && !fm_strcasecmp(keys[k].info.name, a->key))
      elsewhere = keys[k].info.group;
  }
  char hint[160] = "";
  if (closest_found(&c))
    snprintf(hint, sizeof hint, "did you mean '%s'?", c.best);
  else if (elsewhere)
    snprintf(hint, sizeof hint, "'%s' is a key of &%s, not of &%s", a->key, elsewhere, a->group);
  report(B, a->line, a->col, a->group, a->key, NULL, hint,
         "unknown key; expected a key of &%s (fmhpc --help-deck lists them)", a->group);
}

/* ---- type and range checks ---------------------------------------------- */
static const char *kind_name(FmNlKind k) {
  switch (k) {
    case FM_NL_INT:
      return "an integer";
    case FM_NL_REAL:
      return "a real number";
    case FM_NL_BOOL:
      return "a logical";
    case FM_NL_STR:
      return "a string";
    case FM_NL_WORD:
      return "an unquoted word";
  }
  return "?";
}

static const char *type_expect(FmKeyType t) {
  switch (t) {
    case FM_TYPE_INT:
      return "an integer";
    case FM_TYPE_REAL:
      return "a real number";
    case FM_TYPE_BOOL:
      return "a logical (.true., .false., T or F)";
    case FM_TYPE_STR:
      return "a quoted string";
  }
  return "?";
}

/* The value as written, NUL-terminated, for messages; control characters
 * shown as '?' (a message must not replay an escape sequence to the
 * terminal). */
static void value_text(char *buf, size_t n, const FmNlValue *v) {
  snprintf(buf, n, "%.*s", v->len, v->text);
  const bool utf8 = fm_utf8_check(buf, strlen(buf)) < 0; /* a cut at n may split a character: then '?' for all */
  for (char *c = buf; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f || (!utf8 && (unsigned char)*c >= 0x80)) *c = '?';
}

/* The first control character of a string (a tab is text), or -1. Every
 * string of a deck is a name, a path, a pattern or text that ends up in a log
 * line, a file name or an HDF5 attribute; none takes an escape sequence. */
static int control_at(const char *s) {
  for (int i = 0; s && s[i]; i++)
    if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f) return i;
  return -1;
}

/* Literal kind -> key type: INT takes integers only (7.5 is not a layer
 * count), REAL takes integers and reals, BOOL logicals, STR quoted strings. */
static bool convert(FmKeyType t, const FmNlValue *v, Scalar *out, char *hint, size_t hn) {
  memset(out, 0, sizeof *out);
  switch (t) {
    case FM_TYPE_INT:
      out->i = v->i;
      if (v->kind == FM_NL_REAL && v->r == floor(v->r) && fabs(v->r) < 9e15)
        snprintf(hint, hn, "write it as an integer: %.0f", v->r);
      return v->kind == FM_NL_INT;
    case FM_TYPE_REAL:
      out->r = v->kind == FM_NL_INT ? (double)v->i : v->r;
      return v->kind == FM_NL_INT || v->kind == FM_NL_REAL;
    case FM_TYPE_BOOL:
      out->b = v->b;
      return v->kind == FM_NL_BOOL;
    case FM_TYPE_STR:
      out->s = v->s;
      out->slen = v->s ? strlen(v->s) : 0;
      if (v->kind != FM_NL_STR) snprintf(hint, hn, "quote it: '%.*s'", v->len, v->text);
      return v->kind == FM_NL_STR;
  }
  return false;
}

/* "[1,inf)", "(0,1]": bounds as numbers and as written. */
typedef struct Interval {
  double lo, hi;
  bool lo_open, hi_open;
  char lo_text[32], hi_text[32];
} Interval;

static bool parse_interval(const char *r, Interval *iv) {
  const char *comma = strchr(r, ',');
  size_t len = strlen(r);
  if (len < 5 || !comma || !strchr("[(", r[0]) || !strchr("])", r[len - 1])) return false;
  iv->lo_open = r[0] == '(';
  iv->hi_open = r[len - 1] == ')';
  snprintf(iv->lo_text, sizeof iv->lo_text, "%.*s", (int)(comma - r - 1), r + 1);
  snprintf(iv->hi_text, sizeof iv->hi_text, "%.*s", (int)(r + len - 1 - comma - 1), comma + 1);
  char *end;
  iv->lo = strtod(iv->lo_text, &end);
  if (*end) return false;
  iv->hi = strtod(iv->hi_text, &end);
  return *end == '\0';
}

/* "must be >= 1", "must be > 0", "must be in [0,1)". */
static void describe_interval(char *buf, size_t n, const Interval *iv, const char *range) {
  if (isinf(iv->hi) && isinf(iv->lo))
    snprintf(buf, n, "any value");
  else if (isinf(iv->hi))
    snprintf(buf, n, "must be %s %s", iv->lo_open ? ">" : ">=", iv->lo_text);
  else if (isinf(iv->lo))
    snprintf(buf, n, "must be %s %s", iv->hi_open ? "<" : "<=", iv->hi_text);
  else
    snprintf(buf, n, "must be in %s", range);
}

static bool in_interval(const Interval *iv, double x) {
  bool lo_ok = iv->lo_open ? x > iv->lo : x >= iv->lo;
  bool hi_ok = iv->hi_open ? x < iv->hi : x <= iv->hi;
  return lo_ok && hi_ok;
}

/* A string against "a|b|c": on a match, v points at the registry's
 * spelling; else the closest choice goes into hint. */
static bool in_choices(const char *choices, Scalar *v, char *hint, size_t hn) {
  Closest c = {v->s, "", 1000};
  for (const char *p = choices; *p;) {
    size_t len = strcspn(p, "|");
    char choice[FM_NL_NAME_MAX];
    snprintf(choice, sizeof choice, "%.*s", (int)len, p);
    if (len == v->slen && !fm_strcasecmp(choice, v->s)) {
      v->s = p; /* slen is already len */
      return true;
    }
    closest_offer(&c, p, len);
    p += len + (p[len] == '|');
  }
  if (closest_found(&c)) snprintf(hint, hn, "did you mean '%s'?", c.best);
  return false;
}

/* Range of one converted value; on failure `why` says what was expected. */
static bool check_range(const FmKeyInfo *ki, Scalar *v, char *why, size_t wn, char *hint, size_t hn) {
  if (!ki->range[0] || ki->type == FM_TYPE_BOOL) return true;
  if (ki->type == FM_TYPE_STR) {
    if (in_choices(ki->range, v, hint, hn)) return true;
    snprintf(why, wn, "not a valid choice; expected one of %s", ki->range);
    return false;
  }
  Interval iv;
  if (!parse_interval(ki->range, &iv))
    fm_abort_one(1, "keys.def: &%s %s: bad range '%s'", ki->group, ki->name, ki->range);
  double x = ki->type == FM_TYPE_INT ? (double)v->i : v->r;
  if (in_interval(&iv, x)) return true;
  char rule[96];
  describe_interval(rule, sizeof rule, &iv, ki->range);
  snprintf(why, wn, "out of range: %s", rule);
  return false;
}

/* ---- binding ------------------------------------------------------------ */
/* Element position and count of an assignment against the key's shape. */
static bool check_shape(Binder *B, int k, const FmNlAssign *a, int *first) {
  const FmKeyInfo *ki = &keys[k].info;
  *first = 0;
  if (a->has_index) {
    if (ki->nmax == 1) {
      report(B, a->index_line, a->index_col, a->group, a->key, NULL, NULL,
             "bad array index: %s is a scalar, not an array; write %s = value", a->key, a->key);
      return false;
    }
    int n = key_count(&B->d->c, k);
    if (a->index < 1 || a->index > ki->nmax) {
      report(B, a->index_line, a->index_col, a->group, a->key, NULL, NULL,
             "bad array index %lld: %s has elements 1..%d", (long long)a->index, a->key, ki->nmax);
      return false;
    }
    if (a->index > n + 1) {
      report(B, a->index_line, a->index_col, a->group, a->key, NULL, NULL,
             "bad array index %lld: %s holds %d value(s), so the next element is %d (arrays have no gaps)",
             (long long)a->index, a->key, n, n + 1);
      return false;
    }
    *first = (int)a->index - 1;
  }
  if (*first + a->nvalues <= ki->nmax) return true;
  const FmNlValue *extra = &a->values[ki->nmax - *first];
  if (ki->nmax == 1)
    report(B, extra->line, extra->col, a->group, a->key, NULL, NULL, "takes one value, got %d", a->nvalues);
  else
    report(B, extra->line, extra->col, a->group, a->key, NULL, NULL,
           "too many values: %s holds at most %d, got %d from element %d", a->key, ki->nmax, a->nvalues, *first + 1);
  return false;
}

/* Convert and range-check every value; report the first bad one. */
static bool convert_all(Binder *B, int k, const FmNlAssign *a, int first, Scalar *out) {
  const FmKeyInfo *ki = &keys[k].info;
  for (int i = 0; i < a->nvalues; i++) {
    const FmNlValue *v = &a->values[i];
    char label[FM_NL_NAME_MAX + 16], text[200], why[600] = "", hint[200] = "";
    if (ki->nmax > 1)
      snprintf(label, sizeof label, "%s(%d)", a->key, first + i + 1);
    else
      snprintf(label, sizeof label, "%s", a->key);
    value_text(text, sizeof text, v);
    bool ok = convert(ki->type, v, &out[i], hint, sizeof hint);
    const int ctl = ok && ki->type == FM_TYPE_STR ? control_at(out[i].s) : -1;
    /* strings reach JSON outputs (summary.json, metrics.jsonl, manifests): bytes that are not UTF-8 made them
     * invalid JSON */
    const int64_t bad8 =
        ok && ctl < 0 && ki->type == FM_TYPE_STR && out[i].s ? fm_utf8_check(out[i].s, out[i].slen) : -1;
    if (!ok && v->big && ki->type == FM_TYPE_INT) {
      snprintf(why, sizeof why, "integer %s is too large (the limit is 9223372036854775807)", text);
    } else if (!ok) {
      snprintf(why, sizeof why, "expected %s, got %s", type_expect(ki->type),
               v->big ? "an integer" : kind_name(v->kind));
    } else if (ctl >= 0) {
      snprintf(why, sizeof why, "the string holds control character 0x%02x at byte %d", (unsigned char)out[i].s[ctl],
               ctl + 1);
      snprintf(hint, sizeof hint, "keys that take a newline or tab read the escapes \\n and \\t (role_prefix, ...)");
      ok = false;
    } else if (bad8 >= 0) {
      snprintf(why, sizeof why, "the string is not valid UTF-8 (byte %lld is 0x%02x)", (long long)bad8 + 1,
               (unsigned char)out[i].s[bad8]);
      snprintf(hint, sizeof hint, "save the deck as UTF-8 (iconv -f latin1 -t utf-8): strings are written into JSON");
      ok = false;
    } else {
      ok = check_range(ki, &out[i], why, sizeof why, hint, sizeof hint);
    }
    if (ok) continue;
    report(B, v->line, v->col, a->group, label, text, hint, "%s", why);
    return false;
  }
  return true;
}

/* Same key (same elements) twice in one source: legal, last wins, but
 * almost always an editing slip, so say so. */
static void note_repeat(Binder *B, int k, const FmNlAssign *a, int first) {
  uint64_t bits = (a->nvalues >= 64 ? ~0ull : ((1ull << a->nvalues) - 1)) << first;
  if (B->seen[k] & bits) {
    B->d->nwarnings++;
    if (B->err) {
      put_where(B->err, B->file, a->line, a->col);
      fprintf(B->err, "warning: &%s %s: set twice in this file (first at line %d); the last value wins\n", a->group,
              a->key, B->seen_line[k]);
    }
  } else if (!B->seen[k]) {
    B->seen_line[k] = a->line;
  }
  B->seen[k] |= bits;
}

static void bind_assign(void *ctx, const FmNlAssign *a) {
  Binder *B = ctx;
  if (find_group(a->group) < 0) { /* only overrides get here with a bad group */
    report_unknown_group(B, a->group, a->key);
    return;
  }
  int k = fm_deck_find_key(a->group, a->key);
  if (k < 0) {
    report_unknown_key(B, a);
    return;
  }
  int first;
  Scalar vals[64];
  if (!check_shape(B, k, a, &first) || !convert_all(B, k, a, first, vals)) return;
  note_repeat(B, k, a, first);
  commit(&B->d->c, k, first, a->nvalues, vals, a->has_index);
  B->d->origin[k] = (FmOrigin){B->file, a->line, a->col};
}

/* Deck files report an unknown group here and skip its keys. An override's
 * group is checked with its key in bind_assign, so the message names both. */
static bool bind_group(void *ctx, const char *group, int line, int col) {
  Binder *B = ctx;
  B->group_line = line;
  B->group_col = col;
  if (find_group(group) >= 0 || B->is_override) return true;
  report_unknown_group(B, group, NULL);
  return false;
}

static void report_grammar(Binder *B, const FmNlError *e) {
  report(B, e->line, e->col, e->group[0] ? e->group : NULL, e->key[0] ? e->key : NULL, NULL, NULL, "%s", e->msg);
}

/* Origins point at source names kept in d->sources_names: NUL-terminated
 * names one after another, ended by an empty one. Growing the buffer moves
 * it, so origins into the old buffer are moved along. */
static const char *intern_name(FmDeck *d, const char *name) {
  size_t used = 0;
  if (d->sources_names) {
    char *p = d->sources_names;
    for (; *p; p += strlen(p) + 1)
      if (!strcmp(p, name)) return p;
    used = (size_t)(p - d->sources_names);
  }
  size_t len = strlen(name) + 1;
  char *old = d->sources_names, *buf = fm_xmalloc(used + len + 1);
  if (old) memcpy(buf, old, used);
  memcpy(buf + used, name, len);
  buf[used + len] = '\0';
  for (int k = 0; k < FM_NKEYS; k++)
    if (old && d->origin[k].file) d->origin[k].file = buf + (d->origin[k].file - old);
  free(old);
  d->sources_names = buf;
  return buf + used;
}

static int bind_source(FmDeck *d, const FmDeckSource *s, const char *file, FILE *err) {
  Binder B = {.d = d, .err = err, .file = file, .is_override = s->is_override};
  FmNlVisitor v = {&B, bind_group, bind_assign};
  FmNlError e;
  const char *text = s->text ? s->text : "";
  int rc = s->is_override ? fm__nl_parse_override(text, &v, &e) : fm__nl_parse(text, &v, &e);
  if (rc) report_grammar(&B, &e);
  return B.nerrors;
}

int fm_deck_bind(FmDeck *d, int nsrc, const FmDeckSource *src, FILE *err) {
  int nerrors = 0;
  for (int i = 0; i < nsrc; i++) {
    const char *name = src[i].name && src[i].name[0] ? src[i].name : src[i].is_override ? "<command line>" : "<input>";
    /* Interning later sources moves earlier names, so intern at use. */
    nerrors += bind_source(d, &src[i], intern_name(d, name), err);
  }
  return nerrors ? FM_EDECK : 0;
}

int fm_deck_check_bytes(const char *name, const char *text, size_t len, FILE *err) {
  const char *nul = memchr(text, '\0', len), *cr = text;
  /* a carriage return not followed by a line feed (classic Mac OS line ends): the parser reads it as a blank, so
   * the lines would run together and a '!' comment would swallow the rest of the deck */
  while ((cr = memchr(cr, '\r', len - (size_t)(cr - text))) != NULL && cr + 1 < text + len && cr[1] == '\n') cr++;
  if (cr && nul && nul < cr) cr = NULL;
  const char *bad = cr ? cr : nul;
  if (!bad) return 0;
  int line = 1;
  const char *line_start = text;
  for (const char *p = text; p < bad; p++)
    if (*p == '\n') {
      line++;
      line_start = p + 1;
    }
  if (err && cr)
    fprintf(err,
            "%s:%d:%d: a carriage return (\\r) without a line feed: lines must end in \\n (or \\r\\n); read as a "
            "blank, it would join lines and let a '!' comment hide the rest of the deck\n"
            "hint: convert the line ends, e.g. tr '\\r' '\\n' < deck > fixed.in\n",
            name, line, (int)(bad - line_start) + 1);
  else if (err)
    fprintf(err,
            "%s:%d:%d: a NUL byte (\\0): a deck is text, and everything after it would be ignored\n"
            "hint: remove it; a deck saved by a word processor or a damaged copy can hold one\n",
            name, line, (int)(nul - line_start) + 1);
  return FM_EDECK;
}

/* ---- defaults ------------------------------------------------------------ */
/* A default is bound like a deck assignment (same grammar, same checks); one
 * that fails is a bug in keys.def, caught by the unit tests. */
static void bind_default(FmDeck *d, int k) {
  const FmKeyInfo *ki = &keys[k].info;
  FmNlValue *vals;
  int n;
  FmNlError e;
  if (fm__nl_parse_values(ki->def, &vals, &n, &e))
    fm_abort_one(1, "keys.def: &%s %s: default \"%s\": %s", ki->group, ki->name, ki->def, e.msg);
  FmNlAssign a = {.group = ki->group, .key = ki->name, .nvalues = n, .values = vals};
  Binder B = {.d = d, .err = stderr};
  if (n == 0 && ki->nmax == 1)
    report(&B, 0, 0, ki->group, ki->name, NULL, NULL, "a scalar key needs a default");
  else
    bind_assign(&B, &a);
  fm__nl_values_free(vals, n);
  if (B.nerrors) fm_abort_one(1, "keys.def: &%s %s: bad default \"%s\"", ki->group, ki->name, ki->def);
}

void fm_deck_init(FmDeck *d) {
  memset(d, 0, sizeof *d);
  for (int k = 0; k < FM_NKEYS; k++) d->c.choice[k] = -1;
  for (int k = 0; k < FM_NKEYS; k++)
    if (keys[k].info.type == FM_TYPE_STR)
      for (int i = 0; i < keys[k].info.nmax; i++) *(fm_deck_STR *)elem_ptr(&d->c, k, i) = fm_xstrdup("");
  for (int k = 0; k < FM_NKEYS; k++) bind_default(d, k);
}

void fm_deck_free(FmDeck *d) {
  for (int k = 0; k < FM_NKEYS; k++) {
    if (keys[k].info.type != FM_TYPE_STR) continue;
    for (int i = 0; i < keys[k].info.nmax; i++) {
      fm_deck_STR *p = elem_ptr(&d->c, k, i);
      free(*p);
      *p = NULL;
    }
  }
  free(d->sources_names);
  d->sources_names = NULL;
}

/* ---- output ------------------------------------------------------------- */
static void write_key(const FmDeck *d, FILE *out, int k, int width) {
  const FmKeyInfo *ki = &keys[k].info;
  const FmOrigin *o = &d->origin[k];
  FmStr line;
  fm_str_init(&line);
  if (key_count(&d->c, k) == 0)
    fm_str_printf(&line, "  ! %-*s = (no values)", width, ki->name);
  else
    fm_str_printf(&line, "  %-*s = ", width, ki->name);
  fmt_values(&line, &d->c, k);
  while (line.len < 44) fm_str_cat(&line, " ");
  fm_str_printf(&line, " ! %s", ki->help);
  if (o->file) fm_str_printf(&line, " [%s:%d]", o->file, o->line);
  fprintf(out, "%s\n", line.s);
  fm_str_free(&line);
}

static int group_key_width(int g) {
  int w = 0;
  for (int k = 0; k < FM_NKEYS; k++)
    if (!strcmp(keys[k].info.group, groups[g].name) && (int)strlen(keys[k].info.name) > w)
      w = (int)strlen(keys[k].info.name);
  return w;
}

void fm_deck_write(const FmDeck *d, FILE *out) {
  fprintf(out, "! fmhpc %s: resolved input deck (defaults included; [file:line] marks values that were set)\n",
          FM_VERSION_STRING);
  for (int g = 0; g < NGROUPS; g++) {
    fprintf(out, "&%s  ! %s\n", groups[g].name, groups[g].help);
    int width = group_key_width(g);
    for (int k = 0; k < FM_NKEYS; k++)
      if (!strcmp(keys[k].info.group, groups[g].name)) write_key(d, out, k, width);
    fputs("/\n", out);
  }
}

char *fm_deck_text(const FmDeck *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *s = open_memstream(&text, &len);
  fm_deck_write(d, s);
  fclose(s);
  return text;
}

static const char *type_name(const FmKeyInfo *ki, char *buf, size_t n) {
  static const char *const names[] = {"INT", "REAL", "BOOL", "STR"};
  if (ki->nmax > 1)
    snprintf(buf, n, "%s[%d]", names[ki->type], ki->nmax);
  else
    snprintf(buf, n, "%s", names[ki->type]);
  return buf;
}

void fm_deck_help(FILE *out) {
  fputs(
      "fmhpc input deck: Fortran namelist groups `&group key = value, ... /`.\n"
      "Override a key on the command line with 'group%key=value'.\n",
      out);
  for (int g = 0; g < NGROUPS; g++) {
    fprintf(out, "\n&%s: %s\n", groups[g].name, groups[g].help);
    for (int k = 0; k < FM_NKEYS; k++) {
      const FmKeyInfo *ki = &keys[k].info;
      if (strcmp(ki->group, groups[g].name) != 0) continue;
      char tn[32];
      fprintf(out, "  %-22s %-9s default %s", ki->name, type_name(ki, tn, sizeof tn), ki->def[0] ? ki->def : "(none)");
      if (ki->range[0]) fprintf(out, "  %s %s", ki->type == FM_TYPE_STR ? "one of" : "range", ki->range);
      fprintf(out, "\n      %s\n", ki->help);
    }
  }
}

/* ---- cross-key rules ---------------------------------------------------- */
void fm_deck_error(const FmDeck *d, FILE *err, int key_id, const char *fmt, ...) {
  if (!err || key_id < 0 || key_id >= FM_NKEYS) return;
  const FmKeyInfo *ki = &keys[key_id].info;
  const FmOrigin *o = &d->origin[key_id];
  FmStr v;
  fm_str_init(&v);
  fmt_values(&v, &d->c, key_id);
  /* One write of the whole message: under a launcher, stdout's log lines and
   * stderr reach the job's output through separate pipes, and a message
   * written in pieces can be split by a log line (faults.messages saw it). */
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  FILE *to = m ? m : err;
  put_where(to, o->file, o->line, o->col);
  fprintf(to, "&%s %s = %s: ", ki->group, ki->name, v.s);
  va_list ap;
  va_start(ap, fmt);
  fm_vsay(to, NULL, fmt, ap);
  va_end(ap);
  if (m) {
    fclose(m);
    fwrite(buf, 1, len, err);
    free(buf);
  }
  fflush(err);
  fm_str_free(&v);
}

int fm_deck_glob_miss(void *ctx, int i, const char *pattern, const char *path, int err) {
  const FmDeckKeyErr *k = ctx;
  if (path) {
    fm_deck_error(k->deck, k->err, k->key_id, "'%s' matches %s, which cannot be read: %s", pattern, path,
                  strerror(err));
    if (k->err)
      fprintf(k->err, "hint: a symlink whose target is gone, or a file removed or unreadable: fix or remove it%s\n",
              err == ENOENT ? " (ls -lL shows dangling links)" : "");
    return FM_EDECK;
  }
  fm_deck_error(k->deck, k->err, k->key_id, "'%s' matches no file", pattern);
  if (k->err) fprintf(k->err, "hint: relative globs start in the directory fmhpc runs in\n");
  return FM_EDECK;
}

/* "run.in:4" or "default", for messages that cite a second key. */
static const char *origin_text(const FmOrigin *o, char *buf, size_t n) {
  if (o->file)
    snprintf(buf, n, "%s:%d", o->file, o->line);
  else
    snprintf(buf, n, "default");
  return buf;
}

/* Rules between keys that the deck owns. Model shapes (d_model % n_head),
 * optimizer and data rules are checked by those modules. */
int fm_deck_validate(const FmDeck *d, FILE *err) {
  const FmConfig *c = &d->c;
  char at[256];
  int bad = 0;
  if (c->train.global_batch % c->train.micro_batch != 0) {
    fm_deck_error(d, err, FM_KEY_train_global_batch, "must be a multiple of &train micro_batch = %lld (%s)",
                  (long long)c->train.micro_batch, origin_text(&d->origin[FM_KEY_train_micro_batch], at, sizeof at));
    bad++;
  }
  if (c->prep.min_chars > c->prep.max_chars) {
    fm_deck_error(d, err, FM_KEY_prep_min_chars, "must be <= &prep max_chars = %lld (%s)", (long long)c->prep.max_chars,
                  origin_text(&d->origin[FM_KEY_prep_max_chars], at, sizeof at));
    bad++;
  }
  if (c->optim.betas_n != 2) {
    fm_deck_error(d, err, FM_KEY_optim_betas, "needs two values (beta1, beta2), got %d", c->optim.betas_n);
    bad++;
  }
  return bad ? FM_EDECK : 0;
}

/* ---- comparing decks (resume) ------------------------------------------- */
void fm_deck_fmt_real(char *buf, size_t n, double x) {
  FmStr b;
  fm_str_init(&b);
  fmt_real(&b, x);
  snprintf(buf, n, "%s", b.s);
  fm_str_free(&b);
}

char *fm_deck_value_text(const FmDeck *d, int key_id) {
  FmStr v;
  fm_str_init(&v);
  if (key_id >= 0 && key_id < FM_NKEYS) fmt_values(&v, &d->c, key_id);
  return v.s;
}

/* Values are compared as written by the resolved-deck writer, whose reals
 * read back to the same bits: equal text is equal value. */
bool fm_deck_key_equal(const FmDeck *a, const FmDeck *b, int key_id) {
  char *x = fm_deck_value_text(a, key_id), *y = fm_deck_value_text(b, key_id);
  bool eq = strcmp(x, y) == 0;
  free(x);
  free(y);
  return eq;
}
