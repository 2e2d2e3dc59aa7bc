/* test_progress.c: the progress reporter (progress.h) on a clock the test
 * sets: no line before every_s has passed, at most one per every_s, the
 * numbers of each line (count, rate, share, ETA) computed here by hand, no
 * lines with every_s = 0 or without a stream, and duration formatting. */
#include "fm_test.h"
#include "fmhpc/progress.h"

/* Everything p has written to its tmpfile so far. */
static void written(FILE *f, char *buf, size_t n) {
  fflush(f);
  const long at = ftell(f);
  rewind(f);
  const size_t got = fread(buf, 1, n - 1, f);
  buf[got] = 0;
  fseek(f, at, SEEK_SET);
}

FM_TEST(lines_at_most_every_s_with_rate_and_eta) {
  FILE *f = tmpfile();
  FM_EXPECT(f != NULL);
  if (!f) return;
  FmProgress p;
  fm_progress_start(&p, f, "eval", "batches", 400, 5.0);
  const double t0 = p.t0;
  FM_EXPECT(!fm_progress_tick_at(&p, 10, t0 + 1.0)); /* too early */
  FM_EXPECT(!fm_progress_tick_at(&p, 40, t0 + 4.9));
  FM_EXPECT(fm_progress_tick_at(&p, 100, t0 + 5.0));   /* 100 in 5 s: 20/s, 300 left: 15 s */
  FM_EXPECT(!fm_progress_tick_at(&p, 120, t0 + 9.0));  /* 4 s after the last line */
  FM_EXPECT(fm_progress_tick_at(&p, 300, t0 + 100.0)); /* 3/s, 100 left: 33 s */
  char buf[1024];
  written(f, buf, sizeof buf);
  FM_EXPECT_EQ_STR(buf,
                   "eval: 100/400 batches, 20.0 batches/s, 25%, elapsed 5s, ETA 15s\n"
                   "eval: 300/400 batches, 3.0 batches/s, 75%, elapsed 1m40s, ETA 33s\n");
  FM_EXPECT_EQ_INT(p.lines, 2);
  fclose(f);
}

FM_TEST(unknown_total_and_silent_cases) {
  FILE *f = tmpfile();
  FM_EXPECT(f != NULL);
  if (!f) return;
  FmProgress p;
  fm_progress_start(&p, f, "dedup", "records", 0, 1.0);
  FM_EXPECT(fm_progress_tick_at(&p, 50, p.t0 + 2.0));
  FmProgress quiet, none;
  fm_progress_start(&quiet, f, "x", "y", 10, 0.0); /* every_s 0: never */
  FM_EXPECT(!fm_progress_tick_at(&quiet, 5, quiet.t0 + 1e6));
  fm_progress_start(&none, NULL, "x", "y", 10, 1.0); /* not rank 0 */
  FM_EXPECT(!fm_progress_tick_at(&none, 5, none.t0 + 1e6));
  char buf[256];
  written(f, buf, sizeof buf);
  FM_EXPECT_EQ_STR(buf, "dedup: 50 records, 25.0 records/s, elapsed 2s\n");
  fclose(f);
}

FM_TEST(default_period_for_a_file) {
  FILE *f = tmpfile();
  FM_EXPECT(f != NULL);
  if (!f) return;
  FmProgress p;
  fm_progress_start(&p, f, "x", "y", 10, -1);
  FM_EXPECT(p.every_s == FM_PROGRESS_FILE_SECONDS); /* a file is not a terminal */
  fclose(f);
}

FM_TEST(durations) {
  char b[32];
  FM_EXPECT_EQ_STR(fm_fmt_duration(b, sizeof b, 0), "0s");
  FM_EXPECT_EQ_STR(fm_fmt_duration(b, sizeof b, 59.4), "59s");
  FM_EXPECT_EQ_STR(fm_fmt_duration(b, sizeof b, 187), "3m07s");
  FM_EXPECT_EQ_STR(fm_fmt_duration(b, sizeof b, 7500), "2h05m");
  FM_EXPECT_EQ_STR(fm_fmt_duration(b, sizeof b, -1), "?");
}
