/* dedup_task.c: task='dedup' (&dedup). Reads JSONL records (globs, sorted;
 * blank lines skipped; record i is the i-th non-blank line overall), runs the
 * cleaning filters and MinHash on each, decides keep/drop in input order, and
 * writes the kept lines byte-identical, a report, and optionally the dropped
 * records with their reason. The pure parts live in minhash.c.
 *
 * Parallel split and why the result does not depend on the rank count:
 *   1. every rank streams every record (cheap); record i is cleaned and signed
 *      by rank i % P only;
 *   2. (reason, signature) rows are all-gathered (slot i / P of rank i % P):
 *      8 * (K + 1) bytes per record on every rank (1 KiB at K = 128, so 10M
 *      records need 10 GiB per rank: split larger corpora into runs);
 *   3. rank 0 walks records in input order: a record that passed the filters
 *      is a DUPLICATE of the earliest earlier KEPT record j that shares at
 *      least one LSH band key with it and whose estimate is >= threshold;
 *      otherwise it is kept and its band keys are indexed. The walk sees the
 *      same rows for any P, so the decisions are the same bits;
 *   4. rank 0 streams the inputs again and writes the outputs (.partial, then
 *      renamed). The status is broadcast so every rank returns the same. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/clean.h"
#include "fmhpc/json.h"
#include "fmhpc/progress.h"

typedef struct Dedup {
  const FmDeck *deck;
  FmMinHash mh;
  FmCleanRules rules;
  char **files;
  int nfiles;
  /* per record, on every rank: where it is (file index, line) */
  int64_t n, cap;
  int32_t *file_of;
  int64_t *line_of;
} Dedup;

static int nonempty(const char *s) { return s && s[0]; }

static int check_deck(Dedup *d, FILE *err) {
  const FmDeck *dk = d->deck;
  const FmConfig *c = &dk->c;
  int rc = 0, ninputs = 0, nfields = 0;
  for (int i = 0; i < c->dedup.inputs_n; i++) ninputs += nonempty(c->dedup.inputs[i]);
  for (int i = 0; i < c->dedup.fields_n; i++) nfields += nonempty(c->dedup.fields[i]);
  if (ninputs == 0) {
    fm_deck_error(dk, err, FM_KEY_dedup_inputs, "task = 'dedup' needs input globs");
    if (err) fprintf(err, "hint: inputs = 'data/sft/*.jsonl'\n");
    rc = FM_EDECK;
  }
  if (nfields == 0) {
    fm_deck_error(dk, err, FM_KEY_dedup_fields, "needs at least one JSON field to compare");
    if (err) fprintf(err, "hint: fields = 'prompt', 'response'\n");
    rc = FM_EDECK;
  }
  if (c->dedup.bands * c->dedup.rows != c->dedup.num_perm) {
    fm_deck_error(dk, err, FM_KEY_dedup_bands, "bands * rows = %lld * %lld must equal num_perm = %lld",
                  (long long)c->dedup.bands, (long long)c->dedup.rows, (long long)c->dedup.num_perm);
    if (err) fprintf(err, "hint: for num_perm = 128 and threshold 0.7: bands = 32, rows = 4\n");
    rc = FM_EDECK;
  }
  if (!nonempty(c->dedup.output)) {
    fm_deck_error(dk, err, FM_KEY_dedup_output, "needs an output file");
    rc = FM_EDECK;
  }
  if (rc) return rc;
  fm_minhash_init(&d->mh, (int)c->dedup.num_perm, (int)c->dedup.bands, (int)c->dedup.rows, (uint64_t)c->dedup.seed);
  d->rules = (FmCleanRules){.min_chars = c->dedup.min_chars,
                            .max_char_repeat_ratio = c->dedup.max_char_repeat_ratio,
                            .max_word_repeat_ratio = c->dedup.max_word_repeat_ratio,
                            .drop_html = c->dedup.drop_html,
                            .drop_urls = c->dedup.drop_urls,
                            .drop_markdown = c->dedup.drop_markdown};
  return 0;
}

