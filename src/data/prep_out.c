/* prep_out.c: the writing side of task='prep' (prep_internal.h): window
 * files (written as .partial, then renamed: a committed window survives a
 * kill of the job; not fsynced: one that an OS crash cut short stops the
 * rerun with an error naming it, as phase 2 checks its size against its
 * header before it reads any row), rows
 * placed by prefix sums over windows into shards and a JSON manifest per
 * split, the report, and resume (a fingerprint of the settings and inputs
 * (path, size, mtime, inode) that committed windows must share). */
#include "prep_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmhpc/hash.h"
#include "fmhpc/json.h"

static const char *const stat_names[] = {
#define XX(n, h) #n,
    STAT_TABLE(XX)
#undef XX
};
static const char *const split_names[2] = {"train", "valid"};

/* ---- windows ---------------------------------------------------------- */
/* Window file: "FMWIN3\0" and a byte B (bytes per token id: 2 or 4), int64 R,
 * has_pos, NSTAT, stats[NSTAT], then per split (train, valid) int64 nsegs,
 * mask_stored; then per split: tokens uB (rows x R), segments per row i32
 * (rows), segment lengths i32 (nsegs), and loss_mask u8 (rows x R) when
 * mask_stored. Segment and position ids are not stored: a row is its segments
 * from column 0 on, then padding, so the lengths rebuild them (and the loss
 * mask too when it is 1 on every real id and 0 on padding, as in text mode).
 * That is 2-5 bytes per id written and read back instead of 13. A prep writes
 * B = 2 when its tokenizer's vocab (specials included) fits u16 (GPT-2's
 * 50257), else 4. Files that begin "FMWIN2\0\0" (fmhpc before FMWIN3; the
 * same layout with B = 4) are still read, so a prep resumed by a newer fmhpc
 * keeps the windows an older one committed (the fingerprint's "v2" names the
 * layout, which both share). */
static const char win_magic[7] = "FMWIN3", win_magic2[8] = "FMWIN2"; /* win_magic: then B; win_magic2: then 0 */
enum { WIN_HDR = 8 + 3 * 8 + NSTAT * 8 + 4 * 8 };

char *fm__prep_win_path(const Prep *p, int64_t w, bool partial) {
  char *s = fm_xmalloc(strlen(p->work) + 48);
  sprintf(s, "%s/win_%09lld.bin%s", p->work, (long long)w, partial ? ".partial" : "");
  return s;
}

/* in pieces of FM_WRITE_CHUNK: stdio passes a large fwrite to one write() call */
static int write_all(FILE *f, const void *b, size_t n) {
  for (const char *c = b; n > 0;) {
    size_t k = n < FM_WRITE_CHUNK ? n : FM_WRITE_CHUNK;
    if (fwrite(c, 1, k, f) != k) return FM_EIO;
    c += k;
    n -= k;
  }
  return 0;
}

static int pread_all(int fd, void *buf, size_t n, int64_t off) {
  char *b = buf;
  while (n > 0) {
    ssize_t k = pread(fd, b, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) return FM_EFORMAT; /* the file ends first: errno says nothing */
    if (k < 0) return FM_EIO;
    b += k;
    n -= (size_t)k;
    off += k;
  }
  return 0;
}

/* The FM_WRITE_CHUNK bytes of p->id16, made on first use and kept. */
static uint16_t *id16_buf(Prep *p) {
  if (!p->id16) p->id16 = fm_xmalloc(FM_WRITE_CHUNK);
  return p->id16;
}

/* n ids, each < 65536 (Prep.idw), as u16, narrowed a chunk at a time into p->id16 */
static int write_ids16(Prep *p, FILE *f, const uint32_t *ids, size_t n) {
  uint16_t *b = id16_buf(p);
  for (size_t i = 0; i < n;) {
    size_t k = n - i < FM_WRITE_CHUNK / 2 ? n - i : FM_WRITE_CHUNK / 2;
    for (size_t j = 0; j < k; j++) b[j] = (uint16_t)ids[i + j];
    int rc = write_all(f, b, k * 2);
    if (rc) return rc;
    i += k;
  }
  return 0;
}

/* n ids of idw bytes each at offset off of fd, widened into out */
static int read_ids(Prep *p, int fd, int64_t idw, uint32_t *out, size_t n, int64_t off) {
  if (idw == 4) return pread_all(fd, out, n * 4, off);
  uint16_t *b = id16_buf(p);
  for (size_t i = 0; i < n;) {
    size_t k = n - i < FM_WRITE_CHUNK / 2 ? n - i : FM_WRITE_CHUNK / 2;
    int rc = pread_all(fd, b, k * 2, off + (int64_t)i * 2);
    if (rc) return rc;
    for (size_t j = 0; j < k; j++) out[i + j] = b[j];
    i += k;
  }
  return 0;
}

static void wseg_reserve(Prep *p, int64_t n) {
  if (n <= p->wsegcap) return;
  p->wsegcap = 2 * n;
  p->wseg = fm_xrealloc(p->wseg, (size_t)p->wsegcap * sizeof *p->wseg);
}

