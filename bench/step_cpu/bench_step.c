/* bench_step.c: time a training step of fmhpc's CPU backend (forward +
 * backward of one micro-batch of B x T tokens + an AdamW update of every
 * parameter) and the machine's measured fp32 GEMM peak. Driven by run.sh,
 * which runs PyTorch on the same step beside it.
 *   bench_step ARCH C L NH NKV F V T B STEPS THREADS
 * prints one line: key=value pairs (ms_step, tok_s, gflops, peak_gflops). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmhpc/model.h"
#include "fmhpc/optim.h"
#include "fmhpc/rng.h"

void openblas_set_num_threads(int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best of 5 multi-threaded OpenBLAS sgemm at 2048^3: the machine's fp32 roof
 * as far as this process can reach it. */
static double gemm_peak(int threads) {
  const int n = 2048;
  float *a = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
  for (int i = 0; i < n * n; i++) a[i] = (float)(i % 13) * 0.01f;
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int k = 0; k < 5; k++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  free(a);
  free(c);
  return 2.0 * n * (double)n * n / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr, "usage: bench_step ARCH C L NH NKV F V T B STEPS THREADS\n");
    return 2;
  }
  const char *arch = argv[1];
  FmModelDims d = {0};
  d.C = atoll(argv[2]), d.L = atoll(argv[3]), d.NH = atoll(argv[4]), d.NKV = atoll(argv[5]);
  d.F = atoll(argv[6]), d.V = atoll(argv[7]), d.T = atoll(argv[8]);
  d.HS = d.C / d.NH, d.tied = strcmp(arch, "gpt2") == 0, d.norm_eps = 1e-5, d.rope_theta = 10000.0;
  const int64_t B = atoll(argv[9]), steps = atoll(argv[10]);
  const int threads = atoi(argv[11]);
  const double peak = gemm_peak(threads);
  omp_set_num_threads(threads);
  fm_log_set_quiet(1);
  const FmModelKind *k = fm_model_find(arch);
  FmModel *m = NULL;
  if (!k || fm_model_create(&m, k, &d, fm_backend_cpu(), B, false, stderr)) return 1;
  fm_model_init_weights(m, 1, 0.02, true);
  const FmTensorTable *tab = fm_model_params(m);
  FmOptimParams op = {.kind = fm_optim_find("adamw"), .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  FmOptim *opt = fm_optim_create(&op, tab, 0, tab->numel, stderr);
  const int64_t n = B * d.T;
  int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
  float *w = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    tok[i] = (int32_t)(fm_rng_block(1, 9, 0, (uint64_t)i).v[0] % (uint32_t)d.V);
    tgt[i] = (int32_t)(fm_rng_block(1, 9, 1, (uint64_t)i).v[0] % (uint32_t)d.V);
    pos[i] = (int32_t)(i % d.T);
    w[i] = 1.0f / (float)n;
  }
  FmModelInput in = {tok, tgt, pos, NULL};
  double best = 1e30, total = 0, phase[3] = {0, 0, 0}; /* zero_grad, forward+backward, optimizer */
  for (int64_t s = 0; s < steps + 2; s++) {            /* 2 warm-up steps */
    double t0 = now();
    fm_model_zero_grad(m);
    double t1 = now();
    fm_model_forward_backward(m, &in, w, true);
    double t2 = now();
    fm_optim_step(opt, fm_model_param_arena(m), fm_model_grad_arena(m), s + 1, 1e-4f);
    double dt = now() - t0;
    if (s >= 2) {
      total += dt;
      if (dt < best) best = dt;
      phase[0] += t1 - t0, phase[1] += t2 - t1, phase[2] += t0 + dt - t2;
    }
  }
  double fwd = 0; /* the forward alone, to split forward+backward */
  for (int64_t s = 0; s < steps; s++) {
    double t0 = now();
    fm_model_forward_backward(m, &in, w, false);
    fwd += now() - t0;
  }
  const double mean = total / (double)steps;
  const double flops = k->train_flops_per_token(&d) * (double)n;
  printf("fmhpc params=%lld ms_step=%.1f best_ms=%.1f tok_s=%.0f gflops=%.2f peak_gflops=%.2f\n", (long long)tab->numel,
         1e3 * mean, 1e3 * best, (double)n / mean, flops / mean / 1e9, peak);
  /* The profile: phases as a share of the mean step; forward and backward
   * GFLOP/s at 1/3 and 2/3 of the training FLOPs (2N + attention per token
   * forward, twice that backward); the optimizer's GB/s over the 4 arrays it
   * reads and 3 it writes (AdamW: w, g, m, v). Per-op detail: bench/ops. */
  const double st = (double)steps, fw = fwd / st, bw = phase[1] / st - fw, ot = phase[2] / st;
  printf(
      "profile zero_ms=%.1f forward_ms=%.1f forward_gflops=%.2f backward_ms=%.1f backward_gflops=%.2f "
      "optim_ms=%.1f optim_gb_s=%.2f\n",
      1e3 * phase[0] / st, 1e3 * fw, flops / 3 / fw / 1e9, 1e3 * bw, bw > 0 ? 2 * flops / 3 / bw / 1e9 : 0.0, 1e3 * ot,
      7.0 * 4.0 * (double)tab->numel / ot / 1e9);
  fm_optim_free(opt);
  fm_model_free(m);
  return 0;
}
