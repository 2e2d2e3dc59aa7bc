/* backend.c: the backend op tables and their selection (fm_backend_cpu,
 * fm_backend_cuda, fm_backend_get). The ops themselves live in cpu/ and cuda/;
 * this file only wires them into FmBackend and decides whether the CUDA table
 * may be handed out (built with CUDA, and a device answers). */
#include "fmhpc/tensor.h"

static const FmBackend fm__cpu_backend = {
    .name = "cpu",
    .host_accessible = 1,
    .alloc = fm_cpu_alloc,
    .free = fm_cpu_free,
    .memset = fm_cpu_memset,
    .copy_to_device = fm_cpu_copy,
    .copy_to_host = fm_cpu_copy,
    .copy = fm_cpu_copy,
    .synchronize = fm_cpu_synchronize,
    .gelu_fwd = fm_cpu_gelu_fwd,
    .gelu_bwd = fm_cpu_gelu_bwd,
    .swiglu_fwd = fm_cpu_swiglu_fwd,
    .swiglu_bwd = fm_cpu_swiglu_bwd,
    .add = fm_cpu_add,
    .scale = fm_cpu_scale,
    .cast_f32_to_bf16 = fm_cpu_cast_f32_to_bf16,
    .cast_bf16_to_f32 = fm_cpu_cast_bf16_to_f32,
    .round_bf16 = fm_cpu_round_bf16,
    .adamw_update = fm_cpu_adamw_update,
    .matmul_fwd = fm_cpu_matmul_fwd,
    .matmul_bwd = fm_cpu_matmul_bwd,
    .layernorm_fwd = fm_cpu_layernorm_fwd,
    .layernorm_bwd = fm_cpu_layernorm_bwd,
    .rmsnorm_fwd = fm_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = fm_cpu_rmsnorm_bwd,
    .rope_fwd = fm_cpu_rope_fwd,
    .rope_bwd = fm_cpu_rope_bwd,
    .attention_fwd = fm_cpu_attention_fwd,
    .attention_bwd = fm_cpu_attention_bwd,
    .attention_decode = fm_cpu_attention_decode,
    .xent_fwd_bwd = fm_cpu_xent_fwd_bwd,
    .embedding_fwd = fm_cpu_embedding_fwd,
    .embedding_bwd = fm_cpu_embedding_bwd,
    .set_compute_bf16 = fm_cpu_set_compute_bf16,
};

#ifdef FMHPC_HAVE_CUDA
static const FmBackend fm__cuda_backend = {
    .name = "cuda",
    .host_accessible = 0,
    .alloc = fm_cuda_alloc,
    .free = fm_cuda_free,
    .memset = fm_cuda_memset,
    .copy_to_device = fm_cuda_copy_to_device,
    .copy_to_host = fm_cuda_copy_to_host,
    .copy = fm_cuda_copy,
    .synchronize = fm_cuda_synchronize,
    .gelu_fwd = fm_cuda_gelu_fwd,
    .gelu_bwd = fm_cuda_gelu_bwd,
    .swiglu_fwd = fm_cuda_swiglu_fwd,
    .swiglu_bwd = fm_cuda_swiglu_bwd,
    .add = fm_cuda_add,
    .scale = fm_cuda_scale,
    .cast_f32_to_bf16 = fm_cuda_cast_f32_to_bf16,
    .cast_bf16_to_f32 = fm_cuda_cast_bf16_to_f32,
    .round_bf16 = fm_cuda_round_bf16,
    .adamw_update = fm_cuda_adamw_update,
    /* model ops: NULL until the CUDA kernels land with their tests */
};
#endif

static void set_status(int *status, int value) {
  if (status) *status = value;
}

const FmBackend *fm_backend_cpu(void) { return &fm__cpu_backend; }

const FmBackend *fm_backend_cuda(int *status) {
#ifdef FMHPC_HAVE_CUDA
  int count = 0;
  int rc = fm_cuda_device_count(&count);
  set_status(status, rc);
  return rc == 0 ? &fm__cuda_backend : NULL;
#else
  set_status(status, FM_EUNSUPPORTED);
  return NULL;
#endif
}

const FmBackend *fm_backend_get(const char *name, int *status) {
  if (!name) {
    set_status(status, FM_EINVAL);
    return NULL;
  }
  if (fm_strcasecmp(name, "cpu") == 0) {
    set_status(status, FM_OK);
    return fm_backend_cpu();
  }
  if (fm_strcasecmp(name, "cuda") == 0) return fm_backend_cuda(status);
  if (fm_strcasecmp(name, "auto") == 0) {
    /* No usable GPU is not an error for "auto": that is what auto is for. */
    const FmBackend *b = fm_backend_cuda(NULL);
    set_status(status, FM_OK);
    return b ? b : fm_backend_cpu();
  }
  set_status(status, FM_EINVAL);
  return NULL;
}
