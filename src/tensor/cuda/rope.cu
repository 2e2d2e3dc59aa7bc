/* cuda/rope.cu: rotary position embedding in place, forward and backward,
 * the CUDA twin of src/tensor/cpu/rope.c (HF rotate_half layout: pairs
 * (i, i + HS/2) of each head).
 *
 * cos/sin come from a table built on the host by the CPU op's own formula
 * (../rope_table.h: double angle, rounded once to float) and uploaded on the
 * first call for a (HS, theta), covering positions [0, FM__ROPE_P); so the
 * rotation uses the CPU's bits and the result is the CPU op's, bitwise. A
 * position past the table (longer than any deck here) takes the angle
 * p * inv_freq[i] with the host's double inv_freq, the same double product as
 * the CPU, and the device's double cos/sin (within 2 ulp in double, so the
 * rounded float almost always equal, else one float ulp off). Positions are
 * not checked for being negative here (the CPU op checks; the host makes them).
 * The table is kept for the process: one allocation and upload, not per step. */
#include "cuda_common.cuh"

#include "../elementwise.h"
#include "../rope_table.h"

#define FM__ROPE_P 8192 /* positions in the table */

static struct {
  float *cs;    /* (2, FM__ROPE_P, half): cos, then sin */
  double *invf; /* (half) */
  int64_t half;
  float theta;
} fm__rope_tab;

static void fm__rope_prepare(int64_t half, float theta) {
  if (fm__rope_tab.cs && fm__rope_tab.half == half && fm__rope_tab.theta == theta) return;
  fm__dev_free(fm__rope_tab.cs);
  fm__dev_free(fm__rope_tab.invf);
  const int64_t n = (int64_t)FM__ROPE_P * half;
  float *cs = (float *)fm_xmalloc((size_t)(2 * n) * sizeof(float));
  double *invf = (double *)fm_xmalloc((size_t)half * sizeof(double));
  for (int64_t p = 0; p < FM__ROPE_P; p++)
    for (int64_t i = 0; i < half; i++) fm_rope_cos_sin(p, i, half, theta, &cs[p * half + i], &cs[n + p * half + i]);
  for (int64_t i = 0; i < half; i++) invf[i] = fm_rope_inv_freq(i, half, theta);
  fm__rope_tab.cs = (float *)fm__dev_alloc(2 * n * (int64_t)sizeof(float));
  fm__rope_tab.invf = (double *)fm__dev_alloc(half * (int64_t)sizeof(double));
  fm__dev_upload(fm__rope_tab.cs, cs, 2 * n * (int64_t)sizeof(float));
  fm__dev_upload(fm__rope_tab.invf, invf, half * (int64_t)sizeof(double));
  free(cs);
  free(invf);
  fm__rope_tab.half = half;
  fm__rope_tab.theta = theta;
}

/* One thread per (row n, pair i), over the H heads of the row. */
static __global__ void fm__rope_kernel(float *x, const int32_t *pos, const float *cs, const double *invf, int64_t N,
                                       int64_t ld, int64_t H, int64_t half, float dir) {
  FM__CUDA_FOR_EACH(k, N * half) {
    const int64_t n = k / half, i = k - n * half;
    const int64_t p = pos[n];
    float c, s;
    if (p < FM__ROPE_P) {
      c = cs[p * half + i];
      s = cs[(int64_t)FM__ROPE_P * half + p * half + i];
    } else {
      const double a = fm__dmul((double)p, invf[i]);
      c = (float)cos(a);
      s = (float)sin(a);
    }
    s = fm_mulf(dir, s);
    for (int64_t h = 0; h < H; h++) {
      float *x1 = x + n * ld + h * 2 * half, *x2 = x1 + half;
      const float a = x1[i], b = x2[i];
      x1[i] = fm_subf(fm_mulf(a, c), fm_mulf(b, s));
      x2[i] = fm_addf(fm_mulf(b, c), fm_mulf(a, s));
    }
  }
}

static void fm__rope_apply(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta,
                           float dir) {
  if (HS % 2 != 0) fm_abort_one(1, "rope: head size %lld is odd", (long long)HS);
  const int64_t half = HS / 2;
  if (N <= 0 || H <= 0 || half <= 0) return;
  fm__rope_prepare(half, theta);
  FM_LAUNCH(fm__rope_kernel, fm__cuda_grid(N * half), FM__CUDA_BLOCK, 0, x, pos, fm__rope_tab.cs, fm__rope_tab.invf, N,
            ld, H, half, dir);
}

extern "C" void FM_CUDA_OP(rope_fwd)(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS,
                                     float theta) {
  fm__rope_apply(x, pos, N, ld, H, HS, theta, 1.0f);
}

/* The rotation is orthogonal: its Jacobian's transpose is the rotation by -a. */
extern "C" void FM_CUDA_OP(rope_bwd)(float *dx, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS,
                                     float theta) {
  fm__rope_apply(dx, pos, N, ld, H, HS, theta, -1.0f);
}
