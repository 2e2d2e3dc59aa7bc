/* plot.c: the loss-curve PNG (out_dir/loss.png, and `fmhpc --plot RUN_DIR`),
 * drawn with PLplot's pngcairo driver: training loss and validation loss
 * against step on the left axis, the learning rate on a right axis, axis
 * labels, ticks, a legend, the run name in the title. PLplot is optional at
 * build time (FMHPC_HAVE_PLPLOT); without it every entry point says so.
 * Reading metrics.jsonl for --plot is here too, so a plot can be drawn from
 * any run directory at any time, even while the run is writing. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"
#include "fmhpc/metrics.h"

#ifdef FMHPC_HAVE_PLPLOT
#include <plplot.h>
#endif

/* ---- metrics.jsonl -> curve ----------------------------------------------- */

void fm_curve_add_step(FmCurve *c, int64_t step, double loss, double lr) {
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 256;
    c->step = fm_xrealloc(c->step, (size_t)c->cap * sizeof *c->step);
    c->loss = fm_xrealloc(c->loss, (size_t)c->cap * sizeof *c->loss);
    c->lr = fm_xrealloc(c->lr, (size_t)c->cap * sizeof *c->lr);
  }
  c->step[c->n] = step, c->loss[c->n] = loss, c->lr[c->n] = lr;
  c->n++;
}

void fm_curve_add_eval(FmCurve *c, int64_t step, double loss) {
  if (c->ne == c->ecap) {
    c->ecap = c->ecap ? 2 * c->ecap : 64;
    c->estep = fm_xrealloc(c->estep, (size_t)c->ecap * sizeof *c->estep);
    c->eloss = fm_xrealloc(c->eloss, (size_t)c->ecap * sizeof *c->eloss);
  }
  c->estep[c->ne] = step, c->eloss[c->ne] = loss;
  c->ne++;
}

/* &run name of the deck stored in the file's first record. */
static void deck_name(const FmJson *rec, char *name, size_t n) {
  const FmJson *d = fm_json_get(rec, "deck");
  if (!d || d->type != FM_JSON_STR) return;
  FmDeck deck;
  fm_deck_init(&deck);
  FmDeckSource src = {"metrics.jsonl deck record", d->s, false};
  if (fm_deck_bind(&deck, 1, &src, NULL) == 0) snprintf(name, n, "%s", deck.c.run.name);
  fm_deck_free(&deck);
}

static double num(const FmJson *rec, const char *key) {
  const FmJson *v = fm_json_get(rec, key);
  return v && v->type == FM_JSON_NUM ? v->num : NAN;
}

int fm_curve_load(FmCurve *c, const char *path, FILE *err) {
  memset(c, 0, sizeof *c);
  char *text = NULL;
  size_t len = 0;
  if (fm_read_file(path, &text, &len)) {
    if (err)
      fprintf(err, "fmhpc: cannot read '%s': %s\nhint: a run directory holds metrics.jsonl (&log metrics)\n", path,
              strerror(errno));
    return FM_EIO;
  }
  int64_t line = 0;
  int rc = 0;
  for (char *p = text, *nl; p < text + len && !rc; p = nl + 1) {
    nl = memchr(p, '\n', (size_t)(text + len - p));
    if (!nl) break; /* a record still being written by a running job: wait for its newline */
    line++;
    FmJsonDoc doc;
    FmJsonError je;
    if (fm_json_parse(&doc, p, (size_t)(nl - p), 0, &je)) {
      if (err)
        fprintf(err, "fmhpc: %s:%lld:%d: %s\nhint: each line must be one JSON record\n", path, (long long)line, je.col,
                je.msg);
      rc = FM_EFORMAT;
      break;
    }
    const FmJson *kind = fm_json_get(&doc.root, "record");
    const char *k = kind && kind->type == FM_JSON_STR ? kind->s : "";
    const double step = num(&doc.root, "step");
    if (!strcmp(k, "deck")) {
      deck_name(&doc.root, c->name, sizeof c->name);
    } else if (!strcmp(k, "resume") && isfinite(step)) {
      /* A resumed run repeats the steps after its checkpoint: drop ours. */
      while (c->n > 0 && (double)c->step[c->n - 1] > step) c->n--;
      while (c->ne > 0 && (double)c->estep[c->ne - 1] > step) c->ne--;
    } else if (!strcmp(k, "step") && isfinite(step)) {
      fm_curve_add_step(c, (int64_t)step, num(&doc.root, "loss"), num(&doc.root, "lr"));
    } else if (!strcmp(k, "eval") && isfinite(step)) {
      fm_curve_add_eval(c, (int64_t)step, num(&doc.root, "val_loss"));
    }
    fm_json_free(&doc);
  }
  free(text);
  if (!rc && c->n == 0) {
    if (err) fprintf(err, "fmhpc: %s holds no step records yet: nothing to plot\n", path);
    rc = FM_EDATA;
  }
  if (rc) fm_curve_free(c);
  return rc;
}

