/* backend.h: the backend op table FmBackend and how to pick one (fm_backend_get).
 * One table per backend with identical signatures: CPU ops (fm_cpu_*, the
 * readable specification, src/tensor/cpu/) and CUDA ops (fm_cuda_*, host
 * wrappers around kernels, src/tensor/cuda/, declared only when the build has
 * CUDA). Elementwise ops share one `static inline` body (src/tensor/elementwise.h)
 * so the two sides compute the same formula; tests/kernels checks each CUDA op
 * against its CPU op at a stated tolerance (bitwise where the body uses only
 * correctly rounded operations).
 *
 * Not here: tensor tables (tensor.h), collectives (runtime.h), and which device
 * a rank uses (the runtime decides; it calls fm_cuda_select_device).
 *
 * Conventions (STYLE rules 9 and 11): outputs, inputs, weights, sizes, then
 * context; sizes are int64_t element counts (bytes for memory ops). Op pointers
 * are backend memory: host memory for the CPU backend, device memory for CUDA.
 * Ops on the CUDA backend are asynchronous on the backend's stream; copies to
 * the host and synchronize() wait. Memory ops end the job on failure (a failed
 * allocation or copy has no recovery inside a step; the report names the call). */
#ifndef FMHPC_BACKEND_H
#define FMHPC_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FmBackend {
  const char *name;    /* "cpu" or "cuda" */
  int host_accessible; /* 1 when backend pointers are host pointers (cpu) */

  /* ---- memory --------------------------------------------------------- */
  void *(*alloc)(int64_t bytes); /* aligned to >= 64 bytes; NULL for 0 bytes */
  void (*free)(void *p);         /* NULL is a no-op */
  void (*memset)(void *p, int value, int64_t bytes);
  void (*copy_to_device)(void *dst, const void *host_src, int64_t bytes); /* host -> backend */
  void (*copy_to_host)(void *host_dst, const void *src, int64_t bytes);   /* backend -> host, waits */
  void (*copy)(void *dst, const void *src, int64_t bytes);                /* backend -> backend */
  void (*synchronize)(void);                                              /* wait for queued work */

  /* ---- elementwise (in-place allowed where out and an input are the same array) */
  /* out = gelu(x), tanh approximation as torch gelu(approximate='tanh') (GPT-2). */
  void (*gelu_fwd)(float *out, const float *x, int64_t n);
  /* dx = dout * gelu'(x) (overwrites dx; the caller accumulates if needed). */
  void (*gelu_bwd)(float *dx, const float *dout, const float *x, int64_t n);
  /* out = silu(gate) * up (Llama MLP: w2(silu(w1 x) * w3 x)). */
  void (*swiglu_fwd)(float *out, const float *gate, const float *up, int64_t n);
  void (*swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
  void (*add)(float *out, const float *a, const float *b, int64_t n); /* residual add */
  void (*scale)(float *x, float s, int64_t n);                        /* x *= s */
  /* bf16 round-to-nearest-even; NaN -> 0x7FC0 (as torch's c10::BFloat16). */
  void (*cast_f32_to_bf16)(uint16_t *out, const float *x, int64_t n);
  void (*cast_bf16_to_f32)(float *out, const uint16_t *x, int64_t n); /* exact */
  /* x = bf16(x) in fp32 storage: the CPU backend's bf16-emulation mode. */
  void (*round_bf16)(float *x, int64_t n);
  /* AdamW (decoupled weight decay, as torch.optim.AdamW): with bc1 = 1 - beta1^t,
   * bc2 = 1 - beta2^t for step t >= 1:
   *   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
   *   w = w - lr * ((m/bc1) / (sqrt(v/bc2) + eps) + weight_decay*w) */
  void (*adamw_update)(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1, float beta2,
                       float eps, float weight_decay, float bc1, float bc2);

  /* ---- room for later ops (same rules: CPU reference first, CUDA op with
   * its test against it in tests/kernels):
   *   gemm (OpenBLAS sgemm / cuBLASLt bf16|fp32, fp32 accumulation),
   *   layernorm / rmsnorm fwd+bwd, RoPE fwd+bwd, causal GQA attention with
   *   segment-id document mask fwd+bwd, fused softmax cross-entropy fwd+bwd,
   *   quantize / dequantize. */
} FmBackend;

