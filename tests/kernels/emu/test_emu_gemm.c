/* test_emu_gemm.c: the CUDA GEMM wrapper (src/tensor/cuda/gemm.cu, compiled
 * with -DFM_SIMT: fm_simt_gemm_cm, its bf16 packing kernel run by the
 * emulator, its plan cache) in both precisions, against references written
 * here in float64 and against the CPU backend's bf16 emulation.
 *
 * Tolerances (fp32 sums of K products, k increasing, then alpha and beta C):
 *   vs float64 of the same (bf16-rounded where bf16) operands:
 *     |got - ref| <= (K + 2) eps sum_k |a b| (+ the same of |beta C|);
 *   vs the CPU op (OpenBLAS's order): 2 K eps sum |a b|, as test_emu_ops.
 * bf16 must really round: the bf16 result must leave the fp32 tolerance of
 * the unrounded product somewhere (else the switch did nothing), and a
 * transposed operand read the wrong way must fail the check. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu/simt.h"
#include "fm_test.h"
#include "fmhpc/tensor.h"

void fm_simt_gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void fm_simt_set_compute_bf16(int on);
int fm_simt_compute_bf16(void);
int fm_simt_gemm_plans(FmGemmPlanInfo *out, int max);
int64_t fm_simt_gemm_plans_text(char *buf, int64_t cap);
int64_t fm_simt_gemm_plans_record(char *buf, int64_t cap);
int fm_simt_gemm_plans_pin(const char *recorded, char *report, int64_t cap);
void fm_simt_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int64_t N, int64_t C,
                        int64_t OC);
void fm_simt_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        int64_t N, int64_t C, int64_t OC);

static uint64_t rng = 0x243F6A8885A308D3ull;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * ((double)(rng >> 11) * 0x1p-53);
}
static float *f32(int64_t n) { return fm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
/* A column-major (rows, cols) matrix with leading dimension ld > rows: the
 * padding rows are NaN, so reading one poisons the result. */
static float *matrix(int64_t rows, int64_t cols, int64_t ld) {
  float *p = f32(ld * cols);
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < ld; i++) p[i + j * ld] = i < rows ? (float)uniform(-1, 1) : NAN;
  return p;
}
/* fp32 -> bf16 -> fp32, round to nearest even, written here from the format
 * (finite inputs only, as the tests use). */
static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&x, &u, 4);
  return x;
}
static double q(float x, int bf16) { return bf16 ? (double)round_bf16(x) : (double)x; }

/* C (m, n) = alpha op(A) op(B) + beta C in float64 from the definition, and
 * the error scale sum |terms| per element. */
static void ref_gemm(int bf16, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, const float *C0, int64_t ldc, double *ref,
                     double *scale) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double s = 0, a = 0;
      for (int64_t p = 0; p < k; p++) {
        const double x = q(ta ? A[p + i * lda] : A[i + p * lda], bf16);
        const double y = q(tb ? B[j + p * ldb] : B[p + j * ldb], bf16);
        s += x * y;
        a += fabs(x * y);
      }
      const double c = beta == 0.0f ? 0.0 : (double)beta * C0[i + j * ldc];
      ref[i + j * m] = (double)alpha * s + c;
      scale[i + j * m] = fabs((double)alpha) * a + fabs(c);
    }
}

/* Elements of got (ldc) outside (K + 2) eps scale of ref; prints the first few. */
static int64_t bad_vs_ref(const float *got, int64_t ldc, const double *ref, const double *scale, int64_t m, int64_t n,
                          int64_t K, const char *what, int quiet) {
  int64_t bad = 0;
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      const double tol = (double)(K + 2) * FLT_EPSILON * scale[i + j * m] + 1e-30;
      const double g = (double)got[i + j * ldc];
      if (!(fabs(g - ref[i + j * m]) <= tol) && bad++ < 3 && !quiet)
        FM__FAIL("%s (%lld, %lld): got %.9g want %.9g (tol %.3g)", what, (long long)i, (long long)j, g, ref[i + j * m],
                 tol);
    }
  return bad;
}

