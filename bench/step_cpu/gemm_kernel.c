/* gemm_kernel.c: the CPU step's remaining lever (issue 15), measured before
 * it is built. src/tensor/cpu/matmul.c makes one single-threaded OpenBLAS call
 * per fixed 256 x 768 tile of C, so the thread count cannot change the bits;
 * each call packs its A and B panels again, which is 8-10% of the GPT-2
 * step's samples (bench/step_cpu/profile.sh). A GEMM of fmhpc's own could pack
 * each panel once per product. This program measures whether a plain
 * micro-kernel keeps OpenBLAS's rate when it does so. One thread, on one
 * product of the step (default: GPT-2 124M's qkv forward at B=4, T=256: x
 * (1024 x 768) times W^T, W 2304 x 768). It times:
 *   - OpenBLAS as matmul.c calls it: one cblas_sgemm per 256 x 768 tile;
 *   - a 6 x 16 AVX2 FMA micro-kernel (C intrinsics) on panels packed once
 *     for the product (8 x 8 AVX transposes), K in blocks of KC, with its
 *     packing timed apart;
 *   - where the CPU has AVX-512, the same sums with one zmm a row, and
 *     whether its bits equal the AVX2 kernel's. Each output is one FMA chain
 *     over k inside a K block (from zero), and the blocks' sums are added to C
 *     in block order, whatever the vector width, so they should be equal:
 *     the CPU bits would no longer depend on the instruction set;
 *   - each result's largest error against float64 sums, on every 16th row.
 * Measured on a 2-vCPU Zen 5 (OPENBLAS_CORETYPE=Haswell, idle, taskset -c 0;
 * products 1024 x {768, 2304, 3072} x 768 and 1024 x 768 x 3072): OpenBLAS's
 * tiles 101-104 GFLOP/s, packing included; the AVX2 kernel 101-103 without
 * its packing, 0.95-0.97x OpenBLAS with it (2.8-4.7% of its time); OpenBLAS
 * alone on one warm 256 x 768 tile runs 108. So on AVX2 a plain kernel does
 * not pay for packing once: it would need OpenBLAS's kernel rate first. The
 * AVX-512 kernel: 141-145 GFLOP/s (six accumulators, so FMA latency bounds
 * it), bits equal to the AVX2 kernel's in every case tried.
 * A measurement, not fmhpc's code. Not run in CI. Build and run:
 *   cc -O3 -std=gnu11 -mavx2 -mfma -Iinclude bench/step_cpu/gemm_kernel.c -lopenblas -lm -o /tmp/gemm_kernel
 *   OPENBLAS_CORETYPE=Haswell taskset -c 0 /tmp/gemm_kernel [M N K [KC]]
 * (M, N, K: C is M x N, N a multiple of 16; KC: the K block, default 256). */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/rng.h"

#include "../bench_util.h"

extern void openblas_set_num_threads(int);

enum { MR = 6, NR = 16, TILE_M = 256, TILE_N = 768, REPS = 7 };

/* c[MR x NR] = the K-step FMA chains of Ap (kc x MR) and Bp (kc x NR), from zero */
static void kern_avx2(int kc, const float *restrict Ap, const float *restrict Bp, float c[MR][NR]) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < kc; k++, Ap += MR, Bp += NR) {
    const __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
    for (int r = 0; r < MR; r++) { /* unrolled by the compiler: 12 accumulators, 2 loads, 1 broadcast */
      const __m256 a = _mm256_broadcast_ss(Ap + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; r++) _mm256_storeu_ps(c[r], acc[r][0]), _mm256_storeu_ps(c[r] + 8, acc[r][1]);
}

__attribute__((target("avx512f"))) static void kern_avx512(int kc, const float *restrict Ap, const float *restrict Bp,
                                                           float c[MR][NR]) {
  __m512 acc[MR];
  for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
  for (int k = 0; k < kc; k++, Ap += MR, Bp += NR) {
    const __m512 b = _mm512_load_ps(Bp);
    for (int r = 0; r < MR; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(Ap[r]), b, acc[r]);
  }
  for (int r = 0; r < MR; r++) _mm512_storeu_ps(c[r], acc[r]);
}

typedef void (*Kern)(int, const float *, const float *, float[MR][NR]);

typedef struct Packed {
  int M, N, K, KC, mp, np;
  float *A, *B; /* per K block: mp slivers of kc x MR, np slivers of kc x NR */
} Packed;

/* r[0..8) = the 8 x 8 block of rows r transposed (columns become rows) */
static void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2)
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/* rows src[0..nrows) (row-major, stride ld, the rest zero) at k0..k0+kc into
 * dst (kc x width, width 6 or 16): 8 x 8 transposes, 8 k at a time. dst has 8
 * floats of slack at its end (a width-6 store writes 8). */
