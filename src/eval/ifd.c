/* ifd.c: task='ifd', the instruction-following difficulty of Li et al. 2023
 * ("From Quantity to Quality", Cherry LLM): IFD = L_cond / L_uncond, the mean
 * loss of a response given its instruction over the mean loss of the
 * response alone. Here: the two token layouts (eval.h states them exactly),
 * one record per forward (b = 1, one row of T), records round-robin over the
 * ranks, results gathered and written by rank 0 in record order, and the
 * summary statistics (with a second model: differences and Pearson r). The
 * store-based loop and task='eval' are in eval.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/eval.h"
#include "fmhpc/interop.h"
#include "fmhpc/json.h"

/* ---- token layouts ------------------------------------------------------ */
typedef struct Ids {
  int32_t *v;
  int64_t n, cap;
} Ids;

static int ids_text(Ids *b, const FmTokenizer *tok, const char *s, size_t n, bool special) {
  const int64_t k = fm_tok_encode(tok, s, n, special, &b->v, &b->n, &b->cap);
  return k < 0 ? (int)k : 0;
}

static void ids_push(Ids *b, const int32_t *src, int64_t k) {
  if (k <= 0) return;
  if (!b->v || b->n + k > b->cap) {
    b->cap = 2 * (b->n + k) + 16;
    b->v = fm_xrealloc(b->v, (size_t)b->cap * sizeof *b->v);
  }
  memcpy(b->v + b->n, src, (size_t)k * sizeof *src);
  b->n += k;
}

int fm_ifd_forms(FmIfdForms *f, const FmTokenizer *tok, const FmTemplate *t, const char *instr, size_t ilen,
                 const char *resp, size_t rlen, int64_t max_len) {
  memset(f, 0, sizeof *f);
  char *pu = NULL, *su = NULL, *pa = NULL, *sa = NULL;
  const int32_t eos = fm_tok_eos_id(tok);
  int rc = fm_template_role(t, "user", &pu, &su) || fm_template_role(t, "assistant", &pa, &sa) ? FM_EINVAL : 0;
  Ids start = {0}, ctx = {0}, sc = {0};
  if (!rc && eos < 0) rc = FM_EINVAL;
  if (!rc && t->bos && t->bos[0]) rc = ids_text(&start, tok, t->bos, strlen(t->bos), true);
  else if (!rc) ids_push(&start, &eos, 1);
  if (!rc) ids_push(&ctx, start.v, start.n);
  if (!rc) rc = ids_text(&ctx, tok, pu, strlen(pu), true);
  if (!rc) rc = ids_text(&ctx, tok, instr, ilen, false);
  if (!rc) rc = ids_text(&ctx, tok, su, strlen(su), true);
  if (!rc) rc = ids_text(&ctx, tok, pa, strlen(pa), true);
  if (!rc) rc = ids_text(&sc, tok, resp, rlen, false);
  if (!rc) rc = ids_text(&sc, tok, sa, strlen(sa), true);
  if (!rc) ids_push(&sc, &eos, 1);
  if (!rc) {
    int64_t k = max_len - ctx.n;
    k = k < sc.n ? k : sc.n;
    k = k > 0 ? k : 0;
    f->n_full = sc.n;
    f->n_scored = k;
    f->ctx_cond = ctx.n;
    f->ctx_uncond = start.n;
    ids_push(&ctx, sc.v, k);
    ids_push(&start, sc.v, k);
    f->cond = ctx.v, f->n_cond = ctx.n;
    f->uncond = start.v, f->n_uncond = start.n;
    ctx.v = start.v = NULL;
  }
  free(ctx.v);
  free(start.v);
  free(sc.v);
  free(pu);
  free(su);
  free(pa);
  free(sa);
  return rc;
}

void fm_ifd_forms_free(FmIfdForms *f) {
  free(f->cond);
  free(f->uncond);
  memset(f, 0, sizeof *f);
}

