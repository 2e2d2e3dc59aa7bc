/* test_ops_matmul.c: fm_cpu_matmul_fwd/bwd (torch.nn.Linear) against a float64
 * reference written here (out = inp w^T + b, plain loops): forward to 1e-6
 * (rel) / 1e-5 (max), backward against central differences of the float64
 * loss sum(dout * out) to 1e-5 / 1e-4; accumulation (+=); shapes that span
 * several GEMM tiles; bits independent of the thread count; bf16 emulation
 * equal to an fp32 matmul of pre-rounded operands; the tile order of
 * fm__cpu_gemm_plan against a schedule(dynamic, 1) simulated here. */
#include <omp.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"
#include "ops/ops_check.h"
#include "../../src/tensor/cpu/cpu_ops.h"

typedef struct MmRef {
  double *inp, *w, *b, *dout; /* b may be NULL */
  int64_t N, C, OC;
} MmRef;

static void mm_ref_fwd(double *out, const MmRef *r) {
  for (int64_t n = 0; n < r->N; n++)
    for (int64_t o = 0; o < r->OC; o++) {
      double s = r->b ? r->b[o] : 0.0;
      for (int64_t c = 0; c < r->C; c++) s += r->inp[n * r->C + c] * r->w[o * r->C + c];
      out[n * r->OC + o] = s;
    }
}
static double mm_ref_loss(void *ctx) {
  const MmRef *r = ctx;
  double *out = ops_dalloc(r->N * r->OC);
  mm_ref_fwd(out, r);
  double L = 0;
  for (int64_t i = 0; i < r->N * r->OC; i++) L += r->dout[i] * out[i];
  free(out);
  return L;
}

static void check_matmul(int64_t N, int64_t C, int64_t OC, int with_bias, int fd) {
  printf("matmul N=%lld C=%lld OC=%lld bias=%d\n", (long long)N, (long long)C, (long long)OC, with_bias);
  float *inp = ops_alloc(N * C), *w = ops_alloc(OC * C), *b = ops_alloc(OC), *out = ops_alloc(N * OC);
  float *dout = ops_alloc(N * OC), *dinp = ops_alloc(N * C), *dw = ops_alloc(OC * C), *db = ops_alloc(OC);
  ops_fill(inp, N * C, -1, 1);
  ops_fill(w, OC * C, -1, 1);
  ops_fill(b, OC, -1, 1);
  ops_fill(dout, N * OC, -1, 1);
  MmRef r = {ops_to_double(inp, N * C),
             ops_to_double(w, OC * C),
             with_bias ? ops_to_double(b, OC) : NULL,
             ops_to_double(dout, N * OC),
             N,
             C,
             OC};
  double *ref = ops_dalloc(N * OC);
  mm_ref_fwd(ref, &r);
  fm_cpu_matmul_fwd(out, inp, w, with_bias ? b : NULL, N, C, OC);
  OPS_EXPECT_CLOSE("forward", out, ref, N * OC, 1e-6, 1e-5);

  fm_cpu_matmul_bwd(dinp, dw, with_bias ? db : NULL, dout, inp, w, N, C, OC);
  double *g_inp = ops_dalloc(N * C), *g_w = ops_dalloc(OC * C), *g_b = ops_dalloc(OC);
  if (fd) {
    ops_fd(g_inp, r.inp, N * C, mm_ref_loss, &r, 1e-6);
    ops_fd(g_w, r.w, OC * C, mm_ref_loss, &r, 1e-6);
    if (with_bias) ops_fd(g_b, r.b, OC, mm_ref_loss, &r, 1e-6);
  } else { /* too big for differences: the analytic float64 gradient */
    for (int64_t n = 0; n < N; n++)
      for (int64_t o = 0; o < OC; o++) {
        const double d = r.dout[n * OC + o];
        for (int64_t c = 0; c < C; c++) {
          g_inp[n * C + c] += d * r.w[o * C + c];
          g_w[o * C + c] += d * r.inp[n * C + c];
        }
        g_b[o] += d;
      }
  }
  OPS_EXPECT_CLOSE(fd ? "dinp vs FD" : "dinp vs f64", dinp, g_inp, N * C, 1e-5, 1e-4);
  OPS_EXPECT_CLOSE(fd ? "dw vs FD" : "dw vs f64", dw, g_w, OC * C, 1e-5, 1e-4);
  if (with_bias) OPS_EXPECT_CLOSE(fd ? "dbias vs FD" : "dbias vs f64", db, g_b, OC, 1e-5, 1e-4);

  /* Backward accumulates: from g0, the result is g0 + the gradient. */
  float *dinp2 = ops_alloc(N * C), *dw2 = ops_alloc(OC * C), *db2 = ops_alloc(OC);
  ops_fill(dinp2, N * C, -1, 1);
  ops_fill(dw2, OC * C, -1, 1);
  ops_fill(db2, OC, -1, 1);
  double *e_inp = ops_dalloc(N * C), *e_w = ops_dalloc(OC * C), *e_b = ops_dalloc(OC);
  for (int64_t i = 0; i < N * C; i++) e_inp[i] = (double)dinp2[i] + dinp[i];
  for (int64_t i = 0; i < OC * C; i++) e_w[i] = (double)dw2[i] + dw[i];
  for (int64_t i = 0; i < OC; i++) e_b[i] = (double)db2[i] + db[i];
  fm_cpu_matmul_bwd(dinp2, dw2, with_bias ? db2 : NULL, dout, inp, w, N, C, OC);
  OPS_EXPECT_CLOSE("dinp accumulates", dinp2, e_inp, N * C, 1e-6, 1e-6);
  OPS_EXPECT_CLOSE("dw accumulates", dw2, e_w, OC * C, 1e-6, 1e-6);
  if (with_bias) OPS_EXPECT_CLOSE("dbias accumulates", db2, e_b, OC, 1e-6, 1e-6);

  free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(dw), free(db);
  free(dinp2), free(dw2), free(db2), free(e_inp), free(e_w), free(e_b);
  free(r.inp), free(r.w), free(r.b), free(r.dout), free(ref), free(g_inp), free(g_w), free(g_b);
}

