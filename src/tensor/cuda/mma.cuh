/* cuda/mma.cuh: the warp-level tensor-core instructions the attention kernels
 * use, one spelling for nvcc (inline PTX) and for the host emulator (FM_SIMT,
 * emu/simt.h), where each is a warp collective that rebuilds the tiles from
 * every lane's registers by the PTX ISA's fragment layouts:
 *
 *   fm_mma_16816_bf16(d, a, b, c)   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
 *   fm_ldmatrix_x4(r, row)          ldmatrix.sync.aligned.m8n8.x4.shared.b16
 *   fm_ldmatrix_x4_trans(r, row)    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
 *
 * Layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
 * type"; g = laneid >> 2, t = laneid % 4; a register holds two bf16, the lower
 * index in the low half):
 *   A 16x16 row-major, 4 regs:  reg r = A[g + 8*(r&1)][2t + 8*(r>>1) + {0,1}]
 *   B 16x8 "col", 2 regs:       reg r = B[2t + 8r + {0,1}][g]
 *   C/D 16x8 f32, 4 floats:     c[i] = C[g + 8*(i>>1)][2t + (i&1)]
 * ldmatrix (PTX ISA, "ldmatrix"): lanes 8m..8m+7 give the row addresses of
 * 8x8 matrix m; register m of lane l gets row l/4, elements 2(l%4), 2(l%4)+1
 * (with .trans: column l/4, rows 2(l%4) and 2(l%4)+1). Row addresses must be
 * 16-byte aligned shared memory.
 *
 * Emulated arithmetic: a bf16 x bf16 product is exact in fp32, so
 * d = c + p0 + p1 + ... + p15 in fp32, k increasing, rounded after each add.
 * Tensor cores do not document their order or rounding: compare the device
 * against a host GEMM with a tolerance, the emulator's runs bitwise. */
#ifndef FMHPC_TENSOR_CUDA_MMA_CUH
#define FMHPC_TENSOR_CUDA_MMA_CUH

#include <stdint.h>

#ifndef FM_SIMT

static __device__ __forceinline__ void fm_mma_16816_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                         const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
static __device__ __forceinline__ void fm_ldmatrix_x4(uint32_t r[4], const void *smem_row) {
  const unsigned addr = (unsigned)__cvta_generic_to_shared(smem_row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
static __device__ __forceinline__ void fm_ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
  const unsigned addr = (unsigned)__cvta_generic_to_shared(smem_row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

#else /* FM_SIMT: warp collectives */

static inline float fm__mma_bf16(uint32_t reg, int half) {
  uint32_t u = ((reg >> (16 * half)) & 0xFFFFu) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

__attribute__((noinline)) static void fm_mma_16816_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                        const float c[4]) {
  const uint32_t mine[8] = {a[0], a[1], a[2], a[3], b[0], b[1], 0, 0};
  const uint32_t(*all)[8] = fmsim::exchange(fmsim::COLL_MMA_16816_BF16, mine, FM_SIMT_SITE);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int r = 0; r < 4; r++)
      for (int h = 0; h < 2; h++) A[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + h] = fm__mma_bf16(all[l][r], h);
    for (int r = 0; r < 2; r++)
      for (int h = 0; h < 2; h++) B[2 * t + 8 * r + h][g] = fm__mma_bf16(all[l][4 + r], h);
  }
  const int lane = fmsim::lane_id(), g = lane >> 2, t = lane & 3;
  float out[4];
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; k++) acc = acc + A[row][k] * B[k][col]; /* the product is exact */
    out[i] = acc;
  }
  for (int i = 0; i < 4; i++) d[i] = out[i]; /* d may be c */
}

static void fm__ldmatrix_x4(uint32_t r[4], const void *smem_row, int trans, const void *site) {
  if ((uintptr_t)smem_row & 15u) fmsim::fail("ldmatrix row address %p is not 16-byte aligned", smem_row);
  const uint64_t p = (uint64_t)(uintptr_t)smem_row;
  const uint32_t mine[8] = {(uint32_t)p, (uint32_t)(p >> 32), (uint32_t)trans, 0, 0, 0, 0, 0};
  const uint32_t(*all)[8] = fmsim::exchange(fmsim::COLL_LDMATRIX, mine, site);
  for (int l = 0; l < 32; l++)
    if (all[l][2] != (uint32_t)trans) fmsim::fail("lanes of one warp mix ldmatrix and ldmatrix.trans");
  const int lane = fmsim::lane_id(), q = lane >> 2, p2 = 2 * (lane & 3);
  for (int m = 0; m < 4; m++) {
    const uint16_t *rows[8];
    for (int j = 0; j < 8; j++)
      rows[j] = (const uint16_t *)(uintptr_t)((uint64_t)all[8 * m + j][0] | ((uint64_t)all[8 * m + j][1] << 32));
    const uint16_t lo = trans ? rows[p2][q] : rows[q][p2];
    const uint16_t hi = trans ? rows[p2 + 1][q] : rows[q][p2 + 1];
    r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
  }
}
__attribute__((noinline)) static void fm_ldmatrix_x4(uint32_t r[4], const void *smem_row) {
  fm__ldmatrix_x4(r, smem_row, 0, FM_SIMT_SITE);
}
__attribute__((noinline)) static void fm_ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
  fm__ldmatrix_x4(r, smem_row, 1, FM_SIMT_SITE);
}

#endif /* FM_SIMT */
#endif