/* Rank 0 expands the globs (sorted by glob(3)); the list is broadcast. */
static int find_files(Dedup *d, FmComm *world, FILE *err) {
  FmDeckKeyErr m = {d->deck, err, FM_KEY_dedup_inputs};
  FmFileList fl;
  int rc = fm_comm_glob(world, d->deck->c.dedup.inputs, d->deck->c.dedup.inputs_n, fm_deck_glob_miss, &m, &fl);
  if (rc) return rc;
  d->files = fl.path;
  d->nfiles = fl.n;
  free(fl.bytes);
  return 0;
}

/* Rank 0: no two of output, dropped and report may be one file, and none may
 * be an input (a report written over the input replaced its records; output
 * equal to dropped mixed both into one file). The status is broadcast. */
static int check_paths(Dedup *d, FmComm *world, FILE *err) {
  const FmConfig *c = &d->deck->c;
  const struct {
    int key;
    const char *path;
  } out[] = {{FM_KEY_dedup_output, c->dedup.output},
             {FM_KEY_dedup_dropped, c->dedup.dropped},
             {FM_KEY_dedup_report, c->dedup.report}};
  int32_t rc = 0;
  for (int i = 0; i < 3 && world->rank == 0; i++) {
    if (!nonempty(out[i].path)) continue;
    for (int j = 0; j < i; j++)
      if (nonempty(out[j].path) && fm_same_file(out[i].path, out[j].path)) {
        fm_deck_error(d->deck, err, out[i].key, "is the same file as &dedup %s: each output needs its own file",
                      fm_deck_key_info(out[j].key)->name);
        rc = FM_EDECK;
      }
    for (int f = 0; f < d->nfiles; f++)
      if (fm_same_file(out[i].path, d->files[f])) {
        fm_deck_error(d->deck, err, out[i].key,
                      "is an input of this dedup (%s): writing it would replace the records it reads", d->files[f]);
        if (err) fprintf(err, "hint: write the %s to another file\n", fm_deck_key_info(out[i].key)->name);
        rc = FM_EDECK;
        break;
      }
  }
  fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0);
  return rc;
}

/* Visit every non-blank line of every file in order: fn(ctx, i, file, line, text). */
typedef int (*RecordFn)(Dedup *d, void *ctx, int64_t i, int file, int64_t lineno, const char *s, size_t n);
static int each_record(Dedup *d, RecordFn fn, void *ctx) {
  int64_t i = 0;
  for (int f = 0; f < d->nfiles; f++) {
    FmJsonl *r;
    int rc = fm_jsonl_open(&r, d->files[f], stderr);
    if (rc) return rc;
    const char *line;
    size_t n;
    int64_t lineno;
    int got;
    while ((got = fm_jsonl_next(r, &line, &n, &lineno)) > 0) {
      size_t k = 0;
      while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
      if (k == n) continue;
      rc = fn(d, ctx, i++, f, lineno, line, n);
      if (rc) break;
    }
    fm_jsonl_close(r);
    if (got < 0) return got;
    if (rc) return rc;
  }
  return 0;
}

/* The compared text of a record: the deck's fields joined by '\n'. */
static int record_text(const Dedup *d, const char *file, int64_t lineno, const char *s, size_t n, FmStr *text) {
  const FmConfig *c = &d->deck->c;
  FmJsonDoc doc;
  FmJsonError e;
  if (fm_json_parse(&doc, s, n, 64, &e)) {
    fm_err("%s:%lld:%d: malformed JSON: %s\nhint: every non-blank line must be one JSON object", file,
           (long long)lineno, e.col, e.msg);
    return FM_EDATA;
  }
  text->len = 0;
  int first = 1, rc = 0;
  for (int k = 0; k < c->dedup.fields_n && !rc; k++) {
    if (!nonempty(c->dedup.fields[k])) continue;
    const FmJson *v = fm_json_get(&doc.root, c->dedup.fields[k]);
    if (!v || v->type != FM_JSON_STR) {
      fm_err("%s:%lld: record has no string field '%s'\nhint: set &dedup fields to the record's text fields", file,
             (long long)lineno, c->dedup.fields[k]);
      rc = FM_EDATA;
      break;
    }
    if (!first) fm_str_catn(text, "\n", 1);
    fm_str_catn(text, v->s, v->len);
    first = 0;
  }
  fm_json_free(&doc);
  return rc;
}

