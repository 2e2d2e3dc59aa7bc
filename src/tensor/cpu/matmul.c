/* cpu/matmul.c: the linear layer (fm_cpu_matmul_fwd/bwd, torch.nn.Linear's
 * y = x W^T + b with W stored (OC, C)), the deterministic tiled GEMM every CPU
 * model op uses (fm__cpu_gemm, fm__cpu_gemm1), and fm_cpu_blas_info.
 *
 * Determinism decision (DESIGN section 6). Measured on OpenBLAS 0.3.21
 * (DYNAMIC_ARCH, Haswell kernels): cblas_sgemm with 1 and with 2 OpenBLAS
 * threads differs in 4748 of 257x129 outputs (K = 300) and in most outputs of
 * GPT-2-sized products; rows computed by a separate call also differ from the
 * same rows inside a larger call (edge micro-kernels sum in another order).
 * So OpenBLAS is pinned to one thread (openblas_set_num_threads(1), once) and
 * this file parallelises with OpenMP over tiles of C of FM_GEMM_MB x FM_GEMM_NB,
 * fixed by the shapes alone; each tile is one single-threaded sgemm whose
 * reduction over K never leaves the call. Same shapes, same calls, same bits,
 * whatever OMP_NUM_THREADS is; the tiles are independent, so the schedule
 * does not matter either. The bits also depend on which kernel OpenBLAS runs:
 * OPENBLAS_CORETYPE picks it where set; where unset and OpenBLAS falls back to
 * a pre-AVX2 generic kernel on a CPU it does not know but that has AVX2 and FMA
 * (0.3.21 takes Prescott on an Emerald Rapids Xeon: a fifth of the speed), the
 * kernel is chosen again by the rule later OpenBLAS releases apply to a CPU
 * model they do not know (blas_pin below): Cooperlake with AVX-512 BF16,
 * SkylakeX with AVX-512, else Haswell. fm_cpu_blas_info reports the kernel
 * and that choice for logs and benchmarks. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/tensor.h"

#include "cpu_ops.h"

/* Tile of C per sgemm call: big enough that packing (each call copies its
 * MB x K and K x NB panels: O((MB + NB) K)) is a small part of the arithmetic
 * (O(MB NB K)), small enough that a GPT-2 layer still gives several tiles to
 * share among threads; NB = 768 divides every GPT-2 width (768, 2304, 3072).
 * Measured on the GPT-2 124M step (bench/step_cpu, 2 threads, best of 4
 * interleaved rounds): 4088 ms with 256 x 768 tiles, 4399 ms with the
 * earlier 128 x 512. The price: a 1024 x 768 product has 4 tiles, so beyond
 * 4 threads a rank it does not speed up (run more ranks a node instead).
 * Larger tiles, measured by bench/step_cpu/tiles.sh (2-vCPU Zen 5, Haswell
 * kernel, T = 256, 4 runs each): 512 x 1536 packs 5.9-7.5% of the step's
 * samples against 8.2-9.0% here, but waits 1.5-2.7% against 1.2-1.7%, so
 * the micro-kernel's share gains about a point (83.7-86.5% against
 * 82.7-84.2%); the step's share of peak (82.7-89.3% against 78.6-88.3%,
 * wall clock on a shared VM) cannot tell them apart; and it halves the tiles
 * a 1024-row product gives threads. 1024 x 768 was slower (one tile for a
 * 1024 x 768 product). Not taken.
 * Changing them changes bits (regression/reference/bits_guard.txt): OpenBLAS
 * does not sum a row the same way inside a larger call, even for full tiles
 * (one 512 x 1536 call against four 256 x 768 calls of the same rows and
 * columns: about 5% of the outputs differ in the last bits, at K from 64 to
 * 3072), so tiles cannot be merged for speed without new bits either.
 * A build may set them (-DFM_GEMM_MB=512 -DFM_GEMM_NB=1536 in CMAKE_C_FLAGS,
 * as tiles.sh does) to measure another tile; its bits are then its own, and
 * fm_cpu_blas_info names the tile (the run log's "train: run" line,
 * fmhpc --version's "cpu gemm"). */
#ifndef FM_GEMM_MB
#define FM_GEMM_MB 256
#endif
#ifndef FM_GEMM_NB
#define FM_GEMM_NB 768
#endif
#if FM_GEMM_MB < 1 || FM_GEMM_NB < 1
#error "FM_GEMM_MB and FM_GEMM_NB (the CPU GEMM tile) must be positive"
#endif
/* Below this many multiply-adds a parallel region costs more than it saves. */
#define FM_GEMM_OMP_MIN ((int64_t)1 << 18)
/* The bias and column-sum loops vectorise; their clones (FM_CPU_CLONES,
 * cpu_ops.h) give the same bits. */

