/* vocab_xent.c: vocab-parallel softmax cross-entropy (Megatron-LM's
 * VocabParallelCrossEntropy) over a tensor-parallel group, on host memory.
 * Rank r holds rows [v0, v0 + Vl) of the output projection; the logits are
 * made one vocab chunk at a time (N x FM_VX_VC floats) and never gathered:
 *
 *   pass 1, per row n: this rank's max m_r and sum l_r = sum exp(z - m_r)
 *           (double, column order), and the target's logit when it is ours;
 *   exchange: (m_r, l_r, z_t) of every rank by one all-gather of 3N doubles,
 *           combined in rank order: M = max m_r, L = sum_r l_r exp(m_r - M),
 *           lse = M + log L (the same bits on every rank);
 *   pass 2 (gradients): dlogits = (softmax - onehot) * weight per chunk,
 *           dw_shard += dlogits^T x, dx_r = sum of dlogits w_chunk, then
 *           the dx_r are summed over the group in rank order
 *           (fm_comm_sum_ordered) and added to dx.
 *
 * At tp = 1 this is the plain fused op's math with a different chunking, so
 * it agrees with it within fp32 rounding, not bitwise. */
#include <math.h>
#include <string.h>

#include "fmhpc/model.h"

enum { FM_VX_VC = 2048 }; /* vocab rows per chunk */

/* The logits tile's floats, even so the doubles after it are aligned. */
static int64_t tile_elems(int64_t N, int64_t Vl) {
  const int64_t vc = Vl < FM_VX_VC ? (Vl > 0 ? Vl : 1) : FM_VX_VC;
  return (N * vc + 1) / 2 * 2;
}

int64_t fm_vocab_xent_scratch_p(int P, int64_t N, int64_t C, int64_t Vl) {
  /* tile, 3N doubles mine + 3N*P gathered (2 floats each), this rank's dx part, the dx sum's scratch */
  return tile_elems(N, Vl) + N * 6 * (1 + (int64_t)P) + N * C + fm_comm_sum_ordered_scratch_p(P, N * C);
}
int64_t fm_vocab_xent_scratch(const FmComm *tp, int64_t N, int64_t C, int64_t Vl) {
  return fm_vocab_xent_scratch_p(tp->size, N, C, Vl);
}

double fm_vocab_xent_fwd_bwd(FmComm *tp, const FmBackend *be, float *dx, float *dw, const float *x, const float *w,
                             const int32_t *targets, const float *weight, int64_t N, int64_t C, int64_t v0,
                             int64_t Vl, float *scratch) {
  const int64_t vce = Vl < FM_VX_VC ? (Vl > 0 ? Vl : 1) : FM_VX_VC;
  const int P = tp->size;
  float *tile = scratch;
  double *mine = (double *)(void *)(scratch + tile_elems(N, Vl)); /* (N, 3): m, l, z_t */
  double *all = mine + 3 * N;                           /* (P, N, 3) */
  float *dxp = (float *)(void *)(all + 3 * N * P);
  float *sum_scratch = dxp + N * C;
  for (int64_t n = 0; n < N; n++) {
    mine[3 * n] = -INFINITY;
    mine[3 * n + 1] = 0.0;
    mine[3 * n + 2] = 0.0;
  }
  for (int64_t c0 = 0; c0 < Vl; c0 += vce) {
    const int64_t vc = Vl - c0 < vce ? Vl - c0 : vce;
    be->matmul_fwd(tile, x, w + c0 * C, NULL, N, C, vc);
    for (int64_t n = 0; n < N; n++) {
      const float *z = tile + n * vc;
      const int64_t t = weight[n] != 0.0f ? targets[n] - (v0 + c0) : -1;
      if (t >= 0 && t < vc) mine[3 * n + 2] = z[t];
      double mx = mine[3 * n];
      for (int64_t c = 0; c < vc; c++) mx = z[c] > mx ? z[c] : mx;
      double s = 0.0;
      for (int64_t c = 0; c < vc; c++) s += exp((double)z[c] - mx);
      mine[3 * n + 1] = mine[3 * n + 1] * exp(mine[3 * n] - mx) + s;
      mine[3 * n] = mx;
    }
  }
  FM_CHECK(fm_comm_allgather(tp, mine, all, 3 * N, FM_DT_F64));
  /* lse per row into mine[3n] (the same on every rank), loss in row order */
  double loss = 0.0;
  for (int64_t n = 0; n < N; n++) {
    double M = -INFINITY, L = 0.0, zt = 0.0;
    for (int r = 0; r < P; r++) M = all[(r * N + n) * 3] > M ? all[(r * N + n) * 3] : M;
    for (int r = 0; r < P; r++) {
      const double *a = all + (r * N + n) * 3;
      if (a[1] > 0.0) L += a[1] * exp(a[0] - M);
      zt += a[2]; /* one rank holds the target's logit, the others 0: exact */
    }
    const double lse = L > 0.0 ? M + log(L) : M; /* L = 0 only for an empty vocabulary */
    mine[3 * n] = lse;
    if (weight[n] != 0.0f) loss += (double)weight[n] * (lse - zt);
  }
  if (!dx && !dw) return loss;
  if (dx) memset(dxp, 0, (size_t)(N * C) * sizeof *dxp); /* this rank's part, summed over tp below */
  for (int64_t c0 = 0; c0 < Vl; c0 += vce) {
    const int64_t vc = Vl - c0 < vce ? Vl - c0 : vce;
    be->matmul_fwd(tile, x, w + c0 * C, NULL, N, C, vc);
    for (int64_t n = 0; n < N; n++) {
      float *z = tile + n * vc;
      const float wt = weight[n];
      if (wt == 0.0f) {
        memset(z, 0, (size_t)vc * sizeof *z);
        continue;
      }
      const double lse = mine[3 * n];
      const int64_t t = targets[n] - (v0 + c0);
      const double zt = t >= 0 && t < vc ? (double)z[t] : 0.0;
      for (int64_t c = 0; c < vc; c++) z[c] = (float)(exp((double)z[c] - lse) * (double)wt);
      if (t >= 0 && t < vc) z[t] = (float)((exp(zt - lse) - 1.0) * (double)wt);
    }
    be->matmul_bwd(dx ? dxp : NULL, dw ? dw + c0 * C : NULL, NULL, tile, x, w + c0 * C, N, C, vc);
  }
  if (dx) {
    FM_CHECK(fm_comm_sum_ordered(tp, dxp, N * C, sum_scratch));
    for (int64_t i = 0; i < N * C; i++) dx[i] += dxp[i];
  }
  return loss;
}