typedef struct SignCtx {
  int rank, size;
  int64_t slot_cap;
  uint64_t *rows; /* (slot_cap, K + 1): reason, sig */
  FmStr text;
  FmProgress pg; /* rank 0: records read (every rank reads them all) */
} SignCtx;

static int sign_one(Dedup *d, void *vctx, int64_t i, int file, int64_t lineno, const char *s, size_t n) {
  SignCtx *c = vctx;
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 1024;
    d->file_of = fm_xrealloc(d->file_of, (size_t)d->cap * sizeof *d->file_of);
    d->line_of = fm_xrealloc(d->line_of, (size_t)d->cap * sizeof *d->line_of);
  }
  d->file_of[d->n] = file;
  d->line_of[d->n++] = lineno;
  fm_progress_tick(&c->pg, d->n);
  if (i % c->size != c->rank) return 0;
  int64_t slot = i / c->size;
  int K = d->mh.K;
  if (slot >= c->slot_cap) {
    c->slot_cap = c->slot_cap ? 2 * c->slot_cap : 256;
    c->rows = fm_xrealloc(c->rows, (size_t)c->slot_cap * (size_t)(K + 1) * sizeof *c->rows);
  }
  int rc = record_text(d, d->files[file], lineno, s, n, &c->text);
  if (rc) return rc;
  uint64_t *row = c->rows + slot * (K + 1);
  row[0] = (uint64_t)fm_dedup_clean(&d->rules, c->text.s ? c->text.s : "", c->text.len);
  if (row[0] == FM_DROP_KEPT)
    fm_minhash_text(&d->mh, c->text.s ? c->text.s : "", c->text.len, row + 1);
  else
    memset(row + 1, 0, (size_t)K * sizeof *row);
  return 0;
}

/* ---- the in-order decision (rank 0) ----------------------------------- */
/* Band key -> list of kept records, chained through node arrays. */
typedef struct BandIndex {
  uint64_t *key;
  int64_t *head; /* -1: empty slot */
  size_t cap, used;
  int64_t *node_rec, *node_next;
  int64_t nnodes, node_cap;
} BandIndex;

static size_t band_slot(const BandIndex *b, uint64_t key) {
  size_t p = (size_t)key & (b->cap - 1);
  while (b->head[p] >= 0 && b->key[p] != key) p = (p + 1) & (b->cap - 1);
  return p;
}

static void band_grow(BandIndex *b) {
  BandIndex old = *b;
  b->cap = old.cap ? 2 * old.cap : 4096;
  b->key = fm_xmalloc(b->cap * sizeof *b->key);
  b->head = fm_xmalloc(b->cap * sizeof *b->head);
  for (size_t p = 0; p < b->cap; p++) b->head[p] = -1;
  for (size_t p = 0; p < old.cap; p++)
    if (old.head[p] >= 0) {
      size_t q = band_slot(b, old.key[p]);
      b->key[q] = old.key[p];
      b->head[q] = old.head[p];
    }
  free(old.key);
  free(old.head);
}

static void band_add(BandIndex *b, uint64_t key, int64_t rec) {
  if (2 * (b->used + 1) > b->cap) band_grow(b);
  size_t p = band_slot(b, key);
  if (b->head[p] < 0) {
    b->key[p] = key;
    b->used++;
  }
  if (b->nnodes == b->node_cap) {
    b->node_cap = b->node_cap ? 2 * b->node_cap : 4096;
    b->node_rec = fm_xrealloc(b->node_rec, (size_t)b->node_cap * sizeof *b->node_rec);
    b->node_next = fm_xrealloc(b->node_next, (size_t)b->node_cap * sizeof *b->node_next);
  }
  b->node_rec[b->nnodes] = rec;
  b->node_next[b->nnodes] = b->head[p];
  b->head[p] = b->nnodes++;
}

typedef struct Decision {
  uint8_t *reason; /* FmDropReason per record */
  int64_t *dup_of; /* duplicates: the kept record; else -1 */
  double *dup_est; /* its estimate */
  int64_t count[FM_DROP_COUNT];
  int64_t pairs_checked;
} Decision;

