/* zero.c: the ZeRO-1 shard map: which contiguous slice of the flat parameter
 * vector (and of the optimizer state) each data-parallel rank owns. */
#include "fmhpc/dist.h"

void fm_zero_range(int64_t n, int64_t align, int nranks, int rank, int64_t *lo, int64_t *hi) {
  const int64_t nb = (n + align - 1) / align;
  const int64_t b0 = nb * rank / nranks, b1 = nb * (rank + 1) / nranks;
  *lo = b0 * align < n ? b0 * align : n;
  *hi = b1 * align < n ? b1 * align : n;
}
