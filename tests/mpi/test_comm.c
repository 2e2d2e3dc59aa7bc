/* test_comm.c: FmComm over MPI (every op and element type, exact values, the
 * split of counts above one MPI call's limit, argument rules), the mesh on
 * MPI_COMM_WORLD (coordinates and communicators against the formulas, the
 * tp-divides-world and tp-inside-a-node rules) and NCCL creation without a
 * GPU. Each case runs under mpirun at 1, 2, 3 and 4 ranks; expected values
 * are written as closed forms in the rank count so every size checks itself. */
#include "fm_test.h"
#include "fmhpc/runtime.h"

#include <limits.h>
#ifdef FMHPC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static const FmDType all_types[] = {FM_DT_U8,  FM_DT_I32, FM_DT_U32, FM_DT_I64,
                                    FM_DT_U64, FM_DT_F32, FM_DT_F64, FM_DT_BF16};

/* Element i of a pattern that differs per type and per `seed`; bf16 as bits. */
static void put(void *buf, FmDType t, int64_t i, int64_t seed) {
  int64_t v = seed * 1000 + 3 * i + 1;
  switch (t) {
    case FM_DT_U8:
      ((uint8_t *)buf)[i] = (uint8_t)(v % 251);
      break;
    case FM_DT_I32:
      ((int32_t *)buf)[i] = (int32_t)-v;
      break;
    case FM_DT_U32:
      ((uint32_t *)buf)[i] = (uint32_t)v + 4000000000u;
      break;
    case FM_DT_I64:
      ((int64_t *)buf)[i] = -v * 1000000007LL;
      break;
    case FM_DT_U64:
      ((uint64_t *)buf)[i] = UINT64_MAX - (uint64_t)v;
      break;
    case FM_DT_F32:
      ((float *)buf)[i] = (float)v * 0.125f;
      break;
    case FM_DT_F64:
      ((double *)buf)[i] = (double)v / 3.0;
      break;
    case FM_DT_BF16:
      ((uint16_t *)buf)[i] = (uint16_t)(0x3f80 + v % 4096);
      break;
  }
}

FM_TEST(bcast_every_dtype) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int root = c->size - 1; /* not always 0 */
  enum { N = 37 };
  for (size_t k = 0; k < sizeof all_types / sizeof all_types[0]; k++) {
    FmDType t = all_types[k];
    size_t es = fm_dtype_size(t);
    unsigned char buf[N * 8], want[N * 8];
    for (int i = 0; i < N; i++) put(want, t, i, (int64_t)k);
    if (c->rank == root)
      memcpy(buf, want, N * es);
    else
      memset(buf, 0xab, sizeof buf);
    FM_EXPECT_EQ_INT(fm_comm_bcast(c, buf, N, t, root), 0);
    if (memcmp(buf, want, N * es) != 0) FM__FAIL("bcast of %s differs from root's", fm_dtype_name(t));
  }
  fm_comm_destroy(c);
}

FM_TEST(allgather_blocks_in_rank_order) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int P = c->size, me = c->rank;
  int64_t send[5], recv[4 * 5];
  for (int i = 0; i < 5; i++) send[i] = (int64_t)me * 1000000000000LL + i;
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, send, recv, 5, FM_DT_I64), 0);
  for (int r = 0; r < P; r++)
    for (int i = 0; i < 5; i++) FM_EXPECT_EQ_INT(recv[r * 5 + i], (int64_t)r * 1000000000000LL + i);

  uint16_t bs[3], br[4 * 3]; /* bf16 moves as bits */
  for (int i = 0; i < 3; i++) bs[i] = (uint16_t)(0x4000 + me * 8 + i);
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, bs, br, 3, FM_DT_BF16), 0);
  for (int r = 0; r < P; r++)
    for (int i = 0; i < 3; i++) FM_EXPECT_EQ_INT(br[r * 3 + i], 0x4000 + r * 8 + i);

  float f[4 * 2]; /* in place: this rank's block already sits in recv */
  for (int i = 0; i < 2; i++) f[me * 2 + i] = (float)me + 0.5f * (float)i;
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, f + me * 2, f, 2, FM_DT_F32), 0);
  for (int r = 0; r < P; r++)
    for (int i = 0; i < 2; i++) FM_EXPECT_BITS_EQ_F32(f[r * 2 + i], (float)r + 0.5f * (float)i);
  fm_comm_destroy(c);
}

