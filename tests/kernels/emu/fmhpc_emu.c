/* fmhpc_emu.c: the fmhpc executable with an emulated GPU, built for tests
 * only (tests/kernels/tests.cmake, target fmhpc_emu). backend = 'cuda' (and
 * 'auto') is the table of CUDA kernels of src/tensor/cuda/ compiled for the
 * host SIMT emulator (src/tensor/cuda/emu): every kernel runs as blocks of
 * fibers in host memory, and the table says host_accessible = 0, so the
 * train loop takes its device path (device arenas, host copies for the
 * reduction and the optimizer) exactly as on a GPU. Ops without a CUDA kernel
 * (ops.def `nocuda`) stay NULL, as in the real CUDA table.
 *
 * FMHPC_EMU_SCHEDULE picks the thread order of every launch: `forward`
 * (default), `reverse`, or `random:SEED`. Two schedules giving different bits
 * is a race or an order-dependent reduction in some kernel.
 * FMHPC_EMU_DROP_OP=NAME leaves op NAME out of the table (tests of the
 * backend choice: a build that lacks an op the run needs).
 *
 * Everything else is src/main.c, compiled here with main renamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/simt.h"
#include "fmhpc/backend.h"

#include "emu_backend.h"

int fmhpc_main(int argc, char **argv);

int main(int argc, char **argv) {
  const char *s = getenv("FMHPC_EMU_SCHEDULE");
  unsigned long long seed = 0;
  if (!s || !s[0] || strcmp(s, "forward") == 0) {
    fm_simt_set_schedule(FM_SIMT_FORWARD, 0);
  } else if (strcmp(s, "reverse") == 0) {
    fm_simt_set_schedule(FM_SIMT_REVERSE, 0);
  } else if (sscanf(s, "random:%llu", &seed) == 1) {
    fm_simt_set_schedule(FM_SIMT_RANDOM, seed);
  } else {
    fprintf(stderr, "fmhpc_emu: FMHPC_EMU_SCHEDULE='%s': expected forward, reverse or random:SEED\n", s);
    return 2;
  }
  static FmBackend table;
  table = emu;
  const char *drop = getenv("FMHPC_EMU_DROP_OP");
  if (drop && drop[0]) {
    int found = 0;
#define FM_OP(name, cuda, use, ret, params) \
  if (strcmp(drop, #name) == 0) {           \
    table.name = NULL;                      \
    found = 1;                              \
  }
#include "fmhpc/ops.def"
#undef FM_OP
    if (!found) {
      fprintf(stderr, "fmhpc_emu: FMHPC_EMU_DROP_OP='%s': no such op in fmhpc/ops.def\n", drop);
      return 2;
    }
  }
  fm_backend_set_cuda_stand_in(&table);
  return fmhpc_main(argc, argv);
}
