/* test_cpu_ops.c: the CPU backend's elementwise and memory ops against
 * independent references written here from the formulas: float64 GELU/SiLU,
 * float64 central finite differences for the backward ops, hand-computed bf16
 * bit patterns and a nearest-neighbour bf16 rounding reference, a float64 AdamW
 * run over several steps, and backend selection. Tolerances are stated per
 * case, in units of FLT_EPSILON (eps) scaled by the conditioning of the op. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"

#define EPS        ((double)FLT_EPSILON)
#define GELU_BETA  0.7978845608028654 /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715

/* ---- helpers --------------------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_uniform(double lo, double hi) { return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53; }
static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* GELU, tanh form, float64. 1 + tanh(u) = 2 e^{2u} / (1 + e^{2u}) exactly; for
 * u < 0 that form avoids the cancellation 1 + tanh(u) has in float64 too. */
static double gelu_u(double x) { return GELU_BETA * (x + GELU_KAPPA * x * x * x); }
static double gelu_f64(double x) {
  double u = gelu_u(x);
  double one_plus_tanh = u >= 0 ? 1.0 + tanh(u) : 2.0 * exp(2.0 * u) / (1.0 + exp(2.0 * u));
  return 0.5 * x * one_plus_tanh;
}
static double silu_f64(double g) { return g / (1.0 + exp(-g)); }
/* Central difference, float64; h scaled to x so the rounding error stays ~1e-10. */
static double fd(double (*f)(double), double x) {
  double h = 1e-5 * fmax(1.0, fabs(x));
  return (f(x + h) - f(x - h)) / (2.0 * h);
}
/* The gradient's two terms s and x s(1-s) dz/dx: their magnitude, not the
 * result (which crosses 0 near x = -0.75), sets the rounding error scale. */
static double gelu_grad_terms(double x, double *z_out) {
  double z = 2.0 * gelu_u(x);
  double s = 1.0 / (1.0 + exp(-z));
  double sd = s * (1.0 - s);
  *z_out = z;
  return s + fabs(x * sd * 2.0 * GELU_BETA * (1.0 + 3.0 * GELU_KAPPA * x * x));
}

/* Inputs: a uniform grid over [-12, 12] (x = -12 already drives gelu to 1e-60,
 * through float's subnormals to 0) plus random points. */
#define NX 4001
static void fill_inputs(float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(i % 2 ? rng_uniform(lo, hi) : lo + (hi - lo) * (double)i / (double)(n - 1));
}

/* ---- GELU -------------------------------------------------------------------- */
/* The reference above is torch's tanh formula: check the rewrite where float64
 * has no cancellation, so the f64 reference is anchored to the formula itself. */
FM_TEST(gelu_reference_is_tanh_formula) {
  for (double x = -3.0; x <= 3.0; x += 0.01) {
    double torch_form = 0.5 * x * (1.0 + tanh(GELU_BETA * (x + GELU_KAPPA * x * x * x)));
    FM_EXPECT_NEAR(gelu_f64(x), torch_form, 1e-13, 1e-15);
  }
}

/* Tolerance: relative 4 eps (1 + |z|), z = 2u (observed worst: 1.7), plus 2^-149 (one subnormal
 * step) times (1 + |x|). For x < 0, gelu(x) ~ x e^{z}: a relative rounding
 * error r in z becomes r|z| in the result, so (1 + |z|) is the conditioning of
 * the function, not slack; the absolute floor covers subnormal results. */
FM_TEST(gelu_fwd_vs_f64) {
  static float x[NX], y[NX];
  fill_inputs(x, NX, -12.0, 12.0);
  fm_cpu_gelu_fwd(y, x, NX);
  for (int i = 0; i < NX; i++) {
    double ref = gelu_f64(x[i]), z = fabs(2.0 * gelu_u(x[i]));
    double tol = 4.0 * EPS * (1.0 + z) * fabs(ref) + 0x1p-149 * (1.0 + fabs(x[i]));
    FM_EXPECT_NEAR(y[i], ref, 0.0, tol);
  }
}

