/* bench_reduce.c: the data-parallel gradient exchange of one step, exact
 * (int64 fixed point: quantise one micro-batch, reduce-scatter int64, convert,
 * all-gather fp32 parameters) against the float baselines on the same
 * gradient size: MPI_Allreduce of fp32 (what plain DDP does) and fmhpc's fast
 * mode (fp32 reduce-scatter + all-gather). The exact exchange is timed twice,
 * with fmhpc's pipelined int64 ring reduce-scatter and with
 * MPI_Reduce_scatter_block (the ring's before/after). Run under mpirun by run.sh.
 *   bench_reduce N_PARAMS REPS
 * rank 0 prints ms per exchange for each and the ratios. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"
#include "fmhpc/rng.h"

static double time_exchange(FmReduce *red, float *grad, float *shard, float *w, int reps) {
  double best = 1e30;
  for (int k = 0; k < reps + 1; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fm_reduce_begin(red);
    if (red->exact) fm_reduce_add(red, grad);
    bool nonfinite;
    while (fm_reduce_finish(red, grad, shard, &nonfinite)) { /* first call may widen scales */
      fm_reduce_begin(red);
      fm_reduce_add(red, grad);
    }
    fm_reduce_allgather(red, w);
    double dt = MPI_Wtime() - t0, worst;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (k > 0 && worst < best) best = worst;
  }
  return best;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t n = argc > 1 ? atoll(argv[1]) : 124439808;
  const int reps = argc > 2 ? atoi(argv[2]) : 3;
  FmComm *c = fm_comm_mpi_create(MPI_COMM_WORLD);
  float *grad = malloc((size_t)n * sizeof *grad), *w = malloc((size_t)n * sizeof *w);
  for (int64_t i = 0; i < n; i++) grad[i] = (float)(fm_rng_normal(1, 9, (uint32_t)rank, (uint64_t)i) * 1e-3);
  memcpy(w, grad, (size_t)n * sizeof *w);
  double t_exact, t_exact_mpi, t_fast, t_allreduce = 1e30;
  for (int ring = 1; ring >= 0; ring--) { /* the int64 reduce-scatter: fmhpc's ring, then MPI's */
    int64_t old = fm__comm_mpi_set_ring_chunk(ring ? -1 : 0);
    FmReduce red;
    fm_reduce_create(&red, n, size, true, c);
    float *shard = malloc((size_t)red.S * sizeof *shard);
    *(ring ? &t_exact : &t_exact_mpi) = time_exchange(&red, grad, shard, w, reps);
    free(shard);
    fm_reduce_free(&red);
    fm__comm_mpi_set_ring_chunk(old);
  }
  {
    FmReduce red;
    fm_reduce_create(&red, n, size, false, c);
    float *shard = malloc((size_t)red.S * sizeof *shard);
    t_fast = time_exchange(&red, grad, shard, w, reps);
    free(shard);
    fm_reduce_free(&red);
  }
  float *sum = malloc((size_t)n * sizeof *sum);
  for (int k = 0; k < reps + 1; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(grad, sum, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, worst;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (k > 0 && worst < t_allreduce) t_allreduce = worst;
  }
  if (rank == 0) {
    printf(
        "P=%d n=%lld: exact %.1f ms (ring reduce-scatter), exact %.1f ms (MPI_Reduce_scatter_block), fast %.1f ms, "
        "MPI_Allreduce fp32 %.1f ms; exact/allreduce %.2fx (MPI's: %.2fx; goal <= 1.5x: %s), exact/fast %.2fx\n",
        size, (long long)n, 1e3 * t_exact, 1e3 * t_exact_mpi, 1e3 * t_fast, 1e3 * t_allreduce, t_exact / t_allreduce,
        t_exact_mpi / t_allreduce, t_exact / t_allreduce <= 1.5 ? "met" : "NOT met", t_exact / t_fast);
    /* one machine-readable line for bench/run.sh */
    printf("RESULT reduce P=%d exact_ms=%.3f exact_mpi_ms=%.3f fast_ms=%.3f allreduce_ms=%.3f\n", size, 1e3 * t_exact,
           1e3 * t_exact_mpi, 1e3 * t_fast, 1e3 * t_allreduce);
  }
  free(grad);
  free(w);
  free(sum);
  fm_comm_destroy(c);
  MPI_Finalize();
  return 0;
}
