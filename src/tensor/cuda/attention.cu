/* cuda/attention.cu: causal attention with GQA and the document mask, forward
 * and a deterministic backward: the CUDA twins of src/tensor/cpu/attention.c
 * with its signatures (strides ldq/ldkv, lse (B, NH, T), dq/dk/dv
 * accumulated).
 *
 * A first, simple version: one warp per row, fp32 CUDA cores, no tensor
 * cores. Forward: warp (b, h, t) walks the visible keys in order with an
 * online softmax (scores from a lane-partial dot product and a fixed xor
 * butterfly). Backward, without atomics: warp (b, h, t) owns dq's row and
 * walks its keys; warp (b, g, s) owns dk's and dv's rows of key s and walks
 * the queries t >= s of the NH/NKV query heads of kv head g, in order. Scores
 * are recomputed from lse (P = exp(S - lse)), D = rowsum(dout * out) per
 * query. So every output element has one writer and one summation order:
 * the same bits run to run.
 * When the backend computes in bf16 (fm_cuda_attention_set_bf16, set by the
 * CUDA set_compute_bf16 op) and the shape fits (head size 64 or 128, even
 * row strides), attention_flash.cu's tensor-core kernels run instead: they
 * round q, k, v, dout to bf16 as the bf16 GEMMs round their inputs; in fp32
 * compute this fp32 version keeps the CPU op's precision. It is O(T^2 HS)
 * work per head like the flash one, but without data reuse.
 * Decode (generation): one warp per (b, h) walks the cache in tiles of 32
 * keys (a key per lane: its score by a sequential fp32 dot product), the
 * same online softmax, and O += P V with each p broadcast by a shuffle; fp32
 * at every head size (generation runs in fp32 compute).
 * Against the CPU op (blockwise sgemm, its own expf): a tolerance, stated in
 * tests/kernels/emu/test_emu_ops.c. HS <= 256 (FM__ATT_HSMAX). */
#include "cuda_common.cuh"

#include "../elementwise.h"

#define FM__ATT_WARPS 4
#define FM__ATT_HSMAX 256 /* 8 dims a lane */

typedef struct FmAttShape {
  int64_t ldq, ldkv, B, T, NH, NKV, HS;
  float scale;
} FmAttShape;

static __device__ __forceinline__ float fm__warp_sum_f(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fm_addf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* sum_d a[d] b[d] over HS: lane partials (d = lane, lane + 32, ...), butterfly. */
static __device__ __forceinline__ float fm__dot(const float *a, const float *b, int64_t HS) {
  float p = 0.0f;
  for (int64_t d = threadIdx.x & 31; d < HS; d += 32) p = fm_addf(p, fm_mulf(a[d], b[d]));
  return fm__warp_sum_f(p);
}
static __device__ __forceinline__ int fm__visible(const int32_t *seg, int64_t b, int64_t T, int64_t t, int64_t s) {
  return s <= t && (!seg || seg[b * T + s] == seg[b * T + t]);
}
/* The global warp index, and whether it is past `rows`. */
static __device__ __forceinline__ int64_t fm__att_warp(void) {
  return (int64_t)blockIdx.x * FM__ATT_WARPS + (threadIdx.x >> 5);
}

/* ---- forward ------------------------------------------------------------------ */
static __global__ void fm__attention_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                                                const int32_t *seg, FmAttShape a) {
  const int64_t row = fm__att_warp(); /* (b, h, t) */
  if (row >= a.B * a.NH * a.T) return;
  const int64_t t = row % a.T, h = (row / a.T) % a.NH, b = row / (a.T * a.NH), g = h / (a.NH / a.NKV);
  const int lane = threadIdx.x & 31;
  const float *qr = q + (b * a.T + t) * a.ldq + h * a.HS;
  float acc[FM__ATT_HSMAX / 32];
  for (int i = 0; i < FM__ATT_HSMAX / 32; i++) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = 0; s <= t; s++) {
    if (!fm__visible(seg, b, a.T, t, s)) continue;
    const float *kr = k + (b * a.T + s) * a.ldkv + g * a.HS, *vr = v + (b * a.T + s) * a.ldkv + g * a.HS;
    const float sc = fm_mulf(fm__dot(qr, kr, a.HS), a.scale);
    const float mn = sc > m ? sc : m;
    const float corr = expf(fm_subf(m, mn)), p = expf(fm_subf(sc, mn)); /* exp(-inf) = 0 at the first key */
    l = fm_addf(fm_mulf(l, corr), p);
    for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) acc[i] = fm_addf(fm_mulf(acc[i], corr), fm_mulf(p, vr[d]));
    m = mn;
  }
  float *o = out + (b * a.T + t) * a.NH * a.HS + h * a.HS;
  for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) o[d] = fm_divf(acc[i], l);
  if (lane == 0) lse[(b * a.NH + h) * a.T + t] = (float)fm__dadd((double)m, log((double)l));
}

