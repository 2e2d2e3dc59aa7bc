/* test_cuda_ops.c: each CUDA op (through the "cuda" FmBackend table) against
 * the CPU op on the same inputs, at a stated tolerance:
 *   bitwise: add, scale, bf16 casts, round_bf16, AdamW, memory ops. Their
 *     shared bodies use only correctly rounded + - * / sqrt (explicit
 *     __fadd_rn etc. on the device, -ffp-contract=off on the host).
 *   GELU, SwiGLU: the bodies share every bit up to expf, where glibc is within
 *     ~0.5 ulp and CUDA within 2 ulp, so the two exps differ by <= 3 ulp.
 *     Following that through the shared arithmetic (one more rounding each
 *     step) bounds forward outputs by 7.5 eps relative (SwiGLU 8.5 eps): we
 *     allow 10 eps |cpu|. Backward outputs sum two terms that cancel (gelu'
 *     crosses 0 near x = -0.75), so their bound, 14 eps, is relative to the
 *     terms' magnitude |dout| (s + |x s(1-s) dz/dx|): we allow 16 eps of it.
 *     Results whose exp is subnormal get 8 subnormal steps times (1 + |x|).
 *   Model ops: LayerNorm/RMSNorm out, mean, rstd, dinp, RoPE (positions in
 *     the host table), embedding fwd/bwd, Lion/Sophia: bitwise; the norms'
 *     weight gradients within one float rounding; matmul, attention and
 *     cross-entropy (other summation orders, the device's expf) within the
 *     tolerances tests/kernels/emu/test_emu_ops.c states; backward passes
 *     repeat bitwise. cuda_backend_table: NULL exactly where ops.def says
 *     nocuda.
 * The same kernels run without a GPU under the SIMT emulator: tests/kernels/emu.
 * Every case skips (exit 77) when the build has no CUDA, or cudaGetDeviceCount
 * returns an error (no driver: error 35) or no device. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attention_ref.h"
#include "fm_test.h"
#include "fmhpc/dist.h"
#include "fmhpc/optim.h"
#include "fmhpc/tensor.h"

#ifdef FMHPC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define EPS                ((double)FLT_EPSILON)
#define SUBNORMAL_FLOOR(x) (8.0 * 0x1p-149 * (1.0 + fabs((double)(x))))
#define GELU_2BETA         1.5957691216057308 /* 2 sqrt(2/pi) */
#define GELU_KAPPA         0.044715

/* The skip decision: the return code of cudaGetDeviceCount, then the count. */
static const FmBackend *cuda_or_skip(void) {
#ifndef FMHPC_HAVE_CUDA
  fm_test_skip("no CUDA device: this build has no CUDA backend (FMHPC_CUDA=OFF or no nvcc)");
#else
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    char why[256];
    snprintf(why, sizeof why, "no CUDA device: cudaGetDeviceCount returned %d (%s)", (int)e, cudaGetErrorString(e));
    fm_test_skip(why);
  }
  if (count == 0) fm_test_skip("no CUDA device: cudaGetDeviceCount found 0 devices");
  int st = 0;
  const FmBackend *b = fm_backend_get("cuda", &st);
  if (!b) {
    FM__FAIL("a device answers but fm_backend_get(\"cuda\") failed: %s", fm_strerror(st));
    exit(1);
  }
  return b;
#endif
}

/* ---- helpers ------------------------------------------------------------------ */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_uniform(double lo, double hi) { return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53; }
static float *host_f32(int64_t n) { return fm_xmalloc((size_t)n * sizeof(float)); }
static void fill_uniform(float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)rng_uniform(lo, hi);
}
/* Specials at the front: zeros, infinities, NaN, values whose sigmoid is 0 or 1. */
static void put_specials(float *x) {
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 40.0f, -40.0f, 1e20f, -1e20f, 1e-30f, -1e-30f};
  memcpy(x, sp, sizeof sp);
}
static void *to_device(const FmBackend *g, const void *h, int64_t bytes) {
  void *d = g->alloc(bytes);
  g->copy_to_device(d, h, bytes);
  return d;
}
static void *from_device(const FmBackend *g, const void *d, int64_t bytes) {
  void *h = fm_xmalloc((size_t)bytes);
  g->copy_to_host(h, d, bytes);
  return h;
}
/* Same value: equal, or both NaN, or within tol. */
static int close_to(float gpu, float cpu, double tol) {
  if (isnan(cpu) || isnan(gpu)) return isnan(cpu) && isnan(gpu);
  if (isinf(cpu) || isinf(gpu)) return gpu == cpu;
  return fabs((double)gpu - (double)cpu) <= tol;
}
static int64_t count_bit_diffs(const void *a, const void *b, int64_t n, int64_t elem) {
  const uint8_t *p = a, *q = b;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(p + i * elem, q + i * elem, (size_t)elem) != 0) bad++;
  return bad;
}
#define REPORT_FIRST(bad, ...)              \
  do {                                      \
    if ((bad)++ < 5) FM__FAIL(__VA_ARGS__); \
  } while (0)

/* 2^20 + 3: not a multiple of the block size, one full grid pass and a tail. */
#define N_ELEM (((int64_t)1 << 20) + 3)

/* ---- table and memory -------------------------------------------------------------- */
FM_TEST(cuda_backend_table) {
  const FmBackend *g = cuda_or_skip();
  FM_EXPECT_EQ_STR(g->name, "cuda");
  FM_EXPECT(!g->host_accessible);
  /* A slot is NULL exactly where ops.def marks the op nocuda (no kernel yet):
   * a NULL `cuda` op would crash a step, a kernel left out of the table would
   * never run. */
  int ops = 0, kernels = 0;
#define FM_OP(name, cuda, use, ret, params)                                                                        \
  do {                                                                                                             \
    const int want = strcmp(#cuda, "cuda") == 0;                                                                   \
    ops++;                                                                                                         \
    kernels += want;                                                                                               \
    if (want != (g->name != NULL))                                                                                 \
      FM__FAIL("op %s: ops.def says %s but the CUDA table has %s", #name, #cuda, g->name ? "a function" : "NULL"); \
  } while (0);
#include "fmhpc/ops.def"
#undef FM_OP
  printf("cuda table: %d of %d ops have a CUDA kernel\n", kernels, ops);
  FM_EXPECT(kernels > 0);
  int st = 1;
  FM_EXPECT(fm_backend_get("auto", &st) == g);
  FM_EXPECT_EQ_INT(st, 0);
}

FM_TEST(cuda_memory_ops) {
  const FmBackend *g = cuda_or_skip();
  FM_EXPECT(g->alloc(0) == NULL);
  g->free(NULL);
  enum { N = 100003 };
  uint8_t *host = fm_xmalloc(N), *want = fm_xmalloc(N);
  for (int i = 0; i < N; i++) host[i] = (uint8_t)(rng_next() >> 56);
  uint8_t *a = to_device(g, host, N), *b = g->alloc(N);
  g->copy(b, a, N);
  g->memset(b + 7, 0x5A, 1001); /* odd offset and length */
  g->synchronize();
  uint8_t *back = from_device(g, b, N);
  memcpy(want, host, N);
  memset(want + 7, 0x5A, 1001);
  FM_EXPECT(memcmp(back, want, N) == 0);
  g->free(a);
  g->free(b);
  free(host);
  free(want);
  free(back);
  char name[256] = "";
  FM_EXPECT_EQ_INT(g->device_name(name, sizeof name), FM_OK);
  FM_EXPECT(strlen(name) > 0);
  printf("device_name: %s\n", name);
}

/* ---- GELU, SwiGLU ------------------------------------------------------------------ */
FM_TEST(gelu_fwd_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  float *x = host_f32(n), *cpu = host_f32(n);
  fill_uniform(x, n, -12.0, 12.0);
  put_specials(x);
  fm_cpu_gelu_fwd(cpu, x, n);
  float *dx = to_device(g, x, nb), *dy = g->alloc(nb);
  g->gelu_fwd(dy, dx, n);
  float *gpu = from_device(g, dy, nb);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!close_to(gpu[i], cpu[i], 10.0 * EPS * fabs(cpu[i]) + SUBNORMAL_FLOOR(x[i])))
      REPORT_FIRST(bad, "gelu(%.9g): cuda %.9g cpu %.9g", x[i], gpu[i], cpu[i]);
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(dx);
  g->free(dy);
  free(x);
  free(cpu);
  free(gpu);
}

/* |dout| (s + |x s(1-s) dz/dx|) in float64: the scale of gelu_bwd's rounding. */
static double gelu_bwd_scale(float dout, float x) {
  double xd = x, z = GELU_2BETA * (xd + GELU_KAPPA * xd * xd * xd);
  double s = 1.0 / (1.0 + exp(-z)), sd = s * (1.0 - s);
  double t = fabs(xd * sd * GELU_2BETA * (1.0 + 3.0 * GELU_KAPPA * xd * xd));
  return fabs((double)dout) * (s + (isnan(t) ? 0.0 : t));
}

FM_TEST(gelu_bwd_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  float *x = host_f32(n), *dout = host_f32(n), *cpu = host_f32(n);
  fill_uniform(x, n, -12.0, 12.0);
  put_specials(x);
  fill_uniform(dout, n, -2.0, 2.0);
  fm_cpu_gelu_bwd(cpu, dout, x, n);
  float *d_x = to_device(g, x, nb), *d_dout = to_device(g, dout, nb), *d_dx = g->alloc(nb);
  g->gelu_bwd(d_dx, d_dout, d_x, n);
  float *gpu = from_device(g, d_dx, nb);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!close_to(gpu[i], cpu[i], 16.0 * EPS * gelu_bwd_scale(dout[i], x[i]) + SUBNORMAL_FLOOR(x[i])))
      REPORT_FIRST(bad, "gelu_bwd(x=%.9g, dout=%.9g): cuda %.9g cpu %.9g", x[i], dout[i], gpu[i], cpu[i]);
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(d_x);
  g->free(d_dout);
  g->free(d_dx);
  free(x);
  free(dout);
  free(cpu);
  free(gpu);
}

