/* cuda/gemm.cu: the CUDA matmul ops (fm_cuda_matmul_fwd/bwd, the twins of
 * src/tensor/cpu/matmul.c) on one column-major GEMM wrapper, fm__gemm_cm,
 * with cuBLAS's semantics: C (m, n) = alpha op(A) op(B) + beta C; the
 * compute_bf16 switch (fm_cuda_set_compute_bf16, which also switches
 * attention.cu to its tensor-core kernels) and the pinned GEMM plans
 * (fm_cuda_gemm_plans, fm_cuda_gemm_plans_text) for logs and checkpoints.
 *
 * Two precisions, as the CPU backend (src/tensor/cpu/bf16_mode.c):
 *   fp32 (default): fp32 operands, fp32 compute, fp32 output;
 *   bf16 (set_compute_bf16(1)): both operands rounded to bf16 (nearest even,
 *     fm_f32_to_bf16) by a packing kernel into two grow-once device buffers,
 *     then a bf16 x bf16 GEMM with fp32 accumulation and fp32 output (the
 *     tensor-core path). Outputs, beta C and everything outside the GEMM stay
 *     fp32, as on the CPU. The CPU rounds the same operands of the same
 *     products (matmul's inp, w, dout; xent's x, w, dlogits), so the two
 *     backends compute the same mathematical products of the same bf16
 *     values and differ only in summation order.
 *
 * Device: cuBLASLt. A plan per (precision, transposes, m, n, k, leading
 * dimensions): the descriptors and the algorithm are chosen once, at the
 * first call with that shape, by cuBLASLt's heuristic, and pinned; every later
 * call uses the same algorithm and the same fixed workspace, so results are
 * the same bits run to run. Split-K reductions "in place" in the output
 * (which may use atomics) are excluded. The plans are kept (at most
 * FM__GEMM_PLANS) and listed by fm_cuda_gemm_plans for the run log and the
 * checkpoint: gemm_plans_record is the text a checkpoint stores (a device
 * line: name, CUDA runtime and cuBLASLt versions, then one line per plan),
 * and gemm_plans_pin, at a resume, makes the recorded shapes' plans with the
 * recorded algorithms (cublasLtMatmulAlgoInit + the recorded configuration,
 * checked by cublasLtMatmulAlgoCheck), so a resumed run computes with the
 * algorithms the run before it used even where the heuristic would now choose
 * another; another device or toolkit, or an algorithm this cuBLASLt does not
 * offer or accept, is reported per shape with what was chosen instead.
 * Under the emulator (FM_SIMT) the same wrapper packs the bf16 operands with
 * the same kernel and computes the same column-major product on the host
 * (fp32 sums, k increasing), so every call's layouts, transposes and leading
 * dimensions are tested against the CPU op (tests/kernels/emu); its plans
 * carry fake algorithm ids (fm__emu_heuristic) so that recording and
 * re-pinning them is tested too. The bias (fwd) is a kernel
 * after the GEMM, as on the CPU; dbias uses fixed-grid column partials (no
 * atomics). The CPU op sums in OpenBLAS's order: the results agree within
 * the stated GEMM tolerance, not bitwise. */
#include "cuda_common.cuh"

#include "../elementwise.h"

#ifndef FM_SIMT
#include <cublasLt.h>
#include <dlfcn.h>
#endif

/* ---- precision ------------------------------------------------------------ */
static int fm__bf16_on = 0;

/* attention.cu's switch: its tensor-core (flash) kernels in bf16 compute. */
extern "C" void FM_CUDA_OP(attention_set_bf16)(int on);

extern "C" void FM_CUDA_OP(set_compute_bf16)(int on) {
  fm__bf16_on = on != 0;
  FM_CUDA_OP(attention_set_bf16)(fm__bf16_on);
}
extern "C" int fm__cuda_compute_bf16(void) { return fm__bf16_on; }

/* dst (rows, cols) packed column-major (ld = rows) = bf16(src (rows, cols), ld). */
static __global__ void fm__pack_bf16_kernel(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  FM__CUDA_FOR_EACH(i, rows * cols) dst[i] = fm_f32_to_bf16(src[(i % rows) + (i / rows) * ld]);
}

/* Two grow-once operand buffers (A, B): sized by the largest operand asked
 * for, kept, so after the first step nothing is allocated (STYLE rule 8). */
static uint16_t *fm__bf16_buf[2];
static int64_t fm__bf16_cap[2];

