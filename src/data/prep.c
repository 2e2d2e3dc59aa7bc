/* prep.c: task='prep', JSONL to packed shards. The pipeline:
 *   inputs (globs, sorted) -> records (non-blank lines, numbered in input
 *   order) -> fixed windows of window_docs records -> per window: parse,
 *   check, filter by length, split train/valid, tokenize (SFT: template and
 *   masks), pack -> a committed window file (.partial, then renamed) ->
 *   after all windows: rows placed by exclusive prefix sums over windows in
 *   window order -> shards (HDF5 collective writes or .bin pwrite) -> a JSON
 *   manifest per split.
 * Rank r packs windows w with w % P == r; every rank reads every input (only
 * counting lines outside its windows), so window boundaries and therefore
 * the output do not depend on P. Committed windows survive a kill: a rerun
 * of the same deck resumes from them. Packing is pack.c, formats store_*.c. */
#include "fmhpc/data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmhpc/hash.h"
#include "fmhpc/json.h"
#include "fmhpc/rng.h"
#include "fmhpc/tokenizer.h"

/* Per-window counters; summed over windows (exact integers) for the report. */
#define STAT_TABLE(XX)                                                    \
  XX(records, "records read (non-blank lines)")                           \
  XX(blank, "blank lines skipped")                                        \
  XX(bad_skipped, "bad records skipped (on_bad_record = 'skip')")         \
  XX(too_short, "documents shorter than min_chars")                       \
  XX(too_long, "documents longer than max_chars")                         \
  XX(chars, "characters of kept documents")                               \
  XX(docs_train, "train documents")                                       \
  XX(docs_valid, "valid documents")                                       \
  XX(tokens_train, "train tokens (EOS included)")                         \
  XX(tokens_valid, "valid tokens (EOS included)")                         \
  XX(trained_train, "train tokens with loss mask 1")                      \
  XX(trained_valid, "valid tokens with loss mask 1")                      \
  XX(padding_train, "train padding slots")                                \
  XX(padding_valid, "valid padding slots")                                \
  XX(dropped_train, "train documents longer than a row (bfd drops them)") \
  XX(dropped_valid, "valid documents longer than a row (bfd drops them)") \
  XX(dropped_tok_train, "train tokens of dropped documents")              \
  XX(dropped_tok_valid, "valid tokens of dropped documents")              \
  XX(rows_train, "train rows")                                            \
  XX(rows_valid, "valid rows")

enum {
#define XX(n, h) ST_##n,
  STAT_TABLE(XX)
#undef XX
      NSTAT
};
static const char *const stat_names[] = {
#define XX(n, h) #n,
    STAT_TABLE(XX)
#undef XX
};

enum { SPLIT_TRAIN, SPLIT_VALID };
static const char *const split_names[2] = {"train", "valid"};

typedef struct Input {
  char *path;
  int64_t bytes;
  char sha[65];
  bool valid; /* from valid_inputs */
} Input;

typedef struct Section {
  char *field, *role;
  bool train;
} Section;

typedef struct Record {
  int in;         /* input index */
  int64_t lineno; /* line in that input */
  char *text;
  size_t len;
} Record;

typedef struct Prep {
  const FmDeck *deck;
  FmComm *world;
  FILE *log; /* rank 0 only */
  int rank, P;
  FmTokenizer *tok;
  int32_t eos;
  uint32_t pad;
  FmPacking packing;
  FmPosIds pos;
  bool sft, skip_bad;
  FmTemplate tmpl;
  Section sec[16];
  int nsec;
  int64_t R, W, min_chars, max_chars;
  double valid_fraction;
  Input *in;
  int nin;
  int64_t total_bytes;
  char *out, *work;
  /* window being built */
  Record *rec;
  int64_t nrec, reccap;
  /* encoded documents of one window: ids and masks, offsets per doc */
  int32_t *ids;
  int64_t nids, idcap;
  uint8_t *mask;
  int64_t maskcap;
  int64_t *doff[2], ndoc[2], doccap[2]; /* per split: (start, end) of each document */
  int64_t stat[NSTAT];
  /* progress */
  double t0, t_last;
  int64_t done_docs, done_tokens, rounds, blank;
} Prep;

static int agree(FmComm *c, int rc) {
  int32_t r = rc, worst = 0;
  if (fm_comm_allreduce(c, &r, &worst, 1, FM_DT_I32, FM_OP_MIN)) return FM_EMPI;
  return worst;
}

static bool nonempty(const char *s) { return s && s[0]; }

/* ---- configuration ---------------------------------------------------- */
static int configure(Prep *p, FILE *err) {
  const FmDeck *d = p->deck;
  int rc = 0;
  if (!nonempty(d->c.prep.tokenizer)) {
    fm_deck_error(d, err, FM_KEY_prep_tokenizer, "task = 'prep' needs a tokenizer");
    if (err) fprintf(err, "hint: tokenizer = 'tokenizers/gpt2' (a directory with encoder.json and vocab.bpe)\n");
    rc = FM_EDECK;
  }
  int ninputs = 0;
  for (int i = 0; i < d->c.prep.inputs_n; i++) ninputs += nonempty(d->c.prep.inputs[i]);
  if (ninputs == 0) {
    fm_deck_error(d, err, FM_KEY_prep_inputs, "task = 'prep' needs input globs");
    if (err) fprintf(err, "hint: inputs = 'corpus/*.jsonl.zst'\n");
    rc = FM_EDECK;
  }
  fm_packing_parse(d->c.prep.packing, &p->packing);
  fm_posids_parse(d->c.prep.position_ids, &p->pos);
  p->sft = !fm_strcasecmp(d->c.prep.mode, "sft");
  p->skip_bad = !fm_strcasecmp(d->c.prep.on_bad_record, "skip");
  p->R = d->c.prep.seq_len + 1;
  p->W = d->c.prep.window_docs;
  p->min_chars = d->c.prep.min_chars;
  p->max_chars = d->c.prep.max_chars;
  p->valid_fraction = d->c.prep.valid_fraction;
  if (p->min_chars > p->max_chars) {
    fm_deck_error(d, err, FM_KEY_prep_min_chars, "min_chars = %lld is above max_chars = %lld",
                  (long long)p->min_chars, (long long)p->max_chars);
    rc = FM_EDECK;
  }
  int nvalid = 0;
  for (int i = 0; i < d->c.prep.valid_inputs_n; i++) nvalid += nonempty(d->c.prep.valid_inputs[i]);
  if (nvalid && p->valid_fraction > 0) {
    fm_deck_error(d, err, FM_KEY_prep_valid_fraction,
                  "valid_fraction = %g and valid_inputs both choose the validation split", p->valid_fraction);
    if (err) fprintf(err, "hint: keep one of them\n");
    rc = FM_EDECK;
  }
  if (!p->sft) return rc;
  /* SFT: sections 'field' or 'field=role', or a messages list */
  for (int i = 0; i < d->c.prep.sections_n; i++) {
    const char *s = d->c.prep.sections[i];
    if (!nonempty(s)) continue;
    const char *eq = strchr(s, '=');
    Section *sc = &p->sec[p->nsec++];
    sc->field = eq ? fm_xstrndup(s, (size_t)(eq - s)) : fm_xstrdup(s);
    sc->role = fm_xstrdup(eq ? eq + 1 : s);
  }
  int ntrain = 0;
  for (int i = 0; i < d->c.prep.train_on_n; i++) ntrain += nonempty(d->c.prep.train_on[i]);
  if (ntrain == 0) {
    fm_deck_error(d, err, FM_KEY_prep_train_on, "mode = 'sft' needs train_on: the sections or roles to train");
    if (err) fprintf(err, "hint: train_on = 'assistant' (roles) or 'response' (sections)\n");
    rc = FM_EDECK;
  }
  for (int i = 0; i < p->nsec; i++)
    for (int k = 0; k < d->c.prep.train_on_n; k++)
      if (!strcmp(d->c.prep.train_on[k], p->sec[i].field) || !strcmp(d->c.prep.train_on[k], p->sec[i].role))
        p->sec[i].train = true;
  if (fm_template_from_deck(&p->tmpl, d, err)) rc = FM_EDECK;
  return rc;
}