FM_TEST(swiglu_fwd_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  float *gate = host_f32(n), *up = host_f32(n), *cpu = host_f32(n);
  fill_uniform(gate, n, -90.0, 30.0);
  put_specials(gate);
  fill_uniform(up, n, -3.0, 3.0);
  fm_cpu_swiglu_fwd(cpu, gate, up, n);
  float *d_g = to_device(g, gate, nb), *d_u = to_device(g, up, nb), *d_o = g->alloc(nb);
  g->swiglu_fwd(d_o, d_g, d_u, n);
  float *gpu = from_device(g, d_o, nb);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!close_to(gpu[i], cpu[i], 10.0 * EPS * fabs(cpu[i]) + SUBNORMAL_FLOOR(gate[i] * up[i])))
      REPORT_FIRST(bad, "swiglu(%.9g, %.9g): cuda %.9g cpu %.9g", gate[i], up[i], gpu[i], cpu[i]);
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(d_g);
  g->free(d_u);
  g->free(d_o);
  free(gate);
  free(up);
  free(cpu);
  free(gpu);
}

FM_TEST(swiglu_bwd_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  float *gate = host_f32(n), *up = host_f32(n), *dout = host_f32(n);
  float *cdg = host_f32(n), *cdu = host_f32(n);
  fill_uniform(gate, n, -90.0, 30.0);
  put_specials(gate);
  fill_uniform(up, n, -3.0, 3.0);
  fill_uniform(dout, n, -2.0, 2.0);
  fm_cpu_swiglu_bwd(cdg, cdu, dout, gate, up, n);
  float *d_g = to_device(g, gate, nb), *d_u = to_device(g, up, nb), *d_do = to_device(g, dout, nb);
  float *d_dg = g->alloc(nb), *d_du = g->alloc(nb);
  g->swiglu_bwd(d_dg, d_du, d_do, d_g, d_u, n);
  float *gdg = from_device(g, d_dg, nb), *gdu = from_device(g, d_du, nb);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double gd = gate[i], s = 1.0 / (1.0 + exp(-gd)), t = fabs(gd * s * (1.0 - s));
    double scale = fabs((double)dout[i] * up[i]) * (s + (isnan(t) ? 0.0 : t));
    if (!close_to(gdg[i], cdg[i], 16.0 * EPS * scale + SUBNORMAL_FLOOR(gate[i])))
      REPORT_FIRST(bad, "swiglu dgate(%.9g, %.9g, %.9g): cuda %.9g cpu %.9g", dout[i], gate[i], up[i], gdg[i], cdg[i]);
    if (!close_to(gdu[i], cdu[i], 10.0 * EPS * fabs(cdu[i]) + SUBNORMAL_FLOOR(gate[i] * dout[i])))
      REPORT_FIRST(bad, "swiglu dup(%.9g, %.9g): cuda %.9g cpu %.9g", dout[i], gate[i], gdu[i], cdu[i]);
  }
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(d_g);
  g->free(d_u);
  g->free(d_do);
  g->free(d_dg);
  g->free(d_du);
  free(gate);
  free(up);
  free(dout);
  free(cdg);
  free(cdu);
  free(gdg);
  free(gdu);
}

/* ---- bitwise ops --------------------------------------------------------------------- */
/* 17M elements: more than 16384 blocks x 256 threads, so the grid-stride loop
 * runs a second pass. In place (x = x + b) as the residual stream uses it. */
FM_TEST(add_scale_bitwise) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = 17 * ((int64_t)1 << 20) + 5, nb = n * 4;
  float *a = host_f32(n), *b = host_f32(n);
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)(rng_uniform(-1, 1) * ldexp(1.0, (int)(rng_next() % 61) - 30));
    b[i] = (float)(rng_uniform(-1, 1) * ldexp(1.0, (int)(rng_next() % 61) - 30));
  }
  float *d_a = to_device(g, a, nb), *d_b = to_device(g, b, nb);
  g->add(d_a, d_a, d_b, n);
  g->scale(d_a, 0.7071067811865476f, n);
  float *gpu = from_device(g, d_a, nb);
  fm_cpu_add(a, a, b, n);
  fm_cpu_scale(a, 0.7071067811865476f, n);
  FM_EXPECT_EQ_INT(count_bit_diffs(gpu, a, n, 4), 0);
  g->free(d_a);
  g->free(d_b);
  free(a);
  free(b);
  free(gpu);
}

/* The grad norm's block partials and the clip on the device (train.c on a
 * CUDA backend): bitwise the host's (fm_clip_block_sumsq, the clip loop),
 * at the real block size over 40 blocks and a ragged tail. */
FM_TEST(norm_clip_bitwise) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = 40 * FM_DIST_BLOCK + 12345, nb = (n + FM_DIST_BLOCK - 1) / FM_DIST_BLOCK;
  float *x = host_f32(n), *want = host_f32(n);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(rng_uniform(-1, 1) * pow(10.0, rng_uniform(-12, 6)));
  double *ref = fm_xmalloc((size_t)nb * sizeof *ref);
  FM_REQUIRE(fm_clip_block_sumsq(x, 0, n, FM_DIST_BLOCK, ref) == 0);
  const double s = 0.3183098861837907;
  for (int64_t i = 0; i < n; i++) want[i] = (float)((double)x[i] * s);
  float *d_x = to_device(g, x, n * 4);
  double *d_p = g->alloc(nb * (int64_t)sizeof *d_p);
  g->block_sumsq(d_p, d_x, n, FM_DIST_BLOCK);
  g->scale_f64(d_x, s, n);
  double *gp = from_device(g, d_p, nb * (int64_t)sizeof *d_p);
  float *gx = from_device(g, d_x, n * 4);
  FM_EXPECT_EQ_INT(count_bit_diffs(gp, ref, nb, 8), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(gx, want, n, 4), 0);
  g->free(d_x);
  g->free(d_p);
  free(x), free(want), free(ref), free(gp), free(gx);
}