static const uint16_t *fm__pack_bf16(int slot, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t n = rows * cols;
  if (n > fm__bf16_cap[slot]) {
    fm__dev_free(fm__bf16_buf[slot]);
    fm__bf16_buf[slot] = (uint16_t *)fm__dev_alloc(n * (int64_t)sizeof(uint16_t));
    fm__bf16_cap[slot] = n;
  }
  FM_LAUNCH(fm__pack_bf16_kernel, fm__cuda_grid(n), FM__CUDA_BLOCK, 0, fm__bf16_buf[slot], src, rows, cols, ld);
  return fm__bf16_buf[slot];
}

/* ---- the plans ----------------------------------------------------------------- */
#define FM__GEMM_PLANS    256
#define FM__GEMM_WS_BYTES ((int64_t)32 << 20) /* one fixed workspace: same algorithm inputs every call */

#ifndef FM_SIMT
/* cuBLASLt is opened on first use, not linked: loading libcublasLt runs its
 * initialisers, which touch about 100 MB (25k page faults, 0.4 CPU-s on a
 * CI VM) in every process, the CPU-only runs and each MPI rank included. The
 * table holds every cuBLASLt function this file calls, typed from the header. */
#define FM__LT_FUNCS(X)                   \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusString)              \
  X(cublasLtCreate)                       \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoCheck)              \
  X(cublasLtMatmulAlgoConfigGetAttribute) \
  X(cublasLtMatmulAlgoConfigSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulAlgoGetIds)             \
  X(cublasLtMatmulAlgoInit)               \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)

static struct {
  void *so;
#define FM__LT_PTR(f) decltype(&::f) f;
  FM__LT_FUNCS(FM__LT_PTR)
#undef FM__LT_PTR
} fm__lt_fn;

#define FM__STR2(x) #x
#define FM__STR(x)  FM__STR2(x)
/* The soname this build's header belongs to; FMHPC_CUBLASLT_PATH (the file
 * the build found) is tried after it, for an install without the toolkit's
 * lib64 on the loader's path. */
static const char fm__lt_soname[] = "libcublasLt.so." FM__STR(CUBLAS_VER_MAJOR);

