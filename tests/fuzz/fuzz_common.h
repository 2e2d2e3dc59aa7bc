/* fuzz_common.h: what the libFuzzer harnesses of tests/fuzz share.
 * Each harness feeds fuzz bytes to one parser of user input the way fmhpc
 * does (most parsers take a path: the bytes go to a file in a private
 * directory first) and checks two promises on top of the sanitizers:
 *   - bad input is an error status, never a crash, an abort or exit();
 *   - an error status comes with a message (fz_said).
 * Messages are captured in memory, never printed (speed). */
#ifndef FMHPC_FUZZ_COMMON_H
#define FMHPC_FUZZ_COMMON_H

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fz_dir_path[256];
static int fz_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}
static void fz_dir_remove(void) { nftw(fz_dir_path, fz_rm, 16, FTW_DEPTH | FTW_PHYS); }

/* A private directory for this process's files (created once, removed at
 * exit). */
static inline const char *fz_dir(void) {
  char *dir = fz_dir_path;
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof fz_dir_path, "%s/fmhpc-fuzz-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    atexit(fz_dir_remove);
  }
  return dir;
}

/* dir/name (static buffer per call site is the caller's business). */
static inline void fz_path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", fz_dir(), name); }

/* Write n bytes to dir/name; out gets the path. */
static inline void fz_write(char *out, size_t cap, const char *name, const void *p, size_t n) {
  fz_path(out, cap, name);
  FILE *f = fopen(out, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
    perror(out);
    abort();
  }
}

/* An in-memory stream for the messages of one call. */
typedef struct FzErr {
  FILE *f;
  char *buf;
  size_t len;
} FzErr;
static inline FILE *fz_err_open(FzErr *e) {
  e->buf = NULL;
  e->len = 0;
  e->f = open_memstream(&e->buf, &e->len);
  if (!e->f) abort();
  return e->f;
}
/* Close; an error status (rc != 0) must have said something. */
static inline void fz_said(FzErr *e, int rc, const char *what) {
  fclose(e->f);
  if (rc && e->len == 0) {
    fprintf(stderr, "fuzz: %s failed with status %d and printed no message\n", what, rc);
    abort();
  }
  free(e->buf);
}

/* Split data at the first occurrence of sep (a byte): head [0, k), tail after. */
static inline size_t fz_split(const uint8_t *data, size_t size, uint8_t sep) {
  const uint8_t *p = memchr(data, sep, size);
  return p ? (size_t)(p - data) : size;
}

/* A NUL-terminated copy of n bytes. */
static inline char *fz_strndup(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}

#endif
