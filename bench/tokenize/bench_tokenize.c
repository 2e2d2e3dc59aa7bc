/* bench_tokenize.c: fmhpc's encode throughput on one core. Reads the
 * documents listed on stdin (one path a line, .gz allowed) into memory, then
 * encodes each whole document, REPS times, and prints tokens/s.
 *   bench_tokenize TOKENIZER REPS < list
 * Output: "fmhpc <tokenizer>: <docs> docs, <bytes> bytes, <tokens> tokens,
 * <s> s, <tok/s> tokens/s". The first pass warms the pre-token cache, as a
 * long-running prep job would be warm; it is timed too, on stderr ("cold
 * pass"): a job that sees each document once, as a prep of a small corpus,
 * computes every distinct piece's merges once, as that pass does. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/tokenizer.h"
#include "../bench_util.h"

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: bench_tokenize TOKENIZER REPS < list\n"), 2;
  FmTokenizer *tok;
  if (fm_tok_load(&tok, argv[1], stderr)) return 1;
  int reps = atoi(argv[2]);
  char **doc = NULL, line[4096];
  size_t *len = NULL, ndoc = 0, bytes = 0;
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    doc = realloc(doc, sizeof *doc * (ndoc + 1));
    len = realloc(len, sizeof *len * (ndoc + 1));
    if (fm_tok_read_text(line, &doc[ndoc], &len[ndoc])) return fprintf(stderr, "cannot read %s\n", line), 1;
    bytes += len[ndoc++];
  }
  int32_t *ids = NULL;
  int64_t cap = 0, ntok = 0;
  double t0 = 0, tc = now();
  for (int r = -1; r < reps; r++) { /* r == -1: warm-up pass */
    if (r == 0) {
      double dc = now() - tc;
      fprintf(stderr, "fmhpc %s: cold pass (the pre-token cache empty): %lld tokens, %.3f s, %.0f tokens/s\n", argv[1],
              (long long)ntok, dc, (double)ntok / dc);
      t0 = now(), ntok = 0;
    }
    for (size_t i = 0; i < ndoc; i++) {
      int64_t n = 0;
      fm_tok_encode(tok, doc[i], len[i], false, &ids, &n, &cap);
      ntok += n;
    }
  }
  double dt = now() - t0;
  printf("fmhpc %s: %zu docs, %zu bytes, %lld tokens, %.3f s, %.0f tokens/s\n", argv[1], ndoc, bytes * (size_t)reps,
         (long long)ntok, dt, (double)ntok / dt);
  for (size_t i = 0; i < ndoc; i++) free(doc[i]);
  free(doc), free(len), free(ids);
  fm_tok_free(tok);
  return 0;
}
