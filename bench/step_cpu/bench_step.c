/* bench_step.c: time a training step of fmhpc's CPU backend (forward +
 * backward of one micro-batch of B x T tokens + an AdamW update of every
 * parameter), the machine's measured fp32 GEMM peak and memory bandwidth, and
 * a per-op profile of the step against those roofs. Driven by run.sh, which
 * runs PyTorch on the same step beside it.
 *   bench_step ARCH C L NH NKV F V T B STEPS THREADS   (one rank: mpirun -n 1 or none)
 * prints the BLAS line ("blas ": the kernel and the GEMM tile, fm_cpu_blas_info),
 * key=value lines (ms_step, tok_s, gflops, peak_gflops, mem_gb_s), the
 * phase line and the per-op table (lines starting "profile").
 * Timing: 3 untimed warm-up steps, then at least STEPS timed steps and more
 * until they add up to FMHPC_BENCH_MIN_S seconds (default 4; at most
 * MAX_STEPS), so a fast step (the nano Llama) is timed over many. ms_step,
 * tok_s, gflops and cpu_s_step are the MEDIAN step's (wall and CPU seconds
 * each their own median), so one step slowed by another process on a shared
 * machine does not decide the figure; mean_ms and best_ms are printed beside.
 * The per-op profile is the mean over the same timed steps.
 * FMHPC_BENCH_PERF_CTL=FIFO (bench/step_cpu/profile.sh): the control fifo of
 * a `perf record -D -1 --control fifo:FIFO`; sampling is enabled for each
 * timed step (zero_grad, forward, backward, optimizer) and disabled around
 * everything else (set-up, warm-up, the exact reduction, the peaks). */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmhpc/dist.h"
#include "fmhpc/model.h"
#include "fmhpc/optim.h"
#include "fmhpc/rng.h"
#include "fmhpc/runtime.h"
#include "../bench_util.h"

#define MAX_STEPS 200

/* perf's control fifo (FMHPC_BENCH_PERF_CTL), or NULL. perf reads a command
 * a moment after it is written: at these step lengths (0.1-5 s) the samples
 * it misses or adds at each edge are well under 1%. */
static FILE *perf_ctl;
static void perf_say(const char *cmd) {
  if (perf_ctl) {
    fputs(cmd, perf_ctl);
    fflush(perf_ctl);
  }
}

void openblas_set_num_threads(int);

/* Best of REPS multi-threaded OpenBLAS sgemm at 2048^3: the machine's fp32
 * roof as far as this process can reach it. main measures it (best of 5)
 * before and after the timed steps and keeps the larger, so a burst of load
 * on a shared machine during one measurement does not lower the roof (and
 * raise "% of peak"); and (best of 3) beside each timed step, for the
 * step's share of the peak measured next to it (share_adj below).
 * OpenBLAS goes back to one thread before it returns: the backend's rule
 * (matmul.c) is one BLAS thread per tile; a step run with more has every
 * tile's sgemm from each OpenMP thread hand work to OpenBLAS's own pool,
 * whose thread then competes for the cores (it did so from 7cf232d on,
 * until the peak restored the count itself). The operands are made once. */
static float *peak_a, *peak_c;
static double gemm_peak(int threads, int reps) {
  (void)fm_cpu_blas_info(); /* the backend's kernel choice first (matmul.c): the peak runs the same kernel */
  const int n = 2048;
  if (!peak_a) {
    peak_a = malloc((size_t)n * n * 4), peak_c = malloc((size_t)n * n * 4);
    for (int i = 0; i < n * n; i++) peak_a[i] = (float)(i % 13) * 0.01f;
  }
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int k = 0; k < reps; k++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, peak_a, n, peak_a, n, 0.0f, peak_c, n);
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  openblas_set_num_threads(1);
  return 2.0 * n * (double)n * n / best / 1e9;
}

/* The peak beside a timed step: best of 3, then a pause of 0.2 s, untimed.
 * OpenBLAS's pool threads spin (sched_yield) for about 2^28 cycles after
 * their last job before they sleep (blas_server.c, THREAD_TIMEOUT): without
 * the pause one would compete with the next step's OpenMP threads. */
static double gemm_peak_beside(int threads) {
  const double p = gemm_peak(threads, 3);
  const struct timespec pause = {0, 200000000};
  nanosleep(&pause, NULL);
  return p;
}

#include "../op_profile.h"

/* Best of 5 multi-threaded triad a = b + s c over 3 x 128 MiB: the machine's
 * memory roof as far as this process reaches it (GB/s, 12 bytes an element). */
