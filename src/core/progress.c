/* progress.c: progress lines with a rate and an ETA (progress.h). Only
 * formatting and the clock live here; each phase decides what it counts. */
#define _POSIX_C_SOURCE 200809L
#include "fmhpc/progress.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "fmhpc/core.h"

const char *fm_fmt_duration(char *buf, size_t n, double s) {
  if (!(s >= 0 && s <= 1e8))
    snprintf(buf, n, "?"); /* negative, NaN, or beyond any run */
  else if (s < 60)
    snprintf(buf, n, "%.0fs", s);
  else if (s < 3600)
    snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s, 3600) / 60);
  return buf;
}

void fm_progress_start(FmProgress *p, FILE *out, const char *what, const char *unit, int64_t total, double every_s) {
  p->out = out;
  p->what = what;
  p->unit = unit;
  p->total = total;
  if (every_s < 0) {
    const char *env = getenv("FMHPC_PROGRESS_SECONDS");
    const double e = env ? strtod(env, NULL) : 0;
    every_s = e > 0 ? e : out && isatty(fileno(out)) ? FM_PROGRESS_TTY_SECONDS : FM_PROGRESS_FILE_SECONDS;
  }
  p->every_s = every_s;
  p->t0 = p->t_last = fm_now_s();
  p->lines = 0;
}

bool fm_progress_tick_at(FmProgress *p, int64_t done, double now) {
  if (!p->out || p->every_s <= 0 || now - p->t_last < p->every_s) return false;
  const double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
  char e[32], eta[32];
  fm_fmt_duration(e, sizeof e, el);
  if (p->total > 0) {
    const double left = rate > 0 ? (double)(p->total - done) / rate : -1;
    fprintf(p->out, "%s: %lld/%lld %s, %.1f %s/s, %.0f%%, elapsed %s, ETA %s\n", p->what, (long long)done,
            (long long)p->total, p->unit, rate, p->unit, 100.0 * (double)done / (double)p->total, e,
            fm_fmt_duration(eta, sizeof eta, left));
  } else {
    fprintf(p->out, "%s: %lld %s, %.1f %s/s, elapsed %s\n", p->what, (long long)done, p->unit, rate, p->unit, e);
  }
  fflush(p->out);
  p->t_last = now;
  p->lines++;
  return true;
}

bool fm_progress_tick(FmProgress *p, int64_t done) { return fm_progress_tick_at(p, done, fm_now_s()); }