/* OpenBLAS's DYNAMIC_ARCH builds export these (driver/others/dynamic.c):
 * quit forgets the kernel table chosen at load, init chooses again from
 * OPENBLAS_CORETYPE or cpuid. Weak: other BLAS builds lack them, and there
 * nothing is chosen again. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* What OpenBLAS took before blas_pin chose again ("" when it did not), and
 * the CPU features blas_pin chose by. */
static char blas_fallback[32];
static const char *blas_fallback_has = "";

/* OpenBLAS's x86-64 kernels older than AVX2: the ones it falls back to on a
 * CPU model it does not know. */
static int pre_avx2_kernel(const char *core) {
  static const char *const old[] = {"Prescott", "Core2",       "Penryn",     "Dunnington",    "Nehalem",
                                    "Atom",     "Sandybridge", "Opteron",    "Opteron(SSE3)", "Barcelona",
                                    "Bobcat",   "Bulldozer",   "Piledriver", "Steamroller",   "Excavator"};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
    if (strcmp(core, old[i]) == 0) return 1;
  return 0;
}

/* The kernel for a CPU with AVX2 and FMA that OpenBLAS 0.3.21 does not know:
 * the fallback of later releases' gotoblas_dynamic_init (cpuid alone, not the
 * model). Their AVX-512 test is AVX512VL with the zmm state enabled by the OS,
 * which __builtin_cpu_supports also requires. Measured on that Emerald Rapids
 * Xeon (one thread, 256 x 768 x 768 sgemm, the tile): Prescott 22 GFLOP/s,
 * Haswell 61-74, SkylakeX 105-110, Cooperlake 118-130; the GPT-2 124M step
 * (bench/step_cpu after ace27f7, T 256, 2 threads, two rounds) 1.37x and
 * 1.61x faster with Cooperlake than with Haswell, the nano Llama's
 * 1.20-1.44x. *has: the CPU features that chose it, for the log. */
static const char *fallback_kernel(const char **has) {
#if defined(__GNUC__) && defined(__x86_64__)
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) {
    *has = "AVX-512 BF16";
    return "Cooperlake";
  }
  if (avx512) {
    *has = "AVX-512";
    return "SkylakeX";
  }
#endif
  *has = "AVX2 and FMA";
  return "Haswell";
}

/* Runs once, before any sgemm of the process. */
static void blas_pin(void) {
#if defined(__GNUC__) && defined(__x86_64__)
  const char *core = openblas_get_corename();
  if (!getenv("OPENBLAS_CORETYPE") && gotoblas_dynamic_init && gotoblas_dynamic_quit && core && pre_avx2_kernel(core) &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    snprintf(blas_fallback, sizeof blas_fallback, "%s", core);
    /* The variable is read by init alone, and unset again so that child
     * processes see the environment they were given. */
    if (setenv("OPENBLAS_CORETYPE", fallback_kernel(&blas_fallback_has), 1) == 0) {
      gotoblas_dynamic_quit();
      gotoblas_dynamic_init();
      unsetenv("OPENBLAS_CORETYPE");
    }
  }
#endif
  openblas_set_num_threads(1);
}

void fm__cpu_blas_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, blas_pin);
}

const char *fm_cpu_blas_info(void) {
  static char info[480];
  fm__cpu_blas_init();
  char pin[200] = "";
  if (blas_fallback[0])
    snprintf(pin, sizeof pin,
             "; chosen by fmhpc: OpenBLAS took its generic %s kernel on this CPU model, which has %s;"
             " OPENBLAS_CORETYPE overrides",
             blas_fallback, blas_fallback_has);
  snprintf(info, sizeof info, "OpenBLAS core %s (%s%s); 1 BLAS thread, OpenMP over fixed %dx%d GEMM tiles",
           openblas_get_corename(), openblas_get_config(), pin, FM_GEMM_MB, FM_GEMM_NB);
  return info;
}

