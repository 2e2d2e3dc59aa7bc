/* test_emu_nccl.c (label emu, 1, 2 and 4 ranks): src/runtime/comm_nccl.c
 * compiled with FMHPC_HAVE_CUDA against the emulated CUDA runtime and NCCL
 * (nccl_emu.c, fake/ headers), so its bootstrap, ops and error paths run without
 * a GPU. Every FmComm op over NCCL on (emulated) device buffers gives the MPI
 * communicator's bits on host buffers, and both give a reference each rank
 * computes alone from every rank's inputs (int64 sums, fp32 and int64 max,
 * all-gathers of fp32, bf16 and int64, broadcast, barrier; in place too). A
 * failing NCCL or CUDA call names the call, comm_nccl.c:line and the device;
 * two ranks on one device are refused (NCCL's duplicate GPU check); no GPU
 * is FM_ENODEV on every rank. The mesh's dp/tp NCCL communicators reduce as
 * the MPI ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake/cuda_runtime_api.h"
#include "fm_test.h"
#include "fmhpc/runtime.h"

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
/* rank r's element i: |v| < 2^60, so four ranks' sums fit */
static int64_t vi64(int r, int64_t i) {
  return (int64_t)(mix((uint64_t)r * 1000003u + (uint64_t)i) >> 3) - ((int64_t)1 << 60);
}
static float vf32(int r, int64_t i) { /* no zeros: max of -0 and +0 is not pinned down */
  float f = (float)((double)(int64_t)(mix((uint64_t)r * 7919u + (uint64_t)i + 17u) >> 11) * 0x1p-40 - 1024.0);
  return f == 0.0f ? 1.0f : f;
}

static void *dev_from(const void *h, size_t n) {
  void *d = NULL;
  if (cudaMalloc(&d, n) != cudaSuccess) return NULL;
  if (cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
  return d;
}
static void to_host(void *h, const void *d, size_t n) {
  if (cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) memset(h, 0xA5, n);
}

typedef struct {
  FmComm *mpi, *nccl;
  int rank, size;
  int64_t compared;
} Pair;

static int pair_open(Pair *p) {
  memset(p, 0, sizeof *p);
  MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p->size);
  p->mpi = fm_comm_mpi_create(MPI_COMM_WORLD);
  int st = 12345;
  p->nccl = fm_comm_nccl_create(MPI_COMM_WORLD, p->rank, &st); /* one emulated device per rank */
  FM_EXPECT_EQ_INT(st, FM_OK);
  return p->mpi && p->nccl;
}

/* The NCCL result (device buffer d of n bytes) against the MPI one and the reference. */
static void same3(Pair *p, const void *d, const void *mpi, const void *ref, size_t n, int64_t elems, const char *what) {
  void *h = malloc(n);
  to_host(h, d, n);
  int ok_mpi = memcmp(h, mpi, n) == 0, ok_ref = memcmp(h, ref, n) == 0;
  if (!ok_mpi || !ok_ref)
    FM__FAIL("%s: nccl %s the MPI result, %s the reference", what, ok_mpi ? "equals" : "differs from",
             ok_ref ? "equals" : "differs from");
  p->compared += elems;
  free(h);
}

