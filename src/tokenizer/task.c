/* task.c: task='tokenizer': train a byte-level BPE on the &tokenizer
 * inputs (JSONL globs, plain/.gz/.zst, one document per record's `text`)
 * with fm_bpe_train and write tokenizer.json. Rank 0 expands the globs and
 * broadcasts the sorted list so every rank numbers the records alike; the
 * trainer asks each rank for its documents in increasing order, which a
 * forward-only stream over the files serves. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/json.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tokenizer.h"

typedef struct Corpus {
  char **files;
  int nfiles, cur;
  FmJsonl *r;
  int64_t next; /* index of the record the stream reads next */
  FILE *err;
} Corpus;

static int corpus_files(Corpus *c, const FmDeck *deck, FmComm *world, FILE *err) {
  if (deck->c.tokenizer.inputs_n == 0) {
    if (world->rank == 0) fm_deck_error(deck, err, FM_KEY_tokenizer_inputs, "task = 'tokenizer' needs input globs");
    return FM_EDECK;
  }
  const int64_t ids = deck->c.tokenizer.vocab_size - deck->c.tokenizer.special_tokens_n;
  if (ids < 256) { /* before reading the corpus, with the deck's place (fm_bpe_train checks it too) */
    if (world->rank == 0)
      fm_deck_error(deck, err, FM_KEY_tokenizer_vocab_size,
                    "leaves %lld ids after the %d special_tokens; at least 256 (one per byte) are needed",
                    (long long)ids, deck->c.tokenizer.special_tokens_n);
    return FM_EDECK;
  }
  FmDeckKeyErr m = {deck, err, FM_KEY_tokenizer_inputs};
  FmFileList fl;
  int rc = fm_comm_glob(world, deck->c.tokenizer.inputs, deck->c.tokenizer.inputs_n, fm_deck_glob_miss, &m, &fl);
  if (rc) return rc;
  c->files = fl.path;
  c->nfiles = fl.n;
  free(fl.bytes);
  return 0;
}

/* Next non-blank record of the corpus (1), end (0) or an error (<0). */
static int next_record(Corpus *c, const char **line, size_t *len, int64_t *lineno) {
  for (;;) {
    if (!c->r) {
      if (c->cur == c->nfiles) return 0;
      int rc = fm_jsonl_open(&c->r, c->files[c->cur], c->err);
      if (rc) return rc;
    }
    int got = fm_jsonl_next(c->r, line, len, lineno);
    if (got < 0) return got;
    if (got == 0) {
      fm_jsonl_close(c->r);
      c->r = NULL;
      c->cur++;
      continue;
    }
    size_t k = 0;
    while (k < *len && ((*line)[k] == ' ' || (*line)[k] == '\t' || (*line)[k] == '\r')) k++;
    if (k < *len) return 1;
  }
}

static void rewind_corpus(Corpus *c) {
  if (c->r) fm_jsonl_close(c->r);
  c->r = NULL;
  c->cur = 0;
  c->next = 0;
}

static int read_doc(void *ctx, int64_t i, char **text, size_t *len) {
  Corpus *c = ctx;
  const char *line = NULL;
  size_t n = 0;
  int64_t lineno = 0;
  if (i < c->next) return FM_EINVAL; /* the trainer asks in increasing order */
  for (;;) {
    int got = next_record(c, &line, &n, &lineno);
    if (got <= 0) return got < 0 ? got : FM_EINVAL;
    if (c->next++ == i) break;
  }
  FmJsonDoc d;
  FmJsonError e;
  if (fm_json_parse(&d, line, n, 64, &e)) {
    fm_err("%s:%lld:%d: malformed JSON: %s", c->files[c->cur], (long long)lineno, e.col, e.msg);
    return FM_EDATA;
  }
  const FmJson *t = fm_json_get(&d.root, "text");
  if (!t || t->type != FM_JSON_STR) {
    fm_err("%s:%lld: record has no string field 'text'", c->files[c->cur], (long long)lineno);
    fm_json_free(&d);
    return FM_EDATA;
  }
  *text = fm_xstrndup(t->s, t->len);
  *len = t->len;
  fm_json_free(&d);
  return 0;
}

