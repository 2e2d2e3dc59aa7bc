/* op_profile.h: the per-op profile of a training step (header only; bench/
 * is not part of the library), shared by bench/step_cpu/bench_step.c (the
 * CPU backend) and bench/step_gpu/bench_step_gpu.c (a device backend). The
 * includer provides <math.h>, <stdio.h>, <string.h>, fmhpc/backend.h and
 * bench_util.h. */
#ifndef FMHPC_BENCH_OP_PROFILE_H
#define FMHPC_BENCH_OP_PROFILE_H

/* ---- the per-op profile ---------------------------------------------------------
 * A copy of a backend table whose model ops are wrappers: each calls the
 * real op and adds its wall time, FLOPs and bytes moved to the op's row, in
 * the phase it ran in (forward until the loss op runs, backward after it).
 * The roofline of a row is max(FLOPs / the GEMM peak, bytes / the memory bandwidth),
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
static int prof_sync;  /* a device backend: synchronize around each op, so its wall time is its own */
static double op_cpu0; /* process CPU seconds when the op being timed began */

static void op_begin(void) {
  if (profiling && prof_sync) real->synchronize();
  op_cpu0 = cpu_now();
}
static void rec(const char *name, int phase, double t0, double flops, double bytes) {
  if (!profiling) return;
  if (prof_sync) real->synchronize();
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
/* One wrapped op: its call between op_begin and rec. */
#define PROF_OP(name, phase, call, flops, bytes) \
  do {                                           \
    op_begin();                                  \
    const double t0_ = now();                    \
    call;                                        \
    rec(name, phase, t0_, flops, bytes);         \
  } while (0)
#define F4 4.0 /* bytes per float */

static void p_memset(void *p, int v, int64_t n) { PROF_OP("memset", PH, real->memset(p, v, n), 0, (double)n); }
static void p_copy(void *d, const void *s, int64_t n) { PROF_OP("copy", PH, real->copy(d, s, n), 0, 2.0 * (double)n); }
static void p_gelu_fwd(float *o, const float *x, int64_t n) {
  PROF_OP("gelu", PH, real->gelu_fwd(o, x, n), 0, F4 * 2 * (double)n);
}
static void p_gelu_bwd(float *dx, const float *d, const float *x, int64_t n) {
  PROF_OP("gelu", PH, real->gelu_bwd(dx, d, x, n), 0, F4 * 3 * (double)n);
}
static void p_swiglu_fwd(float *o, const float *g, const float *u, int64_t n) {
  PROF_OP("swiglu", PH, real->swiglu_fwd(o, g, u, n), 0, F4 * 3 * (double)n);
}
static void p_swiglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n) {
  PROF_OP("swiglu", PH, real->swiglu_bwd(dg, du, d, g, u, n), 0, F4 * 5 * (double)n);
}
static void p_add(float *o, const float *a, const float *b, int64_t n) {
  PROF_OP("add (residual)", PH, real->add(o, a, b, n), 0, F4 * 3 * (double)n);
}
static void p_round_bf16(float *x, int64_t n) {
  PROF_OP("round_bf16", PH, real->round_bf16(x, n), 0, F4 * 2 * (double)n);
}
static void p_matmul_fwd(float *o, const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t OC) {
  PROF_OP("matmul", PH, real->matmul_fwd(o, x, w, b, N, C, OC), 2.0 * (double)N * C * OC,
          F4 * ((double)N * C + (double)OC * C + (double)N * OC));
}
static void p_matmul_bwd(float *dx, float *dw, float *db, const float *d, const float *x, const float *w, int64_t N,
                         int64_t C, int64_t OC) {
  op_begin();
  double t0 = now();
  real->matmul_bwd(dx, dw, db, d, x, w, N, C, OC);
  const double k = (dx ? 1 : 0) + (dw ? 1 : 0);
  rec("matmul", PH, t0, k * 2.0 * (double)N * C * OC,
      F4 * ((double)N * OC + (dx ? 2.0 * N * C + (double)OC * C : 0) + (dw ? (double)N * C + 2.0 * OC * C : 0)));
}
static void p_layernorm_fwd(float *o, float *mu, float *rs, const float *x, const float *w, const float *b, int64_t N,
                            int64_t C, float eps) {
  PROF_OP("layernorm", PH, real->layernorm_fwd(o, mu, rs, x, w, b, N, C, eps), 0, F4 * 2 * (double)N * C);
}
static void p_layernorm_bwd(float *dx, float *dw, float *db, const float *d, const float *x, const float *w,
                            const float *mu, const float *rs, int64_t N, int64_t C) {
  PROF_OP("layernorm", PH, real->layernorm_bwd(dx, dw, db, d, x, w, mu, rs, N, C), 0, F4 * 4 * (double)N * C);
}
static void p_rmsnorm_fwd(float *o, float *rs, const float *x, const float *w, int64_t N, int64_t C, float eps) {
  PROF_OP("rmsnorm", PH, real->rmsnorm_fwd(o, rs, x, w, N, C, eps), 0, F4 * 2 * (double)N * C);
}
static void p_rmsnorm_bwd(float *dx, float *dw, const float *d, const float *x, const float *w, const float *rs,
                          int64_t N, int64_t C) {
  PROF_OP("rmsnorm", PH, real->rmsnorm_bwd(dx, dw, d, x, w, rs, N, C), 0, F4 * 4 * (double)N * C);
}
static void p_rope_fwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float th) {
  PROF_OP("rope", PH, real->rope_fwd(x, pos, N, ld, H, HS, th), 0, F4 * 2 * (double)N * H * HS);
}
static void p_rope_bwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float th) {
  PROF_OP("rope", PH, real->rope_bwd(x, pos, N, ld, H, HS, th), 0, F4 * 2 * (double)N * H * HS);
}
static double att_flops(int64_t B, int64_t T, int64_t NH, int64_t HS) {
  return 4.0 * (double)B * NH * HS * ((double)T * (T + 1) / 2); /* QK^T and PV over the causal triangle */
}
static void p_attention_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                            int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS) {
  PROF_OP("attention", PH, real->attention_fwd(o, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS),
          att_flops(B, T, NH, HS), F4 * (double)B * T * (2.0 * NH + 2.0 * NKV) * HS);
}
static void p_attention_bwd(float *dq, float *dk, float *dv, const float *d, const float *o, const float *lse,
                            const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                            const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  PROF_OP("attention", PH, real->attention_bwd(dq, dk, dv, d, o, lse, q, k, v, ldq, ldkv, seg, B, T, NH, NKV, HS),
          2.5 * att_flops(B, T, NH, HS), F4 * (double)B * T * (4.0 * NH + 4.0 * NKV) * HS);
}
static double p_xent(float *dx, float *dw, const float *x, const float *w, const int32_t *tg, const float *wt,
                     int64_t N, int64_t C, int64_t V, float *scratch) {
  op_begin();
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
  PROF_OP("embedding", PH, real->embedding_fwd(o, tok, wte, pos, wpe, N, C), 0, F4 * (wpe ? 3.0 : 2.0) * (double)N * C);
}
static void p_embedding_bwd(float *dwte, float *dwpe, const float *d, const int32_t *tok, const int32_t *pos, int64_t N,
                            int64_t C, int64_t V) {
  PROF_OP("embedding", PH, real->embedding_bwd(dwte, dwpe, d, tok, pos, N, C, V), 0,
          F4 * (dwpe ? 5.0 : 3.0) * (double)N * C);
}