extern "C" int fm_cuda_blaslt_load(const char *path, char *why, int n) {
  if (fm__lt_fn.so && !path) return FM_OK;
  const char *names[2] = {path ? path : fm__lt_soname, NULL};
#ifdef FMHPC_CUBLASLT_PATH
  if (!path) names[1] = FMHPC_CUBLASLT_PATH;
#endif
  void *so = NULL;
  const char *got = NULL; /* the name that opened */
  char err[512] = "";
  for (int i = 0; i < 2 && names[i] && !so; i++) {
    so = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (so)
      got = names[i];
    else if (i == 0)
      snprintf(err, sizeof err, "%s", dlerror());
  }
  if (!so) {
    snprintf(why, (size_t)n,
             "cannot load cuBLASLt (%s), which the CUDA backend's GEMMs need\n"
             "hint: put the CUDA toolkit's library directory on LD_LIBRARY_PATH (module load cuda), "
             "or set &train backend = 'cpu'",
             err);
    return FM_ENODEV;
  }
  decltype(fm__lt_fn) t;
  t.so = so;
  const char *missing = NULL;
#define FM__LT_SYM(f) \
  if (!missing && !(*(void **)&t.f = dlsym(so, #f))) missing = #f;
  FM__LT_FUNCS(FM__LT_SYM)
#undef FM__LT_SYM
  if (missing) {
    snprintf(why, (size_t)n,
             "%s has no %s: it is not the cuBLASLt %d this build was compiled against\n"
             "hint: put the CUDA %d toolkit's library directory first on LD_LIBRARY_PATH",
             got, missing, CUBLAS_VER_MAJOR, CUBLAS_VER_MAJOR);
    dlclose(so);
    return FM_ENODEV;
  }
  if (fm__lt_fn.so)
    dlclose(so); /* a path tried after the table was loaded: checked, not kept */
  else
    fm__lt_fn = t;
  return FM_OK;
}

extern "C" int64_t fm_cuda_blaslt_version(void) { return fm__lt_fn.so ? (int64_t)fm__lt_fn.cublasLtGetVersion() : -1; }

/* The table, loaded here when fm_backend_cuda has not (the kernel tests call
 * the ops directly): a failure ends the run with the loader's message. */
static void fm__lt_need(void) {
  if (fm__lt_fn.so) return;
  char why[1024];
  if (fm_cuda_blaslt_load(NULL, why, (int)sizeof why) != FM_OK) fm_abort_one(1, "%s", why);
}

#define FM__CHECK_LT(fn, ...)                                                 \
  do {                                                                        \
    cublasStatus_t fm__s = fm__lt_fn.fn(__VA_ARGS__);                         \
    if (fm__s != CUBLAS_STATUS_SUCCESS)                                       \
      fm__cuda_fail("cuBLASLt", #fn "(" #__VA_ARGS__ ")", __FILE__, __LINE__, \
                    fm__lt_fn.cublasLtGetStatusString(fm__s));                \
  } while (0)
#endif

typedef struct FmGemmPlan {
  FmGemmPlanInfo info; /* what fm_cuda_gemm_plans reports */
#ifndef FM_SIMT
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
#endif
} FmGemmPlan;

static FmGemmPlan fm__plans[FM__GEMM_PLANS];
static int fm__nplans;

static FmGemmPlan *fm__gemm_find(int bf16, int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                 int64_t ldc) {
  for (int i = 0; i < fm__nplans; i++) {
    FmGemmPlan *p = &fm__plans[i];
    const FmGemmPlanInfo *q = &p->info;
    if (q->bf16 == bf16 && q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k && q->lda == lda &&
        q->ldb == ldb && q->ldc == ldc)
      return p;
  }
  if (fm__nplans == FM__GEMM_PLANS)
    fm_abort_one(1, "cuBLASLt: more than %d GEMM shapes in one process (plans are kept per shape)", FM__GEMM_PLANS);
  FmGemmPlan *p = &fm__plans[fm__nplans];
  memset(p, 0, sizeof *p);
  FmGemmPlanInfo *q = &p->info;
  q->bf16 = bf16, q->ta = ta, q->tb = tb, q->m = m, q->n = n, q->k = k, q->lda = lda, q->ldb = ldb, q->ldc = ldc;
  q->algo_id = -1, q->tile = -1, q->stages = -1, q->splitk = -1, q->reduction = -1, q->swizzle = -1, q->custom = -1;
  q->workspace_fixed = FM__GEMM_WS_BYTES;
  return p; /* the caller fills it in and counts it */
}

/* A plan's shape and its algorithm as the log and the checkpoint spell them
 * (fm_cuda_gemm_plans_text; fm__plan_parse reads them back). */
static void fm__plan_shape(const FmGemmPlanInfo *q, char *buf, size_t n) {
  snprintf(buf, n, "%s %c%c m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld", q->bf16 ? "bf16" : "fp32",
           q->ta ? 'T' : 'N', q->tb ? 'T' : 'N', (long long)q->m, (long long)q->n, (long long)q->k, (long long)q->lda,
           (long long)q->ldb, (long long)q->ldc);
}
static void fm__plan_algo(const FmGemmPlanInfo *q, char *buf, size_t n) {
  snprintf(buf, n, "algo=%lld tile=%lld stages=%lld splitk=%lld reduction=%lld swizzle=%lld custom=%lld",
           (long long)q->algo_id, (long long)q->tile, (long long)q->stages, (long long)q->splitk,
           (long long)q->reduction, (long long)q->swizzle, (long long)q->custom);
}
static int fm__plan_same_algo(const FmGemmPlanInfo *a, const FmGemmPlanInfo *b) {
  return a->algo_id == b->algo_id && a->tile == b->tile && a->stages == b->stages && a->splitk == b->splitk &&
         a->reduction == b->reduction && a->swizzle == b->swizzle && a->custom == b->custom;
}

#ifdef FM_SIMT
/* The emulated cuBLASLt has no algorithms; so that recording and re-pinning
 * them is exercised, it offers FM__EMU_ALGOS fake ids and its "heuristic"
 * picks one (and a tile and a stage count) from a hash of the shape, shifted
 * by FMHPC_EMU_GEMM_HEURISTIC=N (tests: a heuristic that now chooses
 * otherwise, as another cuBLASLt version might). Every choice computes the
 * same host GEMM. */
#define FM__EMU_ALGOS 24
static void fm__emu_heuristic(FmGemmPlanInfo *q) {
  const char *e = getenv("FMHPC_EMU_GEMM_HEURISTIC");
  uint64_t h = 1469598103934665603ull + (uint64_t)(e ? atoll(e) : 0);
  const int64_t v[9] = {q->bf16, q->ta, q->tb, q->m, q->n, q->k, q->lda, q->ldb, q->ldc};
  for (int i = 0; i < 9; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
  q->algo_id = (int64_t)(h % FM__EMU_ALGOS);
  q->tile = (int64_t)((h >> 8) % 16), q->stages = (int64_t)((h >> 16) % 8);
  q->splitk = 1, q->reduction = 0, q->swizzle = 0, q->custom = 0, q->workspace = 0;
}
/* Pin w's algorithm on p if the emulated library offers it. */
static const char *fm__emu_pin(FmGemmPlanInfo *q, const FmGemmPlanInfo *w) {
  if (w->algo_id < 0 || w->algo_id >= FM__EMU_ALGOS) return "its algorithm id is not offered by this cuBLASLt";
  if (w->tile < 0 || w->tile >= 16 || w->stages < 0 || w->stages >= 8 || w->splitk != 1 || w->reduction != 0)
    return "cuBLASLt rejects its configuration for this shape";
  q->algo_id = w->algo_id, q->tile = w->tile, q->stages = w->stages, q->splitk = w->splitk;
  q->reduction = w->reduction, q->swizzle = w->swizzle, q->custom = w->custom, q->workspace = 0;
  return NULL;
}
#endif

#ifdef FM_SIMT
/* The host GEMM: fp32 or bf16 operands (already rounded and packed by the
 * kernel above), fp32 sums with k increasing, then alpha and beta C. */
template <typename T>
static float fm__ld(const T *x, int64_t i);
template <>
float fm__ld<float>(const float *x, int64_t i) {
  return x[i];
}
template <>
float fm__ld<uint16_t>(const uint16_t *x, int64_t i) {
  return fm_bf16_to_f32(x[i]);
}

template <typename T>
static void fm__host_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const T *A, int64_t lda,
                          const T *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p++) {
        const float a = ta ? fm__ld(A, p + i * lda) : fm__ld(A, i + p * lda);
        const float b = tb ? fm__ld(B, j + p * ldb) : fm__ld(B, p + j * ldb);
        acc = acc + a * b;
      }
      float *c = &C[i + j * ldc];
      *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c; /* beta 0: C may hold NaN */
    }
}

extern "C" void fm__gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const int bf16 = fm__bf16_on;
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  /* as on the device: the plan holds the leading dimensions cuBLASLt gets */
  FmGemmPlan *p = fm__gemm_find(bf16, ta, tb, m, n, k, bf16 ? ar : lda, bf16 ? br : ldb, ldc);
  if (p == &fm__plans[fm__nplans]) {
    fm__emu_heuristic(&p->info);
    fm__nplans++;
  }
  p->info.calls++;
  if (!bf16) {
    fm__host_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const uint16_t *a = fm__pack_bf16(0, A, ar, ac, lda), *b = fm__pack_bf16(1, B, br, bc, ldb);
  fm__host_gemm(ta, tb, m, n, k, alpha, a, ar, b, br, beta, C, ldc);
}
#else
static cublasLtHandle_t fm__lt;
static void *fm__lt_ws;

/* One algorithm attribute (they are 16 or 32 bits, unsigned or small
 * non-negative): its size asked first, as cuBLASLt wants the exact size. */
static int64_t fm__algo_attr(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint64_t v = 0;
  size_t size = 0;
  if (fm__lt_fn.cublasLtMatmulAlgoConfigGetAttribute(algo, attr, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS ||
      size == 0 || size > sizeof v)
    return -1;
  if (fm__lt_fn.cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, size, &size) != CUBLAS_STATUS_SUCCESS) return -1;
  return (int64_t)v; /* little-endian: the low bytes hold the value */
}

/* Set one algorithm attribute, at the size cuBLASLt reports for it. */
static int fm__algo_set(cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, int64_t value) {
  size_t size = 0;
  if (value < 0) return 1; /* not readable when recorded: left at its default */
  if (fm__lt_fn.cublasLtMatmulAlgoConfigGetAttribute(algo, attr, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS ||
      size == 0 || size > sizeof(uint64_t))
    return 0;
  const uint64_t v = (uint64_t)value; /* little-endian: the low bytes */
  return fm__lt_fn.cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, size) == CUBLAS_STATUS_SUCCESS;
}

/* The info of p's algorithm, as cuBLASLt reports it. */
static void fm__algo_info(FmGemmPlan *p, size_t workspace) {
  FmGemmPlanInfo *q = &p->info;
  q->algo_id = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_ID);
  q->tile = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  q->stages = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  q->splitk = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  q->reduction = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  q->swizzle = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  q->custom = fm__algo_attr(&p->algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  q->workspace = (int64_t)workspace;
}

/* The descriptors of a new plan (p from fm__gemm_find, its info filled). */
static void fm__lt_describe(FmGemmPlan *p) {
  if (!fm__lt) {
    fm__lt_need();
    FM__CHECK_LT(cublasLtCreate, &fm__lt);
    fm__lt_ws = fm__dev_alloc_for(FM__GEMM_WS_BYTES, FM_MEM_GEMM_WS);
  }
  const FmGemmPlanInfo *q = &p->info;
  const int64_t m = q->m, n = q->n, k = q->k;
  const cudaDataType_t in = q->bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasOperation_t opa = q->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = q->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  FM__CHECK_LT(cublasLtMatmulDescCreate, &p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  FM__CHECK_LT(cublasLtMatmulDescSetAttribute, p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  FM__CHECK_LT(cublasLtMatmulDescSetAttribute, p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  FM__CHECK_LT(cublasLtMatrixLayoutCreate, &p->a, in, (uint64_t)(q->ta ? k : m), (uint64_t)(q->ta ? m : k), q->lda);
  FM__CHECK_LT(cublasLtMatrixLayoutCreate, &p->b, in, (uint64_t)(q->tb ? n : k), (uint64_t)(q->tb ? k : n), q->ldb);
  FM__CHECK_LT(cublasLtMatrixLayoutCreate, &p->c, CUDA_R_32F, (uint64_t)m, (uint64_t)n, q->ldc);
}

/* cuBLASLt's heuristic: its best algorithm within the fixed workspace, with
 * no in-place split-K reduction (it may use atomics). */
static void fm__lt_heuristic(FmGemmPlan *p) {
  cublasLtMatmulPreference_t pref;
  FM__CHECK_LT(cublasLtMatmulPreferenceCreate, &pref);
  const uint64_t ws = (uint64_t)FM__GEMM_WS_BYTES;
  FM__CHECK_LT(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
  FM__CHECK_LT(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
               sizeof schemes);
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  FM__CHECK_LT(cublasLtMatmulAlgoGetHeuristic, fm__lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &best, &found);
  FM__CHECK_LT(cublasLtMatmulPreferenceDestroy, pref);
  const FmGemmPlanInfo *q = &p->info;
  if (found < 1)
    fm_abort_one(1, "cuBLASLt: no algorithm for %s GEMM %c%c m=%lld n=%lld k=%lld", q->bf16 ? "bf16" : "fp32",
                 q->ta ? 'T' : 'N', q->tb ? 'T' : 'N', (long long)q->m, (long long)q->n, (long long)q->k);
  p->algo = best.algo;
  fm__algo_info(p, best.workspaceSize);
}

/* Pin w's algorithm on p (its descriptors made): NULL, or why not. */
static const char *fm__lt_pin(FmGemmPlan *p, const FmGemmPlanInfo *w) {
  const cudaDataType_t in = p->info.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  int ids[1024], nids = 0, offered = 0;
  if (fm__lt_fn.cublasLtMatmulAlgoGetIds(fm__lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, CUDA_R_32F, CUDA_R_32F, 1024,
                                         ids, &nids) != CUBLAS_STATUS_SUCCESS)
    return "cuBLASLt cannot list its algorithms (cublasLtMatmulAlgoGetIds)";
  for (int i = 0; i < nids && i < 1024; i++) offered |= ids[i] == w->algo_id;
  if (!offered) return "its algorithm id is not offered by this cuBLASLt";
  if (w->reduction == (int64_t)CUBLASLT_REDUCTION_SCHEME_INPLACE) return "its split-K reduction is in place (atomics)";
  cublasLtMatmulAlgo_t algo;
  if (fm__lt_fn.cublasLtMatmulAlgoInit(fm__lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, in, in, CUDA_R_32F, CUDA_R_32F,
                                       (int)w->algo_id, &algo) != CUBLAS_STATUS_SUCCESS)
    return "cuBLASLt cannot initialise its algorithm id (cublasLtMatmulAlgoInit)";
  if (!fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, w->tile) ||
      !fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, w->stages) ||
      !fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, w->splitk) ||
      !fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, w->reduction) ||
      !fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, w->swizzle) ||
      !fm__algo_set(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, w->custom))
    return "cuBLASLt rejects its configuration (tile, stages, split-K, swizzle or custom option)";
  cublasLtMatmulHeuristicResult_t check;
  memset(&check, 0, sizeof check);
  if (fm__lt_fn.cublasLtMatmulAlgoCheck(fm__lt, p->op, p->a, p->b, p->c, p->c, &algo, &check) != CUBLAS_STATUS_SUCCESS)
    return "cuBLASLt rejects it for this shape (cublasLtMatmulAlgoCheck)";
  if (check.workspaceSize > (size_t)FM__GEMM_WS_BYTES) return "it needs more than the fixed workspace";
  p->algo = algo;
  fm__algo_info(p, check.workspaceSize);
  return NULL;
}