FM_TEST(reduce_scatter_i64_sum_exact) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int64_t P = c->size, me = c->rank;
  enum { N = 4 };
  int64_t send[4 * N], recv[N];
  /* Large terms: a float path would round them, an int64 path must not. */
  for (int b = 0; b < P; b++)
    for (int i = 0; i < N; i++) send[b * N + i] = (me + 1) * (1LL << 52) + b * 100 + i;
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, send, recv, N, FM_DT_I64, FM_OP_SUM), 0);
  for (int i = 0; i < N; i++) FM_EXPECT_EQ_INT(recv[i], P * (P + 1) / 2 * (1LL << 52) + P * (me * 100 + i));

  uint32_t us[4 * 2], ur[2];
  for (int b = 0; b < P; b++)
    for (int i = 0; i < 2; i++) us[b * 2 + i] = (uint32_t)(me * 10 + b + i);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, us, ur, 2, FM_DT_U32, FM_OP_MAX), 0);
  for (int i = 0; i < 2; i++) FM_EXPECT_EQ_INT(ur[i], (P - 1) * 10 + me + i);
  fm_comm_destroy(c);
}

FM_TEST(allreduce_integer_max_min_bor) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int P = c->size, me = c->rank;
  int32_t i32 = me - 2, o32 = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &i32, &o32, 1, FM_DT_I32, FM_OP_MAX), 0);
  FM_EXPECT_EQ_INT(o32, P - 3);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &i32, &o32, 1, FM_DT_I32, FM_OP_MIN), 0);
  FM_EXPECT_EQ_INT(o32, -2);
  uint32_t u32 = 1u << me, ou32 = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &u32, &ou32, 1, FM_DT_U32, FM_OP_BOR), 0);
  FM_EXPECT_EQ_INT(ou32, (1u << P) - 1);
  int64_t i64 = 1LL << (40 + me), o64 = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &i64, &o64, 1, FM_DT_I64, FM_OP_BOR), 0);
  FM_EXPECT_EQ_INT(o64, ((1LL << P) - 1) << 40);
  uint8_t u8 = (uint8_t)(200 + me), ou8 = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &u8, &ou8, 1, FM_DT_U8, FM_OP_MAX), 0);
  FM_EXPECT_EQ_INT(ou8, 200 + P - 1);
  uint64_t u64 = UINT64_MAX - (uint64_t)me, ou64 = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &u64, &ou64, 1, FM_DT_U64, FM_OP_MIN), 0);
  if (ou64 != UINT64_MAX - (uint64_t)(P - 1)) FM__FAIL("u64 MIN: %llu", (unsigned long long)ou64);
  fm_comm_destroy(c);
}

FM_TEST(allreduce_float_sum_and_in_place) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int P = c->size, me = c->rank;
  /* Dyadic values: every partial sum is exact, so the result is too. */
  double d[3] = {me + 0.25, -1024.0 * me, 0.5}, dd[3];
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, d, dd, 3, FM_DT_F64, FM_OP_SUM), 0);
  FM_EXPECT(dd[0] == P * (P - 1) / 2.0 + 0.25 * P);
  FM_EXPECT(dd[1] == -1024.0 * P * (P - 1) / 2.0);
  FM_EXPECT(dd[2] == 0.5 * P);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, d, d, 3, FM_DT_F64, FM_OP_SUM), 0); /* in place */
  FM_EXPECT(d[0] == dd[0] && d[1] == dd[1] && d[2] == dd[2]);
  float f = -0.75f * (float)me, fo = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &f, &fo, 1, FM_DT_F32, FM_OP_MIN), 0);
  FM_EXPECT_BITS_EQ_F32(fo, -0.75f * (float)(P - 1));
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &f, &fo, 1, FM_DT_F32, FM_OP_SUM), 0);
  FM_EXPECT_BITS_EQ_F32(fo, -0.75f * (float)(P * (P - 1) / 2));
  fm_comm_destroy(c);
}

