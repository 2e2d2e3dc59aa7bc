/* test_deck_errors.c: one case per kind of deck error. Each asserts the
 * status, the exact "file:line:col: &group key..." message and the hint, as
 * a user would read them on stderr. */
#include "deck_testing.h"
#include "fm_test.h"
#include "fmhpc/core.h"

/* Bind one file "t.in" on fresh defaults and compare everything written to
 * err with `want`. */
/* "&run, &model, ..." from the registry, so adding a group does not edit
 * these messages; then a message with it between `pre` and `post`. */
static char *with_groups(const char *pre, const char *post) {
  FmStr b;
  fm_str_init(&b);
  fm_str_cat(&b, pre);
  for (int g = 0; g < fm_deck_ngroups(); g++) fm_str_printf(&b, "%s&%s", g ? ", " : "", fm_deck_group_name(g));
  fm_str_cat(&b, post);
  return b.s;
}

static void expect_error(const char *text, const char *want) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "t.in", text, &msgs), FM_EDECK);
  FM_EXPECT_EQ_STR(msgs, want);
  free(msgs);
  fm_deck_free(&d);
}

static void expect_override_error(const char *text, const char *want) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_override(&d, text, &msgs), FM_EDECK);
  FM_EXPECT_EQ_STR(msgs, want);
  free(msgs);
  fm_deck_free(&d);
}

FM_TEST(err_unknown_group) {
  char *want = with_groups("t.in:3:3: &optm: unknown group; expected one of ", "\nhint: did you mean '&optim'?\n");
  expect_error("&run seed = 1 /\n\n  &optm lr = 1e-3 /\n", want);
  free(want);
}

FM_TEST(err_unknown_key_did_you_mean) {
  expect_error("&model\n  d_model = 64\n  n_heads = 4\n/\n",
               "t.in:3:3: &model n_heads: unknown key; expected a key of &model (fmhpc --help-deck lists them)\n"
               "hint: did you mean 'n_head'?\n");
}

/* A key put in the wrong group: say where it lives. */
FM_TEST(err_unknown_key_in_other_group) {
  expect_error("&train\n  warmup_steps = 100\n/\n",
               "t.in:2:3: &train warmup_steps: unknown key; expected a key of &train (fmhpc --help-deck lists them)\n"
               "hint: 'warmup_steps' is a key of &optim, not of &train\n");
}

FM_TEST(err_string_for_int) {
  expect_error("&model d_model = 'abc' /\n", "t.in:1:18: &model d_model = 'abc': expected an integer, got a string\n");
}

FM_TEST(err_real_for_int) {
  expect_error("&model\n  n_layer = 7.5\n/",
               "t.in:2:13: &model n_layer = 7.5: expected an integer, got a real number\n");
  expect_error(
      "&train steps = 1e5 /",
      "t.in:1:16: &train steps = 1e5: expected an integer, got a real number\nhint: write it as an integer: 100000\n");
}

FM_TEST(err_int_for_bool) {
  expect_error("&model recompute = 1 /",
               "t.in:1:20: &model recompute = 1: expected a logical (.true., .false., T or F), got an integer\n");
}

FM_TEST(err_unquoted_string) {
  expect_error("&run task = train /",
               "t.in:1:13: &run task = train: expected a quoted string, got an unquoted word\n"
               "hint: quote it: 'train'\n");
}

FM_TEST(err_int_out_of_range) {
  expect_error("&model d_model = 0 /", "t.in:1:18: &model d_model = 0: out of range: must be >= 1\n");
  expect_error("&parallel zero = 2 /", "t.in:1:18: &parallel zero = 2: out of range: must be in [0,1]\n");
}

FM_TEST(err_real_out_of_range) {
  expect_error("&optim\n  lr = -3e-4\n/", "t.in:2:8: &optim lr = -3e-4: out of range: must be > 0\n");
  expect_error("&optim betas = 0.9, 1.0 /", "t.in:1:21: &optim betas(2) = 1.0: out of range: must be in [0,1)\n");
}

