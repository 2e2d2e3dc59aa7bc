/* test_json.c: the strict JSON reader against RFC 8259's rules: what it
 * accepts (with exact decoded values) and what it rejects (with the place). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/core.h"
#include "fmhpc/json.h"

static int parse(FmJsonDoc *d, const char *s, FmJsonError *e) { return fm_json_parse(d, s, strlen(s), 0, e); }

FM_TEST(json_values) {
  FmJsonDoc d;
  FmJsonError e;
  FM_REQUIRE(parse(&d, " {\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"x\"}, \"\": 0} ", &e) == 0);
  const FmJson *a = fm_json_get(&d.root, "a");
  FM_REQUIRE(a && a->type == FM_JSON_ARR && a->n == 5);
  FM_EXPECT(a->items[0].is_int && a->items[0].i == 1);
  FM_EXPECT(!a->items[1].is_int);
  FM_EXPECT_NEAR(a->items[1].num, -2500.0, 0, 0);
  FM_EXPECT(a->items[2].type == FM_JSON_BOOL && a->items[2].b);
  FM_EXPECT(a->items[3].type == FM_JSON_BOOL && !a->items[3].b);
  FM_EXPECT(a->items[4].type == FM_JSON_NULL);
  FM_EXPECT_EQ_STR(fm_json_get(fm_json_get(&d.root, "b"), "c")->s, "x");
  FM_EXPECT(fm_json_get(&d.root, "") != NULL);
  FM_EXPECT(fm_json_get(&d.root, "zz") == NULL);
  FM_EXPECT_EQ_STR(d.root.keys[1], "b"); /* document order kept */
  fm_json_free(&d);
}

FM_TEST(json_int64_exact) {
  /* 2^53 + 1 is not a double; safetensors offsets must still be exact. */
  FmJsonDoc d;
  FM_REQUIRE(parse(&d, "[9007199254740993, 9223372036854775807, 99999999999999999999]", NULL) == 0);
  FM_EXPECT(d.root.items[0].is_int);
  FM_EXPECT_EQ_INT(d.root.items[0].i, 9007199254740993LL);
  FM_EXPECT_EQ_INT(d.root.items[1].i, INT64_MAX);
  FM_EXPECT(!d.root.items[2].is_int); /* overflows int64: a number, not an exact int */
  fm_json_free(&d);
}

/* Integers (short ones take a path without strtod/strtoll): every field as
 * the C library reads the same text, across the 18-digit boundary, at
 * doubles' rounding points (2^53 + 1, ...), and -0 a negative zero. */
FM_TEST(json_integers_as_libc_reads_them) {
  static const char *const nums[] = {"0",
                                     "-0",
                                     "7",
                                     "-7",
                                     "123456789",
                                     "9007199254740993",
                                     "-9007199254740993",
                                     "18014398509481987",
                                     "999999999999999999",
                                     "-99999999999999999",
                                     "1000000000000000001",
                                     "-999999999999999999",
                                     "9223372036854775807",
                                     "-9223372036854775808",
                                     "9223372036854775808",
                                     "36028797018963971"};
  char text[1024] = "[";
  size_t n = sizeof nums / sizeof *nums;
  for (size_t i = 0; i < n; i++) {
    strcat(text, nums[i]);
    strcat(text, i + 1 < n ? "," : "]");
  }
  uint64_t x = 88172645463325252ull; /* and random integers of every length */
  FmStr many;
  fm_str_init(&many);
  fm_str_cat(&many, "[");
  char num[32][24];
  for (int i = 0; i < 32; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    snprintf(num[i], sizeof num[i], "%s%llu", i % 3 ? "" : "-",
             (unsigned long long)(x >> (i * 2 % 64)) % 1000000000000000000ull);
    fm_str_printf(&many, "%s%s", num[i], i < 31 ? "," : "]");
  }
  for (int pass = 0; pass < 2; pass++) {
    FmJsonDoc d;
    FM_REQUIRE(parse(&d, pass ? many.s : text, NULL) == 0);
    FM_REQUIRE(d.root.n == (pass ? 32 : (int64_t)n));
    for (int64_t i = 0; i < d.root.n; i++) {
      const char *t = pass ? num[i] : nums[i];
      const FmJson *v = &d.root.items[i];
      FM_EXPECT(v->type == FM_JSON_NUM);
      double want = strtod(t, NULL);
      FM_EXPECT(memcmp(&v->num, &want, sizeof want) == 0); /* the same bits, the sign of zero included */
      errno = 0;
      long long ll = strtoll(t, NULL, 10);
      FM_EXPECT_EQ_INT(v->is_int, errno == 0);
      if (v->is_int) FM_EXPECT_EQ_INT(v->i, ll);
    }
    fm_json_free(&d);
  }
  fm_str_free(&many);
}