static const FmGemmPlan *fm__gemm_plan(int bf16, int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                                       int64_t ldb, int64_t ldc) {
  FmGemmPlan *p = fm__gemm_find(bf16, ta, tb, m, n, k, lda, ldb, ldc);
  if (p != &fm__plans[fm__nplans]) return p;
  fm__lt_describe(p);
  fm__lt_heuristic(p);
  fm__nplans++;
  return p;
}

extern "C" void fm__gemm_cm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const int bf16 = fm__bf16_on;
  const void *a = A, *b = B;
  if (bf16) {
    const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    a = fm__pack_bf16(0, A, ar, ac, lda);
    b = fm__pack_bf16(1, B, br, bc, ldb);
    lda = ar;
    ldb = br;
  }
  const FmGemmPlan *p = fm__gemm_plan(bf16, ta, tb, m, n, k, lda, ldb, ldc);
  fm__plans[p - fm__plans].info.calls++;
  FM__CHECK_LT(cublasLtMatmul, fm__lt, p->op, &alpha, a, p->a, b, p->b, &beta, C, p->c, C, p->c, &p->algo, fm__lt_ws,
               (size_t)FM__GEMM_WS_BYTES, fm__cuda_stream());
}
#endif

extern "C" int FM_CUDA_OP(gemm_plans)(FmGemmPlanInfo *out, int max) {
  for (int i = 0; out && i < fm__nplans && i < max; i++) out[i] = fm__plans[i].info;
  return fm__nplans;
}