FM_TEST(bf16_casts_bitwise) {
  const FmBackend *g = cuda_or_skip();
  /* every bf16 pattern -> f32 */
  uint16_t *h = fm_xmalloc(65536 * 2);
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  float *cpu_f = host_f32(65536);
  fm_cpu_cast_bf16_to_f32(cpu_f, h, 65536);
  uint16_t *d_h = to_device(g, h, 65536 * 2);
  float *d_f = g->alloc(65536 * 4);
  g->cast_bf16_to_f32(d_f, d_h, 65536);
  float *gpu_f = from_device(g, d_f, 65536 * 4);
  FM_EXPECT_EQ_INT(count_bit_diffs(gpu_f, cpu_f, 65536, 4), 0);
  /* f32 -> bf16: random bit patterns (all classes: NaN, Inf, subnormal), exact
   * ties, and the neighbourhood of the overflow boundary */
  const int64_t n = N_ELEM;
  float *x = host_f32(n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = (uint32_t)rng_next();
    if (i % 3 == 1) r = (r & 0xFFFF0000u) | 0x8000u;
    if (i % 3 == 2) r = (r & 0x8000FFFFu) | 0x7F7F0000u;
    memcpy(&x[i], &r, 4);
  }
  uint16_t *cpu_h = fm_xmalloc((size_t)n * 2);
  fm_cpu_cast_f32_to_bf16(cpu_h, x, n);
  float *d_x = to_device(g, x, n * 4);
  uint16_t *d_o = g->alloc(n * 2);
  g->cast_f32_to_bf16(d_o, d_x, n);
  uint16_t *gpu_h = from_device(g, d_o, n * 2);
  FM_EXPECT_EQ_INT(count_bit_diffs(gpu_h, cpu_h, n, 2), 0);
  g->free(d_h);
  g->free(d_f);
  g->free(d_x);
  g->free(d_o);
  free(h);
  free(cpu_f);
  free(gpu_f);
  free(x);
  free(cpu_h);
  free(gpu_h);
}

FM_TEST(round_bf16_bitwise) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM;
  float *x = host_f32(n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = (uint32_t)rng_next();
    if (i % 2) r = (r & 0xFFFF0000u) | 0x8000u; /* ties */
    memcpy(&x[i], &r, 4);
  }
  float *d_x = to_device(g, x, n * 4);
  g->round_bf16(d_x, n);
  float *gpu = from_device(g, d_x, n * 4);
  fm_cpu_round_bf16(x, n);
  FM_EXPECT_EQ_INT(count_bit_diffs(gpu, x, n, 4), 0);
  g->free(d_x);
  free(x);
  free(gpu);
}

/* Ten steps with the same gradients on both sides: w, m, v stay bitwise equal
 * (a mismatch would compound, so this also guards optimizer determinism). */
FM_TEST(adamw_bitwise_steps) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  float *w = host_f32(n), *m = host_f32(n), *v = host_f32(n), *grad = host_f32(n);
  fill_uniform(w, n, -1.0, 1.0);
  memset(m, 0, (size_t)nb);
  memset(v, 0, (size_t)nb);
  float *d_w = to_device(g, w, nb), *d_m = to_device(g, m, nb), *d_v = to_device(g, v, nb), *d_g = g->alloc(nb);
  const float lr = 6e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  for (int t = 1; t <= 10; t++) {
    for (int64_t i = 0; i < n; i++)
      grad[i] = i % 101 == 0 ? 0.0f : (float)(rng_uniform(-1, 1) * pow(10.0, rng_uniform(-7, 1)));
    g->copy_to_device(d_g, grad, nb);
    float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    g->adamw_update(d_w, d_m, d_v, d_g, n, lr, b1, b2, eps, wd, bc1, bc2);
    fm_cpu_adamw_update(w, m, v, grad, n, lr, b1, b2, eps, wd, bc1, bc2);
  }
  float *gw = from_device(g, d_w, nb), *gm = from_device(g, d_m, nb), *gv = from_device(g, d_v, nb);
  FM_EXPECT_EQ_INT(count_bit_diffs(gw, w, n, 4), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(gm, m, n, 4), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(gv, v, n, 4), 0);
  g->free(d_w);
  g->free(d_m);
  g->free(d_v);
  g->free(d_g);
  free(w);
  free(m);
  free(v);
  free(grad);
  free(gw);
  free(gm);
  free(gv);
}

/* Ops follow fm_cuda_set_stream: the same work on a created stream gives the
 * same bits, and copy_to_host waits for it. */
FM_TEST(ops_on_user_stream) {
  const FmBackend *g = cuda_or_skip();
#ifdef FMHPC_HAVE_CUDA
  const int64_t n = N_ELEM, nb = n * 4;
  float *x = host_f32(n), *cpu = host_f32(n);
  fill_uniform(x, n, -8.0, 8.0);
  fm_cpu_gelu_fwd(cpu, x, n);
  fm_cpu_add(cpu, cpu, x, n);
  cudaStream_t s;
  FM_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  fm_cuda_set_stream(s);
  FM_EXPECT(fm_cuda_get_stream() == (void *)s);
  float *d_x = to_device(g, x, nb), *d_y = g->alloc(nb);
  g->gelu_fwd(d_y, d_x, n);
  float *ref = from_device(g, d_y, nb); /* gelu only, for the add below */
  g->add(d_y, d_y, d_x, n);
  float *gpu = from_device(g, d_y, nb);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    float want = ref[i] + x[i]; /* the add is exact-rounded on both sides */
    if (memcmp(&gpu[i], &want, 4) != 0) bad++;
    if (!close_to(gpu[i], cpu[i], 10.0 * EPS * (fabs(ref[i]) + fabs(x[i])))) bad++;
  }
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(d_x);
  g->free(d_y);
  fm_cuda_set_stream(NULL);
  FM_EXPECT(cudaStreamDestroy(s) == cudaSuccess);
  free(x);
  free(cpu);
  free(ref);
  free(gpu);
#else
  (void)g;
#endif
}

/* ---- model ops with kernels: bitwise where the kernel keeps the CPU order ---- */
/* A weight gradient from fixed-grid partials vs the CPU's running sum: one
 * float rounding of the same double sum apart (norm.cu's header). */
static int64_t weight_grad_bad(const float *gpu, const float *cpu_v, const double *scale, int64_t C, const char *what) {
  int64_t bad = 0;
  for (int64_t c = 0; c < C; c++)
    if (!close_to(gpu[c], cpu_v[c], 0x1p-23 * fabs((double)cpu_v[c]) + 0x1p-45 * scale[c]))
      REPORT_FIRST(bad, "%s col %lld: cuda %.9g cpu %.9g", what, (long long)c, gpu[c], cpu_v[c]);
  return bad;
}

/* LayerNorm and RMSNorm at GPT-2/Llama widths: out, mean, rstd and dinp are
 * the CPU's bits (same order, explicitly rounded); dw/db within one rounding;
 * a second backward gives the first one's bits (no atomics). */