/* rows: record i at rank i % P, slot i / P, of `slots` slots per rank. */
static void decide(const Dedup *d, const uint64_t *rows, int64_t slots, int P, Decision *out, FILE *log) {
  int K = d->mh.K, nb = d->mh.bands;
  int need = (int)ceil(d->deck->c.dedup.threshold * K - 1e-9); /* est >= threshold <=> equal minima >= need */
  int64_t N = d->n;
  BandIndex bi = {0};
  band_grow(&bi);
  int64_t *stamp = fm_xmalloc((size_t)(N > 0 ? N : 1) * sizeof *stamp);
  uint64_t *keys = fm_xmalloc((size_t)nb * sizeof *keys);
  out->reason = fm_xmalloc((size_t)(N > 0 ? N : 1));
  out->dup_of = fm_xmalloc((size_t)(N > 0 ? N : 1) * sizeof *out->dup_of);
  out->dup_est = fm_xmalloc((size_t)(N > 0 ? N : 1) * sizeof *out->dup_est);
  FmProgress pg;
  fm_progress_start(&pg, log, "dedup (deciding)", "records", N, -1);
#define ROW(i) (rows + ((int64_t)((i) % P) * slots + (i) / P) * (K + 1))
  for (int64_t i = 0; i < N; i++) {
    fm_progress_tick(&pg, i);
    const uint64_t *row = ROW(i);
    stamp[i] = -1;
    out->dup_of[i] = -1;
    out->dup_est[i] = 0.0;
    FmDropReason why = (FmDropReason)row[0];
    if (why == FM_DROP_KEPT) {
      fm_minhash_bands(&d->mh, row + 1, keys);
      int64_t best = -1;
      int best_eq = 0;
      for (int b = 0; b < nb; b++) {
        if (!bi.cap) continue;
        size_t p = band_slot(&bi, keys[b]);
        for (int64_t nd = bi.head[p]; nd >= 0; nd = bi.node_next[nd]) {
          int64_t j = bi.node_rec[nd];
          if (stamp[j] == i) continue;
          stamp[j] = i;
          out->pairs_checked++;
          const uint64_t *rj = ROW(j);
          int eq = 0;
          for (int k = 0; k < K; k++) eq += rj[1 + k] == row[1 + k];
          if (eq >= need && (best < 0 || j < best)) {
            best = j;
            best_eq = eq;
          }
        }
      }
      if (best >= 0) {
        why = FM_DROP_DUPLICATE;
        out->dup_of[i] = best;
        out->dup_est[i] = (double)best_eq / K;
      } else {
        for (int b = 0; b < nb; b++) band_add(&bi, keys[b], i);
      }
    }
#undef ROW
    out->reason[i] = (uint8_t)why;
    out->count[why]++;
  }
  free(keys);
  free(stamp);
  free(bi.key);
  free(bi.head);
  free(bi.node_rec);
  free(bi.node_next);
}

/* ---- outputs (rank 0) --------------------------------------------------- */
typedef struct WriteCtx {
  const Decision *dec;
  FILE *kept, *dropped;
} WriteCtx;

static int write_one(Dedup *d, void *vctx, int64_t i, int file, int64_t lineno, const char *s, size_t n) {
  WriteCtx *w = vctx;
  FmDropReason why = (FmDropReason)w->dec->reason[i];
  if (why == FM_DROP_KEPT) {
    fwrite(s, 1, n, w->kept);
    fputc('\n', w->kept);
    return 0;
  }
  if (!w->dropped) return 0;
  fprintf(w->dropped, "{\"file\": ");
  fm_json_write_str(w->dropped, d->files[file], strlen(d->files[file]));
  fprintf(w->dropped, ", \"line\": %lld, \"record\": %lld, \"reason\": \"%s\"", (long long)lineno, (long long)i,
          fm_drop_name(why));
  int64_t j = w->dec->dup_of[i];
  if (j >= 0) {
    fprintf(w->dropped, ", \"duplicate_of\": {\"file\": ");
    fm_json_write_str(w->dropped, d->files[d->file_of[j]], strlen(d->files[d->file_of[j]]));
    fprintf(w->dropped, ", \"line\": %lld, \"record\": %lld}, \"similarity\": %.6f", (long long)d->line_of[j],
            (long long)j, w->dec->dup_est[i]);
  }
  fprintf(w->dropped, ", \"json\": %.*s}\n", (int)n, s);
  return 0;
}

