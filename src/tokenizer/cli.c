/* cli.c: `fmhpc --encode TOK` and `fmhpc --decode TOK` (stdin to stdout,
 * ids separated by spaces) for inspecting a tokenizer by hand, and the small
 * text-file reader (plain or gzip) that corpora and tests use. main.c calls
 * these on rank 0 only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fmhpc/core.h"
#include "fmhpc/tokenizer.h"

int fm_tok_read_text(const char *path, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  size_t n = strlen(path);
  if (n < 3 || strcmp(path + n - 3, ".gz") != 0) return fm_read_file(path, text, len);
  gzFile g = gzopen(path, "rb");
  if (!g) return FM_EIO;
  FmStr b;
  fm_str_init(&b);
  char chunk[65536];
  int k;
  while ((k = gzread(g, chunk, sizeof chunk)) > 0) fm_str_catn(&b, chunk, (size_t)k);
  int bad = k < 0;
  gzclose(g);
  if (bad) {
    fm_str_free(&b);
    errno = EIO;
    return FM_EIO;
  }
  *text = b.s;
  *len = b.len;
  return 0;
}

/* Both commands start alike: the tokenizer, then all of stdin. When the
 * load fails *tok is NULL and nothing is held; a read error comes back with
 * both held. */
static int cli_start(const char *tok_path, FILE *in, FILE *err, FmTokenizer **tok, FmStr *text) {
  int rc = fm_tok_load(tok, tok_path, err);
  if (rc) {
    *tok = NULL;
    return rc;
  }
  fm_str_init(text);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, in)) > 0) fm_str_catn(text, chunk, n);
  return ferror(in) ? FM_EIO : 0;
}

int fm_tok_cli_encode(const char *tok_path, FILE *in, FILE *out, FILE *err) {
  FmTokenizer *tok = NULL;
  FmStr text = {0};
  int rc = cli_start(tok_path, in, err, &tok, &text);
  if (!tok) return rc;
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  if (!rc) {
    int64_t got = fm_tok_encode(tok, text.s, text.len, false, &ids, &n, &cap);
    if (got < 0) rc = (int)got;
  }
  for (int64_t i = 0; !rc && i < n; i++) fprintf(out, i ? " %d" : "%d", ids[i]);
  if (!rc) fputc('\n', out);
  if (rc && err) fprintf(err, "fmhpc --encode: %s\n", fm_strerror(rc));
  free(ids);
  fm_str_free(&text);
  fm_tok_free(tok);
  return rc;
}

int fm_tok_cli_decode(const char *tok_path, FILE *in, FILE *out, FILE *err) {
  FmTokenizer *tok = NULL;
  FmStr text = {0};
  int rc = cli_start(tok_path, in, err, &tok, &text);
  if (!tok) return rc;
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  for (char *p = text.s; !rc;) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || v >= fm_tok_vocab_size(tok) || !fm_tok_token_bytes(tok, (int32_t)v, NULL) ||
        (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')) {
      if (err)
        fprintf(err, "fmhpc --decode: input byte %lld: '%.20s' is not a token id of %s (0..%lld)\n",
                (long long)(p - text.s), p, tok_path, (long long)fm_tok_vocab_size(tok) - 1);
      rc = FM_EINVAL;
      break;
    }
    if (n == cap) ids = fm_xrealloc(ids, sizeof *ids * (size_t)(cap = cap ? 2 * cap : 1024));
    ids[n++] = (int32_t)v;
    p = end;
  }
  char *bytes = NULL;
  size_t blen = 0, bcap = 0;
  if (!rc) rc = fm_tok_decode(tok, ids, n, &bytes, &blen, &bcap);
  if (!rc && blen && fwrite(bytes, 1, blen, out) != blen) rc = FM_EIO;
  free(bytes);
  free(ids);
  fm_str_free(&text);
  fm_tok_free(tok);
  return rc;
}