FM_TEST(norms_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t shapes[][2] = {{4099, 768}, {1027, 2048}, {33, 13}};
  for (int k = 0; k < 3; k++) {
    const int64_t N = shapes[k][0], C = shapes[k][1], NC = N * C;
    float *x = host_f32(NC), *w = host_f32(C), *b = host_f32(C), *dout = host_f32(NC);
    fill_uniform(x, NC, -4.0, 4.0);
    fill_uniform(w, C, 0.0, 2.0);
    fill_uniform(b, C, -1.0, 1.0);
    fill_uniform(dout, NC, -1.0, 1.0);
    float *co = host_f32(NC), *cm = host_f32(N), *cr = host_f32(N), *cdi = host_f32(NC), *cdw = host_f32(C),
          *cdb = host_f32(C);
    memset(cdi, 0, (size_t)NC * 4);
    memset(cdw, 0, (size_t)C * 4);
    memset(cdb, 0, (size_t)C * 4);
    double *sw = calloc((size_t)C, sizeof(double)), *sb = calloc((size_t)C, sizeof(double));
    float *dx = to_device(g, x, NC * 4), *dw_ = to_device(g, w, C * 4), *db_ = to_device(g, b, C * 4),
          *ddo = to_device(g, dout, NC * 4);
    float *go = g->alloc(NC * 4), *gm = g->alloc(N * 4), *gr = g->alloc(N * 4), *gdi = g->alloc(NC * 4),
          *gdw = g->alloc(C * 4), *gdb = g->alloc(C * 4);
    for (int rms = 0; rms < 2; rms++) {
      memset(cdi, 0, (size_t)NC * 4);
      memset(cdw, 0, (size_t)C * 4);
      memset(cdb, 0, (size_t)C * 4);
      g->memset(gdi, 0, NC * 4);
      g->memset(gdw, 0, C * 4);
      g->memset(gdb, 0, C * 4);
      if (rms) {
        fm_cpu_rmsnorm_fwd(co, cr, x, w, N, C, 1e-6f);
        fm_cpu_rmsnorm_bwd(cdi, cdw, dout, x, w, cr, N, C);
        g->rmsnorm_fwd(go, gr, dx, dw_, N, C, 1e-6f);
        g->rmsnorm_bwd(gdi, gdw, ddo, dx, dw_, gr, N, C);
      } else {
        fm_cpu_layernorm_fwd(co, cm, cr, x, w, b, N, C, 1e-5f);
        fm_cpu_layernorm_bwd(cdi, cdw, cdb, dout, x, w, cm, cr, N, C);
        g->layernorm_fwd(go, gm, gr, dx, dw_, db_, N, C, 1e-5f);
        g->layernorm_bwd(gdi, gdw, gdb, ddo, dx, dw_, gm, gr, N, C);
      }
      for (int64_t c = 0; c < C; c++) {
        sw[c] = sb[c] = 0.0;
        for (int64_t n = 0; n < N; n++) {
          const double xh = rms ? (double)x[n * C + c] * cr[n] : ((double)x[n * C + c] - cm[n]) * cr[n];
          sw[c] += fabs(dout[n * C + c] * xh);
          sb[c] += fabs((double)dout[n * C + c]);
        }
      }
      float *ho = from_device(g, go, NC * 4), *hr = from_device(g, gr, N * 4), *hdi = from_device(g, gdi, NC * 4),
            *hdw = from_device(g, gdw, C * 4), *hdb = from_device(g, gdb, C * 4), *hm = from_device(g, gm, N * 4);
      const char *op = rms ? "rmsnorm" : "layernorm";
      if (count_bit_diffs(ho, co, NC, 4))
        FM__FAIL("%s_fwd out N=%lld C=%lld: not the CPU's bits", op, (long long)N, (long long)C);
      if (count_bit_diffs(hr, cr, N, 4)) FM__FAIL("%s_fwd rstd: not the CPU's bits", op);
      if (!rms && count_bit_diffs(hm, cm, N, 4)) FM__FAIL("layernorm_fwd mean: not the CPU's bits");
      if (count_bit_diffs(hdi, cdi, NC, 4))
        FM__FAIL("%s_bwd dinp N=%lld C=%lld: not the CPU's bits", op, (long long)N, (long long)C);
      FM_EXPECT_EQ_INT(weight_grad_bad(hdw, cdw, sw, C, "dw"), 0);
      if (!rms) FM_EXPECT_EQ_INT(weight_grad_bad(hdb, cdb, sb, C, "db"), 0);
      /* again: the same bits */
      g->memset(gdw, 0, C * 4);
      g->memset(gdb, 0, C * 4);
      if (rms)
        g->rmsnorm_bwd(NULL, gdw, ddo, dx, dw_, gr, N, C);
      else
        g->layernorm_bwd(NULL, gdw, gdb, ddo, dx, dw_, gm, gr, N, C);
      float *hdw2 = from_device(g, gdw, C * 4);
      FM_EXPECT_EQ_INT(count_bit_diffs(hdw2, hdw, C, 4), 0);
      free(ho), free(hr), free(hdi), free(hdw), free(hdb), free(hm), free(hdw2);
    }
    g->free(dx), g->free(dw_), g->free(db_), g->free(ddo), g->free(go), g->free(gm), g->free(gr), g->free(gdi),
        g->free(gdw), g->free(gdb);
    free(x), free(w), free(b), free(dout), free(co), free(cm), free(cr), free(cdi), free(cdw), free(cdb), free(sw),
        free(sb);
  }
}

/* RoPE on q-like rows inside a fused-qkv-wide row: positions in the host
 * table are the CPU's bits; positions past it (>= 8192) use the device's
 * double cos/sin: within 4 eps of the pair's magnitude. */
FM_TEST(rope_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t N = 4096 + 17, H = 8, HS = 128, ld = 3 * H * HS;
  int32_t *pos = fm_xmalloc((size_t)N * sizeof *pos);
  for (int64_t n = 0; n < N; n++) pos[n] = (int32_t)(n < 4096 ? n % 2048 : 8192 + 1000 * (n - 4096));
  float *x = host_f32(N * ld), *cf = host_f32(N * ld), *cb = host_f32(N * ld);
  fill_uniform(x, N * ld, -2.0, 2.0);
  memcpy(cf, x, (size_t)(N * ld) * 4);
  memcpy(cb, x, (size_t)(N * ld) * 4);
  fm_cpu_rope_fwd(cf, pos, N, ld, H, HS, 500000.0f);
  fm_cpu_rope_bwd(cb, pos, N, ld, H, HS, 500000.0f);
  int32_t *dpos = to_device(g, pos, N * 4);
  float *df = to_device(g, x, N * ld * 4), *db_ = to_device(g, x, N * ld * 4);
  g->rope_fwd(df, dpos, N, ld, H, HS, 500000.0f);
  g->rope_bwd(db_, dpos, N, ld, H, HS, 500000.0f);
  float *hf = from_device(g, df, N * ld * 4), *hb = from_device(g, db_, N * ld * 4);
  int64_t bad = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < ld; j++) {
      const int64_t i = n * ld + j;
      const double tol = pos[n] < 8192 ? 0.0 : 4.0 * EPS * 4.0;
      if (!close_to(hf[i], cf[i], tol) || !close_to(hb[i], cb[i], tol))
        REPORT_FIRST(bad, "rope row %lld (pos %d) col %lld: cuda %.9g/%.9g cpu %.9g/%.9g", (long long)n, pos[n],
                     (long long)j, hf[i], hb[i], cf[i], cb[i]);
    }
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(dpos), g->free(df), g->free(db_);
  free(pos), free(x), free(cf), free(cb), free(hf), free(hb);
}

/* Embedding at GPT-2's vocabulary with heavily repeated tokens: forward and
 * the atomic-free backward are the CPU's bits. */