static bool role_trained(const Prep *p, const char *role) {
  for (int k = 0; k < p->deck->c.prep.train_on_n; k++)
    if (!strcmp(p->deck->c.prep.train_on[k], role)) return true;
  return false;
}

typedef struct Miss {
  const FmDeck *deck;
  int key;
} Miss;

static int miss(void *ctx, int i, const char *pattern) {
  const Miss *m = ctx;
  fm_deck_error(m->deck, stderr, m->key, "'%s' matches no file", pattern);
  fprintf(stderr, "hint: relative globs start in the directory fmhpc runs in\n");
  return FM_EIO;
}

/* Rank 0 expands the globs (sorted, as glob(3) does) and stats the files;
 * the list is broadcast so that every rank reads the same files. Training
 * inputs first, then validation inputs. */
static int expand_inputs(Prep *p) {
  const FmConfig *c = &p->deck->c;
  Miss mt = {p->deck, FM_KEY_prep_inputs}, mv = {p->deck, FM_KEY_prep_valid_inputs};
  FmFileList fl[2] = {{0}, {0}};
  int rc = fm_comm_glob(p->world, c->prep.inputs, c->prep.inputs_n, miss, &mt, &fl[0]);
  if (!rc) rc = fm_comm_glob(p->world, c->prep.valid_inputs, c->prep.valid_inputs_n, miss, &mv, &fl[1]);
  p->in = fm_xcalloc((size_t)(fl[0].n + fl[1].n) + 1, sizeof *p->in);
  for (int v = 0; v < 2 && !rc; v++)
    for (int i = 0; i < fl[v].n; i++) {
      p->in[p->nin].valid = v;
      p->in[p->nin].bytes = fl[v].bytes[i];
      p->in[p->nin].path = fl[v].path[i];
      fl[v].path[i] = NULL;
      p->total_bytes += fl[v].bytes[i];
      p->nin++;
    }
  fm_file_list_free(&fl[0]);
  fm_file_list_free(&fl[1]);
  return rc;
}