int fm__prep_commit_window(Prep *p, int64_t w, FmPacked pk[2]) {
  char *part = fm__prep_win_path(p, w, true), *fin = fm__prep_win_path(p, w, false);
  int64_t hdr[3] = {p->R, p->pos != FM_POS_NONE, NSTAT}, sec[2][2] = {{0, 0}, {0, 0}};
  /* per split: its rows' segment counts, then their lengths (fm_pack_segments), after the train split's */
  wseg_reserve(p, pk[0].rows + pk[0].npiece + pk[1].rows + pk[1].npiece + 1); /* + 1: never NULL */
  for (int s = 0; s < 2; s++) {
    sec[s][0] = pk[s].npiece;
    sec[s][1] = pk[s].mask_odd;
    fm_pack_segments(&pk[s], p->wseg + (s ? pk[0].rows + pk[0].npiece : 0));
  }
  FILE *f = fopen(part, "wb");
  int rc = f ? 0 : FM_EIO;
  char magic[8];
  memcpy(magic, win_magic, 7);
  magic[7] = (char)p->idw;
  if (!rc) rc = write_all(f, magic, 8);
  if (!rc) rc = write_all(f, hdr, sizeof hdr);
  if (!rc) rc = write_all(f, p->stat, sizeof p->stat);
  if (!rc) rc = write_all(f, sec, sizeof sec);
  for (int s = 0; s < 2 && !rc; s++) {
    size_t n = (size_t)(pk[s].rows * p->R);
    if (!n) continue;
    rc = p->idw == 4 ? write_all(f, pk[s].tokens, n * 4) : write_ids16(p, f, pk[s].tokens, n);
    if (!rc) rc = write_all(f, p->wseg + (s ? pk[0].rows + sec[0][0] : 0), (size_t)(pk[s].rows + sec[s][0]) * 4);
    if (!rc && sec[s][1]) rc = write_all(f, pk[s].loss_mask, n);
  }
  /* No fsync: the rename makes the window visible whole to a rerun after a kill (the page cache outlives the
   * process). A window that an OS crash cut short is found by phase 2, which checks its size against its header
   * (fm__prep_read_window_header: tests/errors/produce.py prep_window_cut); blocks left zero-filled by a crash are not
   * (no checksum; docs/data-format.md says to delete .prep_work after an OS crash). fsync per window made the rank wait
   * on the disk for every window: about half of prep's wall time on the 2x corpus of bench/prep. */
  if (f && fflush(f)) rc = FM_EIO;
  if (f && fclose(f)) rc = FM_EIO;
  if (!rc && rename(part, fin)) rc = FM_EIO;
  if (rc) fm_err("%s: cannot write the window file: %s\nhint: check free space in &prep output", part, strerror(errno));
  free(part);
  free(fin);
  return rc;
}

/* ---- phase 2: placement and shards ------------------------------------ */

/* The bytes a window file holds by its header (rows of each split; per split, its segments and whether a mask is
 * stored: sec; the layout above), or -1 when those counts cannot be a window's. In double: a damaged header's counts
 * cannot overflow it (and real sizes are < 2^53). */
static double window_bytes(const Prep *p, const WinInfo *wi, const int64_t sec[2][2]) {
  double want = WIN_HDR;
  for (int s = 0; s < 2; s++) {
    if (wi->rows[s] < 0 || sec[s][0] < 0 || (sec[s][1] != 0 && sec[s][1] != 1)) return -1;
    want += (double)wi->rows[s] * (double)p->R * (double)(wi->idw + (sec[s][1] ? 1 : 0)) +
            ((double)wi->rows[s] + (double)sec[s][0]) * 4.0;
  }
  return want;
}

/* A window's header, checked against this prep; its size against the header, so that a window cut short (an OS
 * crash) or followed by bytes of something else is refused before phase 2 reads any row of it. */
int fm__prep_read_window_header(const Prep *p, int64_t w, WinInfo *wi) {
  char *path = fm__prep_win_path(p, w, false);
  FILE *f = fopen(path, "rb");
  char magic[8];
  int64_t hdr[3], sec[2][2];
  struct stat st = {0};
  double want = -1;
  bool got = f && fread(magic, 1, 8, f) == 8;
  bool v3 = got && memcmp(magic, win_magic, 7) == 0 && (magic[7] == 2 || magic[7] == 4);
  if (got && (v3 || memcmp(magic, win_magic2, 8) == 0) && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == p->R &&
      hdr[1] == (p->pos != FM_POS_NONE) && hdr[2] == NSTAT && fread(wi->stat, sizeof wi->stat, 1, f) == 1 &&
      fread(sec, sizeof sec, 1, f) == 1 && fstat(fileno(f), &st) == 0) {
    wi->rows[0] = wi->stat[ST_rows_train];
    wi->rows[1] = wi->stat[ST_rows_valid];
    wi->idw = v3 ? magic[7] : 4;
    want = window_bytes(p, wi, sec);
  }
  int rc = 0;
  if (want < 0) {
    fm_err("%s: missing or not a window file of this prep\nhint: delete %s and run again", path, p->work);
    rc = FM_EDATA;
  } else if ((double)st.st_size != want) {
    fm_err("%s: %lld bytes, its header says %.0f bytes (%s)\nhint: delete %s and run again", path,
           (long long)st.st_size, want,
           (double)st.st_size < want ? "cut short, or its header damaged" : "bytes after its end", p->work);
    rc = FM_EDATA;
  }
  if (f) fclose(f);
  free(path);
  return rc;
}

static void rowbuf_reserve(RowBuf *b, int64_t rows, int64_t R) {
  if (rows <= b->cap) return;
  fm__prep_rowbuf_free(b);
  b->cap = rows;
  size_t n = (size_t)(rows * R);
  b->tok = fm_xmalloc(n * 4);
  b->mask = fm_xmalloc(n);
  b->seg = fm_xmalloc(n * 4);
  b->pos = fm_xmalloc(n * 4);
}

void fm__prep_rowbuf_free(RowBuf *b) {
  free(b->tok);
  free(b->mask);
  free(b->seg);
  free(b->pos);
  memset(b, 0, sizeof *b);
}

