/* fuzz_jsonl: JSONL records (src/core/jsonl.c, src/core/json.c): the line
 * reader over plain, gzip and zstd files and the JSON parser of each line.
 * Input: a mode byte, then the payload.
 *   mode % 4 == 0, 1: the payload is the file as is (any magic bytes: a
 *                     broken .gz or .zst too)
 *   mode % 4 == 2:    the payload gzip-compressed (two members, cut at a
 *                     point the next byte picks, when mode & 4)
 *   mode % 4 == 3:    the payload zstd-compressed (two frames likewise)
 * Checks: the reader ends (0) or fails with a message; every line parses or
 * fails with a position; every string value, escaped by fm_json_write_str
 * and parsed back, is the same bytes; the decompressed lines joined by '\n'
 * are the payload (for the compressed modes). */
#include <zlib.h>
#include <zstd.h>

#include "fmhpc/json.h"
#include "fuzz_common.h"

static size_t gz(const uint8_t *p, size_t n, uint8_t *out, size_t cap) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  z.next_in = (Bytef *)(uintptr_t)p;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
  size_t k = z.total_out;
  deflateEnd(&z);
  return k;
}

static size_t compress_to(int codec, const uint8_t *p, size_t n, uint8_t *out, size_t cap) {
  if (codec == 2) return gz(p, n, out, cap);
  size_t k = ZSTD_compress(out, cap, p, n, 3);
  if (ZSTD_isError(k)) abort();
  return k;
}

static void check_strings(const FmJson *v) {
  if (v->type == FM_JSON_STR) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fm_json_write_str(f, v->s, v->len);
    fclose(f);
    FmJsonDoc d;
    FmJsonError je;
    if (fm_json_parse(&d, buf, len, 0, &je) || d.root.type != FM_JSON_STR || d.root.len != v->len ||
        memcmp(d.root.s, v->s, v->len) != 0) {
      fprintf(stderr, "fuzz_jsonl: a string does not survive fm_json_write_str: %s\n", buf);
      abort();
    }
    fm_json_free(&d);
    free(buf);
  }
  if (v->type == FM_JSON_ARR || v->type == FM_JSON_OBJ)
    for (int64_t i = 0; i < v->n; i++) check_strings(&v->items[i]);
  if (v->type == FM_JSON_OBJ)
    for (int64_t i = 0; i < v->n; i++) {
      FmJson k = {.type = FM_JSON_STR, .s = v->keys[i], .len = v->keylens[i]};
      check_strings(&k);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int mode = data[0], codec = mode % 4;
  data++;
  size--;
  char path[512];
  const uint8_t *payload = data;
  size_t plen = size;
  if (codec >= 2) {
    size_t cut = (mode & 4) ? data[0] % (size + 1) : size;
    payload = data + ((mode & 4) != 0);
    plen = size - ((mode & 4) != 0);
    if (cut > plen) cut = plen;
    size_t cap = 2 * plen + 1024;
    uint8_t *z = malloc(cap);
    size_t zn = compress_to(codec, payload, cut, z, cap);
    if (cut < plen) zn += compress_to(codec, payload + cut, plen - cut, z + zn, cap - zn);
    fz_write(path, sizeof path, "in.jsonl", z, zn);
    free(z);
  } else {
    fz_write(path, sizeof path, "in.jsonl", payload, plen);
  }
  FzErr e;
  FmJsonl *r = NULL;
  int rc = fm_jsonl_open(&r, path, fz_err_open(&e)); /* the reader keeps err until close */
  if (rc) {
    fz_said(&e, rc, "fm_jsonl_open");
    return 0;
  }
  const char *line;
  size_t len, joined = 0;
  int64_t lineno, last = 0;
  int mismatch = 0;
  while ((rc = fm_jsonl_next(r, &line, &len, &lineno)) == 1) {
    if (lineno <= last || strlen(line) > len) abort();
    last = lineno;
    if (codec >= 2 && !mismatch) { /* the text is the payload's lines */
      if (joined + len > plen || memcmp(payload + joined, line, len) != 0) mismatch = 1;
      joined += len;
      if (joined < plen) joined++;
    }
    if (fm_utf8_check(line, len) >= 0) continue;
    FmJsonDoc d;
    FmJsonError je;
    if (fm_json_parse(&d, line, len, 64, &je)) {
      if (!je.msg[0] || je.line < 1 || je.col < 1) abort();
      continue;
    }
    check_strings(&d.root);
    fm_json_free(&d);
  }
  if (rc == 0 && fm_jsonl_sha256(r) == NULL) abort();
  fm_jsonl_close(r);
  fz_said(&e, rc < 0 ? rc : 0, "fm_jsonl_next");
  if (codec >= 2 && rc == 0 && (mismatch || joined != plen)) {
    fprintf(stderr, "fuzz_jsonl: the decompressed lines are not the payload\n");
    abort();
  }
  return 0;
}