FM_TEST(matmul_fwd_bwd_bias) {
  ops_seed(1);
  check_matmul(13, 17, 11, 1, 1);
}

FM_TEST(matmul_fwd_bwd_no_bias) {
  ops_seed(2);
  check_matmul(9, 23, 14, 0, 1);
}

/* Several GEMM tiles (256 x 768) in both output dimensions, ragged edges. */
FM_TEST(matmul_multi_tile) {
  ops_seed(3);
  check_matmul(300, 37, 1100, 1, 0);
}

/* Same inputs, 1 and 2 OpenMP threads: identical bits (DESIGN section 6). */
FM_TEST(matmul_bits_thread_independent) {
  ops_seed(4);
  const int64_t N = 300, C = 96, OC = 700;
  float *inp = ops_alloc(N * C), *w = ops_alloc(OC * C), *b = ops_alloc(OC), *dout = ops_alloc(N * OC);
  ops_fill(inp, N * C, -1, 1);
  ops_fill(w, OC * C, -1, 1);
  ops_fill(b, OC, -1, 1);
  ops_fill(dout, N * OC, -1, 1);
  float *out[2], *dinp[2], *dw[2], *db[2];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    out[k] = ops_alloc(N * OC), dinp[k] = ops_alloc(N * C), dw[k] = ops_alloc(OC * C), db[k] = ops_alloc(OC);
    fm_cpu_matmul_fwd(out[k], inp, w, b, N, C, OC);
    fm_cpu_matmul_bwd(dinp[k], dw[k], db[k], dout, inp, w, N, C, OC);
  }
  omp_set_num_threads(1);
  FM_EXPECT_EQ_INT(ops_bits_differ(out[0], out[1], N * OC), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(dinp[0], dinp[1], N * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(dw[0], dw[1], OC * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(db[0], db[1], OC), 0);
  for (int k = 0; k < 2; k++) free(out[k]), free(dinp[k]), free(dw[k]), free(db[k]);
  free(inp), free(w), free(b), free(dout);
}

/* bf16 emulation rounds both GEMM operands (RNE) and sums in fp32: the result
 * is, bit for bit, an fp32 matmul of explicitly rounded operands, and differs
 * from the unrounded fp32 result. Backward likewise (dout, w, inp rounded). */
FM_TEST(matmul_bf16_emulation) {
  ops_seed(5);
  const int64_t N = 40, C = 48, OC = 36;
  float *inp = ops_alloc(N * C), *w = ops_alloc(OC * C), *b = ops_alloc(OC), *dout = ops_alloc(N * OC);
  ops_fill(inp, N * C, -1, 1);
  ops_fill(w, OC * C, -1, 1);
  ops_fill(b, OC, -1, 1);
  ops_fill(dout, N * OC, -1, 1);
  float *ri = ops_copy(inp, N * C), *rw = ops_copy(w, OC * C), *rd = ops_copy(dout, N * OC);
  fm_cpu_round_bf16(ri, N * C);
  fm_cpu_round_bf16(rw, OC * C);
  fm_cpu_round_bf16(rd, N * OC);
  float *o16 = ops_alloc(N * OC), *o32r = ops_alloc(N * OC), *o32 = ops_alloc(N * OC);
  float *gi16 = ops_alloc(N * C), *gw16 = ops_alloc(OC * C), *gb16 = ops_alloc(OC);
  float *gi32 = ops_alloc(N * C), *gw32 = ops_alloc(OC * C), *gb32 = ops_alloc(OC);
  const FmBackend *be = fm_backend_cpu();
  be->set_compute_bf16(1);
  be->matmul_fwd(o16, inp, w, b, N, C, OC);
  be->matmul_bwd(gi16, gw16, gb16, dout, inp, w, N, C, OC);
  be->set_compute_bf16(0);
  fm_cpu_matmul_fwd(o32r, ri, rw, b, N, C, OC);
  fm_cpu_matmul_bwd(gi32, gw32, gb32, rd, ri, rw, N, C, OC);
  fm_cpu_matmul_fwd(o32, inp, w, b, N, C, OC);
  FM_EXPECT_EQ_INT(ops_bits_differ(o16, o32r, N * OC), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(gi16, gi32, N * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(gw16, gw32, OC * C), 0);
  FM_EXPECT_EQ_INT(ops_bits_differ(gb16, gb32, OC), 0);
  FM_EXPECT(ops_bits_differ(o16, o32, N * OC) > N * OC / 2);
  /* and it is still a matmul: bf16 operand error is ~2^-9 relative */
  double *ref = ops_to_double(o32, N * OC);
  OPS_EXPECT_CLOSE("bf16 vs fp32 forward", o16, ref, N * OC, 1e-2, 1e-2);
  free(ref), free(inp), free(w), free(b), free(dout), free(ri), free(rw), free(rd), free(o16), free(o32r), free(o32);
  free(gi16), free(gw16), free(gb16), free(gi32), free(gw32), free(gb32);
}

FM_TEST(matmul_blas_info_names_kernel) {
  const char *info = fm_cpu_blas_info();
  printf("%s\n", info);
  FM_EXPECT_CONTAINS(info, "OpenBLAS core ");
  FM_EXPECT(fm_backend_cpu()->matmul_fwd == fm_cpu_matmul_fwd);
}

/* The GEMM kernel is not left at a generic pre-AVX2 fallback on a CPU with
 * AVX2 and FMA (matmul.c's blas_pin): OpenBLAS 0.3.21 takes Prescott on an
 * Emerald Rapids Xeon it does not know, a fifth of the speed. Where fmhpc
 * chose, it chose the widest kernel the CPU runs, as later OpenBLAS releases
 * do: Cooperlake with AVX-512 BF16, SkylakeX with AVX-512, else Haswell (each
 * has its reference in regression/reference/). Only OPENBLAS_CORETYPE may ask
 * for another kernel. */
FM_TEST(matmul_blas_kernel_not_generic_on_avx2) {
  const char *info = fm_cpu_blas_info();
#if defined(__GNUC__) && defined(__x86_64__)
  if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    printf("OPENBLAS_CORETYPE set or no AVX2+FMA: nothing to check beyond %s\n", info);
    return;
  }
  static const char *const generic[] = {"core Prescott ",    "core Core2 ", "core Penryn ",    "core Nehalem ",
                                        "core Sandybridge ", "core Atom ",  "core Dunnington "};
  for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) FM_EXPECT(strstr(info, generic[i]) == NULL);
  if (strstr(info, "chosen by fmhpc")) {
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    FM_EXPECT_CONTAINS(info, avx512 && __builtin_cpu_supports("avx512bf16") ? "OpenBLAS core Cooperlake "
                             : avx512                                       ? "OpenBLAS core SkylakeX "
                                                                            : "OpenBLAS core Haswell ");
  }
#endif
  printf("%s\n", info);
}