/* ---- records to documents --------------------------------------------- */
static int64_t count_chars(const char *s, size_t n) {
  int64_t c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
  return c;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* Append ids of text to the window buffer with loss mask m. */
static int encode(Prep *p, const char *text, size_t n, bool special, uint8_t m) {
  int64_t before = p->nids;
  int64_t k = fm_tok_encode(p->tok, text, n, special, &p->ids, &p->nids, &p->idcap);
  if (k < 0) return (int)k;
  if (p->maskcap < p->idcap) {
    p->maskcap = p->idcap;
    p->mask = fm_xrealloc(p->mask, (size_t)p->maskcap);
  }
  memset(p->mask + before, m, (size_t)(p->nids - before));
  return 0;
}

static int push_eos(Prep *p, uint8_t m) {
  if (p->nids == p->idcap) {
    p->idcap = p->idcap * 2 + 1024;
    p->ids = fm_xrealloc(p->ids, (size_t)p->idcap * sizeof *p->ids);
  }
  if (p->maskcap < p->idcap) {
    p->maskcap = p->idcap;
    p->mask = fm_xrealloc(p->mask, (size_t)p->maskcap);
  }
  p->ids[p->nids] = p->eos;
  p->mask[p->nids++] = m;
  return 0;
}

/* A turn of an SFT document. */
typedef struct Turn {
  const char *role, *text;
  size_t len;
  bool train;
} Turn;

/* Why a record is bad, in words (file:line is added by the caller). */
typedef struct Bad {
  char why[320];
} Bad;

static int turns_of(Prep *p, const FmJson *obj, Turn *turns, int *nturns, Bad *bad) {
  *nturns = 0;
  if (p->nsec > 0) {
    for (int i = 0; i < p->nsec; i++) {
      const FmJson *v = fm_json_get(obj, p->sec[i].field);
      if (!v || v->type != FM_JSON_STR) {
        snprintf(bad->why, sizeof bad->why, "section '%s' is %s, expected a string", p->sec[i].field,
                 v ? fm_json_type_name(v->type) : "missing");
        return FM_EDATA;
      }
      turns[(*nturns)++] = (Turn){p->sec[i].role, v->s, v->len, p->sec[i].train};
    }
    return 0;
  }
  const char *mf = p->deck->c.prep.messages_field;
  const FmJson *m = fm_json_get(obj, mf);
  if (!m || m->type != FM_JSON_ARR || m->n == 0 || m->n > 256) {
    snprintf(bad->why, sizeof bad->why, "field '%s' is %s, expected a list of 1..256 {role, content} turns", mf,
             m ? fm_json_type_name(m->type) : "missing");
    return FM_EDATA;
  }
  for (int64_t i = 0; i < m->n; i++) {
    const FmJson *t = &m->items[i], *role = t->type == FM_JSON_OBJ ? fm_json_get(t, "role") : NULL,
                 *content = t->type == FM_JSON_OBJ ? fm_json_get(t, "content") : NULL;
    if (!role || role->type != FM_JSON_STR || !content || content->type != FM_JSON_STR) {
      snprintf(bad->why, sizeof bad->why, "%s[%lld] needs string fields 'role' and 'content'", mf, (long long)i);
      return FM_EDATA;
    }
    turns[(*nturns)++] = (Turn){role->s, content->s, content->len, role_trained(p, role->s)};
  }
  return 0;
}

/* Render turns through the template into ids + mask. Prefix, suffix and bos
 * may hold special tokens; content never. Trained turns train their content
 * and suffix; the closing EOS is trained when the last turn is. */
static int encode_sft(Prep *p, const Turn *turns, int n, Bad *bad) {
  int rc = 0;
  if (nonempty(p->tmpl.bos)) rc = encode(p, p->tmpl.bos, strlen(p->tmpl.bos), true, 0);
  for (int i = 0; i < n && !rc; i++) {
    char *pre, *suf;
    if (fm_template_role(&p->tmpl, turns[i].role, &pre, &suf)) {
      snprintf(bad->why, sizeof bad->why, "role '%s' is not in the deck template's role_names", turns[i].role);
      return FM_EDATA;
    }
    rc = encode(p, pre, strlen(pre), true, 0);
    if (!rc) rc = encode(p, turns[i].text, turns[i].len, false, turns[i].train);
    if (!rc) rc = encode(p, suf, strlen(suf), true, turns[i].train);
    free(pre);
    free(suf);
  }
  if (!rc) rc = push_eos(p, n > 0 && turns[n - 1].train);
  return rc;
}

/* One record: 0 kept or filtered (counted), FM_EDATA bad (bad->why set),
 * other <0 a failure. */
static int do_record(Prep *p, const Record *r, Bad *bad) {
  int64_t badoff = fm_utf8_check(r->text, r->len);
  if (badoff >= 0) {
    snprintf(bad->why, sizeof bad->why, "invalid UTF-8 at byte %lld of the line", (long long)badoff + 1);
    return FM_EDATA;
  }
  FmJsonDoc doc;
  FmJsonError je;
  if (fm_json_parse(&doc, r->text, r->len, 64, &je)) {
    snprintf(bad->why, sizeof bad->why, "column %d: malformed JSON: %s", je.col, je.msg);
    return FM_EDATA;
  }
  int rc = 0;
  Turn turns[256];
  int nturns = 0;
  if (doc.root.type != FM_JSON_OBJ) {
    snprintf(bad->why, sizeof bad->why, "the record is a JSON %s, expected an object", fm_json_type_name(doc.root.type));
    rc = FM_EDATA;
  } else if (p->sft) {
    rc = turns_of(p, &doc.root, turns, &nturns, bad);
  } else {
    const char *tf = p->deck->c.prep.text_field;
    const FmJson *t = fm_json_get(&doc.root, tf);
    if (!t || t->type != FM_JSON_STR) {
      snprintf(bad->why, sizeof bad->why, "field '%s' is %s, expected a string", tf,
               t ? fm_json_type_name(t->type) : "missing");
      rc = FM_EDATA;
    } else {
      turns[nturns++] = (Turn){"text", t->s, t->len, true};
    }
  }
  if (rc) {
    fm_json_free(&doc);
    return rc;
  }
  int64_t chars = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < nturns; i++) {
    chars += count_chars(turns[i].text, turns[i].len);
    h = fnv1a(h, turns[i].text, turns[i].len + 1); /* the NUL separates turns */
  }
  if (chars < p->min_chars || chars > p->max_chars) {
    p->stat[chars < p->min_chars ? ST_too_short : ST_too_long]++;
    fm_json_free(&doc);
    return 0;
  }
  int split = p->in[r->in].valid ||
              (p->valid_fraction > 0 &&
               fm_rng_uniform((uint64_t)p->deck->c.run.seed, FM_RNG_PREP, 0, h) < (float)p->valid_fraction);
  int64_t start = p->nids;
  if (p->sft) {
    rc = encode_sft(p, turns, nturns, bad);
  } else {
    rc = encode(p, turns[0].text, turns[0].len, false, 1);
    if (!rc) rc = push_eos(p, 1);
  }
  fm_json_free(&doc);
  if (rc == FM_EDATA) {
    p->nids = start;
    return rc;
  }
  if (rc) {
    snprintf(bad->why, sizeof bad->why, "the tokenizer failed: %s", fm_strerror(rc));
    return rc;
  }
  if (2 * p->ndoc[split] + 2 > p->doccap[split]) {
    p->doccap[split] = 2 * p->doccap[split] + 256;
    p->doff[split] = fm_xrealloc(p->doff[split], (size_t)p->doccap[split] * sizeof(int64_t));
  }
  p->doff[split][2 * p->ndoc[split]] = start; /* [start, end) in the window buffer */
  p->doff[split][2 * p->ndoc[split]++ + 1] = p->nids;
  p->stat[ST_chars] += chars;
  for (int64_t i = start; i < p->nids; i++) p->stat[split ? ST_trained_valid : ST_trained_train] += p->mask[i];
  return 0;
}

/* ---- windows ---------------------------------------------------------- */
/* Window file: "FMWIN1\0\0", int64 R, has_pos, NSTAT, stats[NSTAT], then per
 * split (train, valid): tokens u32, loss_mask u8, segment_ids i32,
 * position_ids i32 (if has_pos), each rows x R. */
static const char win_magic[8] = "FMWIN1";

static char *win_path(const Prep *p, int64_t w, bool partial) {
  char *s = fm_xmalloc(strlen(p->work) + 48);
  sprintf(s, "%s/win_%09lld.bin%s", p->work, (long long)w, partial ? ".partial" : "");
  return s;
}

static int write_all(FILE *f, const void *b, size_t n) { return fwrite(b, 1, n, f) == n ? 0 : FM_EIO; }

