/* bench_step.c: time a training step of fmhpc's CPU backend (forward +
 * backward of one micro-batch of B x T tokens + an AdamW update of every
 * parameter), the machine's measured fp32 GEMM peak and memory bandwidth, and
 * a per-op profile of the step against those roofs. Driven by run.sh, which
 * runs PyTorch on the same step beside it.
 *   bench_step ARCH C L NH NKV F V T B STEPS THREADS   (one rank: mpirun -n 1 or none)
 * prints key=value lines (ms_step, tok_s, gflops, peak_gflops, mem_gb_s), the
 * phase line and the per-op table (lines starting "profile").
 * Timing: 3 untimed warm-up steps, then at least STEPS timed steps and more
 * until they add up to FMHPC_BENCH_MIN_S seconds (default 4; at most
 * MAX_STEPS), so a fast step (the nano Llama) is timed over many. ms_step,
 * tok_s, gflops and cpu_s_step are the MEDIAN step's (wall and CPU seconds
 * each their own median), so one step slowed by another process on a shared
 * machine does not decide the figure; mean_ms and best_ms are printed beside.
 * The per-op profile is the mean over the same timed steps. */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/dist.h"
#include "fmhpc/model.h"
#include "fmhpc/optim.h"
#include "fmhpc/rng.h"
#include "fmhpc/runtime.h"
#include "../bench_util.h"