FM_TEST(json_string_escapes) {
  FmJsonDoc d;
  /* \u00e9 = é (C3 A9), \ud83d\ude00 = U+1F600 (F0 9F 98 80), \u0000 keeps its NUL. */
  FM_REQUIRE(parse(&d, "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\u0000z\"", NULL) == 0);
  const char want[] = "a\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80\0z";
  FM_EXPECT_EQ_INT(d.root.len, sizeof want - 1);
  FM_EXPECT(memcmp(d.root.s, want, sizeof want - 1) == 0);
  fm_json_free(&d);
  /* Raw UTF-8 passes through unchanged. */
  FM_REQUIRE(parse(&d, "\"\xce\xb1\xce\xb2 \xe2\x82\xac\"", NULL) == 0);
  FM_EXPECT_EQ_STR(d.root.s, "\xce\xb1\xce\xb2 \xe2\x82\xac");
  fm_json_free(&d);
}

static void expect_error(const char *text, int line, int col, const char *msg) {
  FmJsonDoc d;
  FmJsonError e;
  memset(&e, 0, sizeof e);
  int rc = fm_json_parse(&d, text, strlen(text), 8, &e);
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  FM_EXPECT_EQ_INT(e.line, line);
  FM_EXPECT_EQ_INT(e.col, col);
  FM_EXPECT_CONTAINS(e.msg, msg);
}

FM_TEST(json_rejects_with_place) {
  expect_error("{\"a\": 1,}", 1, 9, "trailing comma");
  expect_error("[1, 2", 1, 6, "',' or ']' expected");
  expect_error("{\n  \"a\" 1}", 2, 7, "':' expected");
  expect_error("[01]", 1, 2, "leading zero");
  expect_error("[1.]", 1, 4, "digit expected after '.'");
  expect_error("\"abc", 1, 1, "unterminated string");
  expect_error("\"a\tb\"", 1, 3, "control character");
  expect_error("\"\\ud800x\"", 1, 2, "lone high surrogate");
  expect_error("\"\\udc00\"", 1, 2, "lone low surrogate");
  expect_error("\"\\q\"", 1, 2, "bad escape");
  expect_error("\"\xc3\x28\"", 1, 2, "invalid UTF-8");
  expect_error("\"\xed\xa0\x80\"", 1, 2, "invalid UTF-8"); /* encoded surrogate */
  expect_error("\"\xc0\xaf\"", 1, 2, "invalid UTF-8");     /* overlong '/' */
  expect_error("[1] x", 1, 5, "unexpected text after");
  expect_error("tru", 1, 1, "unexpected character");
  expect_error("[[[[[[[[[[1]]]]]]]]]]", 1, 9, "nesting deeper than 8");
  expect_error("", 1, 1, "end of input");
}

/* fm_json_write_str of s[0..n) into a new string (caller frees); its length in *len. */
static char *written(const char *s, size_t n, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  fm_json_write_str(f, s, n);
  fclose(f);
  return buf;
}

FM_TEST(json_write_roundtrip) {
  const char raw[] = "q\"b\\s\n\x01\xc3\xa9";
  size_t len = 0;
  char *buf = written(raw, sizeof raw - 1, &len);
  FM_EXPECT_EQ_STR(buf, "\"q\\\"b\\\\s\\n\\u0001\xc3\xa9\"");
  FmJsonDoc d;
  FM_REQUIRE(fm_json_parse(&d, buf, len, 0, NULL) == 0);
  FM_EXPECT_EQ_INT(d.root.len, sizeof raw - 1);
  FM_EXPECT(memcmp(d.root.s, raw, sizeof raw - 1) == 0);
  fm_json_free(&d);
  free(buf);
}

/* Bytes that start no whole UTF-8 character (a generated token that ends
 * inside one, a cut sequence at the end, a stray continuation, 0xff) are
 * written as \ufffd, so the output parses (generate.jsonl was invalid JSON);
 * whole characters of 2, 3 and 4 bytes pass as they are. */
FM_TEST(json_write_invalid_utf8_as_replacement) {
  const char raw[] =
      "a\x81\x96"
      "b\xe2\x82\xac\xf0\x9f\x98\x80\xff\xc3";
  size_t len = 0;
  char *buf = written(raw, sizeof raw - 1, &len);
  FM_EXPECT_EQ_STR(buf, "\"a\\ufffd\\ufffdb\xe2\x82\xac\xf0\x9f\x98\x80\\ufffd\\ufffd\"");
  FmJsonDoc d;
  FM_REQUIRE(fm_json_parse(&d, buf, len, 0, NULL) == 0);
  FM_EXPECT_EQ_STR(d.root.s,
                   "a\xef\xbf\xbd\xef\xbf\xbd"
                   "b\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbd\xef\xbf\xbd");
  fm_json_free(&d);
  free(buf);
}