/* Rows [r0, r0+n) of split s of window w (whose header wi holds) into b at
 * row `at`: tokens (and a stored mask) as read, segment and position ids
 * (and a mask not stored) rebuilt from the segment lengths. */
static int read_window_rows(Prep *p, int64_t w, const WinInfo *wi, int s, int64_t r0, int64_t n, int64_t at,
                            RowBuf *b) {
  char *path = fm__prep_win_path(p, w, false);
  int fd = open(path, O_RDONLY);
  int64_t R = p->R, sec[2][2] = {{0, 0}, {0, 0}}, nr = wi->rows[s], B = wi->idw;
  int rc = fd >= 0 ? pread_all(fd, sec, sizeof sec, WIN_HDR - (int64_t)sizeof sec) : FM_EIO;
  int64_t off = WIN_HDR;
  if (s == 1) off += wi->rows[0] * R * B + (wi->rows[0] + sec[0][0]) * 4 + (sec[0][1] ? wi->rows[0] * R : 0);
  int64_t o_cnt = off + nr * R * B, o_len = o_cnt + nr * 4, o_mask = o_len + sec[s][0] * 4;
  if (!rc) rc = read_ids(p, fd, B, b->tok + at * R, (size_t)(n * R), off + r0 * R * B);
  if (!rc && sec[s][1]) rc = pread_all(fd, b->mask + at * R, (size_t)(n * R), o_mask + r0 * R);
  wseg_reserve(p, r0 + n);
  if (!rc) rc = pread_all(fd, p->wseg, (size_t)(r0 + n) * 4, o_cnt);
  int64_t s0 = 0, ns = 0;
  for (int64_t r = 0; !rc && r < r0 + n; r++) {
    if (p->wseg[r] < 0 || p->wseg[r] > R)
      rc = FM_EDATA;
    else if (r < r0)
      s0 += p->wseg[r];
    else
      ns += p->wseg[r];
  }
  if (!rc && s0 + ns > sec[s][0]) rc = FM_EDATA;
  if (!rc) wseg_reserve(p, r0 + n + ns);
  const int32_t *cnt = p->wseg, *len = p->wseg + r0 + n;
  if (!rc) rc = pread_all(fd, p->wseg + r0 + n, (size_t)ns * 4, o_len + s0 * 4);
  bool cont = p->pos == FM_POS_CONTINUOUS;
  for (int64_t r = 0, k = 0; !rc && r < n; r++) {
    int64_t base = (at + r) * R, col = 0;
    int32_t *seg = b->seg + base, *pos = b->pos + base;
    uint8_t *m = b->mask + base;
    for (int32_t q = 1; q <= cnt[r0 + r] && !rc; q++, k++) {
      int64_t L = len[k];
      if (L < 1 || L > R - col) {
        rc = FM_EDATA;
        break;
      }
      for (int64_t t = 0; t < L; t++) {
        seg[col + t] = q;
        pos[col + t] = (int32_t)(cont ? col + t : t);
      }
      if (!sec[s][1]) memset(m + col, 1, (size_t)L);
      col += L;
    }
    for (int64_t t = col; t < R; t++) {
      seg[t] = 0;
      pos[t] = (int32_t)(cont ? t : 0);
    }
    if (!sec[s][1]) memset(m + col, 0, (size_t)(R - col));
  }
  if (rc) /* its size matched its header (fm__prep_read_window_header): a file that ends early changed since */
    fm_err("%s: cannot read rows %lld..%lld (%s)\nhint: delete %s and run again", path, (long long)r0,
           (long long)r0 + (long long)n,
           rc == FM_EDATA     ? "the segment table is damaged"
           : rc == FM_EFORMAT ? "the file ends before them"
                              : strerror(errno),
           p->work);
  if (fd >= 0) close(fd);
  free(path);
  return rc;
}

static void json_kv_str(FmStr *b, const char *k, const char *v, int comma) {
  fm_str_printf(b, "  \"%s\": ", k);
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  fm_json_write_str(m, v, strlen(v));
  fclose(m);
  fm_str_cat(b, buf);
  free(buf);
  fm_str_cat(b, comma ? ",\n" : "\n");
}

/* What every shard and manifest of split s says about its origin. */
static char *provenance(const Prep *p, int s, const int64_t *tot) {
  FmStr b;
  fm_str_init(&b);
  fm_str_cat(&b, "{\n");
  json_kv_str(&b, "fmhpc_version", FM_VERSION_STRING, 1);
  json_kv_str(&b, "split", split_names[s], 1);
  fm_str_cat(&b, "  \"counts\": {");
  for (int k = 0; k < NSTAT; k++) fm_str_printf(&b, "%s\"%s\": %lld", k ? ", " : "", stat_names[k], (long long)tot[k]);
  fm_str_cat(&b, "},\n  \"inputs\": [\n");
  for (int i = 0; i < p->nin; i++) {
    fm_str_cat(&b, "    {\"path\": ");
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    fm_json_write_str(m, p->in[i].path, strlen(p->in[i].path));
    fclose(m);
    fm_str_cat(&b, buf);
    free(buf);
    fm_str_printf(&b, ", \"bytes\": %lld, \"sha256\": \"%s\", \"split\": \"%s\"}%s\n", (long long)p->in[i].bytes,
                  p->in[i].sha, p->in[i].valid ? "valid" : "train", i + 1 < p->nin ? "," : "");
  }
  fm_str_cat(&b, "  ],\n");
  char *deck = fm_deck_text(p->deck);
  json_kv_str(&b, "deck", deck, 0);
  free(deck);
  fm_str_cat(&b, "}\n");
  return b.s;
}

