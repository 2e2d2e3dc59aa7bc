/* test_emu_reduce.c (label emu, 1, 2 and 4 ranks): the exact reduction's
 * exchange on the device (reduce.c, fm_reduce_use_nccl): the emulated CUDA
 * kernels quantise (quant_add) and dequantise (dequant), the emulated NCCL
 * (nccl_emu.c under the real comm_nccl.c) agrees the flags and block maxima
 * and reduce-scatters the int64 sums, all on device buffers. Against the
 * host path over MPI (fm_reduce_add/finish, the ring): the same shard bits,
 * the same next scales, the same redo after an overflow, the same skip and
 * first NaN element after a NaN; and against one rank reducing every rank's
 * micro-batches alone (MPI_COMM_SELF): the shard does not depend on the rank
 * count. The parameter all-gather on the device equals the host one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/simt.h"
#include "emu_backend.h"
#include "fm_test.h"
#include "fmhpc/dist.h"
#include "fmhpc/runtime.h"

enum { MICRO = 2 }; /* micro-batches per rank */
static const int64_t N = 5 * FM_DIST_BLOCK + 777;

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
/* rank q's micro-batch m: gradients over 30 binades; `poison` plants what
 * the case needs on rank q = P-1, micro-batch 1 */
enum { CLEAN, OVERFLOW, NAN_AT };
static void grad_of(float *g, int q, int m, int P, int poison) {
  for (int64_t i = 0; i < N; i++) {
    const uint64_t u = mix(((uint64_t)q * 131 + (uint64_t)m) * 0x100000000ull + (uint64_t)i);
    const double a = (double)(u >> 11) * 0x1p-53 * 2.0 - 1.0, e = (double)((u >> 3) & 31);
    g[i] = (float)(a * ldexp(1.0, -(int)e));
  }
  if (q == P - 1 && m == 1 && poison == OVERFLOW) g[3 * FM_DIST_BLOCK + 11] = 1e6f; /* past 4096x of amax 1 */
  if (q == P - 1 && m == 1 && poison == NAN_AT) g[2 * FM_DIST_BLOCK + 5] = NAN;
}

typedef struct {
  FmComm *mpi, *nccl;
  int P, r;
} World;

static void world(World *w) {
  MPI_Comm_size(MPI_COMM_WORLD, &w->P);
  MPI_Comm_rank(MPI_COMM_WORLD, &w->r);
  w->mpi = fm_comm_mpi_create(MPI_COMM_WORLD);
  int st = 0;
  w->nccl = fm_comm_nccl_create(MPI_COMM_WORLD, w->r, &st);
  FM_EXPECT_EQ_INT(st, FM_OK);
}

/* One step on both paths; returns what finish said on each, and the shards. */
typedef struct {
  int rc_h, rc_d;
  bool nf_h, nf_d;
} Finish;

static Finish step(FmReduce *h, FmReduce *d, const World *w, int poison, float *gh, float *dgrad, float *sh,
                   float *sd_host) {
  Finish f = {0, 0, false, false};
  fm_reduce_begin(h);
  fm_reduce_begin(d);
  for (int m = 0; m < MICRO; m++) {
    grad_of(gh, w->r, m, w->P, poison);
    fm_reduce_add(h, gh);
    emu.copy_to_device(dgrad, gh, N * (int64_t)sizeof *gh);
    if (fm_reduce_on_device(d))
      fm_reduce_add_device(d, dgrad);
    else
      fm_reduce_add(d, gh); /* the host path a NaN sends the device path to */
  }
  f.rc_h = fm_reduce_finish(h, NULL, sh, &f.nf_h);
  f.rc_d = fm_reduce_finish(d, NULL, sd_host, &f.nf_d);
  return f;
}

static int64_t bit_diffs(const void *a, const void *b, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += memcmp((const char *)a + 4 * i, (const char *)b + 4 * i, 4) != 0;
  return k;
}