/* One plan line, "gemm I: SHAPE ALGO workspace=USED/FIXED\n". */
static int fm__plan_line(char *line, size_t n, int i, const FmGemmPlanInfo *q) {
  char shape[160], algo[192];
  fm__plan_shape(q, shape, sizeof shape);
  fm__plan_algo(q, algo, sizeof algo);
  return snprintf(line, n, "gemm %d: %s %s workspace=%lld/%lld\n", i, shape, algo, (long long)q->workspace,
                  (long long)q->workspace_fixed);
}

/* What chose the plans: "device: NAME (sm_XY), CUDA runtime R, cuBLASLt L". */
static void fm__plans_device(char *buf, size_t n) {
#ifdef FM_SIMT
  snprintf(buf, n, "device: SIMT emulator (host GEMM), CUDA runtime emulated, cuBLASLt emulated (%d fake algorithms)",
           FM__EMU_ALGOS);
#else
  int dev = 0, rt = 0;
  cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(prop.name, sizeof prop.name, "unknown");
  }
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = CUDART_VERSION;
  snprintf(buf, n, "device: %s (sm_%d%d), CUDA runtime %d, cuBLASLt %lld", prop.name, prop.major, prop.minor, rt,
           (long long)fm_cuda_blaslt_version());
#endif
}