#define MAX_STEPS 200

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(const double *v, int64_t n) { /* of a copy: v keeps its order */
  double t[MAX_STEPS];
  memcpy(t, v, (size_t)n * sizeof *t);
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

void openblas_set_num_threads(int);

/* Best of 5 multi-threaded OpenBLAS sgemm at 2048^3: the machine's fp32 roof
 * as far as this process can reach it. main measures it before and after the
 * timed steps and keeps the larger, so a burst of load on a shared machine
 * during one measurement does not lower the roof (and raise "% of peak").
 * OpenBLAS goes back to one thread before it returns: the backend's rule
 * (matmul.c) is one BLAS thread per tile; a step run with more has every
 * tile's sgemm from each OpenMP thread hand work to OpenBLAS's own pool,
 * whose thread then competes for the cores (it did so from 7cf232d on,
 * until the peak restored the count itself). */
static double gemm_peak(int threads) {
  (void)fm_cpu_blas_info(); /* the backend's kernel choice first (matmul.c): the peak runs the same kernel */
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
  openblas_set_num_threads(1);
  free(a);
  free(c);
  return 2.0 * n * (double)n * n / best / 1e9;
}

/* ---- the per-op profile ---------------------------------------------------------
 * A copy of the CPU backend table whose model ops are wrappers: each calls the
 * real op and adds its wall time, FLOPs and bytes moved to the op's row, in
 * the phase it ran in (forward until the loss op runs, backward after it).
 * The roofline of a row is max(FLOPs / sgemm peak, bytes / memory bandwidth),
 * both measured on this machine; "of roof" is that time over the measured
 * time. FLOPs are the useful ones (causal attention: the lower triangle; the
 * attention backward: 2.5x its forward's, five products to the forward's two;
 * the loss: one logits product forward, two backward). Bytes: each array read
 * or written once. */
typedef struct OpRow {
  const char *name;
  int phase;                   /* 0 forward, 1 backward, 2 loss (forward+backward) */
  double s, cpu, flops, bytes; /* wall and process CPU seconds (all threads) */
  long calls;
} OpRow;
enum { P_FWD, P_BWD, P_LOSS };
#define MAX_ROWS 64
static OpRow rows[MAX_ROWS];
static int nrows, in_backward, profiling;
static const FmBackend *real;
static double op_cpu0; /* process CPU seconds when the op being timed began */

static void rec(const char *name, int phase, double t0, double flops, double bytes) {
  if (!profiling) return;
  const double dt = now() - t0, dc = cpu_now() - op_cpu0;
  int i = 0;
  while (i < nrows && !(rows[i].phase == phase && strcmp(rows[i].name, name) == 0)) i++;
  if (i == nrows) {
    if (nrows == MAX_ROWS) return;
    rows[nrows++] = (OpRow){name, phase, 0, 0, 0, 0, 0};
  }
  rows[i].s += dt, rows[i].cpu += dc, rows[i].flops += flops, rows[i].bytes += bytes, rows[i].calls++;
}
#define PH (in_backward ? P_BWD : P_FWD)
#define F4 4.0 /* bytes per float */

static void p_memset(void *p, int v, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->memset(p, v, n);
  rec("memset", PH, t0, 0, (double)n);
}
static void p_copy(void *d, const void *s, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->copy(d, s, n);
  rec("copy", PH, t0, 0, 2.0 * (double)n);
}
static void p_gelu_fwd(float *o, const float *x, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->gelu_fwd(o, x, n);
  rec("gelu", PH, t0, 0, F4 * 2 * (double)n);
}
static void p_gelu_bwd(float *dx, const float *d, const float *x, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->gelu_bwd(dx, d, x, n);
  rec("gelu", PH, t0, 0, F4 * 3 * (double)n);
}
static void p_swiglu_fwd(float *o, const float *g, const float *u, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->swiglu_fwd(o, g, u, n);
  rec("swiglu", PH, t0, 0, F4 * 3 * (double)n);
}
static void p_swiglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->swiglu_bwd(dg, du, d, g, u, n);
  rec("swiglu", PH, t0, 0, F4 * 5 * (double)n);
}
static void p_add(float *o, const float *a, const float *b, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->add(o, a, b, n);
  rec("add (residual)", PH, t0, 0, F4 * 3 * (double)n);
}
static void p_round_bf16(float *x, int64_t n) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->round_bf16(x, n);
  rec("round_bf16", PH, t0, 0, F4 * 2 * (double)n);
}
static void p_matmul_fwd(float *o, const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t OC) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->matmul_fwd(o, x, w, b, N, C, OC);
  rec("matmul", PH, t0, 2.0 * (double)N * C * OC, F4 * ((double)N * C + (double)OC * C + (double)N * OC));
}
static void p_matmul_bwd(float *dx, float *dw, float *db, const float *d, const float *x, const float *w, int64_t N,
                         int64_t C, int64_t OC) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->matmul_bwd(dx, dw, db, d, x, w, N, C, OC);
  const double k = (dx ? 1 : 0) + (dw ? 1 : 0);
  rec("matmul", PH, t0, k * 2.0 * (double)N * C * OC,
      F4 * ((double)N * OC + (dx ? 2.0 * N * C + (double)OC * C : 0) + (dw ? (double)N * C + 2.0 * OC * C : 0)));
}
static void p_layernorm_fwd(float *o, float *mu, float *rs, const float *x, const float *w, const float *b, int64_t N,
                            int64_t C, float eps) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->layernorm_fwd(o, mu, rs, x, w, b, N, C, eps);
  rec("layernorm", PH, t0, 0, F4 * 2 * (double)N * C);
}
static void p_layernorm_bwd(float *dx, float *dw, float *db, const float *d, const float *x, const float *w,
                            const float *mu, const float *rs, int64_t N, int64_t C) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->layernorm_bwd(dx, dw, db, d, x, w, mu, rs, N, C);
  rec("layernorm", PH, t0, 0, F4 * 4 * (double)N * C);
}
static void p_rmsnorm_fwd(float *o, float *rs, const float *x, const float *w, int64_t N, int64_t C, float eps) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->rmsnorm_fwd(o, rs, x, w, N, C, eps);
  rec("rmsnorm", PH, t0, 0, F4 * 2 * (double)N * C);
}
static void p_rmsnorm_bwd(float *dx, float *dw, const float *d, const float *x, const float *w, const float *rs,
                          int64_t N, int64_t C) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->rmsnorm_bwd(dx, dw, d, x, w, rs, N, C);
  rec("rmsnorm", PH, t0, 0, F4 * 4 * (double)N * C);
}
static void p_rope_fwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float th) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->rope_fwd(x, pos, N, ld, H, HS, th);
  rec("rope", PH, t0, 0, F4 * 2 * (double)N * H * HS);
}
static void p_rope_bwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float th) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->rope_bwd(x, pos, N, ld, H, HS, th);
  rec("rope", PH, t0, 0, F4 * 2 * (double)N * H * HS);
}
static double att_flops(int64_t B, int64_t T, int64_t NH, int64_t HS) {
  return 4.0 * (double)B * NH * HS * ((double)T * (T + 1) / 2); /* QK^T and PV over the causal triangle */
}
static void p_attention_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                            int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->attention_fwd(o, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS);
  rec("attention", PH, t0, att_flops(B, T, NH, HS), F4 * (double)B * T * (2.0 * NH + 2.0 * NKV) * HS);
}
static void p_attention_bwd(float *dq, float *dk, float *dv, const float *d, const float *o, const float *lse,
                            const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                            const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->attention_bwd(dq, dk, dv, d, o, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS);
  rec("attention", PH, t0, 2.5 * att_flops(B, T, NH, HS), F4 * (double)B * T * (4.0 * NH + 4.0 * NKV) * HS);
}
static double p_xent(float *dx, float *dw, const float *x, const float *w, const int32_t *tg, const float *wt,
                     int64_t N, int64_t C, int64_t V, float *scratch) {
  op_cpu0 = cpu_now();
  double t0 = now();
  double r = real->xent_fwd_bwd(dx, dw, x, w, tg, wt, N, C, V, scratch);
  const double k = 1 + (dx ? 1 : 0) + (dw ? 1 : 0);
  rec("classifier+cross-entropy", P_LOSS, t0, k * 2.0 * (double)N * C * V,
      F4 * ((double)N * C + (double)V * C) * (dw ? 2 : 1));
  in_backward = 1;
  return r;
}
static void p_embedding_fwd(float *o, const int32_t *tok, const float *wte, const int32_t *pos, const float *wpe,
                            int64_t N, int64_t C) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->embedding_fwd(o, tok, wte, pos, wpe, N, C);
  rec("embedding", PH, t0, 0, F4 * (wpe ? 3.0 : 2.0) * (double)N * C);
}
static void p_embedding_bwd(float *dwte, float *dwpe, const float *d, const int32_t *tok, const int32_t *pos, int64_t N,
                            int64_t C, int64_t V) {
  op_cpu0 = cpu_now();
  double t0 = now();
  real->embedding_bwd(dwte, dwpe, d, tok, pos, N, C, V);
  rec("embedding", PH, t0, 0, F4 * (dwpe ? 5.0 : 3.0) * (double)N * C);
}