/* The CPU backend: always present. */
const FmBackend *fm_backend_cpu(void);
/* The CUDA backend, or NULL with *status = FM_EUNSUPPORTED (built without
 * CUDA) or FM_ENODEV (no usable device: no driver, or zero devices). status
 * may be NULL. */
const FmBackend *fm_backend_cuda(int *status);
/* By name: "cpu", "cuda" or "auto" (cuda when usable, else cpu), case-insensitive.
 * Unknown name: NULL and FM_EINVAL. */
const FmBackend *fm_backend_get(const char *name, int *status);

/* ---- the CPU ops, callable directly (tests, tools) ----------------------- */
void *fm_cpu_alloc(int64_t bytes);
void fm_cpu_free(void *p);
void fm_cpu_memset(void *p, int value, int64_t bytes);
void fm_cpu_copy(void *dst, const void *src, int64_t bytes); /* also serves h2d and d2h */
void fm_cpu_synchronize(void);
void fm_cpu_gelu_fwd(float *out, const float *x, int64_t n);
void fm_cpu_gelu_bwd(float *dx, const float *dout, const float *x, int64_t n);
void fm_cpu_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n);
void fm_cpu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
void fm_cpu_add(float *out, const float *a, const float *b, int64_t n);
void fm_cpu_scale(float *x, float s, int64_t n);
void fm_cpu_cast_f32_to_bf16(uint16_t *out, const float *x, int64_t n);
void fm_cpu_cast_bf16_to_f32(float *out, const uint16_t *x, int64_t n);
void fm_cpu_round_bf16(float *x, int64_t n);
void fm_cpu_adamw_update(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float bc1, float bc2);

#ifdef FMHPC_HAVE_CUDA
/* ---- the CUDA side (src/tensor/cuda/) ------------------------------------ */
/* Device probe: 0 and *count >= 1, or FM_ENODEV when cudaGetDeviceCount fails
 * (no driver returns error 35, cudaErrorInsufficientDriver, and leaves the
 * count unwritten) or finds no device. */
int fm_cuda_device_count(int *count);
/* Bind this process to device `device` (the runtime passes the local rank's
 * GPU); FM_ENODEV when out of range, FM_ECUDA when cudaSetDevice fails. */
int fm_cuda_select_device(int device);
/* The stream every fm_cuda_* op runs on (a cudaStream_t; NULL = the legacy
 * default stream, the initial value). Set it before the first op of a step. */
void fm_cuda_set_stream(void *stream);
void *fm_cuda_get_stream(void);

void *fm_cuda_alloc(int64_t bytes);
void fm_cuda_free(void *p);
void fm_cuda_memset(void *p, int value, int64_t bytes);
void fm_cuda_copy_to_device(void *dst, const void *host_src, int64_t bytes);
void fm_cuda_copy_to_host(void *host_dst, const void *src, int64_t bytes);
void fm_cuda_copy(void *dst, const void *src, int64_t bytes);
void fm_cuda_synchronize(void);
void fm_cuda_gelu_fwd(float *out, const float *x, int64_t n);
void fm_cuda_gelu_bwd(float *dx, const float *dout, const float *x, int64_t n);
void fm_cuda_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n);
void fm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
void fm_cuda_add(float *out, const float *a, const float *b, int64_t n);
void fm_cuda_scale(float *x, float s, int64_t n);
void fm_cuda_cast_f32_to_bf16(uint16_t *out, const float *x, int64_t n);
void fm_cuda_cast_bf16_to_f32(float *out, const uint16_t *x, int64_t n);
void fm_cuda_round_bf16(float *x, int64_t n);
void fm_cuda_adamw_update(float *w, float *m, float *v, const float *g, int64_t n, float lr, float beta1, float beta2,
                          float eps, float weight_decay, float bc1, float bc2);
#endif

#ifdef __cplusplus
}
#endif

#endif