static int commit_window(Prep *p, int64_t w, FmPacked pk[2]) {
  char *part = win_path(p, w, true), *fin = win_path(p, w, false);
  FILE *f = fopen(part, "wb");
  int rc = f ? 0 : FM_EIO;
  int64_t hdr[3] = {p->R, p->pos != FM_POS_NONE, NSTAT};
  if (!rc) rc = write_all(f, win_magic, 8);
  if (!rc) rc = write_all(f, hdr, sizeof hdr);
  if (!rc) rc = write_all(f, p->stat, sizeof p->stat);
  for (int s = 0; s < 2 && !rc; s++) {
    size_t n = (size_t)(pk[s].rows * p->R);
    if (!n) continue;
    rc = write_all(f, pk[s].tokens, n * 4);
    if (!rc) rc = write_all(f, pk[s].loss_mask, n);
    if (!rc) rc = write_all(f, pk[s].segment_ids, n * 4);
    if (!rc && p->pos != FM_POS_NONE) rc = write_all(f, pk[s].position_ids, n * 4);
  }
  if (f && (fflush(f) || fsync(fileno(f)))) rc = FM_EIO;
  if (f && fclose(f)) rc = FM_EIO;
  if (!rc && rename(part, fin)) rc = FM_EIO;
  if (rc) fm_err("%s: cannot write the window file: %s\nhint: check free space in &prep output", part, strerror(errno));
  free(part);
  free(fin);
  return rc;
}

static int pack_window(Prep *p, int64_t w) {
  FmPacked pk[2];
  memset(pk, 0, sizeof pk);
  for (int s = 0; s < 2; s++) {
    FmDoc *docs = fm_xmalloc((size_t)(p->ndoc[s] + 1) * sizeof *docs);
    for (int64_t i = 0; i < p->ndoc[s]; i++) {
      int64_t a = p->doff[s][2 * i], b = p->doff[s][2 * i + 1];
      docs[i] = (FmDoc){p->ids + a, p->mask + a, b - a};
    }
    fm_pack(&pk[s], docs, p->ndoc[s], p->R - 1, p->packing, p->pos, p->pad);
    free(docs);
  }
  p->stat[ST_docs_train] = pk[0].docs;
  p->stat[ST_docs_valid] = pk[1].docs;
  p->stat[ST_tokens_train] = pk[0].tokens_real;
  p->stat[ST_tokens_valid] = pk[1].tokens_real;
  p->stat[ST_padding_train] = pk[0].padding;
  p->stat[ST_padding_valid] = pk[1].padding;
  p->stat[ST_dropped_train] = pk[0].dropped_docs;
  p->stat[ST_dropped_valid] = pk[1].dropped_docs;
  p->stat[ST_dropped_tok_train] = pk[0].dropped_tokens;
  p->stat[ST_dropped_tok_valid] = pk[1].dropped_tokens;
  p->stat[ST_rows_train] = pk[0].rows;
  p->stat[ST_rows_valid] = pk[1].rows;
  int rc = commit_window(p, w, pk);
  fm_packed_free(&pk[0]);
  fm_packed_free(&pk[1]);
  return rc;
}

/* Process the records of window w. Returns 0, FM_EDATA (a bad record, already
 * reported) or another failure. */
static int do_window(Prep *p, int64_t w) {
  memset(p->stat, 0, sizeof p->stat);
  p->nids = 0;
  p->ndoc[0] = p->ndoc[1] = 0;
  for (int64_t i = 0; i < p->nrec; i++) {
    Bad bad = {""};
    const Record *r = &p->rec[i];
    int rc = do_record(p, r, &bad);
    if (rc == FM_EDATA && p->skip_bad) {
      p->stat[ST_bad_skipped]++;
      if (p->stat[ST_bad_skipped] <= 3) fm_err("%s:%lld: skipped: %s", p->in[r->in].path, (long long)r->lineno, bad.why);
      continue;
    }
    if (rc) {
      fm_err("%s:%lld: %s\nhint: fix the record, or set &prep on_bad_record = 'skip' to count and skip bad records",
             p->in[r->in].path, (long long)r->lineno, bad.why[0] ? bad.why : fm_strerror(rc));
      return rc == FM_EDATA ? FM_EDATA : rc;
    }
  }
  p->stat[ST_records] = p->nrec;
  return pack_window(p, w);
}

