/* test_cuda_nccl.c (label gpu): the NCCL communicator (src/runtime/comm_nccl.c)
 * on a real device, one rank (NCCL refuses two ranks on one GPU): every
 * FmComm operation the exact reduction uses, on device buffers, against the
 * values a one-rank collective must give (int64 reduce-scatter and sum, max,
 * fp32 and bf16 all-gather, broadcast, barrier), the refusals it shares with
 * MPI, and the mesh's dp/tp NCCL communicators. Skips (exit 77) without a
 * device. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/runtime.h"

#ifdef FMHPC_HAVE_CUDA
#include <cuda_runtime_api.h>

static void *dev_copy(const void *h, size_t n) {
  void *d = NULL;
  if (cudaMalloc(&d, n) != cudaSuccess || cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
  return d;
}
static void back(void *h, const void *d, size_t n) {
  if (cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) memset(h, 0xFF, n);
}
#endif

FM_TEST(nccl_one_rank_every_op) {
#ifndef FMHPC_HAVE_CUDA
  fm_test_skip("no CUDA device: this build has no CUDA backend");
#else
  if (fm_runtime_device_count() < 1) fm_test_skip("no CUDA device");
  int init = 0;
  MPI_Initialized(&init);
  if (!init) MPI_Init(NULL, NULL);
  int st = 12345;
  FmComm *c = fm_comm_nccl_create(MPI_COMM_WORLD, 0, &st);
  FM_EXPECT_EQ_INT(st, FM_OK);
  FM_REQUIRE(c != NULL);
  FM_EXPECT_EQ_STR(c->kind, "nccl");
  FM_EXPECT_EQ_INT(c->size, 1);
  enum { N = 1000 };
  static int64_t hi[N], ho[N];
  for (int i = 0; i < N; i++) hi[i] = (int64_t)0x7FFF000000000000 + i * 0x10001LL - 500LL * i * i;
  int64_t *di = dev_copy(hi, sizeof hi), *dout = dev_copy(ho, sizeof ho);
  FM_REQUIRE(di && dout);
  int compared = 0;
  /* int64 reduce-scatter and allreduce: one rank, so the sum is the input, bit for bit */
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, di, dout, N, FM_DT_I64, FM_OP_SUM), 0);
  back(ho, dout, sizeof ho);
  FM_EXPECT(memcmp(ho, hi, sizeof hi) == 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, di, dout, N, FM_DT_I64, FM_OP_MAX), 0);
  back(ho, dout, sizeof ho);
  FM_EXPECT(memcmp(ho, hi, sizeof hi) == 0);
  compared += 2 * N;
  /* fp32 block maxima in place */
  float hf[N], hg[N];
  for (int i = 0; i < N; i++) hf[i] = (float)i * 0.37f - 100.0f;
  float *df = dev_copy(hf, sizeof hf);
  FM_REQUIRE(df != NULL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, df, df, N, FM_DT_F32, FM_OP_MAX), 0);
  back(hg, df, sizeof hg);
  FM_EXPECT(memcmp(hf, hg, sizeof hf) == 0);
  /* all-gather fp32 and bf16, broadcast */
  float *dg = dev_copy(hf, sizeof hf);
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, df, dg, N, FM_DT_F32), 0);
  back(hg, dg, sizeof hg);
  FM_EXPECT(memcmp(hf, hg, sizeof hf) == 0);
  uint16_t hb[N], hb2[N];
  for (int i = 0; i < N; i++) hb[i] = (uint16_t)(0x3F80 + i);
  uint16_t *db = dev_copy(hb, sizeof hb), *db2 = dev_copy(hb, sizeof hb);
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, db, db2, N, FM_DT_BF16), 0);
  back(hb2, db2, sizeof hb2);
  FM_EXPECT(memcmp(hb, hb2, sizeof hb) == 0);
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, db, N, FM_DT_BF16, 0), 0);
  back(hb2, db, sizeof hb2);
  FM_EXPECT(memcmp(hb, hb2, sizeof hb) == 0);
  FM_EXPECT_EQ_INT(fm_comm_barrier(c), 0);
  compared += 4 * N;
  /* the refusals shared with MPI */
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, db, db, N, FM_DT_BF16, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, di, di, N, FM_DT_I64, FM_OP_BOR), FM_EUNSUPPORTED);
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, db, N, FM_DT_BF16, 1), FM_EINVAL);
  printf("nccl: one rank, %d elements compared over reduce-scatter, allreduce, allgather, bcast\n", compared);
  cudaFree(di), cudaFree(dout), cudaFree(df), cudaFree(dg), cudaFree(db), cudaFree(db2);
  fm_comm_destroy(c);
  /* the mesh's NCCL twins */
  FmMesh m;
  FM_REQUIRE(fm_mesh_create(&m, 1, -1) == 0);
  FM_EXPECT_EQ_INT(fm_mesh_nccl(&m), FM_OK);
  FM_EXPECT(m.dp_nccl && m.tp_nccl && m.dp_nccl->size == 1);
  fm_mesh_destroy(&m);
  MPI_Finalize();
#endif
}