FM_TEST(err_choice_not_listed) {
  expect_error("&run task = 'trian' /",
               "t.in:1:13: &run task = 'trian': not a valid choice; expected one of "
               "train|check|prep|tokenizer|eval|generate|export|ifd|dedup\n"
               "hint: did you mean 'train'?\n");
  expect_error("&optim name = 'sgd' /",
               "t.in:1:15: &optim name = 'sgd': not a valid choice; expected one of adamw|lion|sophia\n");
}

FM_TEST(err_unterminated_string) {
  expect_error("&run\n  name = 'abc\n  seed = 1\n/",
               "t.in:2:10: &run name: unterminated string: no closing ' on this line (strings end on the line they "
               "start)\n");
}

/* Reported where the group opened: that is where the user must look. */
FM_TEST(err_unterminated_group) {
  expect_error("! deck\n&optim\n  lr = 1e-3\n",
               "t.in:2:1: &optim: unterminated group: end of file before its closing '/'\n");
  expect_error("&optim lr = 1e-3\n&train steps = 1 /",
               "t.in:2:1: &optim: unterminated group: &train starts before this group's closing '/'\n");
}

FM_TEST(err_bad_array_index) {
  expect_error("&optim betas(0) = 0.9 /", "t.in:1:14: &optim betas: bad array index 0: betas has elements 1..2\n");
  expect_error("&optim betas(3) = 0.9 /", "t.in:1:14: &optim betas: bad array index 3: betas has elements 1..2\n");
  expect_error("&optim betas(1.5) = 0.9 /",
               "t.in:1:14: &optim betas: bad array index '1.5': expected an integer, as in betas(2)\n");
  expect_error("&optim betas(x) = 0.9 /",
               "t.in:1:14: &optim betas: bad array index 'x': expected an integer, as in betas(2)\n");
  expect_error("&optim lr(1) = 0.9 /",
               "t.in:1:11: &optim lr: bad array index: lr is a scalar, not an array; write lr = value\n");
  /* Arrays have no gaps: prompts holds nothing, so element 1 comes first. */
  expect_error("&generate prompts(2) = 'hi' /",
               "t.in:1:19: &generate prompts: bad array index 2: prompts holds 0 value(s), so the next element is 1 "
               "(arrays have no gaps)\n");
}

FM_TEST(err_too_many_values) {
  expect_error("&optim betas = 0.9, 0.95, 0.99 /",
               "t.in:1:27: &optim betas: too many values: betas holds at most 2, got 3 from element 1\n");
  expect_error("&optim betas(2) = 2*0.9 /",
               "t.in:1:19: &optim betas: too many values: betas holds at most 2, got 2 from element 2\n");
  expect_error("&optim lr = 1e-3 2e-3 /", "t.in:1:18: &optim lr: takes one value, got 2\n");
}

FM_TEST(err_override_malformed) {
  expect_override_error("optim.lr=3e-4",
                        "<command line>:1:6: &optim: malformed override 'optim.lr=3e-4': expected '%' after "
                        "the group name 'optim' (group%key=value)\n");
  expect_override_error("optim%lr 3e-4",
                        "<command line>:1:10: &optim lr: malformed override 'optim%lr 3e-4': "
                        "expected '=' after 'lr', got '3e-4'\n");
  expect_override_error("optim%lr=",
                        "<command line>:1:10: &optim lr: malformed override 'optim%lr=': expected a value "
                        "after '='\n");
  expect_override_error("=3",
                        "<command line>:1:1: malformed override '=3': expected group%key=value, as in "
                        "optim%lr=3e-4\n");
  expect_override_error("optim%lr=3e-4 /",
                        "<command line>:1:15: &optim: malformed override 'optim%lr=3e-4 /': "
                        "unexpected '/' after the value; one override sets one key\n");
}

FM_TEST(err_override_unknown_or_bad) {
  expect_override_error("optim%lrr=1e-3",
                        "<command line>:1:7: &optim lrr: unknown key; expected a key of &optim "
                        "(fmhpc --help-deck lists them)\nhint: did you mean 'lr'?\n");
  char *want = with_groups("<command line>:1:1: &optm lr: unknown group; expected one of ",
                           "\nhint: did you mean '&optim'?\n");
  expect_override_error("optm%lr=1e-3", want);
  free(want);
  expect_override_error("model%n_layer=abc",
                        "<command line>:1:15: &model n_layer = abc: expected an integer, got an "
                        "unquoted word\n");
  expect_override_error("optim%lr=1.2.3",
                        "<command line>:1:10: &optim lr: malformed override 'optim%lr=1.2.3': "
                        "malformed number '1.2.3'\n");
}

