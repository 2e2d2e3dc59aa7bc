/* backend.c: the backend op tables and their selection (fm_backend_cpu,
 * fm_backend_cuda, fm_backend_get, fm_backend_choose). The ops themselves live in cpu/ and cuda/;
 * this file only wires them into FmBackend and decides whether the CUDA table
 * may be handed out (built with CUDA, and a device answers). */
#include <stdio.h>

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

/* ---- labelled allocations ---------------------------------------------- */
static int64_t fm__mem_plan[FM_MEM_ITEMS];

const char *fm_mem_item_name(FmMemItem item) {
  static const char *const names[FM_MEM_ITEMS] = {
      "the model's weights",
      "the model's gradients",
      "the activations",
      "the micro-batch buffers (tokens, targets, logits rows, cross-entropy scratch)",
      "the exact reduction's device buffers (int64 accumulator, block scales)",
      "the optimizer state",
      "flash attention's scratch (bf16 Q/K/V/O copies, D, lse)",
      "the cuBLASLt workspace",
      "a work buffer"};
  return item >= 0 && item < FM_MEM_ITEMS ? names[item] : "a work buffer";
}

void fm_mem_plan_set(FmMemItem item, int64_t bytes) {
  if (item >= 0 && item < FM_MEM_ITEMS) fm__mem_plan[item] = bytes > 0 ? bytes : 0;
}

int64_t fm_mem_plan_get(FmMemItem item) { return item >= 0 && item < FM_MEM_ITEMS ? fm__mem_plan[item] : 0; }

void *fm_backend_alloc(const FmBackend *be, int64_t bytes, FmMemItem item) {
  if (be->alloc_for) return be->alloc_for(bytes, fm_mem_item_name(item), fm_mem_plan_get(item));
  return be->alloc(bytes);
}

static void set_status(int *status, int value) {
  if (status) *status = value;
}

/* Tests only: the table fm_backend_cuda hands out instead of the real one. */
static const FmBackend *fm__cuda_stand_in;

void fm_backend_set_cuda_stand_in(const FmBackend *table) { fm__cuda_stand_in = table; }

static FmBufferNamer fm__buffer_namer;

void fm_backend_set_buffer_namer(FmBufferNamer fn) { fm__buffer_namer = fn; }

void fm_backend_name_buffer(const void *p, int64_t bytes, const char *name) {
  if (fm__buffer_namer && p && bytes > 0) fm__buffer_namer(p, bytes, name);
}

const FmBackend *fm_backend_cpu(void) { return &fm__cpu_backend; }

const FmBackend *fm_backend_cuda(int *status) {
  if (fm__cuda_stand_in) {
    set_status(status, FM_OK);
    return fm__cuda_stand_in;
  }
#ifdef FMHPC_HAVE_CUDA
  int count = 0;
  int rc = fm_cuda_device_count(&count);
  if (rc == FM_OK) {
    char why[1024];
    static int told = 0; /* once: "auto" asks again to word its choice */
    rc = fm_cuda_blaslt_load(NULL, why, (int)sizeof why);
    if (rc != FM_OK && !told) {
      fm_warn0("%s", why);
      told = 1;
    }
  }
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

/* What a usable backend lacks for the caller (in words, into buf), or NULL
 * when it has every op the caller's `need` names. */
static const char *lacks(const FmBackend *b, int need, char *buf, size_t n) {
  if (need & FM_NEED_MODEL) {
#define FM__NEED_OP_extra(op)
#define FM__NEED_OP_model(op)                                                                 \
  if (!b->op) {                                                                               \
    snprintf(buf, n, "the %s build has no %s op, which every model step runs", b->name, #op); \
    return buf;                                                                               \
  }
#define FM_OP(name, cuda, use, ret, params) FM__NEED_OP_##use(name)
#include "fmhpc/ops.def"
#undef FM_OP
#undef FM__NEED_OP_model
#undef FM__NEED_OP_extra
  }
  if ((need & FM_NEED_DECODE) && !b->attention_decode) {
    snprintf(buf, n, "the %s build has no attention_decode op, which generation runs", b->name);
    return buf;
  }
  if ((need & FM_NEED_BF16) && !b->set_compute_bf16) {
    snprintf(buf, n, "the %s build has no set_compute_bf16 op, which &train precision c=bf16 runs", b->name);
    return buf;
  }
  if ((need & FM_NEED_HOST) && !b->host_accessible) {
    snprintf(buf, n, "this task reads the backend's buffers on the host, and %s's are device memory", b->name);
    return buf;
  }
  return NULL;
}

const FmBackend *fm_backend_choose(const char *name, int need, char *why, int n, int *status) {
  int st = FM_OK;
  const FmBackend *b = fm_backend_get(name, &st);
  const int is_auto = name && fm_strcasecmp(name, "auto") == 0;
  char buf[160];
  if (!b) {
    set_status(status, st);
    snprintf(why, (size_t)n, "backend '%s': %s", name ? name : "(null)", fm_strerror(st));
    return NULL;
  }
  if (!is_auto) {
    const char *miss = lacks(b, need, buf, sizeof buf);
    set_status(status, miss ? FM_EUNSUPPORTED : FM_OK);
    snprintf(why, (size_t)n, "%s", miss ? miss : "as the deck asks");
    return miss ? NULL : b;
  }
  set_status(status, FM_OK);
  if (b == fm_backend_cpu()) {
    int cst = FM_OK;
    (void)fm_backend_cuda(&cst);
    snprintf(why, (size_t)n, "auto: no CUDA backend (%s)", fm_strerror(cst));
    return b;
  }
  const char *miss = lacks(b, need, buf, sizeof buf);
  if (miss) {
    snprintf(why, (size_t)n, "auto: a CUDA device is usable, but %s", miss);
    return fm_backend_cpu();
  }
  snprintf(why, (size_t)n, "auto: a CUDA device is usable and its build has every op the run needs");
  return b;
}