/* A shard streams through this rank in chunks of rows (read from its window files into p->part, put into the
 * shard, hashed), so that prep holds a few MB instead of its part of the shard, and the rows are hashed and written
 * while they are in the cache. The sha256-blocks-v1 checksums (fm_sha_pieces: the SHA-256 of the SHA-256s of
 * 65,536-element pieces of each dataset) are made from these rows instead of reading the shard back: piece q is
 * hashed by the rank whose window holds its first row, as its chunks pass; where the piece runs on into rows of
 * another rank's window, the rest is read from the window files. Every rank gets every digest (each made by one
 * rank: an OR joins them). */
typedef struct Sums {
  int64_t np, nel, next; /* pieces, elements; the first piece this rank has not finished */
  int nd;                /* datasets stored */
  uint8_t *mine;         /* per piece: this rank hashes it */
  uint8_t *dig;          /* [dataset][piece][32] */
  FmSha256 ctx[FM_SHARD_NDSETS];
} Sums;

/* Shard elements [e0, e1), held in b from element b0 on, into the pieces this rank hashes. */
static void sums_feed(Sums *m, const RowBuf *b, int64_t b0, int64_t e0, int64_t e1) {
  for (int64_t e = e0; e < e1;) {
    int64_t q = e / FM_SHA_PIECE, pe = (q + 1) * FM_SHA_PIECE < m->nel ? (q + 1) * FM_SHA_PIECE : m->nel;
    int64_t end = pe < e1 ? pe : e1;
    if (q >= m->next && m->mine[q]) {
      const size_t at = (size_t)(e - b0), len = (size_t)(end - e);
      for (int d = 0; d < m->nd && e == q * FM_SHA_PIECE; d++) fm_sha256_init(&m->ctx[d]);
      /* the datasets side by side: tokens, loss mask (a quarter of the bytes), segment ids, position ids */
      FmSha256 *const ctx[4] = {&m->ctx[0], &m->ctx[1], &m->ctx[2], &m->ctx[3]};
      const void *const data[4] = {b->tok + at, b->mask + at, b->seg + at,
                                   m->nd > 3 ? (const void *)(b->pos + at) : NULL};
      const size_t n[4] = {len * 4, len, len * 4, len * 4};
      fm_sha256_update_multi(ctx, data, n, m->nd);
      for (int d = 0; d < m->nd && end == pe; d++) fm_sha256_final(&m->ctx[d], m->dig + (size_t)(d * m->np + q) * 32);
      if (end == pe) m->next = q + 1;
    }
    e = end;
  }
}

/* After this rank's rows up to shard row r (global a + r) when its next row is elsewhere: the piece it hashes that
 * is open there, finished from the window files. */
static int sums_finish_open(Prep *p, Sums *m, int s, int64_t nW, const int64_t *off, const WinInfo *wi, int64_t a,
                            int64_t r) {
  const int64_t R = p->R, e = r * R;
  if (e == 0 || e >= m->nel) return 0;
  int64_t q = (e - 1) / FM_SHA_PIECE, pe = (q + 1) * FM_SHA_PIECE < m->nel ? (q + 1) * FM_SHA_PIECE : m->nel;
  if (q < m->next || !m->mine[q] || pe <= e) return 0;
  int64_t g0 = a + r, g1 = a + (pe + R - 1) / R;
  rowbuf_reserve(&p->scratch, g1 - g0, R);
  int rc = 0;
  int64_t v = 0;
  while (off[v + 1] <= g0) v++;
  for (; v < nW && off[v] < g1 && !rc; v++) {
    int64_t lo = off[v] > g0 ? off[v] : g0, hi = off[v + 1] < g1 ? off[v + 1] : g1;
    if (lo < hi) rc = read_window_rows(p, v, &wi[v], s, lo - off[v], hi - lo, lo - g0, &p->scratch);
  }
  if (!rc) sums_feed(m, &p->scratch, e, e, pe);
  return rc;
}

/* Shard j of split s, rows [a, b): created, this rank's runs (rows [a + rs[k], + rcnt[k]) of window rw[k]) streamed
 * through p->part into it and into the checksums, closed. */
static int write_shard(Prep *p, int s, int64_t nW, const int64_t *off, const WinInfo *wi, int64_t a, int64_t b,
                       int64_t nruns, const int64_t *rs, const int64_t *rcnt, const int64_t *rw, FmShardWriter *wr,
                       char hex[FM_SHARD_NDSETS][65]) {
  const int64_t R = p->R;
  Sums m = {0};
  m.nel = (b - a) * R;
  m.np = (m.nel + FM_SHA_PIECE - 1) / FM_SHA_PIECE;
  m.nd = p->pos != FM_POS_NONE ? 4 : 3;
  m.mine = fm_xcalloc((size_t)m.np + 1, 1);
  m.dig = fm_xcalloc((size_t)(m.np * FM_SHARD_NDSETS * 32) + 1, 1);
  for (int64_t q = 0, w = 0; q < m.np; q++) { /* the window of each piece's first row */
    int64_t g0 = a + q * FM_SHA_PIECE / R;
    while (off[w + 1] <= g0) w++;
    m.mine[q] = w % p->P == p->rank;
  }
  int64_t chunk = (int64_t)(FM_WRITE_CHUNK / ((size_t)R * 4)); /* rows: a write of at most FM_WRITE_CHUNK */
  if (chunk < 1) chunk = 1;
  rowbuf_reserve(&p->part, chunk, R);
  int rc = 0;
  for (int64_t k = 0; k < nruns && !rc; k++) {
    int64_t w = rw[k], end = rs[k] + rcnt[k];
    for (int64_t r = rs[k]; r < end && !rc;) {
      int64_t n = end - r < chunk ? end - r : chunk;
      rc = read_window_rows(p, w, &wi[w], s, a + r - off[w], n, 0, &p->part);
      if (!rc) rc = wr->put(wr, r, n, p->part.tok, p->part.mask, p->part.seg, p->part.pos);
      if (!rc) sums_feed(&m, &p->part, r * R, r * R, (r + n) * R);
      r += n;
    }
    if (!rc && (k + 1 == nruns || rs[k + 1] != end)) rc = sums_finish_open(p, &m, s, nW, off, wi, a, end);
  }
  fm__idle_barrier(p->world); /* ranks hold different numbers of rows */
  rc = agree(p->world, rc);
  if (!rc) rc = fm_comm_allreduce(p->world, m.dig, m.dig, m.np * FM_SHARD_NDSETS * 32, FM_DT_U8, FM_OP_BOR);
  for (int d = 0; d < FM_SHARD_NDSETS && !rc; d++) {
    uint8_t out[32];
    fm_sha256(m.dig + (size_t)(d * m.np) * 32, (size_t)m.np * 32, out);
    fm_hex(out, 32, hex[d]);
    if (d >= m.nd) hex[d][0] = '\0';
  }
  free(m.mine);
  free(m.dig);
  return wr->close(wr, rc);
}

