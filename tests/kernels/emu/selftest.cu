/* selftest.cu: kernels that test the SIMT emulator itself (test_simt.c):
 * a deterministic block reduction, two order-dependent ones that must differ
 * across schedules (a missing barrier, a float atomicAdd), barriers and warp
 * collectives that must be reported (in divergent code), and tensor-core tiles
 * through mma.sync m16n8k16 and ldmatrix. Written in CUDA C like the kernels
 * in src/tensor/cuda/, compiled here with g++ -DFM_SIMT. */
#include "cuda_common.cuh"
#include "mma.cuh"

/* ---- reductions ---------------------------------------------------------- */
static __device__ float fm__warp_sum_f(float v) {
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* partial[b] = sum of x[i], i = b*blockDim + t + k*gridDim*blockDim: per
 * thread in order, xor butterfly per warp, warp sums in order by warp 0. */
static __global__ void block_sum_kernel(float *partial, const float *x, int64_t n) {
  __shared__ float ws[32];
  float v = 0.0f;
  FM__CUDA_FOR_EACH(i, n) v = __fadd_rn(v, x[i]);
  v = fm__warp_sum_f(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) ws[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = 0.0f;
    for (int k = 0; k < (int)(blockDim.x >> 5); k++) s = __fadd_rn(s, ws[k]);
    if (lane == 0) partial[blockIdx.x] = s;
  }
}
/* Thread 0 sums what the others wrote to shared memory, with no barrier. */
static __global__ void racy_sum_kernel(float *partial, const float *x, int64_t n) {
  FM_DYN_SMEM(float, s);
  const int t = threadIdx.x;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  if (t == 0) {
    float a = 0.0f;
    for (int k = 0; k < (int)blockDim.x; k++) a += s[k];
    partial[blockIdx.x] = a;
  }
}
static __global__ void atomic_sum_kernel(float *out, const float *x, int64_t n) {
  FM__CUDA_FOR_EACH(i, n) atomicAdd(out, x[i]);
}
/* Half the block waits at a barrier the other half never reaches. */
static __global__ void divergent_barrier_kernel(float *out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.0f;
}
/* Lanes shuffle with a loop count that depends on the lane. */
static __global__ void divergent_shuffle_kernel(float *out) {
  float v = 1.0f;
  for (int k = 0; k < (int)(threadIdx.x & 1) + 1; k++) v += __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
/* Shuffles with widths and directions, against their definitions (host). */
static __global__ void shuffle_kinds_kernel(int *out) {
  const int l = threadIdx.x;
  out[0 * 32 + l] = __shfl_sync(0xffffffffu, 100 + l, 5);
  out[1 * 32 + l] = __shfl_sync(0xffffffffu, 100 + l, l + 3, 8);
  out[2 * 32 + l] = __shfl_xor_sync(0xffffffffu, 100 + l, 6, 8);
  out[3 * 32 + l] = __shfl_down_sync(0xffffffffu, 100 + l, 3, 16);
  out[4 * 32 + l] = __shfl_up_sync(0xffffffffu, 100 + l, 2);
  out[5 * 32 + l] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
}
/* Many shuffles: the emulator's switch rate. */
static __global__ void shuffle_storm_kernel(float *out, int rounds) {
  float v = (float)threadIdx.x;
  for (int r = 0; r < rounds; r++) v = __shfl_xor_sync(0xffffffffu, v, 1 + (r & 15));
  out[(int64_t)blockIdx.x * blockDim.x + threadIdx.x] = v;
}

/* ---- tensor cores: C[32x16] = A[32x64] B[64x16], bf16 in, f32 out --------- */
#define GM 32
#define GN 16
#define GK 64
static __device__ __forceinline__ uint32_t pack_bf16x2(const uint16_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 16);
}
/* Fragments from global memory by the PTX layout; warp w owns the 16x8 tile
 * (16*(w>>1), 8*(w&1)). A row-major (GM, GK); Bt = B^T row-major (GN, GK).
 * bug 1 swaps a[1] and a[2]: must not match. */
static __global__ void mma_global_kernel(float *C, const uint16_t *A, const uint16_t *Bt, int bug) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int m0 = 16 * (warp >> 1), n0 = 8 * (warp & 1);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < GK; k0 += 16) {
    uint32_t a[4], b[2];
    for (int r = 0; r < 4; r++) a[r] = pack_bf16x2(A + (m0 + g + 8 * (r & 1)) * GK + k0 + 2 * t + 8 * (r >> 1));
    for (int r = 0; r < 2; r++) b[r] = pack_bf16x2(Bt + (n0 + g) * GK + k0 + 2 * t + 8 * r);
    if (bug == 1) {
      const uint32_t s = a[1];
      a[1] = a[2];
      a[2] = s;
    }
    fm_mma_16816_bf16(acc, a, b, acc);
  }
  for (int i = 0; i < 4; i++) C[(m0 + g + 8 * (i >> 1)) * GN + n0 + 2 * t + (i & 1)] = acc[i];
}
/* As flash attention loads its tiles: A through ldmatrix.x4 from shared
 * memory, B row-major (GK, GN) (like V) through ldmatrix.x4.trans.
 * bug 2 reads B without .trans: must not match. */
