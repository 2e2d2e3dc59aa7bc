/* tok_compare.c: compare fmhpc's ids with reference ids produced by the npm
 * tokenizers (ref_*.js), document by document, and check that every
 * document round-trips (decode(encode(x)) == x).
 *   tok_compare TOKENIZER REF_IDS [--long | --resave PATH] [--docs N]
 * REF_IDS lines: source<TAB>byte offset<TAB>byte length (-1: whole file)<TAB>ids
 * (".gz" sources are gunzipped). --long sends every pre-token through the
 * heap-based merge loop, which must give the same ids as the array one.
 * --resave writes the tokenizer as tokenizer.json to PATH and compares the
 * ids of that file, loaded back.
 * --docs N: exactly N documents must be compared (a short reference file fails).
 * Prints one summary line; exit 0 only when documents were compared and none
 * differs. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/tokenizer.h"
#include "../../src/tokenizer/tokenizer_internal.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: tok_compare TOKENIZER REF_IDS [--long | --resave PATH] [--docs N]\n");
    return 2;
  }
  long long want_docs = -1;
  if (argc > 4 && !strcmp(argv[argc - 2], "--docs")) {
    want_docs = atoll(argv[argc - 1]);
    argc -= 2;
  }
  if (argc > 3 && !strcmp(argv[3], "--long")) fm__tok_small_max = 0;
  FmTokenizer *tok;
  if (fm_tok_load(&tok, argv[1], stderr)) return 2;
  if (argc > 4 && !strcmp(argv[3], "--resave")) {
    FmTokenizer *again;
    if (fm_tok_save_json(tok, argv[4], stderr) || fm_tok_load(&again, argv[4], stderr)) return 2;
    printf("resaved %s as %s: hash %s\n", argv[1], argv[4], strcmp(fm_tok_hash(tok), fm_tok_hash(again)) ? "differs" : "equal");
    fm_tok_free(tok);
    tok = again;
  }
  char *ref;
  size_t rlen;
  if (fm_read_file(argv[2], &ref, &rlen)) {
    fprintf(stderr, "tok_compare: cannot read %s (the reference fixture did not run?)\n", argv[2]);
    return 2;
  }
  int64_t docs = 0, differ = 0, invalid = 0, roundtrip_bad = 0, ntok = 0, nbytes = 0;
  char *src_name = NULL, *src = NULL;
  size_t src_len = 0;
  int32_t *ids = NULL, *want = NULL;
  int64_t cap = 0, wcap = 0;
  char *back = NULL;
  size_t bcap = 0;
  for (char *line = ref; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    char *f[4] = {line, NULL, NULL, NULL};
    for (int k = 1; k < 4; k++) {
      f[k] = f[k - 1] ? strchr(f[k - 1], '\t') : NULL;
      if (f[k]) *f[k]++ = 0;
    }
    if (!f[3]) {
      fprintf(stderr, "tok_compare: %s: malformed line for '%s'\n", argv[2], line);
      return 2;
    }
    if (!src_name || strcmp(src_name, f[0])) {
      free(src), free(src_name);
      src_name = fm_xstrdup(f[0]);
      if (fm_tok_read_text(src_name, &src, &src_len)) {
        fprintf(stderr, "tok_compare: cannot read %s\n", src_name);
        return 2;
      }
    }
    long long off = atoll(f[1]), len = atoll(f[2]);
    if (len < 0) len = (long long)src_len - off;
    if (off < 0 || off + len > (long long)src_len) {
      fprintf(stderr, "tok_compare: %s: range %lld+%lld outside %s\n", argv[2], off, len, src_name);
      return 2;
    }
    docs++;
    const char *text = src + off;
    int64_t n = 0, nw = 0;
    if (fm_tok_encode(tok, text, (size_t)len, false, &ids, &n, &cap) < 0) return 2;
    ntok += n;
    nbytes += len;
    if (!strcmp(f[3], "!invalid-utf8")) {
      invalid++;
    } else {
      for (char *p = f[3]; *p;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) break;
        if (nw == wcap) want = fm_xrealloc(want, sizeof *want * (size_t)(wcap = wcap ? 2 * wcap : 4096));
        want[nw++] = (int32_t)v;
        p = e;
      }
      if (n != nw || memcmp(ids, want, sizeof *ids * (size_t)n)) {
        int64_t i = 0;
        while (i < n && i < nw && ids[i] == want[i]) i++;
        if (differ < 5)
          fprintf(stderr, "differ: %s+%lld: %lld vs %lld ids, first difference at id %lld (fmhpc %d, reference %d)\n",
                  src_name, off, (long long)n, (long long)nw, (long long)i, i < n ? ids[i] : -1,
                  i < nw ? want[i] : -1);
        differ++;
      }
    }
    size_t blen = 0;
    if (fm_tok_decode(tok, ids, n, &back, &blen, &bcap) || blen != (size_t)len || memcmp(back, text, blen)) {
      if (roundtrip_bad < 5) fprintf(stderr, "round-trip fails: %s+%lld\n", src_name, off);
      roundtrip_bad++;
    }
    line = nl ? nl + 1 : NULL;
  }
  printf("%s vs %s: %lld documents (%lld bytes, %lld tokens), %lld differ, %lld not UTF-8 (not compared), "
         "%lld fail decode(encode(x)) == x%s\n",
         argv[1], argv[2], (long long)docs, (long long)nbytes, (long long)ntok, (long long)differ, (long long)invalid,
         (long long)roundtrip_bad, fm__tok_small_max == 0 ? " [long-word merge loop]" : "");
  free(ids), free(want), free(back), free(src), free(src_name), free(ref);
  fm_tok_free(tok);
  if (want_docs >= 0 && docs != want_docs) {
    fprintf(stderr, "tok_compare: %lld documents compared, expected %lld\n", (long long)docs, want_docs);
    return 1;
  }
  return docs > 0 && differ == 0 && roundtrip_bad == 0 && invalid == 0 ? 0 : 1;
}