FM_TEST(every_op_bitwise_vs_mpi) {
  Pair p;
  FM_REQUIRE(pair_open(&p));
  FM_EXPECT_EQ_STR(p.nccl->kind, "nccl");
  FM_EXPECT_EQ_INT(p.nccl->size, p.size);
  FM_EXPECT_EQ_INT(p.nccl->rank, p.rank);
  const int P = p.size, r = p.rank;
  const int64_t S = 1031, N = S * P; /* per-rank shard, odd on purpose */
  int64_t *a = malloc((size_t)N * 8), *ref = malloc((size_t)N * 8), *out = malloc((size_t)N * 8);
  for (int64_t i = 0; i < N; i++) a[i] = vi64(r, i);
  /* int64 reduce-scatter (the exact reduction's exchange): rank r keeps block r */
  for (int64_t i = 0; i < S; i++) {
    int64_t s = 0;
    for (int q = 0; q < P; q++) s += vi64(q, r * S + i);
    ref[i] = s;
  }
  int64_t *da = dev_from(a, (size_t)N * 8), *dout = dev_from(out, (size_t)N * 8);
  FM_REQUIRE(da && dout);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(p.mpi, a, out, S, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(p.nccl, da, dout, S, FM_DT_I64, FM_OP_SUM), 0);
  same3(&p, dout, out, ref, (size_t)S * 8, S, "reduce_scatter i64 sum");
  /* in place, NCCL's layout: the result lands in the send buffer's block r */
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(p.nccl, da, da + r * S, S, FM_DT_I64, FM_OP_SUM), 0);
  same3(&p, da + r * S, out, ref, (size_t)S * 8, S, "reduce_scatter i64 sum in place");
  cudaMemcpy(da, a, (size_t)N * 8, cudaMemcpyHostToDevice);
  /* int64 allreduce sum and max */
  for (int64_t i = 0; i < N; i++) {
    int64_t s = 0, m = INT64_MIN;
    for (int q = 0; q < P; q++) {
      s += vi64(q, i);
      m = vi64(q, i) > m ? vi64(q, i) : m;
    }
    ref[i] = s;
  }
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.mpi, a, out, N, FM_DT_I64, FM_OP_SUM), 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, da, dout, N, FM_DT_I64, FM_OP_SUM), 0);
  same3(&p, dout, out, ref, (size_t)N * 8, N, "allreduce i64 sum");
  for (int64_t i = 0; i < N; i++) {
    int64_t m = INT64_MIN;
    for (int q = 0; q < P; q++) m = vi64(q, i) > m ? vi64(q, i) : m;
    ref[i] = m;
  }
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.mpi, a, out, N, FM_DT_I64, FM_OP_MAX), 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, da, da, N, FM_DT_I64, FM_OP_MAX), 0); /* in place */
  same3(&p, da, out, ref, (size_t)N * 8, N, "allreduce i64 max in place");
  /* fp32 max (the block maxima) */
  float *f = malloc((size_t)N * 4), *fref = malloc((size_t)N * 4), *fout = malloc((size_t)N * 4);
  for (int64_t i = 0; i < N; i++) {
    f[i] = vf32(r, i);
    float m = vf32(0, i);
    for (int q = 1; q < P; q++) m = vf32(q, i) > m ? vf32(q, i) : m;
    fref[i] = m;
  }
  float *df = dev_from(f, (size_t)N * 4), *dfo = dev_from(fout, (size_t)N * 4);
  FM_REQUIRE(df && dfo);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.mpi, f, fout, N, FM_DT_F32, FM_OP_MAX), 0);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, df, dfo, N, FM_DT_F32, FM_OP_MAX), 0);
  same3(&p, dfo, fout, fref, (size_t)N * 4, N, "allreduce f32 max");
  /* all-gather fp32 (the parameter shards), out of place and in place */
  for (int64_t i = 0; i < N; i++) fref[i] = vf32((int)(i / S), i % S);
  for (int64_t i = 0; i < S; i++) f[i] = vf32(r, i);
  cudaMemcpy(df, f, (size_t)S * 4, cudaMemcpyHostToDevice);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.mpi, f, fout, S, FM_DT_F32), 0);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.nccl, df, dfo, S, FM_DT_F32), 0);
  same3(&p, dfo, fout, fref, (size_t)N * 4, N, "allgather f32");
  cudaMemset(dfo, 0, (size_t)N * 4);
  cudaMemcpy(dfo + r * S, f, (size_t)S * 4, cudaMemcpyHostToDevice);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.nccl, dfo + r * S, dfo, S, FM_DT_F32), 0);
  same3(&p, dfo, fout, fref, (size_t)N * 4, N, "allgather f32 in place");
  /* all-gather bf16 and int64 */
  uint16_t *b = malloc((size_t)N * 2), *bref = malloc((size_t)N * 2), *bout = malloc((size_t)N * 2);
  for (int64_t i = 0; i < N; i++) bref[i] = (uint16_t)(mix((uint64_t)(i / S) * 31u + (uint64_t)(i % S)) >> 48);
  memcpy(b, bref + r * S, (size_t)S * 2);
  uint16_t *db = dev_from(b, (size_t)S * 2), *dbo = dev_from(bout, (size_t)N * 2);
  FM_REQUIRE(db && dbo);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.mpi, b, bout, S, FM_DT_BF16), 0);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.nccl, db, dbo, S, FM_DT_BF16), 0);
  same3(&p, dbo, bout, bref, (size_t)N * 2, N, "allgather bf16");
  for (int64_t i = 0; i < N; i++) ref[i] = vi64((int)(i / S), i % S);
  cudaMemcpy(da, ref + r * S, (size_t)S * 8, cudaMemcpyHostToDevice);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.mpi, ref + r * S, out, S, FM_DT_I64), 0);
  FM_EXPECT_EQ_INT(fm_comm_allgather(p.nccl, da, dout, S, FM_DT_I64), 0);
  same3(&p, dout, out, ref, (size_t)N * 8, N, "allgather i64");
  /* broadcast from the last rank, in place, bf16 */
  const int root = P - 1;
  memcpy(bout, bref, (size_t)N * 2);
  for (int64_t i = 0; r != root && i < N; i++) bout[i] = (uint16_t)i; /* overwritten */
  cudaMemcpy(dbo, bout, (size_t)N * 2, cudaMemcpyHostToDevice);
  FM_EXPECT_EQ_INT(fm_comm_bcast(p.mpi, bout, N, FM_DT_BF16, root), 0);
  FM_EXPECT_EQ_INT(fm_comm_bcast(p.nccl, dbo, N, FM_DT_BF16, root), 0);
  same3(&p, dbo, bout, bref, (size_t)N * 2, N, "bcast bf16");
  FM_EXPECT_EQ_INT(fm_comm_barrier(p.nccl), 0);
  /* the refusals it shares with MPI, alike on every rank */
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, db, db, S, FM_DT_BF16, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.mpi, b, b, S, FM_DT_BF16, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, da, da, S, FM_DT_I64, FM_OP_BOR), FM_EUNSUPPORTED);
  FM_EXPECT_EQ_INT(fm_comm_bcast(p.nccl, db, S, FM_DT_BF16, P), FM_EINVAL);
  FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(p.nccl, da, dout, -1, FM_DT_I64, FM_OP_SUM), FM_EINVAL);
  FM_EXPECT(p.compared > 0);
  if (r == 0)
    printf("emulated nccl: %d rank(s), %lld elements bitwise equal to MPI and to the reference\n", P,
           (long long)p.compared);
  cudaFree(da), cudaFree(dout), cudaFree(df), cudaFree(dfo), cudaFree(db), cudaFree(dbo);
  free(a), free(ref), free(out), free(f), free(fref), free(fout), free(b), free(bref), free(bout);
  fm_comm_destroy(p.nccl);
  fm_comm_destroy(p.mpi);
}