/* Every transpose pair, leading dimensions above the rows (NaN padding),
 * alpha != 1, beta 0 and 1, both precisions, three schedules: within the
 * tolerance of float64 on the same operands, and bitwise across schedules. */
FM_TEST(gemm_layouts_both_precisions) {
  const int64_t m = 7, n = 5, k = 11; /* all different: a swapped dimension cannot pass */
  int64_t compared = 0;
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 2; bi++) {
          const float alpha = 0.75f, beta = bi ? 1.0f : 0.0f;
          const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
          const int64_t lda = ar + 3, ldb = br + 2, ldc = m + 4;
          float *A = matrix(ar, ac, lda), *B = matrix(br, bc, ldb), *C0 = matrix(m, n, ldc);
          if (!bi)
            for (int64_t i = 0; i < m * n; i++) C0[(i % m) + (i / m) * ldc] = NAN; /* beta 0 ignores C */
          double *ref = fm_xcalloc((size_t)(m * n), sizeof(double)),
                 *scale = fm_xcalloc((size_t)(m * n), sizeof(double));
          ref_gemm(bf16, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, ldc, ref, scale);
          float *first = NULL;
          for (int s = 0; s < 3; s++) {
            fm_simt_set_schedule((FmSimtOrder)s, 7);
            float *C = f32(ldc * n);
            memcpy(C, C0, (size_t)(ldc * n) * sizeof *C);
            fm_simt_set_compute_bf16(bf16);
            FM_EXPECT_EQ_INT(fm_simt_compute_bf16(), bf16);
            fm_simt_gemm_cm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
            char what[64];
            snprintf(what, sizeof what, "%s %c%c beta=%g", bf16 ? "bf16" : "fp32", ta ? 'T' : 'N', tb ? 'T' : 'N',
                     (double)beta);
            FM_EXPECT_EQ_INT(bad_vs_ref(C, ldc, ref, scale, m, n, k, what, 0), 0);
            /* the padding of C is never written */
            for (int64_t j = 0; j < n; j++)
              for (int64_t i = m; i < ldc; i++) FM_EXPECT(isnan(C[i + j * ldc]));
            if (!first)
              first = C;
            else {
              FM_EXPECT(memcmp(C, first, (size_t)(ldc * n) * sizeof *C) == 0);
              free(C);
            }
            compared += m * n;
          }
          free(first), free(A), free(B), free(C0), free(ref), free(scale);
        }
  fm_simt_set_compute_bf16(0);
  printf("emu: gemm_cm: 2 precisions x 4 transposes x 2 betas x 3 schedules, %lld elements compared\n",
         (long long)compared);
  FM_EXPECT(compared == 2 * 4 * 2 * 3 * m * n);
}

/* A square product whose A is read with the other transpose: the check above
 * must reject it (it could not, if it passed anything). */
FM_TEST(gemm_wrong_transpose_fails) {
  const int64_t m = 6, n = 4, k = 6;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    float *A = matrix(m, k, m), *B = matrix(k, n, k), *C = f32(m * n);
    double *ref = fm_xcalloc((size_t)(m * n), sizeof(double)), *scale = fm_xcalloc((size_t)(m * n), sizeof(double));
    ref_gemm(bf16, 0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m, ref, scale);
    fm_simt_set_compute_bf16(bf16);
    fm_simt_gemm_cm(0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m);
    FM_EXPECT_EQ_INT(bad_vs_ref(C, m, ref, scale, m, n, k, "right transpose", 0), 0);
    fm_simt_gemm_cm(1, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m); /* A^T: wrong */
    const int64_t bad = bad_vs_ref(C, m, ref, scale, m, n, k, "wrong transpose", 1);
    printf("emu: %s wrong transpose of A: %lld of %lld elements outside the tolerance\n", bf16 ? "bf16" : "fp32",
           (long long)bad, (long long)(m * n));
    FM_EXPECT(bad > m * n / 2);
    free(A), free(B), free(C), free(ref), free(scale);
  }
  fm_simt_set_compute_bf16(0);
}

