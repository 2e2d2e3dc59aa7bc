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

/* What both commands hold: the tokenizer, all of stdin, the ids. */
typedef struct Cli {
  FmTokenizer *tok;
  FmStr text;
  int32_t *ids;
  int64_t n, cap;
} Cli;

/* Both commands start alike: the tokenizer, then all of stdin. When the
 * load fails c->tok is NULL and nothing is held; a read error comes back
 * with both held. */
static int cli_start(Cli *c, const char *cmd, const char *tok_path, FILE *in, FILE *err) {
  memset(c, 0, sizeof *c);
  int rc = fm_tok_load(&c->tok, tok_path, err);
  if (rc) {
    c->tok = NULL;
    return rc;
  }
  fm_str_init(&c->text);
  char chunk[65536];
  size_t n;
  errno = 0;
  while ((n = fread(chunk, 1, sizeof chunk, in)) > 0) fm_str_catn(&c->text, chunk, n);
  if (!ferror(in)) return 0;
  if (err)
    fprintf(err, "fmhpc %s: standard input: cannot read: %s\nhint: give the text on stdin: a file (< file) or a pipe\n",
            cmd, errno ? strerror(errno) : "read error");
  return FM_EIO;
}

/* Everything written reaches stdout, or the command fails saying so (a full
 * disk or a closed pipe must not look like a short result). */
static int cli_flush(const char *cmd, FILE *out, FILE *err, int rc) {
  errno = 0;
  if (fflush(out) == 0 && !ferror(out)) return rc;
  if (err) fprintf(err, "fmhpc %s: standard output: cannot write: %s\n", cmd, errno ? strerror(errno) : "write error");
  return rc ? rc : FM_EIO;
}

static int cli_end(Cli *c, int rc) {
  free(c->ids);
  fm_str_free(&c->text);
  fm_tok_free(c->tok);
  return rc;
}

int fm_tok_cli_encode(const char *tok_path, FILE *in, FILE *out, FILE *err) {
  Cli c;
  int rc = cli_start(&c, "--encode", tok_path, in, err);
  if (!c.tok || rc) return cli_end(&c, rc);
  int64_t got = fm_tok_encode(c.tok, c.text.s, c.text.len, false, &c.ids, &c.n, &c.cap);
  if (got < 0) {
    rc = (int)got;
    if (err) fprintf(err, "fmhpc --encode: %s\n", fm_strerror(rc));
  }
  for (int64_t i = 0; !rc && i < c.n; i++) fprintf(out, i ? " %d" : "%d", c.ids[i]);
  if (!rc) fputc('\n', out);
  return cli_end(&c, cli_flush("--encode", out, err, rc));
}

int fm_tok_cli_decode(const char *tok_path, FILE *in, FILE *out, FILE *err) {
  Cli c;
  int rc = cli_start(&c, "--decode", tok_path, in, err);
  if (!c.tok || rc) return cli_end(&c, rc);
  const int64_t V = fm_tok_vocab_size(c.tok);
  const char *text_end = c.text.s + c.text.len; /* a NUL inside the input is not its end */
  for (char *p = c.text.s; !rc;) {
    while (p < text_end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    if (p == text_end) break;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || v >= V || !fm_tok_token_bytes(c.tok, (int32_t)v, NULL) ||
        (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')) {
      if (err)
        fprintf(err, "fmhpc --decode: input byte %lld: '%.20s' is not a token id of %s (0..%lld)\n",
                (long long)(p - c.text.s), p, tok_path, (long long)V - 1);
      rc = FM_EINVAL;
      break;
    }
    if (c.n == c.cap) c.ids = fm_xrealloc(c.ids, sizeof *c.ids * (size_t)(c.cap = c.cap ? 2 * c.cap : 1024));
    c.ids[c.n++] = (int32_t)v;
    p = end;
  }
  char *bytes = NULL;
  size_t blen = 0, bcap = 0;
  if (!rc) rc = fm_tok_decode(c.tok, c.ids, c.n, &bytes, &blen, &bcap);
  if (!rc && blen) fwrite(bytes, 1, blen, out); /* a short write is caught by cli_flush */
  free(bytes);
  return cli_end(&c, rc ? rc : cli_flush("--decode", out, err, rc));
}