FM_TEST(gelu_special_values) {
  float x[] = {0.0f, -0.0f, INFINITY, -40.0f, 40.0f, 1e20f, -1e20f, NAN};
  float y[8], dx[8], ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  fm_cpu_gelu_fwd(y, x, 8);
  fm_cpu_gelu_bwd(dx, ones, x, 8);
  FM_EXPECT_BITS_EQ_F32(y[0], 0.0f);
  FM_EXPECT(y[1] == 0.0f);
  FM_EXPECT(isinf(y[2]) && y[2] > 0);
  FM_EXPECT(y[3] == 0.0f);            /* e^{-2*0.798*(40+2862)}: exactly 0 in float */
  FM_EXPECT_BITS_EQ_F32(y[4], 40.0f); /* sigmoid rounds to 1 */
  FM_EXPECT_BITS_EQ_F32(y[5], 1e20f); /* x^3 overflows to Inf; gelu(x) = x */
  FM_EXPECT(y[6] == 0.0f);
  FM_EXPECT(isnan(y[7]));
  FM_EXPECT_NEAR(dx[0], 0.5, 0.0, 0.0); /* gelu'(0) = 1/2 exactly */
  FM_EXPECT_BITS_EQ_F32(dx[2], 1.0f);
  FM_EXPECT(dx[3] == 0.0f);
  FM_EXPECT_BITS_EQ_F32(dx[4], 1.0f);
  FM_EXPECT_BITS_EQ_F32(dx[5], 1.0f); /* no 0 * Inf = NaN when x^2 overflows */
  FM_EXPECT(dx[6] == 0.0f);
  FM_EXPECT(isnan(dx[7]));
}

/* dx vs dout * central difference of the float64 reference. Tolerance:
 * 6 eps (1 + |z|) (observed worst: 2.2) times the magnitude of the gradient's terms (see
 * gelu_grad_terms), plus 1e-8 |dout| for the difference quotient's own error. */
FM_TEST(gelu_bwd_vs_fd) {
  static float x[NX], dout[NX], dx[NX];
  fill_inputs(x, NX, -12.0, 12.0);
  for (int i = 0; i < NX; i++) dout[i] = (float)rng_uniform(-2.0, 2.0);
  fm_cpu_gelu_bwd(dx, dout, x, NX);
  for (int i = 0; i < NX; i++) {
    double z, mag = gelu_grad_terms(x[i], &z);
    double ref = (double)dout[i] * fd(gelu_f64, x[i]);
    double tol = 6.0 * EPS * (1.0 + fabs(z)) * mag * fabs(dout[i]) + 1e-8 * fabs(dout[i]);
    FM_EXPECT_NEAR(dx[i], ref, 0.0, tol);
  }
}

/* ---- SwiGLU ------------------------------------------------------------------ */
/* Tolerance: relative 4 eps (1 + |g|) (same conditioning argument as GELU, with
 * z = g; observed worst: 1.1), plus a subnormal floor. */
FM_TEST(swiglu_fwd_vs_f64) {
  static float g[NX], u[NX], y[NX];
  fill_inputs(g, NX, -90.0, 30.0);
  for (int i = 0; i < NX; i++) u[i] = (float)rng_uniform(-3.0, 3.0);
  fm_cpu_swiglu_fwd(y, g, u, NX);
  for (int i = 0; i < NX; i++) {
    double ref = silu_f64(g[i]) * (double)u[i];
    double tol = 4.0 * EPS * (1.0 + fabs(g[i])) * fabs(ref) + 0x1p-149 * (1.0 + fabs(g[i] * u[i]));
    FM_EXPECT_NEAR(y[i], ref, 0.0, tol);
  }
}

/* dgate vs dout * up * d silu/dg by central differences; dup vs dout * silu(g)
 * in float64. Tolerances as gelu_bwd_vs_fd (terms s and |g s (1-s)|; observed
 * worst 1.2) and swiglu_fwd_vs_f64. */