void fm__cpu_gemm1(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, (blasint)M,
              (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* One product for the tiled GEMM: C (M, N) = alpha op(A) op(B) + beta C. */
typedef struct GemmCall {
  int transA, transB;
  int64_t M, N, K;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int64_t lda, ldb, ldc;
} GemmCall;

static int64_t gemm_tiles(const GemmCall *g) {
  if (g->M <= 0 || g->N <= 0) return 0;
  return ((g->M + FM_GEMM_MB - 1) / FM_GEMM_MB) * ((g->N + FM_GEMM_NB - 1) / FM_GEMM_NB);
}

/* Tile t (row-major over the tiles of C) of one product: its corner and size. */
static void gemm_tile_at(const GemmCall *g, int64_t t, int64_t *m0, int64_t *n0, int64_t *mb, int64_t *nb) {
  const int64_t tn = (g->N + FM_GEMM_NB - 1) / FM_GEMM_NB;
  *m0 = (t / tn) * FM_GEMM_MB;
  *n0 = (t % tn) * FM_GEMM_NB;
  *mb = g->M - *m0 < FM_GEMM_MB ? g->M - *m0 : FM_GEMM_MB;
  *nb = g->N - *n0 < FM_GEMM_NB ? g->N - *n0 : FM_GEMM_NB;
}

/* Tile t of one product: one sgemm call. */
static void gemm_tile(const GemmCall *g, int64_t t) {
  int64_t m0, n0, mb, nb;
  gemm_tile_at(g, t, &m0, &n0, &mb, &nb);
  const float *a = g->transA ? g->A + m0 : g->A + m0 * g->lda;
  const float *b = g->transB ? g->B + n0 * g->ldb : g->B + n0;
  fm__cpu_gemm1(g->transA, g->transB, mb, nb, g->K, g->alpha, a, g->lda, b, g->ldb, g->beta, g->C + m0 * g->ldc + n0,
                g->ldc);
}

/* ---- the order tiles go out in (fm__cpu_gemm_plan, cpu_ops.h) ---- */
#define FM_PLAN_Q 1024 /* a re-split's subset sum, in units of 1/FM_PLAN_Q of the two threads' cost */
#define FM_PLAN_W ((FM_PLAN_Q + FM__GEMM_PLAN_MAX) / 64 + 1) /* each cost rounds up by at most one unit */

/* Lowest index of the smallest (want_max 0) or largest (1) load. */
static int plan_pick(const double *load, int T, int want_max) {
  int j = 0;
  for (int k = 1; k < T; k++)
    if (want_max ? load[k] > load[j] : load[k] < load[j]) j = k;
  return j;
}

/* Re-splits threads a and b's tiles so that the larger of their two loads is
 * as small as a subset sum (over costs quantised to 1/FM_PLAN_Q of the pair's
 * total) finds; keeps the new split only if it lowers the larger load.
 * Returns whether it did. */
static int plan_resplit(int *owner, const double *cost, int64_t n, double *load, int a, int b) {
  int64_t item[FM__GEMM_PLAN_MAX];
  int q[FM__GEMM_PLAN_MAX], m = 0, qsum = 0;
  const double pair = load[a] + load[b];
  if (a == b || !(pair > 0)) return 0; /* a == b: every load equal */
  for (int64_t i = 0; i < n; i++)
    if (owner[i] == a || owner[i] == b) {
      const long u = lround(cost[i] / pair * FM_PLAN_Q);
      item[m] = i, q[m] = u > 0 ? (int)u : 1, qsum += q[m], m++;
    }
  /* reach[k]: the quantised sums the first k items can make (bit s of the row) */
  uint64_t reach[FM__GEMM_PLAN_MAX + 1][FM_PLAN_W];
  const int W = qsum / 64 + 1;
  memset(reach[0], 0, sizeof reach[0]);
  reach[0][0] = 1;
  for (int k = 0; k < m; k++) {
    const int ws = q[k] / 64, bs = q[k] % 64;
    for (int w = 0; w < W; w++) {
      uint64_t sh = 0;
      if (w - ws >= 0) sh = reach[k][w - ws] << bs;
      if (bs && w - ws - 1 >= 0) sh |= reach[k][w - ws - 1] >> (64 - bs);
      reach[k + 1][w] = reach[k][w] | sh;
    }
  }
  int s = qsum / 2;
  while (s > 0 && !((reach[m][s / 64] >> (s % 64)) & 1)) s--;
  double la = 0.0, lb = 0.0;
  int side[FM__GEMM_PLAN_MAX] = {0};
  for (int k = m; k > 0; k--) { /* item k-1 is in the subset iff the first k-1 items cannot make s */
    side[k - 1] = !((reach[k - 1][s / 64] >> (s % 64)) & 1);
    if (side[k - 1]) s -= q[k - 1];
  }
  for (int k = 0; k < m; k++) *(side[k] ? &la : &lb) += cost[item[k]];
  const double before = load[a] > load[b] ? load[a] : load[b];
  if (!((la > lb ? la : lb) < before * (1.0 - 1e-12))) return 0;
  for (int k = 0; k < m; k++) owner[item[k]] = side[k] ? a : b;
  load[a] = la, load[b] = lb;
  return 1;
}

double fm__cpu_gemm_plan(int64_t *order, const double *cost, int64_t n, int threads) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  int equal = 1;
  for (int64_t i = 1; i < n; i++) equal &= cost[i] == cost[0];
  const int T = threads;
  if (T < 2 || n <= T || n > FM__GEMM_PLAN_MAX || equal) { /* the identity's finishing time */
    double t[FM__GEMM_PLAN_MAX] = {0}, end = 0.0;
    const int tt = T < 1 ? 1 : (T > FM__GEMM_PLAN_MAX ? FM__GEMM_PLAN_MAX : T);
    for (int64_t i = 0; i < n; i++) {
      const int j = plan_pick(t, tt, 0);
      t[j] += cost[i];
      if (t[j] > end) end = t[j];
    }
    return end;
  }
  /* longest first (ties: lower index), each to the least loaded thread */
  int64_t by[FM__GEMM_PLAN_MAX];
  for (int64_t i = 0; i < n; i++) {
    int64_t k = i;
    for (; k > 0 && cost[by[k - 1]] < cost[i]; k--) by[k] = by[k - 1];
    by[k] = i;
  }
  int owner[FM__GEMM_PLAN_MAX];
  double load[FM__GEMM_PLAN_MAX] = {0};
  for (int64_t k = 0; k < n; k++) {
    const int j = plan_pick(load, T, 0);
    owner[by[k]] = j, load[j] += cost[by[k]];
  }
  for (int it = 0; it < 4 * T; it++)
    if (!plan_resplit(owner, cost, n, load, plan_pick(load, T, 1), plan_pick(load, T, 0))) break;
  /* The order: each time a thread frees (the earliest; ties: the lowest), the
   * next tile goes to it, which under schedule(dynamic, 1) at equal speed is
   * what happens. Its own tiles longest first; when it has none left, the
   * smallest of the thread with the most work left. */
  double t[FM__GEMM_PLAN_MAX] = {0}, left[FM__GEMM_PLAN_MAX] = {0}, end = 0.0;
  int taken[FM__GEMM_PLAN_MAX] = {0};
  for (int64_t i = 0; i < n; i++) left[owner[i]] += cost[i];
  for (int64_t pos = 0; pos < n; pos++) {
    const int j = plan_pick(t, T, 0);
    int64_t pick = 0;
    int found = 0;
    for (int64_t k = 0; k < n && !found; k++)
      if (!taken[by[k]] && owner[by[k]] == j) pick = by[k], found = 1;
    if (!found) {
      const int r = plan_pick(left, T, 1);
      for (int64_t k = n - 1; k >= 0 && !found; k--)
        if (!taken[by[k]] && owner[by[k]] == r) pick = by[k], found = 1;
      for (int64_t k = n - 1; k >= 0 && !found; k--) /* only tiles of no cost left (K = 0) */
        if (!taken[by[k]]) pick = by[k], found = 1;
    }
    taken[pick] = 1, left[owner[pick]] -= cost[pick];
    order[pos] = pick, t[j] += cost[pick];
    if (t[j] > end) end = t[j];
  }
  return end;
}

/* Independent products (no product reads what another writes) as one set of
 * tiles in one parallel region: each tile is the call fm__cpu_gemm makes for
 * it, so the bits are those of running the products one after another; only
 * the threads' idle time changes (a product with an odd tile count, 3 or 9
 * for GPT-2's 768-row weight gradients, no longer leaves a thread waiting at
 * its end). The tiles go out in fm__cpu_gemm_plan's order, costed by their
 * multiply-adds: GPT-2's qkv backward (4 tiles of K 2304, 9 of K 1024) on two
 * threads ends after 36 units of 256 x 768 x 256 instead of longest first's 38,
 * the attention projection's (3 of K 1024, 4 of K 768) after 12, not 13
 * (test_ops_matmul). */
static void gemm_run(const GemmCall *g, int n) {
  fm__cpu_blas_init();
  int64_t tiles = 0, work = 0;
  for (int i = 0; i < n; i++) tiles += gemm_tiles(&g[i]), work += g[i].M * g[i].N * g[i].K;
  const int par = tiles > 1 && work >= FM_GEMM_OMP_MIN;
  int64_t order[FM__GEMM_PLAN_MAX];
  const int plan = par && n > 1 && tiles <= FM__GEMM_PLAN_MAX;
  if (plan) {
    double cost[FM__GEMM_PLAN_MAX] = {0};
    int64_t t = 0;
    for (int i = 0; i < n; i++)
      for (int64_t u = 0; u < gemm_tiles(&g[i]); u++) {
        int64_t m0, n0, mb, nb;
        gemm_tile_at(&g[i], u, &m0, &n0, &mb, &nb);
        cost[t++] = (double)mb * (double)nb * (double)g[i].K;
      }
    fm__cpu_gemm_plan(order, cost, tiles, omp_get_max_threads());
  }
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t k = 0; k < tiles; k++) {
    int i = 0;
    int64_t u = plan ? order[k] : k;
    while (u >= gemm_tiles(&g[i])) u -= gemm_tiles(&g[i++]);
    gemm_tile(&g[i], u);
  }
}

