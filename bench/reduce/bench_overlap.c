/* bench_overlap.c: how much of the exact reduction's exchange a step exposes
 * when it runs per layer during the backward pass (fm_reduce_bucket, the
 * train loop's CPU path) against after it (fm_reduce_add + the ring at
 * fm_reduce_finish). P ranks under mpirun, one GPT-2 micro-batch each (M = P),
 * the same model and data in both modes; per mode, each timed step is
 *   zero_grad, forward + backward [buckets], finish, all-gather
 * and the figures are the best step's, the wall clock the slowest rank's:
 *   raw     = (add +) finish + all-gather without buckets: the exchange as a
 *             separate phase after the backward pass (all of it exposed);
 *   exposed = (backward with buckets - backward alone) + finish + all-gather
 *             with buckets: what the step still waits for.
 * CPU seconds (summed over ranks) are printed beside: on a loaded, shared
 * machine the wall clock counts time a rank was not running. The float
 * MPI_Allreduce of the same gradient (plain DDP) is the peer.
 *   bench_overlap C L NH F V T B STEPS          (run by bench/reduce/run.sh)
 * rank 0 prints one line per figure and a RESULT line. Built with
 * -DFMHPC_BENCH_NO_BUCKETS against a tree without buckets (an earlier commit,
 * bench/before_after.sh): the exchange after the backward pass only, so the
 * exposed time is the raw time. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"
#include "fmhpc/model.h"
#include "fmhpc/rng.h"
#include "fmhpc/runtime.h"
#include "../bench_util.h"

typedef struct {
  FmReduce *red;
  const float *grad;
} Hook;

#ifdef FMHPC_BENCH_NO_BUCKETS
enum { MODES = 1 };
#else
enum { MODES = 2 };
static void bucket_ready(void *ctx, int64_t lo, int64_t hi) {
  Hook *h = ctx;
  fm_reduce_bucket(h->red, h->grad, lo, hi);
}
#endif

enum { PH_BWD, PH_FIN, PH_AG, NPH };

/* Wall (max over ranks) and CPU (sum over ranks) of one phase. */
static void agree(const double *wall, const double *cpu, double *wall_all, double *cpu_all) {
  MPI_Allreduce(wall, wall_all, NPH, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(cpu, cpu_all, NPH, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: bench_overlap C L NH F V T B STEPS\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FmModelDims d = {0};
  d.C = atoll(argv[1]), d.L = atoll(argv[2]), d.NH = atoll(argv[3]), d.NKV = d.NH, d.F = atoll(argv[4]);
  d.V = atoll(argv[5]), d.T = atoll(argv[6]), d.HS = d.C / d.NH, d.tied = true, d.norm_eps = 1e-5;
  const int64_t B = atoll(argv[7]), steps = atoll(argv[8]);
  fm_log_set_quiet(1);
  FmModel *m = NULL;
  if (fm_model_create(&m, fm_model_find("gpt2"), &d, fm_backend_cpu(), B, false, stderr)) return 1;
  fm_model_init_weights(m, 1, 0.02, true);
  const int64_t n = fm_model_params(m)->numel, N = B * d.T;
  FmComm *comm = fm_comm_mpi_create(MPI_COMM_WORLD);
  FmReduce red;
  fm_reduce_create(&red, n, size, true, comm);
  /* every rank holds the same weights, so the all-gather writes them back unchanged */
  float *shard = malloc((size_t)red.S * sizeof *shard), *w = fm_model_param_arena(m);
  int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4), *pos = malloc((size_t)N * 4);
  float *tw = malloc((size_t)N * 4);
  for (int64_t i = 0; i < N; i++) {
    tok[i] = (int32_t)(fm_rng_block(1, 9, (uint32_t)rank, (uint64_t)i).v[0] % (uint32_t)d.V);
    tgt[i] = (int32_t)(fm_rng_block(2, 9, (uint32_t)rank, (uint64_t)i).v[0] % (uint32_t)d.V);
    pos[i] = (int32_t)(i % d.T);
    tw[i] = 1.0f / (float)(N * size);
  }
  FmModelInput in = {tok, tgt, pos, NULL};
  float *grad = fm_model_grad_arena(m);
  Hook hook = {&red, grad};
  (void)hook;
  double best_w[2][NPH] = {{0}}, best_c[2][NPH] = {{0}};
  for (int mode = 0; mode < MODES; mode++) { /* 0: exchange after the backward pass, 1: buckets during it */
    double step_best = 1e30;
    for (int64_t s = 0; s < steps + 1; s++) { /* one warm-up step (fixes the scales) */
      double wall[NPH], cpu[NPH], wall_all[NPH], cpu_all[NPH];
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now(), c0 = cpu_now();
      fm_model_zero_grad(m);
      fm_reduce_begin(&red);
#ifndef FMHPC_BENCH_NO_BUCKETS
      if (mode) fm_model_set_grad_ready(m, bucket_ready, &hook);
#endif
      fm_model_forward_backward(m, &in, tw, true);
#ifndef FMHPC_BENCH_NO_BUCKETS
      fm_model_set_grad_ready(m, NULL, NULL);
#endif
      double t1 = now(), c1 = cpu_now();
      if (!mode) fm_reduce_add(&red, grad);
      bool nonfinite;
      while (fm_reduce_finish(&red, grad, shard, &nonfinite)) { /* a redo with the scales widened */
        fm_reduce_begin(&red);
        fm_reduce_add(&red, grad);
      }
      double t2 = now(), c2 = cpu_now();
      fm_reduce_allgather(&red, w);
      double t3 = now(), c3 = cpu_now();
      wall[PH_BWD] = t1 - t0, wall[PH_FIN] = t2 - t1, wall[PH_AG] = t3 - t2;
      cpu[PH_BWD] = c1 - c0, cpu[PH_FIN] = c2 - c1, cpu[PH_AG] = c3 - c2;
      agree(wall, cpu, wall_all, cpu_all);
      const double step = wall_all[PH_BWD] + wall_all[PH_FIN] + wall_all[PH_AG];
      if (s > 0 && step < step_best) {
        step_best = step;
        memcpy(best_w[mode], wall_all, sizeof wall_all);
        memcpy(best_c[mode], cpu_all, sizeof cpu_all);
      }
    }
  }
  /* The peer: a float MPI_Allreduce of the same gradient (in place: the gradient is not used again). */
  double ar_w = 1e30, ar_c = 0;
  for (int64_t s = 0; s < steps + 1; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now(), c0 = cpu_now();
    MPI_Allreduce(MPI_IN_PLACE, grad, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = now() - t0, dc = cpu_now() - c0, wmax, csum;
    MPI_Allreduce(&dt, &wmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&dc, &csum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (s > 0 && wmax < ar_w) ar_w = wmax, ar_c = csum;
  }
  if (MODES == 1) { /* no buckets: everything after the backward pass is exposed */
    memcpy(best_w[1], best_w[0], sizeof best_w[0]);
    memcpy(best_c[1], best_c[0], sizeof best_c[0]);
  }
  if (rank == 0) {
    const double raw_w = best_w[0][PH_FIN] + best_w[0][PH_AG], raw_c = best_c[0][PH_FIN] + best_c[0][PH_AG];
    const double exp_w = best_w[1][PH_BWD] - best_w[0][PH_BWD] + best_w[1][PH_FIN] + best_w[1][PH_AG];
    const double exp_c = best_c[1][PH_BWD] - best_c[0][PH_BWD] + best_c[1][PH_FIN] + best_c[1][PH_AG];
    printf("P=%d GPT-2 n=%lld B=%lld T=%lld: wall ms (CPU-s summed over ranks)\n", size, (long long)n, (long long)B,
           (long long)d.T);
    printf("  after backward: backward %.0f (%.2f), quantise+exchange+convert %.0f (%.2f), all-gather %.0f (%.2f)\n",
           1e3 * best_w[0][PH_BWD], best_c[0][PH_BWD], 1e3 * best_w[0][PH_FIN], best_c[0][PH_FIN],
           1e3 * best_w[0][PH_AG], best_c[0][PH_AG]);
    printf("  buckets:        backward+buckets %.0f (%.2f), finish %.0f (%.2f), all-gather %.0f (%.2f)\n",
           1e3 * best_w[1][PH_BWD], best_c[1][PH_BWD], 1e3 * best_w[1][PH_FIN], best_c[1][PH_FIN],
           1e3 * best_w[1][PH_AG], best_c[1][PH_AG]);
    printf(
        "  raw exchange %.0f ms (%.2f CPU-s), exposed with buckets %.0f ms (%.2f CPU-s); float MPI_Allreduce %.0f "
        "ms (%.2f CPU-s); raw/allreduce %.2fx, exposed/allreduce %.2fx (CPU %.2fx, %.2fx)\n",
        1e3 * raw_w, raw_c, 1e3 * exp_w, exp_c, 1e3 * ar_w, ar_c, raw_w / ar_w, exp_w / ar_w, raw_c / ar_c,
        exp_c / ar_c);
    printf(
        "RESULT overlap P=%d raw_ms=%.3f exposed_ms=%.3f allreduce_ms=%.3f raw_cpu_s=%.4f exposed_cpu_s=%.4f "
        "allreduce_cpu_s=%.4f backward_ms=%.3f backward_cpu_s=%.4f\n",
        size, 1e3 * raw_w, 1e3 * exp_w, 1e3 * ar_w, raw_c, exp_c, ar_c, 1e3 * best_w[0][PH_BWD], best_c[0][PH_BWD]);
  }
  free(shard);
  free(tok);
  free(tgt);
  free(pos);
  free(tw);
  fm_reduce_free(&red);
  fm_model_free(m);
  fm_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
