/* sched_inv_sqrt.c: the inverse-square-root schedule (Vaswani et al. 2017,
 * section 5.3; fairseq's inverse_sqrt): after the linear warmup of W steps,
 * lr * sqrt(W / t), so step W runs at the peak and the lr halves every time t
 * quadruples. It needs W >= 1: with W = 0 the formula is 0 for every step. */
#include <math.h>

#include "fmhpc/core.h"
#include "fmhpc/optim.h"

static double inv_sqrt_lr(const FmSchedule *s, int64_t t) { return s->lr * sqrt((double)s->warmup / (double)t); }

static int inv_sqrt_check(const FmSchedule *s, const FmDeck *deck, FILE *err) {
  if (s->warmup >= 1) return 0;
  fm_deck_error(deck, err, FM_KEY_optim_warmup_steps,
                "schedule 'inv_sqrt' needs warmup_steps >= 1: its lr is lr*sqrt(warmup_steps/step)");
  if (err) fprintf(err, "hint: warmup_steps = 1 gives lr/sqrt(step) from step 1\n");
  return FM_EDECK;
}

const FmSchedKind fm__sched_inv_sqrt = {"inv_sqrt", "inverse square root: lr*sqrt(warmup/step) after warmup",
                                        inv_sqrt_lr, inv_sqrt_check};
