/* test_reduce.c: the data-parallel gradient reduction, run at 1, 2, 3 and 4
 * ranks. Micro-batch gradients are a pure function of the global micro-batch
 * index, so every rank count must give the same summed gradient:
 *  - exact mode: bitwise equal to the exactly computed sum rounded once to
 *    fp32 (the reference is computed here in double, where these dyadic
 *    values add without rounding), for every rank count;
 *  - fast mode: a plain fp32 reduce-scatter; at 2+ ranks it differs from the
 *    sequential fp32 sum for some element (the test asserts that it does:
 *    the exact mode is what makes rank counts agree);
 *  - an overflow (a value far beyond the previous step's maximum) is detected
 *    on every rank alike and the redo gives the exact result;
 *  - the global norm and the all-gather agree with serial computations. */
#include <math.h>

#include "fm_test.h"
#include "fmhpc/dist.h"
#include "fmhpc/rng.h"

enum { NPARAM = 3 * 65536 + 1234, M = 12 }; /* 4 scale blocks; M divisible by 1..4 */

/* Gradient of global micro-batch m: k / 2^20 with |k| < 2^20, and a few
 * blocks with wildly different magnitudes (0 block, tiny, large). */
static float grad_value(int64_t m, int64_t i) {
  uint32_t u = fm_rng_block(99, 7, (uint32_t)m, (uint64_t)i).v[0];
  double k = (double)((int32_t)(u % 2000001u) - 1000000);
  double g = k / 1048576.0;
  if (i / 65536 == 1) g *= 1.0 / 4096.0; /* a block of small gradients */
  if (i / 65536 == 2) g = 0.0;           /* a block that is all zero */
  return (float)g;
}

/* Full-mantissa values spread over 2^-8..2^8: fp32 sums of these round, so
 * the order of summation shows in the bits. */
static float rough_value(int64_t m, int64_t i) {
  FmRng4 b = fm_rng_block(5, 7, (uint32_t)m, (uint64_t)i);
  return (float)ldexp(fm_rng_normal(5, 7, (uint32_t)m, (uint64_t)i), (int)(b.v[3] % 17) - 8);
}

static int rough = 0; /* fast-mode test: use rough_value */
static float value(int64_t m, int64_t i) { return rough ? rough_value(m, i) : grad_value(m, i); }

static void fill(float *g, int64_t m) {
  for (int64_t i = 0; i < NPARAM; i++) g[i] = value(m, i);
}

static FmComm *world(void) {
  static FmComm *c;
  if (!c) c = fm_comm_mpi_create(MPI_COMM_WORLD);
  return c;
}

/* Run one step of M micro-batches over the ranks; returns this rank's shard. */
static int run_step(FmReduce *red, float *grad, float *shard, int64_t mb_scale_at, float big) {
  FmComm *c = world();
  const int64_t per = M / c->size;
  int redo;
  bool nonfinite;
  do {
    fm_reduce_begin(red);
    if (!red->exact) memset(grad, 0, NPARAM * sizeof *grad);
    for (int64_t j = 0; j < per; j++) {
      const int64_t m = c->rank * per + j;
      if (red->exact) {
        fill(grad, m);
        if (m == mb_scale_at) grad[5] = big;
        fm_reduce_add(red, grad);
      } else {
        static float tmp[NPARAM];
        fill(tmp, m);
        for (int64_t i = 0; i < NPARAM; i++) grad[i] += tmp[i];
      }
    }
    redo = fm_reduce_finish(red, grad, shard, &nonfinite);
  } while (redo);
  return nonfinite;
}

/* One exact step, compared bitwise with the exact sum in double (dyadic
 * values with <= 33 significant bits of range: exact), rounded once to fp32.
 * *streamed: whether the step's first micro-batch was stored streaming. */
