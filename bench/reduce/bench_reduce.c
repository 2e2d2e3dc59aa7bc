/* bench_reduce.c: the data-parallel gradient exchange of one step, exact
 * (int64 fixed point: quantise one micro-batch, reduce-scatter int64, convert,
 * all-gather fp32 parameters) against the float baselines on the same
 * gradient size: MPI_Allreduce of fp32 (what plain DDP does) and fmhpc's fast
 * mode (fp32 reduce-scatter + all-gather). The exact exchange is timed four
 * times: as training runs it (ranks of one node: owner sums and the all-gather
 * through a shared-memory window, fm_comm_shm), with fmhpc's pipelined int64
 * ring reduce-scatter (the window turned off: what ranks across nodes do), with
 * MPI_Reduce_scatter_block (the ring's before/after), and given in BUCKETS
 * ranges from the end of the vector to its start (fm_reduce_bucket, what the
 * train loop does during the backward pass: with the window the ranges are
 * only quantised and the owners sum in fm_reduce_finish; across nodes, owner
 * sums over nonblocking point-to-point; here back to back, with no backward to hide behind: the raw
 * cost of that schedule). Run under mpirun by run.sh.
 *   bench_reduce N_PARAMS REPS
 * (bench/before_after.sh builds an earlier tree's own copy of this file when
 * this one does not build against it.)
 * rank 0 prints ms per exchange for each (wall: the slowest rank; CPU seconds
 * summed over ranks beside it: on a loaded machine the wall clock counts time
 * a rank was not running) and the ratios. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"
#include "fmhpc/rng.h"
#include "../bench_util.h"

enum { BUCKETS = 14 }; /* GPT-2's 12 blocks, the embeddings, the final norm */

typedef struct {
  double wall, cpu; /* best repetition's wall (max over ranks) and its CPU seconds (sum over ranks) */
} Timing;

static void add_grad(FmReduce *red, const float *grad, bool buckets) {
  if (!buckets) {
    fm_reduce_add(red, grad);
    return;
  }
  for (int b = BUCKETS; b > 0; b--) fm_reduce_bucket(red, grad, red->n * (b - 1) / BUCKETS, red->n * b / BUCKETS);
}

static Timing time_exchange(FmReduce *red, float *grad, float *shard, float *w, int reps, bool buckets) {
  Timing best = {1e30, 0};
  for (int k = 0; k < reps + 1; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), c0 = cpu_now();
    fm_reduce_begin(red);
    if (red->exact) add_grad(red, grad, buckets);
    bool nonfinite;
    while (fm_reduce_finish(red, grad, shard, &nonfinite)) { /* first call may widen scales */
      fm_reduce_begin(red);
      add_grad(red, grad, buckets);
    }
    fm_reduce_allgather(red, w);
    double dt = MPI_Wtime() - t0, dc = cpu_now() - c0, worst, cpu;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&dc, &cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (k > 0 && worst < best.wall) best = (Timing){worst, cpu};
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
  Timing t_exact, t_ring, t_exact_mpi, t_bucket = {0, 0}, t_fast, t_allreduce = {1e30, 0};
  bool shm = false;
  /* the int64 sums: 3 the default (the window on one node), 2 its buckets, 1 fmhpc's ring, 0 MPI's */
  for (int path = 3; path >= 0; path--) {
    int64_t old = fm__comm_mpi_set_ring_chunk(path ? -1 : 0);
    int old_shm = fm__comm_mpi_set_shm(path >= 2, 0);
    FmReduce red;
    fm_reduce_create(&red, n, size, true, c);
    if (path == 3) shm = red.shm != NULL;
    float *shard = malloc((size_t)red.S * sizeof *shard);
    Timing *t = path == 3 ? &t_exact : path == 2 ? &t_bucket : path ? &t_ring : &t_exact_mpi;
    *t = time_exchange(&red, grad, shard, w, reps, path == 2);
    free(shard);
    fm_reduce_free(&red);
    fm__comm_mpi_set_shm(old_shm, 0);
    fm__comm_mpi_set_ring_chunk(old);
  }
  {
    FmReduce red;
    fm_reduce_create(&red, n, size, false, c);
    float *shard = malloc((size_t)red.S * sizeof *shard);
    t_fast = time_exchange(&red, grad, shard, w, reps, false);
    free(shard);
    fm_reduce_free(&red);
  }
  float *sum = malloc((size_t)n * sizeof *sum);
  for (int k = 0; k < reps + 1; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), c0 = cpu_now();
    MPI_Allreduce(grad, sum, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, dc = cpu_now() - c0, worst, cpu;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&dc, &cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (k > 0 && worst < t_allreduce.wall) t_allreduce = (Timing){worst, cpu};
  }
  if (rank == 0) {
    const Timing ar = t_allreduce;
    printf(
        "P=%d n=%lld: wall ms (CPU-s summed over ranks): exact %.1f (%.2f) %s, exact %.1f (%.2f) ring "
        "reduce-scatter, exact %.1f (%.2f) MPI_Reduce_scatter_block, exact %.1f (%.2f) %d buckets, fast %.1f (%.2f), "
        "MPI_Allreduce fp32 %.1f (%.2f)\n",
        size, (long long)n, 1e3 * t_exact.wall, t_exact.cpu, shm ? "shared-memory window" : "ring (no window)",
        1e3 * t_ring.wall, t_ring.cpu, 1e3 * t_exact_mpi.wall, t_exact_mpi.cpu, 1e3 * t_bucket.wall, t_bucket.cpu,
        BUCKETS, 1e3 * t_fast.wall, t_fast.cpu, 1e3 * ar.wall, ar.cpu);
    printf(
        "  exact/allreduce: %s %.2fx (CPU %.2fx), ring %.2fx (CPU %.2fx), MPI's %.2fx (CPU %.2fx), buckets %.2fx "
        "(CPU %.2fx); goal <= 1.5x: %s; exact/fast %.2fx\n",
        shm ? "window" : "default", t_exact.wall / ar.wall, t_exact.cpu / ar.cpu, t_ring.wall / ar.wall,
        t_ring.cpu / ar.cpu, t_exact_mpi.wall / ar.wall, t_exact_mpi.cpu / ar.cpu, t_bucket.wall / ar.wall,
        t_bucket.cpu / ar.cpu, t_exact.wall / ar.wall <= 1.5 ? "met" : "NOT met", t_exact.wall / t_fast.wall);
    /* one machine-readable line for bench/run.sh */
    printf(
        "RESULT reduce P=%d shm=%d exact_ms=%.3f ring_ms=%.3f exact_mpi_ms=%.3f bucket_ms=%.3f fast_ms=%.3f "
        "allreduce_ms=%.3f exact_cpu_s=%.4f ring_cpu_s=%.4f exact_mpi_cpu_s=%.4f bucket_cpu_s=%.4f fast_cpu_s=%.4f "
        "allreduce_cpu_s=%.4f\n",
        size, shm, 1e3 * t_exact.wall, 1e3 * t_ring.wall, 1e3 * t_exact_mpi.wall, 1e3 * t_bucket.wall,
        1e3 * t_fast.wall, 1e3 * ar.wall, t_exact.cpu, t_ring.cpu, t_exact_mpi.cpu, t_bucket.cpu, t_fast.cpu, ar.cpu);
  }
  free(grad);
  free(w);
  free(sum);
  fm_comm_destroy(c);
  MPI_Finalize();
  return 0;
}