static double mem_bw(int threads) {
  const int64_t n = (int64_t)32 << 20;
  float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
  double best = 1e30;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = (float)(i & 7), c[i] = 1.0f;
  for (int k = 0; k < 5; k++) {
    double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  volatile float sink = a[n / 3];
  (void)sink;
  free(a), free(b), free(c);
  return 12.0 * (double)n / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr, "usage: bench_step ARCH C L NH NKV F V T B STEPS THREADS\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  const char *arch = argv[1];
  FmModelDims d = {0};
  d.C = atoll(argv[2]), d.L = atoll(argv[3]), d.NH = atoll(argv[4]), d.NKV = atoll(argv[5]);
  d.F = atoll(argv[6]), d.V = atoll(argv[7]), d.T = atoll(argv[8]);
  d.HS = d.C / d.NH, d.tied = strcmp(arch, "gpt2") == 0, d.norm_eps = 1e-5, d.rope_theta = 10000.0;
  const int64_t B = atoll(argv[9]), steps = atoll(argv[10]);
  const int threads = atoi(argv[11]);
  if (steps < 1 || threads < 1) {
    fprintf(stderr, "bench_step: STEPS and THREADS must be at least 1\n");
    return 2;
  }
  const double peak0 = gemm_peak(threads, 5), bw = mem_bw(threads);
  printf("blas %s\n", fm_cpu_blas_info());
  omp_set_num_threads(threads);
  fm_log_set_quiet(1);
  const FmModelKind *k = fm_model_find(arch);
  FmModel *m = NULL;
  const FmBackend pb = profiled_backend(fm_backend_cpu(), 0);
  if (!k || fm_model_create(&m, k, &d, &pb, B, false, stderr)) return 1;
  fm_model_init_weights(m, 1, 0.02, true);
  const FmTensorTable *tab = fm_model_params(m);
  FmOptimParams op = {.kind = fm_optim_find("adamw"), .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  FmOptim *opt = fm_optim_create(&op, tab, 0, tab->numel, stderr);
  /* The exact reduction at one rank: its local passes, as fmhpc makes them
   * there (the gradient given as buckets; train.c gives them during the
   * backward, here one after it): the checks, one pass from the gradient to
   * its quantised shard (reduce.c, requant_range), the gather. The exchange
   * between ranks is bench/reduce's. */
  FmComm *comm = fm_comm_mpi_create(MPI_COMM_WORLD);
  FmReduce red;
  fm_reduce_create(&red, tab->numel, 1, true, comm);
  float *shard = malloc((size_t)red.S * sizeof *shard), *wcopy = malloc((size_t)tab->numel * sizeof *wcopy);
  const int64_t n = B * d.T;
  int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
  float *w = malloc((size_t)n * 4);
  bench_batch(n, d.T, d.V, tok, tgt, pos, w);
  FmModelInput in = {tok, tgt, pos, NULL};
  const char *min_env = getenv("FMHPC_BENCH_MIN_S");
  const double min_s = min_env ? atof(min_env) : 4.0;
  const int64_t warm = 3;
  const char *ctl = getenv("FMHPC_BENCH_PERF_CTL");
  if (ctl && !(perf_ctl = fopen(ctl, "w"))) {
    fprintf(stderr, "bench_step: cannot open FMHPC_BENCH_PERF_CTL=%s for writing\n", ctl);
    return 1;
  }
  double wall_v[MAX_STEPS], cpu_v[MAX_STEPS], peak_v[MAX_STEPS + 1] = {0}; /* peak_v[i], [i + 1]: beside step i */
  double best = 1e30, total = 0, phase[3] = {0, 0, 0}, reduce_s = 0; /* zero_grad, fwd+bwd, optimizer */
  int64_t timed = 0;
  for (int64_t s = 0; timed < MAX_STEPS && (timed < steps || total < min_s); s++) {
    if (s == warm) peak_v[0] = gemm_peak_beside(threads);
    profiling = s >= warm, in_backward = 0;
    if (s >= warm) perf_say("enable\n");
    const double c0 = cpu_now();
    double t0 = now();
    fm_model_zero_grad(m);
    double t1 = now();
    fm_model_forward_backward(m, &in, w, true);
    double t2 = now();
    fm_optim_step(opt, fm_model_param_arena(m), fm_model_grad_arena(m), s + 1, 1e-4f);
    double dt = now() - t0;
    const double dc = cpu_now() - c0;
    if (s >= warm) perf_say("disable\n");
    /* not part of the step timed against PyTorch (one process has nothing to exchange) */
    double r0 = now();
    fm_reduce_begin(&red);
    fm_reduce_bucket(&red, fm_model_grad_arena(m), 0, tab->numel);
    bool nonfinite;
    while (fm_reduce_finish(&red, fm_model_grad_arena(m), shard, &nonfinite)) {
      fm_reduce_begin(&red);
      fm_reduce_bucket(&red, fm_model_grad_arena(m), 0, tab->numel);
    }
    memcpy(wcopy, fm_model_param_arena(m), (size_t)tab->numel * sizeof *wcopy);
    fm_reduce_allgather(&red, wcopy);
    if (s >= warm) {
      wall_v[timed] = dt, cpu_v[timed] = dc, timed++;
      total += dt;
      if (dt < best) best = dt;
      phase[0] += t1 - t0, phase[1] += t2 - t1, phase[2] += t0 + dt - t2;
      reduce_s += now() - r0;
      peak_v[timed] = gemm_peak_beside(threads);
    }
  }
  profiling = 0;
  const double peak1 = gemm_peak(threads, 5), peak = peak1 > peak0 ? peak1 : peak0;
  double fwd = 0; /* the forward alone, to split forward+backward */
  for (int64_t s = 0; s < timed; s++) {
    double t0 = now();
    fm_model_forward_backward(m, &in, w, false);
    fwd += now() - t0;
  }
  const double mean = total / (double)timed, med = median(wall_v, timed);
  const double flops = k->train_flops_per_token(&d) * (double)n;
  /* Each timed step's GFLOP/s over the larger of the two peaks measured
   * beside it (before and after: the VM's speed drifts by several per cent
   * over the minutes a run takes, which a peak measured once a run cannot
   * follow), and the median of those shares. */
  double share_v[MAX_STEPS], peak_lo = 1e30, peak_hi = 0;
  for (int64_t i = 0; i < timed; i++) {
    const double pk = peak_v[i] > peak_v[i + 1] ? peak_v[i] : peak_v[i + 1];
    share_v[i] = flops / wall_v[i] / 1e9 / pk;
  }
  for (int64_t i = 0; i <= timed; i++) {
    if (peak_v[i] < peak_lo) peak_lo = peak_v[i];
    if (peak_v[i] > peak_hi) peak_hi = peak_v[i];
  }
  printf(
      "beside share_adj=%.4f peak_adj_lo=%.2f peak_adj_hi=%.2f (each timed step's GFLOP/s over the larger peak "
      "measured next to it, best of 3; the median over the steps)\n",
      median(share_v, timed), peak_lo, peak_hi);
  printf(
      "fmhpc params=%lld ms_step=%.1f mean_ms=%.1f best_ms=%.1f tok_s=%.0f gflops=%.2f peak_gflops=%.2f "
      "mem_gb_s=%.2f cpu_s_step=%.3f steps=%lld (median step of the timed ones; 3 warm-up steps)\n",
      (long long)tab->numel, 1e3 * med, 1e3 * mean, 1e3 * best, (double)n / med, flops / med / 1e9, peak, bw,
      median(cpu_v, timed), (long long)timed);
  /* The phases: forward and backward GFLOP/s at 1/3 and 2/3 of the training
   * FLOPs (2N + attention per token forward, twice that backward); the
   * optimizer's GB/s over the 4 arrays it reads and 3 it writes (AdamW: w, g,
   * m, v). */
  const double st = (double)timed, fw = fwd / st, bw_s = phase[1] / st - fw, ot = phase[2] / st;
  const double P = (double)tab->numel;
  printf(
      "phases zero_ms=%.1f forward_ms=%.1f forward_gflops=%.2f backward_ms=%.1f backward_gflops=%.2f "
      "optim_ms=%.1f optim_gb_s=%.2f reduce1_ms=%.1f\n",
      1e3 * phase[0] / st, 1e3 * fw, flops / 3 / fw / 1e9, 1e3 * bw_s, bw_s > 0 ? 2 * flops / 3 / bw_s / 1e9 : 0.0,
      1e3 * ot, 7.0 * 4.0 * P / ot / 1e9, 1e3 * reduce_s / st);
  const double other[] = {phase[0] / st, ot, reduce_s / st};
  const char *const other_name[] = {"zero_grad", "optimizer (AdamW)", "reduce (exact, 1 rank)"};
  /* zero_grad writes the gradients; AdamW reads w, g, m, v and writes w, m, v;
   * the exact reduction at one rank (its deferred path, reduce.c) reads g
   * to check each block's range (4), reads it again into the quantised fp32
   * shard (4 + 4), and this loop copies w for the all-gather (4 + 4; one
   * rank's all-gather itself moves nothing). */
  const double other_bytes[] = {4.0 * P, 28.0 * P, 20.0 * P};
  print_profile(st, mean, peak, bw, other, other_name, other_bytes, 3, "sgemm", "triad");
  free(shard), free(wcopy), free(tok), free(tgt), free(pos), free(w), free(peak_a), free(peak_c);
  if (perf_ctl) fclose(perf_ctl);
  fm_reduce_free(&red);
  fm_comm_destroy(comm);
  fm_optim_free(opt);
  fm_model_free(m);
  MPI_Finalize();
  return 0;
}
