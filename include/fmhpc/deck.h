/* deck.h: the input deck. A Fortran-namelist grammar (src/deck/namelist.c,
 * which knows no fmhpc keys) and the key registry (src/deck/keys.def) that
 * binds parsed values into a typed FmConfig, validates types and ranges, and
 * prints `--help-deck` and the resolved deck. No MPI here: the caller (main)
 * has rank 0 read the files and broadcast the text; every rank binds it. */
#ifndef FMHPC_DECK_H
#define FMHPC_DECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef int64_t fm_deck_INT;
typedef double fm_deck_REAL;
typedef bool fm_deck_BOOL;
typedef char *fm_deck_STR; /* owned by the config; never NULL after binding */

/* FmConfig: one struct per group, one field per key: cfg.model.d_model,
 * cfg.optim.betas[1] (with cfg.optim.betas_n values set). */
/* Key ids: FM_KEY_model_d_model, ... in registry order. */
enum {
#define FM_GROUP(g, help)
#define FM_KEY(g, name, type, def, range, help)        FM_KEY_##g##_##name,
#define FM_KEYA(g, name, type, nmax, def, range, help) FM_KEY_##g##_##name,
#define FM_END(g)
#include "../../src/deck/keys.def"
#undef FM_GROUP
#undef FM_KEY
#undef FM_KEYA
#undef FM_END
  FM_NKEYS
};

typedef struct FmConfig {
#define FM_GROUP(g, help) struct {
#define FM_KEY(g, name, type, def, range, help) fm_deck_##type name;
#define FM_KEYA(g, name, type, nmax, def, range, help) \
  fm_deck_##type name[nmax];                           \
  int name##_n;
#define FM_END(g) \
  }               \
  g;
#include "../../src/deck/keys.def"
#undef FM_GROUP
#undef FM_KEY
#undef FM_KEYA
#undef FM_END
  /* Choice keys bound once: for a scalar STR key with a choice list, the
   * index of its value in that list (keys.def's order; the enums below name
   * them), -1 for other keys. Set whenever the key is bound. */
  int choice[FM_NKEYS];
} FmConfig;

/* Choice-key values as enums: c->choice[FM_KEY_train_precision] ==
 * FM_PRECISION_BF16. The order is the key's list in keys.def; test_deck_bind
 * binds every spelling and checks its index. */
enum { FM_PRECISION_F32 = 0, FM_PRECISION_BF16 = 1 };       /* &train precision: p=f32,c=f32 | p=f32,c=bf16 */
enum { FM_DETERMINISM_EXACT = 0, FM_DETERMINISM_FAST = 1 }; /* &train determinism: exact | fast */
enum { FM_COMM_AUTO = 0, FM_COMM_MPI = 1, FM_COMM_NCCL = 2 }; /* &parallel comm: auto | mpi | nccl */
enum { FM_PREP_FORMAT_H5 = 0, FM_PREP_FORMAT_BIN = 1 };      /* &prep format: h5 | bin */
enum { FM_PREP_MODE_PRETRAIN = 0, FM_PREP_MODE_SFT = 1 };    /* &prep mode: pretrain | sft */
enum { FM_BAD_RECORD_ERROR = 0, FM_BAD_RECORD_SKIP = 1 };    /* &prep on_bad_record: error | skip */
enum { FM_TOK_PATTERN_KEY_GPT2 = 0, FM_TOK_PATTERN_KEY_CL100K = 1 }; /* &tokenizer pattern: gpt2 | cl100k */

/* Where a key's value came from: a deck file, a command-line override, or
 * the registry default (file == NULL). */
typedef struct FmOrigin {
  const char *file; /* "inputs/llama2.in", "<command line>", or NULL */
  int line, col;
} FmOrigin;

/* A source of deck text: a file's contents, or one command-line override
 * ("optim%lr=3e-4"), which is parsed as `&optim lr=3e-4 /`. */
typedef struct FmDeckSource {
  const char *name; /* file name, or "<command line>" for an override */
  const char *text;
  bool is_override;
} FmDeckSource;

typedef struct FmDeck {
  FmConfig c;
  FmOrigin origin[FM_NKEYS];
  char *sources_names; /* storage for origin file names */
  int nwarnings;
} FmDeck;

/* Registry introspection (used by --help-deck, tests and checkpoints). */
typedef enum { FM_TYPE_INT, FM_TYPE_REAL, FM_TYPE_BOOL, FM_TYPE_STR } FmKeyType;
typedef struct FmKeyInfo {
  const char *group, *name;
  FmKeyType type;
  int nmax; /* 1 for a scalar key */
  const char *def, *range, *help;
} FmKeyInfo;
const FmKeyInfo *fm_deck_key_info(int key_id);
int fm_deck_find_key(const char *group, const char *name); /* id or -1 */
int fm_deck_ngroups(void);
const char *fm_deck_group_name(int i);

/* Fill every key with its default. */
void fm_deck_init(FmDeck *d);
/* Parse and bind sources in order (later ones override earlier ones). On an
 * error, messages go to `err` (NULL: silent, for ranks other than 0) as
 *   file:line:col: &group key: what was wrong
 *   hint: did you mean 'lr'?
 * and FM_EDECK is returned; all ranks binding the same text see the same
 * result. Warnings (a repeated key) go to `err` and count in d->nwarnings. */
int fm_deck_bind(FmDeck *d, int nsrc, const FmDeckSource *src, FILE *err);
/* A deck file's raw bytes before binding: a NUL byte would silently end the
 * text there (everything after it unread, defaults used), so it is an error
 *   name:line:col: a NUL byte (\0): a deck is text
 * Returns 0 or FM_EDECK. */
int fm_deck_check_bytes(const char *name, const char *text, size_t len, FILE *err);
/* Cross-key rules that belong to the deck itself (global_batch a multiple of
 * micro_batch, ...), after bind. Model, optimizer and data rules (d_model %
 * n_head, ...) live in those modules and report through fm_deck_error. */
int fm_deck_validate(const FmDeck *d, FILE *err);
/* Report a rule broken by a key's value, at that key's origin. */
void fm_deck_error(const FmDeck *d, FILE *err, int key_id, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An input glob of a key that matched no file, or a match that cannot be
 * read (path, errno: a dangling symlink), reported at the key with a
 * hint; returns FM_EDECK. Shaped as fm_comm_glob's miss callback (runtime.h):
 * ctx is an FmDeckKeyErr. */
typedef struct FmDeckKeyErr {
  const FmDeck *deck;
  FILE *err; /* NULL: report nothing (ranks other than 0) */
  int key_id;
} FmDeckKeyErr;
int fm_deck_glob_miss(void *ctx, int i, const char *pattern, const char *path, int err);

/* The resolved deck, defaults included, as a deck that can be run again. */
void fm_deck_write(const FmDeck *d, FILE *out);
/* fm_deck_write into a NUL-terminated string (caller frees). */
char *fm_deck_text(const FmDeck *d);
/* `fmhpc --help-deck`: every group and key with type, default, range, help. */
void fm_deck_help(FILE *out);
void fm_deck_free(FmDeck *d);

/* A key's value(s) as the resolved deck writes them ("0.9, 0.95", "'gpt2'"),
 * malloc'd; and whether two decks hold the same value (resume's check). */
char *fm_deck_value_text(const FmDeck *d, int key_id);
/* A REAL as the deck writes it (shortest text that reads back to the same
 * double: 1e-5, 10000.0) into buf (n >= 32): for messages that quote one. */
void fm_deck_fmt_real(char *buf, size_t n, double x);
bool fm_deck_key_equal(const FmDeck *a, const FmDeck *b, int key_id);

#endif