int fm__prep_write_split(Prep *p, int s, int64_t nW, const WinInfo *wi, const int64_t *tot, int64_t *nshards_out) {
  int64_t R = p->R, N = 0;
  int64_t *off = fm_xmalloc((size_t)(nW + 1) * sizeof *off);
  for (int64_t w = 0; w < nW; w++) {
    off[w] = N; /* the exclusive prefix sum that places window w */
    N += wi[w].rows[s];
  }
  off[nW] = N;
  int64_t per = p->deck->c.prep.shard_tokens / R;
  if (per < 1) per = 1;
  int64_t nsh = (N + per - 1) / per;
  *nshards_out = nsh;
  bool is_h5 = p->deck->c.choice[FM_KEY_prep_format] == FM_PREP_FORMAT_H5;
  char *prov = provenance(p, s, tot);
  FmStr src;
  fm_str_init(&src);
  for (int i = 0; i < p->nin; i++) fm_str_printf(&src, "%s  %s\n", p->in[i].sha, p->in[i].path);
  int rc = 0;
  char(*sums)[FM_SHARD_NDSETS][65] = fm_xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *sums);
  int64_t *rs = fm_xmalloc((size_t)(nW + 1) * sizeof *rs), *rcnt = fm_xmalloc((size_t)(nW + 1) * sizeof *rcnt),
          *rw = fm_xmalloc((size_t)(nW + 1) * sizeof *rw);
  for (int64_t j = 0; j < nsh && !rc; j++) {
    int64_t a = j * per, b = a + per < N ? a + per : N;
    /* this rank's windows that intersect rows [a, b): runs of shard rows */
    int64_t nruns = 0;
    for (int64_t w = p->rank; w < nW; w += p->P) {
      int64_t lo = off[w] > a ? off[w] : a, hi = off[w + 1] < b ? off[w + 1] : b;
      if (lo >= hi) continue;
      rs[nruns] = lo - a;
      rcnt[nruns] = hi - lo;
      rw[nruns++] = w;
    }
    char name[64], *path = fm_xmalloc(strlen(p->stage) + 80);
    snprintf(name, sizeof name, "%s_%05lld%s", split_names[s], (long long)j, is_h5 ? ".h5" : "");
    sprintf(path, "%s/%s", p->stage, name);
    FmShardMeta m = {split_names[s],
                     (int)j,
                     (int)nsh,
                     a,
                     b - a,
                     R - 1,
                     fm_tok_vocab_size(p->tok),
                     p->eos,
                     (int32_t)p->pad,
                     fm_packing_name(p->packing),
                     fm_posids_name(p->pos),
                     fm_tok_hash(p->tok),
                     src.s,
                     prov};
    FmShardWriter *wr;
    rc = is_h5 ? fm__h5_shard_create(&wr, path, &m, p->world, stderr)
               : fm__bin_shard_create(&wr, path, &m, p->world, stderr);
    if (!rc) rc = write_shard(p, s, nW, off, wi, a, b, nruns, rs, rcnt, rw, wr, sums[j]);
    free(path);
  }
  free(rw);
  free(rs);
  free(rcnt);
  /* the manifest, by rank 0 */
  if (!rc && p->rank == 0) {
    FmStr b;
    fm_str_init(&b);
    fm_str_cat(&b, "{\n");
    json_kv_str(&b, "format", "fmhpc-packed", 1);
    fm_str_cat(&b, "  \"format_version\": 1,\n");
    json_kv_str(&b, "storage", is_h5 ? "h5" : "bin", 1);
    json_kv_str(&b, "split", split_names[s], 1);
    fm_str_printf(&b, "  \"seq_len\": %lld,\n  \"row_len\": %lld,\n  \"n_seq\": %lld,\n", (long long)(R - 1),
                  (long long)R, (long long)N);
    fm_str_printf(&b, "  \"vocab_size\": %lld,\n  \"eos_id\": %d,\n  \"pad_id\": %u,\n",
                  (long long)fm_tok_vocab_size(p->tok), p->eos, p->pad);
    json_kv_str(&b, "packing", fm_packing_name(p->packing), 1);
    json_kv_str(&b, "position_ids", fm_posids_name(p->pos), 1);
    json_kv_str(&b, "tokenizer_hash", fm_tok_hash(p->tok), 1);
    int64_t docs = tot[s ? ST_docs_valid : ST_docs_train], toks = tot[s ? ST_tokens_valid : ST_tokens_train],
            pad = tot[s ? ST_padding_valid : ST_padding_train];
    fm_str_printf(&b, "  \"documents\": %lld,\n  \"tokens\": %lld,\n  \"padding\": %lld,\n", (long long)docs,
                  (long long)toks, (long long)pad);
    fm_str_printf(&b, "  \"padding_fraction\": %.6f,\n", N ? (double)pad / (double)(N * R) : 0.0);
    fm_str_cat(&b, "  \"shards\": [\n");
    for (int64_t j = 0; j < nsh; j++) {
      int64_t a = j * per, e = a + per < N ? a + per : N;
      fm_str_printf(&b, "    {\"file\": \"%s_%05lld%s\", \"first_seq\": %lld, \"n_seq\": %lld, \"sha256\": {",
                    split_names[s], (long long)j, is_h5 ? ".h5" : "", (long long)a, (long long)(e - a));
      for (int d = 0; d < FM_SHARD_NDSETS; d++)
        if (sums[j][d][0]) fm_str_printf(&b, "%s\"%s\": \"%s\"", d ? ", " : "", fm__shard_dsets[d], sums[j][d]);
      fm_str_printf(&b, "}}%s\n", j + 1 < nsh ? "," : "");
    }
    fm_str_cat(&b, "  ],\n  \"provenance\": ");
    fm_str_cat(&b, prov);
    fm_str_cat(&b, "}\n");
    char *path = fm_xmalloc(strlen(p->stage) + 64), *part = fm_xmalloc(strlen(p->stage) + 80);
    sprintf(path, "%s/%s.json", p->stage, split_names[s]);
    sprintf(part, "%s.partial", path);
    FILE *f = fopen(part, "wb");
    if (!f || fwrite(b.s, 1, b.len, f) != b.len || fclose(f) || rename(part, path)) {
      fm_err("%s: cannot write the manifest: %s", part, strerror(errno));
      rc = FM_EIO;
    }
    free(path);
    free(part);
    fm_str_free(&b);
  }
  rc = agree(p->world, rc);
  free(sums);
  free(prov);
  fm_str_free(&src);
  free(off);
  return rc;
}

