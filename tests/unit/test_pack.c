/* test_pack.c: packings computed by hand. Rows of R = seq_len + 1 ids; docs
 * end in EOS (here 9); pad id 0; segment ids from 1 per row. */
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/data.h"

static const int32_t A[] = {1, 1, 1, 1, 1, 1, 9}; /* 7 */
static const int32_t Bd[] = {2, 2, 9};            /* 3 */
static const int32_t C[] = {3, 3, 3, 3, 9};       /* 5 */
static const int32_t D[] = {4, 9};                /* 2 */

static void docs4(FmDoc d[4]) {
  d[0] = (FmDoc){A, NULL, 7};
  d[1] = (FmDoc){Bd, NULL, 3};
  d[2] = (FmDoc){C, NULL, 5};
  d[3] = (FmDoc){D, NULL, 2};
}

static void expect_row(const FmPacked *p, int64_t r, const char *tok, const char *seg) {
  char t[64] = "", s[64] = "";
  for (int64_t c = 0; c < p->R; c++) {
    t[c] = (char)('0' + p->tokens[r * p->R + c]);
    s[c] = (char)('0' + p->segment_ids[r * p->R + c]);
  }
  FM_EXPECT_EQ_STR(t, tok);
  FM_EXPECT_EQ_STR(s, seg);
}

FM_TEST(simple_cuts_and_continues) {
  FmDoc d[4];
  docs4(d);
  FmPacked p = {0};
  FM_REQUIRE(fm_pack(&p, d, 4, 5, FM_PACK_SIMPLE, FM_POS_DOC_RESET, 0) == 0); /* R = 6 */
  FM_REQUIRE(p.rows == 3);
  expect_row(&p, 0, "111111", "111111");
  expect_row(&p, 1, "922933", "122233"); /* A's EOS continues as segment 1 */
  expect_row(&p, 2, "339490", "111220");
  FM_EXPECT_EQ_INT(p.tokens_real, 17);
  FM_EXPECT_EQ_INT(p.padding, 1);
  FM_EXPECT_EQ_INT(p.position_ids[1 * 6 + 1], 0); /* doc_reset: B starts at 0 */
  FM_EXPECT_EQ_INT(p.position_ids[1 * 6 + 2], 1);
  FM_EXPECT_EQ_INT(p.loss_mask[2 * 6 + 5], 0);
  fm_packed_free(&p);
}

FM_TEST(bfd_drops_long_documents) {
  FmDoc d[4];
  docs4(d);
  FmPacked p = {0};
  FM_REQUIRE(fm_pack(&p, d, 4, 5, FM_PACK_BFD, FM_POS_CONTINUOUS, 0) == 0);
  /* A (7 > 6) dropped; C(5) opens row 0, B(3) opens row 1, D(2) best fit: row 1 (room 3) */
  FM_REQUIRE(p.rows == 2);
  expect_row(&p, 0, "333390", "111110");
  expect_row(&p, 1, "229490", "111220");
  FM_EXPECT_EQ_INT(p.dropped_docs, 1);
  FM_EXPECT_EQ_INT(p.dropped_tokens, 7);
  FM_EXPECT_EQ_INT(p.docs, 3);
  FM_EXPECT_EQ_INT(p.padding, 2);
  FM_EXPECT_EQ_INT(p.position_ids[1 * 6 + 4], 4); /* continuous: the column */
  fm_packed_free(&p);
}

FM_TEST(bfd_split_chunks_then_best_fit) {
  FmDoc d[4];
  docs4(d);
  FmPacked p = {0};
  FM_REQUIRE(fm_pack(&p, d, 4, 5, FM_PACK_BFD_SPLIT, FM_POS_DOC_RESET, 0) == 0);
  /* items by length: A[0:6] (6), C (5), B (3), D (2), A[6:7] (1)
   * row 0 A chunk; row 1 C (room 1); row 2 B, then D (best fit, room 1);
   * A's EOS ties rows 1 and 2 (room 1): the row that reached the room last */
  FM_REQUIRE(p.rows == 3);
  expect_row(&p, 0, "111111", "111111");
  expect_row(&p, 1, "333390", "111110");
  expect_row(&p, 2, "229499", "111223");
  FM_EXPECT_EQ_INT(p.position_ids[2 * 6 + 5], 0); /* a continuation piece starts at 0 */
  FM_EXPECT_EQ_INT(p.padding, 1);
  FM_EXPECT_EQ_INT(p.tokens_real, 17);
  fm_packed_free(&p);
}

FM_TEST(best_fit_prefers_least_room) {
  /* rows of 10: 6 and 5 open two rows (rooms 4 and 5); a 4 goes to the
   * room-4 row (best fit), not the first that fits */
  static const int32_t s6[] = {1, 1, 1, 1, 1, 9}, s5[] = {2, 2, 2, 2, 9}, s4[] = {3, 3, 3, 9};
  FmDoc d[3] = {{s5, NULL, 5}, {s6, NULL, 6}, {s4, NULL, 4}};
  FmPacked p = {0};
  FM_REQUIRE(fm_pack(&p, d, 3, 9, FM_PACK_BFD, FM_POS_NONE, 0) == 0);
  FM_REQUIRE(p.rows == 2);
  expect_row(&p, 0, "1111193339", "1111112222");
  expect_row(&p, 1, "2222900000", "1111100000");
  fm_packed_free(&p);
}

