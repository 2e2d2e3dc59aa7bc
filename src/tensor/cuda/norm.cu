/* cuda/norm.cu: LayerNorm and RMSNorm forward and backward, the CUDA twins of
 * src/tensor/cpu/norm.c with its signatures.
 *
 * Rows (forward; backward's dinp): one warp per row, and the row statistics
 * summed in the CPU op's order (FM_LANE_SUM there): eight lanes in double, lane
 * j over columns j, j+8, ... of the largest multiple of 8, the eight lane sums
 * then added in order, then the tail columns in order; every + * / sqrt
 * explicitly rounded (no FMA contraction). So mean, rstd, out and dinp are the
 * CPU op's bits (tests/kernels/emu checks this under the emulator).
 *
 * Weight gradients (dw, db: sums over N rows): a fixed grid of partials, no
 * atomics. A block owns FM__NW_COLS columns; its thread (c, g) sums in double
 * the rows g, g + FM__NW_GROUPS, ... of column c; thread (c, 0) then adds the
 * old dw[c] and the FM__NW_GROUPS partials in group order and rounds once.
 * The same bits for any launch, but another order than the CPU's single
 * running sum: the two double sums differ by ~N * 2^-53 relative, so the
 * rounded floats are equal or one ulp apart. */
#include "cuda_common.cuh"

#include "../elementwise.h"

#define FM__NORM_LANES 8  /* the CPU op's lane count */
#define FM__NORM_WARPS 4  /* rows (warps) per block */
#define FM__NW_COLS    32 /* weight-gradient columns per block */
#define FM__NW_GROUPS  16 /* row groups per block: 512 threads */

/* The CPU's FM_LANE_SUM of term(i) over a row of C, on every lane of the warp. */
template <class Term>
static __device__ double fm__lane_sum(int64_t C, Term term) {
  const int lane = threadIdx.x & 31;
  const int64_t cmain = C / FM__NORM_LANES * FM__NORM_LANES;
  double acc = 0.0;
  if (lane < FM__NORM_LANES)
    for (int64_t i = lane; i < cmain; i += FM__NORM_LANES) acc = fm__dadd(acc, term(i));
  double s = 0.0;
  for (int j = 0; j < FM__NORM_LANES; j++) s = fm__dadd(s, __shfl_sync(0xffffffffu, acc, j));
  for (int64_t i = cmain; i < C; i++) s = fm__dadd(s, term(i));
  return s;
}

/* (float)(1 / sqrt(v / C + eps)) in double, as the CPU. */
static __device__ __forceinline__ float fm__rstd(double v, int64_t C, float eps) {
  return (float)fm__ddiv(1.0, fm__dsqrt(fm__dadd(fm__ddiv(v, (double)C), (double)eps)));
}

static __device__ __forceinline__ int64_t fm__warp_row(void) {
  return (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}

/* ---- LayerNorm ------------------------------------------------------------- */
static __global__ void fm__layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                                const float *b, int64_t N, int64_t C, float eps) {
  const int64_t n = fm__warp_row();
  if (n >= N) return; /* whole warps: no barrier below */
  const float *x = inp + n * C;
  const double s = fm__lane_sum(C, [=](int64_t i) { return (double)x[i]; });
  const double mu = fm__ddiv(s, (double)C);
  const double v = fm__lane_sum(C, [=](int64_t i) {
    const double d = fm__dadd((double)x[i], -mu);
    return fm__dmul(d, d);
  });
  const float m = (float)mu, r = fm__rstd(v, C, eps);
  float *o = out + n * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) o[c] = fm_addf(fm_mulf(fm_mulf(fm_subf(x[c], m), r), w[c]), b[c]);
  if ((threadIdx.x & 31) == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

static __global__ void fm__layernorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                                     const float *mean, const float *rstd, int64_t N, int64_t C) {
  const int64_t n = fm__warp_row();
  if (n >= N) return;
  const float *x = inp + n * C, *d = dout + n * C;
  const float m = mean[n], r = rstd[n];
  const double sd = fm__lane_sum(C, [=](int64_t i) { return (double)fm_mulf(d[i], w[i]); });
  const double sdx =
      fm__lane_sum(C, [=](int64_t i) { return (double)fm_mulf(fm_mulf(d[i], w[i]), fm_mulf(fm_subf(x[i], m), r)); });
  const float md = (float)fm__ddiv(sd, (double)C), mdx = (float)fm__ddiv(sdx, (double)C);
  float *di = dinp + n * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) {
    const float xhat = fm_mulf(fm_subf(x[c], m), r);
    di[c] = fm_addf(di[c], fm_mulf(r, fm_subf(fm_subf(fm_mulf(d[c], w[c]), md), fm_mulf(xhat, mdx))));
  }
}