static void fmt_dur(char *b, size_t n, double s) {
  if (s < 0 || s > 1e8) snprintf(b, n, "?");
  else if (s < 60) snprintf(b, n, "%.0fs", s);
  else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(b, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

/* After each round of windows (every rank calls this once per round, with
 * or without a window): agree on errors and on whether anyone still has
 * windows, count rounds for stop_after_windows, and let rank 0 report
 * progress. Returns 0, FM_EDATA when any rank failed, or 1 to stop here. */
static int sync_round(Prep *p, int err, int active, int64_t raw_bytes, int *any_active) {
  int64_t v[4] = {err ? 1 : 0, active, p->done_docs, p->done_tokens}, s[4];
  int rc = fm_comm_allreduce(p->world, v, s, 4, FM_DT_I64, FM_OP_SUM);
  if (rc) return rc;
  *any_active = s[1] > 0;
  p->rounds++;
  double t = fm_now_s();
  if (p->log && p->deck->c.prep.progress_seconds > 0 && t - p->t_last >= p->deck->c.prep.progress_seconds) {
    double el = t - p->t0, frac = p->total_bytes ? (double)raw_bytes / (double)p->total_bytes : 1;
    char eta[32];
    fmt_dur(eta, sizeof eta, frac > 0 ? el * (1 - frac) / frac : -1);
    fprintf(p->log, "prep: %lld docs (%.0f docs/s), %lld tokens (%.0f tokens/s), %.1f MB read (%.1f MB/s), %.0f%%, ETA %s\n",
            (long long)s[2], (double)s[2] / el, (long long)s[3], (double)s[3] / el, (double)raw_bytes / 1e6,
            (double)raw_bytes / 1e6 / el, 100 * frac, eta);
    fflush(p->log);
    p->t_last = t;
  }
  if (s[0]) return FM_EDATA;
  int64_t stop = p->deck->c.prep.stop_after_windows;
  return stop && p->rounds >= stop && *any_active ? 1 : 0;
}

/* Pack and commit window w from the records collected (unless an earlier run
 * committed it), then join the round. */
static int finish_window(Prep *p, int64_t w, int active, int64_t raw_bytes, int *any) {
  char *fin = win_path(p, w, false);
  bool done = access(fin, F_OK) == 0;
  free(fin);
  int rc = done ? 0 : do_window(p, w);
  for (int64_t q = 0; q < p->nrec; q++) free(p->rec[q].text);
  p->nrec = 0;
  if (!done && !rc) {
    p->done_docs += p->stat[ST_docs_train] + p->stat[ST_docs_valid];
    p->done_tokens += p->stat[ST_tokens_train] + p->stat[ST_tokens_valid];
  }
  return sync_round(p, rc, active, raw_bytes, any);
}

/* Phase 1: stream every input; build, pack and commit this rank's windows.
 * Rounds are lock-step: in round k rank r handles window k*P + r. */
static int phase_windows(Prep *p, int64_t *nrecords, bool *stopped) {
  int64_t g = 0, raw_done = 0; /* global record index; raw bytes of finished inputs */
  int rc = 0, any = 1;
  *stopped = false;
  for (int i = 0; i < p->nin && !rc; i++) {
    FmJsonl *jr;
    rc = fm_jsonl_open(&jr, p->in[i].path, stderr);
    if (rc) break;
    const char *line;
    size_t len;
    int64_t lineno;
    int k;
    while (!rc && (k = fm_jsonl_next(jr, &line, &len, &lineno)) == 1) {
      size_t sp = 0;
      while (sp < len && (line[sp] == ' ' || line[sp] == '\t' || line[sp] == '\r')) sp++;
      if (sp == len) { /* blank lines are not records: counted, never packed */
        p->blank++;
        continue;
      }
      int64_t w = g++ / p->W;
      if (w % p->P != p->rank) continue;
      if (p->nrec == p->reccap) {
        p->reccap = 2 * p->reccap + 64;
        p->rec = fm_xrealloc(p->rec, (size_t)p->reccap * sizeof *p->rec);
      }
      p->rec[p->nrec++] = (Record){i, lineno, fm_xstrndup(line, len), len};
      if (g % p->W == 0) rc = finish_window(p, w, 1, raw_done + fm_jsonl_raw_bytes(jr), &any);
    }
    if (!rc && k < 0) rc = k;
    if (!rc) snprintf(p->in[i].sha, sizeof p->in[i].sha, "%s", fm_jsonl_sha256(jr));
    raw_done += fm_jsonl_raw_bytes(jr);
    fm_jsonl_close(jr);
  }
  if (rc == 1) {
    *stopped = true;
    return 0;
  }
  if (rc == FM_EDATA || rc == FM_EMPI) return rc; /* every rank saw it in the same round */
  if (rc) { /* a read error: join this round with it so that no rank waits */
    sync_round(p, rc, 0, raw_done, &any);
    return FM_EDATA;
  }
  int64_t w = g / p->W; /* the last, partial window */
  if (g % p->W && w % p->P == p->rank) {
    rc = finish_window(p, w, 0, raw_done, &any);
    if (rc) return rc < 0 ? rc : 0;
  }
  while (any) {
    rc = sync_round(p, 0, 0, raw_done, &any);
    if (rc) return rc < 0 ? rc : 0;
  }
  *nrecords = g;
  return 0;
}

/* ---- phase 2: placement and shards ------------------------------------ */
typedef struct WinInfo {
  int64_t rows[2], stat[NSTAT];
} WinInfo;

static int read_window_header(const Prep *p, int64_t w, WinInfo *wi) {
  char *path = win_path(p, w, false);
  FILE *f = fopen(path, "rb");
  char magic[8];
  int64_t hdr[3];
  int rc = 0;
  if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, win_magic, 8) != 0 || fread(hdr, sizeof hdr, 1, f) != 1 ||
      hdr[0] != p->R || hdr[1] != (p->pos != FM_POS_NONE) || hdr[2] != NSTAT ||
      fread(wi->stat, sizeof wi->stat, 1, f) != 1) {
    fm_err("%s: missing or not a window file of this prep\nhint: delete %s and run again", path, p->work);
    rc = FM_EDATA;
  } else {
    wi->rows[0] = wi->stat[ST_rows_train];
    wi->rows[1] = wi->stat[ST_rows_valid];
  }
  if (f) fclose(f);
  free(path);
  return rc;
}

/* Read rows [r0, r0+n) of split s of window w into the part buffers at row
 * offset `at`. */
static int read_window_rows(const Prep *p, int64_t w, const WinInfo *wi, int s, int64_t r0, int64_t n, int64_t at,
                            uint32_t *tok, uint8_t *mask, int32_t *seg, int32_t *pos) {
  char *path = win_path(p, w, false);
  FILE *f = fopen(path, "rb");
  int rc = f ? 0 : FM_EIO;
  int has_pos = p->pos != FM_POS_NONE;
  int64_t R = p->R, base = 8 + 3 * 8 + NSTAT * 8;
  int64_t per_row = R * (4 + 1 + 4 + (has_pos ? 4 : 0));
  if (s == 1) base += wi->rows[0] * per_row;
  int64_t nr = wi->rows[s];
  struct {
    void *dst;
    int64_t elem;
  } arr[4] = {{tok, 4}, {mask, 1}, {seg, 4}, {pos, 4}};
  int64_t off = base;
  for (int a = 0; a < 3 + has_pos && !rc; a++) {
    if (fseeko(f, (off_t)(off + r0 * R * arr[a].elem), SEEK_SET) ||
        fread((char *)arr[a].dst + at * R * arr[a].elem, (size_t)(R * arr[a].elem), (size_t)n, f) != (size_t)n)
      rc = FM_EIO;
    off += nr * R * arr[a].elem;
  }
  if (rc) fm_err("%s: cannot read rows %lld..%lld\nhint: delete %s and run again", path, (long long)r0,
                 (long long)r0 + (long long)n, p->work);
  if (f) fclose(f);
  free(path);
  return rc;
}

static void json_kv_str(FmStr *b, const char *k, const char *v, int comma) {
  fm_str_printf(b, "  \"%s\": ", k);
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  fm_json_write_str(m, v, strlen(v));
  fclose(m);
  fm_str_cat(b, buf);
  free(buf);
  fm_str_cat(b, comma ? ",\n" : "\n");
}