FM_TEST(embedding_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t N = 8192, C = 768, V = 50257, P = 1024;
  int32_t *tok = fm_xmalloc((size_t)N * 4), *pos = fm_xmalloc((size_t)N * 4);
  for (int64_t n = 0; n < N; n++) {
    const double u = rng_uniform(0, 1);
    tok[n] = (int32_t)(u < 0.5 ? (int64_t)(u * 40) : (int64_t)rng_uniform(0, (double)V)); /* Zipf-ish head */
    pos[n] = (int32_t)(n % P);
  }
  float *wte = host_f32(V * C), *wpe = host_f32(P * C), *dout = host_f32(N * C), *co = host_f32(N * C);
  float *cdte = host_f32(V * C), *cdpe = host_f32(P * C);
  fill_uniform(wte, V * C, -1, 1);
  fill_uniform(wpe, P * C, -1, 1);
  fill_uniform(dout, N * C, -1, 1);
  fill_uniform(cdte, V * C, -1, 1);
  fill_uniform(cdpe, P * C, -1, 1);
  float *gdte = to_device(g, cdte, V * C * 4), *gdpe = to_device(g, cdpe, P * C * 4);
  fm_cpu_embedding_fwd(co, tok, wte, pos, wpe, N, C);
  fm_cpu_embedding_bwd(cdte, cdpe, dout, tok, pos, N, C, V);
  int32_t *dtok = to_device(g, tok, N * 4), *dpos = to_device(g, pos, N * 4);
  float *dwte = to_device(g, wte, V * C * 4), *dwpe = to_device(g, wpe, P * C * 4),
        *ddo = to_device(g, dout, N * C * 4);
  float *go = g->alloc(N * C * 4);
  g->embedding_fwd(go, dtok, dwte, dpos, dwpe, N, C);
  g->embedding_bwd(gdte, gdpe, ddo, dtok, dpos, N, C, V);
  float *ho = from_device(g, go, N * C * 4), *hdte = from_device(g, gdte, V * C * 4),
        *hdpe = from_device(g, gdpe, P * C * 4);
  FM_EXPECT_EQ_INT(count_bit_diffs(ho, co, N * C, 4), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(hdte, cdte, V * C, 4), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(hdpe, cdpe, P * C, 4), 0);
  g->free(gdte), g->free(gdpe), g->free(dtok), g->free(dpos), g->free(dwte), g->free(dwpe), g->free(ddo), g->free(go);
  free(tok), free(pos), free(wte), free(wpe), free(dout), free(co), free(cdte), free(cdpe), free(ho), free(hdte),
      free(hdpe);
}

/* Lion and Sophia: ten steps, the CPU's bits (AdamW: adamw_bitwise_steps). */
FM_TEST(lion_sophia_bitwise_steps) {
  const FmBackend *g = cuda_or_skip();
  const int64_t n = N_ELEM, nb = n * 4;
  for (int opt = 0; opt < 2; opt++) {
    float *w = host_f32(n), *m = host_f32(n), *h = host_f32(n), *grad = host_f32(n);
    fill_uniform(w, n, -1.0, 1.0);
    memset(m, 0, (size_t)nb);
    fill_uniform(h, n, 0.0, 1e-3);
    float *d_w = to_device(g, w, nb), *d_m = to_device(g, m, nb), *d_h = to_device(g, h, nb), *d_g = g->alloc(nb);
    for (int t = 1; t <= 10; t++) {
      for (int64_t i = 0; i < n; i++)
        grad[i] = i % 101 == 0 ? 0.0f : (float)(rng_uniform(-1, 1) * pow(10.0, rng_uniform(-7, 1)));
      g->copy_to_device(d_g, grad, nb);
      if (opt == 0) {
        g->lion_update(d_w, d_m, d_g, n, 1e-4f, 0.9f, 0.1f, 0.99f, 0.01f, 0.1f);
        fm_cpu_lion_update(w, m, grad, n, 1e-4f, 0.9f, 0.1f, 0.99f, 0.01f, 0.1f);
      } else {
        const float bc1 = (float)(1.0 - pow(0.965, t));
        g->sophia_hessian_update(d_h, d_g, n, 480.0f, 0.99f, 0.01f);
        g->sophia_update(d_w, d_m, d_h, d_g, n, 2e-4f, 0.965f, 0.035f, bc1, 0.01f, 1e-12f, 0.1f);
        fm_cpu_sophia_hessian_update(h, grad, n, 480.0f, 0.99f, 0.01f);
        fm_cpu_sophia_update(w, m, h, grad, n, 2e-4f, 0.965f, 0.035f, bc1, 0.01f, 1e-12f, 0.1f);
      }
    }
    float *gw = from_device(g, d_w, nb), *gm = from_device(g, d_m, nb), *gh = from_device(g, d_h, nb);
    FM_EXPECT_EQ_INT(count_bit_diffs(gw, w, n, 4), 0);
    FM_EXPECT_EQ_INT(count_bit_diffs(gm, m, n, 4), 0);
    FM_EXPECT_EQ_INT(count_bit_diffs(gh, h, n, 4), 0);
    g->free(d_w), g->free(d_m), g->free(d_h), g->free(d_g);
    free(w), free(m), free(h), free(grad), free(gw), free(gm), free(gh);
  }
}

/* matmul through the cuBLASLt wrapper at GPT-2 widths: within 2 K eps of the
 * sum of |terms| of the CPU (another summation order), and the same bits on a
 * second run (a pinned algorithm, no in-place split-K). */
FM_TEST(matmul_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t N = 1027, C = 768, OC = 2304;
  float *x = host_f32(N * C), *w = host_f32(OC * C), *bias = host_f32(OC), *dout = host_f32(N * OC);
  fill_uniform(x, N * C, -1, 1);
  fill_uniform(w, OC * C, -1, 1);
  fill_uniform(bias, OC, -1, 1);
  fill_uniform(dout, N * OC, -1, 1);
  float *co = host_f32(N * OC), *cdi = calloc((size_t)(N * C), 4), *cdw = calloc((size_t)(OC * C), 4),
        *cdb = calloc((size_t)OC, 4);
  fm_cpu_matmul_fwd(co, x, w, bias, N, C, OC);
  fm_cpu_matmul_bwd(cdi, cdw, cdb, dout, x, w, N, C, OC);
  float *dx = to_device(g, x, N * C * 4), *dw_ = to_device(g, w, OC * C * 4), *dbias = to_device(g, bias, OC * 4),
        *ddo = to_device(g, dout, N * OC * 4);
  float *go = g->alloc(N * OC * 4), *gdi = g->alloc(N * C * 4), *gdw = g->alloc(OC * C * 4), *gdb = g->alloc(OC * 4);
  float *h[2][4];
  for (int run = 0; run < 2; run++) {
    g->memset(gdi, 0, N * C * 4);
    g->memset(gdw, 0, OC * C * 4);
    g->memset(gdb, 0, OC * 4);
    g->matmul_fwd(go, dx, dw_, dbias, N, C, OC);
    g->matmul_bwd(gdi, gdw, gdb, ddo, dx, dw_, N, C, OC);
    h[run][0] = from_device(g, go, N * OC * 4);
    h[run][1] = from_device(g, gdi, N * C * 4);
    h[run][2] = from_device(g, gdw, OC * C * 4);
    h[run][3] = from_device(g, gdb, OC * 4);
  }
  /* |terms| <= 1 each: sum |a b| <= K, so the bound is 2 K^2 eps; use the
   * per-element sums for the fwd output only (the largest K is N for dw). */
  int64_t bad = 0;
  for (int64_t n = 0; n < N && bad < 5; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = fabs((double)bias[o]);
      for (int64_t c = 0; c < C; c++) s += fabs((double)x[n * C + c] * w[o * C + c]);
      if (!close_to(h[0][0][n * OC + o], co[n * OC + o], 2.0 * (double)C * EPS * s))
        REPORT_FIRST(bad, "matmul_fwd [%lld,%lld]: cuda %.9g cpu %.9g", (long long)n, (long long)o, h[0][0][n * OC + o],
                     co[n * OC + o]);
    }
  const float *cref[4] = {co, cdi, cdw, cdb};
  const int64_t len[4] = {N * OC, N * C, OC * C, OC}, K[4] = {C, OC, N, N};
  for (int j = 1; j < 4; j++)
    for (int64_t i = 0; i < len[j]; i++)
      if (!close_to(h[0][j][i], cref[j][i], 2.0 * (double)K[j] * (double)K[j] * EPS)) {
        REPORT_FIRST(bad, "matmul_bwd output %d [%lld]: cuda %.9g cpu %.9g", j, (long long)i, h[0][j][i], cref[j][i]);
        break;
      }
  FM_EXPECT_EQ_INT(bad, 0);
  for (int j = 0; j < 4; j++) {
    FM_EXPECT_EQ_INT(count_bit_diffs(h[0][j], h[1][j], len[j], 4), 0);
    free(h[0][j]), free(h[1][j]);
  }
  g->free(dx), g->free(dw_), g->free(dbias), g->free(ddo), g->free(go), g->free(gdi), g->free(gdw), g->free(gdb);
  free(x), free(w), free(bias), free(dout), free(co), free(cdi), free(cdw), free(cdb);
}

