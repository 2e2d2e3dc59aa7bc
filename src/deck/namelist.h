/* namelist.h (internal to src/deck/): the Fortran-namelist grammar.
 *
 *   &group key = value, key2 = v1 v2, arr(2) = 0.5, rep = 4*0.0  ! comment
 *   /                                                   (or &end)
 *
 * The parser knows no fmhpc groups or keys: it tokenizes, checks the shape of
 * the text and hands every `key = values` to a visitor (deck.c), which binds
 * it against the registry. Names reach the visitor in lower case; values keep
 * the text they were written as, for error messages. Grammar errors stop the
 * parse at the first one (nothing after it can be trusted); the visitor may
 * keep going after its own errors. */
#ifndef FMHPC_DECK_NAMELIST_H
#define FMHPC_DECK_NAMELIST_H

#include <stdbool.h>
#include <stdint.h>

enum {
  FM_NL_NAME_MAX = 64,      /* group and key names, NUL included */
  FM_NL_MAX_VALUES = 65536, /* values in one assignment, repeats expanded */
  FM_NL_MAX_TEXT = 16 << 20, /* bytes of the strings of one assignment, repeats expanded */
};

typedef enum {
  FM_NL_INT,  /* 768, -3, +12 */
  FM_NL_REAL, /* 3e-4, 1.5d-3, .5, 2. */
  FM_NL_BOOL, /* .true. .false. .t. .f. T F */
  FM_NL_STR,  /* 'it''s' or "say ""hi""" */
  FM_NL_WORD  /* an unquoted word: never valid, kept so the binder can say "quote it" */
} FmNlKind;

typedef struct FmNlValue {
  FmNlKind kind;
  int64_t i;        /* FM_NL_INT */
  double r;         /* FM_NL_REAL */
  bool big;         /* an integer beyond int64, kept as FM_NL_REAL: a REAL key takes it */
  bool b;           /* FM_NL_BOOL */
  const char *s;    /* FM_NL_STR: the text with quotes undone; FM_NL_WORD: the word */
  const char *text; /* the value as written (not NUL-terminated), for messages */
  int len;
  int line, col; /* 1-based */
} FmNlValue;

typedef struct FmNlAssign {
  const char *group, *key; /* lower case */
  int line, col;           /* of the key */
  bool has_index;          /* key(i) = ... */
  int64_t index;           /* as written (1-based in valid decks; the binder checks it) */
  int index_line, index_col;
  int nvalues;
  const FmNlValue *values; /* valid only during the visit */
} FmNlAssign;

/* The binder's side. `group` is called when a group opens and returns false
 * to have that group's assignments skipped (it reported the group unknown).
 * `assign` is called for each assignment of a group that was accepted. */
typedef struct FmNlVisitor {
  void *ctx;
  bool (*group)(void *ctx, const char *group, int line, int col);
  void (*assign)(void *ctx, const FmNlAssign *a);
} FmNlVisitor;

/* A grammar error: where, in which group/key (empty when none) and what. */
typedef struct FmNlError {
  int line, col;
  char group[FM_NL_NAME_MAX], key[FM_NL_NAME_MAX];
  char msg[512];
} FmNlError;

/* A deck file's text. Returns 0, or FM_EDECK with *e filled. */
int fm__nl_parse(const char *text, const FmNlVisitor *v, FmNlError *e);
/* One command-line override, "group%key=values" or "group%key(i)=values",
 * parsed as `&group key=values /`; columns are positions in `text`. */
int fm__nl_parse_override(const char *text, const FmNlVisitor *v, FmNlError *e);

/* A bare value list ("0.9, 0.95", "4*0.0", "" for none), as the registry
 * writes defaults. On success *out holds *n values that stay valid until
 * fm__nl_values_free(*out, *n). */
int fm__nl_parse_values(const char *text, FmNlValue **out, int *n, FmNlError *e);
void fm__nl_values_free(FmNlValue *v, int n);

#endif