FM_TEST(masks_follow_documents) {
  static const int32_t t[] = {5, 6, 7, 9};
  static const uint8_t m[] = {0, 0, 1, 1};
  FmDoc d[1] = {{t, m, 4}};
  FmPacked p = {0};
  FM_REQUIRE(fm_pack(&p, d, 1, 2, FM_PACK_SIMPLE, FM_POS_NONE, 0) == 0); /* R = 3 */
  FM_REQUIRE(p.rows == 2);
  static const uint8_t want[6] = {0, 0, 1, 1, 0, 0};
  for (int i = 0; i < 6; i++) FM_EXPECT_EQ_INT(p.loss_mask[i], want[i]);
  FmPacking k;
  FM_EXPECT_EQ_INT(fm_packing_parse("bfd_split", &k), 0);
  FM_EXPECT_EQ_INT(k, FM_PACK_BFD_SPLIT);
  FM_EXPECT_EQ_INT(fm_packing_parse("greedy", &k), FM_EINVAL);
  fm_packed_free(&p);
}

/* Lean packing (prep's window files) against the full packing of the same
 * documents: the same tokens and rows; fm_pack_segments gives, per row, the
 * lengths of the runs of equal nonzero segment ids of the full packing; the
 * mask is kept exactly when a document has one, equal to the full mask then,
 * and mask_odd says whether a packed id's mask is not 1. Random documents
 * (lengths 0..3R, ids, masks), every packing. */
FM_TEST(lean_packing_matches_the_full_one) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  int nchecked = 0;
  for (int trial = 0; trial < 300; trial++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t seq = 1 + (int64_t)(s >> 59), R = seq + 1, n = 1 + (int64_t)((s >> 40) % 24); /* R in 2..33 */
    int masks = (int)((s >> 20) % 3);                                                     /* none, all 1, some 0 */
    FmDoc d[24];
    int32_t tok[24][100];
    uint8_t msk[24][100];
    for (int64_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int64_t len = (int64_t)((s >> 33) % (uint64_t)(3 * R + 1));
      for (int64_t t = 0; t < len; t++) {
        tok[i][t] = (int32_t)((s >> (t % 40)) & 1023) + 1;
        msk[i][t] = (uint8_t)(masks == 2 ? (s >> (t % 50 + 3)) & 1 : 1);
      }
      d[i] = (FmDoc){tok[i], masks ? msk[i] : NULL, len};
    }
    for (int how = 0; how < 3; how++) {
      FmPacked full = {0}, lean = {0};
      lean.lean = true;
      FM_REQUIRE(fm_pack(&full, d, n, seq, (FmPacking)how, FM_POS_DOC_RESET, 7) == 0);
      FM_REQUIRE(fm_pack(&lean, d, n, seq, (FmPacking)how, FM_POS_DOC_RESET, 7) == 0);
      FM_REQUIRE(lean.rows == full.rows);
      FM_EXPECT_EQ_INT(lean.tokens_real, full.tokens_real);
      FM_EXPECT_EQ_INT(lean.padding, full.padding);
      FM_EXPECT_EQ_INT(lean.docs, full.docs);
      FM_EXPECT_EQ_INT(lean.dropped_docs, full.dropped_docs);
      FM_EXPECT(full.rows == 0 || memcmp(lean.tokens, full.tokens, (size_t)(full.rows * R) * 4) == 0);
      FM_EXPECT_EQ_INT(lean.has_mask, masks != 0);
      bool odd = false;
      for (int64_t e = 0; e < full.rows * R; e++) odd |= full.segment_ids[e] != 0 && full.loss_mask[e] != 1;
      FM_EXPECT_EQ_INT(lean.mask_odd, masks != 0 && odd);
      if (masks && full.rows) FM_EXPECT(memcmp(lean.loss_mask, full.loss_mask, (size_t)(full.rows * R)) == 0);
      int32_t *seg = malloc((size_t)(lean.rows + lean.npiece + 1) * sizeof *seg);
      fm_pack_segments(&lean, seg);
      int64_t k = lean.rows;
      for (int64_t r = 0; r < full.rows; r++) {
        const int32_t *sg = full.segment_ids + r * R;
        int32_t cnt = 0;
        for (int64_t t = 0; t < R && sg[t];) {
          int64_t e = t;
          while (e < R && sg[e] == sg[t]) e++;
          FM_EXPECT(k < lean.rows + lean.npiece);
          if (k < lean.rows + lean.npiece) FM_EXPECT_EQ_INT(seg[k], e - t);
          k++, cnt++, t = e;
        }
        FM_EXPECT_EQ_INT(seg[r], cnt);
        nchecked++;
      }
      FM_EXPECT_EQ_INT(k, lean.rows + lean.npiece);
      FM_EXPECT_EQ_INT(fm_pack(&lean, d, n, seq, (FmPacking)how, FM_POS_DOC_RESET, 7),
                       lean.rows || lean.npiece ? FM_EINVAL : 0); /* lean: one call on an empty FmPacked */
      free(seg);
      fm_packed_free(&full);
      fm_packed_free(&lean);
    }
  }
  FM_EXPECT(nchecked > 1000);
}