static void exact_step_matches_reference(bool *streamed) {
  FmReduce red;
  FM_REQUIRE(fm_reduce_create(&red, NPARAM, M, true, world()) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
  FM_EXPECT(!run_step(&red, grad, shard, -1, 0));
  const int64_t lo = fm_reduce_lo(&red), hi = fm_reduce_hi(&red);
  int64_t bad = 0;
  for (int64_t i = lo; i < hi; i++) {
    double s = 0;
    for (int64_t m = 0; m < M; m++) s += (double)grad_value(m, i);
    float want = (float)s;
    if (memcmp(&want, &shard[i - lo], 4) != 0) bad++;
  }
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT_EQ_INT(red.redone, 0);
  *streamed = red.stream;
  free(grad);
  free(shard);
  fm_reduce_free(&red);
}

FM_TEST(exact_sum_is_rank_independent) {
  bool streamed = true;
  exact_step_matches_reference(&streamed);
  FM_EXPECT(!streamed);
}

/* The first micro-batch's store with streaming stores (reduce.c; by default
 * only for accumulators of 64 MiB and up, here for this small one): the same
 * exact sums, on every x86-64 CPU with AVX2 (the CI machines). */
FM_TEST(exact_sum_streamed_is_exact) {
  const int64_t old = fm__reduce_set_stream_min(0);
  bool streamed = false;
  exact_step_matches_reference(&streamed);
  fm__reduce_set_stream_min(old);
#if defined(__GNUC__) && defined(__x86_64__)
  FM_EXPECT(streamed == (__builtin_cpu_supports("avx2") != 0));
#else
  FM_EXPECT(!streamed);
#endif
}

FM_TEST(fast_sum_differs_between_rank_counts) {
  FmReduce red;
  rough = 1;
  FM_REQUIRE(fm_reduce_create(&red, NPARAM, M, false, world()) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
  run_step(&red, grad, shard, -1, 0);
  /* The sequential fp32 sum: what one rank computes. */
  const int64_t lo = fm_reduce_lo(&red), hi = fm_reduce_hi(&red);
  int64_t diff = 0;
  for (int64_t i = lo; i < hi; i++) {
    float s = 0;
    for (int64_t m = 0; m < M; m++) s += rough_value(m, i);
    if (memcmp(&s, &shard[i - lo], 4) != 0) diff++;
  }
  int64_t all = 0;
  fm_comm_allreduce(world(), &diff, &all, 1, FM_DT_I64, FM_OP_SUM);
  if (world()->size == 1) FM_EXPECT_EQ_INT(all, 0);
  else FM_EXPECT(all > 0); /* float sums in another order give other bits */
  rough = 0;
  free(grad);
  free(shard);
  fm_reduce_free(&red);
}

FM_TEST(overflow_is_redone_everywhere) {
  FmReduce red;
  FM_REQUIRE(fm_reduce_create(&red, NPARAM, M, true, world()) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
  run_step(&red, grad, shard, -1, 0); /* step 1 sets the block maxima (< 1) */
  /* Step 2: micro-batch 7 (on rank 7/(M/P)) carries a value 2^30 times the
   * previous maximum: one rank overflows, all redo, the sum is still exact. */
  run_step(&red, grad, shard, 7, 1048576.0f * 1024.0f);
  FM_EXPECT_EQ_INT(red.redone, 1);
  if (fm_reduce_lo(&red) == 0) {
    double s = 0;
    for (int64_t m = 0; m < M; m++) s += m == 7 ? 1073741824.0 : (double)grad_value(m, 5);
    FM_EXPECT_BITS_EQ_F32(shard[5], (float)s);
  }
  free(grad);
  free(shard);
  fm_reduce_free(&red);
}

FM_TEST(norm_and_allgather_match_serial) {
  FmReduce red;
  FM_REQUIRE(fm_reduce_create(&red, NPARAM, M, true, world()) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
  run_step(&red, grad, shard, -1, 0);
  /* Serial: the whole summed vector, then block sums in order. */
  float *full = fm_xcalloc(NPARAM, sizeof *full);
  for (int64_t i = 0; i < NPARAM; i++) {
    double s = 0;
    for (int64_t m = 0; m < M; m++) s += (double)grad_value(m, i);
    full[i] = (float)s;
  }
  double blocks[8];
  FM_REQUIRE(fm_clip_block_sumsq(full, 0, NPARAM, FM_DIST_BLOCK, blocks) == 0);
  const double want = fm_clip_norm(blocks, fm_clip_nblocks(0, NPARAM, FM_DIST_BLOCK));
  const double got = fm_reduce_grad_norm(&red, shard);
  FM_EXPECT(memcmp(&want, &got, sizeof want) == 0);
  /* All-gather: each rank writes its shard into w; every rank ends with all. */
  float *w = fm_xcalloc(NPARAM, sizeof *w);
  memcpy(w + fm_reduce_lo(&red), shard, (size_t)(fm_reduce_hi(&red) - fm_reduce_lo(&red)) * sizeof *w);
  FM_REQUIRE(fm_reduce_allgather(&red, w) == 0);
  FM_EXPECT(memcmp(w, full, NPARAM * sizeof *w) == 0);
  free(w);
  free(full);
  free(grad);
  free(shard);
  fm_reduce_free(&red);
}

/* ---- per-layer buckets (fm_reduce_bucket) ---------------------------------- */

/* Ranges as a model's backward gives them: from the end of the vector to its
 * start, cut inside scale blocks and across shard boundaries, one empty. */
static const int64_t cuts[] = {0,          1,      777,    65531,  65536,  65536 + 100, 70000,
                               131072 - 3, 131072, 150000, 150000, 196608, 197000,      NPARAM};
enum { NCUTS = sizeof cuts / sizeof cuts[0] };

/* One step; the last micro-batch of each rank through fm_reduce_bucket when
 * `bucketed`. Micro-batch big_mb carries `big` at element 5 (an overflow:
 * redo), micro-batch nan_mb a NaN at element nan_i. Returns nonfinite. */
static bool bucket_step(FmReduce *red, float *grad, float *shard, bool bucketed, int64_t big_mb, float big,
                        int64_t nan_mb, int64_t nan_i) {
  FmComm *c = world();
  const int64_t per = M / c->size;
  bool nonfinite;
  do {
    fm_reduce_begin(red);
    for (int64_t j = 0; j < per; j++) {
      const int64_t m = c->rank * per + j;
      fill(grad, m);
      if (m == big_mb) grad[5] = big;
      if (m == nan_mb) grad[nan_i] = NAN;
      if (bucketed && j == per - 1)
        for (int k = NCUTS - 1; k > 0; k--) fm_reduce_bucket(red, grad, cuts[k - 1], cuts[k]);
      else
        fm_reduce_add(red, grad);
    }
  } while (fm_reduce_finish(red, grad, shard, &nonfinite));
  return nonfinite;
}

/* The bucketed reduction gives the unbucketed one's bits at every step: a
 * plain step (also against the exact sum in double), an overflow and its
 * redo, and a step with a NaN (skipped, the same first element named, the
 * scales kept), with chunks small enough that the staging slots are reused. */
FM_TEST(buckets_match_unbucketed_bitwise) {
  const int64_t old = fm__comm_mpi_set_osum_chunk(1000); /* the exchange is made by the first bucket */
  FmReduce a, b;
  FM_REQUIRE(fm_reduce_create(&a, NPARAM, M, true, world()) == 0);
  FM_REQUIRE(fm_reduce_create(&b, NPARAM, M, true, world()) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *sa = fm_xcalloc((size_t)a.S, sizeof *sa),
        *sb = fm_xcalloc((size_t)b.S, sizeof *sb);
  const int64_t lo = fm_reduce_lo(&a), len = fm_reduce_hi(&a) - lo;
  struct {
    int64_t big_mb;
    float big;
    int64_t nan_mb, nan_i;
    bool nonfinite;
    int64_t redone;
  } steps[] = {{-1, 0, -1, 0, false, 0},
               {M - 1, 1048576.0f * 1024.0f, -1, 0, false, 1}, /* a bucketed micro-batch overflows */
               {3, 1e15f, -1, 0, false, 2},                    /* one added whole overflows */
               {-1, 0, M - 1, 70001, true, 2},                 /* NaN in a bucketed micro-batch */
               {M - 1, 1e30f, 2, 131070, true, 2},             /* NaN in a whole one, overflow in a bucketed one */
               {-1, 0, -1, 0, false, 2}};
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    memset(sa, 0xAB, (size_t)a.S * sizeof *sa);
    memset(sb, 0xAB, (size_t)b.S * sizeof *sb);
    bool na = bucket_step(&a, grad, sa, false, steps[s].big_mb, steps[s].big, steps[s].nan_mb, steps[s].nan_i);
    bool nb = bucket_step(&b, grad, sb, true, steps[s].big_mb, steps[s].big, steps[s].nan_mb, steps[s].nan_i);
    FM_EXPECT(na == steps[s].nonfinite);
    FM_EXPECT(nb == na);
    FM_EXPECT_EQ_INT(a.redone, steps[s].redone);
    FM_EXPECT_EQ_INT(b.redone, a.redone);
    if (na) {
      FM_EXPECT_EQ_INT(a.first_bad, steps[s].nan_i);
      FM_EXPECT_EQ_INT(b.first_bad, a.first_bad);
    } else {
      FM_EXPECT(memcmp(sa, sb, (size_t)len * sizeof *sa) == 0);
    }
    FM_EXPECT(memcmp(a.amax_prev, b.amax_prev, (size_t)a.nblocks * sizeof *a.amax_prev) == 0);
    FM_EXPECT(memcmp(a.exp2, b.exp2, (size_t)a.nblocks * sizeof *a.exp2) == 0);
    FM_EXPECT(!a.osum && (b.osum != NULL) == (world()->size > 1 && !b.shm)); /* the exchange ran per bucket */
    if (s == 0) { /* and both are the exact sum, rounded once */
      int64_t bad = 0;
      for (int64_t i = lo; i < lo + len; i++) {
        double sum = 0;
        for (int64_t m = 0; m < M; m++) sum += (double)grad_value(m, i);
        float want = (float)sum;
        bad += memcmp(&want, &sb[i - lo], 4) != 0;
      }
      FM_EXPECT_EQ_INT(bad, 0);
    }
  }
  fm__comm_mpi_set_osum_chunk(old);
  free(grad);
  free(sa);
  free(sb);
  fm_reduce_free(&a);
  fm_reduce_free(&b);
}

/* ---- the node's shared-memory window (fm_comm_shm) against the ring ------- */

/* The three exchanges of the exact sums: the shared window (every rank on
 * this node: the default), the ring and owner sums over point-to-point
 * (forced off, what a communicator across nodes takes), and the same reached
 * through the node split itself (nodes of one rank: the window is refused). */
enum { VIA_SHM, VIA_RING, VIA_SPLIT, NVIA };
static void create_via(FmReduce *red, int64_t n, int via) {
  const int old = fm__comm_mpi_set_shm(via == VIA_SPLIT || via == VIA_SHM, via == VIA_SPLIT ? 1 : 0);
  FM_REQUIRE(fm_reduce_create(red, n, M, true, world()) == 0);
  fm__comm_mpi_set_shm(old, 0);
  FM_EXPECT((red->shm != NULL) == (via == VIA_SHM && world()->size > 1));
}

/* Every path, bucketed or not, gives the same bits at every step (a plain one,
 * overflows redone in a bucketed and in a whole micro-batch, NaNs named and
 * skipped, then plain again), the shards equal to the exact sum in double
 * rounded once, and the parameter all-gather equal to the serial vector. */
FM_TEST(shm_matches_ring_bitwise) {
  const int64_t old = fm__comm_mpi_set_osum_chunk(1000);
  FmReduce red[NVIA][2];
  float *sh[NVIA][2];
  for (int v = 0; v < NVIA; v++)
    for (int k = 0; k < 2; k++) {
      create_via(&red[v][k], NPARAM, v);
      sh[v][k] = fm_xcalloc((size_t)red[v][k].S, sizeof(float));
    }
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *full = fm_xcalloc(NPARAM, sizeof *full),
        *w = fm_xcalloc(NPARAM, sizeof *w);
  const int64_t lo = fm_reduce_lo(&red[0][0]), len = fm_reduce_hi(&red[0][0]) - lo;
  struct {
    int64_t big_mb;
    float big;
    int64_t nan_mb, nan_i;
    bool nonfinite;
  } steps[] = {{-1, 0, -1, 0, false},           {M - 1, 1048576.0f * 1024.0f, -1, 0, false},
               {3, 1e15f, -1, 0, false},        {-1, 0, M - 1, 70001, true},
               {M - 1, 1e30f, 2, 131070, true}, {-1, 0, -1, 0, false}};
  int64_t compared = 0;
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    bool nf[NVIA][2];
    for (int v = 0; v < NVIA; v++)
      for (int k = 0; k < 2; k++) {
        memset(sh[v][k], 0xAB, (size_t)red[v][k].S * sizeof(float));
        nf[v][k] = bucket_step(&red[v][k], grad, sh[v][k], k == 1, steps[s].big_mb, steps[s].big, steps[s].nan_mb,
                               steps[s].nan_i);
      }
    for (int v = 0; v < NVIA; v++)
      for (int k = 0; k < 2; k++) {
        FmReduce *a = &red[v][k], *ref = &red[VIA_RING][0];
        FM_EXPECT(nf[v][k] == steps[s].nonfinite);
        FM_EXPECT_EQ_INT(a->redone, ref->redone);
        FM_EXPECT(memcmp(a->amax_prev, ref->amax_prev, (size_t)a->nblocks * sizeof *a->amax_prev) == 0);
        if (nf[v][k])
          FM_EXPECT_EQ_INT(a->first_bad, steps[s].nan_i);
        else
          FM_EXPECT(memcmp(sh[v][k], sh[VIA_RING][0], (size_t)len * sizeof(float)) == 0);
      }
    if (steps[s].nonfinite) continue;
    /* The ring's shards gathered whole (the reference for every all-gather below),
     * at the first step also the exact sum in double, rounded once (later steps
     * run at the scales the overflows widened: coarser, still the same bits on
     * every path). */
    memset(full, 0, NPARAM * sizeof *full);
    memcpy(full + lo, sh[VIA_RING][0], (size_t)len * sizeof(float));
    /* x + 0 + ... = x exactly: one rank holds each element (the others +0) */
    FM_REQUIRE(fm_comm_allreduce(world(), full, w, NPARAM, FM_DT_F32, FM_OP_SUM) == 0);
    memcpy(full, w, NPARAM * sizeof *full);
    for (int64_t i = 0; s == 0 && i < NPARAM; i++) {
      double sum = 0;
      for (int64_t m = 0; m < M; m++) sum += grad_value(m, i);
      const float want = (float)sum;
      FM_EXPECT_BITS_EQ_F32(full[i], want);
    }
    for (int v = 0; v < NVIA; v++) { /* twice in a row: the second rewrites the window's part just read */
      for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < NPARAM; i++) w[i] = -1.0f;
        memcpy(w + lo, sh[v][rep], (size_t)len * sizeof(float));
        FM_REQUIRE(fm_reduce_allgather(&red[v][rep], w) == 0);
        FM_EXPECT(memcmp(w, full, NPARAM * sizeof *w) == 0);
        compared += NPARAM;
      }
    }
  }
  FM_EXPECT_EQ_INT(red[VIA_RING][0].redone, 2);
  FM_EXPECT(compared > 0);
  for (int v = 0; v < NVIA; v++)
    for (int k = 0; k < 2; k++) {
      free(sh[v][k]);
      fm_reduce_free(&red[v][k]);
    }
  fm__comm_mpi_set_osum_chunk(old);
  free(grad);
  free(full);
  free(w);
}

/* Fewer blocks than ranks (ranks whose shard is empty), and a rank with no
 * micro-batch at all (M = 1 over P ranks): its zero sums without any add. */
FM_TEST(shm_empty_shards_and_idle_ranks) {
  enum { N = 65536 + 4321 }; /* 2 blocks: at 3 and 4 ranks some shards are empty */
  float *grad = fm_xcalloc(N, sizeof *grad), *w = fm_xcalloc(N, sizeof *w), *want = fm_xcalloc(N, sizeof *want);
  for (int64_t i = 0; i < N; i++) want[i] = grad_value(0, i);
  for (int v = 0; v < NVIA; v++) {
    FmReduce red;
    create_via(&red, N, v);
    float *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
    const int64_t lo = fm_reduce_lo(&red), len = fm_reduce_hi(&red) - lo;
    for (int step = 0; step < 2; step++) { /* the second step after an all-gather read the window */
      bool nonfinite = false;
      do {
        fm_reduce_begin(&red);
        if (world()->rank == 0) { /* micro-batch 0 only: the others add nothing */
          for (int64_t i = 0; i < N; i++) grad[i] = grad_value(0, i);
          fm_reduce_add(&red, grad);
        }
      } while (fm_reduce_finish(&red, grad, shard, &nonfinite));
      FM_EXPECT(!nonfinite);
      FM_EXPECT(memcmp(shard, want + lo, (size_t)len * sizeof *shard) == 0);
      memset(w, 0, N * sizeof *w);
      memcpy(w + lo, shard, (size_t)len * sizeof *w);
      FM_REQUIRE(fm_reduce_allgather(&red, w) == 0);
      FM_EXPECT(memcmp(w, want, N * sizeof *w) == 0);
    }
    free(shard);
    fm_reduce_free(&red);
  }
  free(grad);
  free(w);
  free(want);
}

/* Without the window the ring's sums become floats piece by piece as they
 * are final: with ring chunks on block boundaries (the default), across them
 * (1000) and without the ring (0: MPI's reduce-scatter), the shard equals the
 * exact sum in double rounded once, and nothing past the rank's own length
 * is written (the ring's pieces cover the padded S). */
FM_TEST(ring_dequant_pieces) {
  const int64_t chunks[] = {-1, 1000, 0};
  float *grad = fm_xcalloc(NPARAM, sizeof *grad);
  for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
    const int64_t old = fm__comm_mpi_set_ring_chunk(chunks[ci]);
    FmReduce red;
    create_via(&red, NPARAM, VIA_RING);
    const int64_t lo = fm_reduce_lo(&red), len = fm_reduce_hi(&red) - lo, cap = red.S + 16;
    float *shard = fm_xcalloc((size_t)cap, sizeof *shard);
    for (int64_t i = len; i < cap; i++) shard[i] = -7.0f;
    FM_EXPECT(!run_step(&red, grad, shard, -1, 0));
    int64_t bad = 0, past = 0;
    for (int64_t i = 0; i < len; i++) {
      double sum = 0;
      for (int64_t m = 0; m < M; m++) sum += (double)grad_value(m, lo + i);
      const float want = (float)sum;
      bad += memcmp(&want, &shard[i], sizeof want) != 0;
    }
    for (int64_t i = len; i < cap; i++) past += shard[i] != -7.0f;
    FM_EXPECT_EQ_INT(bad, 0);
    FM_EXPECT_EQ_INT(past, 0);
    free(shard);
    fm_reduce_free(&red);
    fm__comm_mpi_set_ring_chunk(old);
  }
  free(grad);
}