FM_TEST(swiglu_bwd_vs_fd) {
  static float g[NX], u[NX], dout[NX], dg[NX], du[NX];
  fill_inputs(g, NX, -90.0, 30.0);
  for (int i = 0; i < NX; i++) {
    u[i] = (float)rng_uniform(-3.0, 3.0);
    dout[i] = (float)rng_uniform(-2.0, 2.0);
  }
  fm_cpu_swiglu_bwd(dg, du, dout, g, u, NX);
  for (int i = 0; i < NX; i++) {
    double s = 1.0 / (1.0 + exp(-(double)g[i]));
    double mag = (s + fabs(g[i] * s * (1.0 - s))) * fabs((double)dout[i] * u[i]);
    double ref_dg = (double)dout[i] * u[i] * fd(silu_f64, g[i]);
    FM_EXPECT_NEAR(dg[i], ref_dg, 0.0, 6.0 * EPS * (1.0 + fabs(g[i])) * mag + 1e-8 * fabs(dout[i] * u[i]));
    double ref_du = (double)dout[i] * silu_f64(g[i]);
    FM_EXPECT_NEAR(du[i], ref_du, 0.0, 4.0 * EPS * (1.0 + fabs(g[i])) * fabs(ref_du) + 0x1p-149 * (1.0 + fabs(g[i])));
  }
}

/* ---- add, scale: exact --------------------------------------------------------- */
/* The sum or product of two floats computed in float64 and rounded once to
 * float is the correctly rounded float result (53 >= 2*24 + 2), which is what
 * IEEE float + and * return: so bits must match. In place must match too. */
FM_TEST(add_scale_exact) {
  enum { N = 70001 }; /* above the OpenMP threshold, odd */
  static float a[N], b[N], out[N], x[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)(rng_uniform(-1, 1) * pow(2.0, rng_uniform(-30, 30)));
    b[i] = (float)(rng_uniform(-1, 1) * pow(2.0, rng_uniform(-30, 30)));
  }
  fm_cpu_add(out, a, b, N);
  for (int i = 0; i < N; i++) FM_EXPECT_BITS_EQ_F32(out[i], (float)((double)a[i] + (double)b[i]));
  memcpy(x, a, sizeof x);
  fm_cpu_add(x, x, b, N); /* residual stream: x += b */
  FM_EXPECT(memcmp(x, out, sizeof x) == 0);
  const float s = 0.7071067811865476f;
  memcpy(x, a, sizeof x);
  fm_cpu_scale(x, s, N);
  for (int i = 0; i < N; i++) FM_EXPECT_BITS_EQ_F32(x[i], (float)((double)a[i] * (double)s));
}

/* ---- bf16 ---------------------------------------------------------------------- */
/* Hand-computed: bf16 keeps the top 16 bits; the dropped 16 decide the rounding. */
FM_TEST(bf16_cast_bit_patterns) {
  static const struct {
    uint32_t f32;
    uint16_t bf16;
    const char *why;
  } cases[] = {
      {0x3F800000u, 0x3F80, "1.0 exact"},
      {0x3F807FFFu, 0x3F80, "just below half: down"},
      {0x3F808000u, 0x3F80, "tie, kept lsb 0 (even): down"},
      {0x3F808001u, 0x3F81, "just above half: up"},
      {0x3F818000u, 0x3F82, "tie, kept lsb 1 (odd): up to even"},
      {0xBF818000u, 0xBF82, "negative tie to even"},
      {0x40490FDBu, 0x4049, "pi: down"},
      {0x3EAAAAABu, 0x3EAB, "1/3: up"},
      {0x3FFF8000u, 0x4000, "tie, lsb 1: carry into the exponent (1.99.. -> 2.0)"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x00000001u, 0x0000, "smallest subnormal: down to 0"},
      {0x00008000u, 0x0000, "subnormal tie, lsb 0"},
      {0x00018000u, 0x0002, "subnormal tie, lsb 1"},
      {0x7F7F7FFFu, 0x7F7F, "below the overflow boundary: largest bf16"},
      {0x7F7F8000u, 0x7F80, "tie at the top, lsb 1: overflows to +Inf"},
      {0x7F7FFFFFu, 0x7F80, "FLT_MAX: rounds to +Inf"},
      {0xFF7FFFFFu, 0xFF80, "-FLT_MAX: rounds to -Inf"},
      {0x7F800000u, 0x7F80, "+Inf"},
      {0xFF800000u, 0xFF80, "-Inf"},
      {0x7FC00000u, 0x7FC0, "quiet NaN"},
      {0x7F800001u, 0x7FC0, "signalling NaN, payload only in the low bits: still NaN"},
      {0x7FFFFFFFu, 0x7FC0, "NaN whose rounding carry would reach Inf"},
      {0xFFC00001u, 0x7FC0, "negative NaN: canonical"},
  };
  enum { NC = sizeof cases / sizeof cases[0] };
  float x[NC];
  uint16_t h[NC];
  for (int i = 0; i < NC; i++) x[i] = bits_f32(cases[i].f32);
  fm_cpu_cast_f32_to_bf16(h, x, NC);
  for (int i = 0; i < NC; i++)
    if (h[i] != cases[i].bf16)
      FM__FAIL("bf16(0x%08X) = 0x%04X, want 0x%04X (%s)", (unsigned)cases[i].f32, h[i], cases[i].bf16, cases[i].why);
}

