/* progress.h: the one progress reporter for long phases (prep, tokenizer
 * training, dedup, eval; checkpoint writes report size and rate). A phase
 * counts units done out of a known total; at most one line every `every_s`
 * seconds goes to `out` (rank 0's log; NULL on other ranks), each with the
 * count, the rate, the share done and an ETA:
 *   eval: 120/400 batches, 45.3 batches/s, 30%, elapsed 2.6s, ETA 6s
 * Lines are flushed as written, so a log redirected to a file or a pipe shows
 * them as they happen. The clock is core's monotonic fm_now_s(). */
#ifndef FMHPC_PROGRESS_H
#define FMHPC_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Seconds between lines when a phase does not set its own: a terminal gets
 * frequent lines, a file or pipe (batch output, nohup) few. */
#define FM_PROGRESS_TTY_SECONDS  2.0
#define FM_PROGRESS_FILE_SECONDS 10.0

typedef struct {
  FILE *out;        /* NULL: print nothing (ranks other than 0) */
  const char *what; /* the phase, first word of the line: "eval" */
  const char *unit; /* what is counted: "batches" */
  int64_t total;    /* units in the phase; <= 0: unknown (no share, no ETA) */
  double every_s;   /* at most one line per every_s seconds; 0: no lines */
  double t0, t_last;
  int lines; /* progress lines printed so far */
} FmProgress;

/* "45s", "3m07s", "2h05m"; "?" for a negative or non-finite value. */
const char *fm_fmt_duration(char *buf, size_t n, double seconds);
/* Start a phase now. every_s < 0: the environment's FMHPC_PROGRESS_SECONDS
 * when set (> 0), else FM_PROGRESS_TTY_SECONDS when out is a terminal and
 * FM_PROGRESS_FILE_SECONDS when not. */
void fm_progress_start(FmProgress *p, FILE *out, const char *what, const char *unit, int64_t total, double every_s);
/* `done` units are finished: print a line when every_s has passed since the
 * last one (or the start). Returns true when it printed. */
bool fm_progress_tick(FmProgress *p, int64_t done);
/* As fm_progress_tick at time `now` (fm_now_s() seconds): for tests. */
bool fm_progress_tick_at(FmProgress *p, int64_t done, double now);

#endif