/* The model's GEMMs in bf16 mode against the CPU backend's bf16 emulation
 * (fm_cpu_set_compute_bf16): the same rounded operands, sums in another order,
 * so within 2 K eps sum |a b| of the rounded values; and far from the fp32
 * result (the rounding happened). */
FM_TEST(matmul_bf16_vs_cpu_bf16) {
  const int64_t shapes[][3] = {{7, 13, 5}, {33, 64, 48}}; /* N, C, OC */
  int64_t compared = 0, moved = 0;
  for (int sh = 0; sh < 2; sh++) {
    const int64_t N = shapes[sh][0], C = shapes[sh][1], OC = shapes[sh][2];
    float *x = matrix(N * C, 1, N * C), *w = matrix(OC * C, 1, OC * C), *dout = matrix(N * OC, 1, N * OC);
    float *co = f32(N * OC), *cdi = f32(N * C), *cdw = f32(OC * C);
    float *go = f32(N * OC), *gdi = f32(N * C), *gdw = f32(OC * C), *fo = f32(N * OC);
    fm_cpu_set_compute_bf16(1);
    fm_cpu_matmul_fwd(co, x, w, NULL, N, C, OC);
    fm_cpu_matmul_bwd(cdi, cdw, NULL, dout, x, w, N, C, OC);
    fm_cpu_set_compute_bf16(0);
    fm_simt_set_compute_bf16(1);
    fm_simt_matmul_fwd(go, x, w, NULL, N, C, OC);
    fm_simt_matmul_bwd(gdi, gdw, NULL, dout, x, w, N, C, OC);
    fm_simt_set_compute_bf16(0);
    fm_simt_matmul_fwd(fo, x, w, NULL, N, C, OC);
    const struct {
      const float *got, *cpu, *a, *b;
      int64_t rows, cols, K, sa_r, sa_k, sb_c, sb_k;
      const char *what;
    } cases[3] = {
        /* out[n][o] = sum_c x[n][c] w[o][c] */
        {go, co, x, w, N, OC, C, C, 1, C, 1, "fwd out"},
        /* dinp[n][c] = sum_o dout[n][o] w[o][c] */
        {gdi, cdi, dout, w, N, C, OC, OC, 1, 1, C, "bwd dinp"},
        /* dw[o][c] = sum_n dout[n][o] x[n][c] */
        {gdw, cdw, dout, x, OC, C, N, 1, OC, 1, C, "bwd dw"},
    };
    for (int t = 0; t < 3; t++)
      for (int64_t r = 0; r < cases[t].rows; r++)
        for (int64_t c = 0; c < cases[t].cols; c++) {
          double sc = 0;
          for (int64_t p = 0; p < cases[t].K; p++)
            sc += fabs((double)round_bf16(cases[t].a[r * cases[t].sa_r + p * cases[t].sa_k]) *
                       (double)round_bf16(cases[t].b[c * cases[t].sb_c + p * cases[t].sb_k]));
          const int64_t i = r * cases[t].cols + c;
          const double tol = 2.0 * (double)cases[t].K * FLT_EPSILON * sc + 1e-30;
          if (!(fabs((double)cases[t].got[i] - (double)cases[t].cpu[i]) <= tol))
            FM__FAIL("bf16 %s [%lld]: cuda %.9g cpu %.9g (tol %.3g)", cases[t].what, (long long)i, cases[t].got[i],
                     cases[t].cpu[i], tol);
          compared++;
          if (t == 0 && fabs((double)go[i] - (double)fo[i]) > tol) moved++;
        }
    free(x), free(w), free(dout), free(co), free(cdi), free(cdw), free(go), free(gdi), free(gdw), free(fo);
  }
  printf(
      "emu: matmul bf16 vs CPU bf16 emulation: %lld outputs compared; %lld forward outputs moved beyond the "
      "tolerance by the bf16 rounding\n",
      (long long)compared, (long long)moved);
  FM_EXPECT(compared > 0);
  FM_EXPECT(moved > 0);
}