/* Whole lines into buf (cap bytes) after `len` bytes already counted; the
 * length the full text needs. */
static int64_t fm__text_add(char *buf, int64_t cap, int64_t len, int64_t *wrote, const char *line, int w) {
  if (buf && *wrote == len && len + w < cap) {
    memcpy(buf + len, line, (size_t)w);
    *wrote += w;
  }
  return len + w;
}

extern "C" int64_t FM_CUDA_OP(gemm_plans_text)(char *buf, int64_t cap) {
  int64_t len = 0, wrote = 0;
  for (int i = 0; i < fm__nplans; i++) {
    char line[400];
    len = fm__text_add(buf, cap, len, &wrote, line, fm__plan_line(line, sizeof line, i, &fm__plans[i].info));
  }
  if (buf && cap > 0) buf[wrote] = '\0';
  return len;
}

extern "C" int64_t FM_CUDA_OP(gemm_plans_record)(char *buf, int64_t cap) {
  if (fm__nplans == 0) {
    if (buf && cap > 0) buf[0] = '\0';
    return 0;
  }
  char dev[400];
  fm__plans_device(dev, sizeof dev - 1);
  const int w = (int)strlen(dev);
  dev[w] = '\n', dev[w + 1] = '\0';
  int64_t wrote = 0;
  const int64_t len = fm__text_add(buf, cap, 0, &wrote, dev, w + 1);
  if (buf && cap > 0) buf[wrote] = '\0';
  if (wrote != len) return len + FM_CUDA_OP(gemm_plans_text)(NULL, 0);
  return len + FM_CUDA_OP(gemm_plans_text)(buf ? buf + len : NULL, buf ? cap - len : 0);
}