static __global__ void mma_ldmatrix_kernel(float *C, const uint16_t *A, const uint16_t *B, int bug) {
  __shared__ __attribute__((aligned(16))) uint16_t sA[GM * GK];
  __shared__ __attribute__((aligned(16))) uint16_t sB[GK * GN];
  for (int i = threadIdx.x; i < GM * GK; i += blockDim.x) sA[i] = A[i];
  for (int i = threadIdx.x; i < GK * GN; i += blockDim.x) sB[i] = B[i];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int m0 = 16 * (warp >> 1), n0 = 8 * (warp & 1);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < GK; k0 += 32) {
    /* lane l: row k0 + l of B, columns n0..n0+7: matrices = k blocks of 8 */
    uint32_t bb[4];
    if (bug == 2)
      fm_ldmatrix_x4(bb, &sB[(k0 + lane) * GN + n0]);
    else
      fm_ldmatrix_x4_trans(bb, &sB[(k0 + lane) * GN + n0]);
    for (int s = 0; s < 2; s++) {
      /* matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a[0..3] */
      uint32_t a[4];
      fm_ldmatrix_x4(a, &sA[(m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * GK + k0 + 16 * s + 8 * (lane >> 4)]);
      const uint32_t b[2] = {bb[2 * s], bb[2 * s + 1]};
      fm_mma_16816_bf16(acc, a, b, acc);
    }
  }
  for (int i = 0; i < 4; i++) C[(m0 + g + 8 * (i >> 1)) * GN + n0 + 2 * t + (i & 1)] = acc[i];
}
/* Half a warp in an mma, the other half at __syncwarp. */
static __global__ void mma_divergent_kernel(float *out) {
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (threadIdx.x < 16)
    fm_mma_16816_bf16(c, a, b, c);
  else
    __syncwarp();
  out[threadIdx.x] = c[0];
}

/* ---- launchers (C) ------------------------------------------------------- */
extern "C" void simt_block_sum(float *partial, const float *x, int64_t n, int blocks, int threads) {
  FM_LAUNCH(block_sum_kernel, blocks, threads, 0, partial, x, n);
}
extern "C" void simt_racy_sum(float *partial, const float *x, int64_t n, int blocks, int threads) {
  FM_LAUNCH(racy_sum_kernel, blocks, threads, threads * sizeof(float), partial, x, n);
}
extern "C" void simt_atomic_sum(float *out, const float *x, int64_t n, int blocks, int threads) {
  FM_LAUNCH(atomic_sum_kernel, blocks, threads, 0, out, x, n);
}
extern "C" void simt_divergent_barrier(float *out) { FM_LAUNCH(divergent_barrier_kernel, 1, 32, 0, out); }
extern "C" void simt_divergent_shuffle(float *out) { FM_LAUNCH(divergent_shuffle_kernel, 1, 32, 0, out); }
extern "C" void simt_shuffle_kinds(int *out) { FM_LAUNCH(shuffle_kinds_kernel, 1, 32, 0, out); }
extern "C" void simt_shuffle_storm(float *out, int blocks, int threads, int rounds) {
  FM_LAUNCH(shuffle_storm_kernel, blocks, threads, 0, out, rounds);
}
extern "C" void simt_mma_global(float *C, const uint16_t *A, const uint16_t *Bt, int bug) {
  FM_LAUNCH(mma_global_kernel, 1, 128, 0, C, A, Bt, bug);
}
extern "C" void simt_mma_ldmatrix(float *C, const uint16_t *A, const uint16_t *B, int bug) {
  FM_LAUNCH(mma_ldmatrix_kernel, 1, 128, 0, C, A, B, bug);
}
extern "C" void simt_mma_divergent(float *out) { FM_LAUNCH(mma_divergent_kernel, 1, 32, 0, out); }