static void pack_rows(const float *src, int ld, int nrows, int width, int k0, int kc, float *dst) {
  int k = 0;
  for (; k + 8 <= kc; k += 8)
    for (int g = 0; g < width; g += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++)
        r[i] =
            g + i < nrows && g + i < width ? _mm256_loadu_ps(src + (size_t)(g + i) * ld + k0 + k) : _mm256_setzero_ps();
      transpose8(r);
      for (int q = 0; q < 8; q++) _mm256_storeu_ps(dst + (size_t)(k + q) * width + g, r[q]);
    }
  for (; k < kc; k++)
    for (int c = 0; c < width; c++) dst[(size_t)k * width + c] = c < nrows ? src[(size_t)c * ld + k0 + k] : 0.0f;
}

/* x (M x K, row-major) and W (N x K, row-major, the product's B^T) packed
 * once; A's last sliver padded with zero rows. */
static void pack(Packed *p, const float *x, const float *w) {
  for (int k0 = 0; k0 < p->K; k0 += p->KC) {
    const int kc = p->K - k0 < p->KC ? p->K - k0 : p->KC;
    float *a = p->A + (size_t)k0 * p->mp * MR, *b = p->B + (size_t)k0 * p->np * NR;
    for (int i = 0; i < p->mp; i++)
      pack_rows(x + (size_t)i * MR * p->K, p->K, p->M - i * MR < MR ? p->M - i * MR : MR, MR, k0, kc,
                a + (size_t)i * kc * MR);
    for (int j = 0; j < p->np; j++) pack_rows(w + (size_t)j * NR * p->K, p->K, NR, NR, k0, kc, b + (size_t)j * kc * NR);
  }
}

/* C = x W^T from the packed panels: each K block's chains added to C in block order */
static void own_gemm(const Packed *p, Kern kern, float *C) {
  memset(C, 0, sizeof(float) * (size_t)p->M * p->N);
  float c[MR][NR];
  for (int k0 = 0; k0 < p->K; k0 += p->KC) {
    const int kc = p->K - k0 < p->KC ? p->K - k0 : p->KC;
    const float *a = p->A + (size_t)k0 * p->mp * MR, *b = p->B + (size_t)k0 * p->np * NR;
    for (int j = 0; j < p->np; j++)
      for (int i = 0; i < p->mp; i++) {
        kern(kc, a + (size_t)i * kc * MR, b + (size_t)j * kc * NR, c);
        const int rows = p->M - i * MR < MR ? p->M - i * MR : MR;
        for (int r = 0; r < rows; r++) {
          float *o = C + (size_t)(i * MR + r) * p->N + j * NR;
          for (int q = 0; q < NR; q++) o[q] += c[r][q];
        }
      }
  }
}

/* OpenBLAS as src/tensor/cpu/matmul.c calls it: one call per fixed tile */
static void tiled_openblas(int M, int N, int K, const float *x, const float *w, float *C) {
  for (int m0 = 0; m0 < M; m0 += TILE_M)
    for (int n0 = 0; n0 < N; n0 += TILE_N) {
      const int mb = M - m0 < TILE_M ? M - m0 : TILE_M, nb = N - n0 < TILE_N ? N - n0 : TILE_N;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, nb, K, 1.0f, x + (size_t)m0 * K, K, w + (size_t)n0 * K,
                  K, 0.0f, C + (size_t)m0 * N + n0, N);
    }
}