/* A plan line read back: its shape and algorithm (1), or 0 when it is not
 * one (a checkpoint is input: every field is checked). */
static int fm__plan_parse(const char *line, FmGemmPlanInfo *q) {
  char prec[8] = "", ta = 0, tb = 0;
  int idx = 0;
  long long v[13];
  const int got = sscanf(line,
                         "gemm %d: %7s %c%c m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld algo=%lld tile=%lld "
                         "stages=%lld splitk=%lld reduction=%lld swizzle=%lld custom=%lld",
                         &idx, prec, &ta, &tb, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                         &v[10], &v[11], &v[12]);
  if (got != 17 || (strcmp(prec, "bf16") != 0 && strcmp(prec, "fp32") != 0) || (ta != 'N' && ta != 'T') ||
      (tb != 'N' && tb != 'T'))
    return 0;
  memset(q, 0, sizeof *q);
  q->bf16 = prec[0] == 'b', q->ta = ta == 'T', q->tb = tb == 'T';
  q->m = v[0], q->n = v[1], q->k = v[2], q->lda = v[3], q->ldb = v[4], q->ldc = v[5];
  q->algo_id = v[6], q->tile = v[7], q->stages = v[8], q->splitk = v[9], q->reduction = v[10], q->swizzle = v[11];
  q->custom = v[12];
  const int64_t ar = q->ta ? q->k : q->m, br = q->tb ? q->n : q->k;
  return q->m > 0 && q->n > 0 && q->k > 0 && q->lda >= ar && q->ldb >= br && q->ldc >= q->m &&
         q->m < ((int64_t)1 << 40) && q->n < ((int64_t)1 << 40) && q->k < ((int64_t)1 << 40) &&
         q->lda < ((int64_t)1 << 40) && q->ldb < ((int64_t)1 << 40) && q->ldc < ((int64_t)1 << 40);
}

/* Appends one warning line (whole, or not at all) to report. */
static void fm__report(char *report, int64_t cap, const char *msg) {
  if (!report || cap <= 0) return;
  const size_t have = strlen(report), w = strlen(msg);
  if ((int64_t)(have + w + 1) < cap) {
    memcpy(report + have, msg, w);
    report[have + w] = '\n';
    report[have + w + 1] = '\0';
  }
}

extern "C" int FM_CUDA_OP(gemm_plans_pin)(const char *recorded, char *report, int64_t cap) {
  if (report && cap > 0) report[0] = '\0';
  if (!recorded || !recorded[0]) return 0;
  char dev[400], msg[1600];
  fm__plans_device(dev, sizeof dev);
  int same_device = 0, pinned = 0, lineno = 0;
  for (const char *s = recorded; *s;) {
    const char *e = strchr(s, '\n');
    const size_t n = e ? (size_t)(e - s) : strlen(s);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), s);
    s += n + (e ? 1 : 0);
    lineno++;
    if (lineno == 1 && strncmp(line, "device: ", 8) == 0) {
      same_device = strcmp(line, dev) == 0;
      if (!same_device) {
        snprintf(msg, sizeof msg,
                 "the checkpoint's GEMM plans were chosen on another device or toolkit (%s; this run: %s): "
                 "cuBLASLt's heuristic chooses again, and a plan that differs is named below",
                 line + 8, dev + 8);
        fm__report(report, cap, msg);
      }
      continue;
    }
    FmGemmPlanInfo w;
    if (!fm__plan_parse(line, &w)) {
      snprintf(msg, sizeof msg, "the checkpoint's GEMM plans, line %d: not a plan line ('%.120s'): skipped", lineno,
               line);
      fm__report(report, cap, msg);
      continue;
    }
    if (fm__nplans == FM__GEMM_PLANS) {
      snprintf(msg, sizeof msg, "the checkpoint's GEMM plans: more than %d shapes; the rest are not pinned",
               FM__GEMM_PLANS);
      fm__report(report, cap, msg);
      break;
    }
    char shape[160], want[192], got[192];
    fm__plan_shape(&w, shape, sizeof shape);
    fm__plan_algo(&w, want, sizeof want);
    FmGemmPlan *p = fm__gemm_find(w.bf16, w.ta, w.tb, w.m, w.n, w.k, w.lda, w.ldb, w.ldc);
    const char *why = NULL;
    if (p != &fm__plans[fm__nplans]) { /* already chosen in this process */
      if (!fm__plan_same_algo(&p->info, &w)) why = "this run had already chosen its plan";
    } else {
#ifdef FM_SIMT
      why = same_device ? fm__emu_pin(&p->info, &w) : "";
      if (why) fm__emu_heuristic(&p->info);
#else
      fm__lt_describe(p);
      why = same_device ? fm__lt_pin(p, &w) : "";
      if (why) fm__lt_heuristic(p);
#endif
      fm__nplans++;
    }
    if (!why) {
      pinned++;
      continue;
    }
    fm__plan_algo(&p->info, got, sizeof got);
    if (!why[0] && fm__plan_same_algo(&p->info, &w)) continue; /* another device, the same choice */
    snprintf(msg, sizeof msg, "GEMM %s: the checkpoint's plan (%s) is not used: %s; chose %s instead", shape, want,
             why[0] ? why : "another device or toolkit", got);
    fm__report(report, cap, msg);
  }
  return pinned;
}