FM_TEST(device_exchange_bitwise_vs_host) {
  World w;
  world(&w);
  FM_REQUIRE(w.nccl != NULL);
  const int64_t M = (int64_t)MICRO * w.P;
  for (int own = 0; own < 2; own++) { /* the caller's device shard, or reduce's own copied to the host */
    FmReduce h, d;
    FM_REQUIRE(fm_reduce_create(&h, N, M, true, w.mpi) == 0);
    FM_REQUIRE(fm_reduce_create(&d, N, M, true, w.mpi) == 0);
    fm_reduce_use_device(&d, &emu);
    float *shard_d = own ? NULL : emu.alloc(d.S * (int64_t)sizeof(float));
    fm_reduce_use_nccl(&d, w.nccl, shard_d);
    FM_REQUIRE(d.nccl == w.nccl);
    FM_REQUIRE(d.d_amax_prev != NULL); /* the scales on the device: the redo below uses them */
    const int64_t lo = fm_reduce_lo(&h), len = fm_reduce_hi(&h) - lo;
    float *gh = fm_xcalloc((size_t)N, sizeof *gh), *dgrad = emu.alloc(N * (int64_t)sizeof(float));
    float *sh = fm_xcalloc((size_t)h.S, sizeof *sh), *sd = fm_xcalloc((size_t)h.S, sizeof *sd);
    int64_t compared = 0;
    /* 1: a clean step */
    Finish f = step(&h, &d, &w, CLEAN, gh, dgrad, sh, sd);
    FM_EXPECT_EQ_INT(f.rc_h, 0);
    FM_EXPECT_EQ_INT(f.rc_d, 0);
    FM_EXPECT(!f.nf_h && !f.nf_d);
    if (!own) emu.copy_to_host(sd, shard_d, len * (int64_t)sizeof *sd);
    FM_EXPECT_EQ_INT(bit_diffs(sd, sh, len), 0);
    fm_reduce_scales_to_host(&d); /* the maxima stay on the device (the next scales are computed there) */
    FM_EXPECT_EQ_INT(bit_diffs(d.amax_prev, h.amax_prev, d.nblocks), 0);
    compared += len + d.nblocks;
    /* ... against one rank that reduces every rank's micro-batches */
    FmComm *self = fm_comm_mpi_create(MPI_COMM_SELF);
    FmReduce one;
    FM_REQUIRE(fm_reduce_create(&one, N, M, true, self) == 0);
    fm_reduce_begin(&one);
    for (int q = 0; q < w.P; q++)
      for (int m = 0; m < MICRO; m++) {
        grad_of(gh, q, m, w.P, CLEAN);
        fm_reduce_add(&one, gh);
      }
    float *all = fm_xcalloc((size_t)N, sizeof *all);
    bool nf1 = false;
    FM_EXPECT_EQ_INT(fm_reduce_finish(&one, NULL, all, &nf1), 0);
    FM_EXPECT_EQ_INT(bit_diffs(sd, all + lo, len), 0);
    compared += len;
    /* 2: an overflow on the last rank: a redo everywhere, with the same wider scales; then the redo */
    f = step(&h, &d, &w, OVERFLOW, gh, dgrad, sh, sd);
    FM_EXPECT_EQ_INT(f.rc_h, 1);
    FM_EXPECT_EQ_INT(f.rc_d, 1);
    FM_EXPECT_EQ_INT(d.redone, h.redone);
    fm_reduce_scales_to_host(&d); /* the maxima stay on the device (the next scales are computed there) */
    FM_EXPECT_EQ_INT(bit_diffs(d.amax_prev, h.amax_prev, d.nblocks), 0);
    f = step(&h, &d, &w, OVERFLOW, gh, dgrad, sh, sd);
    FM_EXPECT_EQ_INT(f.rc_h, 0);
    FM_EXPECT_EQ_INT(f.rc_d, 0);
    if (!own) emu.copy_to_host(sd, shard_d, len * (int64_t)sizeof *sd);
    FM_EXPECT_EQ_INT(bit_diffs(sd, sh, len), 0);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < len; i++) nonzero += sh[i] != 0.0f;
    FM_EXPECT(nonzero > len / 2);
    compared += len;
    /* 3: a NaN on the last rank: the device path hands the step to the host path, which names it */
    f = step(&h, &d, &w, NAN_AT, gh, dgrad, sh, sd);
    FM_EXPECT_EQ_INT(f.rc_h, 0);
    FM_EXPECT(f.nf_h);
    FM_EXPECT_EQ_INT(f.rc_d, 1);
    FM_EXPECT(d.locate);
    f = step(&h, &d, &w, NAN_AT, gh, dgrad, sh, sd); /* the caller's loop: computed again */
    FM_EXPECT_EQ_INT(f.rc_d, 0);
    FM_EXPECT(f.nf_d);
    FM_EXPECT_EQ_INT(d.first_bad, 2 * FM_DIST_BLOCK + 5);
    FM_EXPECT_EQ_INT(d.first_bad, h.first_bad);
    FM_EXPECT(!d.locate && fm_reduce_on_device(&d));
    /* 4: the parameter all-gather: each rank's shard of a vector, on the device and on the host */
    for (int64_t i = 0; i < N; i++) all[i] = i >= lo && i < lo + len ? (float)(i * 3 + 1) : -1.0f;
    float *wd = emu.alloc(N * (int64_t)sizeof(float)), *back = fm_xcalloc((size_t)N, sizeof *back);
    emu.copy_to_device(wd, all, N * (int64_t)sizeof(float));
    FM_EXPECT_EQ_INT(fm_reduce_allgather(&h, all), 0);
    FM_EXPECT_EQ_INT(fm_reduce_allgather_device(&d, wd), 0);
    emu.copy_to_host(back, wd, N * (int64_t)sizeof(float));
    FM_EXPECT_EQ_INT(bit_diffs(back, all, N), 0);
    for (int64_t i = 0; i < N; i += 997) FM_EXPECT(all[i] == (float)(i * 3 + 1));
    compared += N;
    if (w.r == 0)
      printf("device exchange (%s shard): %d rank(s), %lld values bitwise equal to the host path and to one rank\n",
             own ? "its own" : "the caller's", w.P, (long long)compared);
    emu.free(wd);
    free(back);
    free(all);
    fm_reduce_free(&one);
    fm_comm_destroy(self);
    fm_reduce_free(&h);
    fm_reduce_free(&d);
    emu.free(shard_d);
    emu.free(dgrad);
    free(gh), free(sh), free(sd);
  }
  fm_comm_destroy(w.nccl);
  fm_comm_destroy(w.mpi);
}
