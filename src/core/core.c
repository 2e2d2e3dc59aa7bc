/* core.c: the status table's strings, rank-aware logging, the abort policy and
 * small string/file helpers. No MPI here: the runtime installs an abort hook
 * (MPI_Abort) and tells logging its rank once MPI is up. */
#define _GNU_SOURCE
#include "fmhpc/core.h"

#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static const char *const status_msg[] = {
    "success",
#define FM__XX(name, msg) msg,
    FM_STATUS_TABLE(FM__XX)
#undef FM__XX
};
static const char *const status_name[] = {
    "FM_OK",
#define FM__XX(name, msg) "FM_" #name,
    FM_STATUS_TABLE(FM__XX)
#undef FM__XX
};

const char *fm_strerror(int status) {
  int i = -status;
  if (i < 0 || i >= FM__STATUS_COUNT) return "unknown status";
  return status_msg[i];
}

const char *fm_status_name(int status) {
  int i = -status;
  if (i < 0 || i >= FM__STATUS_COUNT) return "FM_E?";
  return status_name[i];
}

/* ---- logging ---------------------------------------------------------- */
static int log_rank = 0, log_size = 1, log_quiet = 0;
static FILE *log_out = NULL;

void fm_log_set_rank(int rank, int size) {
  log_rank = rank;
  log_size = size;
}
int fm_log_rank(void) { return log_rank; }
void fm_log_set_stream(FILE *out) { log_out = out; }
void fm_log_set_quiet(int quiet) { log_quiet = quiet; }

void fm_log0(const char *fmt, ...) {
  if (log_rank != 0 || log_quiet) return;
  FILE *out = log_out ? log_out : stdout;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fputc('\n', out);
  fflush(out);
}

/* A warning or an error goes to stderr in one fprintf: prefix, message and
 * newline. stderr is unbuffered, and glibc formats one call into one write
 * (up to 8 KiB), so another stream's output (stdout forwarded by mpirun into
 * the same log) cannot land between a prefix and its message. NULL when out
 * of memory: the format itself is printed then. */
static char *vmsg(const char *fmt, va_list ap) {
  char *m = NULL;
  return vasprintf(&m, fmt, ap) < 0 ? NULL : m;
}

void fm_warn0(const char *fmt, ...) {
  if (log_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  char *m = vmsg(fmt, ap);
  va_end(ap);
  fprintf(stderr, "fmhpc: warning: %s\n", m ? m : fmt);
  free(m);
  fflush(stderr);
}

void fm_verr(const char *fmt, va_list ap) {
  char *m = vmsg(fmt, ap);
  if (log_size > 1) fprintf(stderr, "fmhpc[rank %d]: %s\n", log_rank, m ? m : fmt);
  else fprintf(stderr, "fmhpc: %s\n", m ? m : fmt);
  free(m);
  fflush(stderr);
}

void fm_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fm_verr(fmt, ap);
  va_end(ap);
}

/* ---- abort policy ----------------------------------------------------- */
static FmAbortHook abort_hook = NULL;
void fm_set_abort_hook(FmAbortHook hook) { abort_hook = hook; }

void fm_abort_one(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fm_verr(fmt, ap);
  va_end(ap);
  fflush(stdout); /* a log line buffered on its way to a file is part of the story */
  fflush(stderr);
  if (abort_hook) abort_hook(code);
  exit(code);
}

void fm__report_call(const char *lib, const char *call, const char *file, int line, const char *what) {
  fm_err("%s:%d: %s call failed: %s: %s", file, line, lib, call, what);
}

/* ---- sizes ------------------------------------------------------------ */
int64_t fm_elems(int n, const int64_t *factors) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    if (factors[i] < 1 || fm_mul_i64(p, factors[i], &p) || p > FM_MAX_ELEMS) return -1;
  return p;
}

/* ---- allocation ------------------------------------------------------- */
void *fm_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) fm_abort_one(1, "out of memory allocating %zu bytes", n);
  return p;
}
void *fm_xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) fm_abort_one(1, "out of memory allocating %zu x %zu bytes", n, sz);
  return p;
}
void *fm_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) fm_abort_one(1, "out of memory reallocating %zu bytes", n);
  return q;
}
bool fm_heap_huge(size_t bytes) {
#if defined(__GLIBC__) && defined(MADV_HUGEPAGE)
  const size_t H = (size_t)2 << 20;
  if (bytes < 2 * H || bytes > (size_t)1 << 29) return false;
  /* below the mmap threshold (bytes + H: a request of exactly `bytes` stays on the heap), trimmed only
   * above twice the reserve, grown by the reserve at a time */
  if (!mallopt(M_MMAP_THRESHOLD, (int)(bytes + H)) || !mallopt(M_TRIM_THRESHOLD, (int)(2 * bytes)) ||
      !mallopt(M_TOP_PAD, (int)bytes))
    return false;
  char *a = malloc(bytes); /* the heap now spans it; freed, it stays as the top chunk the buffers come from */
  if (!a) return false;
  uintptr_t lo = ((uintptr_t)a + H - 1) & ~(uintptr_t)(H - 1), hi = ((uintptr_t)a + bytes) & ~(uintptr_t)(H - 1);
  bool ok = hi > lo && madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0;
  free(a);
  return ok;
#else
  (void)bytes;
  return false;
#endif
}
char *fm_xstrndup(const char *s, size_t n) {
  char *d = fm_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}