/* Attention (GQA, documents, fused qkv strides) and the classifier with
 * cross-entropy on the device against the CPU ops, at the emulated tests'
 * tolerances (tests/kernels/emu/test_emu_ops.c), on larger shapes; a second
 * backward gives the same bits. */
static double max_abs(const float *x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) m = fabs((double)x[i]) > m ? fabs((double)x[i]) : m;
  return m;
}

FM_TEST(attention_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t B = 2, T = 257, NH = 8, NKV = 2, HS = 64, N = B * T, ld = (NH + 2 * NKV) * HS, NO = N * NH * HS;
  float *qkv = host_f32(N * ld), *dout = host_f32(NO), *co = host_f32(NO), *cl = host_f32(B * NH * T);
  float *cg = calloc((size_t)(N * ld), sizeof(float));
  int32_t *seg = fm_xmalloc((size_t)N * sizeof *seg);
  fill_uniform(qkv, N * ld, -1.5, 1.5);
  fill_uniform(dout, NO, -1, 1);
  for (int64_t n = 0; n < N; n++) seg[n] = (int32_t)((n % T) / 100);
  fm_cpu_attention_fwd(co, cl, qkv, qkv + NH * HS, qkv + (NH + NKV) * HS, ld, ld, seg, B, T, NH, NKV, HS);
  fm_cpu_attention_bwd(cg, cg + NH * HS, cg + (NH + NKV) * HS, dout, co, cl, qkv, qkv + NH * HS, qkv + (NH + NKV) * HS,
                       ld, ld, seg, B, T, NH, NKV, HS);
  float *d_qkv = to_device(g, qkv, N * ld * 4), *d_do = to_device(g, dout, NO * 4);
  int32_t *d_seg = to_device(g, seg, N * 4);
  float *d_o = g->alloc(NO * 4), *d_l = g->alloc(B * NH * T * 4), *d_g = g->alloc(N * ld * 4);
  const float *q = d_qkv, *k = d_qkv + NH * HS, *v = d_qkv + (NH + NKV) * HS;
  g->attention_fwd(d_o, d_l, q, k, v, ld, ld, d_seg, B, T, NH, NKV, HS);
  float *ho = from_device(g, d_o, NO * 4), *hl = from_device(g, d_l, B * NH * T * 4), *hg[2];
  for (int run = 0; run < 2; run++) {
    g->memset(d_g, 0, N * ld * 4);
    g->attention_bwd(d_g, d_g + NH * HS, d_g + (NH + NKV) * HS, d_do, d_o, d_l, q, k, v, ld, ld, d_seg, B, T, NH, NKV,
                     HS);
    hg[run] = from_device(g, d_g, N * ld * 4);
  }
  int64_t bad = 0;
  const double gm = max_abs(cg, N * ld);
  for (int64_t i = 0; i < NO; i++)
    if (!close_to(ho[i], co[i], 2e-5 * (1.0 + fabs(co[i]))))
      REPORT_FIRST(bad, "out[%lld] %.9g vs %.9g", (long long)i, ho[i], co[i]);
  for (int64_t i = 0; i < B * NH * T; i++)
    if (!close_to(hl[i], cl[i], 2e-5 * (1.0 + fabs(cl[i]))))
      REPORT_FIRST(bad, "lse[%lld] %.9g vs %.9g", (long long)i, hl[i], cl[i]);
  for (int64_t i = 0; i < N * ld; i++)
    if (!close_to(hg[0][i], cg[i], 1e-4 * gm))
      REPORT_FIRST(bad, "dqkv[%lld] %.9g vs %.9g", (long long)i, hg[0][i], cg[i]);
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(hg[0], hg[1], N * ld, 4), 0);
  g->free(d_qkv), g->free(d_do), g->free(d_seg), g->free(d_o), g->free(d_l), g->free(d_g);
  free(qkv), free(dout), free(co), free(cl), free(cg), free(seg), free(ho), free(hl), free(hg[0]), free(hg[1]);
}

/* The tensor-core (bf16) attention at the 1.2B flagship's shape (T = 2048,
 * 24 heads over 4 KV heads, head size 64, documents numbered in order as
 * prep numbers them, GPT-2's fused qkv strides) and at head size 128
 * (separate q/k/v, document ids not ordered), against float64
 * references and the CPU op at the tolerances tests/kernels/attention_ref.h
 * derives (the emulated test's), on every 16th query and key row; a second
 * forward and backward give the same bits. */
#ifdef FMHPC_HAVE_CUDA
void fm_cuda_attention_set_bf16(int on);
static double dev_uniform(double lo, double hi) { return rng_uniform(lo, hi); }
#endif

