/* rng.h: the counter-based RNG (Philox4x32-10, Salmon et al., SC'11). Every
 * random number in fmhpc is a pure function of (seed, purpose, step, index):
 * never of the rank, the thread or call order, so results do not depend on
 * how work is split (DESIGN section 6). Header-only so CUDA kernels can use
 * the same function. */
#ifndef FMHPC_RNG_H
#define FMHPC_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FM_RNG_HD __host__ __device__
#else
#define FM_RNG_HD
#endif

/* What a stream is for; part of the counter so streams never overlap. */
enum {
  FM_RNG_INIT = 1,    /* weight init: index = element of the flat parameter vector */
  FM_RNG_DATA = 2,    /* data order (Feistel keys): step = epoch */
  FM_RNG_DROPOUT = 3, /* index = element */
  FM_RNG_SAMPLE = 4,  /* generation: step = position, index = sequence */
  FM_RNG_HESSIAN = 5, /* Sophia's sampled labels */
  FM_RNG_PREP = 6,    /* data prep (validation split, shuffles) */
};

typedef struct FmRng4 {
  uint32_t v[4];
} FmRng4;

static inline FM_RNG_HD void fm__mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

/* Philox4x32 with 10 rounds: Random123's constants. */
static inline FM_RNG_HD FmRng4 fm_philox4x32_10(FmRng4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    fm__mulhilo32(0xD2511F53u, ctr.v[0], &hi0, &lo0);
    fm__mulhilo32(0xCD9E8D57u, ctr.v[2], &hi1, &lo1);
    FmRng4 n = {{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    ctr = n;
    k0 += 0x9E3779B9u; /* golden ratio */
    k1 += 0xBB67AE85u; /* sqrt(3) - 1 */
  }
  return ctr;
}

/* Four 32-bit words for (seed, purpose, step, index). */
static inline FM_RNG_HD FmRng4 fm_rng_block(uint64_t seed, uint32_t purpose, uint32_t step, uint64_t index) {
  FmRng4 c = {{(uint32_t)index, (uint32_t)(index >> 32), step, purpose}};
  return fm_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1) with 24 random bits: exactly representable in float. */
static inline FM_RNG_HD float fm_rng_uniform(uint64_t seed, uint32_t purpose, uint32_t step, uint64_t index) {
  return (float)(fm_rng_block(seed, purpose, step, index).v[0] >> 8) * (1.0f / 16777216.0f);
}

/* Standard normal by Box-Muller on two 32-bit words, in double on the host
 * so weight init is the same on every machine with a correctly rounded libm. */
static inline double fm_rng_normal(uint64_t seed, uint32_t purpose, uint32_t step, uint64_t index) {
  FmRng4 b = fm_rng_block(seed, purpose, step, index);
  double u1 = ((double)b.v[0] + 1.0) * (1.0 / 4294967296.0); /* (0, 1] */
  double u2 = (double)b.v[1] * (1.0 / 4294967296.0);         /* [0, 1) */
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