/* be's table with its model ops wrapped; sync: a device backend (its ops
 * queue work, so each is timed from a synchronize to the next). */
static FmBackend profiled_backend(const FmBackend *be, int sync) {
  real = be;
  prof_sync = sync;
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

/* One micro-batch of n = B*T positions the benchmarks share: random tokens
 * and targets below V (fm_rng streams 0 and 1 of seed 1, key 9), positions
 * 0..T-1 per row, train.c's loss weights 1/n. Needs fmhpc/rng.h. */
static void bench_batch(int64_t n, int64_t T, int64_t V, int32_t *tok, int32_t *tgt, int32_t *pos, float *w) {
  for (int64_t i = 0; i < n; i++) {
    tok[i] = (int32_t)(fm_rng_block(1, 9, 0, (uint64_t)i).v[0] % (uint32_t)V);
    tgt[i] = (int32_t)(fm_rng_block(1, 9, 1, (uint64_t)i).v[0] % (uint32_t)V);
    pos[i] = (int32_t)(i % T);
    w[i] = 1.0f / (float)n;
  }
}

/* The table: peak in GFLOP/s (peak_name: "sgemm", "bf16 tensor-core"), bw
 * in GB/s (bw_name: "triad", "device copy"). */
static void print_profile(double steps, double step_s, double peak, double bw, const double *other,
                          const char *const *other_name, const double *other_bytes, int nother, const char *peak_name,
                          const char *bw_name) {
  static const char *phase_name[] = {"forward", "backward", "loss"};
  printf("profile per step (mean of %.0f): roofs: %s %.1f GFLOP/s, memory %.1f GB/s (%s)\n", steps, peak_name, peak, bw,
         bw_name);
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
        mem_s += roof; /* the rest: their minimum bytes at the memory bandwidth */
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
  /* The roofline of the whole step: every FLOP at the GEMM peak, every
   * other op's (and zero_grad's and AdamW's) minimum bytes at the memory
   * bandwidth, one after another (nothing overlaps a memory-bound op with a
   * GEMM here). Its GFLOP/s over the peak is the most "%peak" this step can
   * show on this machine with these ops, however fast each one gets. */
  for (int i = 0; i < nother && i < 2; i++) mem_s += other_bytes[i] / (bw * 1e9);
  const double bound_s = gemm_s + mem_s;
  printf(
      "profile   bound: GEMM-like ops at the %s peak %.1f ms + memory-bound ops, zero_grad and AdamW at the "
      "%s bandwidth %.1f ms = %.1f ms: at most %.1f GFLOP/s, %.1f%% of the peak (measured: %.1f%%)\n",
      peak_name, 1e3 * gemm_s, bw_name, 1e3 * mem_s, 1e3 * bound_s, flops_all / bound_s / 1e9,
      100 * flops_all / bound_s / 1e9 / peak, 100 * flops_all / step_s / 1e9 / peak);
}

#endif
