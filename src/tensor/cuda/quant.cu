/* cuda/quant.cu: the exact gradient reduction's quantisation on the device:
 * one micro-batch gradient added into the int64 fixed-point accumulator, the
 * twin of add_block/fm_reduce_add in src/dist/reduce.c (see dist.h for the
 * scheme). Per scale block of `block` elements (FM_DIST_BLOCK) (one CUDA block each):
 * the block's max |g| (and NaN/Inf), then, when no value is NaN/Inf and
 * amax * 2^s <= limit, every element rounded to the nearest integer of
 * g * 2^s, ties to even, and added. The CPU rounds with the 1.5*2^52 trick,
 * which is round-to-nearest-even of the exact product g * 2^s (|g 2^s| < 2^51);
 * __double2ll_rn is the same rounding, so the accumulator gets the same
 * integers: bitwise. A max is the same in any order, so amax too. Flags are
 * ORed with integer atomics (order-free). */
#include <float.h>

#include "cuda_common.cuh"

#include "../elementwise.h" /* fm_block_exponent */

#define FM__Q_THREADS 256

static __global__ void fm__quant_add_kernel(int64_t *acc, float *amax, int32_t *flags, const float *grad,
                                            const int32_t *exp2, int64_t lo, int64_t hi, int64_t block, int64_t limit) {
  __shared__ float wmax[FM__Q_THREADS / 32];
  __shared__ int wbad[FM__Q_THREADS / 32];
  const int64_t b = lo / block + blockIdx.x;
  const int64_t i0 = b * block, i1 = i0 + block < hi ? i0 + block : hi;
  float m = 0.0f;
  int bad = 0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const float a = fabsf(grad[i]);
    bad |= !(a <= FLT_MAX); /* NaN or Inf */
    m = a > m ? a : m;      /* as the CPU: a NaN never becomes the max */
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    m = om > m ? om : m;
    bad |= __shfl_xor_sync(0xffffffffu, bad, o);
  }
  if ((threadIdx.x & 31) == 0) {
    wmax[threadIdx.x >> 5] = m;
    wbad[threadIdx.x >> 5] = bad;
  }
  __syncthreads();
  m = 0.0f;
  bad = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
    m = wmax[w] > m ? wmax[w] : m;
    bad |= wbad[w];
  }
  if (threadIdx.x == 0 && m > amax[b]) amax[b] = m;
  if (bad) {
    if (threadIdx.x == 0) atomicOr(&flags[1], 1);
    return;
  }
  const double scale = ldexp(1.0, exp2[b]);
  if (fm__dmul((double)m, scale) > (double)limit) {
    if (threadIdx.x == 0) atomicOr(&flags[0], 1);
    return;
  }
  int64_t *dst = acc + (i0 - lo);
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
    dst[i - i0] += (int64_t)__double2ll_rn(fm__dmul((double)grad[i], scale));
}

/* acc[i - lo] += round(grad[i] * 2^exp2[i / block]) for i in [lo, hi)
 * (block = FM_DIST_BLOCK; lo on a block boundary: a ZeRO shard), amax[b] = max(amax[b], max |g|) per
 * block, flags[0] |= overflow (a block past limit: not added), flags[1] |=
 * NaN/Inf (that block not added). fm_reduce_add does this for each rank's
 * shard r with acc + r*S. Device pointers; no host sync. */
extern "C" void FM_CUDA_OP(quant_add)(int64_t *acc, float *amax, int32_t *flags, const float *grad, const int32_t *exp2,
                                      int64_t lo, int64_t hi, int64_t block, int64_t limit) {
  if (block <= 0 || lo % block != 0)
    fm_abort_one(1, "quant_add: range start %lld is not a multiple of the block size %lld", (long long)lo,
                 (long long)block);
  if (hi <= lo) return;
  const int64_t blocks = (hi - lo + block - 1) / block;
  FM_LAUNCH(fm__quant_add_kernel, (unsigned)blocks, FM__Q_THREADS, 0, acc, amax, flags, grad, exp2, lo, hi, block,
            limit);
}

static __global__ void fm__dequant_kernel(float *out, const int64_t *acc, const int32_t *exp2, int64_t lo, int64_t len,
                                          int64_t block) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
    const double inv = ldexp(1.0, -exp2[(lo + i) / block]); /* a power of two: exact */
    out[i] = __double2float_rn(fm__dmul(__ll2double_rn(acc[i]), inv));
  }
}

/* out[i] = (float)((double)acc[i] * 2^-exp2[(lo + i) / block]), i in [0, len):
 * the reduced shard from the reduce-scatter's int64 sums, rounded as the host
 * finish in reduce.c (int64 -> double to nearest, an exact scaling, double ->
 * float to nearest), so bitwise. Device pointers; no host sync. */
extern "C" void FM_CUDA_OP(dequant)(float *out, const int64_t *acc, const int32_t *exp2, int64_t lo, int64_t len,
                                    int64_t block) {
  if (block <= 0 || lo % block != 0)
    fm_abort_one(1, "dequant: range start %lld is not a multiple of the block size %lld", (long long)lo,
                 (long long)block);
  if (len <= 0) return;
  int64_t blocks = (len + FM__Q_THREADS - 1) / FM__Q_THREADS;
  if (blocks > 4096) blocks = 4096;
  FM_LAUNCH(fm__dequant_kernel, (unsigned)blocks, FM__Q_THREADS, 0, out, acc, exp2, lo, len, block);
}

static __global__ void fm__block_scales_kernel(int32_t *exp2, const float *amax, int64_t nblocks, int64_t limit) {
  FM__CUDA_FOR_EACH(b, nblocks) exp2[b] = fm_block_exponent(amax[b], limit);
}

/* exp2[b] = fm_block_exponent(amax[b], limit): the next step's scales where
 * the maxima are (reduce.c's fm_reduce_begin on the NCCL path), no copy. */
extern "C" void FM_CUDA_OP(block_scales)(int32_t *exp2, const float *amax, int64_t nblocks, int64_t limit) {
  if (nblocks <= 0) return;
  FM_LAUNCH(fm__block_scales_kernel, fm__cuda_grid(nblocks), FM__CUDA_BLOCK, 0, exp2, amax, nblocks, limit);
}
