/* rope_table.h: the RoPE angle table entry, one formula for the CPU op's
 * table (cpu/rope.c) and the table the CUDA op uploads (cuda/rope.cu), so
 * both rotate by the same float cos/sin bits. Private to src/tensor/. */
#ifndef FMHPC_TENSOR_ROPE_TABLE_H
#define FMHPC_TENSOR_ROPE_TABLE_H

#include <math.h>
#include <stdint.h>

/* HF: inv_freq[i] = 1 / theta^(2i / HS), HS = 2*half, in double. */
static inline double fm_rope_inv_freq(int64_t i, int64_t half, float theta) {
  return pow((double)theta, -(double)(2 * i) / (double)(2 * half));
}
/* cos and sin of the angle p * inv_freq[i], in double, rounded once to float. */
static inline void fm_rope_cos_sin(int64_t p, int64_t i, int64_t half, float theta, float *c, float *s) {
  const double a = (double)p * fm_rope_inv_freq(i, half, theta);
  *c = (float)cos(a);
  *s = (float)sin(a);
}

#endif
