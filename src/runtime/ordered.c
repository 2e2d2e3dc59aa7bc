/* ordered.c: the deterministic sum of activations over a tensor-parallel
 * group (runtime.h, fm_comm_sum_ordered). A float MPI_SUM adds ranks in an
 * order the library chooses (and may change with the message size or the
 * library version); here the collective only moves values and the additions
 * are ours, in rank order. */
#include <string.h>

#include "fmhpc/runtime.h"

/* Elements per round: bounds the scratch a caller must give (P * CHUNK). */
enum { CHUNK = 1 << 20 };

int64_t fm_comm_sum_ordered_scratch_p(int P, int64_t n) { return (int64_t)P * (n < CHUNK ? n : CHUNK); }
int64_t fm_comm_sum_ordered_scratch(const FmComm *c, int64_t n) { return fm_comm_sum_ordered_scratch_p(c->size, n); }

int fm_comm_sum_ordered(FmComm *c, float *buf, int64_t n, float *scratch) {
  const int P = c->size;
  if (P == 1 || n == 0) return 0;
  for (int64_t a = 0; a < n; a += CHUNK) {
    const int64_t m = n - a < CHUNK ? n - a : CHUNK;
    int rc = fm_comm_allgather(c, buf + a, scratch, m, FM_DT_F32);
    if (rc) return rc;
    float *out = buf + a;
    memcpy(out, scratch, (size_t)m * sizeof *out);
    for (int r = 1; r < P; r++) { /* ((x0 + x1) + x2) + ...: one addition per element and rank */
      const float *x = scratch + (int64_t)r * m;
      for (int64_t i = 0; i < m; i++) out[i] += x[i];
    }
  }
  return 0;
}
