/* cpu/quant.c: the exact gradient reduction's quantisation as a backend op
 * (ops.def quant_add), the readable form of its contract: per block of
 * `block` elements, the max |g| and NaN/Inf first, then each value rounded
 * to the nearest integer of g * 2^s (ties to even: nearbyint in the default
 * rounding mode, exact because g * 2^s is a power-of-two scaling with
 * |g 2^s| <= limit <= 2^51) and added. src/dist/reduce.c's add_block is the
 * same arithmetic, vectorised, and is what the CPU training path runs;
 * tests/kernels/emu (quant_add_vs_reduce_add) holds this op, the CUDA kernel
 * and add_block to the same bits. */
#include <float.h>
#include <math.h>

#include "fmhpc/tensor.h"

#include "../elementwise.h" /* fm_block_exponent */

void fm_cpu_quant_add(int64_t *acc, float *amax, int32_t *flags, const float *grad, const int32_t *exp2, int64_t lo,
                      int64_t hi, int64_t block, int64_t limit) {
  if (block <= 0 || lo % block != 0)
    fm_abort_one(1, "quant_add: range start %lld is not a multiple of the block size %lld", (long long)lo,
                 (long long)block);
  for (int64_t i0 = lo; i0 < hi; i0 += block) {
    const int64_t b = i0 / block, i1 = i0 + block < hi ? i0 + block : hi;
    float m = 0.0f;
    int bad = 0;
    for (int64_t i = i0; i < i1; i++) {
      const float a = fabsf(grad[i]);
      bad |= !(a <= FLT_MAX); /* NaN or Inf */
      m = a > m ? a : m;
    }
    if (m > amax[b]) amax[b] = m;
    if (bad) {
      flags[1] = 1;
      continue;
    }
    const double scale = ldexp(1.0, exp2[b]);
    if ((double)m * scale > (double)limit) {
      flags[0] = 1;
      continue;
    }
    for (int64_t i = i0; i < i1; i++) acc[i - lo] += (int64_t)nearbyint((double)grad[i] * scale);
  }
}

void fm_cpu_dequant(float *out, const int64_t *acc, const int32_t *exp2, int64_t lo, int64_t len, int64_t block) {
  if (block <= 0 || lo % block != 0)
    fm_abort_one(1, "dequant: range start %lld is not a multiple of the block size %lld", (long long)lo,
                 (long long)block);
  for (int64_t i0 = 0; i0 < len; i0 += block) {
    const double inv = ldexp(1.0, -exp2[(lo + i0) / block]);
    const int64_t i1 = i0 + block < len ? i0 + block : len;
    for (int64_t i = i0; i < i1; i++) out[i] = (float)((double)acc[i] * inv);
  }
}

void fm_cpu_block_scales(int32_t *exp2, const float *amax, int64_t nblocks, int64_t limit) {
  for (int64_t b = 0; b < nblocks; b++) exp2[b] = fm_block_exponent(amax[b], limit);
}