void fm_curve_free(FmCurve *c) {
  free(c->step);
  free(c->loss);
  free(c->lr);
  free(c->estep);
  free(c->eloss);
  memset(c, 0, sizeof *c);
}

/* ---- drawing ---------------------------------------------------------------- */

#ifdef FMHPC_HAVE_PLPLOT

bool fm_plot_available(void) { return true; }

static bool have_device(const char *name) {
  enum { NDEV = 64 };
  const char **menu = fm_xcalloc(NDEV, sizeof *menu), **dev = fm_xcalloc(NDEV, sizeof *dev);
  int n = NDEV;
  plgDevs(&menu, &dev, &n);
  bool found = false;
  for (int i = 0; i < n && !found; i++) found = dev[i] && !strcmp(dev[i], name);
  free(menu);
  free(dev);
  return found;
}

static void range(const double *v, int64_t n, double *lo, double *hi) {
  for (int64_t i = 0; i < n; i++)
    if (isfinite(v[i])) *lo = fmin(*lo, v[i]), *hi = fmax(*hi, v[i]);
}

/* Colours of cmap0 used below (index 0 is the background). */
enum { C_BG, C_FG, C_TRAIN, C_VAL, C_LR, C_GRID };
#define VAL_SYMBOL "#[0x25cf]" /* U+25CF BLACK CIRCLE */

static void draw(const FmCurve *c, const char *title) {
  const int64_t n = c->n;
  PLFLT *x = fm_xcalloc((size_t)n, sizeof *x), *y = fm_xcalloc((size_t)n, sizeof *y);
  double x0 = (double)c->step[0], x1 = (double)c->step[n - 1], lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < c->ne; i++) x1 = fmax(x1, (double)c->estep[i]);
  if (!(x1 > x0)) x1 = x0 + 1;
  range(c->loss, n, &lo, &hi);
  range(c->eloss, c->ne, &lo, &hi);
  if (!(hi >= lo)) lo = 0, hi = 1;
  const double pad = hi > lo ? 0.05 * (hi - lo) : 0.5;
  double lrmin = INFINITY, lrmax = 0;
  range(c->lr, n, &lrmin, &lrmax);

  pladv(0);
  plvpor(0.11, 0.87, 0.12, 0.83); /* room above for the title and a legend row */
  plwind(x0, x1, lo - pad, hi + pad);
  plwidth(1.0);
  plcol0(C_GRID);
  plbox("g", 0, 0, "g", 0, 0);
  plcol0(C_FG);
  plbox("bcnst", 0, 0, "bnstv", 0, 0);
  pllab("step", "loss (nats per token)", "");
  plmtex("t", 4.2, 0.5, 0.5, title);

  plwidth(2.0);
  plcol0(C_TRAIN);
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) /* a non-finite loss (a skipped step) breaks no line: it is left out */
    if (isfinite(c->loss[i])) x[m] = (PLFLT)c->step[i], y[m] = c->loss[i], m++;
  if (m > 1)
    plline((PLINT)m, x, y);
  else if (m == 1)
    plpoin(1, x, y, 4);
  if (c->ne > 0) {
    PLFLT *ex = fm_xcalloc((size_t)c->ne, sizeof *ex), *ey = fm_xcalloc((size_t)c->ne, sizeof *ey);
    for (int64_t i = 0; i < c->ne; i++) ex[i] = (PLFLT)c->estep[i], ey[i] = c->eloss[i];
    plcol0(C_VAL);
    if (c->ne > 1) plline((PLINT)c->ne, ex, ey);
    plschr(0, 0.7);
    plstring((PLINT)c->ne, ex, ey, VAL_SYMBOL);
    plschr(0, 1.1);
    free(ex);
    free(ey);
  }

  if (lrmax > 0) { /* the learning rate on its own right-hand axis, in units of 10^e */
    const int e = (int)floor(log10(lrmax));
    const double unit = pow(10.0, e);
    char label[64];
    snprintf(label, sizeof label, "learning rate (x 1e%d)", e);
    plwind(x0, x1, 0, 1.08 * lrmax / unit);
    plwidth(1.0);
    plcol0(C_FG);
    plbox("", 0, 0, "cmstv", 0, 0);
    plcol0(C_LR);
    plmtex("r", 4.0, 0.5, 0.5, label);
    plwidth(1.5);
    pllsty(2);
    for (int64_t i = 0; i < n; i++) x[i] = (PLFLT)c->step[i], y[i] = isfinite(c->lr[i]) ? c->lr[i] / unit : 0;
    plline((PLINT)n, x, y);
    pllsty(1);
  }

  /* The legend lists what is drawn. */
  const char *text[3], *sym[3];
  PLINT opt[3], tcol[3], lcol[3], lsty[3], snum[3];
  PLFLT lw[3], ss[3];
  int nl = 0;
  for (int k = 0; k < 3; k++) {
    if ((k == 1 && c->ne == 0) || (k == 2 && !(lrmax > 0))) continue;
    text[nl] = k == 0 ? "train loss" : k == 1 ? "validation loss" : "learning rate";
    opt[nl] = PL_LEGEND_LINE | (k == 1 ? PL_LEGEND_SYMBOL : 0);
    tcol[nl] = C_FG, lcol[nl] = k == 0 ? C_TRAIN : k == 1 ? C_VAL : C_LR, lsty[nl] = k == 2 ? 2 : 1;
    lw[nl] = k == 2 ? 1.5 : 2.0, ss[nl] = 0.7, snum[nl] = k == 1 ? 1 : 0, sym[nl] = k == 1 ? VAL_SYMBOL : "";
    nl++;
  }
  PLFLT lwid, lhei;
  plwind(0, 1, 0, 1);
  pllegend(&lwid, &lhei, PL_LEGEND_ROW_MAJOR, PL_POSITION_TOP | PL_POSITION_OUTSIDE, 0.0, 0.03, 0.05, C_BG, C_FG, 1, 1,
           nl, nl, opt, 0.6, 0.85, 2.0, 0.0, tcol, text, NULL, NULL, NULL, NULL, lcol, lsty, lw, lcol, ss, snum, sym);
  free(x);
  free(y);
}

