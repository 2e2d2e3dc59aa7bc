/* cuda/attention_flash.cu: flash-style attention on tensor cores
 * (mma.sync.m16n8k16, bf16 inputs, fp32 accumulation; mma.cuh): causal, GQA,
 * the document mask, head sizes 64 and 128, the CPU op's signatures and
 * semantics (src/tensor/cpu/attention.c, ops.def). attention.cu's
 * fm_cuda_attention_fwd/bwd call these when the backend computes in bf16
 * (fm_cuda_attention_set_bf16, which the CUDA set_compute_bf16 op calls)
 * and the shape fits (attention_flash_fits); otherwise its fp32 kernels run.
 *
 * Rounding. q, k, v and dout are rounded to bf16 (nearest even) once per
 * call, into dense grow-once device copies (fm__fa_to_bf16; the first step
 * allocates them), which the kernels read in 16-byte chunks; so are the
 * probabilities P before P V and P^T dO, and dS before dS^T Q and dS K
 * (FlashAttention-2 does the same). Scores, the online softmax, l, lse, D, and every accumulator are
 * fp32. out and lse, dq, dk, dv stay fp32 arrays, as the op's contract.
 *
 * Forward (FA2 Algorithm 1): a block of 4 warps owns 64 query rows of one
 * (b, h), each warp 16 rows; it walks the key tiles of 64 up to its diagonal,
 * S = Q K^T on tensor cores, scores in base-2 units (scale * log2 e), an
 * online softmax per row (each row's 64 scores of a tile are spread over the
 * 4 lanes of a quad: max and the final sum by a fixed xor butterfly), and
 * O += P V. out = O / l, lse = m ln 2 + log l (natural log, as the CPU op).
 *
 * Backward, deterministic and without atomics, as the CPU op's two passes:
 *   D = rowsum(dout * out), one warp per row, in double (fm__fa_D_kernel);
 *   dK/dV: a block owns 64 keys of one (b, kv head g) (a warp 16 keys), walks
 *     the group's query heads, then the query tiles t >= its first key, in
 *     order: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
 *     dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q;
 *   dQ: a block owns 64 query rows of (b, h) (a warp 16), walks key tiles in
 *     order: dQ += dS K.
 * Every output element has one owner thread and one summation order, so
 * the same inputs give the same bits run to run. A block skips a whole tile
 * (its loads and barriers) whose document ids cannot meet its own rows'
 * (fm__fa_range); a warp whose 16 rows see nothing of a tile (causal or
 * document mask) skips its products (__any_sync); a masked entry gets
 * probability exactly 0.
 *
 * Tiles travel global -> shared memory in 16-byte chunks (FmFaStage); where
 * registers allow (FM__FA_PF_*: the forward at head size 64) the next key
 * tile is fetched into registers right after the current one is stored, so
 * its loads are in flight while the current one is computed on. One barrier
 * before and one after each store. Shapes: head size 64 or 128, even row
 * strides (the fits test; the fp32 kernels take the rest). Shared memory:
 * 27 KiB (HS 64) or 51 KiB (HS 128) per block, rows padded by 16 bytes so
 * ldmatrix's 8 row addresses hit distinct banks. */
#include "cuda_common.cuh"
#include "mma.cuh"

#include "../elementwise.h"

#define FM__FA_THREADS 128 /* 4 warps, 16 rows each */
#define FM__FA_ROWS    64  /* query rows (fwd, dQ) or key rows (dK/dV) per block */
#define FM__FA_LOG2E   1.4426950408889634
/* Which kernels prefetch the next tile into registers (FmFaStage): only
 * where it costs no resident block. ptxas -v (CUDA 13, sm_80/sm_90) without
 * and with: forward HS 64 131 -> 167 registers (3 blocks of 128 threads per
 * SM either way), HS 128 169 -> 249 (3 -> 2); dQ HS 64 150 -> 202 (3 -> 2);
 * dK/dV 203..248 -> 230..255. Measure on a GPU before changing
 * (regression/gpu/check.sh times attention); the emulated test passed with
 * all three on, but runs only the chosen setting. */
#ifndef FM__FA_PF_FWD
#define FM__FA_PF_FWD (HS == 64)
#define FM__FA_PF_DQ  0
#define FM__FA_PF_DKV 0
#endif
/* Loops over fragment registers are unrolled so the arrays stay in registers. */
#ifdef FM_SIMT
#define FM__UNROLL
#else
#define FM__UNROLL _Pragma("unroll")
#endif

extern "C" int FM_CUDA_OP(attention_flash_fits)(const float *q, const float *k, const float *v, int64_t ldq,
                                                int64_t ldkv, int64_t HS);
extern "C" void FM_CUDA_OP(attention_flash_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS);
extern "C" void FM_CUDA_OP(attention_flash_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                                const float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS);

typedef struct FmFaArgs {
  /* bf16 copies (fm__fa_to_bf16), dense: head h of row n at q + n*NH*HS + h*HS,
   * kv head g at k + n*NKV*HS + g*HS; dout as q (backward only) */
  const uint16_t *q, *k, *v, *dout;
  int64_t ldq, ldkv;  /* the fp32 q and k/v rows' strides: dq's and dk/dv's */
  const int32_t *seg; /* (B, T) or NULL */
  int64_t B, T, NH, NKV;
  float scale;  /* 1/sqrt(HS) */
  float scale2; /* scale * log2(e): scores in base-2 units */
} FmFaArgs;

struct alignas(16) Fm4f { /* the dynamic shared memory's element: 16-byte aligned */
  float x, y, z, w;
};
struct alignas(16) Fm8h { /* 8 bf16 */
  uint32_t x, y, z, w;
};