/* Runs fn with this process's stderr in a file; returns what it wrote. */
static char *capture_stderr(void (*fn)(void *), void *arg) {
  char path[] = "/tmp/fm_emu_nccl_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char *buf = calloc(1, 65536);
  lseek(fd, 0, SEEK_SET);
  ssize_t got = read(fd, buf, 65535);
  if (got < 0) got = 0;
  buf[got] = '\0';
  close(fd);
  unlink(path);
  fprintf(stderr, "%s", buf); /* still in the test's log */
  return buf;
}

typedef struct {
  Pair *p;
  void *d;
  int rc;
  int st;
} Call;
static void failing_allreduce(void *arg) {
  Call *c = arg;
  fm_emu_fail_next("ncclAllReduce"); /* on every rank, so none waits for the others */
  c->rc = fm_comm_allreduce(c->p->nccl, c->d, c->d, 4, FM_DT_I64, FM_OP_SUM);
}
static void failing_sync(void *arg) {
  Call *c = arg;
  fm_emu_fail_next("cudaStreamSynchronize");
  c->rc = fm_comm_bcast(c->p->nccl, c->d, 4, FM_DT_I64, 0);
}
static void same_device(void *arg) {
  Call *c = arg;
  FmComm *k = fm_comm_nccl_create(MPI_COMM_WORLD, 0, &c->st);
  c->rc = k != NULL;
  fm_comm_destroy(k);
}