/* Without the window the parameter all-gather goes in place (one
 * MPI_Allgatherv straight into w); where one MPI call cannot carry it
 * (max_count: as for n above INT_MAX) it stages through buffers allocated
 * then. Both give every rank the whole vector, empty shards included. */
FM_TEST(allgather_in_place_and_staged) {
  enum { N = 65536 + 4321 }; /* 2 blocks: at 3 and 4 ranks some shards are empty */
  float *w = fm_xcalloc(N, sizeof *w), *want = fm_xcalloc(N, sizeof *want);
  for (int64_t i = 0; i < N; i++) want[i] = grad_value(1, i);
  FmReduce red;
  create_via(&red, N, VIA_RING);
  const int64_t lo = fm_reduce_lo(&red), len = fm_reduce_hi(&red) - lo;
  FM_EXPECT((red.ag_count != NULL) == (world()->size > 1));
  for (int staged = 0; staged < 2; staged++) {
    const int64_t old = fm__comm_mpi_set_max_count(staged ? 5 : 0);
    for (int64_t i = 0; i < N; i++) w[i] = (i >= lo && i < lo + len) ? want[i] : -1.0f;
    const int64_t calls = fm__comm_mpi_calls();
    FM_REQUIRE(fm_reduce_allgather(&red, w) == 0);
    if (!staged && world()->size > 1) FM_EXPECT_EQ_INT(fm__comm_mpi_calls() - calls, 1); /* in place: one call */
    FM_EXPECT(memcmp(w, want, N * sizeof *w) == 0);
    FM_EXPECT((red.shardf != NULL) == (staged && world()->size > 1));
    fm__comm_mpi_set_max_count(old);
  }
  fm_reduce_free(&red);
  free(w);
  free(want);
}