/* One plan per (precision, shape), made at the first call and reused; the
 * plan list and its text name each shape. */
FM_TEST(gemm_plans_pinned_per_shape) {
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans(NULL, 0), 0);
  const int64_t m = 5, n = 3, k = 4;
  float *A = matrix(m, k, m), *B = matrix(k, n, k), *C = f32(m * n);
  for (int rep = 0; rep < 3; rep++) {
    fm_simt_set_compute_bf16(0);
    fm_simt_gemm_cm(0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m);
    fm_simt_set_compute_bf16(1);
    fm_simt_gemm_cm(0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m);
    fm_simt_gemm_cm(1, 0, n, n, m, 1.0f, C, m, C, m, 0.0f, B, k); /* C^T C into B's storage (n x n, ld k) */
  }
  fm_simt_set_compute_bf16(0);
  FmGemmPlanInfo p[4];
  memset(p, 0, sizeof p);
  FM_REQUIRE(fm_simt_gemm_plans(p, 4) == 3);
  FM_EXPECT(p[0].bf16 == 0 && p[0].ta == 0 && p[0].tb == 0 && p[0].m == m && p[0].n == n && p[0].k == k);
  FM_EXPECT(p[0].lda == m && p[0].ldb == k && p[0].ldc == m && p[0].calls == 3);
  FM_EXPECT(p[0].algo_id >= 0 && p[0].algo_id < 24 && p[0].splitk == 1); /* the emulator's fake ids */
  FM_EXPECT(p[1].bf16 == 1 && p[1].m == m && p[1].calls == 3);
  FM_EXPECT(p[2].bf16 == 1 && p[2].ta == 1 && p[2].m == n && p[2].n == n && p[2].k == m && p[2].ldc == k);
  FM_EXPECT(p[0].workspace_fixed > 0 && p[0].workspace_fixed == p[2].workspace_fixed);
  const int64_t need = fm_simt_gemm_plans_text(NULL, 0);
  char full[2048], part[200];
  FM_REQUIRE(need > 0 && need < (int64_t)sizeof full);
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans_text(full, sizeof full), need);
  FM_EXPECT_EQ_INT((int64_t)strlen(full), need);
  printf("%s", full);
  FM_EXPECT(strstr(full, "gemm 0: fp32 NN m=5 n=3 k=4 lda=5 ldb=4 ldc=5 algo=") == full);
  FM_EXPECT(strstr(full, "\ngemm 1: bf16 NN m=5 n=3 k=4 ") != NULL);
  FM_EXPECT(strstr(full, "\ngemm 2: bf16 TN m=3 n=3 k=5 lda=5 ldb=5 ldc=4 ") != NULL);
  /* a short buffer gets whole lines only */
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans_text(part, sizeof part), need);
  const char *nl = strchr(full, '\n');
  FM_REQUIRE(nl && nl - full + 1 < (long)sizeof part);
  FM_EXPECT_EQ_INT((int64_t)strlen(part), (int64_t)(nl - full + 1));
  FM_EXPECT(strncmp(part, full, strlen(part)) == 0);
  free(A), free(B), free(C);
}

/* A checkpoint's record (gemm_plans_record: the device line, then the plan
 * lines) and a resume's pin (gemm_plans_pin): a recorded algorithm is used
 * for its shape even where this process's heuristic chooses another
 * (FMHPC_EMU_GEMM_HEURISTIC shifts it); an id the library does not offer, a
 * line that is not a plan and another device are reported, naming the
 * shape and what was chosen instead. */