static FILE *open_partial(const char *path, FmStr *part) {
  fm_str_init(part);
  fm_str_printf(part, "%s.partial", path);
  if (fm_mkdirs_parent(path)) return NULL;
  return fopen(part->s, "w");
}

/* Close f (its .partial); FM_EIO with the message, the .partial removed, on a write error. */
static int finish(FILE *f, const FmStr *part, const char *path) {
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (!bad) return 0;
  fm_err("%s: cannot write: %s\nhint: check the directory exists and has space", path, strerror(errno));
  unlink(part->s);
  return FM_EIO;
}

/* Move a finished .partial onto its path; the .partial removed on failure. */
static int publish(const FmStr *part, const char *path) {
  if (rename(part->s, path) == 0) return 0;
  fm_err("%s: cannot write: %s\nhint: check the directory exists and has space", path, strerror(errno));
  unlink(part->s);
  return FM_EIO;
}

static int commit(FILE *f, const FmStr *part, const char *path) {
  int rc = finish(f, part, path);
  return rc ? rc : publish(part, path);
}

static int write_outputs(Dedup *d, const Decision *dec) {
  const FmConfig *c = &d->deck->c;
  FmStr pk, pd;
  WriteCtx w = {.dec = dec};
  w.kept = open_partial(c->dedup.output, &pk);
  if (!w.kept) {
    fm_err("%s: cannot create: %s\nhint: check &dedup output", c->dedup.output, strerror(errno));
    fm_str_free(&pk);
    return FM_EIO;
  }
  fm_str_init(&pd);
  if (nonempty(c->dedup.dropped)) {
    w.dropped = open_partial(c->dedup.dropped, &pd);
    if (!w.dropped) {
      fm_err("%s: cannot create: %s\nhint: check &dedup dropped", c->dedup.dropped, strerror(errno));
      fclose(w.kept);
      fm_str_free(&pk);
      fm_str_free(&pd);
      return FM_EIO;
    }
  }
  int rc = each_record(d, write_one, &w);
  /* both finished before either is moved in: a failed kept file leaves no new dropped file beside the old kept one */
  int rk = finish(w.kept, &pk, c->dedup.output);
  int rd = w.dropped ? finish(w.dropped, &pd, c->dedup.dropped) : 0;
  if (rc || rk || rd) {
    if (!rk) unlink(pk.s);
    if (w.dropped && !rd) unlink(pd.s);
  } else {
    rk = publish(&pk, c->dedup.output);
    if (w.dropped && !rk)
      rd = publish(&pd, c->dedup.dropped);
    else if (w.dropped)
      unlink(pd.s);
  }
  fm_str_free(&pk);
  fm_str_free(&pd);
  return rc ? rc : rk ? rk : rd;
}