/* One micro-batch per rank (M = P), given only through buckets, as train.c
 * does when a rank's only micro-batch is its last: the buckets store into the
 * fresh accumulator, and fm_reduce_finish must not take the rank for one that
 * added nothing (it zeroed the stored sums: an all-zero gradient, found in
 * review). Two steps, each against the exact double sum. */
FM_TEST(one_microbatch_per_rank_bucketed) {
  FmComm *c = world();
  const int64_t MM = c->size;
  for (int v = 0; v < NVIA; v++) {
    FmReduce red;
    const int old = fm__comm_mpi_set_shm(v == VIA_SPLIT || v == VIA_SHM, v == VIA_SPLIT ? 1 : 0);
    FM_REQUIRE(fm_reduce_create(&red, NPARAM, MM, true, c) == 0);
    fm__comm_mpi_set_shm(old, 0);
    float *grad = fm_xcalloc(NPARAM, sizeof *grad), *shard = fm_xcalloc((size_t)red.S, sizeof *shard);
    const int64_t lo = fm_reduce_lo(&red), len = fm_reduce_hi(&red) - lo;
    for (int step = 0; step < 2; step++) {
      bool nonfinite = false;
      do {
        fm_reduce_begin(&red);
        fill(grad, c->rank);
        for (int k = NCUTS - 1; k > 0; k--) fm_reduce_bucket(&red, grad, cuts[k - 1], cuts[k]);
      } while (fm_reduce_finish(&red, grad, shard, &nonfinite));
      FM_EXPECT(!nonfinite);
      int64_t bad = 0;
      for (int64_t i = lo; i < lo + len; i++) {
        double sum = 0;
        for (int64_t m = 0; m < MM; m++) sum += (double)grad_value(m, i);
        const float want = (float)sum;
        bad += memcmp(&want, &shard[i - lo], sizeof want) != 0;
      }
      FM_EXPECT_EQ_INT(bad, 0);
    }
    free(grad);
    free(shard);
    fm_reduce_free(&red);
  }
}