void fm__prep_report(const Prep *p, const int64_t *tot, int64_t nW, const int64_t nsh[2], double secs) {
  FILE *o = p->log;
  if (!o) return;
  char b1[32], b2[32];
  fprintf(o, "== prep report ==\n");
  fprintf(o, "inputs       %d files, %s\n", p->nin, fm_fmt_bytes(b1, sizeof b1, (double)p->total_bytes));
  fprintf(o, "records      %s in %lld windows of %lld\n", fm_fmt_count(b1, sizeof b1, tot[ST_records]), (long long)nW,
          (long long)p->W);
  fprintf(o, "filtered     %s shorter than min_chars = %lld, %s longer than max_chars = %lld\n",
          fm_fmt_count(b1, sizeof b1, tot[ST_too_short]), (long long)p->min_chars,
          fm_fmt_count(b2, sizeof b2, tot[ST_too_long]), (long long)p->max_chars);
  fprintf(o, "bad records  %s skipped (on_bad_record = '%s')\n", fm_fmt_count(b1, sizeof b1, tot[ST_bad_skipped]),
          p->deck->c.prep.on_bad_record);
  for (int s = 0; s < 2; s++) {
    int64_t docs = tot[s ? ST_docs_valid : ST_docs_train], toks = tot[s ? ST_tokens_valid : ST_tokens_train],
            pad = tot[s ? ST_padding_valid : ST_padding_train], rows = tot[s ? ST_rows_valid : ST_rows_train],
            dropped = tot[s ? ST_dropped_valid : ST_dropped_train];
    if (s == 1 && docs == 0 && rows == 0) continue;
    fprintf(o, "%-5s        %s documents, %s tokens, %lld rows of %lld, padding %lld (%.4f%%), %lld shard%s\n",
            split_names[s], fm_fmt_count(b1, sizeof b1, docs), fm_fmt_count(b2, sizeof b2, toks), (long long)rows,
            (long long)p->R, (long long)pad, rows ? 100.0 * (double)pad / (double)(rows * p->R) : 0.0,
            (long long)nsh[s], nsh[s] == 1 ? "" : "s");
    if (dropped)
      fprintf(o,
              "             %lld documents longer than a row dropped by packing = 'bfd' (%lld tokens)\n"
              "             hint: packing = 'bfd_split' keeps them\n",
              (long long)dropped, (long long)tot[s ? ST_dropped_tok_valid : ST_dropped_tok_train]);
  }
  fprintf(o, "packing      %s, position ids %s, seq_len %lld, tokenizer %s\n", fm_packing_name(p->packing),
          fm_posids_name(p->pos), (long long)(p->R - 1), fm_tok_hash(p->tok));
  fprintf(o, "output       %s/train.json%s (%s)\n", p->out, nsh[1] || tot[ST_docs_valid] ? ", valid.json" : "",
          p->deck->c.prep.format);
  fprintf(o, "time         %.1f s\n", secs);
  fflush(o);
}

