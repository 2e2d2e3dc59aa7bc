/* test_simt.c: the SIMT emulator (src/tensor/cuda/emu) tested on its own
 * kernels (selftest.cu), each under the forward, reverse and a seeded random
 * schedule:
 *   - a shuffle + shared-memory block sum equals a serial model of its order,
 *     bitwise, under every schedule (and is within 1e-5 of a double sum);
 *   - a missing __syncthreads and a float atomicAdd give different bits
 *     across schedules (what the schedules are for: must be seen);
 *   - a barrier in divergent code, a shuffle that half a warp repeats, and
 *     an mma that half a warp reaches while the rest is at __syncwarp are
 *     reported and abort (run in a child process);
 *   - every shuffle flavour and width against its CUDA definition;
 *   - mma.sync m16n8k16 bf16 tiles (fragments from global memory; ldmatrix.x4
 *     and .x4.trans from shared memory) against a double GEMM within
 *     1e-5 * sum |a b| (fp32 sums of 64 exact products), bitwise across
 *     schedules and between the two loaders; a swapped fragment register and
 *     a missing .trans must fail that tolerance;
 *   - the switch rate (printed; the case fails below 1M switches/s). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "emu/simt.h"
#include "fm_test.h"

void simt_block_sum(float *partial, const float *x, int64_t n, int blocks, int threads);
void simt_racy_sum(float *partial, const float *x, int64_t n, int blocks, int threads);
void simt_atomic_sum(float *out, const float *x, int64_t n, int blocks, int threads);
void simt_divergent_barrier(float *out);
void simt_divergent_shuffle(float *out);
void simt_shuffle_kinds(int *out);
void simt_shuffle_storm(float *out, int blocks, int threads, int rounds);
void simt_mma_global(float *C, const uint16_t *A, const uint16_t *Bt, int bug);
void simt_mma_ldmatrix(float *C, const uint16_t *A, const uint16_t *B, int bug);
void simt_mma_divergent(float *out);

enum { NSCHED = 3 };
static void set_schedule(int s) { fm_simt_set_schedule((FmSimtOrder)s, 12345); }

static uint64_t rng = 42;
static float uniform(float lo, float hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((double)(rng >> 11) * 0x1p-53);
}
static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- reductions ------------------------------------------------------------ */
static float model_warp_sum(float v[32]) {
  for (int o = 16; o > 0; o >>= 1) {
    float t[32];
    for (int l = 0; l < 32; l++) t[l] = v[l] + v[l ^ o];
    memcpy(v, t, sizeof t);
  }
  return v[0];
}
/* block_sum_kernel's order, serially. */
static float model_block_sum(const float *x, int64_t n, int blk, int grid, int threads) {
  float tv[1024] = {0}, ws[32] = {0};
  for (int t = 0; t < threads; t++)
    for (int64_t i = (int64_t)blk * threads + t; i < n; i += (int64_t)grid * threads) tv[t] += x[i];
  for (int w = 0; w < threads / 32; w++) ws[w] = model_warp_sum(&tv[w * 32]);
  float s = 0.0f;
  for (int w = 0; w < threads / 32; w++) s += ws[w];
  return s;
}

FM_TEST(block_sum_bitwise_all_schedules) {
  enum { N = 100003, GRID = 13, THREADS = 256 };
  static float x[N];
  double exact = 0.0;
  for (int i = 0; i < N; i++) exact += (x[i] = uniform(-1.0f, 1.0f));
  float model[GRID];
  for (int b = 0; b < GRID; b++) model[b] = model_block_sum(x, N, b, GRID, THREADS);
  int compared = 0;
  for (int s = 0; s < NSCHED; s++) {
    set_schedule(s);
    float part[GRID];
    simt_block_sum(part, x, N, GRID, THREADS);
    double sum = 0.0;
    for (int b = 0; b < GRID; b++) {
      if (bits(part[b]) != bits(model[b]))
        FM__FAIL("%s: block %d: %.9g, model %.9g", fm_simt_schedule_name(), b, part[b], model[b]);
      sum += part[b];
      compared++;
    }
    FM_EXPECT_NEAR(sum, exact, 0.0, 1e-5 * N);
  }
  FM_EXPECT_EQ_INT(compared, NSCHED * GRID);
  printf("block_sum: %d partials bitwise equal to the serial model under %d schedules\n", compared, NSCHED);
}

