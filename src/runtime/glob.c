/* glob.c: "rank 0 expands the input globs and broadcasts the list", written
 * once for prep, dedup and tokenizer training. Only rank 0 touches the file
 * system, so every rank reads the same files in the same order even where
 * ranks see the directory at different moments. */
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmhpc/runtime.h"

/* Rank 0: "bytes path\n" per regular file; the first miss's status. A
 * match that cannot be stat'ed (a dangling symlink, a file removed or
 * unreadable) is a miss naming it, not a file quietly left out; a pattern
 * whose matches are all directories or other non-files matches no file. */
static int expand(char *const *pat, int npat, FmGlobMiss miss, void *ctx, FmStr *list) {
  for (int i = 0; i < npat; i++) {
    if (!pat[i] || !pat[i][0]) continue;
    glob_t g;
    if (glob(pat[i], 0, NULL, &g) != 0) return miss ? miss(ctx, i, pat[i], NULL, 0) : FM_EIO;
    int nfiles = 0, rc = 0;
    for (size_t k = 0; k < g.gl_pathc && !rc; k++) {
      struct stat st;
      if (stat(g.gl_pathv[k], &st) != 0) {
        rc = miss ? miss(ctx, i, pat[i], g.gl_pathv[k], errno) : FM_EIO;
        break;
      }
      if (!S_ISREG(st.st_mode)) continue;
      fm_str_printf(list, "%lld %s\n", (long long)st.st_size, g.gl_pathv[k]);
      nfiles++;
    }
    globfree(&g);
    if (rc) return rc;
    if (nfiles == 0) return miss ? miss(ctx, i, pat[i], NULL, 0) : FM_EIO;
  }
  return 0;
}

int fm_comm_glob(FmComm *c, char *const *patterns, int npatterns, FmGlobMiss miss, void *ctx, FmFileList *out) {
  memset(out, 0, sizeof *out);
  FmStr list;
  fm_str_init(&list);
  int32_t rc = c->rank == 0 ? expand(patterns, npatterns, miss, ctx, &list) : 0;
  int brc = fm_comm_bcast(c, &rc, 1, FM_DT_I32, 0);
  char *s = list.s;
  if (!brc && !rc) brc = fm_comm_bcast_str(c, &s, 0);
  if (brc || rc) {
    fm_str_free(&list);
    return brc ? brc : rc;
  }
  for (const char *q = s; *q; q = strchr(q, '\n') + 1) out->n++;
  out->path = fm_xcalloc((size_t)out->n + 1, sizeof *out->path);
  out->bytes = fm_xcalloc((size_t)out->n + 1, sizeof *out->bytes);
  const char *q = s;
  for (int i = 0; i < out->n; i++) {
    const char *nl = strchr(q, '\n');
    char *end;
    out->bytes[i] = strtoll(q, &end, 10);
    out->path[i] = fm_xstrndup(end + 1, (size_t)(nl - end - 1));
    q = nl + 1;
  }
  if (s != list.s) free(s);
  fm_str_free(&list);
  return 0;
}

void fm_file_list_free(FmFileList *l) {
  for (int i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path);
  free(l->bytes);
  memset(l, 0, sizeof *l);
}
