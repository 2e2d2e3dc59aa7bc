/* jsonl.c: a streaming line reader over plain, gzip (zlib, concatenated
 * members allowed) and zstd files, found by magic bytes, with a line number
 * for every line and the SHA-256 of the raw bytes for the prep manifest.
 * Parsing the JSON of a line is the caller's (json.h); this file only cuts
 * lines and decompresses. */
#include "fmhpc/json.h"

#include "fmhpc/core.h"
#include "fmhpc/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* ---- the reader ---------------------------------------------------------- */
enum { RAW_CHUNK = 1 << 20 };
typedef enum { CODEC_PLAIN, CODEC_GZIP, CODEC_ZSTD } Codec;

struct FmJsonl {
  char *path;
  FILE *f, *err;
  Codec codec;
  FmSha256 sha;
  char sha_hex[65];
  int no_sha;
  int64_t raw_bytes, lineno;
  uint8_t *raw; /* compressed input window */
  size_t raw_len, raw_pos;
  int raw_eof;
  char *text; /* decompressed text not yet cut into lines */
  size_t text_len, text_pos, text_cap;
  int text_eof, stream_end;
  char *line; /* the line handed out */
  size_t line_cap;
  z_stream z;
  ZSTD_DStream *zs;
};

static int read_raw(FmJsonl *r) {
  if (r->raw_pos < r->raw_len || r->raw_eof) return 0;
  size_t n = fread(r->raw, 1, RAW_CHUNK, r->f);
  if (n == 0 && ferror(r->f)) {
    if (r->err) fprintf(r->err, "%s: read error: %s\n", r->path, strerror(errno));
    return FM_EIO;
  }
  if (n == 0) r->raw_eof = 1;
  if (!r->no_sha) fm_sha256_update(&r->sha, r->raw, n);
  r->raw_bytes += (int64_t)n;
  r->raw_len = n;
  r->raw_pos = 0;
  return 0;
}

/* Produce more decompressed text at r->text + r->text_len; sets text_eof. */
static int fill_text(FmJsonl *r) {
  if (r->text_pos > 0) { /* keep only the unconsumed tail */
    memmove(r->text, r->text + r->text_pos, r->text_len - r->text_pos);
    r->text_len -= r->text_pos;
    r->text_pos = 0;
  }
  if (r->text_cap - r->text_len < RAW_CHUNK) {
    r->text_cap = r->text_cap * 2 + RAW_CHUNK;
    r->text = fm_xrealloc(r->text, r->text_cap + 1);
  }
  int rc = read_raw(r);
  if (rc) return rc;
  int drained = r->raw_eof && r->raw_pos == r->raw_len;
  if (drained && (r->codec == CODEC_PLAIN || r->stream_end)) {
    r->text_eof = 1;
    return 0;
  }
  uint8_t *in = r->raw + r->raw_pos;
  size_t avail = r->raw_len - r->raw_pos, room = r->text_cap - r->text_len;
  char *out = r->text + r->text_len;
  if (r->codec == CODEC_PLAIN) {
    size_t k = avail < room ? avail : room;
    memcpy(out, in, k);
    r->raw_pos += k;
    r->text_len += k;
  } else if (r->codec == CODEC_GZIP) {
    if (r->stream_end) { /* another gzip member follows */
      if (inflateReset(&r->z) != Z_OK) return FM_EFORMAT;
      r->stream_end = 0;
    }
    r->z.next_in = in;
    r->z.avail_in = (uInt)avail;
    r->z.next_out = (Bytef *)out;
    r->z.avail_out = (uInt)room;
    int zr = inflate(&r->z, Z_NO_FLUSH);
    if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
      if (r->err)
        fprintf(r->err, "%s: gzip error near raw byte %lld: %s\n", r->path,
                (long long)(r->raw_bytes - (int64_t)r->z.avail_in), r->z.msg ? r->z.msg : "corrupt data");
      return FM_EFORMAT;
    }
    if (zr == Z_STREAM_END) r->stream_end = 1;
    r->raw_pos += avail - r->z.avail_in;
    r->text_len += room - r->z.avail_out;
  } else {
    ZSTD_inBuffer zi = {in, avail, 0};
    ZSTD_outBuffer zo = {out, room, 0};
    size_t zr = ZSTD_decompressStream(r->zs, &zo, &zi);
    if (ZSTD_isError(zr)) {
      if (r->err) fprintf(r->err, "%s: zstd error: %s\n", r->path, ZSTD_getErrorName(zr));
      return FM_EFORMAT;
    }
    r->stream_end = zr == 0; /* a frame is complete; another may follow */
    r->raw_pos += zi.pos;
    r->text_len += zo.pos;
  }
  /* Out of input and the decompressor gave nothing more: the stream is cut. */
  if (drained && !r->stream_end && r->text + r->text_len == out) {
    if (r->err)
      fprintf(r->err, "%s: truncated %s stream after %lld raw bytes\nhint: the file was cut short; recompress it\n",
              r->path, fm_jsonl_codec(r), (long long)r->raw_bytes);
    return FM_EFORMAT;
  }
  return 0;
}