/* bf16 -> fp32 is the exact widening for all 65536 patterns, and fp32 -> bf16
 * gives each non-NaN pattern back. */
FM_TEST(bf16_to_f32_all_patterns) {
  static uint16_t h[65536], back[65536];
  static float f[65536];
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  fm_cpu_cast_bf16_to_f32(f, h, 65536);
  fm_cpu_cast_f32_to_bf16(back, f, 65536);
  int bad = 0;
  for (int i = 0; i < 65536; i++) {
    if (f32_bits(f[i]) != (uint32_t)i << 16) bad++;
    int is_nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F) != 0;
    if (back[i] != (is_nan ? 0x7FC0 : i)) bad++;
  }
  FM_EXPECT_EQ_INT(bad, 0);
}

/* round_bf16 against a reference that knows nothing of the add-0x7FFF trick:
 * take the two bf16 neighbours of x (truncation and the next magnitude up,
 * 2^128 past the largest finite), pick the nearer by exact float64
 * differences, ties to the even one. */
static float bf16_nearest_ref(float x) {
  if (isnan(x)) return bits_f32(0x7FC00000u);
  if (isinf(x)) return x;
  uint32_t u = f32_bits(x), sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
  uint32_t lo = mag & 0xFFFF0000u, hi = lo + 0x10000u;
  double dx = fabs((double)x), dlo = (double)bits_f32(lo);
  double dhi = hi == 0x7F800000u ? 0x1p128 : (double)bits_f32(hi);
  uint32_t pick;
  if (dx - dlo < dhi - dx)
    pick = lo;
  else if (dx - dlo > dhi - dx)
    pick = hi;
  else
    pick = (lo >> 16) & 1u ? hi : lo;
  return bits_f32(sign | pick);
}

FM_TEST(round_bf16_vs_nearest) {
  enum { N = 200000 };
  static float x[N], want[N];
  for (int i = 0; i < N; i++) {
    uint32_t r = (uint32_t)rng_next();
    if (i % 4 == 1) r = (r & 0xFFFF0000u) | 0x8000u;                          /* exact ties */
    if (i % 4 == 2) r = (r & 0x807FFFFFu) | ((uint32_t)(120 + i % 16) << 23); /* near 1 */
    x[i] = bits_f32(r);
    want[i] = bf16_nearest_ref(x[i]);
  }
  fm_cpu_round_bf16(x, N);
  int bad = 0;
  for (int i = 0; i < N; i++)
    if (f32_bits(x[i]) != f32_bits(want[i]) && bad++ < 5)
      FM__FAIL("element %d: 0x%08X, want 0x%08X", i, (unsigned)f32_bits(x[i]), (unsigned)f32_bits(want[i]));
  FM_EXPECT_EQ_INT(bad, 0);
}

/* ---- AdamW --------------------------------------------------------------------- */
/* Several steps of torch.optim.AdamW's update in float64 (exact bias
 * corrections) against the float op. Tolerances per step t: m and v within
 * 4 t eps of the running sum of their terms' magnitudes; w within
 * t (4 eps |w| + 16 eps lr (1 + wd |w|)): the update direction m^/(sqrt(v^)+eps)
 * is O(1) and computed to a few eps. */
