/* test_mesh.c: the mesh formulas without MPI (fm_mesh_layout, fm_mesh_plan):
 * dp x tp with tp innermost for many worlds, and the messages that reject a
 * tp that does not divide the world. The MPI side is in tests/mpi/test_comm.c. */
#include "fm_test.h"
#include "fmhpc/runtime.h"

FM_TEST(plan_every_divisor_up_to_64_ranks) {
  int checked = 0;
  for (int world = 1; world <= 64; world++)
    for (int tp = 1; tp <= world; tp++) {
      if (world % tp != 0) continue;
      FmMesh m;
      FM_REQUIRE(fm_mesh_plan(&m, world, tp) == 0);
      FM_EXPECT_EQ_INT(m.world_size, world);
      FM_EXPECT_EQ_INT(m.tp, tp);
      FM_EXPECT_EQ_INT(m.dp, world / tp);
      FM_EXPECT_EQ_INT((int64_t)m.dp * m.tp, world);
      FM_EXPECT_EQ_INT(m.world_rank, 0);
      FM_EXPECT_EQ_INT(m.dp_rank, 0);
      FM_EXPECT_EQ_INT(m.tp_rank, 0);
      FM_EXPECT_EQ_INT(m.local_rank, -1); /* no node without MPI */
      FM_EXPECT_EQ_INT(m.local_size, 0);
      FM_EXPECT_EQ_INT(m.device, -1);
      FM_EXPECT(m.world == NULL && m.dp_comm == NULL && m.tp_comm == NULL);
      checked++;
    }
  FM_EXPECT_EQ_INT(checked, 280); /* sum of the divisor counts of 1..64 */
}

FM_TEST(layout_tp_is_innermost) {
  /* Hand-checked points: 8 ranks at tp 4 are dp groups {0..3} and {4..7}. */
  FmMesh m;
  FM_REQUIRE(fm_mesh_layout(&m, 8, 4, 6, NULL, 0) == 0);
  FM_EXPECT_EQ_INT(m.dp, 2);
  FM_EXPECT_EQ_INT(m.dp_rank, 1);
  FM_EXPECT_EQ_INT(m.tp_rank, 2);
  FM_REQUIRE(fm_mesh_layout(&m, 12, 3, 11, NULL, 0) == 0);
  FM_EXPECT_EQ_INT(m.dp_rank, 3);
  FM_EXPECT_EQ_INT(m.tp_rank, 2);
  FM_REQUIRE(fm_mesh_layout(&m, 1024, 8, 1000, NULL, 0) == 0);
  FM_EXPECT_EQ_INT(m.dp, 128);
  FM_EXPECT_EQ_INT(m.dp_rank, 125);
  FM_EXPECT_EQ_INT(m.tp_rank, 0);
  /* Every rank of every small world: coordinates are a bijection onto the
   * dp x tp grid and invert to the world rank. */
  for (int world = 1; world <= 24; world++)
    for (int tp = 1; tp <= world; tp++) {
      if (world % tp) continue;
      int seen[24] = {0};
      for (int r = 0; r < world; r++) {
        FM_REQUIRE(fm_mesh_layout(&m, world, tp, r, NULL, 0) == 0);
        FM_EXPECT(m.dp_rank >= 0 && m.dp_rank < m.dp && m.tp_rank >= 0 && m.tp_rank < tp);
        FM_EXPECT_EQ_INT(m.dp_rank * tp + m.tp_rank, r);
        seen[m.dp_rank * tp + m.tp_rank]++;
      }
      for (int r = 0; r < world; r++) FM_EXPECT_EQ_INT(seen[r], 1);
    }
}

FM_TEST(plan_rejects_tp_not_dividing_world) {
  struct {
    int world, tp;
  } bad[] = {{6, 4}, {4, 3}, {7, 2}, {2, 4}, {1, 2}, {16, 0}, {16, -8}, {0, 1}, {-4, 2}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    FmMesh m;
    char why[512];
    FM_EXPECT_EQ_INT(fm_mesh_layout(&m, bad[k].world, bad[k].tp, 0, why, sizeof why), FM_EINVAL);
    FM_EXPECT(why[0] != '\0');
    FM_EXPECT(m.world == NULL && m.device == -1);
    FM_EXPECT_EQ_INT(fm_mesh_plan(&m, bad[k].world, bad[k].tp), FM_EINVAL);
  }
  /* The message names the key, the rule, and the tp values that would work. */
  char why[512];
  FmMesh m;
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 6, 4, 0, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "&parallel tp = 4 does not divide the 6 ranks of the job");
  FM_EXPECT_CONTAINS(why, "hint: with 6 ranks use tp = 1, 2, 3 or 6, or run on a multiple of 4 ranks");
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 7, 2, 0, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "use tp = 1 or 7,");
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 1, 2, 0, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "does not divide the 1 rank of the job");
  FM_EXPECT_CONTAINS(why, "hint: with 1 rank use tp = 1, or run on a multiple of 2 ranks");
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 16, 0, 0, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "&parallel tp = 0: must be >= 1");
}

FM_TEST(layout_rejects_rank_outside_world) {
  FmMesh m;
  char why[512];
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 8, 2, 8, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "world rank 8: must be in [0, 8)");
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 8, 2, -1, why, sizeof why), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 8, 2, 7, why, sizeof why), 0);
  FM_EXPECT_EQ_INT(why[0], '\0');
  FM_EXPECT_EQ_INT(m.dp_rank, 3);
  FM_EXPECT_EQ_INT(m.tp_rank, 1);
  /* A world with many divisors lists only the first eight in the hint. */
  FM_EXPECT_EQ_INT(fm_mesh_layout(&m, 720, 7, 0, why, sizeof why), FM_EINVAL);
  FM_EXPECT_CONTAINS(why, "use tp = 1, 2, 3, 4, 5, 6, 8 or 9, or run on a multiple of 7 ranks");
}