FM_TEST(gemm_plans_record_and_pin) {
  const int64_t m = 5, n = 3, k = 4;
  float *A = matrix(m, k, m), *B = matrix(k, n, k), *C = f32(m * n);
  fm_simt_gemm_cm(0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m);
  char rec[2048], text[2048], report[4096];
  const int64_t need = fm_simt_gemm_plans_record(NULL, 0);
  FM_REQUIRE(need > 0 && need < (int64_t)sizeof rec);
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans_record(rec, sizeof rec), need);
  FM_EXPECT_EQ_INT((int64_t)strlen(rec), need);
  printf("%s", rec);
  const char *nl = strchr(rec, '\n');
  FM_REQUIRE(strncmp(rec, "device: SIMT emulator", 21) == 0 && nl && strncmp(nl + 1, "gemm 0: fp32 NN m=5 ", 20) == 0);
  FmGemmPlanInfo p[8];
  FM_REQUIRE(fm_simt_gemm_plans(p, 8) == 1);
  /* the heuristic, shifted, now chooses another algorithm for the new shape */
  setenv("FMHPC_EMU_GEMM_HEURISTIC", "7", 1);
  snprintf(text, sizeof text,
           "%.*s"
           "gemm 0: fp32 NN m=5 n=3 k=4 lda=5 ldb=4 ldc=5 algo=%lld tile=%lld stages=%lld splitk=1 reduction=0 "
           "swizzle=0 custom=0 workspace=0/33554432\n"
           "gemm 1: fp32 NT m=7 n=2 k=3 lda=7 ldb=2 ldc=7 algo=5 tile=3 stages=2 splitk=1 reduction=0 swizzle=0 "
           "custom=0 workspace=0/33554432\n"
           "gemm 2: bf16 NN m=7 n=2 k=3 lda=7 ldb=3 ldc=7 algo=99 tile=3 stages=2 splitk=1 reduction=0 swizzle=0 "
           "custom=0 workspace=0/33554432\n"
           "gemm 3: fp32 NN m=7 n=2 k=-3\n",
           (int)(nl - rec + 1), rec, (long long)p[0].algo_id, (long long)p[0].tile, (long long)p[0].stages);
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans_pin(text, report, sizeof report), 2);
  printf("report:\n%s", report);
  FM_REQUIRE(fm_simt_gemm_plans(p, 8) == 3);
  FM_EXPECT(p[1].tb == 1 && p[1].m == 7 && p[1].algo_id == 5 && p[1].tile == 3 && p[1].stages == 2);
  FM_EXPECT(p[2].bf16 == 1 && p[2].algo_id >= 0 && p[2].algo_id < 24);
  FM_EXPECT(strstr(report,
                   "GEMM bf16 NN m=7 n=2 k=3 lda=7 ldb=3 ldc=7: the checkpoint's plan (algo=99 tile=3 "
                   "stages=2 splitk=1 reduction=0 swizzle=0 custom=0) is not used: its algorithm id is not "
                   "offered by this cuBLASLt; chose algo=") != NULL);
  FM_EXPECT(strstr(report,
                   "the checkpoint's GEMM plans, line 5: not a plan line ('gemm 3: fp32 NN m=7 n=2 k=-3'): skipped") !=
            NULL);
  FM_EXPECT(strstr(report, "another device") == NULL);
  /* the pinned plan is the one used: a call of that shape runs with algo 5 */
  float *X = matrix(7, 3, 7), *Y = matrix(2, 3, 2), *Z = f32(7 * 2);
  fm_simt_gemm_cm(0, 1, 7, 2, 3, 1.0f, X, 7, Y, 2, 0.0f, Z, 7);
  FM_REQUIRE(fm_simt_gemm_plans(p, 8) == 3);
  FM_EXPECT(p[1].algo_id == 5 && p[1].calls == 1);
  /* recorded on another device: the heuristic chooses, and each shape where it differs is named */
  char other[2048];
  snprintf(other, sizeof other,
           "device: NVIDIA H100 80GB HBM3 (sm_90), CUDA runtime 12040, cuBLASLt 120402\n"
           "gemm 0: fp32 TN m=4 n=4 k=4 lda=4 ldb=4 ldc=4 algo=%d tile=0 stages=0 splitk=1 reduction=0 swizzle=0 "
           "custom=0 workspace=0/33554432\n",
           1);
  FM_EXPECT_EQ_INT(fm_simt_gemm_plans_pin(other, report, sizeof report), 0);
  printf("report:\n%s", report);
  FM_EXPECT(strstr(report,
                   "were chosen on another device or toolkit (NVIDIA H100 80GB HBM3 (sm_90), CUDA runtime "
                   "12040, cuBLASLt 120402; this run: SIMT emulator") != NULL);
  FM_EXPECT(strstr(report, "GEMM fp32 TN m=4 n=4 k=4 lda=4 ldb=4 ldc=4: the checkpoint's plan (algo=1 tile=0 ") !=
            NULL);
  FM_EXPECT(strstr(report, "is not used: another device or toolkit; chose algo=") != NULL);
  unsetenv("FMHPC_EMU_GEMM_HEURISTIC");
  free(A), free(B), free(C), free(X), free(Y), free(Z);
}

