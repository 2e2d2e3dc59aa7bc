/* test_cuda_bf16.c (label gpu): the bf16 cuBLASLt path on a real device
 * (set_compute_bf16(1): bf16 operands, fp32 accumulation, fp32 outputs)
 * against the CPU backend's bf16 emulation at GPT-2-small shapes, within
 * 2 K eps sum |a b| of the bf16-rounded operands; bitwise equal on a second
 * run (the plan is pinned); and the pinned plans listed with their cuBLASLt
 * algorithm. Skips (exit 77) without a device. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"

#ifdef FMHPC_HAVE_CUDA
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uni(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}
static float rbf16(float x) { /* round to nearest even, written from the format */
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&x, &u, 4);
  return x;
}
#endif

FM_TEST(bf16_matmul_vs_cpu_bf16_and_repeatable) {
#ifndef FMHPC_HAVE_CUDA
  fm_test_skip("no CUDA device: this build has no CUDA backend");
#else
  int st = 0;
  const FmBackend *g = fm_backend_get("cuda", &st);
  if (!g) fm_test_skip("no CUDA device (fm_backend_get(\"cuda\") failed)");
  const int64_t N = 1027, C = 768, OC = 2304;
  float *x = malloc((size_t)(N * C) * 4), *w = malloc((size_t)(OC * C) * 4), *dout = malloc((size_t)(N * OC) * 4);
  for (int64_t i = 0; i < N * C; i++) x[i] = uni();
  for (int64_t i = 0; i < OC * C; i++) w[i] = uni();
  for (int64_t i = 0; i < N * OC; i++) dout[i] = uni();
  float *co = calloc((size_t)(N * OC), 4), *cdi = calloc((size_t)(N * C), 4), *cdw = calloc((size_t)(OC * C), 4);
  fm_cpu_set_compute_bf16(1);
  fm_cpu_matmul_fwd(co, x, w, NULL, N, C, OC);
  fm_cpu_matmul_bwd(cdi, cdw, NULL, dout, x, w, N, C, OC);
  fm_cpu_set_compute_bf16(0);
  float *dx = g->alloc(N * C * 4), *dw = g->alloc(OC * C * 4), *dd = g->alloc(N * OC * 4);
  float *go = g->alloc(N * OC * 4), *gdi = g->alloc(N * C * 4), *gdw = g->alloc(OC * C * 4);
  g->copy_to_device(dx, x, N * C * 4);
  g->copy_to_device(dw, w, OC * C * 4);
  g->copy_to_device(dd, dout, N * OC * 4);
  float *h[2][3];
  const int64_t len[3] = {N * OC, N * C, OC * C};
  g->set_compute_bf16(1);
  for (int run = 0; run < 2; run++) {
    g->memset(gdi, 0, N * C * 4);
    g->memset(gdw, 0, OC * C * 4);
    g->matmul_fwd(go, dx, dw, NULL, N, C, OC);
    g->matmul_bwd(gdi, gdw, NULL, dd, dx, dw, N, C, OC);
    float *dev[3] = {go, gdi, gdw};
    for (int j = 0; j < 3; j++) {
      h[run][j] = malloc((size_t)len[j] * 4);
      g->copy_to_host(h[run][j], dev[j], len[j] * 4);
    }
  }
  g->set_compute_bf16(0);
  for (int j = 0; j < 3; j++) FM_EXPECT(memcmp(h[0][j], h[1][j], (size_t)len[j] * 4) == 0);
  /* forward: per-element bound; backward: the bound with sum |a b| <= K (|x|, |w| <= 1) */
  int64_t bad = 0, cmp = 0;
  double worst = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = 0;
      for (int64_t c = 0; c < C; c++) s += fabs((double)rbf16(x[n * C + c]) * rbf16(w[o * C + c]));
      const double d = fabs((double)h[0][0][n * OC + o] - co[n * OC + o]);
      worst = fmax(worst, d / (s * FLT_EPSILON));
      if (!(d <= 2.0 * (double)C * FLT_EPSILON * s) && bad++ < 5)
        FM__FAIL("bf16 fwd [%lld,%lld]: cuda %.9g cpu %.9g", (long long)n, (long long)o, h[0][0][n * OC + o],
                 co[n * OC + o]);
      cmp++;
    }
  const float *cref[3] = {co, cdi, cdw};
  const int64_t K[3] = {C, OC, N};
  for (int j = 1; j < 3; j++)
    for (int64_t i = 0; i < len[j]; i++) {
      if (!(fabs((double)h[0][j][i] - cref[j][i]) <= 2.0 * (double)K[j] * (double)K[j] * FLT_EPSILON) && bad++ < 5)
        FM__FAIL("bf16 bwd %d [%lld]: cuda %.9g cpu %.9g", j, (long long)i, h[0][j][i], cref[j][i]);
      cmp++;
    }
  printf("bf16 GEMM on the device: %lld outputs compared, forward worst |cuda - cpu| = %.3g eps sum|ab|\n",
         (long long)cmp, worst);
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT(cmp == len[0] + len[1] + len[2]);
  FmGemmPlanInfo p[8];
  const int np = fm_cuda_gemm_plans(p, 8);
  char text[4096];
  fm_cuda_gemm_plans_text(text, sizeof text);
  printf("%s", text);
  FM_EXPECT_EQ_INT(np, 3); /* fwd, dinp, dw: one pinned plan each */
  for (int i = 0; i < np && i < 8; i++) {
    FM_EXPECT(p[i].bf16 == 1 && p[i].algo_id >= 0 && p[i].calls == 2);
    FM_EXPECT(p[i].workspace <= p[i].workspace_fixed);
  }
  g->free(dx), g->free(dw), g->free(dd), g->free(go), g->free(gdi), g->free(gdw);
  free(x), free(w), free(dout), free(co), free(cdi), free(cdw);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 3; j++) free(h[r][j]);
#endif
}