static FmBackend profiled_backend(void) {
  real = fm_backend_cpu();
  FmBackend b = *real;
  b.memset = p_memset, b.copy = p_copy, b.gelu_fwd = p_gelu_fwd, b.gelu_bwd = p_gelu_bwd;
  b.swiglu_fwd = p_swiglu_fwd, b.swiglu_bwd = p_swiglu_bwd, b.add = p_add, b.round_bf16 = p_round_bf16;
  b.matmul_fwd = p_matmul_fwd, b.matmul_bwd = p_matmul_bwd, b.layernorm_fwd = p_layernorm_fwd;
  b.layernorm_bwd = p_layernorm_bwd, b.rmsnorm_fwd = p_rmsnorm_fwd, b.rmsnorm_bwd = p_rmsnorm_bwd;
  b.rope_fwd = p_rope_fwd, b.rope_bwd = p_rope_bwd, b.attention_fwd = p_attention_fwd;
  b.attention_bwd = p_attention_bwd, b.xent_fwd_bwd = p_xent, b.embedding_fwd = p_embedding_fwd;
  b.embedding_bwd = p_embedding_bwd;
  return b;
}

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

static void print_profile(double steps, double step_s, double peak, double bw, const double *other,
                          const char *const *other_name, const double *other_bytes, int nother) {
  static const char *phase_name[] = {"forward", "backward", "loss"};
  printf("profile per step (mean of %.0f): roofs: sgemm %.1f GFLOP/s, memory %.1f GB/s (triad)\n", steps, peak, bw);
  printf("profile   %-9s %-26s %6s %9s %6s %9s %8s %8s %9s\n", "phase", "op", "calls", "ms", "share", "GFLOP/s", "GB/s",
         "of_roof", "cpu_ms");
  double covered = 0, gemm_s = 0, mem_s = 0, flops_all = 0; /* the step's roofline (below) */
  for (int ph = 0; ph < 3; ph++)
    for (int i = 0; i < nrows; i++) {
      const OpRow *r = &rows[i];
      if (r->phase != ph) continue;
      const double s = r->s / steps, roof = fmax(r->flops / steps / (peak * 1e9), r->bytes / steps / (bw * 1e9));
      covered += s;
      flops_all += r->flops / steps;
      if (r->flops > 0)
        gemm_s += roof; /* GEMM-like ops at their roof (the larger of FLOPs and bytes) */
      else
        mem_s += roof; /* the rest: their minimum bytes at the triad bandwidth */
      printf("profile   %-9s %-26s %6.0f %9.2f %5.1f%% %9.2f %8.2f %7.1f%% %9.2f\n", phase_name[ph], r->name,
             (double)r->calls / steps, 1e3 * s, 100 * s / step_s, r->flops / steps / s / 1e9,
             r->bytes / steps / s / 1e9, 100 * roof / s, 1e3 * r->cpu / steps);
    }
  for (int i = 0; i < nother; i++) {
    const double s = other[i];
    if (i < 2) covered += s;
    printf("profile   %-9s %-26s %6d %9.2f %5.1f%% %9s %8.2f %7.1f%%\n", i < 2 ? "step" : "extra", other_name[i], 1,
           1e3 * s, 100 * s / step_s, "-", other_bytes[i] / s / 1e9, 100 * other_bytes[i] / (bw * 1e9) / s);
  }
  printf("profile   ops + zero_grad + optimizer cover %.1f%% of the %.1f ms step (the rest: model glue)\n",
         100 * covered / step_s, 1e3 * step_s);
  /* The roofline of the whole step: every FLOP at the sgemm peak, every
   * other op's (and zero_grad's and AdamW's) minimum bytes at the triad
   * bandwidth, one after another (nothing overlaps a memory-bound op with a
   * GEMM here). Its GFLOP/s over the peak is the most "%peak" this step can
   * show on this machine with these ops, however fast each one gets. */
  for (int i = 0; i < nother && i < 2; i++) mem_s += other_bytes[i] / (bw * 1e9);
  const double bound_s = gemm_s + mem_s;
  printf(
      "profile   bound: GEMM-like ops at the sgemm peak %.1f ms + memory-bound ops, zero_grad and AdamW at the "
      "triad bandwidth %.1f ms = %.1f ms: at most %.1f GFLOP/s, %.1f%% of the peak (measured: %.1f%%)\n",
      1e3 * gemm_s, 1e3 * mem_s, 1e3 * bound_s, flops_all / bound_s / 1e9, 100 * flops_all / bound_s / 1e9 / peak,
      100 * flops_all / step_s / 1e9 / peak);
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
  const double peak0 = gemm_peak(threads), bw = mem_bw(threads);
  omp_set_num_threads(threads);
  fm_log_set_quiet(1);
  const FmModelKind *k = fm_model_find(arch);
  FmModel *m = NULL;
  const FmBackend pb = profiled_backend();
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
  for (int64_t i = 0; i < n; i++) {
    tok[i] = (int32_t)(fm_rng_block(1, 9, 0, (uint64_t)i).v[0] % (uint32_t)d.V);
    tgt[i] = (int32_t)(fm_rng_block(1, 9, 1, (uint64_t)i).v[0] % (uint32_t)d.V);
    pos[i] = (int32_t)(i % d.T);
    w[i] = 1.0f / (float)n;
  }
  FmModelInput in = {tok, tgt, pos, NULL};
  const char *min_env = getenv("FMHPC_BENCH_MIN_S");
  const double min_s = min_env ? atof(min_env) : 4.0;
  const int64_t warm = 3;
  double wall_v[MAX_STEPS], cpu_v[MAX_STEPS];
  double best = 1e30, total = 0, phase[3] = {0, 0, 0}, reduce_s = 0; /* zero_grad, fwd+bwd, optimizer */
  int64_t timed = 0;
  for (int64_t s = 0; timed < MAX_STEPS && (timed < steps || total < min_s); s++) {
    profiling = s >= warm, in_backward = 0;
    const double c0 = cpu_now();
    double t0 = now();
    fm_model_zero_grad(m);
    double t1 = now();
    fm_model_forward_backward(m, &in, w, true);
    double t2 = now();
    fm_optim_step(opt, fm_model_param_arena(m), fm_model_grad_arena(m), s + 1, 1e-4f);
    double dt = now() - t0;
    const double dc = cpu_now() - c0;
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
    }
  }
  profiling = 0;
  const double peak1 = gemm_peak(threads), peak = peak1 > peak0 ? peak1 : peak0;
  double fwd = 0; /* the forward alone, to split forward+backward */
  for (int64_t s = 0; s < timed; s++) {
    double t0 = now();
    fm_model_forward_backward(m, &in, w, false);
    fwd += now() - t0;
  }
  const double mean = total / (double)timed, med = median(wall_v, timed);
  const double flops = k->train_flops_per_token(&d) * (double)n;
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
  print_profile(st, mean, peak, bw, other, other_name, other_bytes, 3);
  free(shard), free(wcopy), free(tok), free(tgt), free(pos), free(w);
  fm_reduce_free(&red);
  fm_comm_destroy(comm);
  fm_optim_free(opt);
  fm_model_free(m);
  MPI_Finalize();
  return 0;
}