/* ---- statistics --------------------------------------------------------- */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void fm_ifd_stats(FmIfdStats *s, const double *x, int64_t n) {
  double *v = fm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  int64_t m = 0, above = 0;
  double sum = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(x[i])) {
      v[m++] = x[i];
      sum += x[i];
      above += x[i] > 1.0;
    }
  s->count = m;
  s->mean = s->median = s->std = s->above1 = NAN;
  if (m > 0) {
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    s->mean = sum / (double)m;
    s->median = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    double ss = 0;
    for (int64_t i = 0; i < m; i++) ss += (v[i] - s->mean) * (v[i] - s->mean);
    s->std = sqrt(ss / (double)m);
    s->above1 = (double)above / (double)m;
  }
  free(v);
}

double fm_ifd_pearson(const double *x, const double *y, int64_t n) {
  double sx = 0, sy = 0;
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(x[i]) && isfinite(y[i])) sx += x[i], sy += y[i], m++;
  if (m < 2) return NAN;
  const double mx = sx / (double)m, my = sy / (double)m;
  double cxy = 0, cxx = 0, cyy = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(x[i]) && isfinite(y[i])) {
      cxy += (x[i] - mx) * (y[i] - my);
      cxx += (x[i] - mx) * (x[i] - mx);
      cyy += (y[i] - my) * (y[i] - my);
    }
  return cxx > 0 && cyy > 0 ? cxy / sqrt(cxx * cyy) : NAN;
}

/* ---- scoring ------------------------------------------------------------ */
/* One row of T as the model reads it. */
typedef struct Row {
  int32_t *tok, *tgt, *pos, *seg;
  float *w;
} Row;

/* Mean loss of ids[ctx..n), each predicted from the ids before it; n <= T + 1.
 * Padding: id 0, segment 0, weight 0 (the attention is causal and stays in
 * segment 1, so padding does not reach the scored positions). */
static double form_loss(FmModel *m, const Row *r, const int32_t *ids, int64_t n, int64_t ctx) {
  const int64_t T = fm_model_get_dims(m)->T;
  for (int64_t t = 0; t < T; t++) {
    const bool real = t < n - 1;
    r->tok[t] = real ? ids[t] : 0;
    r->tgt[t] = real ? ids[t + 1] : 0;
    r->pos[t] = (int32_t)t;
    r->seg[t] = real ? 1 : 0;
    r->w[t] = real && t + 1 >= ctx ? 1.0f : 0.0f;
  }
  const FmModelInput in = {r->tok, r->tgt, r->pos, r->seg};
  return fm_model_forward_backward(m, &in, r->w, false) / (double)(n - ctx);
}

/* What each rank keeps per record, gathered as doubles (exact below 2^53). */
enum { R_LINE, R_CTX, R_K, R_FULL, R_LC, R_LU, R_LCB, R_LUB, R_F };

typedef struct Recs {
  FmIfdForms *forms; /* this rank's records, in order */
  double *v;         /* R_F per record */
  int64_t n, cap;
  int64_t total; /* records in the file (every rank counts all) */
} Recs;

static void recs_add(Recs *rs, const FmIfdForms *f, int64_t line) {
  if (rs->n == rs->cap) {
    rs->cap = rs->cap * 2 + 64;
    rs->forms = fm_xrealloc(rs->forms, (size_t)rs->cap * sizeof *rs->forms);
    rs->v = fm_xrealloc(rs->v, (size_t)(rs->cap * R_F) * sizeof *rs->v);
  }
  rs->forms[rs->n] = *f;
  double *v = rs->v + rs->n * R_F;
  v[R_LINE] = (double)line, v[R_CTX] = (double)f->ctx_cond, v[R_K] = (double)f->n_scored;
  v[R_FULL] = (double)f->n_full;
  v[R_LC] = v[R_LU] = v[R_LCB] = v[R_LUB] = NAN;
  rs->n++;
}

/* Stream the records; rank r of P encodes records i with i % P == r. A bad
 * record is reported with file:line by the rank that owns it. */