/* The tensor-parallel sum: values whose float sum depends on the order
 * (1e8, 1, -1e8, ... at different ranks), checked bit for bit against the
 * left-to-right sum in rank order computed here, over a count above one
 * internal round (2^20 elements) so the rounds join correctly. */
static float ordered_val(int r, int64_t i) {
  const float big = (float)(1e8 * (double)((i % 7) - 3));
  return (r % 2 == 0 ? big : -big) * (float)(r + 1) + (float)((i * 37 + r * 11) % 101) * 0.37f;
}

FM_TEST(sum_ordered_is_rank_order_bitwise) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  const int P = c->size;
  const int64_t n = (1 << 20) + 4099;
  float *buf = fm_xcalloc((size_t)n, sizeof *buf);
  float *scratch = fm_xcalloc((size_t)fm_comm_sum_ordered_scratch(c, n), sizeof *scratch);
  for (int64_t i = 0; i < n; i++) buf[i] = ordered_val(c->rank, i);
  FM_EXPECT_EQ_INT(fm_comm_sum_ordered(c, buf, n, scratch), 0);
  int64_t bad = 0, differs_from_reverse = 0;
  for (int64_t i = 0; i < n; i++) {
    float want = ordered_val(0, i), rev = ordered_val(P - 1, i);
    for (int r = 1; r < P; r++) want += ordered_val(r, i);
    for (int r = P - 2; r >= 0; r--) rev += ordered_val(r, i);
    uint32_t a, b;
    memcpy(&a, &buf[i], 4);
    memcpy(&b, &want, 4);
    bad += a != b;
    differs_from_reverse += rev != want;
  }
  FM_EXPECT_EQ_INT(bad, 0);
  if (P >= 3) FM_EXPECT(differs_from_reverse > 0); /* the data can tell the orders apart */
  free(buf);
  free(scratch);
  fm_comm_destroy(c);
}

FM_TEST(bcast_str_long_empty_null) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int root = c->size / 2;
  enum { LEN = 300000 };
  char *want = fm_xmalloc(LEN + 1);
  for (int i = 0; i < LEN; i++) want[i] = (char)('a' + (i * 31) % 26);
  want[LEN] = '\0';
  char *s = c->rank == root ? want : NULL;
  FM_EXPECT_EQ_INT(fm_comm_bcast_str(c, &s, root), 0);
  FM_REQUIRE(s != NULL);
  FM_EXPECT_EQ_INT(strlen(s), LEN);
  FM_EXPECT(strcmp(s, want) == 0);
  if (c->rank != root) free(s);

  char empty[] = "";
  s = c->rank == root ? empty : NULL;
  FM_EXPECT_EQ_INT(fm_comm_bcast_str(c, &s, root), 0);
  FM_EXPECT_EQ_STR(s, "");
  if (c->rank != root) free(s);

  char dummy[] = "stale";
  s = c->rank == root ? NULL : dummy; /* NULL on root arrives as NULL */
  FM_EXPECT_EQ_INT(fm_comm_bcast_str(c, &s, root), 0);
  FM_EXPECT(s == NULL);
  free(want);
  fm_comm_destroy(c);
}

/* With at most 7 elements per MPI call, each op must split, issue exactly
 * ceil(n/7) calls and still deliver exact values: the INT_MAX path in small. */
