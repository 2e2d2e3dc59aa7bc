/* os.c: the small operating-system helpers every module shares, each written
 * once: the monotonic timer, mkdir -p, "the same file", and the "message, then hint:" printer
 * that user-facing errors go through. Logging and the status table are in
 * core.c. */
#define _XOPEN_SOURCE 700 /* realpath (XSI) */
#include <errno.h>
#include <limits.h>
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

/* path's canonical form into buf (PATH_MAX): realpath, or for a missing
 * file its directory's realpath and its name; path itself as a last resort. */
static void canon_path(const char *path, char *buf) {
  if (realpath(path, buf)) return;
  const char *slash = strrchr(path, '/');
  char dir[PATH_MAX];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  char real[PATH_MAX];
  if (realpath(dir, real) && strlen(real) + strlen(slash ? slash + 1 : path) + 2 <= PATH_MAX)
    snprintf(buf, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : path);
  else
    snprintf(buf, PATH_MAX, "%s", path);
}

bool fm_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  char ca[PATH_MAX], cb[PATH_MAX];
  canon_path(a, ca);
  canon_path(b, cb);
  return strcmp(ca, cb) == 0;
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