static int read_records(Recs *rs, const FmDeck *deck, const FmTokenizer *tok, const FmTemplate *t, int64_t max_len,
                        FmComm *world) {
  const FmConfig *c = &deck->c;
  FmJsonl *j = NULL;
  int rc = fm_jsonl_open(&j, c->ifd.inputs, stderr);
  const char *line = NULL;
  size_t len = 0;
  int64_t lineno = 0;
  while (!rc) {
    const int got = fm_jsonl_next(j, &line, &len, &lineno);
    if (got <= 0) {
      rc = got;
      break;
    }
    if (strspn(line, " \t\r") == len) continue; /* blank lines are not records */
    const int64_t i = rs->total++;
    if (i % world->size != world->rank) continue;
    FmJsonDoc doc;
    FmJsonError je;
    if (fm_json_parse(&doc, line, len, 64, &je)) {
      fprintf(stderr, "%s:%lld:%d: malformed JSON: %s\n", c->ifd.inputs, (long long)lineno, je.col, je.msg);
      rc = FM_EDATA;
      break;
    }
    const FmJson *in = fm_json_get(&doc.root, c->ifd.instruction_field);
    const FmJson *out = fm_json_get(&doc.root, c->ifd.response_field);
    if (!in || in->type != FM_JSON_STR || !out || out->type != FM_JSON_STR) {
      fprintf(stderr, "%s:%lld: record %lld needs string fields '%s' and '%s' (&ifd instruction_field, "
              "response_field)\n", c->ifd.inputs, (long long)lineno, (long long)i, c->ifd.instruction_field,
              c->ifd.response_field);
      rc = FM_EDATA;
    } else {
      FmIfdForms f;
      rc = fm_ifd_forms(&f, tok, t, in->s, in->len, out->s, out->len, max_len);
      if (rc) fprintf(stderr, "%s:%lld: cannot tokenize the record: %s\n", c->ifd.inputs, (long long)lineno,
                      fm_strerror(rc));
      else recs_add(rs, &f, lineno);
    }
    fm_json_free(&doc);
  }
  if (j) fm_jsonl_close(j);
  return rc;
}

/* Score this rank's records with the model's current weights into columns lc, lu. */
static void score(FmModel *m, Recs *rs, int lc, int lu) {
  const int64_t T = fm_model_get_dims(m)->T;
  Row r = {fm_xcalloc((size_t)T, sizeof(int32_t)), fm_xcalloc((size_t)T, sizeof(int32_t)),
           fm_xcalloc((size_t)T, sizeof(int32_t)), fm_xcalloc((size_t)T, sizeof(int32_t)),
           fm_xcalloc((size_t)T, sizeof(float))};
  for (int64_t i = 0; i < rs->n; i++) {
    const FmIfdForms *f = &rs->forms[i];
    if (f->n_scored < 1) continue;
    rs->v[i * R_F + lc] = form_loss(m, &r, f->cond, f->n_cond, f->ctx_cond);
    rs->v[i * R_F + lu] = form_loss(m, &r, f->uncond, f->n_uncond, f->ctx_uncond);
  }
  free(r.tok);
  free(r.tgt);
  free(r.pos);
  free(r.seg);
  free(r.w);
}

/* ---- output (rank 0) ------------------------------------------------------ */
static void put_num(FILE *f, const char *key, double x) {
  if (isfinite(x)) fprintf(f, ", \"%s\": %.17g", key, x);
  else fprintf(f, ", \"%s\": null", key);
}

static void write_record(FILE *f, int64_t i, const double *v, bool two) {
  const double ifd = v[R_LC] / v[R_LU], ifd_b = v[R_LCB] / v[R_LUB];
  fprintf(f, "{\"record\": %lld, \"line\": %lld, \"context_tokens\": %lld, \"scored_tokens\": %lld, "
          "\"response_tokens\": %lld, \"truncated\": %s, \"skipped\": %s", (long long)i, (long long)v[R_LINE],
          (long long)v[R_CTX], (long long)v[R_K], (long long)v[R_FULL], v[R_K] < v[R_FULL] ? "true" : "false",
          v[R_K] < 1 ? "true" : "false");
  put_num(f, "l_cond", v[R_LC]);
  put_num(f, "l_uncond", v[R_LU]);
  put_num(f, "ifd", ifd);
  if (two) {
    put_num(f, "l_cond_b", v[R_LCB]);
    put_num(f, "l_uncond_b", v[R_LUB]);
    put_num(f, "ifd_b", ifd_b);
    put_num(f, "ifd_diff", ifd_b - ifd);
  }
  fprintf(f, "}\n");
}