int fm_plot_png(const FmCurve *c, const char *png, FILE *err) {
  if (c->n < 1) {
    if (err) fprintf(err, "fmhpc: no training steps to plot\n");
    return FM_EDATA;
  }
  if (!have_device("pngcairo")) {
    if (err)
      fprintf(err,
              "fmhpc: PLplot has no 'pngcairo' driver here: cannot write %s\n"
              "hint: apt-get install plplot-driver-cairo (or set PLPLOT_DRV_DIR to PLplot's drivers)\n",
              png);
    return FM_EUNSUPPORTED;
  }
  /* PLplot asks on stdin for another name when it cannot open a file:
   * check here, and write to a temporary name renamed into place so that a
   * viewer never sees half an image. */
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", png);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    if (err) fprintf(err, "fmhpc: cannot write '%s': %s\n", tmp, strerror(errno));
    return FM_EIO;
  }
  fclose(f);
  char title[320];
  snprintf(title, sizeof title, "%s - loss and learning rate", c->name[0] ? c->name : "fmhpc run");
  PLINT strm;
  plmkstrm(&strm); /* a fresh stream each time: PLplot keeps global state per stream */
  plsdev("pngcairo");
  plsfnam(tmp);
  plspage(0, 0, FM_PLOT_WIDTH, FM_PLOT_HEIGHT, 0, 0);
  plscolbg(255, 255, 255);
  plscol0(C_FG, 0, 0, 0);
  plscol0(C_TRAIN, 31, 119, 180);
  plscol0(C_VAL, 214, 39, 40);
  plscol0(C_LR, 44, 160, 44);
  plscol0(C_GRID, 220, 220, 220);
  plinit();
  plschr(0, 1.1);
  draw(c, title);
  plend1();
  /* PLplot's cairo driver reports no write error: a full disk left a PNG cut short that was renamed into place and
   * announced. A whole PNG ends with its IEND chunk. */
  static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  unsigned char tail[12] = {0};
  FILE *t = fopen(tmp, "rb");
  const bool whole = t && fseek(t, -12, SEEK_END) == 0 && fread(tail, 1, 12, t) == 12 && !memcmp(tail, iend, 12);
  if (t) fclose(t);
  if (!whole) {
    if (err) fprintf(err, "fmhpc: the plot '%s' was written short (is the file system full?): no loss.png\n", tmp);
    remove(tmp);
    return FM_EIO;
  }
  if (rename(tmp, png) != 0) {
    if (err) fprintf(err, "fmhpc: cannot rename '%s' to '%s': %s\n", tmp, png, strerror(errno));
    return FM_EIO;
  }
  return 0;
}

#else

bool fm_plot_available(void) { return false; }

int fm_plot_png(const FmCurve *c, const char *png, FILE *err) {
  if (err)
    fprintf(err,
            "fmhpc: cannot write %s: this fmhpc was built without PLplot\n"
            "hint: apt-get install libplplot-dev plplot-driver-cairo, then configure and build again\n",
            png);
  return FM_EUNSUPPORTED;
}

#endif

int fm_plot_run(const char *run_dir, FILE *err) {
  char in[4200], out[4200];
  snprintf(in, sizeof in, "%s/metrics.jsonl", run_dir);
  snprintf(out, sizeof out, "%s/loss.png", run_dir);
  if (!fm_plot_available()) return fm_plot_png(&(FmCurve){0}, out, err);
  FmCurve c;
  int rc = fm_curve_load(&c, in, err);
  if (rc) return rc;
  rc = fm_plot_png(&c, out, err);
  fm_curve_free(&c);
  return rc;
}
