/* metrics.c: metrics.jsonl (a deck record, then one record per step or
 * validation, losses as %.9e and hex floats so a reader gets the exact bits)
 * and the terminal loss curve. The file is flushed every record: a killed run
 * keeps everything up to its last step. */
#include "fmhpc/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"

struct FmMetrics {
  FILE *f;
  int64_t n, cap;
  double *loss;
  int64_t *step;
  int64_t ne, ecap;
  double *eloss;
  int64_t *estep;
};

int fm_metrics_open(FmMetrics **out, const char *path, const FmDeck *deck, FILE *err) {
  FmMetrics *m = fm_xcalloc(1, sizeof *m);
  *out = m;
  if (!path) return 0;
  char *dir = fm_xstrdup(path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    if (fm_mkdirs(dir)) {
      if (err) fprintf(err, "fmhpc: cannot create directory '%s': %s\nhint: check &run out_dir\n", dir, strerror(errno));
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
  char *text = NULL;
  size_t len = 0;
  FILE *s = open_memstream(&text, &len);
  fm_deck_write(deck, s);
  fclose(s);
  fprintf(m->f, "{\"record\": \"deck\", \"fmhpc\": \"%s\", \"git\": \"%s\", \"deck\": ", FM_VERSION_STRING,
          FMHPC_GIT_REV);
  fm_json_write_str(m->f, text, len);
  fputs("}\n", m->f);
  fflush(m->f);
  free(text);
  return 0;
}

int fm_metrics_open_resume(FmMetrics **out, const char *path, int64_t step, const char *ckpt, FILE *err) {
  FmMetrics *m = fm_xcalloc(1, sizeof *m);
  *out = m;
  if (!path) return 0;
  m->f = fopen(path, "a");
  if (!m->f) {
    if (err) fprintf(err, "fmhpc: cannot append to '%s': %s\nhint: check &run out_dir\n", path, strerror(errno));
    return FM_EIO;
  }
  fprintf(m->f, "{\"record\": \"resume\", \"step\": %lld, \"checkpoint\": ", (long long)step);
  fm_json_write_str(m->f, ckpt, strlen(ckpt));
  fputs("}\n", m->f);
  fflush(m->f);
  return 0;
}

void fm_metrics_step(FmMetrics *m, const FmStepRecord *r) {
  if (!m) return;
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 256;
    m->loss = fm_xrealloc(m->loss, (size_t)m->cap * sizeof *m->loss);
    m->step = fm_xrealloc(m->step, (size_t)m->cap * sizeof *m->step);
  }
  m->loss[m->n] = r->loss;
  m->step[m->n] = r->step;
  m->n++;
  if (!m->f) return;
  fprintf(m->f,
          "{\"record\": \"step\", \"step\": %lld, \"loss\": %.9e, \"loss_hex\": \"%a\", \"lr\": %.9e, "
          "\"grad_norm\": %.9e, \"tokens\": %lld, \"step_s\": %.4f, \"tokens_per_s\": %.1f, \"mfu\": %.5f, "
          "\"skipped\": %s, \"redone\": %lld}\n",
          (long long)r->step, r->loss, r->loss, r->lr, r->grad_norm, (long long)r->tokens, r->step_s,
          r->tokens_per_s, r->mfu, r->skipped ? "true" : "false", (long long)r->redone);
  fflush(m->f);
}

void fm_metrics_eval(FmMetrics *m, int64_t step, double loss, int64_t tokens) {
  if (!m) return;
  if (m->ne == m->ecap) {
    m->ecap = m->ecap ? 2 * m->ecap : 64;
    m->eloss = fm_xrealloc(m->eloss, (size_t)m->ecap * sizeof *m->eloss);
    m->estep = fm_xrealloc(m->estep, (size_t)m->ecap * sizeof *m->estep);
  }
  m->eloss[m->ne] = loss;
  m->estep[m->ne] = step;
  m->ne++;
  if (!m->f) return;
  fprintf(m->f,
          "{\"record\": \"eval\", \"step\": %lld, \"val_loss\": %.9e, \"val_loss_hex\": \"%a\", \"val_ppl\": %.6e, "
          "\"tokens\": %lld}\n",
          (long long)step, loss, loss, exp(loss), (long long)tokens);
  fflush(m->f);
}

double fm_metrics_last_eval(const FmMetrics *m) { return m && m->ne ? m->eloss[m->ne - 1] : NAN; }

void fm_metrics_plot(const FmMetrics *m, FILE *out, int width, int height) {
  if (!m || m->n < 2 || width < 10 || height < 4) return;
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
  free(m->loss);
  free(m->step);
  free(m->eloss);
  free(m->estep);
  free(m);
}
