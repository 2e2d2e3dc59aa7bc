/* test_schedule.c: fm_lr_at against its closed forms (optim.h) at step 0,
 * the first step, the end of warmup, mid-decay and the last step, for every
 * schedule; WSD's stable phase and cooldown edges; inv_sqrt against
 * fairseq's form; deck binding and its rules.
 * Values are compared to 1e-15 relative (the formulas are evaluated the same
 * way in double); torch's CosineAnnealingLR is in tests/optim. */
#include <stdlib.h>

#include "deck_testing.h"
#include "fm_test.h"
#include "fmhpc/optim.h"

#define PI 3.14159265358979323846

static FmSchedule sched(const char *name, int64_t W, int64_t T) {
  const FmSchedKind *k = fm_schedule_find(name);
  if (!k) {
    fprintf(stderr, "FAIL: no schedule '%s' in schedules.def\n", name);
    abort();
  }
  return (FmSchedule){.kind = k, .lr = 6e-4, .min_lr_ratio = 0.1, .decay_fraction = 0.2, .warmup = W, .steps = T};
}

FM_TEST(warmup_is_linear_from_lr_over_w) {
  FM_EXPECT_EQ_INT(fm_schedule_count(), 5);
  for (int k = 0; k < fm_schedule_count(); k++) {
    FmSchedule s = sched(fm_schedule_at(k)->name, 100, 1000);
    FM_EXPECT(fm_lr_at(&s, 0) == 0.0);
    FM_EXPECT_NEAR(fm_lr_at(&s, 1), 6e-4 / 100, 1e-15, 0);
    FM_EXPECT_NEAR(fm_lr_at(&s, 50), 3e-4, 1e-15, 0);
    FM_EXPECT(fm_lr_at(&s, 100) == 6e-4); /* warmup end: the peak, exactly */
  }
}

FM_TEST(cosine_closed_form) {
  FmSchedule s = sched("cosine", 100, 1000);
  FM_EXPECT_NEAR(fm_lr_at(&s, 101), 6e-4 * (0.1 + 0.9 * 0.5 * (1 + cos(PI / 900))), 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 550), 6e-4 * 0.55, 1e-15, 0); /* half way: (lr + min)/2 */
  FM_EXPECT_NEAR(fm_lr_at(&s, 775), 6e-4 * (0.1 + 0.9 * 0.5 * (1 + cos(0.75 * PI))), 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 1000), 6e-5, 1e-15, 0); /* last step: min_lr_ratio*lr */
  FM_EXPECT_NEAR(fm_lr_at(&s, 1200), 6e-5, 1e-15, 0); /* and after */
  for (int64_t t = 101; t <= 1000; t++) FM_EXPECT(fm_lr_at(&s, t) < fm_lr_at(&s, t - 1));
}

FM_TEST(linear_closed_form) {
  FmSchedule s = sched("linear", 0, 200);
  FM_EXPECT(fm_lr_at(&s, 0) == 6e-4); /* no warmup: step 0 is the peak */
  FM_EXPECT_NEAR(fm_lr_at(&s, 1), 6e-4 * (0.1 + 0.9 * 199.0 / 200.0), 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 100), 6e-4 * 0.55, 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 200), 6e-5, 1e-15, 0);
}

FM_TEST(constant_stays_at_peak) {
  FmSchedule s = sched("constant", 10, 100);
  FM_EXPECT(fm_lr_at(&s, 11) == 6e-4 && fm_lr_at(&s, 100) == 6e-4 && fm_lr_at(&s, 1000) == 6e-4);
}

/* T = 1000, W = 100, decay_fraction 0.2: stable through t = 800, then linear
 * down over D = 200 steps to 0.1*lr at t = 1000. */
FM_TEST(wsd_stable_then_linear_cooldown) {
  FmSchedule s = sched("wsd", 100, 1000);
  FM_EXPECT(fm_lr_at(&s, 101) == 6e-4 && fm_lr_at(&s, 500) == 6e-4 && fm_lr_at(&s, 800) == 6e-4);
  FM_EXPECT_NEAR(fm_lr_at(&s, 801), 6e-4 * (0.1 + 0.9 * 199.0 / 200.0), 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 900), 6e-4 * 0.55, 1e-15, 0);
  FM_EXPECT_NEAR(fm_lr_at(&s, 1000), 6e-5, 1e-15, 0);
  /* D = round(0.1*30) = 3 (not ceil(3.0000000000000004) = 4). */
  FmSchedule r = sched("wsd", 0, 30);
  r.decay_fraction = 0.1;
  FM_EXPECT(fm_lr_at(&r, 27) == 6e-4);
  FM_EXPECT_NEAR(fm_lr_at(&r, 28), 6e-4 * (0.1 + 0.9 * 2.0 / 3.0), 1e-15, 0);
  /* The cooldown never reaches into warmup: D <= T - W (a schedule built in code; a deck asking for more is
   * refused: wsd_cooldown_from_deck_must_fit). */
  FmSchedule q = sched("wsd", 90, 100);
  q.decay_fraction = 0.5;
  FM_EXPECT(fm_lr_at(&q, 90) == 6e-4);
  FM_EXPECT_NEAR(fm_lr_at(&q, 95), 6e-4 * (0.1 + 0.9 * 0.5), 1e-15, 0);
}

/* inv_sqrt against fairseq's inverse_sqrt, written independently: after
 * warmup, lr_t = decay_factor * t^-0.5 with decay_factor = lr * sqrt(W). And
 * exactly: quadrupling t halves the lr (x/4 and sqrt are exact in binary). */