FM_TEST(err_text_outside_group) {
  expect_error("&run seed = 1 /\nseed = 2\n",
               "t.in:2:1: text outside a group: 'seed'; a deck holds only &group ... / blocks and ! comments\n");
  expect_error("$run seed = 1 $end",
               "t.in:1:1: text outside a group: '$run'; a deck holds only &group ... / blocks "
               "and ! comments\n");
  expect_error("&end", "t.in:1:1: &end outside a group\n");
}

FM_TEST(err_bad_repeat_count) {
  expect_error("&optim betas = 0*0.9 /",
               "t.in:1:16: &optim betas: bad repeat count '0*': must be a positive integer\n");
  expect_error("&optim betas = -1*0.9 /",
               "t.in:1:16: &optim betas: bad repeat count '-1*': must be a positive integer\n");
  expect_error("&optim betas = 1.5*0.9 /",
               "t.in:1:16: &optim betas: bad repeat count '1.5*': must be a positive integer\n");
  expect_error("&optim betas = 2* /",
               "t.in:1:16: &optim betas: expected a value right after '2*' (null values are not "
               "supported; write e.g. 4*0.0)\n");
}

FM_TEST(err_malformed_number) {
  expect_error("&optim lr = 1.2.3 /", "t.in:1:13: &optim lr: malformed number '1.2.3'\n");
  expect_error("&optim lr = 1e /", "t.in:1:13: &optim lr: malformed number '1e'\n");
  expect_error("&model d_model = 12abc /", "t.in:1:18: &model d_model: malformed number '12abc'\n");
  expect_error("&model d_model = 99999999999999999999 /",
               "t.in:1:18: &model d_model = 99999999999999999999: integer 99999999999999999999 is "
               "too large (the limit is 9223372036854775807)\n");
  /* a REAL key takes an integer literal beyond int64 as the real number it is (it was refused as an integer) */
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "t.in", "&optim lr = 99999999999999999999 /", &msgs), FM_OK);
  FM_EXPECT(d.c.optim.lr == 1e20);
  free(msgs);
  fm_deck_free(&d);
  expect_error("&run name = 99999999999999999999 /",
               "t.in:1:13: &run name = 99999999999999999999: expected a quoted string, got an integer\n"
               "hint: quote it: '99999999999999999999'\n");
  expect_error("&optim lr = 1e999 /", "t.in:1:13: &optim lr: real number 1e999 is out of range of a double\n");
}

FM_TEST(err_bad_logical) {
  expect_error("&model recompute = .yes. /",
               "t.in:1:20: &model recompute: bad logical '.yes.': expected .true., .false., T or F\n");
  expect_error("&model recompute = true /",
               "t.in:1:20: &model recompute = true: expected a logical (.true., .false., T or F), got an unquoted "
               "word\n");
}

FM_TEST(err_missing_or_empty_value) {
  expect_error("&run out_dir = /scratch/x /",
               "t.in:1:16: &run out_dir: expected a value after '='; quote text that holds a '/': key = '/path/to'\n");
  expect_error("&optim betas = 0.9,, 0.95 /", "t.in:1:20: &optim betas: empty value: null values are not supported\n");
  expect_error("&optim lr /", "t.in:1:11: &optim lr: expected '=' after 'lr', got '/'\n");
}

