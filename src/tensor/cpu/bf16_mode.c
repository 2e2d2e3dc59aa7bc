/* cpu/bf16_mode.c: the CPU backend's bf16-emulation switch
 * (fm_cpu_set_compute_bf16) and the buffers the model ops round into.
 *
 * What is rounded when the mode is on (round to nearest even, as torch's
 * c10::BFloat16, via fm_round_bf16 in ../elementwise.h): the two operands of
 * every GEMM, i.e. matmul's inp and w (forward), dout, w and inp (backward),
 * and the cross-entropy's x, w and dlogits. Products are then summed in fp32,
 * as a GPU's bf16 tensor-core GEMM with fp32 accumulation does; biases,
 * outputs, gradients and every non-GEMM op (norms, RoPE, attention's
 * softmax, embedding) stay fp32. Rounding the activations the model stores is
 * the model's job (round_bf16 op). Where the GPU would keep a bf16 copy of a
 * weight, this copies and rounds at each call: emulation is for checking
 * numerics, not for speed. */
#include "fmhpc/tensor.h"

#include "cpu_ops.h"

static int fm__bf16 = 0;

void fm_cpu_set_compute_bf16(int on) { fm__bf16 = on != 0; }
int fm__cpu_bf16_on(void) { return fm__bf16; }

/* The CPU's GEMMs have no plans to pin (fm_cpu_blas_info describes them). */
int64_t fm_cpu_gemm_plans_text(char *buf, int64_t cap) {
  if (buf && cap > 0) buf[0] = '\0';
  return 0;
}
int64_t fm_cpu_gemm_plans_record(char *buf, int64_t cap) { return fm_cpu_gemm_plans_text(buf, cap); }
int fm_cpu_gemm_plans_pin(const char *recorded, char *report, int64_t cap) {
  (void)recorded;
  if (report && cap > 0) report[0] = '\0';
  return -1;
}

/* Grow-once buffers: sized by the largest GEMM operand the step asks for, so
 * the first step allocates and later steps do not (STYLE rule 8). Ops run
 * from one thread per rank; the buffers are not shared across threads. */
static float *fm__buf[FM__BF16_SLOTS];
static int64_t fm__cap[FM__BF16_SLOTS];

const float *fm__cpu_bf16_copy(int slot, const float *x, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t n = rows * cols;
  if (n > fm__cap[slot]) {
    fm_cpu_free(fm__buf[slot]);
    fm__buf[slot] = fm_cpu_alloc(n * (int64_t)sizeof(float));
    fm__cap[slot] = n;
  }
  float *out = fm__buf[slot];
#pragma omp parallel for schedule(static) if (n >= ((int64_t)1 << 15))
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[r * cols + c] = fm_round_bf16(x[r * ld + c]);
  return out;
}