static void adamw_case(float lr, float b1, float b2, float eps, float wd, int steps) {
  enum { N = 4096 };
  static float w[N], m[N], v[N], g[N];
  static double wr[N], mr[N], vr[N], ms[N], vs[N];
  for (int i = 0; i < N; i++) {
    w[i] = (float)rng_uniform(-1, 1);
    wr[i] = w[i];
    m[i] = v[i] = 0.0f;
    mr[i] = vr[i] = ms[i] = vs[i] = 0.0;
  }
  for (int t = 1; t <= steps; t++) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int i = 0; i < N; i++) {
      /* a few exact zeros, sign changes, magnitudes 1e-6 .. 10 */
      g[i] = i % 97 == 0 ? 0.0f : (float)(rng_uniform(-1, 1) * pow(10.0, rng_uniform(-6, 1)));
      double gd = g[i];
      mr[i] = b1 * mr[i] + (1.0 - b1) * gd;
      vr[i] = b2 * vr[i] + (1.0 - b2) * gd * gd;
      ms[i] = b1 * ms[i] + (1.0 - b1) * fabs(gd);
      vs[i] = b2 * vs[i] + (1.0 - b2) * gd * gd;
      wr[i] -= lr * ((mr[i] / bc1) / (sqrt(vr[i] / bc2) + eps) + wd * wr[i]);
    }
    fm_cpu_adamw_update(w, m, v, g, N, lr, b1, b2, eps, wd, (float)bc1, (float)bc2);
    for (int i = 0; i < N; i++) {
      FM_EXPECT_NEAR(m[i], mr[i], 0.0, 4.0 * t * EPS * ms[i]);
      FM_EXPECT_NEAR(v[i], vr[i], 0.0, 4.0 * t * EPS * vs[i]);
      FM_EXPECT_NEAR(w[i], wr[i], 0.0, t * (4.0 * EPS * fabs(wr[i]) + 16.0 * EPS * lr * (1.0 + wd * fabs(wr[i]))));
    }
  }
}

FM_TEST(adamw_vs_f64) {
  adamw_case(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10); /* GPT-2/Llama pretraining settings */
  adamw_case(3e-2f, 0.8f, 0.999f, 1e-6f, 0.0f, 6); /* no decay, large lr, slow v */
}

/* Step 1 in closed form: m^ = g, v^ = g^2, so w1 = w - lr (g/(|g| + eps) + wd w);
 * with g = 0 only the decay acts: w1 = w (1 - lr wd) to rounding. */
FM_TEST(adamw_first_step_closed_form) {
  float w[3] = {0.5f, -2.0f, 1.0f}, m[3] = {0}, v[3] = {0}, g[3] = {3.0f, -1e-3f, 0.0f};
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  fm_cpu_adamw_update(w, m, v, g, 3, lr, b1, b2, eps, wd, 1.0f - b1, 1.0f - b2);
  FM_EXPECT_NEAR(w[0], 0.5 - 0.01 * (3.0 / (3.0 + 1e-8) + 0.05), 0.0, 4 * EPS);
  FM_EXPECT_NEAR(w[1], -2.0 - 0.01 * (-1e-3 / (1e-3 + 1e-8) - 0.2), 0.0, 8 * EPS);
  FM_EXPECT_NEAR(w[2], 1.0 * (1.0 - 0.01 * 0.1), 0.0, 2 * EPS);
  FM_EXPECT(m[2] == 0.0f && v[2] == 0.0f);
}

/* Slots from alloc to the end of the table that hold NULL (every field after
 * `alloc` is a function pointer): a NULL op would crash a step, not a test. */
static int null_ops(const FmBackend *b) {
  const unsigned char *p = (const unsigned char *)&b->alloc, *end = (const unsigned char *)(b + 1);
  int nulls = 0;
  for (; p + sizeof(void (*)(void)) <= end; p += sizeof(void (*)(void))) {
    void (*f)(void);
    memcpy(&f, p, sizeof f);
    if (!f) nulls++;
  }
  return nulls;
}

