/* schedule.c: learning-rate schedules: the registry (schedules.def), the
 * common warmup, and the built-in kinds (constant, cosine, linear,
 * warmup-stable-decay), each a pure function of the step in double so a
 * resumed run gets the same lr bits. optim.h states the formulas and the
 * references (optax, torch CosineAnnealingLR) they match. */
#include <math.h>

#include "fmhpc/core.h"
#include "fmhpc/optim.h"

#define FM_PI 3.14159265358979323846 /* M_PI is not C11 */

#define FM_SCHED(n) extern const FmSchedKind fm__sched_##n;
#include "fmhpc/schedules.def"
#undef FM_SCHED

static const FmSchedKind *const registry[] = {
#define FM_SCHED(n) &fm__sched_##n,
#include "fmhpc/schedules.def"
#undef FM_SCHED
};

int fm_schedule_count(void) { return (int)(sizeof registry / sizeof registry[0]); }
const FmSchedKind *fm_schedule_at(int i) { return registry[i]; }

const FmSchedKind *fm_schedule_find(const char *name) {
  for (int i = 0; i < fm_schedule_count(); i++)
    if (fm_strcasecmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

int fm_schedule_from_deck(FmSchedule *s, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  s->kind = fm_schedule_find(c->optim.schedule);
  if (!s->kind) {
    fm_deck_error(deck, err, FM_KEY_optim_schedule, "unknown schedule");
    return FM_EDECK;
  }
  s->lr = c->optim.lr;
  s->min_lr_ratio = c->optim.min_lr_ratio;
  s->decay_fraction = c->optim.decay_fraction;
  s->warmup = c->optim.warmup_steps;
  s->steps = c->train.steps;
  if (s->warmup > s->steps) {
    fm_deck_error(deck, err, FM_KEY_optim_warmup_steps, "must be <= &train steps = %lld (warmup would never end)",
                  (long long)s->steps);
    return FM_EDECK;
  }
  return s->kind->check ? s->kind->check(s, deck, err) : 0;
}

double fm_lr_at(const FmSchedule *s, int64_t t) {
  const int64_t W = s->warmup;
  if (W > 0 && t <= W) return t <= 0 ? 0.0 : s->lr * (double)t / (double)W;
  if (t <= W) return s->lr; /* no warmup, t <= 0 */
  return s->kind->after_warmup(s, t);
}

/* ---- the built-in kinds (t > W) -------------------------------------------- */

/* p = (t - W) / (T - W) in (0, 1) for a decaying schedule, or -1 once t >= T
 * (also T == W: nothing left to decay), where the lr is f*lr. */
static double progress(const FmSchedule *s, int64_t t) {
  if (t >= s->steps) return -1.0;
  return (double)(t - s->warmup) / (double)(s->steps - s->warmup);
}

static double constant_lr(const FmSchedule *s, int64_t t) { return s->lr; }

static double cosine_lr(const FmSchedule *s, int64_t t) {
  const double lr = s->lr, f = s->min_lr_ratio, p = progress(s, t);
  if (p < 0) return f * lr;
  return lr * (f + (1.0 - f) * 0.5 * (1.0 + cos(FM_PI * p)));
}

static double linear_lr(const FmSchedule *s, int64_t t) {
  const double lr = s->lr, f = s->min_lr_ratio, p = progress(s, t);
  if (p < 0) return f * lr;
  return lr * (f + (1.0 - f) * (1.0 - p));
}

/* WSD's cooldown length D: round(decay_fraction*T) in [1, T-W]. */
static int64_t wsd_decay_steps(const FmSchedule *s) {
  int64_t d = llround(s->decay_fraction * (double)s->steps);
  if (d > s->steps - s->warmup) d = s->steps - s->warmup;
  return d < 1 ? 1 : d;
}

static double wsd_lr(const FmSchedule *s, int64_t t) {
  const double lr = s->lr, f = s->min_lr_ratio;
  const int64_t T = s->steps;
  if (t >= T) return f * lr;
  const int64_t D = wsd_decay_steps(s);
  if (t <= T - D) return lr;
  return lr * (f + (1.0 - f) * (double)(T - t) / (double)D);
}

const FmSchedKind fm__sched_constant = {"constant", "the peak lr after warmup", constant_lr, NULL};
const FmSchedKind fm__sched_cosine = {"cosine", "cosine decay to min_lr_ratio*lr at the last step", cosine_lr, NULL};
const FmSchedKind fm__sched_linear = {"linear", "linear decay to min_lr_ratio*lr at the last step", linear_lr, NULL};
/* The deck's cooldown, round(decay_fraction*T), must fit after the warmup
 * and hold a step: it was clamped into [1, T-W] without a word (the clamp in
 * wsd_decay_steps stays for schedules built in code). */
static int wsd_check(const FmSchedule *s, const FmDeck *deck, FILE *err) {
  const int64_t d = llround(s->decay_fraction * (double)s->steps), room = s->steps - s->warmup;
  if (d >= 1 && d <= room) return 0;
  char frac[48];
  fm_deck_fmt_real(frac, sizeof frac, s->decay_fraction);
  if (d < 1) {
    fm_deck_error(deck, err, FM_KEY_optim_decay_fraction,
                  "gives round(%s x &train steps %lld) = 0 cooldown steps: schedule 'wsd' needs at least 1", frac,
                  (long long)s->steps);
    if (err) fprintf(err, "hint: decay_fraction >= %.3g gives one cooldown step\n", 0.5 / (double)s->steps);
  } else {
    fm_deck_error(deck, err, FM_KEY_optim_decay_fraction,
                  "gives a cooldown of %lld steps, but only %lld follow the warmup (&train steps %lld - &optim "
                  "warmup_steps %lld)",
                  (long long)d, (long long)room, (long long)s->steps, (long long)s->warmup);
    if (err)
      fprintf(err, "hint: decay_fraction <= %.3g, or fewer warmup_steps, or more steps\n",
              (double)room / (double)s->steps);
  }
  return FM_EDECK;
}

const FmSchedKind fm__sched_wsd = {"wsd", "warmup-stable-decay: constant, then a linear cooldown", wsd_lr, wsd_check};
