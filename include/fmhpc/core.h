/* core.h: fmhpc's lowest layer. The one status table (fm_strerror), logging
 * (rank 0 talks, fm_log0), checked-call macros for MPI/HDF5/CUDA/NCCL, the
 * abort-all vs abort-one policy, and small helpers (string, files, the
 * monotonic timer, mkdir -p, the message-then-hint printer) every module
 * uses. Nothing here knows about decks, models or tensors. */
#ifndef FMHPC_CORE_H
#define FMHPC_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#define FM_NORETURN [[noreturn]]
#else
#define FM_NORETURN _Noreturn
#endif

#define FM_VERSION_STRING "0.1.0"

/* The one status table: 0 is success, every failure a negative FM_E*. */
#define FM_STATUS_TABLE(XX)                                             \
  XX(EDECK, "invalid input deck")                                       \
  XX(EIO, "I/O error")                                                  \
  XX(ENOMEM, "out of memory")                                           \
  XX(EINVAL, "invalid argument")                                        \
  XX(ERANGE, "value out of range")                                      \
  XX(EMPI, "MPI error")                                                 \
  XX(EHDF5, "HDF5 error")                                               \
  XX(ECUDA, "CUDA error")                                               \
  XX(ENCCL, "NCCL error")                                               \
  XX(ENODEV, "no accelerator device")                                   \
  XX(EUNSUPPORTED, "not supported in this build")                       \
  XX(EDATA, "invalid data file")                                        \
  XX(ECKPT, "invalid checkpoint")                                       \
  XX(EFORMAT, "invalid file format")                                   \
  XX(ENUMERIC, "non-finite loss or gradient")

enum {
  FM__STATUS_OK = 0,
#define FM__XX(name, msg) FM__STATUS_##name,
  FM_STATUS_TABLE(FM__XX)
#undef FM__XX
  FM__STATUS_COUNT
};
enum {
  FM_OK = 0,
#define FM__XX(name, msg) FM_##name = -FM__STATUS_##name,
  FM_STATUS_TABLE(FM__XX)
#undef FM__XX
};

const char *fm_strerror(int status);
const char *fm_status_name(int status); /* "FM_EDECK" */

/* Element types shared by tensors, collectives and files. */
typedef enum { FM_DT_U8, FM_DT_I32, FM_DT_U32, FM_DT_I64, FM_DT_U64, FM_DT_F32, FM_DT_F64, FM_DT_BF16 } FmDType;
size_t fm_dtype_size(FmDType t);
const char *fm_dtype_name(FmDType t);

/* ---- logging ---------------------------------------------------------- */
/* Rank and size are set once by the runtime (fm_log_set_rank); before that
 * every process is rank 0 of 1, which is right for tools and unit tests. */
void fm_log_set_rank(int rank, int size);
int fm_log_rank(void);
void fm_log_set_stream(FILE *out); /* default stdout */
void fm_log_set_quiet(int quiet);  /* suppress fm_log0 (tests) */

void fm_log0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fm_warn0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Error from any rank, to stderr, prefixed with the rank. */
void fm_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fm_verr(const char *fmt, va_list ap);

/* ---- abort policy ----------------------------------------------------- */
/* An error only this rank sees: print and end the whole job (MPI_Abort when
 * MPI is up, exit otherwise). The runtime installs the MPI hook. */