/* ---- aliasing, memory, selection --------------------------------------------------- */
/* Ops documented as in-place-safe give the out-of-place bits when an output
 * is also an input. */
FM_TEST(in_place_aliasing) {
  enum { N = 1000 };
  static float x[N], d[N], u[N], ref1[N], ref2[N], buf[N], buf2[N];
  fill_inputs(x, N, -6.0, 6.0);
  for (int i = 0; i < N; i++) {
    d[i] = (float)rng_uniform(-1, 1);
    u[i] = (float)rng_uniform(-1, 1);
  }
  fm_cpu_gelu_bwd(ref1, d, x, N);
  memcpy(buf, d, sizeof buf);
  fm_cpu_gelu_bwd(buf, buf, x, N); /* dx overwrites dout */
  FM_EXPECT(memcmp(buf, ref1, sizeof buf) == 0);
  fm_cpu_gelu_fwd(ref1, x, N);
  memcpy(buf, x, sizeof buf);
  fm_cpu_gelu_fwd(buf, buf, N);
  FM_EXPECT(memcmp(buf, ref1, sizeof buf) == 0);
  fm_cpu_swiglu_bwd(ref1, ref2, d, x, u, N);
  memcpy(buf, x, sizeof buf);
  memcpy(buf2, u, sizeof buf2);
  fm_cpu_swiglu_bwd(buf, buf2, d, buf, buf2, N); /* dgate over gate, dup over up */
  FM_EXPECT(memcmp(buf, ref1, sizeof buf) == 0);
  FM_EXPECT(memcmp(buf2, ref2, sizeof buf2) == 0);
}

FM_TEST(cpu_memory_ops) {
  const FmBackend *b = fm_backend_cpu();
  FM_EXPECT(b->alloc(0) == NULL);
  b->free(NULL);
  enum { N = 1003 };
  uint8_t *p = b->alloc(N), *q = b->alloc(N), host[N];
  FM_REQUIRE(p && q);
  FM_EXPECT_EQ_INT((uintptr_t)p % 64, 0);
  for (int i = 0; i < N; i++) host[i] = (uint8_t)(i * 7);
  b->copy_to_device(p, host, N);
  b->copy(q, p, N);
  b->memset(q + 10, 0xAB, 5);
  b->synchronize();
  uint8_t back[N];
  b->copy_to_host(back, q, N);
  for (int i = 0; i < N; i++) FM_EXPECT_EQ_INT(back[i], i >= 10 && i < 15 ? 0xAB : (uint8_t)(i * 7));
  b->free(p);
  b->free(q);
}

FM_TEST(backend_select) {
  int st = 1;
  const FmBackend *cpu = fm_backend_get("CPU", &st);
  FM_REQUIRE(cpu != NULL);
  FM_EXPECT_EQ_INT(st, 0);
  FM_EXPECT_EQ_STR(cpu->name, "cpu");
  FM_EXPECT(cpu == fm_backend_cpu() && cpu->host_accessible);
  FM_EXPECT_EQ_INT(null_ops(cpu), 0);

  FM_EXPECT(fm_backend_get("tpu", &st) == NULL);
  FM_EXPECT_EQ_INT(st, FM_EINVAL);
  FM_EXPECT(fm_backend_get(NULL, &st) == NULL);

  /* cuda: a table only when built with CUDA and a device answers; here
   * (no GPU) FM_ENODEV or, in a CPU-only build, FM_EUNSUPPORTED. */
  const FmBackend *cuda = fm_backend_get("cuda", &st);
  if (cuda) {
    FM_EXPECT_EQ_INT(st, 0);
    FM_EXPECT_EQ_STR(cuda->name, "cuda");
  } else {
#ifdef FMHPC_HAVE_CUDA
    FM_EXPECT_EQ_INT(st, FM_ENODEV);
#else
    FM_EXPECT_EQ_INT(st, FM_EUNSUPPORTED);
#endif
  }
  const FmBackend *au = fm_backend_get("auto", &st);
  FM_EXPECT_EQ_INT(st, 0);
  FM_EXPECT(au == (cuda ? cuda : cpu));
}
