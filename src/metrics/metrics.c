/* metrics.c: metrics.jsonl (a deck record, then one record per step or
 * validation, losses as %.9e and hex floats so a reader gets the exact bits),
 * the same scalars to TensorBoard (tfevents.c), the curves kept in memory for
 * the text chart and the PNG (plot.c). Files are flushed every record: a
 * killed run keeps everything up to its last step; a write that fails (a full
 * disk) is said once and ends the file's records for the run. */
#include "fmhpc/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"

struct FmMetrics {
  FILE *f;
  char path[4096];    /* metrics.jsonl, or "" */
  char out_dir[4096]; /* &run out_dir: loss.png, event files */
  FmCurve curve;      /* this process's steps and validations */
  FmTfEvents *tb;     /* &log tensorboard, else NULL */
  char lost[64];      /* the record metrics.jsonl failed at ("step 12's record"), or "" */
};

static FmMetrics *create(const char *path, const FmDeck *deck) {
  FmMetrics *m = fm_xcalloc(1, sizeof *m);
  snprintf(m->path, sizeof m->path, "%s", path ? path : "");
  snprintf(m->out_dir, sizeof m->out_dir, "%s", deck->c.run.out_dir);
  snprintf(m->curve.name, sizeof m->curve.name, "%s", deck->c.run.name);
  return m;
}

/* &log tensorboard: a new event file, then the run name and the resolved
 * deck as text (an indented block: TensorBoard renders text as Markdown). */
static int open_tb(FmMetrics *m, const FmDeck *deck, int64_t step, FILE *err) {
  if (!deck->c.log.tensorboard) return 0;
  int rc = fm_tfevents_open(&m->tb, m->out_dir, deck->c.run.name, err);
  if (rc) return rc;
  char *text = fm_deck_text(deck);
  FmStr md;
  fm_str_init(&md);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    const size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
    fm_str_cat(&md, "    ");
    fm_str_catn(&md, p, n);
    p += n;
  }
  rc = fm_tfevents_text(m->tb, step, "run/name", deck->c.run.name);
  if (!rc) rc = fm_tfevents_text(m->tb, step, "run/deck", md.s);
  fm_str_free(&md);
  free(text);
  if (rc && err) fprintf(err, "fmhpc: cannot write '%s': %s\n", fm_tfevents_path(m->tb), strerror(errno));
  return rc;
}

/* A failed event write (a full disk) warns once and stops TensorBoard output;
 * training and metrics.jsonl go on. */
static void tb_failed(FmMetrics *m) {
  fm_warn0("cannot write %s (%s): no more TensorBoard events in this run", fm_tfevents_path(m->tb), strerror(errno));
  fm_tfevents_close(m->tb);
  m->tb = NULL;
}

/* After each record: a write that failed (a full disk) warns once, closes
 * metrics.jsonl and writes no more to it; the curves stay in memory and
 * training goes on (its checkpoints keep its state). The file ends at or
 * inside that record: readers take its whole lines. */
static void flushed(FmMetrics *m, const char *what, int64_t step) {
  if (!ferror(m->f) && fflush(m->f) == 0) return;
  const int e = errno ? errno : EIO;
  if (step >= 0)
    snprintf(m->lost, sizeof m->lost, "step %lld's %srecord", (long long)step, what);
  else
    snprintf(m->lost, sizeof m->lost, "the %srecord", what);
  fm_warn0(
      "cannot write %s (%s) at %s: the file keeps the records before it; none are written to it for the rest "
      "of this run, which goes on",
      m->path, strerror(e), m->lost);
  fclose(m->f);
  m->f = NULL;
}

const char *fm_metrics_lost(const FmMetrics *m) { return m && m->lost[0] ? m->lost : NULL; }

int fm_metrics_open(FmMetrics **out, const char *path, const FmDeck *deck, FILE *err) {
  FmMetrics *m = create(path, deck);
  *out = m;
  if (!path) return open_tb(m, deck, 0, err);
  char *dir = fm_xstrdup(path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    if (fm_mkdirs(dir)) {
      if (err)
        fprintf(err, "fmhpc: cannot create directory '%s': %s\nhint: check &run out_dir\n", dir, strerror(errno));
      free(dir);
      return FM_EIO;
    }
  }
  free(dir);
  m->f = fopen(path, "w");
  if (!m->f) {
    if (err) fprintf(err, "fmhpc: cannot write '%s': %s\nhint: check &run out_dir\n", path, strerror(errno));
    return FM_EIO;
  }
  char *text = fm_deck_text(deck);
  fprintf(m->f, "{\"record\": \"deck\", \"fmhpc\": \"%s\", \"git\": \"%s\", \"deck\": ", FM_VERSION_STRING,
          FMHPC_GIT_REV);
  fm_json_write_str(m->f, text, strlen(text));
  fputs("}\n", m->f);
  free(text);
  if (fflush(m->f) != 0 || ferror(m->f)) {
    if (err) fprintf(err, "fmhpc: cannot write '%s': %s\nhint: check &run out_dir\n", path, strerror(errno));
    return FM_EIO;
  }
  return open_tb(m, deck, 0, err);
}