/* ---- small pieces ------------------------------------------------------------ */
/* Two floats to bf16 (nearest even), lo in the low half: one cvt on sm_80+. */
static __device__ __forceinline__ uint32_t fm__bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return (uint32_t)fm_f32_to_bf16(lo) | ((uint32_t)fm_f32_to_bf16(hi) << 16);
#endif
}
static __device__ __forceinline__ Fm8h fm__ld8h(const uint16_t *p) {
#ifdef FM_SIMT
  if ((uintptr_t)p & 15u) fmsim::fail("flash attention: a 16-byte load from %p, not 16-byte aligned", (const void *)p);
  Fm8h x;
  memcpy(&x, p, sizeof x);
  return x;
#else
  return *reinterpret_cast<const Fm8h *>(p);
#endif
}
static __device__ __forceinline__ void fm__st8h(uint16_t *p, Fm8h w) {
#ifdef FM_SIMT
  memcpy(p, &w, sizeof w);
#else
  *reinterpret_cast<Fm8h *>(p) = w;
#endif
}

/* A tile of R rows x HS bf16 on its way from global memory (row r at
 * src + r*ld) to shared memory (row stride HS + 8), held in registers in
 * between, so the next tile's loads can be in flight while the current one
 * is computed on: fetch, (work), barrier, store. Rows >= nvalid are zeros. */
template <int HS, int R>
struct FmFaStage {
  static constexpr int C8 = HS / 8, CH = R * C8 / FM__FA_THREADS;
  static_assert(CH * FM__FA_THREADS == R * C8, "a tile is a whole number of 16-byte chunks per thread");
  Fm8h r[CH];
  __device__ __forceinline__ void fetch(const uint16_t *src, int64_t ld, int nvalid) {
    FM__UNROLL
    for (int j = 0; j < CH; j++) {
      const int i = (int)threadIdx.x + j * FM__FA_THREADS, row = i / C8, c = (i % C8) * 8;
      if (row < nvalid) {
        r[j] = fm__ld8h(src + row * ld + c);
      } else {
        r[j].x = r[j].y = r[j].z = r[j].w = 0u;
      }
    }
  }
  /* fetch and store in one pass, chunk by chunk (no registers held) */
  static __device__ __forceinline__ void copy(uint16_t *dst, const uint16_t *src, int64_t ld, int nvalid) {
    for (int i = (int)threadIdx.x; i < R * C8; i += FM__FA_THREADS) {
      const int row = i / C8, c = (i % C8) * 8;
      Fm8h w;
      if (row < nvalid) {
        w = fm__ld8h(src + row * ld + c);
      } else {
        w.x = w.y = w.z = w.w = 0u;
      }
      fm__st8h(dst + row * (HS + 8) + c, w);
    }
  }
  __device__ __forceinline__ void store(uint16_t *dst) const {
    FM__UNROLL
    for (int j = 0; j < CH; j++) {
      const int i = (int)threadIdx.x + j * FM__FA_THREADS, row = i / C8, c = (i % C8) * 8;
      fm__st8h(dst + row * (HS + 8) + c, r[j]);
    }
  }
};

/* A fragment (16 x 16, row-major) at rows r0.., cols c0.. of a shared tile. */
template <int HS>
static __device__ __forceinline__ void fm__fa_frag_a(uint32_t a[4], const uint16_t *tile, int r0, int c0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, j = lane & 7;
  fm_ldmatrix_x4(a, tile + (r0 + 8 * (m & 1) + j) * (HS + 8) + c0 + 8 * (m >> 1));
}
/* B fragments of two n-tiles (n0, n0 + 8) at k0 from a tile stored [n][k]
 * (k contiguous): b[0..1] for n0, b[2..3] for n0 + 8. */
template <int HS>
static __device__ __forceinline__ void fm__fa_frag_b_nk(uint32_t b[4], const uint16_t *tile, int n0, int k0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, j = lane & 7;
  fm_ldmatrix_x4(b, tile + (n0 + 8 * (m >> 1) + j) * (HS + 8) + k0 + 8 * (m & 1));
}
/* The same from a tile stored [k][n] (n contiguous): ldmatrix.trans. */
template <int HS>
static __device__ __forceinline__ void fm__fa_frag_b_kn(uint32_t b[4], const uint16_t *tile, int n0, int k0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, j = lane & 7;
  fm_ldmatrix_x4_trans(b, tile + (k0 + 8 * (m & 1) + j) * (HS + 8) + n0 + 8 * (m >> 1));
}
/* acc (16 x 8*NC per warp) = A (16 x HS, rows r0 of ta) B^T, B = rows of tb
 * stored [n][k]: the score tiles S = Q K^T, dP = dO V^T, S^T = K Q^T. */
template <int HS, int NC>
static __device__ __forceinline__ void fm__fa_abt(float acc[NC][4], const uint16_t *ta, int r0, const uint16_t *tb) {
  FM__UNROLL
  for (int n = 0; n < NC; n++) {
    FM__UNROLL
    for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
  }
  FM__UNROLL
  for (int k0 = 0; k0 < HS; k0 += 16) {
    uint32_t a[4];
    fm__fa_frag_a<HS>(a, ta, r0, k0);
    FM__UNROLL
    for (int n = 0; n < NC; n += 2) {
      uint32_t b[4];
      fm__fa_frag_b_nk<HS>(b, tb, 8 * n, k0);
      fm_mma_16816_bf16(acc[n], a, b, acc[n]);
      fm_mma_16816_bf16(acc[n + 1], a, b + 2, acc[n + 1]);
    }
  }
}
/* acc (16 x HS) += P (16 x 8*NC, C fragments rounded to bf16) B, B = the
 * shared tile tb stored [k][n] (rows = P's columns): O += P V, dV += P^T dO,
 * dK += dS^T Q, dQ += dS K. */