/* What schedule(dynamic, 1) does with `order` on T threads of equal speed:
 * the next tile to the thread that frees first. Returns the finishing time;
 * also checks that order is a permutation of 0..n-1. */
static double dyn_sim(const int64_t *order, const double *cost, int64_t n, int T) {
  double t[16] = {0}, end = 0.0;
  int seen[FM__GEMM_PLAN_MAX] = {0};
  for (int64_t k = 0; k < n; k++) {
    FM_EXPECT(order[k] >= 0 && order[k] < n && !seen[order[k]]);
    if (order[k] < 0 || order[k] >= n) return -1.0;
    seen[order[k]] = 1;
    int j = 0;
    for (int i = 1; i < T; i++)
      if (t[i] < t[j]) j = i;
    t[j] += cost[order[k]];
    if (t[j] > end) end = t[j];
  }
  return end;
}

/* GPT-2's backward tile sets (dinp's and dw's tiles in one region, in units of
 * 256 x 768 x 256 multiply-adds): the qkv layer's 4 tiles of K 2304 (9 units)
 * and 9 of K 1024 (4 units), the attention projection's 3 tiles of K 1024 and
 * 4 of K 768; MLP projection's 12 of K 1024 and 16 of K 768. Longest
 * first on two threads ends at 38 and 13 units; splits exist that end at
 * 36 + 36 and 12 + 12, and the plan must find them and order the tiles so
 * that the dynamic schedule follows it. On three threads the qkv set's best
 * end is 25 (no split reaches 72 / 3 = 24: each thread would need 6 of the
 * 4-unit tiles, or 9 + 9 + ... sums that miss 24). */
