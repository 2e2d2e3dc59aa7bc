/* bench_step_gpu.c: a training step of fmhpc on its CUDA backend, with the
 * per-op profile (bench/op_profile.h) against the device's roofs: the
 * GEMM peak train.c takes for MFU (fm_train_mfu_peak: the vendor's dense
 * peak at the compute precision, or for a device not in its table a GEMM
 * measured there) and a device-to-device copy's bandwidth measured here.
 *   bench_step_gpu ARCH C L NH NKV F V T B STEPS PRECISION RECOMPUTE
 *     PRECISION f32 | bf16 (compute; weights, gradients and AdamW fp32),
 *     RECOMPUTE 0 | 1 (per-layer activation recompute)
 * One step: zero_grad, forward + backward of one micro-batch of B x T
 * random tokens (train.c's loss weights: 1/(B*T) each), AdamW over every
 * parameter on the device (adamw_update). 2 untimed warm-up steps (GEMM plans
 * pinned, caches warm), STEPS timed steps (the median printed: ms_step,
 * tok_s, tflops, mfu), then STEPS profiled steps: each op timed from a
 * synchronize to the next, which the profile's step time includes (its
 * "share" column is of that step). Prints key=value lines and the profile
 * (lines starting "profile"); exit 1 when a loss is not finite.
 * Built in a CUDA build (target bench_step_gpu; regression/gpu/check.sh runs
 * it at the 1.2B shape); bench_step_gpu_emu is the same program on the SIMT
 * emulator's table, which ctest runs at a tiny shape (bench.step_gpu_emu). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/backend.h"
#include "fmhpc/core.h"
#include "fmhpc/model.h"
#include "fmhpc/rng.h"
#include "fmhpc/train.h"
#include "../bench_util.h"
#include "../op_profile.h"
#ifdef BENCH_EMU
#include "emu_backend.h"
#endif

#define MAX_STEPS 64

/* Best of 5 device-to-device copies of 256 MiB: GB/s counting bytes read and written. */
static double copy_bw(const FmBackend *be) {
  const int64_t bytes = (int64_t)256 << 20;
  char *a = be->alloc(bytes), *b = be->alloc(bytes);
  be->memset(a, 1, bytes);
  be->copy(b, a, bytes);
  be->synchronize();
  double best = 1e30;
  for (int k = 0; k < 5; k++) {
    const double t0 = now();
    be->copy(b, a, bytes);
    be->synchronize();
    const double dt = now() - t0;
    best = dt < best ? dt : best;
  }
  be->free(a);
  be->free(b);
  return 2.0 * (double)bytes / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 13) {
    fprintf(stderr, "usage: bench_step_gpu ARCH C L NH NKV F V T B STEPS f32|bf16 RECOMPUTE(0|1)\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
#ifdef BENCH_EMU
  fm_backend_set_cuda_stand_in(&emu);
#endif
  int st = 0;
  const FmBackend *dev = fm_backend_get("cuda", &st);
  if (!dev) {
    fprintf(stderr, "bench_step_gpu: no CUDA backend here (status %d): a build with CUDA and a GPU are needed\n", st);
    MPI_Finalize();
    return 77;
  }
  const char *arch = argv[1];
  FmModelDims d = {0};
  d.C = atoll(argv[2]), d.L = atoll(argv[3]), d.NH = atoll(argv[4]), d.NKV = atoll(argv[5]);
  d.F = atoll(argv[6]), d.V = atoll(argv[7]), d.T = atoll(argv[8]);
  d.HS = d.C / d.NH, d.tied = strcmp(arch, "gpt2") == 0, d.norm_eps = 1e-5, d.rope_theta = 10000.0;
  const int64_t B = atoll(argv[9]), steps = atoll(argv[10]) < MAX_STEPS ? atoll(argv[10]) : MAX_STEPS;
  const bool bf16 = strcmp(argv[11], "bf16") == 0, recompute = atoi(argv[12]) != 0;
  if (steps < 1 || (!bf16 && strcmp(argv[11], "f32") != 0)) {
    fprintf(stderr, "bench_step_gpu: STEPS >= 1 and PRECISION f32 or bf16\n");
    return 2;
  }
  fm_log_set_quiet(1);
  const FmModelKind *k = fm_model_find(arch);
  FmModel *m = NULL;
  const FmBackend pb = profiled_backend(dev, 1);
  if (!k || fm_model_create(&m, k, &d, &pb, B, recompute, stderr)) return 1;
  fm_model_set_compute_bf16(m, bf16);
  fm_model_init_weights(m, 1, 0.02, true);

  char name[256] = "";
  if (dev->device_name) dev->device_name(name, (int64_t)sizeof name);
  char src[384];
  const double peak = fm_train_mfu_peak(dev, bf16, src, sizeof src) / 1e9; /* GFLOP/s: train.c's MFU peak */
  const char *peak_src = strncmp(src, "measured", 8) == 0 ? "measured" : "vendor";
  const double bw = copy_bw(dev);

  const FmTensorTable *tab = fm_model_params(m);
  const int64_t P = tab->numel, n = B * d.T;
  float *mo = dev->alloc(P * 4), *vo = dev->alloc(P * 4);
  dev->memset(mo, 0, P * 4);
  dev->memset(vo, 0, P * 4);
  int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
  float *w = malloc((size_t)n * 4);
  bench_batch(n, d.T, d.V, tok, tgt, pos, w);
  const FmModelInput in = {tok, tgt, pos, NULL};
  const int64_t warm = 2;
  double wall[MAX_STEPS] = {0}, phase[3] = {0, 0, 0}, prof_total = 0, loss = 0;
  int bad = 0;
  for (int64_t s = 0; s < warm + 2 * steps; s++) {
    const int timed = s >= warm && s < warm + steps;
    profiling = s >= warm + steps, in_backward = 0;
    dev->synchronize();
    const double t0 = now();
    fm_model_zero_grad(m);
    dev->synchronize();
    const double t1 = now();
    loss = fm_model_forward_backward(m, &in, w, true);
    dev->synchronize();
    const double t2 = now();
    const double bc1 = 1.0 - pow(0.9, (double)(s + 1)), bc2 = 1.0 - pow(0.95, (double)(s + 1));
    dev->adamw_update(fm_model_param_arena(m), mo, vo, fm_model_grad_arena(m), P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      (float)bc1, (float)bc2);
    dev->synchronize();
    const double t3 = now();
    bad |= !isfinite(loss);
    if (timed) {
      wall[s - warm] = t3 - t0;
      phase[0] += t1 - t0, phase[1] += t2 - t1, phase[2] += t3 - t2;
    }
    if (profiling) prof_total += t3 - t0;
  }
  profiling = 0;
  const double med = median(wall, steps);
  const double flops = k->train_flops_per_token(&d) * (double)n, st_d = (double)steps;
  printf("device name='%s' peak_gflops=%.0f (%s, %s) copy_gb_s=%.0f\n", name, peak, peak_src, bf16 ? "bf16" : "fp32",
         bw);
  printf(
      "fmhpc params=%lld ms_step=%.2f tok_s=%.0f tflops=%.1f mfu=%.1f%% loss=%.6f steps=%lld recompute=%d (median "
      "step; 6N + attention FLOPs; 2 warm-up steps)\n",
      (long long)P, 1e3 * med, (double)n / med, flops / med / 1e12, 100 * flops / med / (peak * 1e9), loss,
      (long long)steps, recompute ? 1 : 0);
  printf("phases zero_ms=%.2f fwd_bwd_ms=%.2f optim_ms=%.2f optim_gb_s=%.0f\n", 1e3 * phase[0] / st_d,
         1e3 * phase[1] / st_d, 1e3 * phase[2] / st_d, 28.0 * (double)P / (phase[2] / st_d) / 1e9);
  const double prof_step = prof_total / st_d;
  const double other[] = {phase[0] / st_d, phase[2] / st_d};
  const char *const other_name[] = {"zero_grad", "optimizer (AdamW)"};
  const double other_bytes[] = {4.0 * (double)P, 28.0 * (double)P};
  print_profile(st_d, prof_step, peak, bw, other, other_name, other_bytes, 2, bf16 ? "bf16 tensor-core" : "fp32",
                "device copy");
  free(tok), free(tgt), free(pos), free(w);
  dev->free(mo);
  dev->free(vo);
  fm_model_free(m);
  MPI_Finalize();
  if (bad) fprintf(stderr, "bench_step_gpu: a loss was not finite (%g)\n", loss);
  return bad ? 1 : 0;
}