char *fm_xstrdup(const char *s) { return fm_xstrndup(s, strlen(s)); }

int fm_read_file(const char *path, char **text, size_t *len) { return fm_read_file_max(path, text, len, SIZE_MAX / 4); }

int fm_read_file_max(const char *path, char **text, size_t *len, size_t max) {
  *text = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return FM_EIO;
  /* A regular file is read straight into a buffer of its size (one read,
   * no copies); anything else, or a file that grows meanwhile, grows it. */
  struct stat st;
  size_t cap = 65536, n = 0;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    if ((uint64_t)st.st_size > max) {
      fclose(f);
      errno = EFBIG;
      return FM_EIO;
    }
    cap = (size_t)st.st_size + 1;
  }
  char *buf = fm_xmalloc(cap);
  for (;;) {
    if (n + 1 == cap) { /* full: is there more? */
      char probe[4096];
      size_t k = fread(probe, 1, sizeof probe, f);
      if (k == 0) break;
      if (n + k > max) { /* a device such as /dev/zero, or a pipe that does not end */
        fclose(f);
        free(buf);
        errno = EFBIG;
        return FM_EIO;
      }
      cap = 2 * (n + k + 1);
      buf = fm_xrealloc(buf, cap);
      memcpy(buf + n, probe, k);
      n += k;
      continue;
    }
    size_t k = fread(buf + n, 1, cap - 1 - n, f);
    if (k == 0) break;
    n += k;
    if (n > max) {
      fclose(f);
      free(buf);
      errno = EFBIG;
      return FM_EIO;
    }
  }
  int bad = ferror(f);
  int saved = errno;
  fclose(f);
  if (bad) {
    free(buf);
    errno = saved;
    return FM_EIO;
  }
  buf[n] = '\0';
  *text = buf;
  if (len) *len = n;
  return 0;
}

int fm_strcasecmp(const char *a, const char *b) {
  for (;; a++, b++) {
    int ca = tolower((unsigned char)*a), cb = tolower((unsigned char)*b);
    if (ca != cb || !ca) return ca - cb;
  }
}

int fm_edit_distance(const char *a, const char *b) {
  int n = (int)strlen(a), m = (int)strlen(b);
  if (n > 64 || m > 64) return 1000;
  int d[65][65];
  for (int i = 0; i <= n; i++) d[i][0] = i;
  for (int j = 0; j <= m; j++) d[0][j] = j;
  for (int i = 1; i <= n; i++) {
    for (int j = 1; j <= m; j++) {
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1; /* transposition */
      d[i][j] = v;
    }
  }
  return d[n][m];
}

const char *fm_fmt_bytes(char *buf, size_t n, double bytes) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    u++;
  }
  if (u == 0) snprintf(buf, n, "%.0f B", bytes);
  else snprintf(buf, n, "%.2f %s", bytes, unit[u]);
  return buf;
}

const char *fm_fmt_count(char *buf, size_t n, int64_t v) {
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
  char out[48];
  int o = 0;
  if (v < 0) out[o++] = '-';
  for (int i = 0; i < len; i++) {
    if (i > 0 && (len - i) % 3 == 0) out[o++] = ',';
    out[o++] = digits[i];
  }
  out[o] = '\0';
  snprintf(buf, n, "%s", out);
  return buf;
}

/* ---- growable string -------------------------------------------------- */
void fm_str_init(FmStr *b) {
  b->cap = 64;
  b->len = 0;
  b->s = fm_xmalloc(b->cap);
  b->s[0] = '\0';
}
void fm_str_catn(FmStr *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    while (b->len + n + 1 > b->cap) b->cap *= 2;
    b->s = fm_xrealloc(b->s, b->cap);
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}
void fm_str_cat(FmStr *b, const char *s) { fm_str_catn(b, s, strlen(s)); }
void fm_str_printf(FmStr *b, const char *fmt, ...) {
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    if (b->len + (size_t)n + 1 > b->cap) {
      while (b->len + (size_t)n + 1 > b->cap) b->cap *= 2;
      b->s = fm_xrealloc(b->s, b->cap);
    }
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, aq);
    b->len += (size_t)n;
  }
  va_end(aq);
}
void fm_str_free(FmStr *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}

/* ---- element types ---------------------------------------------------- */
size_t fm_dtype_size(FmDType t) {
  switch (t) {
    case FM_DT_U8: return 1;
    case FM_DT_BF16: return 2;
    case FM_DT_I32:
    case FM_DT_U32:
    case FM_DT_F32: return 4;
    case FM_DT_I64:
    case FM_DT_U64:
    case FM_DT_F64: return 8;
  }
  return 0;
}

const char *fm_dtype_name(FmDType t) {
  switch (t) {
    case FM_DT_U8: return "u8";
    case FM_DT_I32: return "i32";
    case FM_DT_U32: return "u32";
    case FM_DT_I64: return "i64";
    case FM_DT_U64: return "u64";
    case FM_DT_F32: return "f32";
    case FM_DT_F64: return "f64";
    case FM_DT_BF16: return "bf16";
  }
  return "?";
}
