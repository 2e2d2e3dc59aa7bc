/* metrics.h: what a run reports. One JSONL record per step and per
 * validation (losses exact: %.9e and C99 hex floats), the resolved deck as the
 * file's first record, a run summary (summary.json) and a loss curve drawn in
 * the terminal. Rank 0 only: other ranks pass NULL and every call is a no-op. */
#ifndef FMHPC_METRICS_H
#define FMHPC_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"

typedef struct FmStepRecord {
  int64_t step;
  double loss, lr, grad_norm;
  int64_t tokens; /* unmasked target tokens this step */
  double step_s, tokens_per_s, mfu;
  bool skipped; /* loss spike or non-finite gradient: no update */
  int64_t redone; /* exact reduction: steps recomputed so far */
} FmStepRecord;

typedef struct FmMetrics FmMetrics;

/* Open out_dir/metrics.jsonl (truncated; directories created) and write the
 * deck record. NULL path: in-memory only (the curve still works). */
int fm_metrics_open(FmMetrics **m, const char *path, const FmDeck *deck, FILE *err);
/* A resumed run: append to path (created if missing) after a record
 * {"record": "resume", "step": N, "checkpoint": "..."}; readers take the step
 * records after the last resume record for steps > N. */
int fm_metrics_open_resume(FmMetrics **m, const char *path, int64_t step, const char *ckpt, FILE *err);
void fm_metrics_step(FmMetrics *m, const FmStepRecord *r);
void fm_metrics_eval(FmMetrics *m, int64_t step, double loss, int64_t tokens);
/* Draw the training loss (and validation points) as a text chart. */
void fm_metrics_plot(const FmMetrics *m, FILE *out, int width, int height);
/* Last validation loss (NAN when none) and the number of step records. */
double fm_metrics_last_eval(const FmMetrics *m);
void fm_metrics_close(FmMetrics *m);

#endif
