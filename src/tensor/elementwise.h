/* elementwise.h: the one body of every elementwise op, shared by the CPU loops
 * (src/tensor/cpu/elementwise.c) and the CUDA kernels (src/tensor/cuda/
 * elementwise.cu): GELU (tanh approximation) and SwiGLU forward/backward,
 * bf16 <-> fp32, the optimizer updates (AdamW, Lion, Sophia-G), residual add,
 * scale. Private to src/tensor/; the
 * public interface is FmBackend (include/fmhpc/backend.h).
 *
 * Bits. Every + - * / and sqrt goes through fm_addf/fm_subf/fm_mulf/fm_divf/
 * fm_sqrtf. On the host they are the plain operators (the CPU build uses
 * -ffp-contract=off, so nothing is fused into an FMA); on the device they are
 * the explicitly rounded intrinsics (__fadd_rn, __fmul_rn, ...), which nvcc
 * never contracts into FMAs and which stay IEEE round-to-nearest even under
 * --use_fast_math. So an op built only from these (add, scale, casts, AdamW)
 * gives the same bits on CPU and GPU. GELU and SwiGLU too: their exp is
 * fm_expf_neg below, built from the same operations, not a library's expf
 * (glibc's and CUDA's differ, and glibc's does not vectorise). */
#ifndef FMHPC_TENSOR_ELEMENTWISE_H
#define FMHPC_TENSOR_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FM_HD __host__ __device__
#else
#define FM_HD
#endif

