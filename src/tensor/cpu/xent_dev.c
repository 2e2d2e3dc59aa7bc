/* cpu/xent_dev.c: xent_fwd_bwd_dev on the CPU, the loss stored instead of
 * returned (host memory is the backend's memory here). */
#include "fmhpc/backend.h"

void fm_cpu_xent_fwd_bwd_dev(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                             const float *weight, int64_t N, int64_t C, int64_t V, float *scratch, double *loss_out) {
  *loss_out = fm_cpu_xent_fwd_bwd(dx, dw, x, w, targets, weight, N, C, V, scratch);
}
