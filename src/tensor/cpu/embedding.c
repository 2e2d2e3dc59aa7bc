/* cpu/embedding.c: token (+ learned position) embedding lookup and its
 * backward (GPT-2's wte/wpe; Llama's tok_embeddings with wpe NULL).
 *
 * Backward is a scatter-add: rows of dout go to the rows of dwte named by the
 * tokens (and of dwpe named by the positions). To stay deterministic without
 * atomics, threads own blocks of the C columns and each walks all N rows in
 * order: a token seen twice gets its two contributions added in token order,
 * whatever the thread count. */
#include "fmhpc/tensor.h"

#include "cpu_ops.h"

#define FM_EMB_OMP_MIN ((int64_t)1 << 14)
#define FM_EMB_CB      64 /* columns per task in backward */

void fm_cpu_embedding_fwd(float *out, const int32_t *tokens, const float *wte, const int32_t *pos, const float *wpe,
                          int64_t N, int64_t C) {
  if (wpe && !pos) fm_abort_one(1, "embedding: wpe given without positions");
#pragma omp parallel for schedule(static) if (N * C >= FM_EMB_OMP_MIN)
  for (int64_t n = 0; n < N; n++) {
    const float *te = wte + (int64_t)tokens[n] * C;
    float *o = out + n * C;
    if (wpe) {
      const float *pe = wpe + (int64_t)pos[n] * C;
#pragma omp simd
      for (int64_t c = 0; c < C; c++) o[c] = te[c] + pe[c];
    } else {
      for (int64_t c = 0; c < C; c++) o[c] = te[c];
    }
  }
}

void fm_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, const int32_t *pos,
                          int64_t N, int64_t C, int64_t V) {
  if (dwpe && !pos) fm_abort_one(1, "embedding backward: dwpe given without positions");
  for (int64_t n = 0; n < N; n++) {
    if (tokens[n] < 0 || tokens[n] >= V)
      fm_abort_one(1, "embedding backward: token %d at row %lld is outside [0, %lld)", (int)tokens[n], (long long)n,
                   (long long)V);
    if (dwpe && pos[n] < 0)
      fm_abort_one(1, "embedding backward: pos[%lld] = %d is negative", (long long)n, (int)pos[n]);
  }
  const int64_t nb = (C + FM_EMB_CB - 1) / FM_EMB_CB;
#pragma omp parallel for schedule(static) if (N * C >= FM_EMB_OMP_MIN)
  for (int64_t cb = 0; cb < nb; cb++) {
    const int64_t c0 = cb * FM_EMB_CB;
    const int64_t cn = C - c0 < FM_EMB_CB ? C - c0 : FM_EMB_CB;
    for (int64_t n = 0; n < N; n++) {
      const float *d = dout + n * C + c0;
      if (dwte) {
        float *g = dwte + (int64_t)tokens[n] * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) g[c] = g[c] + d[c];
      }
      if (dwpe) {
        float *g = dwpe + (int64_t)pos[n] * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) g[c] = g[c] + d[c];
      }
    }
  }
}
