/* test_jsonl.c: the streaming JSONL reader over plain, gzip (two concatenated
 * members) and zstd files: the same lines and line numbers, the raw file's
 * SHA-256 (against sha256sum), a last line without newline, long lines, and
 * a truncated stream reported as an error. */
#include "fm_test.h"
#include "fmhpc/core.h"
#include "fmhpc/json.h"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

static const char text[] = "{\"text\": \"x\"}\n\n{\"a\":1}";
/* sha256sum of text (printf '...' | sha256sum) */
static const char text_sha[] = "20a74aa4ce755e370a1f75e3a2a20da2aa976a7e817e9f79da6077bbc24b6bf1";

static void tmpname(char *buf, const char *suffix) {
  snprintf(buf, 256, "%s/tests/test_jsonl_%d%s", FMHPC_BINARY_DIR, (int)getpid(), suffix);
}

static void read_all(const char *path, const char *expect_sha) {
  FmJsonl *r;
  FM_REQUIRE(fm_jsonl_open(&r, path, stderr) == 0);
  const char *line;
  size_t len;
  int64_t no;
  FM_REQUIRE(fm_jsonl_next(r, &line, &len, &no) == 1);
  FM_EXPECT_EQ_STR(line, "{\"text\": \"x\"}");
  FM_EXPECT_EQ_INT(no, 1);
  FM_REQUIRE(fm_jsonl_next(r, &line, &len, &no) == 1);
  FM_EXPECT_EQ_INT(len, 0);
  FM_EXPECT_EQ_INT(no, 2);
  FM_REQUIRE(fm_jsonl_next(r, &line, &len, &no) == 1);
  FM_EXPECT_EQ_STR(line, "{\"a\":1}");
  FM_EXPECT_EQ_INT(no, 3);
  FM_EXPECT(fm_jsonl_sha256(r) == NULL);
  FM_EXPECT_EQ_INT(fm_jsonl_next(r, &line, &len, &no), 0);
  if (expect_sha) FM_EXPECT_EQ_STR(fm_jsonl_sha256(r), expect_sha);
  fm_jsonl_close(r);
}

FM_TEST(plain_gzip_zstd) {
  char p[256], g[256], z[256];
  tmpname(p, ".jsonl");
  tmpname(g, ".jsonl.gz");
  tmpname(z, ".jsonl.zst");
  FILE *f = fopen(p, "wb");
  fwrite(text, 1, sizeof text - 1, f);
  fclose(f);
  gzFile gz = gzopen(g, "wb"); /* two members: gzip files may be concatenated */
  gzwrite(gz, text, 15);
  gzclose(gz);
  gz = gzopen(g, "ab");
  gzwrite(gz, text + 15, (unsigned)(sizeof text - 1 - 15));
  gzclose(gz);
  char zbuf[256];
  size_t zn = ZSTD_compress(zbuf, sizeof zbuf, text, sizeof text - 1, 3);
  FM_REQUIRE(!ZSTD_isError(zn));
  f = fopen(z, "wb");
  fwrite(zbuf, 1, zn, f);
  fclose(f);
  read_all(p, text_sha);
  read_all(g, NULL);
  read_all(z, NULL);
  FmJsonl *r;
  FM_REQUIRE(fm_jsonl_open(&r, z, NULL) == 0);
  FM_EXPECT_EQ_STR(fm_jsonl_codec(r), "zstd");
  fm_jsonl_close(r);
  /* truncated zstd: an error, not a short file */
  f = fopen(z, "wb");
  fwrite(zbuf, 1, zn - 4, f);
  fclose(f);
  FM_REQUIRE(fm_jsonl_open(&r, z, NULL) == 0);
  const char *line;
  size_t len;
  int64_t no;
  int rc;
  while ((rc = fm_jsonl_next(r, &line, &len, &no)) == 1) {}
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  fm_jsonl_close(r);
  unlink(p);
  unlink(g);
  unlink(z);
}

FM_TEST(long_lines_and_missing_file) {
  char p[256];
  tmpname(p, "_long.jsonl");
  FILE *f = fopen(p, "wb");
  for (int l = 0; l < 3; l++) { /* 3 lines of 3 MiB: cross the 1 MiB read chunks */
    for (int i = 0; i < 3 << 20; i++) fputc('a' + (i + l) % 26, f);
    fputc('\n', f);
  }
  fclose(f);
  FmJsonl *r;
  FM_REQUIRE(fm_jsonl_open(&r, p, stderr) == 0);
  const char *line;
  size_t len;
  int64_t no;
  for (int l = 0; l < 3; l++) {
    FM_REQUIRE(fm_jsonl_next(r, &line, &len, &no) == 1);
    FM_EXPECT_EQ_INT(len, 3 << 20);
    FM_EXPECT_EQ_INT(line[0], 'a' + l);
    FM_EXPECT_EQ_INT(line[len - 1], 'a' + ((3 << 20) - 1 + l) % 26);
  }
  FM_EXPECT_EQ_INT(fm_jsonl_next(r, &line, &len, &no), 0);
  FM_EXPECT_EQ_INT(fm_jsonl_raw_bytes(r), 3 * ((3 << 20) + 1));
  fm_jsonl_close(r);
  unlink(p);
  FM_EXPECT_EQ_INT(fm_jsonl_open(&r, "/nonexistent/x.jsonl", NULL), FM_EIO);
}
