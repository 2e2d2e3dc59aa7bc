/* bench/ops/bench_ops.c: times the CPU model ops on GPT-2 124M shapes
 * (B=4, T=1024, C=768, NH=12, V=50257) and prints GFLOP/s next to one
 * whole-matrix OpenBLAS sgemm with all threads (the peer the tiled,
 * deterministic GEMM gives up bits-stability against). Not run in CI.
 *   cmake --build build && cc -O2 -fopenmp -Iinclude bench/ops/bench_ops.c \
 *     build/libfmhpc_lib.a $(pkg-config --libs openblas) -lm -o /tmp/bench_ops
 *   OMP_NUM_THREADS=2 /tmp/bench_ops [B T] */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "fmhpc/tensor.h"
#include "../bench_util.h"

static float *randn(int64_t n) {
  float *x = fm_cpu_alloc(n * (int64_t)sizeof(float));
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = (float)((double)(s >> 11) * 0x1p-53 - 0.5);
  }
  return x;
}
#define TIME(label, flops, stmt)                                                     \
  do {                                                                               \
    stmt;                                                                            \
    double t0 = now();                                                               \
    int reps = 0;                                                                    \
    do {                                                                             \
      stmt;                                                                          \
      reps++;                                                                        \
    } while (now() - t0 < 1.0);                                                      \
    double dt = (now() - t0) / reps;                                                 \
    printf("%-40s %9.2f ms  %7.1f GFLOP/s\n", label, 1e3 * dt, (flops) / dt * 1e-9); \
  } while (0)

int main(int argc, char **argv) {
  const int64_t B = argc > 2 ? atoll(argv[1]) : 4, T = argc > 2 ? atoll(argv[2]) : 1024;
  const int64_t C = 768, NH = 12, HS = 64, V = 50257, N = B * T;
  printf("%s\nthreads %d, B=%lld T=%lld\n", fm_cpu_blas_info(), omp_get_max_threads(), (long long)B, (long long)T);
  float *x = randn(N * C), *w = randn(3 * C * C), *bias = randn(3 * C), *out = randn(N * 3 * C);
  float *dx = randn(N * C), *dw = randn(3 * C * C), *db = randn(3 * C);
  const double mm = 2.0 * (double)N * C * 3 * C;
  TIME("matmul_fwd qkv (N,768)->(N,2304)", mm, fm_cpu_matmul_fwd(out, x, w, bias, N, C, 3 * C));
  TIME("matmul_bwd qkv", 2 * mm, fm_cpu_matmul_bwd(dx, dw, db, out, x, w, N, C, 3 * C));
  openblas_set_num_threads(omp_get_max_threads());
  TIME("peer: one OpenBLAS sgemm, all threads", mm,
       cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)(3 * C), (int)C, 1.0f, x, (int)C, w, (int)C,
                   0.0f, out, (int)(3 * C)));
  openblas_set_num_threads(1);
  float *lse = randn(B * NH * T), *ao = randn(N * C), *dao = randn(N * C), *dqkv = randn(N * 3 * C);
  const double af = 4.0 * (double)B * NH * T * T * HS / 2; /* causal: half of QK^T and PV */
  TIME("attention_fwd (fused qkv, causal)", af,
       fm_cpu_attention_fwd(ao, lse, out, out + C, out + 2 * C, 3 * C, 3 * C, NULL, B, T, NH, NH, HS));
  TIME("attention_bwd", 2.5 * af,
       fm_cpu_attention_bwd(dqkv, dqkv + C, dqkv + 2 * C, dao, ao, lse, out, out + C, out + 2 * C, 3 * C, 3 * C, NULL,
                            B, T, NH, NH, HS));
  float *wte = randn(V * C), *dwte = randn(V * C), *scratch = randn(fm_cpu_xent_scratch(N, V)), *wt = randn(N);
  int32_t *tg = malloc((size_t)N * sizeof(int32_t));
  for (int64_t n = 0; n < N; n++) tg[n] = (int32_t)((n * 7919) % V), wt[n] = 1.0f / (float)N;
  const double xf = 2.0 * (double)N * V * C;
  TIME("xent fwd only", xf, fm_cpu_xent_fwd_bwd(NULL, NULL, x, wte, tg, wt, N, C, V, scratch));
  TIME("xent fwd+bwd", 4 * xf, fm_cpu_xent_fwd_bwd(dx, dwte, x, wte, tg, wt, N, C, V, scratch));
  float *mean = randn(N), *rstd = randn(N), *lw = randn(C), *lb = randn(C);
  TIME("layernorm_fwd", 8.0 * N * C, fm_cpu_layernorm_fwd(ao, mean, rstd, x, lw, lb, N, C, 1e-5f));
  TIME("layernorm_bwd", 12.0 * N * C, fm_cpu_layernorm_bwd(dx, lw, lb, dao, x, lw, mean, rstd, N, C));
  return 0;
}