/* Rank 0: the output's directory made and a file creatable there before the
 * corpus is read (it failed after the merges, hours on a real corpus). */
static int check_output(const FmDeck *deck, FmComm *world, FILE *err) {
  int32_t rc = 0;
  if (world->rank == 0) {
    const char *out = deck->c.tokenizer.output;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s.probe.%ld", out, (long)getpid());
    int fd = -1;
    if (!out[0]) {
      fm_deck_error(deck, err, FM_KEY_tokenizer_output, "task = 'tokenizer' needs an output file");
      rc = FM_EDECK;
    } else if (fm_mkdirs_parent(out) != 0 || (fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0) {
      fm_deck_error(deck, err, FM_KEY_tokenizer_output, "cannot be written: %s", strerror(errno));
      if (err) fprintf(err, "hint: checked before the corpus is read; point output at a writable directory\n");
      rc = FM_EIO;
    } else {
      close(fd);
      unlink(probe);
    }
  }
  FM_CHECK(fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0));
  return rc;
}

int fm_tokenizer_task(const FmDeck *deck, FmComm *world, FILE *log) {
  const FmConfig *cfg = &deck->c;
  FILE *err = world->rank == 0 ? stderr : NULL;
  Corpus c = {.err = stderr};
  int rc = corpus_files(&c, deck, world, err);
  if (!rc) rc = check_output(deck, world, err);
  int64_t ndocs = 0;
  if (!rc) { /* every rank counts the same records of the same files */
    const char *line;
    size_t n;
    int64_t lineno;
    int got;
    while ((got = next_record(&c, &line, &n, &lineno)) > 0) ndocs++;
    rc = got;
    rewind_corpus(&c);
  }
  if (!rc && world->rank == 0)
    fprintf(log, "tokenizer: %d files, %lld documents, vocab %lld, %d ranks\n", c.nfiles, (long long)ndocs,
            (long long)cfg->tokenizer.vocab_size, world->size);
  FmTokenizer *tok = NULL;
  if (!rc) {
    const char *pattern = cfg->choice[FM_KEY_tokenizer_pattern] == FM_TOK_PATTERN_KEY_GPT2 ? FM_TOK_PATTERN_GPT2 : FM_TOK_PATTERN_CL100K;
    FmBpeTrainOpts o = {.vocab_size = cfg->tokenizer.vocab_size,
                        .specials = (const char *const *)cfg->tokenizer.special_tokens,
                        .nspecials = cfg->tokenizer.special_tokens_n,
                        .pattern = pattern,
                        .min_frequency = cfg->tokenizer.min_frequency,
                        .ndocs = ndocs,
                        .read_doc = read_doc,
                        .ctx = &c};
    rc = fm_bpe_train(&o, world, &tok, world->rank == 0 ? log : NULL);
  }
  if (!rc && world->rank == 0 &&
      fm_tok_vocab_size(tok) < cfg->tokenizer.vocab_size) /* said, not left to a model deck */
    fm_warn0(
        "tokenizer: the corpus gave %lld ids, fewer than &tokenizer vocab_size = %lld: no pair is left that occurs "
        "min_frequency = %lld times or more; a model deck for this tokenizer needs vocab_size >= %lld",
        (long long)fm_tok_vocab_size(tok), (long long)cfg->tokenizer.vocab_size,
        (long long)cfg->tokenizer.min_frequency, (long long)fm_tok_vocab_size(tok));
  if (!rc && world->rank == 0) {
    rc = fm_tok_save_json(tok, cfg->tokenizer.output, stderr);
    if (!rc)
      fprintf(log, "tokenizer: wrote %s (%lld ids, sha256 %s)\n", cfg->tokenizer.output,
              (long long)fm_tok_vocab_size(tok), fm_tok_hash(tok));
  }
  fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0);
  if (tok) fm_tok_free(tok);
  rewind_corpus(&c);
  for (int i = 0; i < c.nfiles; i++) free(c.files[i]);
  free(c.files);
  return rc;
}