FM_TEST(races_differ_across_schedules) {
  enum { N = 4099, THREADS = 256 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = uniform(-1.0f, 1.0f);
  const int grid = (N + THREADS - 1) / THREADS;
  uint32_t racy[NSCHED], atomic[NSCHED];
  for (int s = 0; s < NSCHED; s++) {
    set_schedule(s);
    float part[(N + THREADS - 1) / THREADS], a = 0.0f, r = 0.0f;
    simt_racy_sum(part, x, N, grid, THREADS);
    for (int b = 0; b < grid; b++) r += part[b];
    simt_atomic_sum(&a, x, N, grid, THREADS);
    racy[s] = bits(r);
    atomic[s] = bits(a);
    printf("%-14s racy_sum %.9g  atomic_sum %.9g\n", fm_simt_schedule_name(), r, a);
  }
  FM_EXPECT(racy[0] != racy[1] || racy[0] != racy[2]);
  FM_EXPECT(atomic[0] != atomic[1] || atomic[0] != atomic[2]);
}

/* Runs fn in a child with stderr to a pipe; 1 when it aborted and its
 * message contains `want`. */
static int aborts_with(void (*fn)(void), const char *want) {
  int fd[2];
  if (pipe(fd) != 0) return 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    fn();
    _exit(0);
  }
  close(fd[1]);
  char msg[2048] = {0};
  size_t len = 0;
  ssize_t r;
  while (len < sizeof msg - 1 && (r = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)r;
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  printf("child: %s", msg);
  return WIFSIGNALED(st) && strstr(msg, want) != NULL;
}
static float scratch[1024];
static void run_divergent_barrier(void) { simt_divergent_barrier(scratch); }
static void run_divergent_shuffle(void) { simt_divergent_shuffle(scratch); }
static void run_mma_divergent(void) { simt_mma_divergent(scratch); }

FM_TEST(bad_barriers_reported) {
  for (int s = 0; s < NSCHED; s++) {
    set_schedule(s);
    FM_EXPECT(aborts_with(run_divergent_barrier, "deadlock"));
    FM_EXPECT(aborts_with(run_divergent_shuffle, "deadlock"));
    FM_EXPECT(aborts_with(run_mma_divergent, "different warp collectives"));
  }
}

FM_TEST(shuffle_definitions) {
  int out[6 * 32];
  int compared = 0;
  for (int s = 0; s < NSCHED; s++) {
    set_schedule(s);
    memset(out, 0, sizeof out);
    simt_shuffle_kinds(out);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= (unsigned)(l % 3 == 0) << l;
    for (int l = 0; l < 32; l++) {
      const int seg8 = l & ~7, seg16 = l & ~15;
      const int want[6] = {
          105,
          100 + seg8 + ((l + 3) & 7),               /* indexed, width 8 */
          100 + ((l ^ 6) < seg8 + 8 ? (l ^ 6) : l), /* xor stays in the group of 8 */
          100 + (l + 3 < seg16 + 16 ? l + 3 : l),   /* down: own value past the group */
          100 + (l - 2 >= 0 ? l - 2 : l),           /* up */
          (int)ballot,
      };
      for (int k = 0; k < 6; k++) {
        if (out[k * 32 + l] != want[k])
          FM__FAIL("shuffle kind %d lane %d: %d, want %d", k, l, out[k * 32 + l], want[k]);
        compared++;
      }
    }
  }
  FM_EXPECT_EQ_INT(compared, NSCHED * 6 * 32);
}

FM_TEST(switch_rate) {
  enum { BLOCKS = 8, THREADS = 256, ROUNDS = 200 };
  static float out[BLOCKS * THREADS];
  set_schedule(FM_SIMT_RANDOM);
  fm_simt_reset_stats();
  /* The rate is per CPU-second of this thread (the fibers run on it), not
   * per wall second: a loaded machine must not fail the test. The floor
   * catches a pathological switch (a system call per switch), nothing finer;
   * the speed itself is reported, not tested. */
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  simt_shuffle_storm(out, BLOCKS, THREADS, ROUNDS);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  FmSimtStats st;
  fm_simt_stats(&st);
  const double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  printf("switch rate: %llu fiber switches for %llu threads x %d shuffles in %.3f CPU-s: %.1f M switches/s\n",
         (unsigned long long)st.switches, (unsigned long long)st.threads, ROUNDS, sec,
         1e-6 * (double)st.switches / sec);
  FM_EXPECT(st.switches >= (uint64_t)BLOCKS * THREADS * ROUNDS);
  FM_EXPECT((double)st.switches / sec > 1e6);
  /* the values: each round swaps with lane ^ (1 + r%16) */
  int bad = 0;
  for (int b = 0; b < BLOCKS; b++)
    for (int t = 0; t < THREADS; t++) {
      int src = t & 31;
      for (int r = ROUNDS - 1; r >= 0; r--) src ^= 1 + (r & 15);
      bad += out[b * THREADS + t] != (float)((t & ~31) + src);
    }
  FM_EXPECT_EQ_INT(bad, 0);
}

/* ---- tensor cores -------------------------------------------------------------- */
enum { GM = 32, GN = 16, GK = 64 };
static uint16_t to_bf16(float f) { /* nearest even; inputs finite */
  uint32_t u = bits(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

FM_TEST(mma_tiles_vs_host_gemm) {
  static uint16_t A[GM * GK], B[GK * GN], Bt[GN * GK];
  static double ref[GM * GN], scale[GM * GN];
  for (int i = 0; i < GM * GK; i++) A[i] = to_bf16(uniform(-1.0f, 1.0f));
  for (int k = 0; k < GK; k++)
    for (int n = 0; n < GN; n++) B[k * GN + n] = Bt[n * GK + k] = to_bf16(uniform(-1.0f, 1.0f));
  for (int i = 0; i < GM; i++)
    for (int j = 0; j < GN; j++) {
      double r = 0.0, s = 0.0;
      for (int k = 0; k < GK; k++) {
        const double p = from_bf16(A[i * GK + k]) * from_bf16(B[k * GN + j]);
        r += p;
        s += fabs(p);
      }
      ref[i * GN + j] = r;
      scale[i * GN + j] = s;
    }
  struct {
    int kernel, bug, expect_match;
    const char *what;
  } cases[] = {{0, 0, 1, "fragments from global memory"},
               {1, 0, 1, "ldmatrix.x4 + ldmatrix.x4.trans"},
               {0, 1, 0, "global, a[1] <-> a[2] (must fail)"},
               {1, 2, 0, "ldmatrix, B without .trans (must fail)"}};
  static float first[2][GM * GN];
  for (int s = 0; s < NSCHED; s++) {
    set_schedule(s);
    for (int c = 0; c < 4; c++) {
      float C[GM * GN];
      for (int i = 0; i < GM * GN; i++) C[i] = NAN;
      if (cases[c].kernel == 0)
        simt_mma_global(C, A, Bt, cases[c].bug);
      else
        simt_mma_ldmatrix(C, A, B, cases[c].bug);
      double worst = 0.0;
      int nan = 0;
      for (int i = 0; i < GM * GN; i++) {
        if (!isfinite(C[i])) nan++;
        const double e = fabs(C[i] - ref[i]) / scale[i];
        worst = e > worst ? e : worst;
      }
      const int match = nan == 0 && worst <= 1e-5;
      printf("%-14s %-40s max |err|/sum|ab| %.2e -> %s\n", fm_simt_schedule_name(), cases[c].what, worst,
             match ? "match" : "mismatch");
      FM_EXPECT_EQ_INT(match, cases[c].expect_match);
      if (cases[c].bug == 0) {
        if (s == 0)
          memcpy(first[cases[c].kernel], C, sizeof C);
        else
          FM_EXPECT(memcmp(first[cases[c].kernel], C, sizeof C) == 0);
      }
    }
  }
  FM_EXPECT(memcmp(first[0], first[1], sizeof first[0]) == 0);
}
