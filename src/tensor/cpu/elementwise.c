/* cpu/elementwise.c: the CPU elementwise ops, each a loop over the shared
 * body in ../elementwise.h (the readable specification the CUDA kernels are
 * tested against). Loops are OpenMP-parallel above a size where threads pay
 * off; every element is independent, so the result does not depend on the
 * thread count. No `simd` clause on loops that call expf: a vector math
 * library could change expf's bits between vectorised and scalar elements
 * (GELU and SwiGLU use ../elementwise.h's polynomial exp, and are `simd`).
 * AdamW's loop is `simd`: its sqrt and divisions are IEEE operations,
 * correctly rounded in vector and scalar form alike (this file is built with
 * -fno-math-errno so that sqrtf is the instruction, not a libm call). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math") /* if-convert the selects (as attention.c); no result bit changes */
#endif
#include <math.h>

#include "fmhpc/tensor.h"

#include "../elementwise.h"
#include "cpu_ops.h"

/* Below this many elements a parallel region costs more than it saves. */
#define FM_CPU_OMP_MIN ((int64_t)1 << 15)

/* GELU and SwiGLU: their sigmoid (../elementwise.h) is branch-free and calls
 * no library, so these loops vectorise; each lane does the same IEEE
 * operations, so vector and scalar elements, and the clones (FM_CPU_CLONES,
 * cpu_ops.h), give the same bits. */
/* Elements per task: the range functions below run one chunk each. */
#define FM_CPU_EW_CHUNK ((int64_t)1 << 14)

FM_CPU_CLONES static void gelu_fwd_range(float *out, const float *x, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) out[i] = fm_gelu_fwd(x[i]);
}

FM_CPU_CLONES static void gelu_bwd_range(float *dx, const float *dout, const float *x, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) dx[i] = fm_gelu_bwd(dout[i], x[i]);
}

FM_CPU_CLONES static void swiglu_fwd_range(float *out, const float *gate, const float *up, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) out[i] = fm_swiglu_fwd(gate[i], up[i]);
}

FM_CPU_CLONES static void swiglu_bwd_range(float *dgate, float *dup, const float *dout, const float *gate,
                                           const float *up, int64_t i0, int64_t i1) {
  /* dgate or dup may be an input (the same index): each lane loads before it stores */
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    float dg, du;
    fm_swiglu_bwd(&dg, &du, dout[i], gate[i], up[i]);
    dgate[i] = dg;
    dup[i] = du;
  }
}

#define FM_CPU_EW_CHUNKS(n) (((n) + FM_CPU_EW_CHUNK - 1) / FM_CPU_EW_CHUNK)
#define FM_CPU_EW_END(n, j) ((j)*FM_CPU_EW_CHUNK + FM_CPU_EW_CHUNK < (n) ? (j)*FM_CPU_EW_CHUNK + FM_CPU_EW_CHUNK : (n))

void fm_cpu_gelu_fwd(float *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t j = 0; j < FM_CPU_EW_CHUNKS(n); j++) gelu_fwd_range(out, x, j * FM_CPU_EW_CHUNK, FM_CPU_EW_END(n, j));
}

void fm_cpu_gelu_bwd(float *dx, const float *dout, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t j = 0; j < FM_CPU_EW_CHUNKS(n); j++)
    gelu_bwd_range(dx, dout, x, j * FM_CPU_EW_CHUNK, FM_CPU_EW_END(n, j));
}

void fm_cpu_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t j = 0; j < FM_CPU_EW_CHUNKS(n); j++)
    swiglu_fwd_range(out, gate, up, j * FM_CPU_EW_CHUNK, FM_CPU_EW_END(n, j));
}

void fm_cpu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t j = 0; j < FM_CPU_EW_CHUNKS(n); j++)
    swiglu_bwd_range(dgate, dup, dout, gate, up, j * FM_CPU_EW_CHUNK, FM_CPU_EW_END(n, j));
}

void fm_cpu_add(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = fm_add2(a[i], b[i]);
}

void fm_cpu_scale(float *x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) x[i] = fm_scale1(x[i], s);
}

void fm_cpu_cast_f32_to_bf16(uint16_t *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = fm_f32_to_bf16(x[i]);
}

void fm_cpu_cast_bf16_to_f32(float *out, const uint16_t *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = fm_bf16_to_f32(x[i]);
}

void fm_cpu_round_bf16(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) x[i] = fm_round_bf16(x[i]);
}

void fm_cpu_scale_f64(float *x, double s, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) x[i] = fm_scale_f64_1(x[i], s);
}

/* One block per iteration, each summed in index order: any thread count, the same bits. */
void fm_cpu_block_sumsq(double *out, const float *x, int64_t n, int64_t block) {
  const int64_t nb = block > 0 ? (n + block - 1) / block : 0;
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t j = 0; j < nb; j++) {
    const int64_t a = j * block, b = a + block < n ? a + block : n;
    double acc = 0.0;
    for (int64_t i = a; i < b; i++) acc = fm_sumsq_add(acc, x[i]);
    out[j] = acc;
  }
}

void fm_cpu_adamw_update(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float bc1, float bc2) {
#pragma omp parallel for simd schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) fm_adamw(&w[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

void fm_cpu_lion_update(float *w, float *m, const float *g, int64_t n, float lr, float b1, float omb1, float b2,
                        float omb2, float wd) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) fm_lion(&w[i], &m[i], g[i], lr, b1, omb1, b2, omb2, wd);
}

void fm_cpu_sophia_update(float *w, float *m, const float *h, const float *g, int64_t n, float lr, float b1, float omb1,
                          float bc1, float gamma, float eps, float wd) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) fm_sophia(&w[i], &m[i], h[i], g[i], lr, b1, omb1, bc1, gamma, eps, wd);
}

void fm_cpu_sophia_hessian_update(float *h, const float *ghat, int64_t n, float B, float b2, float omb2) {
#pragma omp parallel for schedule(static) if (n >= FM_CPU_OMP_MIN)
  for (int64_t i = 0; i < n; i++) fm_sophia_hessian(&h[i], ghat[i], B, b2, omb2);
}