/* ---- bias and its gradient --------------------------------------------------- */
static __global__ void fm__bias_add_kernel(float *out, const float *bias, int64_t N, int64_t OC) {
  FM__CUDA_FOR_EACH(i, N * OC) out[i] = fm_addf(out[i], bias[i % OC]);
}

#define FM__CS_COLS   32
#define FM__CS_GROUPS 16
/* dbias[c] += sum_n d[n][c]: thread (c, g) sums rows g, g + 16, ... in
 * double; thread (c, 0) adds the old value and the 16 partials in order. */
static __global__ void fm__colsum_kernel(float *dbias, const float *d, int64_t N, int64_t OC) {
  __shared__ double part[FM__CS_GROUPS][FM__CS_COLS];
  const int tc = threadIdx.x, g = threadIdx.y;
  const int64_t c = (int64_t)blockIdx.x * FM__CS_COLS + tc;
  double a = 0.0;
  if (c < OC)
    for (int64_t n = g; n < N; n += FM__CS_GROUPS) a = fm__dadd(a, (double)d[n * OC + c]);
  part[g][tc] = a;
  __syncthreads();
  if (g == 0 && c < OC) {
    double s = (double)dbias[c];
    for (int k = 0; k < FM__CS_GROUPS; k++) s = fm__dadd(s, part[k][tc]);
    dbias[c] = (float)s;
  }
}

/* ---- the ops: row-major (N, C) tensors are column-major (C, N) ---------------- */
/* out (N, OC) = inp (N, C) @ w^T + bias: column-major out (OC, N) = w^T
 * (w stored (OC, C): column-major (C, OC), transposed) times inp (C, N). */
extern "C" void FM_CUDA_OP(matmul_fwd)(float *out, const float *inp, const float *w, const float *bias, int64_t N,
                                       int64_t C, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  fm__gemm_cm(1, 0, OC, N, C, 1.0f, w, C, inp, C, 0.0f, out, OC);
  if (bias) FM_LAUNCH(fm__bias_add_kernel, fm__cuda_grid(N * OC), FM__CUDA_BLOCK, 0, out, bias, N, OC);
}

extern "C" void FM_CUDA_OP(matmul_bwd)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                       const float *w, int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return;
  /* dinp (N, C) += dout (N, OC) @ w (OC, C): column-major dinp (C, N) += w (C, OC) dout (OC, N) */
  if (dinp) fm__gemm_cm(0, 0, C, N, OC, 1.0f, w, C, dout, OC, 1.0f, dinp, C);
  /* dw (OC, C) += dout^T @ inp: column-major dw (C, OC) += inp (C, N) dout^T (N, OC) */
  if (dw) fm__gemm_cm(0, 1, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
  if (dbias)
    FM_LAUNCH(fm__colsum_kernel, (unsigned)((OC + FM__CS_COLS - 1) / FM__CS_COLS), dim3(FM__CS_COLS, FM__CS_GROUPS), 0,
              dbias, dout, N, OC);
}