/* The prep settings a resumed run must share with the killed one. */
static void fingerprint(const Prep *p, char hex[65]) {
  const FmConfig *c = &p->deck->c;
  FmStr b;
  fm_str_init(&b);
  fm_str_printf(&b,
                "tok=%s seq=%lld pack=%s pos=%s mode=%s field=%s msg=%s tmpl=%s min=%lld max=%lld bad=%s "
                "vf=%.17g W=%lld seed=%lld bos=%s fmt=%s\n",
                fm_tok_hash(p->tok), (long long)c->prep.seq_len, c->prep.packing, c->prep.position_ids, c->prep.mode,
                c->prep.text_field, c->prep.messages_field, c->prep.chat_template, (long long)c->prep.min_chars,
                (long long)c->prep.max_chars, c->prep.on_bad_record, c->prep.valid_fraction,
                (long long)c->prep.window_docs, (long long)c->run.seed, c->prep.template_bos, "v2");
  for (int i = 0; i < c->prep.sections_n; i++) fm_str_printf(&b, "sec=%s\n", c->prep.sections[i]);
  for (int i = 0; i < c->prep.train_on_n; i++) fm_str_printf(&b, "train=%s\n", c->prep.train_on[i]);
  for (int i = 0; i < c->prep.role_names_n; i++)
    fm_str_printf(&b, "role=%s|%s|%s\n", c->prep.role_names[i], i < c->prep.role_prefix_n ? c->prep.role_prefix[i] : "",
                  i < c->prep.role_suffix_n ? c->prep.role_suffix[i] : "");
  /* an input edited in place keeps its size, not its mtime (st_dev is left
   * out: a resumed job may mount the file system on another node) */
  for (int i = 0; i < p->nin; i++) {
    struct stat st;
    if (stat(p->in[i].path, &st) != 0) memset(&st, 0, sizeof st); /* gone: its read fails with the reason */
    fm_str_printf(&b, "in=%d %lld %s mtime=%lld.%09ld ino=%llu\n", p->in[i].valid, (long long)p->in[i].bytes,
                  p->in[i].path, (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
  }
  uint8_t d[32];
  fm_sha256(b.s, b.len, d);
  fm_hex(d, 32, hex);
  fm_str_free(&b);
}

/* Whether dir holds a committed window file (win_*.bin). */
static bool has_windows(const char *dir) {
  DIR *d = opendir(dir);
  bool any = false;
  for (struct dirent *e; d && !any && (e = readdir(d));) {
    const size_t n = strlen(e->d_name);
    any = !strncmp(e->d_name, "win_", 4) && n > 8 && !strcmp(e->d_name + n - 4, ".bin");
  }
  if (d) closedir(d);
  return any;
}

/* Rank 0 prepares the output and work directories and checks that committed
 * windows there come from the same prep (a work directory without any, as a
 * prep stopped by a bad record in its first window leaves, is started over:
 * its fingerprint alone would refuse the deck the error's hint suggests). */
int fm__prep_prepare_dirs(Prep *p) {
  int rc = 0;
  p->out = fm_xstrdup(p->deck->c.prep.output);
  p->work = fm_xmalloc(strlen(p->out) + 16);
  sprintf(p->work, "%s/.prep_work", p->out);
  p->stage = fm_xmalloc(strlen(p->work) + 8);
  sprintf(p->stage, "%s/stage", p->work);
  if (p->rank == 0) {
    char fp[65], old[80] = "", *fpath = fm_xmalloc(strlen(p->work) + 16);
    fingerprint(p, fp);
    sprintf(fpath, "%s/fingerprint", p->work);
    if (fm_mkdirs(p->work)) {
      fm_err("%s: cannot create: %s\nhint: &prep output must be a writable directory", p->work, strerror(errno));
      rc = FM_EIO;
    } else {
      FILE *f = fopen(fpath, "r");
      if (f && !has_windows(p->work)) { /* an earlier prep stopped before its first window: nothing to keep */
        fclose(f);
        f = NULL;
      }
      if (f) {
        if (!fgets(old, sizeof old, f)) old[0] = 0;
        fclose(f);
        old[strcspn(old, "\n")] = 0;
        if (strcmp(old, fp) != 0) {
          fm_err(
              "%s: committed windows of a different prep (deck, tokenizer, inputs or window file version changed)\n"
              "hint: delete %s to start over, or run with the deck that made them",
              fpath, p->work);
          rc = FM_EDATA;
        } else if (p->log) {
          fprintf(p->log, "prep: resuming from the committed windows in %s\n", p->work);
        }
      } else {
        f = fopen(fpath, "w");
        if (!f || fprintf(f, "%s\n", fp) < 0 || fclose(f)) rc = FM_EIO;
      }
    }
    free(fpath);
  }
  return agree(p->world, rc);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Rank 0, after a prep's manifests are in place: files an earlier prep left
 * in the output directory that this store does not use (its shards past
 * this one's count or of the other format, and valid.json when this prep
 * made no validation split) are removed and listed. A stale valid.json
 * was read by training as this store's validation split. Only names prep
 * writes are touched: "train_NNNNN.h5", "train_NNNNN.<dataset>.bin",
 * likewise valid_, and valid.json. */
void fm__prep_remove_stale(const Prep *p, const int64_t nsh[2], bool wrote_valid) {
  if (p->rank != 0) return;
  const bool is_h5 = p->deck->c.choice[FM_KEY_prep_format] == FM_PREP_FORMAT_H5;
  DIR *d = opendir(p->out);
  char **names = NULL;
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *name = e->d_name;
    int s = !strncmp(name, "train_", 6) ? 0 : !strncmp(name, "valid_", 6) ? 1 : -1;
    bool stale = s == 1 && !wrote_valid;
    if (s < 0) {
      if (wrote_valid || strcmp(name, "valid.json") != 0) continue;
      stale = true;
    } else {
      char *end;
      const char *digits = name + 6;
      if (*digits < '0' || *digits > '9') continue;
      long long j = strtoll(digits, &end, 10);
      if (end - digits < 5) continue;
      bool h5 = !strcmp(end, ".h5"), bin = false;
      for (int k = 0; k < FM_SHARD_NDSETS && !h5 && !bin; k++) {
        const size_t l = strlen(fm__shard_dsets[k]);
        bin = end[0] == '.' && !strncmp(end + 1, fm__shard_dsets[k], l) && !strcmp(end + 1 + l, ".bin");
      }
      if (!h5 && !bin) continue;
      stale = stale || j >= nsh[s] || h5 != is_h5;
    }
    if (!stale) continue;
    names = fm_xrealloc(names, sizeof *names * (size_t)(n + 1));
    names[n++] = fm_xstrdup(name);
  }
  if (d) closedir(d);
  if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
  FmStr gone;
  fm_str_init(&gone);
  int removed = 0;
  for (int i = 0; i < n; i++) {
    char *path = fm_xmalloc(strlen(p->out) + strlen(names[i]) + 2);
    sprintf(path, "%s/%s", p->out, names[i]);
    if (unlink(path) == 0) {
      if (removed < 8) fm_str_printf(&gone, "%s%s", removed ? ", " : "", names[i]);
      removed++;
    } else {
      fm_warn0("prep: %s is left from an earlier prep and could not be removed: %s", path, strerror(errno));
    }
    free(path);
    free(names[i]);
  }
  free(names);
  if (removed && p->log)
    fprintf(p->log, "prep: removed %d file%s an earlier prep left in %s that this store does not use: %s%s\n",
            removed, removed == 1 ? "" : "s", p->out, gone.s, removed > 8 ? ", ..." : "");
  fm_str_free(&gone);
}

/* Rank 0: every file in the stage directory (prep writes only files there),
 * then the directory itself when rmdir_too. */
static void empty_stage(const Prep *p, bool rmdir_too) {
  DIR *d = opendir(p->stage);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *path = fm_xmalloc(strlen(p->stage) + strlen(e->d_name) + 2);
    sprintf(path, "%s/%s", p->stage, e->d_name);
    unlink(path);
    free(path);
  }
  if (d) closedir(d);
  if (rmdir_too) rmdir(p->stage);
}

int fm__prep_clear_stage(const Prep *p) {
  int rc = 0;
  if (p->rank == 0) {
    empty_stage(p, false); /* a killed earlier run's shards: this run writes them again */
    if (mkdir(p->stage, 0755) != 0 && errno != EEXIST) {
      fm_err("%s: cannot create: %s\nhint: &prep output must be a writable directory", p->stage, strerror(errno));
      rc = FM_EIO;
    }
  }
  return agree(p->world, rc);
}

void fm__prep_drop_stage(const Prep *p) {
  if (p->rank == 0) empty_stage(p, true);
}

/* Rank 0 moves the staged shards first, the manifests last: until train.json
 * is replaced, readers of the old store see its manifest (a kill between the
 * renames, a moment's window, leaves new shards under the old manifest,
 * which their checksums and row counts refuse). */
int fm__prep_publish(const Prep *p) {
  int rc = 0;
  if (p->rank == 0) {
    char **names = NULL;
    int n = 0;
    DIR *d = opendir(p->stage);
    if (!d) {
      fm_err("%s: cannot read: %s", p->stage, strerror(errno));
      rc = FM_EIO;
    }
    for (struct dirent *e; d && (e = readdir(d));) { /* the names first: renames change the directory */
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      names = fm_xrealloc(names, sizeof *names * (size_t)(n + 1));
      names[n++] = fm_xstrdup(e->d_name);
    }
    if (d) closedir(d);
    for (int i = 0; i < n && !rc; i++) { /* what a rename cannot replace, before anything moves */
      char *to = fm_xmalloc(strlen(p->out) + strlen(names[i]) + 2);
      sprintf(to, "%s/%s", p->out, names[i]);
      struct stat st;
      if (stat(to, &st) == 0 && S_ISDIR(st.st_mode)) {
        fm_err(
            "%s is a directory: the new store's file of that name cannot replace it; nothing was changed in %s\n"
            "hint: move it away and run the prep again (its windows are kept: it resumes)",
            to, p->out);
        rc = FM_EIO;
      }
      free(to);
    }
    static const char *const last[] = {"valid.json", "train.json"};
    for (int pass = 0; pass < 3; pass++) /* shards, valid.json, train.json */
      for (int i = 0; i < n && !rc; i++) {
        const bool json = !strcmp(names[i], last[0]) || !strcmp(names[i], last[1]);
        if (pass == 0 ? json : strcmp(names[i], last[pass - 1]) != 0) continue;
        char *from = fm_xmalloc(strlen(p->stage) + strlen(names[i]) + 2),
             *to = fm_xmalloc(strlen(p->out) + strlen(names[i]) + 2);
        sprintf(from, "%s/%s", p->stage, names[i]);
        sprintf(to, "%s/%s", p->out, names[i]);
        if (rename(from, to) != 0) {
          fm_err("%s: cannot move to %s: %s", from, to, strerror(errno));
          rc = FM_EIO;
        }
        free(from);
        free(to);
      }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!rc) rmdir(p->stage);
  }
  return agree(p->world, rc);
}

void fm__prep_remove_work(const Prep *p, int64_t nW) {
  if (p->rank != 0) return;
  empty_stage(p, true);
  for (int64_t w = 0; w < nW; w++) {
    char *s = fm__prep_win_path(p, w, false);
    unlink(s);
    free(s);
  }
  char *fp = fm_xmalloc(strlen(p->work) + 16);
  sprintf(fp, "%s/fingerprint", p->work);
  unlink(fp);
  free(fp);
  rmdir(p->work);
}