int fm_jsonl_open(FmJsonl **out, const char *path, FILE *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err) fprintf(err, "%s: cannot open: %s\nhint: check the &prep inputs globs\n", path, strerror(errno));
    return FM_EIO;
  }
  FmJsonl *r = fm_xcalloc(1, sizeof *r);
  r->path = fm_xstrdup(path);
  r->f = f;
  r->err = err;
  fm_sha256_init(&r->sha);
  r->raw = fm_xmalloc(RAW_CHUNK);
  int rc = read_raw(r);
  if (rc) {
    fm_jsonl_close(r);
    return rc;
  }
  if (r->raw_len >= 2 && r->raw[0] == 0x1f && r->raw[1] == 0x8b) {
    r->codec = CODEC_GZIP;
    if (inflateInit2(&r->z, 15 + 16) != Z_OK) {
      fm_jsonl_close(r);
      return FM_ENOMEM;
    }
  } else if (r->raw_len >= 4 && r->raw[0] == 0x28 && r->raw[1] == 0xb5 && r->raw[2] == 0x2f && r->raw[3] == 0xfd) {
    r->codec = CODEC_ZSTD;
    r->zs = ZSTD_createDStream();
    if (!r->zs || ZSTD_isError(ZSTD_initDStream(r->zs))) {
      fm_jsonl_close(r);
      return FM_ENOMEM;
    }
  }
  *out = r;
  return 0;
}

int fm_jsonl_next(FmJsonl *r, const char **line, size_t *len, int64_t *lineno) {
  size_t scan = r->text_pos;
  for (;;) {
    char *nl = r->text_len > scan ? memchr(r->text + scan, '\n', r->text_len - scan) : NULL;
    if (nl || (r->text_eof && r->text_pos < r->text_len)) {
      size_t end = nl ? (size_t)(nl - r->text) : r->text_len, n = end - r->text_pos;
      if (n + 1 > r->line_cap) {
        r->line_cap = 2 * (n + 1);
        r->line = fm_xrealloc(r->line, r->line_cap);
      }
      memcpy(r->line, r->text + r->text_pos, n);
      r->line[n] = 0;
      r->text_pos = nl ? end + 1 : end;
      *line = r->line;
      *len = n;
      *lineno = ++r->lineno;
      return 1;
    }
    if (r->text_eof) {
      if (!r->sha_hex[0] && !r->no_sha) {
        uint8_t d[32];
        fm_sha256_final(&r->sha, d);
        fm_hex(d, 32, r->sha_hex);
      }
      return 0;
    }
    size_t consumed = r->text_pos;
    scan = r->text_len;
    int rc = fill_text(r);
    if (rc) return rc;
    scan -= consumed; /* fill_text moved the tail to the front */
  }
}

int64_t fm_jsonl_raw_bytes(const FmJsonl *r) { return r->raw_bytes; }
const char *fm_jsonl_codec(const FmJsonl *r) {
  return r->codec == CODEC_GZIP ? "gzip" : r->codec == CODEC_ZSTD ? "zstd" : "plain";
}
const char *fm_jsonl_sha256(const FmJsonl *r) { return r->sha_hex[0] ? r->sha_hex : NULL; }
void fm_jsonl_no_sha256(FmJsonl *r) { r->no_sha = 1; }

void fm_jsonl_close(FmJsonl *r) {
  if (!r) return;
  if (r->f) fclose(r->f);
  if (r->codec == CODEC_GZIP) inflateEnd(&r->z);
  if (r->zs) ZSTD_freeDStream(r->zs);
  free(r->path);
  free(r->raw);
  free(r->text);
  free(r->line);
  free(r);
}
