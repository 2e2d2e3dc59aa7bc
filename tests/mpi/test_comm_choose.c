/* test_comm_choose.c: &parallel comm's decision (fm_comm_choose) for every
 * choice x backend x build, its words and hints; and the mesh's NCCL
 * communicators (fm_mesh_nccl): here, with no GPU, every rank gets the same
 * refusal and the mesh stays usable; with one GPU per rank, both exist and
 * move exact int64 sums. */
#include <string.h>

#include "fm_test.h"
#include "fmhpc/deck.h"
#include "fmhpc/runtime.h"

#ifdef FMHPC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* The runtime may not include deck.h: the values must agree by hand. */
FM_TEST(choice_values_match_the_deck) {
  FM_EXPECT_EQ_INT(FM_COMM_AUTO, FM_COMM_CHOICE_AUTO);
  FM_EXPECT_EQ_INT(FM_COMM_MPI, FM_COMM_CHOICE_MPI);
  FM_EXPECT_EQ_INT(FM_COMM_NCCL, FM_COMM_CHOICE_NCCL);
}

FM_TEST(choose_every_case) {
  static const struct {
    int choice, cuda, have, rc, nccl;
    const char *why, *hint;
  } t[] = {
      {FM_COMM_AUTO, 0, 1, FM_OK, 0, "auto: MPI, the CPU backend's buffers are host memory", NULL},
      {FM_COMM_AUTO, 1, 1, FM_OK, 1, "auto: NCCL, the step's buffers are CUDA device memory", NULL},
      {FM_COMM_AUTO, 0, 0, FM_OK, 0, "auto: MPI, the CPU backend", NULL},
      {FM_COMM_AUTO, 1, 0, FM_OK, 0, "auto: MPI, this build has no NCCL", NULL},
      {FM_COMM_MPI, 0, 1, FM_OK, 0, "asked for", NULL},
      {FM_COMM_MPI, 1, 1, FM_OK, 0, "asked for", NULL},
      {FM_COMM_NCCL, 1, 1, FM_OK, 1, "asked for", NULL},
      {FM_COMM_NCCL, 0, 1, FM_EUNSUPPORTED, 0, "NCCL collectives need the CUDA backend", "comm = 'auto' or 'mpi'"},
      {FM_COMM_NCCL, 0, 0, FM_EUNSUPPORTED, 0, "NCCL collectives need the CUDA backend", "FMHPC_CUDA=ON"},
      {FM_COMM_NCCL, 1, 0, FM_EUNSUPPORTED, 0, "built without it", "FMHPC_CUDA=ON"},
      {7, 0, 1, FM_EINVAL, 0, "unknown &parallel comm choice 7", "'nccl'"},
  };
  int n = 0;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    char why[256] = "untouched";
    const char *hint = "untouched";
    int nccl = -1;
    const int rc = fm__comm_choose(t[i].choice, t[i].cuda, t[i].have, &nccl, why, sizeof why, &hint);
    FM_EXPECT_EQ_INT(rc, t[i].rc);
    FM_EXPECT_EQ_INT(nccl, t[i].nccl);
    if (!strstr(why, t[i].why)) FM__FAIL("case %zu: why \"%s\" lacks \"%s\"", i, why, t[i].why);
    if (!t[i].hint)
      FM_EXPECT(hint == NULL);
    else if (!hint || !strstr(hint, t[i].hint))
      FM__FAIL("case %zu: hint \"%s\" lacks \"%s\"", i, hint ? hint : "(null)", t[i].hint);
    n++;
  }
  FM_EXPECT_EQ_INT(n, 11);
  /* NULL outputs are allowed */
  FM_EXPECT_EQ_INT(fm__comm_choose(FM_COMM_NCCL, 0, 1, NULL, NULL, 0, NULL), FM_EUNSUPPORTED);
  /* the build's own answer */
  int nccl = -1;
  char why[256];
  FM_EXPECT_EQ_INT(fm_comm_choose(FM_COMM_AUTO, 1, &nccl, why, sizeof why, NULL), FM_OK);
#ifdef FMHPC_HAVE_CUDA
  FM_EXPECT_EQ_INT(nccl, 1);
#else
  FM_EXPECT_EQ_INT(nccl, 0);
  FM_EXPECT_EQ_INT(fm_comm_choose(FM_COMM_NCCL, 1, &nccl, why, sizeof why, NULL), FM_EUNSUPPORTED);
#endif
}

/* The mesh's NCCL communicators: all ranks agree; without a GPU (or without
 * NCCL) none exists and the MPI mesh still works; with one GPU per rank both
 * exist and sum int64 exactly. */
FM_TEST(mesh_nccl_all_or_none) {
  FmMesh m;
  int ws = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  FM_REQUIRE(fm_mesh_create(&m, ws % 2 == 0 ? 2 : 1, -1) == 0);
  const int ndev = fm_runtime_device_count();
  const int st = fm_mesh_nccl(&m);
  int all[2] = {st, -st}, got[2];
  MPI_Allreduce(all, got, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  FM_EXPECT_EQ_INT(got[0], -got[1]); /* the same status everywhere */
  if (ndev == 0 || ws > ndev) {
#ifdef FMHPC_HAVE_CUDA
    FM_EXPECT(st != FM_OK || ws <= ndev);
#else
    FM_EXPECT_EQ_INT(st, FM_EUNSUPPORTED);
#endif
    if (st != FM_OK) FM_EXPECT(m.dp_nccl == NULL && m.tp_nccl == NULL);
    int one = 1, sum = 0;
    FM_EXPECT_EQ_INT(fm_comm_allreduce(m.dp_comm, &one, &sum, 1, FM_DT_I32, FM_OP_SUM), 0);
    FM_EXPECT_EQ_INT(sum, m.dp);
  } else {
#ifdef FMHPC_HAVE_CUDA
    FM_EXPECT_EQ_INT(st, FM_OK);
    FM_REQUIRE(m.dp_nccl && m.tp_nccl);
    FM_EXPECT_EQ_INT(m.dp_nccl->size, m.dp);
    FM_EXPECT_EQ_INT(m.tp_nccl->size, m.tp);
    FM_EXPECT_EQ_INT(m.dp_nccl->rank, m.dp_rank);
    int64_t h = (int64_t)1 << 40 | m.world_rank, *d = NULL;
    FM_REQUIRE(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
    FM_REQUIRE(cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    FM_EXPECT_EQ_INT(fm_comm_allreduce(m.tp_nccl, d, d, 1, FM_DT_I64, FM_OP_SUM), 0);
    FM_REQUIRE(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    int64_t want = 0;
    for (int r = 0; r < m.tp; r++) want += (int64_t)1 << 40 | (m.dp_rank * m.tp + r);
    FM_EXPECT_EQ_INT(h, want);
    cudaFree(d);
#endif
  }
  fm_mesh_destroy(&m);
}