FM_TEST(counts_above_call_limit_are_split) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  int64_t P = c->size, me = c->rank;
  int64_t old = fm__comm_mpi_set_max_count(7);
  enum { N = 100, G = 23 };
  int64_t a[N], b[N];

  for (int i = 0; i < N; i++) a[i] = me == 0 ? 5LL * i - 17 : -1;
  int64_t calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, a, N, FM_DT_I64, 0), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 15);
  for (int i = 0; i < N; i++) FM_EXPECT_EQ_INT(a[i], 5LL * i - 17);

  for (int i = 0; i < N; i++) a[i] = (me + 1) * 1000 + i;
  calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, a, b, N, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, a, a, N, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 30);
  for (int i = 0; i < N; i++) {
    FM_EXPECT_EQ_INT(b[i], P * (P + 1) / 2 * 1000 + P * i);
    FM_EXPECT_EQ_INT(a[i], b[i]);
  }

  int32_t gs[G], gr[4 * G];
  for (int i = 0; i < G; i++) gs[i] = (int32_t)(me * 100 + i);
  calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, gs, gr, G, FM_DT_I32), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 4);
  for (int r = 0; r < P; r++)
    for (int i = 0; i < G; i++) FM_EXPECT_EQ_INT(gr[r * G + i], r * 100 + i);
  for (int i = 0; i < G; i++) gr[me * G + i] = (int32_t)(-me * 100 - i); /* in place, split */
  FM_EXPECT_EQ_INT(fm_comm_allgather(c, gr + me * G, gr, G, FM_DT_I32), 0);
  for (int r = 0; r < P; r++)
    for (int i = 0; i < G; i++) FM_EXPECT_EQ_INT(gr[r * G + i], -r * 100 - i);

  int64_t rs[4 * G], rr[G];
  for (int blk = 0; blk < P; blk++)
    for (int i = 0; i < G; i++) rs[blk * G + i] = (me + 1) * (1LL << 50) + blk * 1000 + i;
  calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, rs, rr, G, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 4);
  for (int i = 0; i < G; i++) FM_EXPECT_EQ_INT(rr[i], P * (P + 1) / 2 * (1LL << 50) + P * (me * 1000 + i));

  char text[] = "fifty characters of text, split into 8 bcast calls";
  char *s = me == 0 ? text : NULL;
  calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_bcast_str(c, &s, 0), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 1 + 8); /* length, then ceil(50/7) pieces */
  FM_EXPECT_EQ_STR(s, text);
  if (me != 0) free(s);

  fm__comm_mpi_set_max_count(old);
  calls = fm__comm_mpi_calls();
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, a, b, N, FM_DT_I64, FM_OP_MAX), 0);
  FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 1);
  fm_comm_destroy(c);
}

FM_TEST(bad_arguments_rejected_on_every_rank) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  uint16_t h[8] = {0};
  float f[8] = {0};
  int64_t v[8] = {0};
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, h, h + 4, 1, FM_DT_BF16, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, h, h + 4, 1, FM_DT_BF16, FM_OP_MAX), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, f, f + 1, 1, FM_DT_F32, FM_OP_BOR), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, v, v + 1, -1, FM_DT_I64, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, v, 1, FM_DT_I64, c->size), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, v, 1, FM_DT_I64, -1), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_bcast(c, v, 1, (FmDType)99, 0), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, v, v, 1, FM_DT_I64, FM_OP_SUM), FM_EINVAL);
  char *s = NULL;
  FM_EXPECT_EQ_INT(fm_comm_bcast_str(c, &s, c->size), FM_EINVAL);
  /* No rank entered a collective above: the communicator is still in step. */
  FM_EXPECT_EQ_INT(fm_comm_barrier(c), 0);
  int64_t one = 1, n = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, &one, &n, 1, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(n, c->size);
  fm_comm_destroy(c);
}

