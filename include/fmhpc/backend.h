/* backend.h: the backend op table FmBackend and how to pick one (fm_backend_get).
 * The ops are listed once, with their contracts, in fmhpc/ops.def; the table
 * fields and the fm_cpu_* / fm_cuda_* declarations below are generated from it.
 * One table per backend with identical signatures: CPU ops (fm_cpu_*, the
 * readable specification, src/tensor/cpu/) and CUDA ops (fm_cuda_*, host
 * wrappers around kernels, src/tensor/cuda/, declared only when the build has
 * CUDA). Elementwise ops share one `static inline` body (src/tensor/elementwise.h)
 * so the two sides compute the same formula; tests/kernels checks each CUDA op
 * against its CPU op at a stated tolerance (bitwise where the body uses only
 * correctly rounded operations).
 *
 * Not here: tensor tables (tensor.h), collectives (runtime.h), and which device
 * a rank uses (the runtime decides: fm_runtime_bind_gpu, runtime.h).
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

/* The op fields come from ops.def (one line per op, with its contract). */
typedef struct FmBackend {
  const char *name;    /* "cpu" or "cuda" */
  int host_accessible; /* 1 when backend pointers are host pointers (cpu) */
#define FM_OP(name, cuda, use, ret, params) ret(*name) params;
#include "fmhpc/ops.def"
#undef FM_OP
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
/* What a caller needs of a backend (fm_backend_choose's `need`, or-ed). */
enum {
  FM_NEED_MODEL = 1,  /* every op ops.def marks `model` (a model's forward and backward) */
  FM_NEED_DECODE = 2, /* attention_decode (generation) */
  FM_NEED_HOST = 4,   /* the caller reads backend buffers as host memory */
  FM_NEED_BF16 = 8    /* set_compute_bf16 (&train precision with c=bf16) */
};
/* The backend a run uses, and why, in words for the log and --check (`why`,
 * n bytes). "auto" takes CUDA only when it is usable and has every op `need`
 * names, else the CPU, and says which reason decided; "cpu" and "cuda" are
 * taken as asked, or NULL with *status FM_EUNSUPPORTED (an op missing, named
 * in `why`) / FM_ENODEV. Unknown name: NULL and FM_EINVAL. */
const FmBackend *fm_backend_choose(const char *name, int need, char *why, int n, int *status);
/* Tests only: make fm_backend_cuda hand out `table` (the SIMT-emulated kernel
 * table of the fmhpc_emu build) as if a device answered; NULL undoes it. */
void fm_backend_set_cuda_stand_in(const FmBackend *table);
/* Names for device buffers, for a tool that accounts host<->device traffic
 * by buffer (fmhpc_emu's FMHPC_EMU_COPY_STATS): fm_backend_name_buffer tells
 * the installed namer that [p, p + bytes) holds `name` ("weights",
 * "optimizer state", ...); a no-op when none is installed (every real run). */
typedef void (*FmBufferNamer)(const void *p, int64_t bytes, const char *name);
void fm_backend_set_buffer_namer(FmBufferNamer fn);
void fm_backend_name_buffer(const void *p, int64_t bytes, const char *name);

/* ---- labelled allocations: what each large buffer of a run is, and the
 * plan's figure for it (fmhpc --check, src/train/plan.c), so that an
 * out-of-memory report names both (src/tensor/backend.c). */
typedef enum FmMemItem {
  FM_MEM_WEIGHTS, /* the model's weight arena */
  FM_MEM_GRADS,   /* the model's gradient arena */
  FM_MEM_ACT,     /* the activation arena */
  FM_MEM_BATCH,   /* the micro-batch: tokens, targets, weights, logits rows, xent scratch */
  FM_MEM_REDUCE,  /* the exact reduction's device accumulator and scales */
  FM_MEM_OPTIM,   /* optimizer state */
  FM_MEM_ATTN,    /* flash attention's bf16 Q/K/V/O copies, D and lse */
  FM_MEM_GEMM_WS, /* the cuBLASLt workspace */
  FM_MEM_OTHER,   /* anything else (a benchmark's, an op's small tables) */
  FM_MEM_ITEMS
} FmMemItem;
/* "the model's weights", ... (the report's words). */
const char *fm_mem_item_name(FmMemItem item);
/* The plan's bytes per rank for item (0: the plan has no figure); set once
 * per run from the plan, before the allocations. */
void fm_mem_plan_set(FmMemItem item, int64_t bytes);
int64_t fm_mem_plan_get(FmMemItem item);
/* be->alloc_for(bytes, item's name, item's plan figure), or be->alloc. */
void *fm_backend_alloc(const FmBackend *be, int64_t bytes, FmMemItem item);

/* ---- the CPU ops, callable directly (tests, tools): fm_cpu_<op> for every
 * op of ops.def, the readable specification of its contract. */
#define FM_OP(name, cuda, use, ret, params) ret fm_cpu_##name params;
#include "fmhpc/ops.def"
#undef FM_OP
/* The scratch floats xent_fwd_bwd needs for (N, V): a pure function, not an op. */
int64_t fm_cpu_xent_scratch(int64_t N, int64_t V);
/* The CPU GEMM as a line for logs and benchmarks: OpenBLAS's kernel
 * (openblas_get_corename), its build config, and how the CPU ops thread it. */
const char *fm_cpu_blas_info(void);

/* ---- CUDA error messages (src/tensor/cuda_msg.c; in every build, so they
 * are tested without a GPU). Each writes one line (no trailing newline) into
 * buf (n bytes, truncated) and returns what snprintf returns. device < 0:
 * unknown. Versions are CUDA's integers (12040 = 12.4; driver 0 = none). */
/* "file:line: <lib> call failed on device D: <call>: <what>" */
int fm_cuda_msg_call(char *buf, int n, const char *lib, const char *call, const char *file, int line, int device,
                     const char *what);
/* cudaErrorInsufficientDriver: which CUDA the driver supports, which the
 * build's runtime needs, and what to do. */
int fm_cuda_msg_driver(char *buf, int n, int driver_version, int runtime_version);
/* Out of device memory: the size asked, what it was for (label, or NULL), the
 * plan's figure for it (plan_bytes, or 0 when the caller has none) and the
 * device's free/total bytes (-1: unknown), with a hint. */
int fm_cuda_msg_oom(char *buf, int n, int device, int64_t bytes, const char *label, int64_t plan_bytes,
                    int64_t free_bytes, int64_t total_bytes);

/* One pinned GEMM plan of the CUDA backend (src/tensor/cuda/gemm.cu): the
 * shape in cuBLAS's column-major terms (C (m, n) = op(A) op(B), ta/tb 1 =
 * transposed, leading dimensions of the operands as cuBLASLt sees them: the
 * packed bf16 copies in bf16 mode), the precision, and cuBLASLt's algorithm
 * (CUBLASLT_ALGO_CONFIG_* values; -1 under the emulator, which runs a host
 * GEMM), the workspace the algorithm needs and the fixed one it is given. */
typedef struct FmGemmPlanInfo {
  int bf16; /* 1: bf16 operands, fp32 accumulation and output; 0: fp32 */
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t algo_id, tile, stages, splitk, reduction, swizzle, custom;
  int64_t workspace, workspace_fixed; /* bytes */
  int64_t calls;                      /* GEMMs run with this plan so far */
} FmGemmPlanInfo;

#ifdef FMHPC_HAVE_CUDA
/* ---- the CUDA side (src/tensor/cuda/) ------------------------------------ */
/* Device probe: 0 and *count >= 1, or FM_ENODEV when cudaGetDeviceCount fails
 * (no driver returns error 35, cudaErrorInsufficientDriver, and leaves the
 * count unwritten) or finds no device. */
int fm_cuda_device_count(int *count);
/* cuBLASLt is opened on first use, not linked (its initialisers cost every
 * process, CPU runs included, ~100 MB of page faults): fm_backend_cuda loads
 * it once a device is found. path NULL: the soname of the headers the build
 * used, then the file the build found; a path is tried, and kept only when
 * nothing is loaded yet. FM_OK, or FM_ENODEV with the reason and a hint in
 * why. fm_cuda_blaslt_version: cublasLtGetVersion(), -1 before a load. */
int fm_cuda_blaslt_load(const char *path, char *why, int n);
int64_t fm_cuda_blaslt_version(void);
/* The stream every fm_cuda_* op runs on (a cudaStream_t; NULL = the legacy
 * default stream, the initial value). Set it before the first op of a step. */
void fm_cuda_set_stream(void *stream);
void *fm_cuda_get_stream(void);
/* The GEMM plans chosen so far (each pinned at the first GEMM of its shape,
 * so after the first training step every plan of the run exists): copies at
 * most max into out (may be NULL) and returns how many there are. */
int fm_cuda_gemm_plans(FmGemmPlanInfo *out, int max);
/* The same as text: fm_cuda_gemm_plans_text, the gemm_plans_text op
 * (declared below from ops.def), one line per plan: "gemm I: bf16 TN m=..
 * n=.. k=.. lda=.. ldb=.. ldc=.. algo=.. tile=.. stages=.. splitk=..
 * reduction=.. swizzle=.. custom=.. workspace=USED/FIXED". */
/* fm_cuda_<op> for every op ops.def marks `cuda`. */
#define FM__OP_CUDA_DECL_cuda(name, ret, params) ret fm_cuda_##name params;
#define FM__OP_CUDA_DECL_nocuda(name, ret, params)
#define FM_OP(name, cuda, use, ret, params) FM__OP_CUDA_DECL_##cuda(name, ret, params)
#include "fmhpc/ops.def"
#undef FM_OP
#endif

#ifdef __cplusplus
}
#endif

#endif
