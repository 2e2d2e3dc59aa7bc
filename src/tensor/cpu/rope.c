/* cpu/rope.c: rotary position embedding (RoFormer; Llama), in place, HF's
 * rotate_half layout: within a head of size HS the pairs are (i, i + HS/2),
 *   out[i]        = x[i] cos(a) - x[i + HS/2] sin(a)
 *   out[i + HS/2] = x[i + HS/2] cos(a) + x[i] sin(a),   a = pos * theta^(-2i/HS),
 * which is HF's q * cos + rotate_half(q) * sin. Backward applies the inverse
 * (transposed) rotation to the gradient.
 *
 * cos/sin are computed in double for each (position, i) and rounded once to
 * float (HF computes the angle in float32, which is off by ~1e-4 rad at
 * position 4096). They live in a table kept between calls, grown when a larger
 * position or another (HS, theta) shows up: a step's calls reuse it. */
#include <math.h>

#include "fmhpc/tensor.h"

#include "../rope_table.h"
#include "cpu_ops.h"

#define FM_ROPE_OMP_MIN ((int64_t)1 << 14)

static float *fm__rope_cos, *fm__rope_sin; /* (P, HS/2) */
static int64_t fm__rope_P, fm__rope_half;
static float fm__rope_theta;

/* Makes the table cover positions [0, npos) for (half = HS/2, theta). */
static void rope_table(int64_t npos, int64_t half, float theta) {
  const int same = half == fm__rope_half && theta == fm__rope_theta;
  if (same && npos <= fm__rope_P) return;
  int64_t P = same && 2 * fm__rope_P > npos ? 2 * fm__rope_P : npos;
  if (P < 64) P = 64;
  fm_cpu_free(fm__rope_cos);
  fm_cpu_free(fm__rope_sin);
  fm__rope_cos = fm_cpu_alloc(P * half * (int64_t)sizeof(float));
  fm__rope_sin = fm_cpu_alloc(P * half * (int64_t)sizeof(float));
  fm__rope_P = P;
  fm__rope_half = half;
  fm__rope_theta = theta;
#pragma omp parallel for schedule(static) if (P * half >= FM_ROPE_OMP_MIN)
  for (int64_t p = 0; p < P; p++)
    for (int64_t i = 0; i < half; i++) /* the formula the CUDA op's table uses too */
      fm_rope_cos_sin(p, i, half, theta, &fm__rope_cos[p * half + i], &fm__rope_sin[p * half + i]);
}

/* dir = +1: rotate by +a (forward); -1: by -a (backward, the inverse). */
static void rope_apply(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta,
                       float dir) {
  if (HS % 2 != 0) fm_abort_one(1, "rope: head size %lld is odd", (long long)HS);
  const int64_t half = HS / 2;
  int64_t maxpos = -1;
  for (int64_t n = 0; n < N; n++) {
    if (pos[n] < 0) fm_abort_one(1, "rope: pos[%lld] = %d is negative", (long long)n, (int)pos[n]);
    if (pos[n] > maxpos) maxpos = pos[n];
  }
  rope_table(maxpos + 1, half, theta);
  const float *ctab = fm__rope_cos, *stab = fm__rope_sin;
#pragma omp parallel for schedule(static) if (N * H * HS >= FM_ROPE_OMP_MIN)
  for (int64_t n = 0; n < N; n++) {
    const float *cs = ctab + (int64_t)pos[n] * half;
    const float *sn = stab + (int64_t)pos[n] * half;
    for (int64_t h = 0; h < H; h++) {
      float *x1 = x + n * ld + h * HS, *x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; i++) {
        const float a = x1[i], b = x2[i], c = cs[i], s = dir * sn[i];
        x1[i] = a * c - b * s;
        x2[i] = b * c + a * s;
      }
    }
  }
}

void fm_cpu_rope_fwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta) {
  rope_apply(x, pos, N, ld, H, HS, theta, 1.0f);
}

/* The rotation is orthogonal: its Jacobian's transpose is the rotation by -a. */
void fm_cpu_rope_bwd(float *dx, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta) {
  rope_apply(dx, pos, N, ld, H, HS, theta, -1.0f);
}