/* What every shard and manifest of split s says about its origin. */
static char *provenance(const Prep *p, int s, const int64_t *tot) {
  FmStr b;
  fm_str_init(&b);
  fm_str_cat(&b, "{\n");
  json_kv_str(&b, "fmhpc_version", FM_VERSION_STRING, 1);
  json_kv_str(&b, "split", split_names[s], 1);
  fm_str_cat(&b, "  \"counts\": {");
  for (int k = 0; k < NSTAT; k++) fm_str_printf(&b, "%s\"%s\": %lld", k ? ", " : "", stat_names[k], (long long)tot[k]);
  fm_str_cat(&b, "},\n  \"inputs\": [\n");
  for (int i = 0; i < p->nin; i++) {
    fm_str_cat(&b, "    {\"path\": ");
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    fm_json_write_str(m, p->in[i].path, strlen(p->in[i].path));
    fclose(m);
    fm_str_cat(&b, buf);
    free(buf);
    fm_str_printf(&b, ", \"bytes\": %lld, \"sha256\": \"%s\", \"split\": \"%s\"}%s\n", (long long)p->in[i].bytes,
                  p->in[i].sha, p->in[i].valid ? "valid" : "train", i + 1 < p->nin ? "," : "");
  }
  fm_str_cat(&b, "  ],\n");
  char *deck = NULL;
  size_t dn = 0;
  FILE *m = open_memstream(&deck, &dn);
  fm_deck_write(p->deck, m);
  fclose(m);
  json_kv_str(&b, "deck", deck, 0);
  free(deck);
  fm_str_cat(&b, "}\n");
  return b.s;
}

static int write_split(Prep *p, int s, int64_t nW, const WinInfo *wi, const int64_t *tot, int64_t *nshards_out) {
  int64_t R = p->R, N = 0;
  int64_t *off = fm_xmalloc((size_t)(nW + 1) * sizeof *off);
  for (int64_t w = 0; w < nW; w++) {
    off[w] = N; /* the exclusive prefix sum that places window w */
    N += wi[w].rows[s];
  }
  off[nW] = N;
  int64_t per = p->deck->c.prep.shard_tokens / R;
  if (per < 1) per = 1;
  int64_t nsh = (N + per - 1) / per;
  *nshards_out = nsh;
  bool is_h5 = !fm_strcasecmp(p->deck->c.prep.format, "h5");
  char *prov = provenance(p, s, tot);
  FmStr src;
  fm_str_init(&src);
  for (int i = 0; i < p->nin; i++) fm_str_printf(&src, "%s  %s\n", p->in[i].sha, p->in[i].path);
  int rc = 0;
  int has_pos = p->pos != FM_POS_NONE;
  for (int64_t j = 0; j < nsh && !rc; j++) {
    int64_t a = j * per, b = a + per < N ? a + per : N;
    /* this rank's windows that intersect rows [a, b) */
    int64_t nruns = 0, nrows = 0;
    for (int64_t w = p->rank; w < nW; w += p->P) {
      int64_t lo = off[w] > a ? off[w] : a, hi = off[w + 1] < b ? off[w + 1] : b;
      if (lo < hi) nruns++, nrows += hi - lo;
    }
    int64_t *rs = fm_xmalloc((size_t)(nruns + 1) * sizeof *rs), *rcnt = fm_xmalloc((size_t)(nruns + 1) * sizeof *rcnt);
    uint32_t *tok = fm_xmalloc((size_t)(nrows * R + 1) * 4);
    uint8_t *mask = fm_xmalloc((size_t)(nrows * R + 1));
    int32_t *seg = fm_xmalloc((size_t)(nrows * R + 1) * 4), *pos = has_pos ? fm_xmalloc((size_t)(nrows * R + 1) * 4) : NULL;
    int64_t k = 0, at = 0;
    for (int64_t w = p->rank; w < nW && !rc; w += p->P) {
      int64_t lo = off[w] > a ? off[w] : a, hi = off[w + 1] < b ? off[w + 1] : b;
      if (lo >= hi) continue;
      rs[k] = lo - a;
      rcnt[k++] = hi - lo;
      rc = read_window_rows(p, w, &wi[w], s, lo - off[w], hi - lo, at, tok, mask, seg, pos);
      at += hi - lo;
    }
    rc = agree(p->world, rc);
    if (!rc) {
      char name[64], *path = fm_xmalloc(strlen(p->out) + 80);
      snprintf(name, sizeof name, "%s_%05lld%s", split_names[s], (long long)j, is_h5 ? ".h5" : "");
      sprintf(path, "%s/%s", p->out, name);
      FmShardMeta m = {split_names[s], (int)j, (int)nsh, a, b - a, R - 1, fm_tok_vocab_size(p->tok), p->eos,
                       (int32_t)p->pad, fm_packing_name(p->packing), fm_posids_name(p->pos), fm_tok_hash(p->tok),
                       src.s, prov};
      FmShardPart part = {nruns, rs, rcnt, tok, mask, pos, seg};
      rc = is_h5 ? fm__h5_write_shard(path, &m, &part, p->world, stderr)
                 : fm__bin_write_shard(path, &m, &part, p->world, stderr);
      free(path);
    }
    free(rs);
    free(rcnt);
    free(tok);
    free(mask);
    free(seg);
    free(pos);
  }
  /* the manifest, by rank 0 */
  if (!rc && p->rank == 0) {
    FmStr b;
    fm_str_init(&b);
    fm_str_cat(&b, "{\n");
    json_kv_str(&b, "format", "fmhpc-packed", 1);
    fm_str_cat(&b, "  \"format_version\": 1,\n");
    json_kv_str(&b, "storage", is_h5 ? "h5" : "bin", 1);
    json_kv_str(&b, "split", split_names[s], 1);
    fm_str_printf(&b, "  \"seq_len\": %lld,\n  \"row_len\": %lld,\n  \"n_seq\": %lld,\n", (long long)(R - 1),
                  (long long)R, (long long)N);
    fm_str_printf(&b, "  \"vocab_size\": %lld,\n  \"eos_id\": %d,\n  \"pad_id\": %u,\n",
                  (long long)fm_tok_vocab_size(p->tok), p->eos, p->pad);
    json_kv_str(&b, "packing", fm_packing_name(p->packing), 1);
    json_kv_str(&b, "position_ids", fm_posids_name(p->pos), 1);
    json_kv_str(&b, "tokenizer_hash", fm_tok_hash(p->tok), 1);
    int64_t docs = tot[s ? ST_docs_valid : ST_docs_train], toks = tot[s ? ST_tokens_valid : ST_tokens_train],
            pad = tot[s ? ST_padding_valid : ST_padding_train];
    fm_str_printf(&b, "  \"documents\": %lld,\n  \"tokens\": %lld,\n  \"padding\": %lld,\n", (long long)docs,
                  (long long)toks, (long long)pad);
    fm_str_printf(&b, "  \"padding_fraction\": %.6f,\n", N ? (double)pad / (double)(N * R) : 0.0);
    fm_str_cat(&b, "  \"shards\": [\n");
    for (int64_t j = 0; j < nsh; j++) {
      int64_t a = j * per, e = a + per < N ? a + per : N;
      fm_str_printf(&b, "    {\"file\": \"%s_%05lld%s\", \"first_seq\": %lld, \"n_seq\": %lld}%s\n", split_names[s],
                    (long long)j, is_h5 ? ".h5" : "", (long long)a, (long long)(e - a), j + 1 < nsh ? "," : "");
    }
    fm_str_cat(&b, "  ],\n  \"provenance\": ");
    fm_str_cat(&b, prov);
    fm_str_cat(&b, "}\n");
    char *path = fm_xmalloc(strlen(p->out) + 64), *part = fm_xmalloc(strlen(p->out) + 80);
    sprintf(path, "%s/%s.json", p->out, split_names[s]);
    sprintf(part, "%s.partial", path);
    FILE *f = fopen(part, "wb");
    if (!f || fwrite(b.s, 1, b.len, f) != b.len || fclose(f) || rename(part, path)) {
      fm_err("%s: cannot write the manifest: %s", part, strerror(errno));
      rc = FM_EIO;
    }
    free(path);
    free(part);
    fm_str_free(&b);
  }
  rc = agree(p->world, rc);
  free(prov);
  fm_str_free(&src);
  free(off);
  return rc;
}