/* ---- RMSNorm --------------------------------------------------------------- */
static __global__ void fm__rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                                              int64_t C, float eps) {
  const int64_t n = fm__warp_row();
  if (n >= N) return;
  const float *x = inp + n * C;
  const double s = fm__lane_sum(C, [=](int64_t i) { return fm__dmul((double)x[i], (double)x[i]); });
  const float r = fm__rstd(s, C, eps);
  float *o = out + n * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) o[c] = fm_mulf(w[c], fm_mulf(x[c], r));
  if ((threadIdx.x & 31) == 0) rstd[n] = r;
}

static __global__ void fm__rmsnorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                                   const float *rstd, int64_t N, int64_t C) {
  const int64_t n = fm__warp_row();
  if (n >= N) return;
  const float *x = inp + n * C, *d = dout + n * C;
  const float r = rstd[n];
  const double sdx = fm__lane_sum(C, [=](int64_t i) { return (double)fm_mulf(fm_mulf(d[i], w[i]), fm_mulf(x[i], r)); });
  const float mdx = (float)fm__ddiv(sdx, (double)C);
  float *di = dinp + n * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32)
    di[c] = fm_addf(di[c], fm_mulf(r, fm_subf(fm_mulf(d[c], w[c]), fm_mulf(fm_mulf(x[c], r), mdx))));
}

/* ---- weight gradients: dw += sum_n dout * xhat, db += sum_n dout ------------- */
/* mean NULL: RMSNorm's xhat = x * rstd. Block (FM__NW_COLS, FM__NW_GROUPS). */
static __global__ void fm__norm_dweights_kernel(float *dw, float *db, const float *dout, const float *inp,
                                                const float *mean, const float *rstd, int64_t N, int64_t C) {
  __shared__ double pw[FM__NW_GROUPS][FM__NW_COLS], pb[FM__NW_GROUPS][FM__NW_COLS];
  const int tc = threadIdx.x, g = threadIdx.y;
  const int64_t c = (int64_t)blockIdx.x * FM__NW_COLS + tc;
  double aw = 0.0, ab = 0.0;
  if (c < C)
    for (int64_t n = g; n < N; n += FM__NW_GROUPS) {
      const float x = inp[n * C + c], d = dout[n * C + c], r = rstd[n];
      const float xhat = mean ? fm_mulf(fm_subf(x, mean[n]), r) : fm_mulf(x, r);
      aw = fm__dadd(aw, (double)fm_mulf(d, xhat));
      ab = fm__dadd(ab, (double)d);
    }
  pw[g][tc] = aw;
  pb[g][tc] = ab;
  __syncthreads();
  if (g == 0 && c < C) {
    double sw = dw ? (double)dw[c] : 0.0, sb = db ? (double)db[c] : 0.0;
    for (int k = 0; k < FM__NW_GROUPS; k++) {
      sw = fm__dadd(sw, pw[k][tc]);
      sb = fm__dadd(sb, pb[k][tc]);
    }
    if (dw) dw[c] = (float)sw;
    if (db) db[c] = (float)sb;
  }
}

/* ---- host wrappers ----------------------------------------------------------- */
static unsigned fm__row_blocks(int64_t N) { return (unsigned)((N + FM__NORM_WARPS - 1) / FM__NORM_WARPS); }

static void fm__norm_dweights(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                              const float *rstd, int64_t N, int64_t C) {
  const unsigned blocks = (unsigned)((C + FM__NW_COLS - 1) / FM__NW_COLS);
  FM_LAUNCH(fm__norm_dweights_kernel, blocks, dim3(FM__NW_COLS, FM__NW_GROUPS), 0, dw, db, dout, inp, mean, rstd, N, C);
}

extern "C" void FM_CUDA_OP(layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                          const float *b, int64_t N, int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  FM_LAUNCH(fm__layernorm_fwd_kernel, fm__row_blocks(N), 32 * FM__NORM_WARPS, 0, out, mean, rstd, inp, w, b, N, C, eps);
}

extern "C" void FM_CUDA_OP(layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                          const float *w, const float *mean, const float *rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dinp)
    FM_LAUNCH(fm__layernorm_bwd_dinp_kernel, fm__row_blocks(N), 32 * FM__NORM_WARPS, 0, dinp, dout, inp, w, mean, rstd,
              N, C);
  if (dw || db) fm__norm_dweights(dw, db, dout, inp, mean, rstd, N, C);
}

extern "C" void FM_CUDA_OP(rmsnorm_fwd)(float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                                        float eps) {
  if (N <= 0 || C <= 0) return;
  FM_LAUNCH(fm__rmsnorm_fwd_kernel, fm__row_blocks(N), 32 * FM__NORM_WARPS, 0, out, rstd, inp, w, N, C, eps);
}

extern "C" void FM_CUDA_OP(rmsnorm_bwd)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                        const float *rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dinp)
    FM_LAUNCH(fm__rmsnorm_bwd_dinp_kernel, fm__row_blocks(N), 32 * FM__NORM_WARPS, 0, dinp, dout, inp, w, rstd, N, C);
  if (dw) fm__norm_dweights(dw, NULL, dout, inp, NULL, rstd, N, C);
}