FM_TEST(comm_wraps_any_communicator) {
  FmComm *w = fm_comm_mpi_create(MPI_COMM_WORLD);
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  FM_EXPECT_EQ_STR(w->kind, "mpi");
  FM_EXPECT_EQ_INT(w->rank, wr);
  FM_EXPECT_EQ_INT(w->size, ws);
  FM_EXPECT_EQ_INT(fm_world_rank(), wr);
  FM_EXPECT_EQ_INT(fm_world_size(), ws);
  FM_EXPECT_EQ_INT(fm_comm_barrier(w), 0);
  /* Even and odd world ranks: the wrapper duplicates, so freeing the split
   * right away must leave it working. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half);
  FmComm *h = fm_comm_mpi_create(half);
  MPI_Comm_free(&half);
  FM_EXPECT_EQ_INT(h->rank, wr / 2);
  FM_EXPECT_EQ_INT(h->size, (ws - wr % 2 + 1) / 2);
  int64_t mine = wr, sum = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(h, &mine, &sum, 1, FM_DT_I64, FM_OP_SUM), 0);
  int64_t want = 0;
  for (int r = wr % 2; r < ws; r += 2) want += r;
  FM_EXPECT_EQ_INT(sum, want);
  fm_comm_destroy(h);
  fm_comm_destroy(w);
}

/* Coordinates and communicators of a mesh against the formulas: world rank
 * = dp_rank*tp + tp_rank; the tp group is that dp_rank's tp consecutive
 * ranks; the dp group is the ranks with this tp_rank. */
static void check_mesh(const FmMesh *m, int tp) {
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  FM_EXPECT_EQ_INT(m->world_rank, wr);
  FM_EXPECT_EQ_INT(m->world_size, ws);
  FM_EXPECT_EQ_INT(m->tp, tp);
  FM_EXPECT_EQ_INT(m->dp, ws / tp);
  FM_EXPECT_EQ_INT(m->dp_rank, wr / tp);
  FM_EXPECT_EQ_INT(m->tp_rank, wr % tp);
  FM_REQUIRE(m->world && m->dp_comm && m->tp_comm);
  FM_EXPECT_EQ_INT(m->world->rank, wr);
  FM_EXPECT_EQ_INT(m->world->size, ws);
  FM_EXPECT_EQ_INT(m->tp_comm->rank, m->tp_rank);
  FM_EXPECT_EQ_INT(m->tp_comm->size, tp);
  FM_EXPECT_EQ_INT(m->dp_comm->rank, m->dp_rank);
  FM_EXPECT_EQ_INT(m->dp_comm->size, m->dp);
  /* Membership, not just sizes: sum the world ranks over each group. */
  int64_t me = wr, s = 0;
  FM_EXPECT_EQ_INT(fm_comm_allreduce(m->tp_comm, &me, &s, 1, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(s, (int64_t)m->dp_rank * tp * tp + (int64_t)tp * (tp - 1) / 2);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(m->dp_comm, &me, &s, 1, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(s, (int64_t)tp * m->dp * (m->dp - 1) / 2 + (int64_t)m->dp * m->tp_rank);
}

FM_TEST(mesh_tp1_is_pure_data_parallel) {
  FmMesh m;
  FM_REQUIRE(fm_mesh_create(&m, 1, 0) == 0);
  check_mesh(&m, 1);
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  FM_EXPECT_EQ_INT(m.local_rank, wr); /* one node here */
  FM_EXPECT_EQ_INT(m.local_size, ws);
  FM_EXPECT_EQ_INT(m.device, -1); /* ndevices = 0 */
  fm_mesh_destroy(&m);
  FM_EXPECT(m.world == NULL && m.dp_comm == NULL && m.tp_comm == NULL);

  int ndev = fm_runtime_device_count(); /* "ask the backend" */
  FM_REQUIRE(fm_mesh_create(&m, 1, -1) == 0);
  FM_EXPECT_EQ_INT(m.device, ndev > 0 ? m.local_rank % ndev : -1);
  fm_mesh_destroy(&m);
}

FM_TEST(mesh_tp2_when_it_divides) {
  int ws = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  FmMesh m;
  int rc = fm_mesh_create(&m, 2, 3);
  if (ws % 2 != 0) {
    FM_EXPECT_EQ_INT(rc, FM_EINVAL);
    FM_EXPECT(m.world == NULL && m.dp_comm == NULL && m.tp_comm == NULL);
    return;
  }
  FM_REQUIRE(rc == 0);
  check_mesh(&m, 2);
  FM_EXPECT_EQ_INT(m.device, m.local_rank % 3);
  fm_mesh_destroy(&m);
}

FM_TEST(mesh_tp_must_divide_world) {
  int ws = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  int bad_tp[] = {ws + 1, 0, -2, ws == 4 ? 3 : 2 * ws};
  for (size_t k = 0; k < sizeof bad_tp / sizeof bad_tp[0]; k++) {
    FmMesh m;
    int rc = fm_mesh_create(&m, bad_tp[k], 0);
    FM_EXPECT_EQ_INT(rc, FM_EINVAL);
    FM_EXPECT(m.world == NULL && m.dp_comm == NULL && m.tp_comm == NULL);
    int lo = 0, hi = 0; /* the same verdict on every rank */
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    FM_EXPECT_EQ_INT(lo, FM_EINVAL);
    FM_EXPECT_EQ_INT(hi, FM_EINVAL);
    fm_mesh_destroy(&m); /* safe after a failure */
  }
}

/* Nodes of 2 consecutive ranks (the test knob): tp = world fits only while the
 * world fits in one node; tp = 2 always does. Local ranks and devices follow
 * the fake nodes. */
FM_TEST(mesh_tp_group_stays_inside_a_node) {
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  fm__mesh_set_ranks_per_node(2);
  FmMesh m;
  int rc = fm_mesh_create(&m, ws, 0);
  FM_EXPECT_EQ_INT(rc, ws > 2 ? FM_EINVAL : 0);
  if (rc == 0) check_mesh(&m, ws);
  fm_mesh_destroy(&m);

  FM_REQUIRE(fm_mesh_create(&m, 1, 1) == 0);
  FM_EXPECT_EQ_INT(m.local_rank, wr % 2);
  FM_EXPECT_EQ_INT(m.local_size, ws - wr / 2 * 2 < 2 ? 1 : 2);
  FM_EXPECT_EQ_INT(m.device, 0);
  fm_mesh_destroy(&m);

  if (ws % 2 == 0) {
    FM_REQUIRE(fm_mesh_create(&m, 2, 2) == 0);
    check_mesh(&m, 2);
    FM_EXPECT_EQ_INT(m.device, wr % 2);
    fm_mesh_destroy(&m);
  }
  fm__mesh_set_ranks_per_node(0);
}

/* Here there is no GPU: creation must fail the same way on every rank and
 * not crash. Where GPUs exist (one per rank), it must move exact values. */
FM_TEST(nccl_create_without_gpu_fails_cleanly) {
  int ndev = fm_runtime_device_count();
  int ws = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  int st = 12345;
  if (ndev == 0) {
    FmComm *c = fm_comm_nccl_create(MPI_COMM_WORLD, 0, &st);
    FM_EXPECT(c == NULL);
#ifdef FMHPC_HAVE_CUDA
    FM_EXPECT_EQ_INT(st, FM_ENODEV);
#else
    FM_EXPECT_EQ_INT(st, FM_EUNSUPPORTED);
#endif
    FM_EXPECT(fm_comm_nccl_create(MPI_COMM_WORLD, 0, NULL) == NULL); /* status optional */
    return;
  }
#ifdef FMHPC_HAVE_CUDA
  if (ws > ndev) return; /* NCCL refuses two ranks on one GPU */
  int wr = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  FmComm *c = fm_comm_nccl_create(MPI_COMM_WORLD, wr, &st);
  FM_EXPECT_EQ_INT(st, 0);
  FM_REQUIRE(c != NULL);
  FM_EXPECT_EQ_STR(c->kind, "nccl");
  int64_t h[2] = {wr + 1, -3LL * wr}, *d = NULL;
  FM_REQUIRE(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, d, d, 2, FM_DT_I64, FM_OP_SUM), 0);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  FM_EXPECT_EQ_INT(h[0], (int64_t)ws * (ws + 1) / 2);
  FM_EXPECT_EQ_INT(h[1], -3LL * ws * (ws - 1) / 2);
  FM_EXPECT_EQ_INT(fm_comm_barrier(c), 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(c, d, d, 1, FM_DT_I64, FM_OP_BOR), FM_EUNSUPPORTED);
  cudaFree(d);
  fm_comm_destroy(c);
#endif
}

/* A pseudo-random int64 of (rank, block, i) over the whole range, so sums wrap. */
static int64_t ring_value(int64_t rank, int64_t blk, int64_t i) {
  uint64_t z = (uint64_t)rank * 0x9E3779B97F4A7C15u + (uint64_t)blk * 0xBF58476D1CE4E5B9u + (uint64_t)i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return (int64_t)(z ^ (z >> 31));
}

/* The ring's done callback: each element reported once, holding its final
 * sum when reported. */
typedef struct RingSeen {
  const int64_t *recv;
  int64_t *at;
  int *hits;
} RingSeen;
static void ring_seen(void *ctx, int64_t off, int64_t len) {
  RingSeen *s = ctx;
  for (int64_t i = off; i < off + len; i++) s->at[i] = s->recv[i], s->hits[i]++;
}

/* The pipelined ring reduce-scatter against the sum every rank can compute
 * itself (wrapping two's complement) and against MPI's reduce-scatter, bit for
 * bit: block sizes below, at and across the chunk size (chunks of 3 and 1, so
 * many chunks and steps are in flight), zero elements, and a chunk capped by
 * the max_count knob. */
FM_TEST(ring_reduce_scatter_i64_is_exact) {
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  const int64_t P = c->size, me = c->rank;
  const int64_t sizes[] = {0, 1, 2, 3, 7, 23, 100, 1000};
  const int64_t chunks[] = {3, 1, 1 << 17, 0}; /* 0: no ring, MPI's reduce-scatter */
  int64_t compared = 0;
  for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
    int64_t old = fm__comm_mpi_set_ring_chunk(chunks[ci]);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
      const int64_t n = sizes[si];
      int64_t *send = fm_xmalloc((size_t)(P * n + 1) * sizeof *send);
      int64_t *got = fm_xmalloc((size_t)(n + 1) * sizeof *got), *mpi = fm_xmalloc((size_t)(n + 1) * sizeof *mpi);
      for (int64_t b = 0; b < P; b++)
        for (int64_t i = 0; i < n; i++) send[b * n + i] = ring_value(me, b, i);
      FmRing *ring = fm_comm_ring_create(c, n);
      int64_t *at = fm_xcalloc((size_t)(n + 1), sizeof *at);
      int *hits = fm_xcalloc((size_t)(n + 1), sizeof *hits);
      RingSeen seen = {got, at, hits};
      FM_EXPECT_EQ_INT(fm_comm_ring_reduce_scatter_i64(ring, send, got, ring_seen, &seen), 0);
      for (int64_t i = 0; i < n; i++) {
        FM_EXPECT_EQ_INT(hits[i], 1);
        FM_EXPECT_EQ_INT(at[i], got[i]); /* final when reported */
      }
      memset(got, 0, (size_t)(n + 1) * sizeof *got);
      FM_EXPECT_EQ_INT(fm_comm_ring_reduce_scatter_i64(ring, send, got, NULL, NULL), 0); /* reusable */
      fm_comm_ring_free(ring);
      free(at);
      free(hits);
      if (n > 0) FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(c, send, mpi, n, FM_DT_I64, FM_OP_SUM), 0);
      for (int64_t i = 0; i < n; i++) {
        uint64_t want = 0;
        for (int64_t q = 0; q < P; q++) want += (uint64_t)ring_value(q, me, i);
        FM_EXPECT_EQ_INT(got[i], (int64_t)want);
        FM_EXPECT_EQ_INT(got[i], mpi[i]);
        compared++;
      }
      free(send);
      free(got);
      free(mpi);
    }
    fm__comm_mpi_set_ring_chunk(old);
  }
  int64_t old = fm__comm_mpi_set_max_count(5); /* the chunk is capped by max_count */
  {
    enum { N = 37 };
    int64_t *send = fm_xmalloc((size_t)(P * N) * sizeof *send), got[N];
    for (int64_t b = 0; b < P; b++)
      for (int64_t i = 0; i < N; i++) send[b * N + i] = ring_value(me, b, i);
    FmRing *ring = fm_comm_ring_create(c, N);
    FM_EXPECT_EQ_INT(fm_comm_ring_reduce_scatter_i64(ring, send, got, NULL, NULL), 0);
    fm_comm_ring_free(ring);
    for (int64_t i = 0; i < N; i++) {
      uint64_t want = 0;
      for (int64_t q = 0; q < P; q++) want += (uint64_t)ring_value(q, me, i);
      FM_EXPECT_EQ_INT(got[i], (int64_t)want);
      compared++;
    }
    free(send);
  }
  fm__comm_mpi_set_max_count(old);
  FM_EXPECT(compared == 4 * (0 + 1 + 2 + 3 + 7 + 23 + 100 + 1000) + 37);
  fm_comm_destroy(c);
}