/* A file cut inside a record (a full disk: flushed() above) ends without a
 * newline. That fragment is no record, and the resume record appended to it
 * would make one unreadable line in the middle: it is dropped, and said. */
static void drop_torn_tail(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return; /* a missing file is created by the append below */
  char buf[4096];
  off_t end = fseeko(f, 0, SEEK_END) == 0 ? ftello(f) : -1, keep = -1;
  for (off_t at = end; keep < 0 && at > 0;) {
    const off_t n = at > (off_t)sizeof buf ? (off_t)sizeof buf : at;
    at -= n;
    if (fseeko(f, at, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) break;
    for (off_t i = n; i-- > 0;)
      if (buf[i] == '\n') {
        keep = at + i + 1;
        break;
      }
    if (keep < 0 && at == 0) keep = 0;
  }
  fclose(f);
  if (end <= 0 || keep < 0 || keep == end) return;
  if (truncate(path, keep) == 0)
    fm_warn0(
        "%s ended inside a record (the run before was cut while writing it): its last %lld bytes, after the "
        "last whole record, were dropped",
        path, (long long)(end - keep));
}

int fm_metrics_open_resume(FmMetrics **out, const char *path, const FmDeck *deck, int64_t step, const char *ckpt,
                           FILE *err) {
  FmMetrics *m = create(path, deck);
  *out = m;
  if (!path) return open_tb(m, deck, step, err);
  drop_torn_tail(path);
  m->f = fopen(path, "a");
  if (!m->f) {
    if (err) fprintf(err, "fmhpc: cannot append to '%s': %s\nhint: check &run out_dir\n", path, strerror(errno));
    return FM_EIO;
  }
  fprintf(m->f, "{\"record\": \"resume\", \"step\": %lld, \"checkpoint\": ", (long long)step);
  fm_json_write_str(m->f, ckpt, strlen(ckpt));
  fputs("}\n", m->f);
  if (fflush(m->f) != 0 || ferror(m->f)) {
    if (err) fprintf(err, "fmhpc: cannot append to '%s': %s\nhint: check &run out_dir\n", path, strerror(errno));
    return FM_EIO;
  }
  return open_tb(m, deck, step, err);
}

/* ", key: value" with %.9e; null when not finite (JSON has no NaN or
 * infinity: a skipped step's gradient norm must not break every reader). */
static void put_num(FILE *f, const char *key, double v) {
  if (isfinite(v))
    fprintf(f, ", \"%s\": %.9e", key, v);
  else
    fprintf(f, ", \"%s\": null", key);
}

void fm_metrics_record(FmMetrics *m, const char *json_line) {
  if (!m || !m->f) return;
  fprintf(m->f, "%s\n", json_line);
  flushed(m, "resume changes ", -1);
}

void fm_metrics_step(FmMetrics *m, const FmStepRecord *r) {
  if (!m) return;
  fm_curve_add_step(&m->curve, r->step, r->loss, r->lr);
  if (m->f) {
    fprintf(m->f, "{\"record\": \"step\", \"step\": %lld", (long long)r->step);
    put_num(m->f, "loss", r->loss);
    fprintf(m->f, ", \"loss_hex\": \"%a\"", r->loss);
    put_num(m->f, "lr", r->lr);
    put_num(m->f, "grad_norm", r->grad_norm);
    fprintf(m->f, ", \"tokens\": %lld", (long long)r->tokens);
    put_num(m->f, "step_s", r->step_s);
    put_num(m->f, "tokens_per_s", r->tokens_per_s);
    put_num(m->f, "mfu", r->mfu);
    put_num(m->f, "data_s", r->data_s);
    put_num(m->f, "compute_s", r->compute_s);
    put_num(m->f, "update_s", r->update_s);
    fprintf(m->f, ", \"skipped\": %s, \"redone\": %lld}\n", r->skipped ? "true" : "false", (long long)r->redone);
    flushed(m, "", r->step);
  }
  if (m->tb) { /* tag -> the metrics.jsonl key it mirrors: tests/metrics/check_tb.py */
    const FmTfScalar v[] = {{"train/loss", r->loss},
                            {"train/lr", r->lr},
                            {"train/grad_norm", r->grad_norm},
                            {"train/tokens_per_s", r->tokens_per_s},
                            {"train/mfu", r->mfu},
                            {"time/step_s", r->step_s},
                            {"time/data_s", r->data_s},
                            {"time/compute_s", r->compute_s},
                            {"time/update_s", r->update_s}};
    if (fm_tfevents_scalars(m->tb, r->step, v, (int)(sizeof v / sizeof v[0]))) tb_failed(m);
  }
}

void fm_metrics_eval(FmMetrics *m, int64_t step, double loss, int64_t tokens) {
  if (!m) return;
  fm_curve_add_eval(&m->curve, step, loss);
  if (m->f) {
    fprintf(m->f, "{\"record\": \"eval\", \"step\": %lld", (long long)step);
    put_num(m->f, "val_loss", loss);
    fprintf(m->f, ", \"val_loss_hex\": \"%a\"", loss);
    put_num(m->f, "val_ppl", exp(loss));
    fprintf(m->f, ", \"tokens\": %lld}\n", (long long)tokens);
    flushed(m, "validation ", step);
  }
  if (m->tb) {
    const FmTfScalar v[] = {{"val/loss", loss}, {"val/perplexity", exp(loss)}};
    if (fm_tfevents_scalars(m->tb, step, v, 2)) tb_failed(m);
  }
}

int fm_metrics_plot_png(const FmMetrics *m, FILE *err) {
  if (!m) return 0;
  char png[4200];
  snprintf(png, sizeof png, "%s/loss.png", m->out_dir);
  if (!m->path[0] || m->lost[0]) return fm_plot_png(&m->curve, png, err); /* a cut file: this process's steps */
  FmCurve c;
  int rc = fm_curve_load(&c, m->path, err);
  if (rc) return rc;
  if (!c.name[0]) snprintf(c.name, sizeof c.name, "%s", m->curve.name);
  rc = fm_plot_png(&c, png, err);
  fm_curve_free(&c);
  return rc;
}

double fm_metrics_last_eval(const FmMetrics *m) { return m && m->curve.ne ? m->curve.eloss[m->curve.ne - 1] : NAN; }

void fm_metrics_plot(const FmMetrics *mm, FILE *out, int width, int height) {
  if (!mm) return;
  const FmCurve *m = &mm->curve;
  if (m->n < 2 || width < 10 || height < 4) return;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < m->n; i++) {
    if (!isfinite(m->loss[i])) continue;
    if (m->loss[i] < lo) lo = m->loss[i];
    if (m->loss[i] > hi) hi = m->loss[i];
  }
  for (int64_t i = 0; i < m->ne; i++) {
    if (m->eloss[i] < lo) lo = m->eloss[i];
    if (m->eloss[i] > hi) hi = m->eloss[i];
  }
  if (!(hi > lo)) hi = lo + 1.0;
  const size_t cells = (size_t)width * (size_t)height;
  char *grid = fm_xmalloc(cells);
  memset(grid, ' ', cells);
  const int64_t s0 = m->step[0], s1 = m->step[m->n - 1] > s0 ? m->step[m->n - 1] : s0 + 1;
  /* Each column shows the mean training loss of the steps that fall in it. */
  for (int c = 0; c < width; c++) {
    double sum = 0;
    int cnt = 0;
    for (int64_t i = 0; i < m->n; i++) {
      int col = (int)((double)(m->step[i] - s0) * (width - 1) / (double)(s1 - s0) + 0.5);
      if (col == c && isfinite(m->loss[i])) sum += m->loss[i], cnt++;
    }
    if (!cnt) continue;
    int row = (int)((hi - sum / cnt) / (hi - lo) * (height - 1) + 0.5);
    grid[(size_t)row * (size_t)width + (size_t)c] = '*';
  }
  for (int64_t i = 0; i < m->ne; i++) {
    int col = (int)((double)(m->estep[i] - s0) * (width - 1) / (double)(s1 - s0) + 0.5);
    if (col < 0 || col >= width) continue;
    int row = (int)((hi - m->eloss[i]) / (hi - lo) * (height - 1) + 0.5);
    grid[(size_t)row * (size_t)width + (size_t)col] = 'v';
  }
  fprintf(out, "loss curve (* train, v validation), steps %lld..%lld\n", (long long)s0, (long long)s1);
  for (int r = 0; r < height; r++) {
    double y = hi - (hi - lo) * r / (height - 1);
    fprintf(out, "%8.3f |%.*s\n", y, width, grid + (size_t)r * (size_t)width);
  }
  fprintf(out, "         +%.*s\n", width,
          "----------------------------------------------------------------------------------------------------"
          "----------------------------------------------------------------------------------------------------");
  free(grid);
}

void fm_metrics_close(FmMetrics *m) {
  if (!m) return;
  if (m->f) fclose(m->f);
  fm_tfevents_close(m->tb);
  fm_curve_free(&m->curve);
  free(m);
}