FM_TEST(json_large_document) {
  /* A merges-list shape: 200k two-string arrays in one arena. */
  FmStr s;
  fm_str_init(&s);
  fm_str_cat(&s, "{\"merges\": [");
  for (int i = 0; i < 200000; i++) fm_str_printf(&s, "%s[\"t%d\", \"u%d\"]", i ? "," : "", i, i);
  fm_str_cat(&s, "]}");
  FmJsonDoc d;
  FM_REQUIRE(fm_json_parse(&d, s.s, s.len, 0, NULL) == 0);
  const FmJson *m = fm_json_get(&d.root, "merges");
  FM_REQUIRE(m && m->n == 200000);
  FM_EXPECT_EQ_STR(m->items[123456].items[1].s, "u123456");
  fm_json_free(&d);
  fm_str_free(&s);
}

FM_TEST(utf8_check_after_ascii_runs) {
  /* fm_utf8_check skips 8 ASCII bytes at a time: a bad byte planted after an
   * ASCII run of every length 0..40 is still found at its own offset, and a
   * good multi-byte sequence anywhere in the run is still accepted. */
  char buf[64];
  int checked = 0;
  for (int off = 0; off <= 40; off++) {
    static const char *const bad[] = {"\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82"};
    for (int b = 0; b < 5; b++) {
      memset(buf, 'a', (size_t)off);
      size_t n = strlen(bad[b]);
      memcpy(buf + off, bad[b], n);
      FM_EXPECT_EQ_INT(fm_utf8_check(buf, (size_t)off + n), off);
      checked++;
    }
    memset(buf, 'a', sizeof buf);
    memcpy(buf + off, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9); /* e-acute, euro sign, an emoji */
    FM_EXPECT_EQ_INT(fm_utf8_check(buf, sizeof buf), -1);
    checked++;
  }
  FM_EXPECT_EQ_INT(checked, 41 * 6);
}

FM_TEST(json_string_runs_at_every_offset) {
  /* String literals are scanned and copied 16 (SSE2) or 8 bytes at a time: an
   * escape, a raw multi-byte character, a control byte or a bad UTF-8 byte
   * planted after a plain run of every length 0..40, then a plain tail of
   * 0..20, decodes to (or fails at) exactly what RFC 8259 says, at its own column. */
  static const struct {
    const char *lit, *dec; /* as written in the literal; decoded ("" with err) */
    const char *err;
  } sp[] = {{"\\n", "\n", NULL},
            {"\\u00e9", "\xc3\xa9", NULL},
            {"\xe2\x82\xac", "\xe2\x82\xac", NULL},
            {"\\\\\\\"", "\\\"", NULL},
            {"\x01", "", "control character"},
            {"\xc3\x28", "", "invalid UTF-8"},
            {"\xc3\xa9\\n", "\xc3\xa9\n", NULL},
            {"\xc3\x28\\n", "", "invalid UTF-8"}}; /* then a backslash */
  char lit[128], want[128];
  int checked = 0;
  for (int off = 0; off <= 40; off++)
    for (int tail = 0; tail <= 20; tail++)
      for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) {
        size_t n = 0, w = 0;
        lit[n++] = '"';
        for (int i = 0; i < off; i++) lit[n++] = want[w++] = (char)('a' + i % 26);
        memcpy(lit + n, sp[k].lit, strlen(sp[k].lit));
        n += strlen(sp[k].lit);
        memcpy(want + w, sp[k].dec, strlen(sp[k].dec));
        w += strlen(sp[k].dec);
        for (int i = 0; i < tail; i++) lit[n++] = want[w++] = (char)('A' + i % 26);
        lit[n++] = '"';
        FmJsonDoc d;
        FmJsonError e;
        memset(&e, 0, sizeof e);
        char *exact = malloc(n); /* exactly the literal: a load past its end is a heap overflow ASan sees */
        memcpy(exact, lit, n);
        int rc = fm_json_parse(&d, exact, n, 0, &e);
        free(exact);
        if (sp[k].err) {
          FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
          FM_EXPECT_EQ_INT(e.col, 2 + off); /* the planted byte: after the quote and the run */
          FM_EXPECT_CONTAINS(e.msg, sp[k].err);
        } else {
          FM_REQUIRE(rc == 0);
          FM_EXPECT_EQ_INT(d.root.len, w);
          FM_EXPECT(memcmp(d.root.s, want, w) == 0 && d.root.s[w] == '\0');
          fm_json_free(&d);
        }
        checked++;
      }
  FM_EXPECT_EQ_INT(checked, 41 * 21 * 8);
}