/* ---- correctly rounded arithmetic, never contracted ------------------------ */
FM_HD static inline float fm_addf(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FM_HD static inline float fm_subf(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FM_HD static inline float fm_mulf(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FM_HD static inline float fm_divf(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FM_HD static inline float fm_sqrtf(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return sqrtf(a); /* IEEE 754 requires sqrt to be correctly rounded */
#endif
}

/* ---- bit views ----------------------------------------------------------- */
FM_HD static inline uint32_t fm_f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}
FM_HD static inline float fm_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/* ---- bf16 ---------------------------------------------------------------- */
/* fp32 -> bf16, round to nearest, ties to even, as torch's c10::BFloat16
 * round_to_nearest_even: add 0x7FFF plus the lowest kept bit, then truncate.
 * Finite values past the largest bf16 round to Inf (correct RNE, not a
 * saturation); Inf stays Inf; every NaN becomes the canonical quiet NaN 0x7FC0
 * (the carry could otherwise turn a NaN payload into Inf). */
FM_HD static inline uint16_t fm_f32_to_bf16(float x) {
  uint32_t u = fm_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)0x7FC0u;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
/* bf16 -> fp32 is exact: bf16 is the top half of an fp32. */
FM_HD static inline float fm_bf16_to_f32(uint16_t h) { return fm_bits_f32((uint32_t)h << 16); }
FM_HD static inline float fm_round_bf16(float x) { return fm_bf16_to_f32(fm_f32_to_bf16(x)); }

/* ---- sigmoid, for GELU and SiLU ------------------------------------------- */
/* s = sigmoid(z) and *ds = s*(1-s) from one exp of -|z|. Written this way, no
 * exp overflows, and neither s for z << 0 nor 1-s for z >> 0 is formed by
 * cancellation: 0.5*(1+tanh(u)) loses every digit of gelu(x) once tanh(u)
 * rounds to -1 (about x < -5.1); a = exp(-|z|) in (0, 1] keeps them. */
/* exp(x) for x <= 0, down to the subnormal results: Cody-Waite reduction
 * x = k ln2 + r, |r| <= ln2/2 (k by the 1.5 * 2^23 rounding trick), Cephes'
 * degree-6 expf polynomial (about 1 ulp), and 2^k applied as two exact
 * power-of-two factors 2^(k/2) 2^(k - k/2), so only the last product rounds
 * (once, into the subnormal range when k < -126). Returns 0 below -104
 * (exp(-104) rounds to 0), NaN for NaN; valid up to x = 88. Only
 * correctly rounded + and * (and no branch): the same bits on the host, in
 * vectorised CPU loops and on the device, unlike the libraries' expf. */
FM_HD static inline float fm_expf_neg(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc >= -104.0f ? xc : -104.0f;
  const float kf = fm_subf(fm_addf(fm_mulf(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
  float r = fm_subf(xc, fm_mulf(kf, 0.693359375f)); /* ln2 high part: the product is exact */
  r = fm_addf(r, fm_mulf(kf, 2.12194440e-4f));      /* ln2 low part */
  float p = 1.9875691500e-4f;
  p = fm_addf(fm_mulf(p, r), 1.3981999507e-3f);
  p = fm_addf(fm_mulf(p, r), 8.3334519073e-3f);
  p = fm_addf(fm_mulf(p, r), 4.1665795894e-2f);
  p = fm_addf(fm_mulf(p, r), 1.6666665459e-1f);
  p = fm_addf(fm_mulf(p, r), 5.0000001201e-1f);
  const float y = fm_addf(fm_addf(fm_mulf(fm_mulf(p, r), r), r), 1.0f);
  const int32_t k = (int32_t)kf, k1 = k / 2, k2 = k - k1; /* k in [-150, 127]: both halves normal */
  const float e = fm_mulf(fm_mulf(y, fm_bits_f32((uint32_t)(k1 + 127) << 23)), fm_bits_f32((uint32_t)(k2 + 127) << 23));
  return x != x ? x : (x < -104.0f ? 0.0f : e);
}

/* a = exp(-|z|), r = 1/(1+a): s = r (z >= 0) or a r (z < 0), s(1-s) = (a r) r.
 * One division, no branch: the CPU loops vectorise it. */
FM_HD static inline float fm_sigmoid_d(float z, float *ds) {
  const float a = fm_expf_neg(-fabsf(z));
  const float r = fm_divf(1.0f, fm_addf(1.0f, a));
  const float ar = fm_mulf(a, r);
  *ds = fm_mulf(ar, r);
  return z >= 0.0f ? r : ar; /* NaN z: a is NaN, so are r and s */
}

/* ---- GELU, tanh approximation (GPT-2; torch gelu(approximate='tanh')) ------ */
/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * Since 0.5 (1 + tanh(u)) = sigmoid(2u), we compute x * sigmoid(2u): the same
 * function, better conditioned for x < 0 (see fm_sigmoid_d). */
#define FM_GELU_2BETA  1.5957691216057308f /* 2 sqrt(2/pi) */
#define FM_GELU_KAPPA  0.044715f
#define FM_GELU_3KAPPA 0.134145f

FM_HD static inline float fm_gelu_z(float x) { /* z = 2u */
  float x3 = fm_mulf(fm_mulf(x, x), x);
  return fm_mulf(FM_GELU_2BETA, fm_addf(x, fm_mulf(FM_GELU_KAPPA, x3)));
}
FM_HD static inline float fm_gelu_fwd(float x) {
  float sd;
  return fm_mulf(x, fm_sigmoid_d(fm_gelu_z(x), &sd));
}
/* d gelu / dx = s + x s(1-s) dz/dx, dz/dx = 2 sqrt(2/pi) (1 + 3*0.044715 x^2).
 * Where s(1-s) underflows to 0 the second term is exactly 0; skipping it avoids
 * 0 * Inf = NaN when x^2 overflows (|x| > 1.8e19). */
FM_HD static inline float fm_gelu_bwd(float dout, float x) {
  float sd;
  float s = fm_sigmoid_d(fm_gelu_z(x), &sd);
  float dz = fm_mulf(FM_GELU_2BETA, fm_addf(1.0f, fm_mulf(FM_GELU_3KAPPA, fm_mulf(x, x))));
  float g = sd == 0.0f ? s : fm_addf(s, fm_mulf(fm_mulf(x, sd), dz));
  return fm_mulf(dout, g);
}

/* ---- SwiGLU: out = silu(gate) * up, silu(g) = g sigmoid(g) (Llama MLP) ---- */
FM_HD static inline float fm_swiglu_fwd(float gate, float up) {
  float sd;
  return fm_mulf(fm_mulf(gate, fm_sigmoid_d(gate, &sd)), up);
}
/* dgate = dout * up * silu'(g), silu'(g) = s + g s(1-s); dup = dout * silu(g). */
FM_HD static inline void fm_swiglu_bwd(float *dgate, float *dup, float dout, float gate, float up) {
  float sd;
  float s = fm_sigmoid_d(gate, &sd);
  float dsilu = fm_addf(s, fm_mulf(gate, sd));
  *dgate = fm_mulf(fm_mulf(dout, up), dsilu);
  *dup = fm_mulf(dout, fm_mulf(gate, s));
}

/* ---- residual add, scale ------------------------------------------------- */
FM_HD static inline float fm_add2(float a, float b) { return fm_addf(a, b); }
FM_HD static inline float fm_scale1(float x, float s) { return fm_mulf(x, s); }

/* The clip: x * s in double, rounded once to float (reduce.c's clip of the
 * shard, train.c), and one gradient square in double (exact: a float's
 * square fits a double's 53 bits), for the norm's block sums. */
FM_HD static inline float fm_scale_f64_1(float x, double s) {
#ifdef __CUDA_ARCH__
  return __double2float_rn(__dmul_rn((double)x, s));
#else
  return (float)((double)x * s);
#endif
}
FM_HD static inline double fm_sumsq_add(double acc, float x) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(acc, __dmul_rn((double)x, (double)x));
#else
  return acc + (double)x * (double)x;
#endif
}

/* ---- AdamW (Loshchilov & Hutter; torch.optim.AdamW's update) --------------- */
/* bc1 = 1 - beta1^t, bc2 = 1 - beta2^t are computed once per step by the
 * caller (in double, then rounded), so every element and both backends see
 * the same values. Weight decay uses w before this step's update, decoupled
 * from the moment estimates. */
FM_HD static inline void fm_adamw(float *w, float *m, float *v, float g, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float bc1, float bc2) {
  float mi = fm_addf(fm_mulf(beta1, *m), fm_mulf(fm_subf(1.0f, beta1), g));
  float vi = fm_addf(fm_mulf(beta2, *v), fm_mulf(fm_subf(1.0f, beta2), fm_mulf(g, g)));
  float mhat = fm_divf(mi, bc1);
  float vhat = fm_divf(vi, bc2);
  float step = fm_addf(fm_divf(mhat, fm_addf(fm_sqrtf(vhat), eps)), fm_mulf(weight_decay, *w));
  *w = fm_subf(*w, fm_mulf(lr, step));
  *m = mi;
  *v = vi;
}

/* ---- Lion (Chen et al. 2023, Program 1) ------------------------------------- */
/* Update with the interpolation c, then move the momentum with beta2. omb1 =
 * 1 - b1 and omb2 = 1 - b2 come from the caller (double, rounded once). */
FM_HD static inline void fm_lion(float *w, float *m, float g, float lr, float b1, float omb1, float b2, float omb2,
                                 float wd) {
  float c = fm_addf(fm_mulf(b1, *m), fm_mulf(omb1, g));
  float s = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c); /* torch.sign: 0 -> 0, NaN -> NaN */
  *w = fm_subf(*w, fm_mulf(lr, fm_addf(s, fm_mulf(wd, *w))));
  *m = fm_addf(fm_mulf(b2, *m), fm_mulf(omb2, g));
}

/* ---- Sophia-G (Liu et al. 2023, Levanter's form; optim.h) ------------------- */
/* bc1 = 1 - beta1^t, or 1 without bias correction. The comparisons keep NaN
 * (a NaN ratio is not clipped to +-1). */
FM_HD static inline void fm_sophia(float *w, float *m, float h, float g, float lr, float b1, float omb1, float bc1,
                                   float gamma, float eps, float wd) {
  float mi = fm_addf(fm_mulf(b1, *m), fm_mulf(omb1, g));
  float gh = fm_mulf(gamma, h);
  float den = gh > eps ? gh : eps;
  float u = fm_divf(fm_divf(mi, bc1), den);
  u = u > 1.0f ? 1.0f : (u < -1.0f ? -1.0f : u);
  *w = fm_subf(*w, fm_mulf(lr, fm_addf(u, fm_mulf(wd, *w))));
  *m = mi;
}

/* Levanter's update_moment of B*ghat^2 (Algorithm 2, line 6). */
FM_HD static inline void fm_sophia_hessian(float *h, float ghat, float B, float b2, float omb2) {
  *h = fm_addf(fm_mulf(b2, *h), fm_mulf(omb2, fm_mulf(fm_mulf(ghat, ghat), B)));
}

/* ---- the exact reduction's block scales (dist/reduce.c; the block_scales op) -- */
/* A block's largest gradient may grow 4096x between steps before the step is
 * redone. Embedding rows make this necessary: which tokens a step holds
 * changes a block's maximum by 10-100x (measured on the nano GPT-2 over
 * linux-doc: 16x headroom redid 19 of 20 steps). The cost is 12 bits of the
 * ~58 the accumulator has below a block's maximum. */
enum { FM_RED_HEADROOM_BITS = 12, FM_RED_MAX_EXP = 120, FM_RED_MIN_EXP = -120 };

/* s such that amax * 2^HEADROOM_BITS * 2^s < limit: the largest power of two
 * that keeps a value 4096 times this block's previous maximum representable.
 * Integer and frexp only: the same s on the host and the device. */
FM_HD static inline int32_t fm_block_exponent(float amax, int64_t limit) {
  int e = 1;                                /* an all-zero block (unused rows): scale as for a maximum of 1 */
  if (amax > 0.0f) frexp((double)amax, &e); /* amax < 2^e */
  int lim_bits = 0;
  while (((int64_t)1 << (lim_bits + 1)) <= limit) lim_bits++; /* limit = 2^lim_bits */
  int s = lim_bits - e - FM_RED_HEADROOM_BITS;
  if (s > FM_RED_MAX_EXP) s = FM_RED_MAX_EXP;
  if (s < FM_RED_MIN_EXP) s = FM_RED_MIN_EXP;
  return s;
}

#endif