typedef void (*FmAbortHook)(int code);
void fm_set_abort_hook(FmAbortHook hook);
FM_NORETURN void fm_abort_one(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Report a failed library call with rank, file:line and call text. */
void fm__report_call(const char *lib, const char *call, const char *file, int line, const char *what);

/* Checked calls that end the job at once (used where no recovery exists). */
#define FM_CHECK(expr)                                                             \
  do {                                                                             \
    int fm__rc = (expr);                                                           \
    if (fm__rc != 0) {                                                             \
      fm__report_call("fmhpc", #expr, __FILE__, __LINE__, fm_strerror(fm__rc));    \
      fm_abort_one(1, "unrecoverable error");                                      \
    }                                                                              \
  } while (0)

/* Library checks. Each expands only where the library's header is included;
 * a failure is reported with rank, file:line and the call, then the job ends
 * (an error one rank sees alone must not leave the others hanging). */
#define FM_CHECK_MPI(call)                                                          \
  do {                                                                              \
    int fm__e = (call);                                                             \
    if (fm__e != MPI_SUCCESS) {                                                     \
      char fm__s[MPI_MAX_ERROR_STRING];                                             \
      int fm__l = 0;                                                                \
      MPI_Error_string(fm__e, fm__s, &fm__l);                                       \
      fm__report_call("MPI", #call, __FILE__, __LINE__, fm__s);                     \
      fm_abort_one(1, "MPI call failed");                                           \
    }                                                                               \
  } while (0)
#define FM_CHECK_H5(call)                                                           \
  do {                                                                              \
    if ((int64_t)(call) < 0) {                                                      \
      fm__report_call("HDF5", #call, __FILE__, __LINE__, "returned a negative id/status"); \
      fm_abort_one(1, "HDF5 call failed");                                          \
    }                                                                               \
  } while (0)
#define FM_CHECK_CUDA(call)                                                         \
  do {                                                                              \
    cudaError_t fm__e = (call);                                                     \
    if (fm__e != cudaSuccess) {                                                     \
      fm__report_call("CUDA", #call, __FILE__, __LINE__, cudaGetErrorString(fm__e)); \
      fm_abort_one(1, "CUDA call failed");                                          \
    }                                                                               \
  } while (0)
#define FM_CHECK_NCCL(call)                                                         \
  do {                                                                              \
    ncclResult_t fm__e = (call);                                                    \
    if (fm__e != ncclSuccess) {                                                     \
      fm__report_call("NCCL", #call, __FILE__, __LINE__, ncclGetErrorString(fm__e)); \
      fm_abort_one(1, "NCCL call failed");                                          \
    }                                                                               \
  } while (0)
#define FM_CHECK_CUBLAS(call)                                                       \
  do {                                                                              \
    cublasStatus_t fm__e = (call);                                                  \
    if (fm__e != CUBLAS_STATUS_SUCCESS) {                                           \
      fm__report_call("cuBLAS", #call, __FILE__, __LINE__, cublasGetStatusString(fm__e)); \
      fm_abort_one(1, "cuBLAS call failed");                                        \
    }                                                                               \
  } while (0)

/* ---- sizes ------------------------------------------------------------ */
/* The most elements one tensor or arena may hold: 2^50 (4 PiB of fp32). A
 * sum of a few dozen such sizes, in bytes, still fits in int64, so sizes
 * below it can be added and scaled without further checks. */
#define FM_MAX_ELEMS ((int64_t)1 << 50)
/* *out = a * b; returns 0, or FM_ERANGE when the product overflows int64
 * (*out is then left alone). */
static inline int fm_mul_i64(int64_t a, int64_t b, int64_t *out) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p)) return FM_ERANGE;
  *out = p;
  return 0;
}
/* The product of n factors, each >= 1, or -1 when it exceeds FM_MAX_ELEMS. */
int64_t fm_elems(int n, const int64_t *factors);

/* ---- small helpers ---------------------------------------------------- */
void *fm_xmalloc(size_t n);          /* aborts on failure, names the size */
void *fm_xcalloc(size_t n, size_t sz);
void *fm_xrealloc(void *p, size_t n);
/* For a batch process whose working set is a few big buffers grown and reused
 * (prep): allocations below bytes come from the heap, which grows in steps of
 * bytes, keeps what is freed, and whose first `bytes` are advised as 2 MiB
 * transparent huge pages. Each first touch of a page is a fault (one per
 * 4 KiB otherwise: on a VM with shadow paging about 14 us each, measured);
 * with huge pages one per 2 MiB. Returns whether the advice was taken
 * (glibc, Linux; the kernel's THP mode "never" ignores it). Call it before
 * the buffers are allocated; it changes malloc for the whole process. */
bool fm_heap_huge(size_t bytes);
char *fm_xstrdup(const char *s);
char *fm_xstrndup(const char *s, size_t n);
/* Whole file into a NUL-terminated buffer; returns FM_EIO with errno kept. */
int fm_read_file(const char *path, char **text, size_t *len);
/* The same, refusing more than max bytes (FM_EIO, errno EFBIG) before it
 * holds them: a device such as /dev/zero named as a small text file. */
int fm_read_file_max(const char *path, char **text, size_t *len, size_t max);
/* Case-insensitive compare of ASCII names. */
int fm_strcasecmp(const char *a, const char *b);
/* Edit distance (optimal string alignment), for "did you mean" hints. */
int fm_edit_distance(const char *a, const char *b);
/* Human-readable bytes ("1.50 GiB") into buf. */
const char *fm_fmt_bytes(char *buf, size_t n, double bytes);
/* Thousands separators ("1,203,807,744") into buf. */
const char *fm_fmt_count(char *buf, size_t n, int64_t v);

/* ---- time, directories, messages -------------------------------------- */
/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for intervals only. */
double fm_now_s(void);
/* mkdir -p: path and any missing parents (mode 0777 less the umask). A parent
 * that cannot be made shows up as the last mkdir's errno. 0 or FM_EIO. */
int fm_mkdirs(const char *path);
/* mkdir -p of the directory a file path lies in (nothing when it has none). */
int fm_mkdirs_parent(const char *file_path);
/* Whether two paths name one file: the same device and inode where both
 * exist, else the same canonical path (a missing file by its directory's
 * realpath and its name), so an output about to be written is recognised. */
bool fm_same_file(const char *a, const char *b);
/* The user-facing error: "message\n" then "hint: ...\n" to err. Nothing when
 * err is NULL; no hint line when hint is NULL. */
void fm_say(FILE *err, const char *hint, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void fm_vsay(FILE *err, const char *hint, const char *fmt, va_list ap);

/* A growable string. */
typedef struct FmStr {
  char *s;
  size_t len, cap;
} FmStr;
void fm_str_init(FmStr *b);
void fm_str_cat(FmStr *b, const char *s);
void fm_str_catn(FmStr *b, const char *s, size_t n);
void fm_str_printf(FmStr *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fm_str_free(FmStr *b);

#ifdef __cplusplus
}
#endif

#endif