static void put_stats(FILE *f, const char *name, const FmIfdStats *s) {
  fprintf(f, ", \"%s\": {\"count\": %lld", name, (long long)s->count);
  put_num(f, "mean", s->mean);
  put_num(f, "median", s->median);
  put_num(f, "std", s->std);
  put_num(f, "share_above_1", s->above1);
  fprintf(f, "}");
}

static void log_stats(FILE *log, const char *name, const FmIfdStats *s) {
  fprintf(log, "ifd: %-8s %lld records: mean %.6f, median %.6f, std %.6f, share > 1.0: %.4f\n", name,
          (long long)s->count, s->mean, s->median, s->std, s->above1);
}

/* Rank 0: records in order into the JSONL, the summary to log and JSON. */
static int write_results(const FmDeck *deck, const double *all, int64_t N, int P, int64_t K, bool two, FILE *log) {
  const FmConfig *c = &deck->c;
  char out[4096], sum[4096];
  if (c->ifd.output[0]) snprintf(out, sizeof out, "%s", c->ifd.output);
  else snprintf(out, sizeof out, "%s/ifd.jsonl", c->run.out_dir);
  snprintf(sum, sizeof sum, "%s/ifd_summary.json", c->run.out_dir);
  FILE *f = fm_mkdirs(c->run.out_dir) == 0 ? fopen(out, "w") : NULL;
  if (!f) {
    fprintf(stderr, "fmhpc: cannot write %s (&ifd output)\n", out);
    return FM_EIO;
  }
  double *ifd = fm_xcalloc((size_t)(N ? N : 1), sizeof *ifd), *ifd_b = fm_xcalloc((size_t)(N ? N : 1), sizeof *ifd_b);
  double *diff = fm_xcalloc((size_t)(N ? N : 1), sizeof *diff);
  int64_t truncated = 0, skipped = 0;
  for (int64_t i = 0; i < N; i++) { /* record i is rank i % P's (i / P)-th */
    const double *v = all + ((i % P) * K + i / P) * R_F;
    write_record(f, i, v, two);
    ifd[i] = v[R_LC] / v[R_LU];
    ifd_b[i] = v[R_LCB] / v[R_LUB];
    diff[i] = ifd_b[i] - ifd[i];
    truncated += v[R_K] < v[R_FULL] && v[R_K] >= 1;
    skipped += v[R_K] < 1;
  }
  fclose(f);
  FmIfdStats sa, sb, sd;
  fm_ifd_stats(&sa, ifd, N);
  fm_ifd_stats(&sb, ifd_b, N);
  fm_ifd_stats(&sd, diff, N);
  const double r = fm_ifd_pearson(ifd, ifd_b, N);
  fprintf(log, "ifd: %lld records of %s (%lld truncated, %lld skipped: no response id fits max_len)\n", (long long)N,
          c->ifd.inputs, (long long)truncated, (long long)skipped);
  log_stats(log, "model", &sa);
  if (two) {
    log_stats(log, "model_b", &sb);
    log_stats(log, "b - a", &sd);
    fprintf(log, "ifd: Pearson r(model, model_b) = %.6f\n", r);
  }
  fprintf(log, "ifd: per-record results in %s, summary in %s\n", out, sum);
  FILE *g = fopen(sum, "w");
  if (g) {
    fprintf(g, "{\"task\": \"ifd\", \"records\": %lld, \"truncated\": %lld, \"skipped\": %lld", (long long)N,
            (long long)truncated, (long long)skipped);
    put_stats(g, "ifd", &sa);
    if (two) {
      put_stats(g, "ifd_b", &sb);
      put_stats(g, "ifd_diff", &sd);
      put_num(g, "pearson_r", r);
    }
    fprintf(g, "}\n");
    fclose(g);
  }
  free(ifd);
  free(ifd_b);
  free(diff);
  if (!g) fprintf(stderr, "fmhpc: cannot write %s\n", sum);
  return g ? 0 : FM_EIO;
}

