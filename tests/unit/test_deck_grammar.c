/* test_deck_grammar.c: the namelist grammar on its own (src/deck/namelist.c),
 * through a visitor that writes each assignment as one line of text:
 *   group%key(index)@line:col = KIND:value@line:col ...
 * so each case states exactly what the parser must have seen. */
#include "../../src/deck/namelist.h"
#include "fm_test.h"
#include "fmhpc/core.h"

typedef struct Record {
  FmStr out;
  const char *reject; /* a group the visitor refuses */
} Record;

static void record_value(FmStr *b, const FmNlValue *v) {
  switch (v->kind) {
    case FM_NL_INT:
      fm_str_printf(b, " I:%lld", (long long)v->i);
      break;
    case FM_NL_REAL:
      fm_str_printf(b, " R:%.17g", v->r);
      break;
    case FM_NL_BOOL:
      fm_str_printf(b, " B:%c", v->b ? 'T' : 'F');
      break;
    case FM_NL_STR:
      fm_str_printf(b, " S:<%s>", v->s);
      break;
    case FM_NL_WORD:
      fm_str_printf(b, " W:%s", v->s);
      break;
  }
  fm_str_printf(b, "@%d:%d", v->line, v->col);
}

static bool rec_group(void *ctx, const char *group, int line, int col) {
  Record *r = ctx;
  fm_str_printf(&r->out, "&%s@%d:%d\n", group, line, col);
  return !r->reject || strcmp(r->reject, group) != 0;
}

static void rec_assign(void *ctx, const FmNlAssign *a) {
  Record *r = ctx;
  fm_str_printf(&r->out, "%s%%%s", a->group, a->key);
  if (a->has_index) fm_str_printf(&r->out, "(%lld)", (long long)a->index);
  fm_str_printf(&r->out, "@%d:%d =", a->line, a->col);
  for (int i = 0; i < a->nvalues; i++) record_value(&r->out, &a->values[i]);
  fm_str_cat(&r->out, "\n");
}

/* Parse `text` (a deck, or an override when `override`), return the record
 * (caller frees) and the status in *rc. */
static char *parse(const char *text, bool override, int *rc, FmNlError *e) {
  Record r = {.reject = "skipme"};
  fm_str_init(&r.out);
  FmNlVisitor v = {&r, rec_group, rec_assign};
  *rc = override ? fm__nl_parse_override(text, &v, e) : fm__nl_parse(text, &v, e);
  return r.out.s;
}

static void expect_parse(const char *text, const char *want) {
  int rc;
  FmNlError e;
  char *got = parse(text, false, &rc, &e);
  if (rc) FM__FAIL("parse failed at %d:%d: %s", e.line, e.col, e.msg);
  FM_EXPECT_EQ_STR(got, want);
  free(got);
}

FM_TEST(grammar_groups_separators_comments) {
  expect_parse(
      "! a comment line\n"
      "&run task = 'train', seed = 7 ! trailing comment\n"
      "  name = 'x'\n"
      "/\n"
      "\n"
      "&model d_model=64,n_layer=2/\n",
      "&run@2:1\n"
      "run%task@2:6 = S:<train>@2:13\n"
      "run%seed@2:22 = I:7@2:29\n"
      "run%name@3:3 = S:<x>@3:10\n"
      "&model@6:1\n"
      "model%d_model@6:8 = I:64@6:16\n"
      "model%n_layer@6:19 = I:2@6:27\n");
}

FM_TEST(grammar_names_case_insensitive) {
  expect_parse("&OPTIM LR = 1, Weight_Decay = 2 &END",
               "&optim@1:1\noptim%lr@1:8 = I:1@1:13\noptim%weight_decay@1:16 = I:2@1:31\n");
}

FM_TEST(grammar_strings_quotes_and_bang) {
  expect_parse("&g a = 'it''s', b = \"say \"\"hi\"\"\", c = 'x ! not a comment', d = '', e = \"a'b\" /",
               "&g@1:1\n"
               "g%a@1:4 = S:<it's>@1:8\n"
               "g%b@1:17 = S:<say \"hi\">@1:21\n"
               "g%c@1:35 = S:<x ! not a comment>@1:39\n"
               "g%d@1:60 = S:<>@1:64\n"
               "g%e@1:68 = S:<a'b>@1:72\n");
}

FM_TEST(grammar_logicals) {
  expect_parse("&g a = .true., .FALSE., .t., .F., T, f /",
               "&g@1:1\ng%a@1:4 = B:T@1:8 B:F@1:16 B:T@1:25 B:F@1:30 B:T@1:35 B:F@1:38\n");
}

FM_TEST(grammar_numbers) {
  expect_parse("&g i = 768, -3, +12, 9223372036854775807 /",
               "&g@1:1\ng%i@1:4 = I:768@1:8 I:-3@1:13 I:12@1:17 I:9223372036854775807@1:22\n");
  /* Reals: e and d exponents, leading/trailing points; bits as strtod's. */
  int rc;
  FmNlError e;
  FmNlValue *v;
  int n;
  rc = fm__nl_parse_values("1.5d-3 1e5 .5 2. -0.25 1D2 3E+0 0.1", &v, &n, &e);
  FM_REQUIRE(rc == 0 && n == 8);
  const double want[8] = {1.5e-3, 1e5, 0.5, 2.0, -0.25, 100.0, 3.0, 0.1};
  for (int i = 0; i < n; i++) {
    FM_EXPECT_EQ_INT(v[i].kind, FM_NL_REAL);
    FM_EXPECT(memcmp(&v[i].r, &want[i], sizeof(double)) == 0);
  }
  FM_EXPECT_EQ_INT(v[0].len, 6); /* text as written, for messages */
  FM_EXPECT(strncmp(v[0].text, "1.5d-3", 6) == 0);
  fm__nl_values_free(v, n);
}

