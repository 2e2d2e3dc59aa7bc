/* clip.c: the global gradient norm over fixed blocks of the flat vector and
 * the clip factor. Block j covers elements [j*block, (j+1)*block); its sum of
 * squares is one sequential double sum in element order, so the norm has the
 * same bits for any rank count (ranks own whole blocks: fm_zero_range) and
 * any thread count (a thread owns whole blocks). */
#include <math.h>

#include "fmhpc/core.h"
#include "fmhpc/dist.h"

int64_t fm_clip_nblocks(int64_t lo, int64_t hi, int64_t block) { return hi > lo ? (hi - lo + block - 1) / block : 0; }

int fm_clip_block_sumsq(const float *g, int64_t lo, int64_t hi, int64_t block, double *out_blocks) {
  if (block < 1 || lo < 0 || hi < lo || lo % block != 0) return FM_EINVAL;
  const int64_t nb = fm_clip_nblocks(lo, hi, block), n = hi - lo;
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t j = 0; j < nb; j++) {
    const int64_t a = j * block, b = a + block < n ? a + block : n;
    double s = 0.0;
    for (int64_t i = a; i < b; i++) s += (double)g[i] * (double)g[i]; /* each square is exact in double */
    out_blocks[j] = s;
  }
  return 0;
}

double fm_clip_norm(const double *block_sumsq, int64_t nblocks) {
  double s = 0.0;
  for (int64_t j = 0; j < nblocks; j++) s += block_sumsq[j];
  return sqrt(s);
}

double fm_clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  if (!isfinite(norm)) return NAN;
  const double coef = max_norm / (norm + 1e-6); /* torch.nn.utils.clip_grad_norm_ */
  return coef < 1.0 ? coef : 1.0;
}