FM_TEST(attention_flash_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
#ifdef FMHPC_HAVE_CUDA
  const ArShape shapes[] = {{1, 2048, 24, 4, 64, 2, 1}, {1, 1024, 8, 2, 128, 1, 0}};
  int64_t compared = 0;
  for (int si = 0; si < 2; si++) {
    const ArShape sh = shapes[si];
    AttnCase c = attn_case_new(sh, dev_uniform, 16, 16);
    const ArProb *p = &c.p;
    const int64_t N = sh.B * sh.T, NO = c.NO, NL = c.NL, ng = c.ng, nin = sh.fused ? p->nq : p->nq + 2 * p->nkv;
    float *hin = host_f32(nin); /* q | k | v as one upload: the same views on the device */
    memcpy(hin, p->q, (size_t)p->nq * 4);
    if (!sh.fused)
      memcpy(hin + p->nq, p->k, (size_t)p->nkv * 4), memcpy(hin + p->nq + p->nkv, p->v, (size_t)p->nkv * 4);
    float *d_in = to_device(g, hin, nin * 4), *d_do = to_device(g, p->dout, NO * 4), *d_co = to_device(g, c.co, NO * 4);
    float *d_cl = to_device(g, c.cl, NL * 4);
    int32_t *d_seg = to_device(g, p->seg, N * 4);
    const float *q = d_in, *k = d_in + (p->k - p->q), *v = d_in + (p->v - p->q);
    if (!sh.fused) k = d_in + p->nq, v = d_in + p->nq + p->nkv;
    float *d_o = g->alloc(NO * 4), *d_l = g->alloc(NL * 4), *d_g = g->alloc(ng * 4);
    float *ho[2], *hl[2], *hg[2];
    fm_cuda_attention_set_bf16(1);
    for (int run = 0; run < 2; run++) {
      g->copy_to_device(d_g, c.base_g, ng * 4);
      g->attention_fwd(d_o, d_l, q, k, v, p->ldq, p->ldkv, d_seg, sh.B, sh.T, sh.NH, sh.NKV, sh.HS);
      g->attention_bwd(d_g, d_g + c.koff, d_g + c.voff, d_do, d_co, d_cl, q, k, v, p->ldq, p->ldkv, d_seg, sh.B, sh.T,
                       sh.NH, sh.NKV, sh.HS);
      ho[run] = from_device(g, d_o, NO * 4), hl[run] = from_device(g, d_l, NL * 4),
      hg[run] = from_device(g, d_g, ng * 4);
    }
    fm_cuda_attention_set_bf16(0);
    char when[64];
    snprintf(when, sizeof when, "on the device, T=%lld HS=%lld", (long long)sh.T, (long long)sh.HS);
    FM_EXPECT_EQ_INT(attn_case_check(&c, ho[0], hl[0], hg[0], when, &compared), 0);
    FM_EXPECT_EQ_INT(count_bit_diffs(ho[0], ho[1], NO, 4) + count_bit_diffs(hl[0], hl[1], NL, 4), 0);
    FM_EXPECT_EQ_INT(count_bit_diffs(hg[0], hg[1], ng, 4), 0);
    g->free(d_in), g->free(d_do), g->free(d_co), g->free(d_cl), g->free(d_seg), g->free(d_o), g->free(d_l),
        g->free(d_g);
    for (int run = 0; run < 2; run++) free(ho[run]), free(hl[run]), free(hg[run]);
    free(hin);
    attn_case_free(&c);
  }
  printf("attention (tensor cores) on the device: %lld values compared, repeats bitwise\n", (long long)compared);
  FM_EXPECT(compared > 0);
#else
  (void)g;
#endif
}

/* Timing (for regression/gpu/check.sh, which prints this case's line): the
 * tensor-core attention at the 1.2B flagship's micro-batch (B = 4 sequences
 * of T = 2048, 8192 tokens; 24 heads over 4 KV heads, head size 64, causal,
 * one document each, fused qkv strides), 2 warm-up and 10 timed calls of the
 * forward and of the backward. TFLOP/s counts the causal half of the
 * products FlashAttention's papers count: forward 2 B NH T^2 HS (Q K^T and
 * P V), backward 5 B NH T^2 HS (its recomputed S, dP, dV, dK, dQ; the
 * separate dQ pass's second S and dP are not counted). Checked: every timed
 * call gives the bits of the first. */
FM_TEST(attention_flash_timing) {
  const FmBackend *g = cuda_or_skip();
#ifdef FMHPC_HAVE_CUDA
  const int64_t B = 4, T = 2048, NH = 24, NKV = 4, HS = 64, N = B * T, ld = (NH + 2 * NKV) * HS, NO = N * NH * HS;
  float *qkv = host_f32(N * ld), *dout = host_f32(NO);
  fill_uniform(qkv, N * ld, -2, 2);
  fill_uniform(dout, NO, -1, 1);
  float *d_qkv = to_device(g, qkv, N * ld * 4), *d_do = to_device(g, dout, NO * 4);
  float *d_o = g->alloc(NO * 4), *d_l = g->alloc(B * NH * T * 4), *d_g = g->alloc(N * ld * 4);
  const float *q = d_qkv, *k = d_qkv + NH * HS, *v = d_qkv + (NH + NKV) * HS;
  fm_cuda_attention_set_bf16(1);
  enum { WARM = 2, RUNS = 10 };
  double tf = 0.0, tb = 0.0;
  float *first_o = NULL, *first_g = NULL;
  int64_t diffs = 0;
  for (int it = 0; it < WARM + RUNS; it++) {
    g->synchronize();
    const double t0 = fm_now_s();
    g->attention_fwd(d_o, d_l, q, k, v, ld, ld, NULL, B, T, NH, NKV, HS);
    g->synchronize();
    const double t1 = fm_now_s();
    g->memset(d_g, 0, N * ld * 4);
    g->synchronize();
    const double t2 = fm_now_s();
    g->attention_bwd(d_g, d_g + NH * HS, d_g + (NH + NKV) * HS, d_do, d_o, d_l, q, k, v, ld, ld, NULL, B, T, NH, NKV,
                     HS);
    g->synchronize();
    const double t3 = fm_now_s();
    if (it >= WARM) tf += t1 - t0, tb += t3 - t2;
    float *ho = from_device(g, d_o, NO * 4), *hg = from_device(g, d_g, N * ld * 4);
    if (!first_o) {
      first_o = ho, first_g = hg;
    } else {
      diffs += count_bit_diffs(ho, first_o, NO, 4) + count_bit_diffs(hg, first_g, N * ld, 4);
      free(ho), free(hg);
    }
  }
  fm_cuda_attention_set_bf16(0);
  const double flop_f = 2.0 * (double)(B * NH) * (double)T * (double)T * (double)HS, flop_b = 2.5 * flop_f;
  printf(
      "attention timing (bf16 tensor cores) B=%lld T=%lld NH=%lld NKV=%lld HS=%lld causal: fwd %.3f ms %.1f TFLOP/s, "
      "bwd %.3f ms %.1f TFLOP/s (mean of %d)\n",
      (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS, 1e3 * tf / RUNS,
      flop_f * RUNS / tf * 1e-12, 1e3 * tb / RUNS, flop_b * RUNS / tb * 1e-12, RUNS);
  FM_EXPECT_EQ_INT(diffs, 0);
  g->free(d_qkv), g->free(d_do), g->free(d_o), g->free(d_l), g->free(d_g);
  free(qkv), free(dout), free(first_o), free(first_g);
#else
  (void)g;
#endif
}

/* attention_decode at the flagship's heads over a 2048-position cache,
 * against the CPU op at the emulated test's bound (test_emu_ops.c:
 * (2 eS + (4 Tc + 8) 2^-24) sum_s p|v| + 2^-23 |cpu|); a repeat is bitwise. */
FM_TEST(attention_decode_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t B = 4, Tc = 2048, NH = 24, NKV = 4, HS = 64, ldq = (NH + 2 * NKV) * HS, ldkv = NKV * HS,
                NO = B * NH * HS;
  float *q = host_f32(B * ldq), *kc = host_f32(B * Tc * ldkv), *vc = host_f32(B * Tc * ldkv), *co = host_f32(NO);
  fill_uniform(q, B * ldq, -2, 2);
  fill_uniform(kc, B * Tc * ldkv, -2, 2);
  fill_uniform(vc, B * Tc * ldkv, -1, 1);
  const int32_t pos[4] = {0, 100, 1023, 2047};
  fm_cpu_attention_decode(co, q, kc, vc, ldq, ldkv, pos, B, Tc, NH, NKV, HS);
  float *d_q = to_device(g, q, B * ldq * 4), *d_k = to_device(g, kc, B * Tc * ldkv * 4);
  float *d_v = to_device(g, vc, B * Tc * ldkv * 4), *d_o = g->alloc(NO * 4);
  int32_t *d_pos = to_device(g, pos, sizeof pos);
  float *ho[2];
  for (int run = 0; run < 2; run++) {
    g->attention_decode(d_o, d_q, d_k, d_v, ldq, ldkv, d_pos, B, Tc, NH, NKV, HS);
    ho[run] = from_device(g, d_o, NO * 4);
  }
  int64_t bad = 0;
  const double scale = 1.0 / sqrt((double)HS);
  double *sc = fm_xmalloc((size_t)Tc * sizeof *sc);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      const int64_t gk = h / (NH / NKV), t = pos[b];
      double m = -INFINITY, eS = 0.0, l = 0.0;
      for (int64_t s = 0; s <= t; s++) {
        double d = 0.0, a = 0.0;
        for (int64_t e = 0; e < HS; e++) {
          const double x = (double)q[b * ldq + h * HS + e] * kc[(b * Tc + s) * ldkv + gk * HS + e];
          d += x, a += fabs(x);
        }
        sc[s] = d * scale;
        m = sc[s] > m ? sc[s] : m;
        eS = fmax(eS, 2.0 * HS * 0x1p-24 * a * scale);
      }
      for (int64_t s = 0; s <= t; s++) l += exp(sc[s] - m);
      for (int64_t e = 0; e < HS; e++) {
        double mag = 0.0;
        for (int64_t s = 0; s <= t; s++)
          mag += exp(sc[s] - m) / l * fabs((double)vc[(b * Tc + s) * ldkv + gk * HS + e]);
        const int64_t i = b * NH * HS + h * HS + e;
        const double tol = (2.0 * eS + (4.0 * (double)Tc + 8.0) * 0x1p-24) * mag + 0x1p-23 * fabs((double)co[i]);
        if (!close_to(ho[0][i], co[i], tol))
          REPORT_FIRST(bad, "decode out[%lld] %.9g vs %.9g", (long long)i, ho[0][i], co[i]);
      }
    }
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(ho[0], ho[1], NO, 4), 0);
  g->free(d_q), g->free(d_k), g->free(d_v), g->free(d_o), g->free(d_pos);
  free(q), free(kc), free(vc), free(co), free(ho[0]), free(ho[1]), free(sc);
}