/* The classifier + cross-entropy in bf16 mode (its three GEMMs go through
 * the wrapper: x, w and dlogits rounded, as the CPU rounds them) against the
 * CPU's bf16 emulation: the loss within 1e-5 relative; dx and dw within 2e-3
 * of the largest |element| (a dlogit that the two sides compute one fp32
 * rounding apart may round to neighbouring bf16 values, 2^-8 apart). And the
 * bf16 loss must differ from the fp32 loss by more than that tolerance. */
double fm_simt_xent_fwd_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                            const float *weights, int64_t N, int64_t C, int64_t V, float *scratch);
static int64_t near_max(const float *got, const float *want, int64_t n, double rel, const char *what) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)want[i]));
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)got[i] - (double)want[i]);
    worst = fmax(worst, d);
    if (!(d <= rel * mx) && bad++ < 3)
      FM__FAIL("%s[%lld]: cuda %.9g cpu %.9g (tol %.3g)", what, (long long)i, got[i], want[i], rel * mx);
  }
  printf("emu: %s: largest difference %.3g of the largest |element| %.3g (%lld elements)\n", what, worst, mx,
         (long long)n);
  return bad;
}

FM_TEST(xent_bf16_vs_cpu_bf16) {
  const int64_t N = 9, C = 16, V = 4500; /* three vocab chunks */
  float *x = matrix(N * C, 1, N * C), *w = matrix(V * C, 1, V * C), *wt = f32(N);
  int32_t *tg = fm_xcalloc((size_t)N, sizeof *tg);
  for (int64_t n = 0; n < N; n++) {
    tg[n] = (int32_t)uniform(0, (double)V);
    wt[n] = 1.0f / (float)N;
  }
  const int64_t S = fm_cpu_xent_scratch(N, V);
  float *sc = f32(S), *cdx = f32(N * C), *cdw = f32(V * C), *gdx = f32(N * C), *gdw = f32(V * C);
  const double f32loss = fm_cpu_xent_fwd_bwd(NULL, NULL, x, w, tg, wt, N, C, V, sc);
  fm_cpu_set_compute_bf16(1);
  const double closs = fm_cpu_xent_fwd_bwd(cdx, cdw, x, w, tg, wt, N, C, V, sc);
  fm_cpu_set_compute_bf16(0);
  fm_simt_set_compute_bf16(1);
  const double gloss = fm_simt_xent_fwd_bwd(gdx, gdw, x, w, tg, wt, N, C, V, sc);
  fm_simt_set_compute_bf16(0);
  printf("emu: xent loss fp32 %.9g, bf16 cpu %.9g, bf16 cuda(emulated) %.9g\n", f32loss, closs, gloss);
  FM_EXPECT(fabs(gloss - closs) <= 1e-5 * fabs(closs));
  FM_EXPECT(fabs(f32loss - closs) > 1e-5 * fabs(closs));
  FM_EXPECT_EQ_INT(near_max(gdx, cdx, N * C, 2e-3, "xent bf16 dx"), 0);
  FM_EXPECT_EQ_INT(near_max(gdw, cdw, V * C, 2e-3, "xent bf16 dw"), 0);
  free(x), free(w), free(wt), free(tg), free(sc), free(cdx), free(cdw), free(gdx), free(gdw);
}