void fm__cpu_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const GemmCall g = {transA, transB, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc};
  gemm_run(&g, 1);
}

FM_CPU_CLONES static void bias_row(float *o, const float *bias, int64_t OC) {
#pragma omp simd
  for (int64_t j = 0; j < OC; j++) o[j] = o[j] + bias[j];
}

void fm_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int64_t N, int64_t C,
                       int64_t OC) {
  const float *a = inp, *b = w;
  if (fm__cpu_bf16_on()) { /* bf16 operands, fp32 sums (bf16_mode.c) */
    a = fm__cpu_bf16_copy(0, inp, N, C, C);
    b = fm__cpu_bf16_copy(1, w, OC, C, C);
  }
  fm__cpu_gemm(0, 1, N, OC, C, 1.0f, a, C, b, C, 0.0f, out, OC);
  if (!bias) return;
#pragma omp parallel for schedule(static) if (N * OC >= FM_GEMM_OMP_MIN)
  for (int64_t n = 0; n < N; n++) bias_row(out + n * OC, bias, OC);
}

/* dbias (OC) += column sums of d (N, OC): each column summed over rows in row
 * order, in double from dbias's old value, rounded once. Threads own column
 * blocks, so the order never depends on them. */
#define FM_COLSUM_CB 64
FM_CPU_CLONES static void colsum_block(float *dbias, const float *d, int64_t N, int64_t OC, int64_t cb) {
  const int64_t c0 = cb * FM_COLSUM_CB;
  const int64_t cn = OC - c0 < FM_COLSUM_CB ? OC - c0 : FM_COLSUM_CB;
  double acc[FM_COLSUM_CB];
  for (int64_t c = 0; c < cn; c++) acc[c] = dbias[c0 + c];
  for (int64_t n = 0; n < N; n++) {
    const float *row = d + n * OC + c0;
#pragma omp simd
    for (int64_t c = 0; c < cn; c++) acc[c] += (double)row[c];
  }
  for (int64_t c = 0; c < cn; c++) dbias[c0 + c] = (float)acc[c];
}

