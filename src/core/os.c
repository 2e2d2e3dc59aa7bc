/* os.c: the small operating-system helpers every module shares, each written
 * once: the monotonic timer, mkdir -p, and the "message, then hint:" printer
 * that user-facing errors go through. Logging and the status table are in
 * core.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fmhpc/core.h"

double fm_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parents first; their failures are not fatal by themselves (an existing
 * parent may refuse mkdir with EACCES or EROFS rather than EEXIST): the last
 * mkdir decides, and its errno names the cause. */
int fm_mkdirs(const char *path) {
  char *p = fm_xstrdup(path);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    (void)mkdir(p, 0777);
    *q = '/';
  }
  int rc = (mkdir(p, 0777) == 0 || errno == EEXIST) ? 0 : FM_EIO;
  free(p);
  return rc;
}

int fm_mkdirs_parent(const char *file_path) {
  char *p = fm_xstrdup(file_path);
  char *slash = strrchr(p, '/');
  int rc = 0;
  if (slash && slash != p) {
    *slash = '\0';
    rc = fm_mkdirs(p);
  }
  free(p);
  return rc;
}

void fm_vsay(FILE *err, const char *hint, const char *fmt, va_list ap) {
  if (!err) return;
  vfprintf(err, fmt, ap);
  fputc('\n', err);
  if (hint) fprintf(err, "hint: %s\n", hint);
}

void fm_say(FILE *err, const char *hint, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fm_vsay(err, hint, fmt, ap);
  va_end(ap);
}