FM_TEST(grammar_arrays_index_repeat) {
  expect_parse("&g betas = 0.9, 0.95\n w(2) = 0.5\n z = 3*0.0, 1\n s = 2*'a' 'b'\n v ( 3 ) = 1 2 /",
               "&g@1:1\n"
               "g%betas@1:4 = R:0.90000000000000002@1:12 R:0.94999999999999996@1:17\n"
               "g%w(2)@2:2 = R:0.5@2:9\n"
               "g%z@3:2 = R:0@3:6 R:0@3:6 R:0@3:6 I:1@3:13\n"
               "g%s@4:2 = S:<a>@4:6 S:<a>@4:6 S:<b>@4:12\n"
               "g%v(3)@5:2 = I:1@5:12 I:2@5:14\n");
}

/* A word is a value unless '=' or '(' follows it: then it is the next key. */
FM_TEST(grammar_word_values_and_next_key) {
  expect_parse("&g task = train\n lr = 3 w\n\n (1) = 2 /",
               "&g@1:1\ng%task@1:4 = W:train@1:11\ng%lr@2:2 = I:3@2:7\ng%w(1)@2:9 = I:2@4:8\n");
}

FM_TEST(grammar_trailing_commas_crlf_tabs) {
  expect_parse("&g\r\n\ta = 1,\r\n\tb = 2,\r\n/\r\n", "&g@1:1\ng%a@2:2 = I:1@2:6\ng%b@3:2 = I:2@3:6\n");
  expect_parse("\xEF\xBB\xBF&g a = 1 /", "&g@1:1\ng%a@1:4 = I:1@1:8\n"); /* a byte-order mark is skipped */
}

FM_TEST(grammar_terminators) {
  expect_parse("&a x=1/&b y=2 &end\n&c /", "&a@1:1\na%x@1:4 = I:1@1:6\n&b@1:8\nb%y@1:11 = I:2@1:13\n&c@2:1\n");
}

/* A group the visitor rejects (an unknown group) is parsed, not visited. */
FM_TEST(grammar_rejected_group_skipped) {
  expect_parse("&skipme a = 1 /\n&g b = 2 /", "&skipme@1:1\n&g@2:1\ng%b@2:4 = I:2@2:8\n");
}

FM_TEST(grammar_override_forms) {
  const char *cases[][2] = {
      {"optim%lr=3e-4", "&optim@1:1\noptim%lr@1:7 = R:0.00029999999999999997@1:10\n"},
      {"model%betas=0.9,0.99", "&model@1:1\nmodel%betas@1:7 = R:0.90000000000000002@1:13 R:0.98999999999999999@1:17\n"},
      {"optim%betas(2)=0.99", "&optim@1:1\noptim%betas(2)@1:7 = R:0.98999999999999999@1:16\n"},
      {"RUN%Name='a b'", "&run@1:1\nrun%name@1:5 = S:<a b>@1:10\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc;
    FmNlError e;
    char *got = parse(cases[i][0], true, &rc, &e);
    FM_EXPECT_EQ_INT(rc, 0);
    FM_EXPECT_EQ_STR(got, cases[i][1]);
    free(got);
  }
}

FM_TEST(grammar_value_lists) {
  FmNlValue *v;
  int n;
  FmNlError e;
  FM_EXPECT_EQ_INT(fm__nl_parse_values("", &v, &n, &e), 0);
  FM_EXPECT_EQ_INT(n, 0);
  fm__nl_values_free(v, n);
  FM_EXPECT_EQ_INT(fm__nl_parse_values("4*1, 'x'", &v, &n, &e), 0);
  FM_EXPECT_EQ_INT(n, 5);
  FM_EXPECT_EQ_INT(v[3].i, 1);
  FM_EXPECT_EQ_STR(v[4].s, "x");
  fm__nl_values_free(v, n);
  FM_EXPECT_EQ_INT(fm__nl_parse_values("1 /", &v, &n, &e), FM_EDECK);
  FM_EXPECT_EQ_INT(e.col, 3);
  FM_EXPECT_CONTAINS(e.msg, "unexpected '/'");
}

/* Grammar errors carry position and context; the deck tests check wording. */
FM_TEST(grammar_error_context) {
  int rc;
  FmNlError e;
  char *got = parse("&optim\n  lr = 1.2.3 /", false, &rc, &e);
  FM_EXPECT_EQ_INT(rc, FM_EDECK);
  FM_EXPECT_EQ_INT(e.line, 2);
  FM_EXPECT_EQ_INT(e.col, 8);
  FM_EXPECT_EQ_STR(e.group, "optim");
  FM_EXPECT_EQ_STR(e.key, "lr");
  FM_EXPECT_EQ_STR(e.msg, "malformed number '1.2.3'");
  FM_EXPECT_EQ_STR(got, "&optim@1:1\n"); /* nothing after the error is visited */
  free(got);
}