template <int HS, int NC>
static __device__ __forceinline__ void fm__fa_pb(float acc[HS / 8][4], const float p[NC][4], const uint16_t *tb) {
  FM__UNROLL
  for (int kk = 0; kk < NC / 2; kk++) {
    const uint32_t a[4] = {fm__bf16x2(p[2 * kk][0], p[2 * kk][1]), fm__bf16x2(p[2 * kk][2], p[2 * kk][3]),
                           fm__bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           fm__bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    FM__UNROLL
    for (int n = 0; n < HS / 8; n += 2) {
      uint32_t b[4];
      fm__fa_frag_b_kn<HS>(b, tb, 8 * n, 16 * kk);
      fm_mma_16816_bf16(acc[n], a, b, acc[n]);
      fm_mma_16816_bf16(acc[n + 1], a, b + 2, acc[n + 1]);
    }
  }
}
/* Bit (n*4 + i) of the result: fragment element i of n-tile n (row r0 or
 * r1 = r0 + 8 by i >> 1, column c0 + 8n + 2(lane%4) + (i&1)) is visible:
 * key <= query, query < T, same document. rows_are_q: rows are queries
 * (forward, dQ) or keys (dK/dV: S^T). sg: the column segment ids of the tile
 * in shared memory (indexed from c0); rs: the rows' segment ids. */
template <int NC>
static __device__ __forceinline__ uint32_t fm__fa_vis(int64_t r0, int64_t c0, int64_t T, int rows_are_q,
                                                      const int32_t rs[2], const int32_t *sg) {
  static_assert(NC * 4 <= 32, "a mask word holds 32 fragment elements");
  const int tq = threadIdx.x & 3;
  uint32_t bits = 0;
  FM__UNROLL
  for (int n = 0; n < NC; n++) {
    FM__UNROLL
    for (int i = 0; i < 4; i++) {
      const int64_t r = r0 + 8 * (i >> 1), cc = 8 * n + 2 * tq + (i & 1), c = c0 + cc;
      const int64_t t = rows_are_q ? r : c, s = rows_are_q ? c : r;
      const int ok = t < T && s <= t && sg[cc] == rs[i >> 1];
      bits |= (uint32_t)ok << (n * 4 + i);
    }
  }
  return bits;
}

/* Document ranges: the smallest and largest segment id of seg[lo, lo + n),
 * the same in every lane of every warp (each warp reduces the same ids), so
 * a block-wide decision made from them needs no barrier. A tile whose id
 * range is disjoint from the range of the block's own rows holds no pair in
 * one document and is skipped whole (no loads, no barriers). Sound for any
 * ids; tight when a row's documents are numbered in order, as prep numbers
 * them. */
struct FmFaRange {
  int32_t lo, hi;
};
static __device__ __forceinline__ FmFaRange fm__fa_range(const int32_t *seg, int64_t lo, int n) {
  int32_t a = INT32_MAX, z = INT32_MIN;
  for (int i = threadIdx.x & 31; i < n; i += 32) {
    const int32_t v = seg[lo + i];
    a = v < a ? v : a;
    z = v > z ? v : z;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const int32_t x = __shfl_xor_sync(0xffffffffu, a, o), y = __shfl_xor_sync(0xffffffffu, z, o);
    a = x < a ? x : a;
    z = y > z ? y : z;
  }
  const FmFaRange r = {a, z};
  return r;
}
/* The first tile start s, s + step, ... below end whose rows' ids meet
 * `own` (all of them without documents); end if none. */
static __device__ __forceinline__ int64_t fm__fa_next_tile(const int32_t *segb, FmFaRange own, int64_t s, int64_t end,
                                                           int step, int64_t T) {
  if (!segb) return s < end ? s : end;
  for (; s < end; s += step) {
    const FmFaRange r = fm__fa_range(segb, s, (int)(T - s < step ? T - s : step));
    if (!(r.hi < own.lo || r.lo > own.hi)) return s;
  }
  return end;
}

/* The K/V tiles (BC keys each) that a query tile's rows [t0, t0 + ROWS) can
 * see, in order: causal, so below the tile's end; with documents, only the
 * tiles whose ids meet the query tile's (fm__fa_next_tile). stage() waits for
 * the previous tile's readers, puts tile s0 (its nk keys, zero-padded) and
 * its ids into shared memory, finds the next tile s1 and, with PF, issues
 * that tile's loads so they overlap this tile's work. The forward and the dQ
 * pass walk the same tiles this way. */
template <int HS, int BC, bool PF>
struct FmFaKvWalk {
  FmFaStage<HS, BC> stk, stv;
  FmFaRange own;
  int64_t kend, s0, s1;
  /* The kernel's (b, g) and ids stay arguments: a's fields are read from the
   * kernel's parameters, not kept in registers across the loop. */
  __device__ __forceinline__ void begin(const FmFaArgs &a, int64_t b, int64_t g, const int32_t *segb, int64_t t0) {
    const int64_t T = a.T;
    kend = T < t0 + FM__FA_ROWS ? T : t0 + FM__FA_ROWS;
    const int nown = (int)(T - t0 < FM__FA_ROWS ? T - t0 : FM__FA_ROWS);
    own = segb ? fm__fa_range(segb, t0, nown) : FmFaRange{0, 0};
    s0 = fm__fa_next_tile(segb, own, 0, kend, BC, T);
    s1 = kend;
    if (PF && s0 < kend) fetch(a, b, g, s0);
  }
  __device__ __forceinline__ void fetch(const FmFaArgs &a, int64_t b, int64_t g, int64_t s) {
    const int64_t T = a.T, ldkv = a.NKV * HS;
    const int n = (int)(T - s < BC ? T - s : BC);
    stk.fetch(a.k + (b * T + s) * ldkv + g * HS, ldkv, n);
    stv.fetch(a.v + (b * T + s) * ldkv + g * HS, ldkv, n);
  }
  __device__ __forceinline__ void stage(const FmFaArgs &a, int64_t b, int64_t g, const int32_t *segb, uint16_t *sK,
                                        uint16_t *sV, int32_t *sSeg) {
    const int64_t T = a.T, ldkv = a.NKV * HS;
    const int nk = (int)(T - s0 < BC ? T - s0 : BC);
    __syncthreads(); /* the previous tile's readers are done */
    if (PF) {
      stk.store(sK);
      stv.store(sV);
    } else {
      FmFaStage<HS, BC>::copy(sK, a.k + (b * T + s0) * ldkv + g * HS, ldkv, nk);
      FmFaStage<HS, BC>::copy(sV, a.v + (b * T + s0) * ldkv + g * HS, ldkv, nk);
    }
    for (int i = threadIdx.x; i < BC; i += FM__FA_THREADS) sSeg[i] = segb && i < nk ? segb[s0 + i] : 0;
    __syncthreads();
    s1 = fm__fa_next_tile(segb, own, s0 + BC, kend, BC, T);
    if (PF && s1 < kend) fetch(a, b, g, s1); /* the next tile's loads overlap this tile's work */
  }
};

/* ---- forward ------------------------------------------------------------------ */
template <int HS>
struct FmFaFwd {
  static constexpr int BC = 64, NC = BC / 8, NT = HS / 8;
  static constexpr size_t smem = (size_t)(FM__FA_ROWS + 2 * BC) * (HS + 8) * 2 + BC * 4;
  static constexpr bool PF = FM__FA_PF_FWD;
};

template <int HS>
static __global__ void __launch_bounds__(FM__FA_THREADS) fm__fa_fwd_kernel(float *out, float *lse, FmFaArgs a) {
  typedef FmFaFwd<HS> P;
  FM_DYN_SMEM(Fm4f, smem);
  uint16_t *sQ = (uint16_t *)smem, *sK = sQ + FM__FA_ROWS * (HS + 8), *sV = sK + P::BC * (HS + 8);
  int32_t *sSeg = (int32_t *)(sV + P::BC * (HS + 8));
  const int64_t T = a.T, nqt = (T + FM__FA_ROWS - 1) / FM__FA_ROWS, BH = a.B * a.NH;
  const int64_t bh = blockIdx.x % BH, t0 = (nqt - 1 - blockIdx.x / BH) * FM__FA_ROWS; /* late tiles first */
  const int64_t b = bh / a.NH, h = bh % a.NH, g = h / (a.NH / a.NKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int64_t r0 = t0 + 16 * warp + (lane >> 2); /* this lane's rows r0, r0 + 8 */
  const int32_t *segb = a.seg ? a.seg + b * T : NULL;
  const int32_t rs[2] = {segb && r0 < T ? segb[r0] : 0, segb && r0 + 8 < T ? segb[r0 + 8] : 0};

  const int64_t ldq = a.NH * HS; /* the bf16 copies' */
  FmFaStage<HS, FM__FA_ROWS>::copy(sQ, a.q + (b * T + t0) * ldq + h * HS, ldq,
                                   (int)(T - t0 < FM__FA_ROWS ? T - t0 : FM__FA_ROWS));
  float o[P::NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  FM__UNROLL
  for (int n = 0; n < P::NT; n++) {
    FM__UNROLL
    for (int i = 0; i < 4; i++) o[n][i] = 0.0f;
  }

  FmFaKvWalk<HS, P::BC, P::PF> kv;
  for (kv.begin(a, b, g, segb, t0); kv.s0 < kv.kend; kv.s0 = kv.s1) {
    kv.stage(a, b, g, segb, sK, sV, sSeg);
    const int64_t s0 = kv.s0;
    const uint32_t vis = fm__fa_vis<P::NC>(r0, s0, T, 1, rs, sSeg);
    if (!__any_sync(0xffffffffu, vis != 0)) continue; /* the warp's rows see nothing here */

    float s[P::NC][4];
    fm__fa_abt<HS, P::NC>(s, sQ, 16 * warp, sK);
    FM__UNROLL
    for (int hr = 0; hr < 2; hr++) { /* row r0 + 8 hr: elements 2 hr, 2 hr + 1 */
      float mx = -INFINITY;
      FM__UNROLL
      for (int n = 0; n < P::NC; n++) {
        FM__UNROLL
        for (int e = 0; e < 2; e++) {
          const int i = 2 * hr + e;
          s[n][i] = fm_mulf(s[n][i], a.scale2);
          if ((vis >> (n * 4 + i)) & 1u) mx = fmaxf(mx, s[n][i]);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(m[hr], mx);
      /* mnew = -inf: nothing visible yet; every p below is 0 and O is 0 */
      const float alpha = mnew == -INFINITY ? 1.0f : exp2f(fm_subf(m[hr], mnew));
      float sum = 0.0f;
      FM__UNROLL
      for (int n = 0; n < P::NC; n++) {
        FM__UNROLL
        for (int e = 0; e < 2; e++) {
          const int i = 2 * hr + e;
          s[n][i] = (vis >> (n * 4 + i)) & 1u ? exp2f(fm_subf(s[n][i], mnew)) : 0.0f;
          sum = fm_addf(sum, s[n][i]);
        }
      }
      l[hr] = fm_addf(fm_mulf(l[hr], alpha), sum);
      m[hr] = mnew;
      FM__UNROLL
      for (int n = 0; n < P::NT; n++) {
        FM__UNROLL
        for (int e = 0; e < 2; e++) o[n][2 * hr + e] = fm_mulf(o[n][2 * hr + e], alpha);
      }
    }
    fm__fa_pb<HS, P::NC>(o, s, sV);
  }

  FM__UNROLL
  for (int hr = 0; hr < 2; hr++) {
    float lr = l[hr];
    lr = fm_addf(lr, __shfl_xor_sync(0xffffffffu, lr, 1));
    lr = fm_addf(lr, __shfl_xor_sync(0xffffffffu, lr, 2));
    const int64_t t = r0 + 8 * hr;
    if (t >= T) continue;
    const float inv = fm_divf(1.0f, lr); /* lr > 0: key t is always visible from t */
    float *orow = out + (b * T + t) * a.NH * HS + h * HS;
    FM__UNROLL
    for (int n = 0; n < P::NT; n++) {
      FM__UNROLL
      for (int e = 0; e < 2; e++) orow[8 * n + 2 * tq + e] = fm_mulf(o[n][2 * hr + e], inv);
    }
    if (tq == 0)
      lse[(b * a.NH + h) * T + t] = (float)fm__dadd(fm__dmul((double)m[hr], 0.69314718055994531), log((double)lr));
  }
}

/* ---- backward: D = rowsum(dout * out) ------------------------------------------- */
/* One warp per (b, h, t): lane partials in double, fixed butterfly, rounded
 * once to float (the CPU op's block_D sums in double too, in another order).
 * dout is bf16 here (its copy) as in dP = dout V^T, so that D is the row's
 * sum_s P dP and the rows of dS = P (dP - D) sum to zero as they should: with
 * fp32 dout here, D would differ from it by up to 2^-9 sum|dout out|, and
 * that error, not cancelled, would reach every dS of the row. */
static __global__ void fm__fa_D_kernel(float *D, const uint16_t *dout, const float *out, int64_t B, int64_t T,
                                       int64_t NH, int64_t HS) {
  const int64_t row = (int64_t)blockIdx.x * (FM__FA_THREADS / 32) + (threadIdx.x >> 5); /* (b, h, t) */
  if (row >= B * NH * T) return;
  const int64_t t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const int64_t off = (b * T + t) * NH * HS + h * HS;
  double s = 0.0;
  for (int64_t d = threadIdx.x & 31; d < HS; d += 32)
    s = fm__dadd(s, fm__dmul((double)fm_bf16_to_f32(dout[off + d]), out[off + d]));
  s = fm__warp_sum_d(s);
  if ((threadIdx.x & 31) == 0) D[row] = (float)s;
}

/* ---- backward: dK, dV ------------------------------------------------------------ */
template <int HS>
struct FmFaDkv {
  static constexpr int BQ = HS == 128 ? 16 : 64, NC = BQ / 8, NT = HS / 8;
  /* prefetch the next query tile (no room in 255 registers at HS 128) */
  static constexpr bool PF = FM__FA_PF_DKV;
  static constexpr size_t smem = (size_t)(2 * FM__FA_ROWS + 2 * BQ) * (HS + 8) * 2 + 3 * BQ * 4;
};

template <int HS>
static __global__ void __launch_bounds__(FM__FA_THREADS)
    fm__fa_dkv_kernel(float *dk, float *dv, const float *lse, const float *D, FmFaArgs a) {
  typedef FmFaDkv<HS> P;
  FM_DYN_SMEM(Fm4f, smem);
  uint16_t *sK = (uint16_t *)smem, *sV = sK + FM__FA_ROWS * (HS + 8), *sQ = sV + FM__FA_ROWS * (HS + 8),
           *sdO = sQ + P::BQ * (HS + 8);
  float *sL = (float *)(sdO + P::BQ * (HS + 8)), *sD = sL + P::BQ;
  int32_t *sSeg = (int32_t *)(sD + P::BQ);
  const int64_t T = a.T, BG = a.B * a.NKV, rep = a.NH / a.NKV, ldq = a.NH * HS, ldkv = a.NKV * HS;
  const int64_t bg = blockIdx.x % BG, s0 = (blockIdx.x / BG) * FM__FA_ROWS; /* early key tiles (most work) first */
  const int64_t b = bg / a.NKV, g = bg % a.NKV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int64_t r0 = s0 + 16 * warp + (lane >> 2); /* this lane's keys r0, r0 + 8 */
  const int32_t *segb = a.seg ? a.seg + b * T : NULL;
  const int32_t rs[2] = {segb && r0 < T ? segb[r0] : 0, segb && r0 + 8 < T ? segb[r0 + 8] : 0};

  const int nk = (int)(T - s0 < FM__FA_ROWS ? T - s0 : FM__FA_ROWS);
  FmFaStage<HS, FM__FA_ROWS>::copy(sK, a.k + (b * T + s0) * ldkv + g * HS, ldkv, nk);
  FmFaStage<HS, FM__FA_ROWS>::copy(sV, a.v + (b * T + s0) * ldkv + g * HS, ldkv, nk);
  float ak[P::NT][4], av[P::NT][4];
  FM__UNROLL
  for (int n = 0; n < P::NT; n++) {
    FM__UNROLL
    for (int i = 0; i < 4; i++) ak[n][i] = av[n][i] = 0.0f;
  }

  /* the group's query heads, then the query tiles t0 >= the first key, in
   * order, as one sequence of steps so the next step's loads can be in flight */
  const int64_t tstart = (s0 / P::BQ) * P::BQ, ntq = (T - tstart + P::BQ - 1) / P::BQ, steps = rep * ntq;
  FmFaStage<HS, P::BQ> pq, pd;
  const FmFaRange own = segb ? fm__fa_range(segb, s0, nk) : FmFaRange{0, 0};
  /* the first step from `it` whose query tile meets the key rows' documents */
  auto next_step = [&](int64_t i) -> int64_t {
    for (; segb && i < steps; i++) {
      const int64_t tq0 = tstart + (i % ntq) * P::BQ;
      const FmFaRange r = fm__fa_range(segb, tq0, (int)(T - tq0 < P::BQ ? T - tq0 : P::BQ));
      if (!(r.hi < own.lo || r.lo > own.hi)) break;
    }
    return i < steps ? i : steps;
  };
  int64_t it = next_step(0);
  if (P::PF && it < steps) {
    const int64_t h0 = g * rep + it / ntq, tq0 = tstart + (it % ntq) * P::BQ;
    const int nq0 = (int)(T - tq0 < P::BQ ? T - tq0 : P::BQ);
    pq.fetch(a.q + (b * T + tq0) * ldq + h0 * HS, ldq, nq0);
    pd.fetch(a.dout + (b * T + tq0) * ldq + h0 * HS, ldq, nq0);
  }
  for (int64_t it1 = steps; it < steps; it = it1) {
    const int64_t h = g * rep + it / ntq, t0 = tstart + (it % ntq) * P::BQ;
    const int nq = (int)(T - t0 < P::BQ ? T - t0 : P::BQ);
    __syncthreads();
    if (P::PF) {
      pq.store(sQ);
      pd.store(sdO);
    } else {
      FmFaStage<HS, P::BQ>::copy(sQ, a.q + (b * T + t0) * ldq + h * HS, ldq, nq);
      FmFaStage<HS, P::BQ>::copy(sdO, a.dout + (b * T + t0) * ldq + h * HS, ldq, nq);
    }
    for (int i = threadIdx.x; i < P::BQ; i += FM__FA_THREADS) {
      const int64_t li = (b * a.NH + h) * T + t0 + i;
      sL[i] = i < nq ? fm_mulf(lse[li], (float)FM__FA_LOG2E) : 0.0f;
      sD[i] = i < nq ? D[li] : 0.0f;
      sSeg[i] = segb && i < nq ? segb[t0 + i] : 0;
    }
    __syncthreads();
    it1 = next_step(it + 1);
    if (P::PF && it1 < steps) {
      const int64_t h1 = g * rep + it1 / ntq, t1 = tstart + (it1 % ntq) * P::BQ;
      const int nq1 = (int)(T - t1 < P::BQ ? T - t1 : P::BQ);
      pq.fetch(a.q + (b * T + t1) * ldq + h1 * HS, ldq, nq1);
      pd.fetch(a.dout + (b * T + t1) * ldq + h1 * HS, ldq, nq1);
    }
    const uint32_t vis = fm__fa_vis<P::NC>(r0, t0, T, 0, rs, sSeg);
    if (!__any_sync(0xffffffffu, vis != 0)) continue;

    float p[P::NC][4], ds[P::NC][4];
    fm__fa_abt<HS, P::NC>(p, sK, 16 * warp, sQ);   /* S^T = K Q^T */
    fm__fa_abt<HS, P::NC>(ds, sV, 16 * warp, sdO); /* dP^T = V dO^T */
    FM__UNROLL
    for (int n = 0; n < P::NC; n++) {
      FM__UNROLL
      for (int i = 0; i < 4; i++) {
        const int c = 8 * n + 2 * tq + (i & 1);
        const float pv = (vis >> (n * 4 + i)) & 1u ? exp2f(fm_subf(fm_mulf(p[n][i], a.scale2), sL[c])) : 0.0f;
        p[n][i] = pv;
        ds[n][i] = fm_mulf(pv, fm_subf(ds[n][i], sD[c]));
      }
    }
    fm__fa_pb<HS, P::NC>(av, p, sdO); /* dV += P^T dO */
    fm__fa_pb<HS, P::NC>(ak, ds, sQ); /* dK += dS^T Q */
  }

  FM__UNROLL
  for (int hr = 0; hr < 2; hr++) {
    const int64_t s = r0 + 8 * hr;
    if (s >= T) continue;
    float *dkr = dk ? dk + (b * T + s) * a.ldkv + g * HS : NULL, *dvr = dv ? dv + (b * T + s) * a.ldkv + g * HS : NULL;
    FM__UNROLL
    for (int n = 0; n < P::NT; n++) {
      FM__UNROLL
      for (int e = 0; e < 2; e++) {
        const int d = 8 * n + 2 * tq + e;
        if (dkr) dkr[d] = fm_addf(dkr[d], fm_mulf(a.scale, ak[n][2 * hr + e]));
        if (dvr) dvr[d] = fm_addf(dvr[d], av[n][2 * hr + e]);
      }
    }
  }
}

/* ---- backward: dQ ----------------------------------------------------------------- */
template <int HS>
struct FmFaDq {
  static constexpr int BC = HS == 128 ? 32 : 64, NC = BC / 8, NT = HS / 8;
  static constexpr size_t smem = (size_t)(2 * FM__FA_ROWS + 2 * BC) * (HS + 8) * 2 + BC * 4;
  static constexpr bool PF = FM__FA_PF_DQ;
};

template <int HS>
static __global__ void __launch_bounds__(FM__FA_THREADS)
    fm__fa_dq_kernel(float *dq, const float *lse, const float *D, FmFaArgs a) {
  typedef FmFaDq<HS> P;
  FM_DYN_SMEM(Fm4f, smem);
  uint16_t *sQ = (uint16_t *)smem, *sdO = sQ + FM__FA_ROWS * (HS + 8), *sK = sdO + FM__FA_ROWS * (HS + 8),
           *sV = sK + P::BC * (HS + 8);
  int32_t *sSeg = (int32_t *)(sV + P::BC * (HS + 8));
  const int64_t T = a.T, nqt = (T + FM__FA_ROWS - 1) / FM__FA_ROWS, BH = a.B * a.NH, ldq = a.NH * HS;
  const int64_t bh = blockIdx.x % BH, t0 = (nqt - 1 - blockIdx.x / BH) * FM__FA_ROWS;
  const int64_t b = bh / a.NH, h = bh % a.NH, g = h / (a.NH / a.NKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int64_t r0 = t0 + 16 * warp + (lane >> 2);
  const int32_t *segb = a.seg ? a.seg + b * T : NULL;
  const int32_t rs[2] = {segb && r0 < T ? segb[r0] : 0, segb && r0 + 8 < T ? segb[r0 + 8] : 0};
  float L[2], Dr[2];
  FM__UNROLL
  for (int hr = 0; hr < 2; hr++) {
    const int64_t t = r0 + 8 * hr, li = (b * a.NH + h) * T + t;
    L[hr] = t < T ? fm_mulf(lse[li], (float)FM__FA_LOG2E) : 0.0f;
    Dr[hr] = t < T ? D[li] : 0.0f;
  }

  const int nq = (int)(T - t0 < FM__FA_ROWS ? T - t0 : FM__FA_ROWS);
  FmFaStage<HS, FM__FA_ROWS>::copy(sQ, a.q + (b * T + t0) * ldq + h * HS, ldq, nq);
  FmFaStage<HS, FM__FA_ROWS>::copy(sdO, a.dout + (b * T + t0) * ldq + h * HS, ldq, nq);
  float acc[P::NT][4];
  FM__UNROLL
  for (int n = 0; n < P::NT; n++) {
    FM__UNROLL
    for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
  }

  FmFaKvWalk<HS, P::BC, P::PF> kv;
  for (kv.begin(a, b, g, segb, t0); kv.s0 < kv.kend; kv.s0 = kv.s1) {
    kv.stage(a, b, g, segb, sK, sV, sSeg);
    const int64_t s0 = kv.s0;
    const uint32_t vis = fm__fa_vis<P::NC>(r0, s0, T, 1, rs, sSeg);
    if (!__any_sync(0xffffffffu, vis != 0)) continue;

    float p[P::NC][4], ds[P::NC][4];
    fm__fa_abt<HS, P::NC>(p, sQ, 16 * warp, sK);   /* S = Q K^T */
    fm__fa_abt<HS, P::NC>(ds, sdO, 16 * warp, sV); /* dP = dO V^T */
    FM__UNROLL
    for (int n = 0; n < P::NC; n++) {
      FM__UNROLL
      for (int i = 0; i < 4; i++) {
        const int hr = i >> 1;
        const float pv = (vis >> (n * 4 + i)) & 1u ? exp2f(fm_subf(fm_mulf(p[n][i], a.scale2), L[hr])) : 0.0f;
        ds[n][i] = fm_mulf(pv, fm_subf(ds[n][i], Dr[hr]));
      }
    }
    fm__fa_pb<HS, P::NC>(acc, ds, sK); /* dQ += dS K */
  }

  FM__UNROLL
  for (int hr = 0; hr < 2; hr++) {
    const int64_t t = r0 + 8 * hr;
    if (t >= T) continue;
    float *dr = dq + (b * T + t) * a.ldq + h * HS;
    FM__UNROLL
    for (int n = 0; n < P::NT; n++) {
      FM__UNROLL
      for (int e = 0; e < 2; e++) {
        const int d = 8 * n + 2 * tq + e;
        dr[d] = fm_addf(dr[d], fm_mulf(a.scale, acc[n][2 * hr + e]));
      }
    }
  }
}

/* ---- host side ---------------------------------------------------------------- */
/* dst (rows, cols) dense = bf16(src (rows, cols), row stride ld); cols even. */
static __global__ void fm__fa_to_bf16_kernel(uint32_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t half = cols / 2;
  FM__CUDA_FOR_EACH(i, rows * half) {
    const float *x = src + (i / half) * ld + 2 * (i % half);
    dst[i] = fm__bf16x2(x[0], x[1]);
  }
}
/* Grow-once device buffers (the first step allocates): the bf16 copies of
 * q, k, v, dout and D (B, NH, T). */
enum { FM__FA_Q, FM__FA_K, FM__FA_V, FM__FA_DO, FM__FA_D, FM__FA_NBUF };
static void *fm__fa_buf[FM__FA_NBUF];
static int64_t fm__fa_cap[FM__FA_NBUF];
static void *fm__fa_scratch(int slot, int64_t bytes) {
  if (bytes > fm__fa_cap[slot]) {
    fm__dev_free(fm__fa_buf[slot]);
    fm__fa_buf[slot] = fm__dev_alloc_for(bytes, FM_MEM_ATTN);
    fm__fa_cap[slot] = bytes;
  }
  return fm__fa_buf[slot];
}
static const uint16_t *fm__fa_to_bf16(int slot, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  uint32_t *dst = (uint32_t *)fm__fa_scratch(slot, rows * cols * 2);
  FM_LAUNCH(fm__fa_to_bf16_kernel, fm__cuda_grid(rows * cols / 2), FM__CUDA_BLOCK, 0, dst, src, rows, cols, ld);
  return (const uint16_t *)dst;
}

static FmFaArgs fm__fa_args(const float *q, const float *k, const float *v, const float *dout, int64_t ldq,
                            int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS) {
  const double scale = 1.0 / sqrt((double)HS);
  const int64_t N = B * T;
  const FmFaArgs a = {fm__fa_to_bf16(FM__FA_Q, q, N, NH * HS, ldq),
                      fm__fa_to_bf16(FM__FA_K, k, N, NKV * HS, ldkv),
                      fm__fa_to_bf16(FM__FA_V, v, N, NKV * HS, ldkv),
                      dout ? fm__fa_to_bf16(FM__FA_DO, dout, N, NH * HS, NH * HS) : NULL,
                      ldq,
                      ldkv,
                      seg,
                      B,
                      T,
                      NH,
                      NKV,
                      (float)scale,
                      (float)(scale * FM__FA_LOG2E)};
  return a;
}
/* Kernels asking for more than the default 48 KiB of dynamic shared memory
 * opt in once (the emulator allows up to 227 KiB). */
template <class K>
static void fm__fa_smem_attr(K kernel, size_t bytes, int *done) {
#ifndef FM_SIMT
  if (!*done && bytes > 48 * 1024)
    FM_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
#else
  (void)kernel;
  (void)bytes;
#endif
  *done = 1;
}

/* The fp32 arrays are read as pairs (the conversion) and the outputs as
 * scalars: even row strides and head sizes 64 or 128 are all it needs. */
extern "C" int FM_CUDA_OP(attention_flash_fits)(const float *q, const float *k, const float *v, int64_t ldq,
                                                int64_t ldkv, int64_t HS) {
  (void)q, (void)k, (void)v;
  return (HS == 64 || HS == 128) && ldq % 2 == 0 && ldkv % 2 == 0;
}

template <int HS>
static void fm__fa_fwd(float *out, float *lse, const FmFaArgs &a) {
  static int attr = 0;
  fm__fa_smem_attr(fm__fa_fwd_kernel<HS>, FmFaFwd<HS>::smem, &attr);
  const int64_t blocks = (a.T + FM__FA_ROWS - 1) / FM__FA_ROWS * a.B * a.NH;
  FM_LAUNCH(fm__fa_fwd_kernel<HS>, (unsigned)blocks, FM__FA_THREADS, FmFaFwd<HS>::smem, out, lse, a);
}

static void fm__fa_check(const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv, int64_t NH,
                         int64_t NKV, int64_t HS, int64_t B, int64_t T) {
  if (NKV < 1 || NH % NKV != 0)
    fm_abort_one(1, "attention: NH = %lld is not a multiple of NKV = %lld", (long long)NH, (long long)NKV);
  if (!FM_CUDA_OP(attention_flash_fits)(q, k, v, ldq, ldkv, HS))
    fm_abort_one(1,
                 "attention (CUDA tensor cores): head size %lld with row strides %lld, %lld: needs head size 64 or "
                 "128 and even strides (the fp32 kernels take the rest)",
                 (long long)HS, (long long)ldq, (long long)ldkv);
  if (B * NH * ((T + FM__FA_ROWS - 1) / FM__FA_ROWS) >= ((int64_t)1 << 31))
    fm_abort_one(1, "attention (CUDA tensor cores): %lld x %lld x %lld blocks exceed the grid", (long long)B,
                 (long long)NH, (long long)T);
}

extern "C" void FM_CUDA_OP(attention_flash_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS) {
  fm__fa_check(q, k, v, ldq, ldkv, NH, NKV, HS, B, T);
  if (B * T * NH <= 0) return;
  const FmFaArgs a = fm__fa_args(q, k, v, NULL, ldq, ldkv, seg, B, T, NH, NKV, HS);
  if (HS == 64)
    fm__fa_fwd<64>(out, lse, a);
  else
    fm__fa_fwd<128>(out, lse, a);
}

template <int HS>
static void fm__fa_bwd(float *dq, float *dk, float *dv, const float *lse, const float *D, const FmFaArgs &a) {
  const int64_t nt = (a.T + FM__FA_ROWS - 1) / FM__FA_ROWS;
  if (dk || dv) {
    static int attr = 0;
    fm__fa_smem_attr(fm__fa_dkv_kernel<HS>, FmFaDkv<HS>::smem, &attr);
    FM_LAUNCH(fm__fa_dkv_kernel<HS>, (unsigned)(nt * a.B * a.NKV), FM__FA_THREADS, FmFaDkv<HS>::smem, dk, dv, lse, D,
              a);
  }
  if (dq) {
    static int attr = 0;
    fm__fa_smem_attr(fm__fa_dq_kernel<HS>, FmFaDq<HS>::smem, &attr);
    FM_LAUNCH(fm__fa_dq_kernel<HS>, (unsigned)(nt * a.B * a.NH), FM__FA_THREADS, FmFaDq<HS>::smem, dq, lse, D, a);
  }
}

extern "C" void FM_CUDA_OP(attention_flash_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                                const float *lse, const float *q, const float *k, const float *v,
                                                int64_t ldq, int64_t ldkv, const int32_t *seg, int64_t B, int64_t T,
                                                int64_t NH, int64_t NKV, int64_t HS) {
  fm__fa_check(q, k, v, ldq, ldkv, NH, NKV, HS, B, T);
  if (B * T * NH <= 0 || (!dq && !dk && !dv)) return;
  const int64_t rows = B * NH * T;
  const FmFaArgs a = fm__fa_args(q, k, v, dout, ldq, ldkv, seg, B, T, NH, NKV, HS);
  float *D = (float *)fm__fa_scratch(FM__FA_D, rows * (int64_t)sizeof(float));
  FM_LAUNCH(fm__fa_D_kernel, (unsigned)((rows + 3) / 4), FM__FA_THREADS, 0, D, a.dout, out, B, T, NH, HS);
  if (HS == 64)
    fm__fa_bwd<64>(dq, dk, dv, lse, D, a);
  else
    fm__fa_bwd<128>(dq, dk, dv, lse, D, a);
}