/* ---- backward: dq ----------------------------------------------------------------- */
static __global__ void fm__attention_bwd_dq_kernel(float *dq, const float *dout, const float *out, const float *lse,
                                                   const float *q, const float *k, const float *v, const int32_t *seg,
                                                   FmAttShape a) {
  const int64_t row = fm__att_warp();
  if (row >= a.B * a.NH * a.T) return;
  const int64_t t = row % a.T, h = (row / a.T) % a.NH, b = row / (a.T * a.NH), g = h / (a.NH / a.NKV);
  const int lane = threadIdx.x & 31;
  const int64_t no = (b * a.T + t) * a.NH * a.HS + h * a.HS;
  const float *qr = q + (b * a.T + t) * a.ldq + h * a.HS;
  const float D = fm__dot(dout + no, out + no, a.HS), L = lse[(b * a.NH + h) * a.T + t];
  float acc[FM__ATT_HSMAX / 32];
  for (int i = 0; i < FM__ATT_HSMAX / 32; i++) acc[i] = 0.0f;
  for (int64_t s = 0; s <= t; s++) {
    if (!fm__visible(seg, b, a.T, t, s)) continue;
    const float *kr = k + (b * a.T + s) * a.ldkv + g * a.HS, *vr = v + (b * a.T + s) * a.ldkv + g * a.HS;
    const float p = expf(fm_subf(fm_mulf(fm__dot(qr, kr, a.HS), a.scale), L));
    const float ds = fm_mulf(p, fm_subf(fm__dot(dout + no, vr, a.HS), D));
    for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) acc[i] = fm_addf(acc[i], fm_mulf(ds, kr[d]));
  }
  float *dr = dq + (b * a.T + t) * a.ldq + h * a.HS;
  for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) dr[d] = fm_addf(dr[d], fm_mulf(a.scale, acc[i]));
}

/* ---- backward: dk, dv ---------------------------------------------------------------- */
static __global__ void fm__attention_bwd_dkv_kernel(float *dk, float *dv, const float *dout, const float *out,
                                                    const float *lse, const float *q, const float *k, const float *v,
                                                    const int32_t *seg, FmAttShape a) {
  const int64_t row = fm__att_warp(); /* (b, g, s) */
  if (row >= a.B * a.NKV * a.T) return;
  const int64_t s = row % a.T, g = (row / a.T) % a.NKV, b = row / (a.T * a.NKV), rep = a.NH / a.NKV;
  const int lane = threadIdx.x & 31;
  const float *kr = k + (b * a.T + s) * a.ldkv + g * a.HS, *vr = v + (b * a.T + s) * a.ldkv + g * a.HS;
  float ak[FM__ATT_HSMAX / 32], av[FM__ATT_HSMAX / 32];
  for (int i = 0; i < FM__ATT_HSMAX / 32; i++) ak[i] = av[i] = 0.0f;
  for (int64_t h = g * rep; h < (g + 1) * rep; h++)
    for (int64_t t = s; t < a.T; t++) {
      if (!fm__visible(seg, b, a.T, t, s)) continue;
      const int64_t no = (b * a.T + t) * a.NH * a.HS + h * a.HS;
      const float *qr = q + (b * a.T + t) * a.ldq + h * a.HS;
      const float L = lse[(b * a.NH + h) * a.T + t];
      const float p = expf(fm_subf(fm_mulf(fm__dot(qr, kr, a.HS), a.scale), L));
      const float D = fm__dot(dout + no, out + no, a.HS);
      const float ds = fm_mulf(p, fm_subf(fm__dot(dout + no, vr, a.HS), D));
      for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) {
        av[i] = fm_addf(av[i], fm_mulf(p, dout[no + d]));
        ak[i] = fm_addf(ak[i], fm_mulf(ds, qr[d]));
      }
    }
  float *dkr = dk ? dk + (b * a.T + s) * a.ldkv + g * a.HS : NULL;
  float *dvr = dv ? dv + (b * a.T + s) * a.ldkv + g * a.HS : NULL;
  for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) {
    if (dkr) dkr[d] = fm_addf(dkr[d], fm_mulf(a.scale, ak[i]));
    if (dvr) dvr[d] = fm_addf(dvr[d], av[i]);
  }
}

