/* schedule.c: learning-rate schedules (warmup, then cosine, linear, constant
 * or warmup-stable-decay), a pure function of the step in double so a resumed
 * run gets the same lr bits. optim.h states the formulas and the references
 * (optax, torch CosineAnnealingLR) they match. */
#include <math.h>

#include "fmhpc/core.h"
#include "fmhpc/optim.h"

#define FM_PI 3.14159265358979323846 /* M_PI is not C11 */

int fm_schedule_from_deck(FmSchedule *s, const FmDeck *deck, FILE *err) {
  const FmConfig *c = &deck->c;
  static const struct {
    const char *name;
    FmSchedKind kind;
  } kinds[] = {
      {"constant", FM_SCHED_CONSTANT}, {"cosine", FM_SCHED_COSINE}, {"linear", FM_SCHED_LINEAR}, {"wsd", FM_SCHED_WSD}};
  int found = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (fm_strcasecmp(c->optim.schedule, kinds[i].name) == 0) {
      s->kind = kinds[i].kind;
      found = 1;
    }
  if (!found) {
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
  return 0;
}

/* WSD's cooldown length D: round(decay_fraction*T) in [1, T-W]. */
static int64_t wsd_decay_steps(const FmSchedule *s) {
  int64_t d = llround(s->decay_fraction * (double)s->steps);
  if (d > s->steps - s->warmup) d = s->steps - s->warmup;
  return d < 1 ? 1 : d;
}

double fm_lr_at(const FmSchedule *s, int64_t t) {
  const double lr = s->lr, f = s->min_lr_ratio;
  const int64_t W = s->warmup, T = s->steps;
  if (W > 0 && t <= W) return t <= 0 ? 0.0 : lr * (double)t / (double)W;
  if (s->kind == FM_SCHED_CONSTANT || t <= W) return lr; /* t <= W here: no warmup, t <= 0 */
  if (t >= T) return f * lr;                             /* also T == W: nothing left to decay */
  const double p = (double)(t - W) / (double)(T - W);
  switch (s->kind) {
    case FM_SCHED_COSINE:
      return lr * (f + (1.0 - f) * 0.5 * (1.0 + cos(FM_PI * p)));
    case FM_SCHED_LINEAR:
      return lr * (f + (1.0 - f) * (1.0 - p));
    case FM_SCHED_WSD: {
      const int64_t D = wsd_decay_steps(s);
      if (t <= T - D) return lr;
      return lr * (f + (1.0 - f) * (double)(T - t) / (double)D);
    }
    case FM_SCHED_CONSTANT:
      break;
  }
  return lr;
}