FM_TEST(inv_sqrt_matches_fairseq_form) {
  FmSchedule s = sched("inv_sqrt", 100, 1000);
  const double decay_factor = 6e-4 * sqrt(100.0);
  int n = 0;
  for (int64_t t = 101; t <= 5000; t += 7, n++)
    FM_EXPECT_NEAR(fm_lr_at(&s, t), decay_factor * pow((double)t, -0.5), 1e-15, 0);
  FM_EXPECT(n == 700);
  FM_EXPECT(fm_lr_at(&s, 100) == 6e-4); /* warmup end: the peak */
  FM_EXPECT(fm_lr_at(&s, 400) == 3e-4); /* 6e-4 * sqrt(1/4) */
  for (int64_t t = 101; t <= 300; t++) FM_EXPECT(fm_lr_at(&s, 4 * t) == fm_lr_at(&s, t) / 2);
  FM_EXPECT(fm_lr_at(&s, 2000) < fm_lr_at(&s, 1000)); /* decays on past T */
}

/* The deck "t.in" = text binds, and fm_schedule_from_deck refuses it: its
 * messages into *msgs (caller frees; NULL when the deck did not bind). */
static void schedule_refused(const char *text, char **msgs) {
  FmDeck d;
  fm_deck_init(&d);
  FmDeckSource src = {"t.in", text, false};
  *msgs = NULL;
  const int bound = deck_bind_capture(&d, 1, &src, msgs);
  free(*msgs);
  *msgs = NULL;
  FM_REQUIRE(bound == 0);
  size_t len = 0;
  FILE *err = open_memstream(msgs, &len);
  FmSchedule s;
  FM_EXPECT_EQ_INT(fm_schedule_from_deck(&s, &d, err), FM_EDECK);
  fclose(err);
  fm_deck_free(&d);
}

/* W = 0 would make lr*sqrt(W/t) zero at every step: a deck error naming the key. */
FM_TEST(inv_sqrt_needs_warmup) {
  char *msgs;
  schedule_refused("&optim schedule='inv_sqrt', warmup_steps=0 /\n&train steps=100 /\n", &msgs);
  FM_EXPECT_CONTAINS(msgs, "t.in:1:29: &optim warmup_steps");
  FM_EXPECT_CONTAINS(msgs, "needs warmup_steps >= 1");
  free(msgs);
  FmDeck d;
  fm_deck_init(&d);
  FmSchedule s;
  FmDeckSource ok = {"t.in", "&optim schedule='inv_sqrt', warmup_steps=1, lr=1e-3 /\n&train steps=100 /\n", false};
  FM_REQUIRE(deck_bind_capture(&d, 1, &ok, &msgs) == 0);
  free(msgs);
  FM_REQUIRE(fm_schedule_from_deck(&s, &d, stderr) == 0);
  FM_EXPECT(s.kind == fm_schedule_find("inv_sqrt") && fm_lr_at(&s, 1) == 1e-3);
  FM_EXPECT_NEAR(fm_lr_at(&s, 9), 1e-3 / 3.0, 1e-15, 0);
  fm_deck_free(&d);
}

FM_TEST(schedule_from_deck) {
  FmDeck d;
  fm_deck_init(&d);
  FmDeckSource src = {"t.in", "&optim schedule='wsd', warmup_steps=20, lr=1e-3 /\n&train steps=100 /\n", false};
  char *msgs = NULL;
  FM_REQUIRE(deck_bind_capture(&d, 1, &src, &msgs) == 0);
  free(msgs);
  FmSchedule s;
  FM_REQUIRE(fm_schedule_from_deck(&s, &d, stderr) == 0);
  FM_EXPECT(s.kind == fm_schedule_find("wsd") && s.warmup == 20 && s.steps == 100 && s.lr == 1e-3);
  fm_deck_free(&d);

  schedule_refused("&optim warmup_steps=200 /\n&train steps=100 /\n", &msgs);
  FM_EXPECT_CONTAINS(msgs, "t.in:1:8: &optim warmup_steps");
  FM_EXPECT_CONTAINS(msgs, "must be <= &train steps = 100");
  free(msgs);
}

/* A deck's WSD cooldown that does not fit after the warmup, or rounds to no
 * step, is refused with the numbers (it was clamped into [1, T-W] silently). */
FM_TEST(wsd_cooldown_from_deck_must_fit) {
  static const struct {
    const char *text, *want, *hint;
  } cases[] = {
      {"&optim schedule='wsd' warmup_steps=90 decay_fraction=0.5 /\n&train steps=100 /\n",
       "t.in:1:39: &optim decay_fraction = 0.5: gives a cooldown of 50 steps, but only 10 follow the warmup "
       "(&train steps 100 - &optim warmup_steps 90)",
       "hint: decay_fraction <= 0.1, or fewer warmup_steps, or more steps"},
      {"&optim schedule='wsd' warmup_steps=0 decay_fraction=0.001 /\n&train steps=100 /\n",
       "t.in:1:38: &optim decay_fraction = 0.001: gives round(0.001 x &train steps 100) = 0 cooldown steps: "
       "schedule 'wsd' needs at least 1",
       "hint: decay_fraction >= 0.005 gives one cooldown step"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *msgs;
    schedule_refused(cases[i].text, &msgs);
    FM_EXPECT_CONTAINS(msgs, cases[i].want);
    FM_EXPECT_CONTAINS(msgs, cases[i].hint);
    free(msgs);
  }
}