/* ---- the task ----------------------------------------------------------- */
static int check_deck(const FmDeck *deck, const FmModelDims *d, FILE *err) {
  const FmConfig *c = &deck->c;
  struct {
    int key;
    const char *what;
  } need[] = {{FM_KEY_ifd_inputs, "a JSONL file of instruction/response records"},
              {FM_KEY_ifd_model, "an HF directory (config.json + model.safetensors)"},
              {FM_KEY_ifd_tokenizer, "the model's tokenizer"}};
  const char *val[] = {c->ifd.inputs, c->ifd.model, c->ifd.tokenizer};
  for (int i = 0; i < 3; i++)
    if (!val[i][0]) {
      fm_deck_error(deck, err, need[i].key, "task = 'ifd' needs %s", need[i].what);
      return FM_EDECK;
    }
  if (c->ifd.max_len > d->T + 1) {
    fm_deck_error(deck, err, FM_KEY_ifd_max_len, "max_len = %lld: a form of n ids needs a row of n - 1 <= seq_len = %lld",
                  (long long)c->ifd.max_len, (long long)d->T);
    if (err) fprintf(err, "hint: max_len = 0 means seq_len + 1\n");
    return FM_EDECK;
  }
  return 0;
}

static int run(const FmDeck *deck, FmComm *world, FmModel *m, const FmModelDims *d, Recs *rs, FILE *log) {
  const FmConfig *c = &deck->c;
  FILE *err = world->rank == 0 ? stderr : NULL;
  const bool two = c->ifd.model_b[0] != 0;
  const int64_t max_len = c->ifd.max_len ? c->ifd.max_len : d->T + 1;
  FmTokenizer *tok = NULL;
  FmTemplate t;
  int rc = fm_template_builtin(&t, c->ifd.chat_template);
  if (rc) return rc; /* the deck's range admits only the built-ins */
  int32_t bad = fm_tok_load(&tok, c->ifd.tokenizer, err) != 0, any = 0;
  FM_CHECK(fm_comm_allreduce(world, &bad, &any, 1, FM_DT_I32, FM_OP_MAX));
  if (!any) bad = read_records(rs, deck, tok, &t, max_len, world) != 0;
  if (!any) FM_CHECK(fm_comm_allreduce(world, &bad, &any, 1, FM_DT_I32, FM_OP_MAX));
  if (tok) fm_tok_free(tok);
  fm_template_free(&t);
  if (any) return FM_EDATA;
  rc = fm_model_import(m, c->ifd.model, world, err);
  if (!rc) score(m, rs, R_LC, R_LU);
  if (!rc && two) rc = fm_model_import(m, c->ifd.model_b, world, err);
  if (!rc && two) score(m, rs, R_LCB, R_LUB);
  if (rc) return rc;
  const int64_t N = rs->total, P = world->size, K = (N + P - 1) / P;
  double *mine = fm_xcalloc((size_t)((K ? K : 1) * R_F), sizeof *mine);
  double *all = fm_xcalloc((size_t)((K ? K : 1) * R_F * P), sizeof *all);
  if (rs->n) memcpy(mine, rs->v, (size_t)(rs->n * R_F) * sizeof *mine);
  FM_CHECK(fm_comm_allgather(world, mine, all, (K ? K : 1) * R_F, FM_DT_F64));
  int32_t wrc = world->rank == 0 ? write_results(deck, all, N, (int)P, K ? K : 1, two, log) : 0;
  FM_CHECK(fm_comm_bcast(world, &wrc, 1, FM_DT_I32, 0));
  free(mine);
  free(all);
  return wrc;
}

int fm_ifd_task(const FmDeck *deck, FmComm *world, FILE *log) {
  FILE *err = world->rank == 0 ? stderr : NULL;
  /* The weights come later, one directory at a time (run: &ifd model, model_b). */
  const FmModelLoadOpts lo = {NULL, 1, false, NULL, false, 0, NULL};
  FmLoadedModel lm;
  int rc = fm_model_load(&lm, deck, &lo, NULL, err);
  const FmModelDims d = lm.dims;
  FmModel *m = lm.model;
  if (!rc) rc = check_deck(deck, &d, err);
  if (rc) {
    if (m) fm_model_free(m);
    return rc;
  }
  Recs rs = {0};
  rc = run(deck, world, m, &d, &rs, log);
  for (int64_t i = 0; i < rs.n; i++) fm_ifd_forms_free(&rs.forms[i]);
  free(rs.forms);
  free(rs.v);
  fm_model_free(m);
  return rc;
}