static void report(const Prep *p, const int64_t *tot, int64_t nW, const int64_t nsh[2], double secs) {
  FILE *o = p->log;
  if (!o) return;
  char b1[32], b2[32];
  fprintf(o, "== prep report ==\n");
  fprintf(o, "inputs       %d files, %s\n", p->nin, fm_fmt_bytes(b1, sizeof b1, (double)p->total_bytes));
  fprintf(o, "records      %s in %lld windows of %lld\n", fm_fmt_count(b1, sizeof b1, tot[ST_records]),
          (long long)nW, (long long)p->W);
  fprintf(o, "filtered     %s shorter than min_chars = %lld, %s longer than max_chars = %lld\n",
          fm_fmt_count(b1, sizeof b1, tot[ST_too_short]), (long long)p->min_chars,
          fm_fmt_count(b2, sizeof b2, tot[ST_too_long]), (long long)p->max_chars);
  fprintf(o, "bad records  %s skipped (on_bad_record = '%s')\n", fm_fmt_count(b1, sizeof b1, tot[ST_bad_skipped]),
          p->deck->c.prep.on_bad_record);
  for (int s = 0; s < 2; s++) {
    int64_t docs = tot[s ? ST_docs_valid : ST_docs_train], toks = tot[s ? ST_tokens_valid : ST_tokens_train],
            pad = tot[s ? ST_padding_valid : ST_padding_train], rows = tot[s ? ST_rows_valid : ST_rows_train],
            dropped = tot[s ? ST_dropped_valid : ST_dropped_train];
    if (s == 1 && docs == 0 && rows == 0) continue;
    fprintf(o, "%-5s        %s documents, %s tokens, %lld rows of %lld, padding %lld (%.4f%%), %lld shard%s\n",
            split_names[s], fm_fmt_count(b1, sizeof b1, docs), fm_fmt_count(b2, sizeof b2, toks), (long long)rows,
            (long long)p->R, (long long)pad, rows ? 100.0 * (double)pad / (double)(rows * p->R) : 0.0,
            (long long)nsh[s], nsh[s] == 1 ? "" : "s");
    if (dropped)
      fprintf(o, "             %lld documents longer than a row dropped by packing = 'bfd' (%lld tokens)\n"
                 "             hint: packing = 'bfd_split' keeps them\n",
              (long long)dropped, (long long)tot[s ? ST_dropped_tok_valid : ST_dropped_tok_train]);
  }
  fprintf(o, "packing      %s, position ids %s, seq_len %lld, tokenizer %s\n", fm_packing_name(p->packing),
          fm_posids_name(p->pos), (long long)(p->R - 1), fm_tok_hash(p->tok));
  fprintf(o, "output       %s/train.json%s (%s)\n", p->out, nsh[1] || tot[ST_docs_valid] ? ", valid.json" : "",
          p->deck->c.prep.format);
  fprintf(o, "time         %.1f s\n", secs);
  fflush(o);
}

/* The prep settings a resumed run must share with the killed one. */
static void fingerprint(const Prep *p, char hex[65]) {
  const FmConfig *c = &p->deck->c;
  FmStr b;
  fm_str_init(&b);
  fm_str_printf(&b, "tok=%s seq=%lld pack=%s pos=%s mode=%s field=%s msg=%s tmpl=%s min=%lld max=%lld bad=%s "
                    "vf=%.17g W=%lld seed=%lld bos=%s fmt=%s\n",
                fm_tok_hash(p->tok), (long long)c->prep.seq_len, c->prep.packing, c->prep.position_ids, c->prep.mode,
                c->prep.text_field, c->prep.messages_field, c->prep.chat_template, (long long)c->prep.min_chars,
                (long long)c->prep.max_chars, c->prep.on_bad_record, c->prep.valid_fraction,
                (long long)c->prep.window_docs, (long long)c->run.seed, c->prep.template_bos, "v1");
  for (int i = 0; i < c->prep.sections_n; i++) fm_str_printf(&b, "sec=%s\n", c->prep.sections[i]);
  for (int i = 0; i < c->prep.train_on_n; i++) fm_str_printf(&b, "train=%s\n", c->prep.train_on[i]);
  for (int i = 0; i < c->prep.role_names_n; i++)
    fm_str_printf(&b, "role=%s|%s|%s\n", c->prep.role_names[i], i < c->prep.role_prefix_n ? c->prep.role_prefix[i] : "",
                  i < c->prep.role_suffix_n ? c->prep.role_suffix[i] : "");
  for (int i = 0; i < p->nin; i++) fm_str_printf(&b, "in=%d %lld %s\n", p->in[i].valid, (long long)p->in[i].bytes, p->in[i].path);
  uint8_t d[32];
  fm_sha256(b.s, b.len, d);
  fm_hex(d, 32, hex);
  fm_str_free(&b);
}

