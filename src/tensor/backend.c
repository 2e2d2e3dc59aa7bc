/* backend.c: the backend op tables and their selection (fm_backend_cpu,
 * fm_backend_cuda, fm_backend_get). The ops themselves live in cpu/ and cuda/;
 * this file only wires them into FmBackend and decides whether the CUDA table
 * may be handed out (built with CUDA, and a device answers). */
#include "fmhpc/tensor.h"

/* Both tables from ops.def: every op in the CPU table; in the CUDA table the
 * ops marked `cuda`, NULL for the rest (callers check: fm_model_create needs
 * every `model` op). */
#define FM_OP(name, cuda, use, ret, params) .name = fm_cpu_##name,
static const FmBackend fm__cpu_backend = {
    .name = "cpu",
    .host_accessible = 1,
#include "fmhpc/ops.def"
};
#undef FM_OP

#ifdef FMHPC_HAVE_CUDA
#define FM__OP_CUDA_FN_cuda(name)           fm_cuda_##name
#define FM__OP_CUDA_FN_nocuda(name)         NULL
#define FM_OP(name, cuda, use, ret, params) .name = FM__OP_CUDA_FN_##cuda(name),
static const FmBackend fm__cuda_backend = {
    .name = "cuda",
    .host_accessible = 0,
#include "fmhpc/ops.def"
};
#undef FM_OP
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
