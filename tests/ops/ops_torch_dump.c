/* tests/ops/ops_torch_dump.c: runs CPU model ops on seeded inputs and writes
 * inputs and results as raw little-endian arrays into a directory, for
 * tests/ops/check_torch.py to compare against PyTorch (float64 autograd).
 * Shapes: attention B=2 T=45 NH=4 NKV=2 HS=8 with 2 documents per row, a fused
 * qkv buffer; layernorm/rmsnorm N=10 C=24; rope N=10 H=3 HS=8; xent N=10
 * C=16 V=2500 with two masked rows. Usage: ops_torch_dump <dir> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/tensor.h"
#include "ops_check.h"

static const char *dir;
static void dump(const char *name, const void *p, int64_t n, size_t elem) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.bin", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, elem, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}
static float *randf(const char *name, int64_t n, double lo, double hi) {
  float *x = ops_alloc(n);
  ops_fill(x, n, lo, hi);
  dump(name, x, n, sizeof(float));
  return x;
}

static void attention(void) {
  const int64_t B = 2, T = 45, NH = 4, NKV = 2, HS = 8, ld = (NH + 2 * NKV) * HS, N = B * T, no = N * NH * HS;
  int32_t seg[90];
  for (int64_t t = 0; t < N; t++) seg[t] = (int32_t)((t % T) < (t < T ? 17 : 30) ? 1 : 2);
  dump("att_seg", seg, N, sizeof(int32_t));
  float *qkv = randf("att_qkv", N * ld, -1.5, 1.5), *dout = randf("att_dout", no, -1, 1);
  float *out = ops_alloc(no), *lse = ops_alloc(B * NH * T), *d = ops_alloc(N * ld);
  fm_cpu_attention_fwd(out, lse, qkv, qkv + NH * HS, qkv + (NH + NKV) * HS, ld, ld, seg, B, T, NH, NKV, HS);
  fm_cpu_attention_bwd(d, d + NH * HS, d + (NH + NKV) * HS, dout, out, lse, qkv, qkv + NH * HS, qkv + (NH + NKV) * HS,
                       ld, ld, seg, B, T, NH, NKV, HS);
  dump("att_out", out, no, 4), dump("att_lse", lse, B * NH * T, 4), dump("att_dqkv", d, N * ld, 4);
  free(qkv), free(dout), free(out), free(lse), free(d);
}

static void norms(void) {
  const int64_t N = 10, C = 24;
  float *x = randf("norm_x", N * C, -2, 2), *w = randf("norm_w", C, 0.5, 1.5), *b = randf("norm_b", C, -1, 1);
  float *dout = randf("norm_dout", N * C, -1, 1);
  float *out = ops_alloc(N * C), *mean = ops_alloc(N), *rstd = ops_alloc(N);
  float *dx = ops_alloc(N * C), *dw = ops_alloc(C), *db = ops_alloc(C);
  fm_cpu_layernorm_fwd(out, mean, rstd, x, w, b, N, C, 1e-5f);
  fm_cpu_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, C);
  dump("ln_out", out, N * C, 4), dump("ln_dx", dx, N * C, 4), dump("ln_dw", dw, C, 4), dump("ln_db", db, C, 4);
  memset(dx, 0, (size_t)(N * C) * 4), memset(dw, 0, (size_t)C * 4);
  fm_cpu_rmsnorm_fwd(out, rstd, x, w, N, C, 1e-6f);
  fm_cpu_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);
  dump("rms_out", out, N * C, 4), dump("rms_dx", dx, N * C, 4), dump("rms_dw", dw, C, 4);
  free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
}

static void rope(void) {
  const int64_t N = 10, H = 3, HS = 8;
  int32_t pos[10];
  for (int i = 0; i < 10; i++) pos[i] = i * 37 % 101;
  dump("rope_pos", pos, N, sizeof(int32_t));
  float *x = randf("rope_x", N * H * HS, -1, 1);
  fm_cpu_rope_fwd(x, pos, N, H * HS, H, HS, 10000.0f);
  dump("rope_out", x, N * H * HS, 4);
  free(x);
}

static void xent(void) {
  const int64_t N = 10, C = 16, V = 2500;
  int32_t tg[10];
  float wt[10];
  for (int n = 0; n < 10; n++) {
    tg[n] = n == 3 || n == 7 ? -1 : (int32_t)(ops_next() % (uint64_t)V);
    wt[n] = n == 3 || n == 7 ? 0.0f : 0.125f;
  }
  dump("xent_tg", tg, N, 4), dump("xent_wt", wt, N, 4);
  float *x = randf("xent_x", N * C, -1, 1), *w = randf("xent_w", V * C, -2, 2);
  float *dx = ops_alloc(N * C), *dw = ops_alloc(V * C), *scratch = ops_alloc(fm_cpu_xent_scratch(N, V));
  const double loss = fm_cpu_xent_fwd_bwd(dx, dw, x, w, tg, wt, N, C, V, scratch);
  dump("xent_loss", &loss, 1, sizeof loss), dump("xent_dx", dx, N * C, 4), dump("xent_dw", dw, V * C, 4);
  free(x), free(w), free(dx), free(dw), free(scratch);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  ops_seed(2024);
  attention();
  norms();
  rope();
  xent();
  return 0;
}