FM_TEST(matmul_tile_plan_balances_mixed_tiles) {
  const struct {
    int n1, c1, n2, c2, T;
    double want; /* the planned end: the best split's */
  } cases[] = {{4, 9, 9, 4, 2, 36}, {3, 4, 4, 3, 2, 12}, {4, 9, 9, 4, 3, 25}, {12, 4, 16, 3, 2, 48}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double cost[FM__GEMM_PLAN_MAX];
    int64_t n = 0, order[FM__GEMM_PLAN_MAX], ident[FM__GEMM_PLAN_MAX];
    for (int i = 0; i < cases[c].n1; i++) cost[n++] = cases[c].c1;
    for (int i = 0; i < cases[c].n2; i++) cost[n++] = cases[c].c2;
    for (int64_t i = 0; i < n; i++) ident[i] = i;
    const double planned = fm__cpu_gemm_plan(order, cost, n, cases[c].T);
    const double realised = dyn_sim(order, cost, n, cases[c].T), longest_first = dyn_sim(ident, cost, n, cases[c].T);
    printf("%d x %d + %d x %d on %d threads: planned %.0f, simulated %.0f, longest first %.0f\n", cases[c].n1,
           cases[c].c1, cases[c].n2, cases[c].c2, cases[c].T, planned, realised, longest_first);
    FM_EXPECT(realised == planned);
    FM_EXPECT(planned == cases[c].want);
    FM_EXPECT(planned <= longest_first);
  }
  /* equal costs, one thread, too many tiles: the identity */
  double cost[FM__GEMM_PLAN_MAX + 1];
  int64_t order[FM__GEMM_PLAN_MAX + 1];
  for (int i = 0; i <= FM__GEMM_PLAN_MAX; i++) cost[i] = 1.0 + (i % 3);
  for (int k = 0; k < 3; k++) {
    const int64_t n = k == 2 ? FM__GEMM_PLAN_MAX + 1 : 10;
    const double eq[10] = {5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
    fm__cpu_gemm_plan(order, k == 0 ? eq : cost, n, k == 1 ? 1 : 2);
    for (int64_t i = 0; i < n; i++) FM_EXPECT_EQ_INT(order[i], i);
  }
}

/* A backward whose two products have tiles of different cost (dinp: 2 tiles
 * of K 1536; dw: 6 of K 512), so the planned order is not the identity: the
 * same bits at 1, 2 and 3 threads. */
FM_TEST(matmul_bwd_bits_planned_tiles) {
  ops_seed(9);
  const int64_t N = 512, C = 768, OC = 1536;
  float *inp = ops_alloc(N * C), *w = ops_alloc(OC * C), *dout = ops_alloc(N * OC);
  ops_fill(inp, N * C, -1, 1);
  ops_fill(w, OC * C, -1, 1);
  ops_fill(dout, N * OC, -1, 1);
  float *dinp[3], *dw[3];
  for (int k = 0; k < 3; k++) {
    omp_set_num_threads(k + 1);
    dinp[k] = ops_alloc(N * C), dw[k] = ops_alloc(OC * C);
    fm_cpu_matmul_bwd(dinp[k], dw[k], NULL, dout, inp, w, N, C, OC);
  }
  omp_set_num_threads(1);
  for (int k = 1; k < 3; k++) {
    FM_EXPECT_EQ_INT(ops_bits_differ(dinp[0], dinp[k], N * C), 0);
    FM_EXPECT_EQ_INT(ops_bits_differ(dw[0], dw[k], OC * C), 0);
  }
  for (int k = 0; k < 3; k++) free(dinp[k]), free(dw[k]);
  free(inp), free(w), free(dout);
}
