/* fm_test_main_mpi.c: main() for unit tests that run under mpirun. Every rank
 * runs the selected cases; the binary fails if any rank saw a failure. */
#include "fm_test.h"
#include "fmhpc/runtime.h"

int main(int argc, char **argv) {
  fm_runtime_init(&argc, &argv);
  int rc = fm_test_main(argc, argv);
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  fm_runtime_finalize();
  return worst;
}