FM_TEST(failing_call_names_call_file_line_device) {
  Pair p;
  FM_REQUIRE(pair_open(&p));
  int64_t h[4] = {1, 2, 3, 4};
  Call c = {&p, dev_from(h, sizeof h), 0, 0};
  char want[64];
  snprintf(want, sizeof want, "(device %d)", p.rank);
  char *log = capture_stderr(failing_allreduce, &c);
  FM_EXPECT_EQ_INT(c.rc, FM_ENCCL);
  FM_EXPECT_CONTAINS(log, "comm_nccl.c:");
  FM_EXPECT_CONTAINS(log,
                     "NCCL call failed: ncclAllReduce(send, recv, (size_t)n, nccl_type(t), no, im->nccl, im->stream)");
  FM_EXPECT_CONTAINS(log, "unhandled system error");
  FM_EXPECT_CONTAINS(log, want);
  free(log);
  log = capture_stderr(failing_sync, &c);
  FM_EXPECT_EQ_INT(c.rc, FM_ECUDA);
  FM_EXPECT_CONTAINS(log, "CUDA call failed: cudaStreamSynchronize(im->stream): invalid resource handle");
  FM_EXPECT_CONTAINS(log, want);
  free(log);
  /* the communicator still works after a failed call */
  FM_EXPECT_EQ_INT(fm_comm_allreduce(p.nccl, c.d, c.d, 4, FM_DT_I64, FM_OP_SUM), 0);
  int64_t back[4];
  to_host(back, c.d, sizeof back);
  for (int i = 0; i < 4; i++) FM_EXPECT_EQ_INT(back[i], h[i] * p.size);
  /* two ranks on one device: NCCL refuses the communicator, every rank says so */
  if (p.size > 1) {
    log = capture_stderr(same_device, &c);
    FM_EXPECT_EQ_INT(c.rc, 0);
    FM_EXPECT_EQ_INT(c.st, FM_ENCCL);
    FM_EXPECT_CONTAINS(log, "ncclCommInitRank(&im->nccl, size, id, rank)");
    FM_EXPECT_CONTAINS(log, "Duplicate GPU detected");
    FM_EXPECT_CONTAINS(log, "(device 0)");
    free(log);
  }
  /* no GPU: FM_ENODEV on every rank, nothing created */
  setenv("FMHPC_EMU_GPUS", "0", 1);
  int st = 0;
  FmComm *none = fm_comm_nccl_create(MPI_COMM_WORLD, 0, &st);
  unsetenv("FMHPC_EMU_GPUS");
  FM_EXPECT(none == NULL);
  FM_EXPECT_EQ_INT(st, FM_ENODEV);
  FM_EXPECT_EQ_INT(fm_runtime_device_count(), 8);
  cudaFree(c.d);
  fm_comm_destroy(p.nccl);
  fm_comm_destroy(p.mpi);
}

/* The mesh's NCCL twins (dp then tp, on every rank in that order), at tp 1
 * and, when the ranks allow, tp 2: each reduces as its MPI communicator. */
FM_TEST(mesh_nccl_as_mesh_mpi) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  for (int tp = 1; tp <= 2 && P % tp == 0; tp++) {
    FmMesh m;
    FM_REQUIRE(fm_mesh_create(&m, tp, -1) == 0);
    FM_EXPECT_EQ_INT(fm_mesh_nccl(&m), FM_OK);
    FM_REQUIRE(m.dp_nccl && m.tp_nccl);
    FM_EXPECT_EQ_INT(m.dp_nccl->size, P / tp);
    FM_EXPECT_EQ_INT(m.tp_nccl->size, tp);
    FmComm *pairs[2][2] = {{m.dp_comm, m.dp_nccl}, {m.tp_comm, m.tp_nccl}};
    for (int k = 0; k < 2; k++) {
      const int64_t S = 257, N = S * pairs[k][0]->size;
      int64_t *a = malloc((size_t)N * 8), *o = malloc((size_t)N * 8);
      int wr = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &wr);
      for (int64_t i = 0; i < N; i++) a[i] = vi64(wr, i);
      int64_t *da = dev_from(a, (size_t)N * 8), *dout = dev_from(o, (size_t)N * 8);
      FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(pairs[k][0], a, o, S, FM_DT_I64, FM_OP_SUM), 0);
      FM_EXPECT_EQ_INT(fm_comm_reduce_scatter(pairs[k][1], da, dout, S, FM_DT_I64, FM_OP_SUM), 0);
      int64_t *h = malloc((size_t)S * 8);
      to_host(h, dout, (size_t)S * 8);
      FM_EXPECT(memcmp(h, o, (size_t)S * 8) == 0);
      free(h), free(a), free(o);
      cudaFree(da), cudaFree(dout);
    }
    fm_mesh_destroy(&m);
  }
}
