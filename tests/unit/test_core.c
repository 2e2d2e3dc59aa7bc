/* test_core.c: the status table, edit distance and number formatting. */
#include "fm_test.h"
#include "fmhpc/core.h"

FM_TEST(status_table) {
  FM_EXPECT_EQ_STR(fm_strerror(FM_OK), "success");
  FM_EXPECT_EQ_STR(fm_strerror(FM_EDECK), "invalid input deck");
  FM_EXPECT_EQ_STR(fm_status_name(FM_EIO), "FM_EIO");
  FM_EXPECT_EQ_STR(fm_strerror(-9999), "unknown status");
  FM_EXPECT(FM_EDECK < 0 && FM_EIO < 0 && FM_EDECK != FM_EIO);
}

FM_TEST(edit_distance) {
  FM_EXPECT_EQ_INT(fm_edit_distance("lr", "lr"), 0);
  FM_EXPECT_EQ_INT(fm_edit_distance("lr", "LR"), 0);
  FM_EXPECT_EQ_INT(fm_edit_distance("n_heads", "n_head"), 1);
  FM_EXPECT_EQ_INT(fm_edit_distance("betsa", "betas"), 1); /* transposition */
  FM_EXPECT_EQ_INT(fm_edit_distance("kitten", "sitting"), 3);
}

FM_TEST(format_numbers) {
  char b[64];
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, 1203807744), "1,203,807,744");
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, 999), "999");
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, -1000), "-1,000");
  FM_EXPECT_EQ_STR(fm_fmt_bytes(b, sizeof b, 1536.0 * 1024 * 1024), "1.50 GiB");
  FM_EXPECT_EQ_STR(fm_fmt_bytes(b, sizeof b, 12), "12 B");
}

FM_TEST(growable_string) {
  FmStr s;
  fm_str_init(&s);
  for (int i = 0; i < 1000; i++) fm_str_printf(&s, "%d,", i % 10);
  FM_EXPECT_EQ_INT(s.len, 2000);
  FM_EXPECT(strncmp(s.s, "0,1,2,", 6) == 0);
  fm_str_free(&s);
}

FM_TEST(dtype_sizes) {
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_BF16), 2);
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_F32), 4);
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_I64), 8);
  FM_EXPECT_EQ_STR(fm_dtype_name(FM_DT_U32), "u32");
}

/* Checked sizes: exact below the limit, refused at and past overflow. */
FM_TEST(checked_sizes) {
  int64_t p = 7;
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_C(3037000499), INT64_C(3037000499), &p), 0);
  FM_EXPECT(p == INT64_C(9223372030926249001));
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_C(3037000500), INT64_C(3037000500), &p), FM_ERANGE);
  FM_EXPECT(p == INT64_C(9223372030926249001)); /* left alone */
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_MAX, -1, &p), 0);
  FM_EXPECT(p == -INT64_MAX);
  const int64_t ok[3] = {1024, 1024, 1024}, at[2] = {INT64_C(1) << 25, INT64_C(1) << 25};
  const int64_t past[2] = {(INT64_C(1) << 25) + 1, INT64_C(1) << 25}, wrap[3] = {INT64_C(1) << 40, 1 << 20, 1 << 20};
  const int64_t zero[2] = {5, 0};
  FM_EXPECT(fm_elems(3, ok) == INT64_C(1) << 30);
  FM_EXPECT(fm_elems(2, at) == FM_MAX_ELEMS);
  FM_EXPECT(fm_elems(2, past) == -1);
  FM_EXPECT(fm_elems(3, wrap) == -1); /* 2^80 wraps to 0 in int64 */
  FM_EXPECT(fm_elems(2, zero) == -1);
}