static int write_report(const Dedup *d, const Decision *dec, double secs, int P, FILE *log) {
  const FmConfig *c = &d->deck->c;
  double rps = secs > 0 ? (double)d->n / secs : 0.0;
  fprintf(log, "dedup: %lld records from %d files in %.3f s (%.0f records/s, %d ranks)\n", (long long)d->n, d->nfiles,
          secs, rps, P);
  fprintf(log, "dedup: MinHash K = %d (char 3-grams of code points), LSH %d bands x %d rows, threshold %.3f\n", d->mh.K,
          d->mh.bands, d->mh.rows, c->dedup.threshold);
  for (int r = 0; r < FM_DROP_COUNT; r++)
    fprintf(log, "dedup:   %-16s %10lld\n", fm_drop_name((FmDropReason)r), (long long)dec->count[r]);
  fprintf(log, "dedup: %lld candidate pairs verified; wrote %s\n", (long long)dec->pairs_checked, c->dedup.output);
  if (!nonempty(c->dedup.report)) return 0;
  FmStr part;
  FILE *f = open_partial(c->dedup.report, &part);
  if (!f) {
    fm_err("%s: cannot create: %s\nhint: check &dedup report", c->dedup.report, strerror(errno));
    fm_str_free(&part);
    return FM_EIO;
  }
  fprintf(f, "{\n  \"records\": %lld,\n  \"kept\": %lld,\n  \"dropped\": {", (long long)d->n,
          (long long)dec->count[FM_DROP_KEPT]);
  for (int r = 1; r < FM_DROP_COUNT; r++)
    fprintf(f, "%s\"%s\": %lld", r > 1 ? ", " : "", fm_drop_name((FmDropReason)r), (long long)dec->count[r]);
  fprintf(f, "},\n  \"candidate_pairs\": %lld,\n  \"seconds\": %.6f,\n  \"records_per_s\": %.1f,\n  \"ranks\": %d,\n",
          (long long)dec->pairs_checked, secs, rps, P);
  fprintf(f, "  \"num_perm\": %d,\n  \"bands\": %d,\n  \"rows\": %d,\n  \"threshold\": %.17g,\n  \"seed\": %lld,\n",
          d->mh.K, d->mh.bands, d->mh.rows, c->dedup.threshold, (long long)c->dedup.seed);
  fprintf(f, "  \"shingles\": \"char 3-grams of code points, ASCII-lowercased, whitespace collapsed\",\n");
  fprintf(f, "  \"inputs\": [");
  for (int i = 0; i < d->nfiles; i++) {
    fprintf(f, "%s", i ? ", " : "");
    fm_json_write_str(f, d->files[i], strlen(d->files[i]));
  }
  fprintf(f, "],\n  \"output\": ");
  fm_json_write_str(f, c->dedup.output, strlen(c->dedup.output));
  fprintf(f, "\n}\n");
  int rc = commit(f, &part, c->dedup.report);
  fm_str_free(&part);
  return rc;
}

static void dedup_free(Dedup *d) {
  for (int i = 0; i < d->nfiles; i++) free(d->files[i]);
  free(d->files);
  free(d->file_of);
  free(d->line_of);
}

int fm_dedup_task(const FmDeck *deck, FmComm *world, FILE *log) {
  double t0 = fm_now_s();
  FILE *err = world->rank == 0 ? stderr : NULL;
  int P = world->size;
  Dedup d = {.deck = deck};
  int32_t rc = check_deck(&d, err);
  if (!rc) rc = find_files(&d, world, err);
  if (!rc) rc = check_paths(&d, world, err);
  if (rc) {
    dedup_free(&d);
    return rc;
  }
  SignCtx sc = {.rank = world->rank, .size = P};
  fm_progress_start(&sc.pg, world->rank == 0 ? log : NULL, "dedup (reading and signing)", "records", 0, -1);
  fm_str_init(&sc.text);
  int32_t mine = each_record(&d, sign_one, &sc), all = 0;
  fm_comm_allreduce(world, &mine, &all, 1, FM_DT_I32, FM_OP_MIN);
  fm_str_free(&sc.text);
  if (all) {
    free(sc.rows);
    dedup_free(&d);
    return all;
  }
  int K = d.mh.K;
  int64_t slots = (d.n + P - 1) / P, row_len = K + 1;
  uint64_t *send = fm_xcalloc((size_t)(slots > 0 ? slots : 1) * (size_t)row_len, sizeof *send);
  int64_t mine_n = d.n > world->rank ? (d.n - world->rank + P - 1) / P : 0;
  if (mine_n) memcpy(send, sc.rows, (size_t)(mine_n * row_len) * sizeof *send);
  free(sc.rows);
  uint64_t *rows = fm_xmalloc((size_t)(P * (slots > 0 ? slots : 1)) * (size_t)row_len * sizeof *rows);
  rc = fm_comm_allgather(world, send, rows, slots * row_len, FM_DT_U64);
  free(send);
  if (!rc && world->rank == 0) {
    Decision dec = {0};
    decide(&d, rows, slots, P, &dec, log);
    rc = write_outputs(&d, &dec);
    if (!rc) rc = write_report(&d, &dec, fm_now_s() - t0, P, log);
    free(dec.reason);
    free(dec.dup_of);
    free(dec.dup_est);
  }
  free(rows);
  fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0);
  dedup_free(&d);
  return rc;
}