/* ---- decode ---------------------------------------------------------------------- */
static __global__ void fm__attention_decode_kernel(float *out, const float *q, const float *kc, const float *vc,
                                                   const int32_t *pos, int64_t Tc, FmAttShape a) {
  const int64_t row = fm__att_warp(); /* (b, h) */
  if (row >= a.B * a.NH) return;
  const int64_t b = row / a.NH, h = row % a.NH, g = h / (a.NH / a.NKV), t = pos[b];
  const int lane = threadIdx.x & 31;
  const float *qr = q + b * a.ldq + h * a.HS;
  const float *K = kc + b * Tc * a.ldkv + g * a.HS, *V = vc + b * Tc * a.ldkv + g * a.HS;
  float acc[FM__ATT_HSMAX / 32];
  for (int i = 0; i < FM__ATT_HSMAX / 32; i++) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t s0 = 0; s0 <= t; s0 += 32) {
    const int64_t s = s0 + lane;
    float sc = -INFINITY;
    if (s <= t) {
      const float *kr = K + s * a.ldkv;
      float d = 0.0f;
      for (int64_t j = 0; j < a.HS; j++) d = fm_addf(d, fm_mulf(qr[j], kr[j]));
      sc = fm_mulf(d, a.scale);
    }
    float mx = sc;
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float mn = fmaxf(m, mx); /* finite: key s0 <= t is visible */
    const float corr = expf(fm_subf(m, mn)), p = s <= t ? expf(fm_subf(sc, mn)) : 0.0f;
    l = fm_addf(fm_mulf(l, corr), fm__warp_sum_f(p));
    m = mn;
    const int nv = (int)(t - s0 + 1 < 32 ? t - s0 + 1 : 32);
    for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) acc[i] = fm_mulf(acc[i], corr);
    for (int j = 0; j < nv; j++) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float *vr = V + (s0 + j) * a.ldkv;
      for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) acc[i] = fm_addf(acc[i], fm_mulf(pj, vr[d]));
    }
  }
  float *o = out + b * a.NH * a.HS + h * a.HS;
  for (int64_t d = lane, i = 0; d < a.HS; d += 32, i++) o[d] = fm_divf(acc[i], l);
}

/* ---- host wrappers ---------------------------------------------------------------- */
static FmAttShape fm__att_shape(int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  if (NKV < 1 || NH % NKV != 0)
    fm_abort_one(1, "attention: NH = %lld is not a multiple of NKV = %lld", (long long)NH, (long long)NKV);
  if (HS < 1 || HS > FM__ATT_HSMAX)
    fm_abort_one(1, "attention (CUDA): head size %lld outside [1, %d]", (long long)HS, FM__ATT_HSMAX);
  const FmAttShape a = {ldq, ldkv, B, T, NH, NKV, HS, (float)(1.0 / sqrt((double)HS))};
  return a;
}
static unsigned fm__att_blocks(int64_t rows) { return (unsigned)((rows + FM__ATT_WARPS - 1) / FM__ATT_WARPS); }

/* The bf16 compute switch (the CUDA set_compute_bf16 op sets it): 0 = fp32. */
static int fm__att_bf16 = 0;
extern "C" void FM_CUDA_OP(attention_set_bf16)(int on) { fm__att_bf16 = on != 0; }
/* attention_flash.cu */
extern "C" int FM_CUDA_OP(attention_flash_fits)(const float *q, const float *k, const float *v, int64_t ldq,
                                                int64_t ldkv, int64_t HS);
extern "C" void FM_CUDA_OP(attention_flash_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS);
extern "C" void FM_CUDA_OP(attention_flash_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                                const float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS);
static int fm__att_flash(const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv, int64_t HS) {
  return fm__att_bf16 && FM_CUDA_OP(attention_flash_fits)(q, k, v, ldq, ldkv, HS);
}

extern "C" void FM_CUDA_OP(attention_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
                                          int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                          int64_t NH, int64_t NKV, int64_t HS) {
  if (fm__att_flash(q, k, v, ldq, ldkv, HS)) {
    FM_CUDA_OP(attention_flash_fwd)(out, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS);
    return;
  }
  const FmAttShape a = fm__att_shape(ldq, ldkv, B, T, NH, NKV, HS);
  if (B * T * NH <= 0) return;
  FM_LAUNCH(fm__attention_fwd_kernel, fm__att_blocks(B * NH * T), 32 * FM__ATT_WARPS, 0, out, lse, q, k, v, seg, a);
}

extern "C" void FM_CUDA_OP(attention_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                          const float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                                          int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t HS) {
  if (fm__att_flash(q, k, v, ldq, ldkv, HS)) {
    FM_CUDA_OP(attention_flash_bwd)(dq, dk, dv, dout, out, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS);
    return;
  }
  const FmAttShape a = fm__att_shape(ldq, ldkv, B, T, NH, NKV, HS);
  if (B * T * NH <= 0) return;
  if (dk || dv)
    FM_LAUNCH(fm__attention_bwd_dkv_kernel, fm__att_blocks(B * NKV * T), 32 * FM__ATT_WARPS, 0, dk, dv, dout, out, lse,
              q, k, v, seg, a);
  if (dq)
    FM_LAUNCH(fm__attention_bwd_dq_kernel, fm__att_blocks(B * NH * T), 32 * FM__ATT_WARPS, 0, dq, dout, out, lse, q, k,
              v, seg, a);
}

extern "C" void FM_CUDA_OP(attention_decode)(float *out, const float *q, const float *kc, const float *vc, int64_t ldq,
                                             int64_t ldkv, const int32_t *pos, int64_t B, int64_t Tc, int64_t NH,
                                             int64_t NKV, int64_t HS) {
  const FmAttShape a = fm__att_shape(ldq, ldkv, B, 1, NH, NKV, HS);
  if (B * NH <= 0) return;
  /* pos is device memory here, so its range [0, Tc) is checked by the
   * caller on its host copy (model_run.c, before writing the cache row). */
  FM_LAUNCH(fm__attention_decode_kernel, fm__att_blocks(B * NH), 32 * FM__ATT_WARPS, 0, out, q, kc, vc, pos, Tc, a);
}
