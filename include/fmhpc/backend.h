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

  /* ---- model ops (fp32 storage; see fm_cpu_* below for the contracts). The
   * CUDA side of these lands with its kernel tests; until then the CUDA table
   * leaves them NULL and the CUDA backend is not offered for training. */
  void (*matmul_fwd)(float *out, const float *inp, const float *w, const float *bias, int64_t N, int64_t C,
                     int64_t OC);
  void (*matmul_bwd)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int64_t N, int64_t C, int64_t OC);
  void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        int64_t N, int64_t C, float eps);
  void (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int64_t N, int64_t C);
  void (*rmsnorm_fwd)(float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C, float eps);
  void (*rmsnorm_bwd)(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                      int64_t N, int64_t C);
  void (*rope_fwd)(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta);
  void (*rope_bwd)(float *dx, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta);
  void (*attention_fwd)(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                        int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
  void (*attention_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                        const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
  /* Generation's decode step (fm_cpu_attention_decode); optional: NULL where
   * the backend has none yet (CUDA), and only generation needs it. */
  void (*attention_decode)(float *out, const float *q, const float *kc, const float *vc, int64_t ldq, int64_t ldkv,
                           const int32_t *pos, int64_t B, int64_t Tc, int64_t NH, int64_t NKV, int64_t HS);
  double (*xent_fwd_bwd)(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                         const float *weight, int64_t N, int64_t C, int64_t V, float *scratch);
  void (*embedding_fwd)(float *out, const int32_t *tokens, const float *wte, const int32_t *pos, const float *wpe,
                        int64_t N, int64_t C);
  void (*embedding_bwd)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, const int32_t *pos,
                        int64_t N, int64_t C, int64_t V);
  /* bf16 emulation on/off (CPU: round matmul inputs and stored activations to
   * bf16, accumulate in fp32, as the GPU's bf16 compute does). */
  void (*set_compute_bf16)(int on);
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

/* ---- CPU model ops: the readable specification. Shapes use STYLE.md's
 * vocabulary; N = B*T rows; matrices row-major; weights stored (out, in) as
 * torch.nn.Linear. Backward ops ACCUMULATE (+=) into every weight gradient
 * (dw, db, dbias, dwte, dwpe) and into dinp/dq/dk/dv/dx, so a tied embedding
 * or a residual branch sums correctly; callers zero gradients first. Every
 * reduction runs in a fixed order whatever the thread count: same inputs,
 * same bits (DESIGN section 6). No T x T or N x V buffer is ever made whole. */
/* out (N, OC) = inp (N, C) @ w^T, w (OC, C), + bias (OC) unless bias is NULL. */
void fm_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int64_t N, int64_t C,
                       int64_t OC);
/* dinp (N, C) += dout @ w; dw (OC, C) += dout^T @ inp; dbias (OC) += column
 * sums of dout (each output may be NULL to skip it). */
void fm_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                       int64_t N, int64_t C, int64_t OC);
/* As torch.nn.LayerNorm (biased variance, eps inside the sqrt); keeps mean
 * and rstd (N) for backward. */
void fm_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int64_t N, int64_t C, float eps);
void fm_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                          const float *mean, const float *rstd, int64_t N, int64_t C);
/* As HF LlamaRMSNorm: out = w * x / sqrt(mean(x^2) + eps); keeps rstd (N). */
void fm_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C, float eps);
void fm_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                        int64_t N, int64_t C);
/* RoPE in place on H heads of size HS per row (row stride ld elements), HF's
 * rotate_half layout: pairs (i, i + HS/2), angle pos[n] * theta^(-2i/HS).
 * Backward applies the inverse rotation to the gradient in place. */
void fm_cpu_rope_fwd(float *x, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta);
void fm_cpu_rope_bwd(float *dx, const int32_t *pos, int64_t N, int64_t ld, int64_t H, int64_t HS, float theta);
/* Causal attention with GQA (query head h uses KV head h / (NH/NKV)) and an
 * optional document mask: position t sees s <= t with seg[b*T+s] == seg[b*T+t]
 * (seg NULL: one document per row). q rows have stride ldq, k and v rows
 * stride ldkv (so GPT-2's fused qkv buffer is read in place); head h of row n
 * is at q + n*ldq + h*HS. out (N, NH*HS) dense; lse (B, NH, T) keeps each
 * row's log-sum-exp. Scale 1/sqrt(HS). Computed blockwise with an online
 * softmax: scores are never stored T x T. Backward recomputes scores from
 * lse; dq/dk/dv use the same strides as q/k/v and are accumulated (+=). */
void fm_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                          int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                          int64_t HS);
void fm_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                          const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
/* Decode attention: one new query row per sequence against a key/value cache
 * (generation). Sequence b's query (head h at q + b*ldq + h*HS) attends keys
 * s = 0..pos[b] of its cache rows, kv head g of row (b, s) at
 * kc + (b*Tc + s)*ldkv + g*HS (vc alike); GQA as attention_fwd. out (B, NH*HS)
 * dense. The value is row pos[b] of attention_fwd over the same keys with seg
 * NULL, computed by the same tiles and online softmax with one query row:
 * equal within 1e-6 relative (tests/unit/test_generate.c; bitwise where the
 * sgemm's per-element order does not depend on the row count). No lse. */
void fm_cpu_attention_decode(float *out, const float *q, const float *kc, const float *vc, int64_t ldq, int64_t ldkv,
                             const int32_t *pos, int64_t B, int64_t Tc, int64_t NH, int64_t NKV, int64_t HS);
/* The output projection fused with softmax cross-entropy, in vocab chunks:
 * logits = x (N, C) @ w^T, w (V, C). Returns sum_n weight[n] * loss_n in
 * double (weight[n] = 0 masks a token; the caller passes 1/(global unmasked
 * count) to get the mean). dx (N, C) += dloss/dx and dw (V, C) += dloss/dw
 * for that weighted sum (either may be NULL: forward only). scratch holds at
 * least fm_cpu_xent_scratch(N, V) floats. */
double fm_cpu_xent_fwd_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *weight, int64_t N, int64_t C, int64_t V, float *scratch);
int64_t fm_cpu_xent_scratch(int64_t N, int64_t V);
/* out (N, C) = wte[tokens[n]] + (wpe ? wpe[pos[n]] : 0). Backward scatters
 * into dwte (V, C) / dwpe in a fixed order (no atomics; deterministic). */
void fm_cpu_embedding_fwd(float *out, const int32_t *tokens, const float *wte, const int32_t *pos, const float *wpe,
                          int64_t N, int64_t C);
void fm_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, const int32_t *pos,
                          int64_t N, int64_t C, int64_t V);
void fm_cpu_set_compute_bf16(int on);
/* The CPU GEMM as a line for logs and benchmarks: OpenBLAS's kernel
 * (openblas_get_corename), its build config, and how the CPU ops thread it. */
const char *fm_cpu_blas_info(void);

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