FM_TEST(xent_vs_cpu) {
  const FmBackend *g = cuda_or_skip();
  const int64_t N = 1024, C = 256, V = 50257, S = fm_cpu_xent_scratch(N, V);
  float *x = host_f32(N * C), *w = host_f32(V * C), *wt = host_f32(N), *scratch = host_f32(S);
  float *cdx = calloc((size_t)(N * C), 4), *cdw = calloc((size_t)(V * C), 4);
  int32_t *tg = fm_xmalloc((size_t)N * 4);
  fill_uniform(x, N * C, -1, 1);
  fill_uniform(w, V * C, -0.1, 0.1);
  for (int64_t n = 0; n < N; n++) {
    tg[n] = n % 17 == 0 ? -1 : (int32_t)rng_uniform(0, (double)V);
    wt[n] = n % 17 == 0 ? 0.0f : 1.0f / (float)N;
  }
  const double closs = fm_cpu_xent_fwd_bwd(cdx, cdw, x, w, tg, wt, N, C, V, scratch);
  float *dx_ = to_device(g, x, N * C * 4), *dw_ = to_device(g, w, V * C * 4), *dwt = to_device(g, wt, N * 4);
  int32_t *dtg = to_device(g, tg, N * 4);
  float *ds = g->alloc(S * 4), *gdx = g->alloc(N * C * 4), *gdw = g->alloc(V * C * 4);
  g->memset(gdx, 0, N * C * 4);
  g->memset(gdw, 0, V * C * 4);
  const double gloss = g->xent_fwd_bwd(gdx, gdw, dx_, dw_, dtg, dwt, N, C, V, ds);
  FM_EXPECT_NEAR(gloss, closs, 1e-5, 0.0);
  float *hdx = from_device(g, gdx, N * C * 4), *hdw = from_device(g, gdw, V * C * 4);
  int64_t bad = 0;
  const double mx = max_abs(cdx, N * C), mw = max_abs(cdw, V * C);
  for (int64_t i = 0; i < N * C; i++)
    if (!close_to(hdx[i], cdx[i], 1e-4 * mx)) REPORT_FIRST(bad, "dx[%lld] %.9g vs %.9g", (long long)i, hdx[i], cdx[i]);
  for (int64_t i = 0; i < V * C; i++)
    if (!close_to(hdw[i], cdw[i], 1e-4 * mw)) REPORT_FIRST(bad, "dw[%lld] %.9g vs %.9g", (long long)i, hdw[i], cdw[i]);
  FM_EXPECT_EQ_INT(bad, 0);
  g->free(dx_), g->free(dw_), g->free(dwt), g->free(dtg), g->free(ds), g->free(gdx), g->free(gdw);
  free(x), free(w), free(wt), free(scratch), free(cdx), free(cdw), free(tg), free(hdx), free(hdw);
}

/* The exact reduction's quantisation on the device against fm_reduce_add
 * (add_block) at 3 shards over two micro-batches, one block past the limit
 * and one with a NaN: accumulator, block maxima and flags bitwise. */
FM_TEST(quant_add_vs_reduce_add) {
  const FmBackend *g = cuda_or_skip();
#ifdef FMHPC_HAVE_CUDA
  const int64_t n = 40 * FM_DIST_BLOCK + 777;
  FmComm comm;
  memset(&comm, 0, sizeof comm);
  comm.size = 3;
  comm.kind = "none"; /* a stand-in: no collective is called (fm_reduce_create asks the kind) */
  FmReduce r;
  FM_REQUIRE(fm_reduce_create(&r, n, 2, true, &comm) == 0);
  fm_reduce_begin(&r);
  int64_t *d_acc = g->alloc(r.P * r.S * 8);
  float *d_amax = g->alloc(r.nblocks * 4), *d_grad = g->alloc(n * 4);
  int32_t *d_flags = g->alloc(8), *d_exp = to_device(g, r.exp2, r.nblocks * 4);
  g->memset(d_acc, 0, r.P * r.S * 8);
  g->memset(d_amax, 0, r.nblocks * 4);
  g->memset(d_flags, 0, 8);
  float *grad = host_f32(n);
  for (int mb = 0; mb < 2; mb++) {
    for (int64_t i = 0; i < n; i++) grad[i] = (float)(rng_uniform(-1, 1) * pow(2.0, rng_uniform(-30, 0)));
    if (mb == 1) {
      grad[7 * FM_DIST_BLOCK + 5] = 1e5f;
      grad[30 * FM_DIST_BLOCK + 9] = NAN;
    }
    fm_reduce_add(&r, grad);
    g->copy_to_device(d_grad, grad, n * 4);
    for (int k = 0; k < r.P; k++)
      fm_cuda_quant_add(d_acc + (int64_t)k * r.S, d_amax, d_flags, d_grad, d_exp, r.lo[k], r.hi[k], FM_DIST_BLOCK,
                        r.limit);
  }
  int64_t *acc = from_device(g, d_acc, r.P * r.S * 8);
  float *amax = from_device(g, d_amax, r.nblocks * 4);
  int32_t *flags = from_device(g, d_flags, 8);
  FM_EXPECT_EQ_INT(count_bit_diffs(acc, r.acc, r.P * r.S, 8), 0);
  FM_EXPECT_EQ_INT(count_bit_diffs(amax, r.amax, r.nblocks, 4), 0);
  FM_EXPECT_EQ_INT(flags[0], r.overflow);
  FM_EXPECT_EQ_INT(flags[1], r.nonfinite);
  FM_EXPECT_EQ_INT(r.overflow, 1);
  g->free(d_acc), g->free(d_amax), g->free(d_grad), g->free(d_flags), g->free(d_exp);
  free(grad), free(acc), free(amax), free(flags);
  fm_reduce_free(&r);
#else
  (void)g;
#endif
}