/* the largest |C - float64 sums| over every 16th row */
static double max_err(int M, int N, int K, const float *x, const float *w, const float *C) {
  double e = 0.0;
  for (int i = 0; i < M; i += 16)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) s += (double)x[(size_t)i * K + k] * (double)w[(size_t)j * K + k];
      e = fmax(e, fabs(s - (double)C[(size_t)i * N + j]));
    }
  return e;
}

int main(int argc, char **argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 1024, N = argc > 2 ? atoi(argv[2]) : 2304,
            K = argc > 3 ? atoi(argv[3]) : 768;
  const int KC = argc > 4 ? atoi(argv[4]) : 256;
  if (M < 1 || N < NR || N % NR || K < 1 || KC < 1)
    return fprintf(stderr, "usage: gemm_kernel [M N K [KC]] (N a multiple of %d)\n", NR), 2;
  openblas_set_num_threads(1);
  float *x = malloc(sizeof(float) * (size_t)M * K), *w = malloc(sizeof(float) * (size_t)N * K);
  float *c_blas = malloc(sizeof(float) * (size_t)M * N), *c_own = malloc(sizeof(float) * (size_t)M * N);
  float *c_512 = malloc(sizeof(float) * (size_t)M * N);
  for (size_t i = 0; i < (size_t)M * K; i++) x[i] = fm_rng_uniform(7, 0, 0, i) - 0.5f; /* in [-0.5, 0.5) */
  for (size_t i = 0; i < (size_t)N * K; i++) w[i] = fm_rng_uniform(7, 1, 0, i) - 0.5f;
  Packed p = {M, N, K, KC, (M + MR - 1) / MR, N / NR, NULL, NULL};
  /* + the packer's slack; aligned_alloc's size a multiple of the alignment */
  p.A = aligned_alloc(64, sizeof(float) * (((size_t)p.mp * MR * K + 64 + 15) / 16 * 16));
  p.B = aligned_alloc(64, sizeof(float) * (size_t)p.np * NR * K);
  const int has512 = __builtin_cpu_supports("avx512f");
  double t_blas = 1e30, t_pack = 1e30, t_own = 1e30, t_512 = 1e30;
  for (int rep = 0; rep < REPS; rep++) { /* best of REPS, each method in turn; the first rep touches the pages */
    double t = now();
    tiled_openblas(M, N, K, x, w, c_blas);
    t_blas = fmin(t_blas, now() - t);
    t = now();
    pack(&p, x, w);
    t_pack = fmin(t_pack, now() - t);
    t = now();
    own_gemm(&p, kern_avx2, c_own);
    t_own = fmin(t_own, now() - t);
    if (has512) {
      t = now();
      own_gemm(&p, kern_avx512, c_512);
      t_512 = fmin(t_512, now() - t);
    }
  }
  const double gf = 2.0 * M * N * K / 1e9;
  printf("product %d x %d x %d (C = x W^T), one thread, best of %d\n", M, N, K, REPS);
  printf("OpenBLAS, one call per %d x %d tile (matmul.c): %8.2f ms  %6.1f GFLOP/s\n", TILE_M, TILE_N, 1e3 * t_blas,
         gf / t_blas);
  printf(
      "own 6x16 AVX2 kernel, KC %d:               %8.2f ms  %6.1f GFLOP/s (its panels packed once: + %.2f ms, "
      "%.1f%%)\n",
      KC, 1e3 * t_own, gf / t_own, 1e3 * t_pack, 100 * t_pack / (t_own + t_pack));
  printf("  own with its packing against OpenBLAS's tiles: %.2fx the speed\n", t_blas / (t_own + t_pack));
  if (has512)
    printf("own, one zmm a row (AVX-512):              %8.2f ms  %6.1f GFLOP/s; bits equal to the AVX2 kernel's: %s\n",
           1e3 * t_512, gf / t_512, memcmp(c_own, c_512, sizeof(float) * (size_t)M * N) ? "NO" : "yes");
  printf("largest error against float64 sums (every 16th row): OpenBLAS %.3g, own %.3g\n",
         max_err(M, N, K, x, w, c_blas), max_err(M, N, K, x, w, c_own));
  free(x), free(w), free(c_blas), free(c_own), free(c_512), free(p.A), free(p.B);
  return 0;
}