/* Rank 0 prepares the output and work directories and checks that committed
 * windows there come from the same prep. */
static int prepare_dirs(Prep *p) {
  int rc = 0;
  p->out = fm_xstrdup(p->deck->c.prep.output);
  p->work = fm_xmalloc(strlen(p->out) + 16);
  sprintf(p->work, "%s/.prep_work", p->out);
  if (p->rank == 0) {
    char fp[65], old[80] = "", *fpath = fm_xmalloc(strlen(p->work) + 16);
    fingerprint(p, fp);
    sprintf(fpath, "%s/fingerprint", p->work);
    if (fm_mkdirs(p->work)) {
      fm_err("%s: cannot create: %s\nhint: &prep output must be a writable directory", p->work, strerror(errno));
      rc = FM_EIO;
    } else {
      FILE *f = fopen(fpath, "r");
      if (f) {
        if (!fgets(old, sizeof old, f)) old[0] = 0;
        fclose(f);
        old[strcspn(old, "\n")] = 0;
        if (strcmp(old, fp) != 0) {
          fm_err("%s: committed windows of a different prep (deck, tokenizer or inputs changed)\n"
                 "hint: delete %s to start over, or run with the deck that made them",
                 fpath, p->work);
          rc = FM_EDATA;
        } else if (p->log) {
          fprintf(p->log, "prep: resuming from the committed windows in %s\n", p->work);
        }
      } else {
        f = fopen(fpath, "w");
        if (!f || fprintf(f, "%s\n", fp) < 0 || fclose(f)) rc = FM_EIO;
      }
    }
    free(fpath);
  }
  return agree(p->world, rc);
}

static void remove_work(const Prep *p, int64_t nW) {
  if (p->rank != 0) return;
  for (int64_t w = 0; w < nW; w++) {
    char *s = win_path(p, w, false);
    unlink(s);
    free(s);
  }
  char *fp = fm_xmalloc(strlen(p->work) + 16);
  sprintf(fp, "%s/fingerprint", p->work);
  unlink(fp);
  free(fp);
  rmdir(p->work);
}

static void prep_free(Prep *p) {
  if (p->tok) fm_tok_free(p->tok);
  fm_template_free(&p->tmpl);
  for (int i = 0; i < p->nsec; i++) {
    free(p->sec[i].field);
    free(p->sec[i].role);
  }
  for (int i = 0; i < p->nin; i++) free(p->in[i].path);
  free(p->in);
  free(p->out);
  free(p->work);
  free(p->rec);
  free(p->ids);
  free(p->mask);
  free(p->doff[0]);
  free(p->doff[1]);
}

int fm_prep_run(const FmDeck *deck, FmComm *world, FILE *log) {
  Prep p = {0};
  p.deck = deck;
  p.world = world;
  p.rank = world->rank;
  p.P = world->size;
  p.log = world->rank == 0 ? log : NULL;
  p.t0 = p.t_last = fm_now_s();
  FILE *err = world->rank == 0 ? stderr : NULL;
  int rc = agree(world, configure(&p, err));
  if (!rc) rc = expand_inputs(&p);
  if (!rc) {
    int lr = fm_tok_load(&p.tok, deck->c.prep.tokenizer, err);
    if (lr && err) fprintf(err, "hint: &prep tokenizer names a tokenizer.json, a *.tiktoken file or a GPT-2 directory\n");
    rc = agree(world, lr);
  }
  if (!rc) {
    p.eos = fm_tok_eos_id(p.tok);
    p.pad = 0;
    if (p.eos < 0) {
      if (err) fprintf(err, "%s: the tokenizer has no end-of-document token\nhint: add '<|endoftext|>' as a special token\n",
                       deck->c.prep.tokenizer);
      rc = FM_EDATA;
    }
  }
  if (!rc) rc = prepare_dirs(&p);
  if (!rc && p.log) {
    char b[32];
    fprintf(p.log, "prep: %d input files (%s), %d rank%s, windows of %lld records, seq_len %lld, packing %s\n", p.nin,
            fm_fmt_bytes(b, sizeof b, (double)p.total_bytes), p.P, p.P == 1 ? "" : "s", (long long)p.W,
            (long long)(p.R - 1), fm_packing_name(p.packing));
    fflush(p.log);
  }
  int64_t nrec = 0;
  bool stopped = false;
  if (!rc) rc = phase_windows(&p, &nrec, &stopped);
  if (!rc && stopped) {
    if (p.log)
      fprintf(p.log, "prep: stopped after %lld window rounds (stop_after_windows); rerun the same deck to resume\n",
              (long long)deck->c.prep.stop_after_windows);
    rc = FM_EIO;
  }
  if (!rc && nrec == 0) {
    if (err) fprintf(err, "prep: the inputs hold no records\nhint: check &prep inputs\n");
    rc = FM_EDATA;
  }
  if (rc) {
    prep_free(&p);
    return rc;
  }
  /* phase 2: every window's row counts and stats, placed by prefix sums */
  int64_t nW = (nrec + p.W - 1) / p.W;
  WinInfo *wi = fm_xcalloc((size_t)nW, sizeof *wi), *sum = fm_xcalloc((size_t)nW, sizeof *sum);
  for (int64_t w = p.rank; w < nW && !rc; w += p.P) rc = read_window_header(&p, w, &wi[w]);
  rc = agree(world, rc);
  if (!rc) rc = fm_comm_allreduce(world, wi, sum, nW * (int64_t)(sizeof *wi / sizeof(int64_t)), FM_DT_I64, FM_OP_SUM);
  int64_t tot[NSTAT] = {0}, nsh[2] = {0, 0};
  for (int64_t w = 0; w < nW; w++)
    for (int k = 0; k < NSTAT; k++) tot[k] += sum[w].stat[k];
  tot[ST_blank] = p.blank; /* every rank read every line */
  bool want_valid = p.valid_fraction > 0 || tot[ST_docs_valid] > 0;
  for (int i = 0; i < p.nin; i++) want_valid |= p.in[i].valid;
  for (int s = 0; s < (want_valid ? 2 : 1) && !rc; s++) rc = write_split(&p, s, nW, sum, tot, &nsh[s]);
  if (!rc) {
    report(&p, tot, nW, nsh, fm_now_s() - p.t0);
    fm_comm_barrier(world);
    remove_work(&p, nW);
  }
  free(wi);
  free(sum);
  prep_free(&p);
  return rc;
}