/* Legal but suspicious: the same key twice in one file warns, last wins. */
FM_TEST(warn_repeated_key) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(
      deck_bind_text(&d, "t.in", "&optim\n  lr = 1e-3\n  betas(1) = 0.8\n  lr = 2e-3, betas(2) = 0.9\n/", &msgs), 0);
  FM_EXPECT_EQ_STR(msgs,
                   "t.in:4:3: warning: &optim lr: set twice in this file (first at line 2); the last value wins\n");
  FM_EXPECT_EQ_INT(d.nwarnings, 1);
  FM_EXPECT(d.c.optim.lr == 2e-3);
  FM_EXPECT_EQ_INT(d.origin[FM_KEY_optim_lr].line, 4);
  free(msgs);
  /* Across files (and overrides) a key set again is layering: silent. */
  FmDeckSource src[3] = {{"a.in", "&optim lr = 1e-3 /", false},
                         {"b.in", "&optim lr = 5e-4 /", false},
                         {"<command line>", "optim%lr=4e-4", true}};
  FM_EXPECT_EQ_INT(deck_bind_capture(&d, 3, src, &msgs), 0);
  FM_EXPECT_EQ_STR(msgs, "");
  FM_EXPECT_EQ_INT(d.nwarnings, 1);
  FM_EXPECT(d.c.optim.lr == 4e-4);
  free(msgs);
  fm_deck_free(&d);
}

/* All errors of a file are reported, and later files are still checked. */
FM_TEST(err_reports_every_error) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FmDeckSource src[2] = {{"a.in", "&model d_model = 0\n  n_layers = 2 /\n&nope x = 1 /", false},
                         {"b.in", "&optim lr = 'x' /", false}};
  FM_EXPECT_EQ_INT(deck_bind_capture(&d, 2, src, &msgs), FM_EDECK);
  char *want = with_groups("a.in:1:18: &model d_model = 0: out of range: must be >= 1\n"
                           "a.in:2:3: &model n_layers: unknown key; expected a key of &model (fmhpc --help-deck "
                           "lists them)\nhint: did you mean 'n_layer'?\n"
                           "a.in:3:1: &nope: unknown group; expected one of ",
                           "\nb.in:1:13: &optim lr = 'x': expected a real number, got a string\n");
  FM_EXPECT_EQ_STR(msgs, want);
  free(want);
  /* A rejected value leaves the key as it was. */
  FM_EXPECT_EQ_INT(d.c.model.d_model, 768);
  FM_EXPECT(d.origin[FM_KEY_model_d_model].file == NULL);
  free(msgs);
  fm_deck_free(&d);
}

/* Ranks other than 0 bind with err == NULL and must agree on the result. */
FM_TEST(err_silent_ranks_agree) {
  const char *bad = "&model d_model = 7.5 /", *good = "&model d_model = 64 /";
  FmDeckSource s = {"t.in", bad, false};
  FmDeck d;
  fm_deck_init(&d);
  FM_EXPECT_EQ_INT(fm_deck_bind(&d, 1, &s, NULL), FM_EDECK);
  s.text = good;
  FM_EXPECT_EQ_INT(fm_deck_bind(&d, 1, &s, NULL), 0);
  FM_EXPECT_EQ_INT(d.c.model.d_model, 64);
  fm_deck_free(&d);
}

/* A NUL byte would end the text early (the rest unread, defaults used):
 * refused with its line and column; text without one passes. */
FM_TEST(err_nul_byte) {
  static const char text[] = "&run seed = 1 /\n&optim\n  lr = 3e-4\0 /\n&train steps = 5 /\n";
  char *msgs = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msgs, &len);
  FM_EXPECT_EQ_INT(fm_deck_check_bytes("t.in", text, sizeof text - 1, err), FM_EDECK);
  fclose(err);
  FM_EXPECT_EQ_STR(msgs, "t.in:3:12: a NUL byte (\\0): a deck is text, and everything after it would be ignored\n"
                         "hint: remove it; a deck saved by a word processor or a damaged copy can hold one\n");
  free(msgs);
  FM_EXPECT_EQ_INT(fm_deck_check_bytes("t.in", text, 30, NULL), 0);
}

/* A carriage return without a line feed is refused at its place; \r\n
 * line ends pass. */
FM_TEST(err_lone_cr) {
  static const char text[] = "&run seed = 1 /\r\n&optim\r  lr = 3e-4 /\r\n";
  char *msgs = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msgs, &len);
  FM_EXPECT_EQ_INT(fm_deck_check_bytes("t.in", text, sizeof text - 1, err), FM_EDECK);
  fclose(err);
  FM_EXPECT(strncmp(msgs, "t.in:2:7: a carriage return (\\r) without a line feed", 48) == 0);
  free(msgs);
  FM_EXPECT_EQ_INT(fm_deck_check_bytes("t.in", text, 17, NULL), 0);
}