/* One micro-batch per rank given by buckets with full-mantissa values (their
 * quantisation rounds): at one rank the buckets only check and
 * fm_reduce_finish quantises and dequantises in one pass (reduce.c,
 * requant_range); it must give fm_reduce_add's bits, and the same redo after
 * an overflow and the same first NaN. At more ranks both take the stored path
 * (the comparison still holds). */
static void fill_mixed(float *g, int64_t m) { /* every third value 2^30 smaller: its block's scale rounds it */
  fill(g, m);
  for (int64_t i = 0; i < NPARAM; i += 3) g[i] = ldexpf(g[i], -30);
}

FM_TEST(one_rank_deferred_matches_stored_bitwise) {
  FmComm *c = world();
  FmReduce a, b;
  FM_REQUIRE(fm_reduce_create(&a, NPARAM, c->size, true, c) == 0);
  FM_REQUIRE(fm_reduce_create(&b, NPARAM, c->size, true, c) == 0);
  float *grad = fm_xcalloc(NPARAM, sizeof *grad), *sa = fm_xcalloc((size_t)a.S, sizeof *sa),
        *sb = fm_xcalloc((size_t)b.S, sizeof *sb);
  const int64_t len = fm_reduce_hi(&a) - fm_reduce_lo(&a);
  struct {
    float big;     /* at element 5 of rank 0's micro-batch: an overflow, redone */
    int64_t nan_i; /* a NaN there (< 0: none) */
  } steps[] = {{0, -1}, {1e12f, -1}, {0, 131070}, {0, -1}};
  rough = 1;
  int64_t rounded = 0;
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    bool na = false, nb = false, deferred = false;
    const int64_t redone = a.redone;
    memset(sa, 0xAB, (size_t)a.S * sizeof *sa);
    memset(sb, 0xCD, (size_t)b.S * sizeof *sb);
    do {
      fm_reduce_begin(&a);
      fill_mixed(grad, (int64_t)s * c->size + c->rank);
      if (c->rank == 0 && steps[s].big != 0) grad[5] = steps[s].big;
      if (c->rank == 0 && steps[s].nan_i >= 0) grad[steps[s].nan_i] = NAN;
      fm_reduce_add(&a, grad);
    } while (fm_reduce_finish(&a, grad, sa, &na));
    do {
      fm_reduce_begin(&b);
      fill_mixed(grad, (int64_t)s * c->size + c->rank);
      if (c->rank == 0 && steps[s].big != 0) grad[5] = steps[s].big;
      if (c->rank == 0 && steps[s].nan_i >= 0) grad[steps[s].nan_i] = NAN;
      for (int k = NCUTS - 1; k > 0; k--) fm_reduce_bucket(&b, grad, cuts[k - 1], cuts[k]);
      deferred = b.deferred != NULL;
    } while (fm_reduce_finish(&b, grad, sb, &nb));
    FM_EXPECT(deferred == (c->size == 1));
    FM_EXPECT(na == (steps[s].nan_i >= 0));
    FM_EXPECT(nb == na);
    if (steps[s].big != 0) FM_EXPECT(a.redone > redone);
    FM_EXPECT_EQ_INT(b.redone, a.redone);
    if (na) {
      FM_EXPECT_EQ_INT(b.first_bad, a.first_bad);
    } else {
      FM_EXPECT(memcmp(sa, sb, (size_t)len * sizeof *sa) == 0);
      for (int64_t i = 0; c->size == 1 && i < len; i++) rounded += sa[i] != grad[i];
    }
    FM_EXPECT(memcmp(a.amax_prev, b.amax_prev, (size_t)a.nblocks * sizeof *a.amax_prev) == 0);
  }
  if (c->size == 1) FM_EXPECT(rounded > 1000); /* the sums are the quantised values, not the inputs */
  rough = 0;
  free(grad);
  free(sa);
  free(sb);
  fm_reduce_free(&a);
  fm_reduce_free(&b);
}