static void colsum_acc(float *dbias, const float *d, int64_t N, int64_t OC) {
  const int64_t nb = (OC + FM_COLSUM_CB - 1) / FM_COLSUM_CB;
#pragma omp parallel for schedule(static) if (N * OC >= FM_GEMM_OMP_MIN)
  for (int64_t cb = 0; cb < nb; cb++) colsum_block(dbias, d, N, OC, cb);
}

void fm_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                       int64_t N, int64_t C, int64_t OC) {
  const float *d = dout, *wq = w, *x = inp;
  if (fm__cpu_bf16_on()) {
    d = fm__cpu_bf16_copy(0, dout, N, OC, OC);
    if (dinp) wq = fm__cpu_bf16_copy(1, w, OC, C, C);
    if (dw) x = fm__cpu_bf16_copy(2, inp, N, C, C);
  }
  /* dinp (N, C) += dout (N, OC) @ w (OC, C) and dw (OC, C) += dout^T (OC,
   * N) @ inp (N, C) (the sum over N rows stays in one call per tile):
   * independent, so their tiles share one parallel region, the costlier
   * tiles' product first. */
  GemmCall g[2];
  int n = 0;
  const GemmCall gin = {0, 0, N, C, OC, 1.0f, 1.0f, d, wq, dinp, OC, C, C};
  const GemmCall gw = {1, 0, OC, C, N, 1.0f, 1.0f, d, x, dw, OC, C, C};
  if (dw && (!dinp || N >= OC)) g[n++] = gw;
  if (dinp) g[n++] = gin;
  if (dw && dinp && N < OC) g[n++] = gw;
  gemm_run(g, n);
  if (dbias) colsum_acc(dbias, d, N, OC);
}
