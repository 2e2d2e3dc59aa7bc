/* metrics.h: what a run reports. One JSONL record per step and per
 * validation (losses exact: %.9e and C99 hex floats), the resolved deck as the
 * file's first record, TensorBoard event files (&log tensorboard), the loss
 * curve as a PNG (&log plot, `fmhpc --plot RUN_DIR`) and as text for the log.
 * Rank 0 only: other ranks pass NULL and every FmMetrics call is a no-op. */
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
  /* Phases of step_s: reading the batch, forward + backward + gradient
   * reduction, update (norm, clip, optimizer, all-gather). The rest is
   * Sophia's Hessian pass, when due. */
  double data_s, compute_s, update_s;
  bool skipped; /* loss spike or non-finite gradient: no update */
  int64_t redone; /* exact reduction: steps recomputed so far */
} FmStepRecord;

typedef struct FmMetrics FmMetrics;

/* Open out_dir/metrics.jsonl (truncated; directories created) and write the
 * deck record; with &log tensorboard also a new event file in &run out_dir.
 * NULL path: no metrics.jsonl (the curves are still kept in memory). */
int fm_metrics_open(FmMetrics **m, const char *path, const FmDeck *deck, FILE *err);
/* A resumed run: append to path (created if missing) after a record
 * {"record": "resume", "step": N, "checkpoint": "..."}; readers take the step
 * records after the last resume record for steps > N. TensorBoard: a new
 * event file beside the earlier ones (TensorBoard merges a directory's files). */
int fm_metrics_open_resume(FmMetrics **m, const char *path, const FmDeck *deck, int64_t step, const char *ckpt,
                           FILE *err);
void fm_metrics_step(FmMetrics *m, const FmStepRecord *r);
/* One line of JSON written as given (a record built by its owner, e.g. the
 * keys a resume changed). */
void fm_metrics_record(FmMetrics *m, const char *json_line);
void fm_metrics_eval(FmMetrics *m, int64_t step, double loss, int64_t tokens);
/* Draw the training loss (and validation points) as a text chart. */
void fm_metrics_plot(const FmMetrics *m, FILE *out, int width, int height);
/* &log plot at the end of training: out_dir/loss.png from metrics.jsonl (the
 * whole run, resumes included) or, without it, from this process's steps. */
int fm_metrics_plot_png(const FmMetrics *m, FILE *err);
/* NULL while every record reached metrics.jsonl; after a write failed (it
 * warned then): which record, e.g. "step 12's record". */
const char *fm_metrics_lost(const FmMetrics *m);
/* Last validation loss (NAN when none). */
double fm_metrics_last_eval(const FmMetrics *m);
void fm_metrics_close(FmMetrics *m);

/* ---- loss curves and the PNG (plot.c) ---------------------------------- */

enum { FM_PLOT_WIDTH = 1000, FM_PLOT_HEIGHT = 600 }; /* pixels */

typedef struct FmCurve {
  char name[256]; /* &run name, for the title */
  int64_t n, cap;
  int64_t *step; /* (n) */
  double *loss, *lr;
  int64_t ne, ecap;
  int64_t *estep; /* (ne) validation */
  double *eloss;
} FmCurve;

void fm_curve_add_step(FmCurve *c, int64_t step, double loss, double lr);
void fm_curve_add_eval(FmCurve *c, int64_t step, double loss);
/* Read a metrics.jsonl (a running job's too: a last line without its
 * newline is not read yet); FM_EDATA when it holds no step record. */
int fm_curve_load(FmCurve *c, const char *path, FILE *err);
void fm_curve_free(FmCurve *c);
/* Whether this build can draw PNGs (PLplot found at configure time). */
bool fm_plot_available(void);
/* The curve as an FM_PLOT_WIDTH x FM_PLOT_HEIGHT PNG: train and validation
 * loss against step, lr on a right axis, legend, the run name in the title.
 * FM_EUNSUPPORTED (said on err) without PLplot or its pngcairo driver. */
int fm_plot_png(const FmCurve *c, const char *png, FILE *err);
/* `fmhpc --plot RUN_DIR`: RUN_DIR/metrics.jsonl -> RUN_DIR/loss.png. */
int fm_plot_run(const char *run_dir, FILE *err);

/* ---- TensorBoard event files (tfevents.c) -------------------------------- */

typedef struct FmTfEvents FmTfEvents;
typedef struct FmTfScalar {
  const char *tag;
  double value; /* stored as float32 (Summary.Value.simple_value) */
} FmTfScalar;

/* Create dir/events.out.tfevents.<unix time>.<host>.<pid>.<run name>, write the
 * file_version event ("brain.Event:2"). */
int fm_tfevents_open(FmTfEvents **tb, const char *dir, const char *run_name, FILE *err);
const char *fm_tfevents_path(const FmTfEvents *tb);
/* One Event at `step` holding n scalars; flushed. 0 or FM_EIO. */
int fm_tfevents_scalars(FmTfEvents *tb, int64_t step, const FmTfScalar *v, int n);
/* One Event holding a text summary (TensorBoard's Text tab); flushed. */
int fm_tfevents_text(FmTfEvents *tb, int64_t step, const char *tag, const char *text);
void fm_tfevents_close(FmTfEvents *tb);

#endif
