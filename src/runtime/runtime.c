/* runtime.c: process start and end. MPI_Init_thread (FUNNELED), the logging
 * rank, MPI_Abort as the abort hook for errors one rank sees alone, and the
 * clean all-ranks exit for errors every rank sees. The mesh is in mesh.c, the
 * collectives in comm_mpi.c and comm_nccl.c (which also counts CUDA devices:
 * CUDA calls stay in that one file of runtime/). */
#include "fmhpc/runtime.h"

#include <stdlib.h>
#include <time.h>

static int mpi_is_up(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/* Open MPI's launcher ends the whole job at the first MPI_Abort or non-zero
 * exit and may drop what the other ranks wrote but it has not yet forwarded:
 * rank 0's error message was lost that way in 2 of 6 failing 2-rank runs.
 * Rank 0 is the one that talks, so the others give it a moment to go first.
 * Only failing paths wait. */
static void let_rank0_go_first(void) {
  if (fm_log_rank() == 0) return;
  const struct timespec wait = {1, 0};
  nanosleep(&wait, NULL);
}

/* An error only this rank saw: the others may be waiting in a collective, so
 * exit() alone would leave them hanging until the batch limit. */
static void runtime_abort_hook(int code) {
  fflush(stdout);
  fflush(stderr);
  if (!mpi_is_up()) return;
  let_rank0_go_first();
  MPI_Abort(MPI_COMM_WORLD, code);
}

int fm_runtime_init(int *argc, char ***argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    /* FUNNELED: only the main thread calls MPI; OpenMP threads compute. */
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      fm_err("MPI_Init_thread failed");
      return FM_EMPI;
    }
    if (provided < MPI_THREAD_FUNNELED)
      fm_warn0("MPI provides thread level %d, below MPI_THREAD_FUNNELED; OpenMP regions must not call MPI", provided);
  }
  fm_set_abort_hook(runtime_abort_hook); /* from here on, fm_abort_one ends every rank */
  /* Errors come back as codes so FM_CHECK_MPI and comm_mpi.c can report the
   * failing call with rank and file:line before deciding how to end. */
  FM_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  fm_log_set_rank(rank, size);
  return 0;
}

void fm_runtime_finalize(void) {
  if (!mpi_is_up()) return;
  fflush(stdout);
  fflush(stderr);
  /* After Finalize MPI_Abort is illegal: fall back to a plain exit(). */
  fm_set_abort_hook(NULL);
  MPI_Finalize();
}

int fm_world_rank(void) {
  int rank = 0;
  if (mpi_is_up()) FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

int fm_world_size(void) {
  int size = 1;
  if (mpi_is_up()) FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

/* Every rank reached the same verdict (a bad deck, --check done), so a clean
 * finalize on all of them beats MPI_Abort's "job aborted" noise, and the batch
 * script sees `code` from every rank. */
void fm_exit_all(int code) {
  const int several = fm_world_size() > 1;
  fm_runtime_finalize();
  if (code != 0 && several) let_rank0_go_first();
  exit(code);
}
