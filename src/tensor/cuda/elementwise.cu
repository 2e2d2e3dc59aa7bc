/* cuda/elementwise.cu: the CUDA elementwise ops: one grid-stride kernel per op
 * over the body the CPU uses (../elementwise.h), and its host wrapper
 * fm_cuda_<op> with the CPU op's parameters. Kernels run on the backend's
 * stream; each launch is checked. The bodies use explicitly rounded
 * intrinsics (__fadd_rn, __fmul_rn, ...), so add, scale, the bf16 casts and
 * the optimizer updates (AdamW, Lion, Sophia) give the CPU's bits; GELU and SwiGLU differ only through expf (see
 * tests/kernels/test_cuda_ops.c for the tolerance). No atomics: every thread
 * writes only its own elements. */
#include "cuda_common.cuh"

#include "../elementwise.h"

/* ---- kernels ------------------------------------------------------------- */
static __global__ void fm__gelu_fwd_kernel(float *out, const float *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) out[i] = fm_gelu_fwd(x[i]);
}
static __global__ void fm__gelu_bwd_kernel(float *dx, const float *dout, const float *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) dx[i] = fm_gelu_bwd(dout[i], x[i]);
}
static __global__ void fm__swiglu_fwd_kernel(float *out, const float *gate, const float *up, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) out[i] = fm_swiglu_fwd(gate[i], up[i]);
}
static __global__ void fm__swiglu_bwd_kernel(float *dgate, float *dup, const float *dout, const float *gate,
                                             const float *up, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) {
    float dg, du;
    fm_swiglu_bwd(&dg, &du, dout[i], gate[i], up[i]);
    dgate[i] = dg; /* through locals: dgate or dup may alias an input */
    dup[i] = du;
  }
}
static __global__ void fm__add_kernel(float *out, const float *a, const float *b, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) out[i] = fm_add2(a[i], b[i]);
}
static __global__ void fm__scale_kernel(float *x, float s, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) x[i] = fm_scale1(x[i], s);
}
static __global__ void fm__cast_f32_to_bf16_kernel(uint16_t *out, const float *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) out[i] = fm_f32_to_bf16(x[i]);
}
static __global__ void fm__cast_bf16_to_f32_kernel(float *out, const uint16_t *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) out[i] = fm_bf16_to_f32(x[i]);
}
static __global__ void fm__round_bf16_kernel(float *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) x[i] = fm_round_bf16(x[i]);
}
static __global__ void fm__adamw_kernel(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1,
                                        float beta2, float eps, float weight_decay, float bc1, float bc2) {
  FM__CUDA_FOR_EACH(i, n) fm_adamw(&w[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

static __global__ void fm__lion_kernel(float *w, float *m, const float *g, int64_t n, float lr, float b1, float omb1,
                                       float b2, float omb2, float wd) {
  FM__CUDA_FOR_EACH(i, n) fm_lion(&w[i], &m[i], g[i], lr, b1, omb1, b2, omb2, wd);
}
static __global__ void fm__sophia_kernel(float *w, float *m, const float *h, const float *g, int64_t n, float lr,
                                         float b1, float omb1, float bc1, float gamma, float eps, float wd) {
  FM__CUDA_FOR_EACH(i, n) fm_sophia(&w[i], &m[i], h[i], g[i], lr, b1, omb1, bc1, gamma, eps, wd);
}
static __global__ void fm__sophia_hessian_kernel(float *h, const float *ghat, int64_t n, float B, float b2,
                                                 float omb2) {
  FM__CUDA_FOR_EACH(i, n) fm_sophia_hessian(&h[i], ghat[i], B, b2, omb2);
}
static __global__ void fm__scale_f64_kernel(float *x, double s, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) x[i] = fm_scale_f64_1(x[i], s);
}
/* One thread per block of the norm, in index order (the CPU's partials,
 * bitwise); a block is 2^16 elements, so a 1.2B-parameter shard is ~18k
 * threads of sequential double adds. */
static __global__ void fm__block_sumsq_kernel(double *out, const float *x, int64_t n, int64_t block, int64_t nb) {
  FM__CUDA_FOR_EACH(j, nb) {
    const int64_t a = j * block, b = a + block < n ? a + block : n;
    double acc = 0.0;
    for (int64_t i = a; i < b; i++) acc = fm_sumsq_add(acc, x[i]);
    out[j] = acc;
  }
}

/* ---- host wrappers --------------------------------------------------------- */
/* n <= 0 launches nothing (a zero-block grid is a launch error). */
#define FM__LAUNCH(kernel, n, ...)                                       \
  do {                                                                   \
    if ((n) <= 0) return;                                                \
    FM_LAUNCH(kernel, fm__cuda_grid(n), FM__CUDA_BLOCK, 0, __VA_ARGS__); \
  } while (0)

extern "C" void FM_CUDA_OP(gelu_fwd)(float *out, const float *x, int64_t n) {
  FM__LAUNCH(fm__gelu_fwd_kernel, n, out, x, n);
}
extern "C" void FM_CUDA_OP(gelu_bwd)(float *dx, const float *dout, const float *x, int64_t n) {
  FM__LAUNCH(fm__gelu_bwd_kernel, n, dx, dout, x, n);
}
extern "C" void FM_CUDA_OP(swiglu_fwd)(float *out, const float *gate, const float *up, int64_t n) {
  FM__LAUNCH(fm__swiglu_fwd_kernel, n, out, gate, up, n);
}
extern "C" void FM_CUDA_OP(swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                       int64_t n) {
  FM__LAUNCH(fm__swiglu_bwd_kernel, n, dgate, dup, dout, gate, up, n);
}
extern "C" void FM_CUDA_OP(add)(float *out, const float *a, const float *b, int64_t n) {
  FM__LAUNCH(fm__add_kernel, n, out, a, b, n);
}
extern "C" void FM_CUDA_OP(scale)(float *x, float s, int64_t n) { FM__LAUNCH(fm__scale_kernel, n, x, s, n); }
extern "C" void FM_CUDA_OP(cast_f32_to_bf16)(uint16_t *out, const float *x, int64_t n) {
  FM__LAUNCH(fm__cast_f32_to_bf16_kernel, n, out, x, n);
}
extern "C" void FM_CUDA_OP(cast_bf16_to_f32)(float *out, const uint16_t *x, int64_t n) {
  FM__LAUNCH(fm__cast_bf16_to_f32_kernel, n, out, x, n);
}
extern "C" void FM_CUDA_OP(round_bf16)(float *x, int64_t n) { FM__LAUNCH(fm__round_bf16_kernel, n, x, n); }
extern "C" void FM_CUDA_OP(scale_f64)(float *x, double s, int64_t n) { FM__LAUNCH(fm__scale_f64_kernel, n, x, s, n); }
extern "C" void FM_CUDA_OP(block_sumsq)(double *out, const float *x, int64_t n, int64_t block) {
  const int64_t nb = block > 0 ? (n + block - 1) / block : 0;
  FM__LAUNCH(fm__block_sumsq_kernel, nb, out, x, n, block, nb);
}
extern "C" void FM_CUDA_OP(adamw_update)(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1,
                                         float beta2, float eps, float weight_decay, float bc1, float bc2) {
  FM__LAUNCH(fm__adamw_kernel, n, w, m, v, g, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}
extern "C" void FM_CUDA_OP(lion_update)(float *w, float *m, const float *g, int64_t n, float lr, float b1, float omb1,
                                        float b2, float omb2, float wd) {
  FM__LAUNCH(fm__lion_kernel, n, w, m, g, n, lr, b1, omb1, b2, omb2, wd);
}
extern "C" void FM_CUDA_OP(sophia_update)(float *w, float *m, const float *h, const float *g, int64_t n, float lr,
                                          float b1, float omb1, float bc1, float gamma, float eps, float wd) {
  FM__LAUNCH(fm__sophia_kernel, n, w, m, h, g, n, lr, b1, omb1, bc1, gamma, eps, wd);
}
extern "C" void FM_CUDA_OP(sophia_hessian_update)(float *h, const float *ghat, int64_t n, float B, float b2,
                                                  float omb2) {
  FM__LAUNCH(fm__sophia_hessian_kernel, n, h, ghat, n, B, b2, omb2);
}
