/* pack.c: packing documents into rows of R = seq_len + 1 ids (simple,
 * bfd, bfd_split), with loss masks, segment ids and position ids. A pure
 * function of its input: prep packs each window with it independently, which
 * is what makes the output independent of the rank count. Reading and
 * writing shards is elsewhere (store_*.c). */
#include "fmhpc/data.h"

#include <stdlib.h>
#include <string.h>

static const char *const packing_names[] = {"simple", "bfd", "bfd_split"};
static const char *const posids_names[] = {"none", "doc_reset", "continuous"};

int fm_packing_parse(const char *s, FmPacking *p) {
  for (int i = 0; i < 3; i++)
    if (!fm_strcasecmp(s, packing_names[i])) {
      *p = (FmPacking)i;
      return 0;
    }
  return FM_EINVAL;
}
int fm_posids_parse(const char *s, FmPosIds *p) {
  for (int i = 0; i < 3; i++)
    if (!fm_strcasecmp(s, posids_names[i])) {
      *p = (FmPosIds)i;
      return 0;
    }
  return FM_EINVAL;
}
const char *fm_packing_name(FmPacking p) { return packing_names[p]; }
const char *fm_posids_name(FmPosIds p) { return posids_names[p]; }

/* Open a new row; returns its index. Its columns are written by put_piece
 * from column 0 on and the rest by pad_tail when packing ends (not filled
 * here first: most rows of a long corpus are full, so padding every new row
 * wrote 13 bytes a column twice). */
static int64_t new_row(FmPacked *o) {
  if (o->rows == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 64;
    size_t n = (size_t)(o->cap * o->R);
    o->tokens = fm_xrealloc(o->tokens, n * sizeof *o->tokens);
    if (!o->lean || o->has_mask) o->loss_mask = fm_xrealloc(o->loss_mask, n);
    if (!o->lean) {
      o->position_ids = fm_xrealloc(o->position_ids, n * sizeof *o->position_ids);
      o->segment_ids = fm_xrealloc(o->segment_ids, n * sizeof *o->segment_ids);
    }
  }
  return o->rows++;
}

/* Columns [col, R) of row r as padding. */
static void pad_tail(FmPacked *o, int64_t r, int64_t col, FmPosIds pos, uint32_t pad_id) {
  int64_t base = r * o->R, n = o->R - col;
  uint32_t *tk = o->tokens + base;
  for (int64_t t = col; t < o->R; t++) tk[t] = pad_id;
  if (o->lean) { /* no position or segment ids (and no mask unless a document had one) */
    if (o->has_mask) memset(o->loss_mask + base + col, 0, (size_t)n);
    return;
  }
  int32_t *ps = o->position_ids + base;
  if (pos == FM_POS_CONTINUOUS)
    for (int64_t t = col; t < o->R; t++) ps[t] = (int32_t)t;
  else
    memset(ps + col, 0, (size_t)n * sizeof *ps);
  memset(o->loss_mask + base + col, 0, (size_t)n);
  memset(o->segment_ids + base + col, 0, (size_t)n * sizeof *o->segment_ids);
}

/* Copy piece d[off, off+len) to row r at column col as segment seg. */
static void put_piece(FmPacked *o, int64_t r, int64_t col, int32_t seg, const FmDoc *d, int64_t off, int64_t len,
                      FmPosIds pos) {
  int64_t base = r * o->R + col;
  /* one loop an array (each vectorises): ids as they are (int32 -> uint32 keeps the bits) */
  memcpy(o->tokens + base, d->tok + off, (size_t)len * sizeof *o->tokens);
  o->tokens_real += len;
  if (o->lean) {
    if (o->npiece == o->piececap) {
      o->piececap = 2 * o->piececap + 1024;
      o->piece_row = fm_xrealloc(o->piece_row, (size_t)o->piececap * sizeof *o->piece_row);
      o->piece_len = fm_xrealloc(o->piece_len, (size_t)o->piececap * sizeof *o->piece_len);
    }
    o->piece_row[o->npiece] = r;
    o->piece_len[o->npiece++] = (int32_t)len;
    if (!o->has_mask) return;
    uint8_t odd = 0, *m = o->loss_mask + base;
    if (d->mask) {
      memcpy(m, d->mask + off, (size_t)len);
      for (int64_t t = 0; t < len; t++) odd |= (uint8_t)(m[t] ^ 1);
    } else {
      memset(m, 1, (size_t)len);
    }
    o->mask_odd |= odd != 0;
    return;
  }
  if (d->mask)
    memcpy(o->loss_mask + base, d->mask + off, (size_t)len);
  else
    memset(o->loss_mask + base, 1, (size_t)len);
  int32_t *sg = o->segment_ids + base, *ps = o->position_ids + base, p0 = pos == FM_POS_CONTINUOUS ? (int32_t)col : 0;
  for (int64_t t = 0; t < len; t++) sg[t] = seg;
  for (int64_t t = 0; t < len; t++) ps[t] = p0 + (int32_t)t;
}

static void pack_simple(FmPacked *o, const FmDoc *docs, int64_t n, FmPosIds pos, uint32_t pad_id) {
  int64_t r = -1, col = o->R;
  int32_t seg = 0;
  for (int64_t i = 0; i < n; i++) {
    for (int64_t off = 0; off < docs[i].n;) {
      if (col == o->R) {
        r = new_row(o);
        col = 0;
        seg = 0;
      }
      int64_t len = docs[i].n - off < o->R - col ? docs[i].n - off : o->R - col;
      put_piece(o, r, col, ++seg, &docs[i], off, len, pos);
      col += len;
      off += len;
    }
    if (docs[i].n) o->docs++;
  }
  if (r >= 0) pad_tail(o, r, col, pos, pad_id); /* only the last row can be short */
}

/* ---- best-fit decreasing --------------------------------------------------
 * Items (whole documents, or R-id chunks and remainders for bfd_split) in
 * decreasing length, ties in input order; each goes to the open row with the
 * least room that still fits it (among equals, the row that reached that room
 * last), else to a new row. Open rows are kept in
 * buckets by remaining room, and a segment tree over room finds the smallest
 * room >= len in O(log R). */
typedef struct Item {
  int64_t doc, off, len;
} Item;

/* Items in decreasing length, ties in input order (document, then offset: the order they were made in), by a
 * stable counting sort over lengths 1..R (qsort and its comparisons were ~0.4% of a prep's CPU). */
static Item *sort_items(Item *items, int64_t n, int64_t R) {
  int64_t *at = fm_xcalloc((size_t)(R + 2), sizeof *at);
  for (int64_t k = 0; k < n; k++) at[R - items[k].len + 1]++; /* longest first: length R at slot 0 */
  for (int64_t l = 1; l <= R + 1; l++) at[l] += at[l - 1];
  Item *out = fm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *out);
  for (int64_t k = 0; k < n; k++) out[at[R - items[k].len]++] = items[k];
  free(at);
  free(items);
  return out;
}

typedef struct Fit {
  int64_t size; /* leaves: a power of two > R */
  int64_t *cnt; /* segment tree of open-row counts per room */
  int64_t *head, *next, *fill; /* bucket lists by room; per row: next, columns used */
  int32_t *nseg;
} Fit;

static void fit_add(Fit *f, int64_t room, int64_t d) {
  for (int64_t i = room + f->size; i >= 1; i /= 2) f->cnt[i] += d;
}
/* Smallest room >= len with an open row, or -1. */
static int64_t fit_find(const Fit *f, int64_t len) {
  int64_t i = len + f->size;
  if (f->cnt[i] > 0) return len;
  /* climb until a right sibling holds a count, then descend leftmost */
  while (i > 1) {
    if ((i & 1) == 0 && f->cnt[i + 1] > 0) {
      i = i + 1;
      while (i < f->size) i = f->cnt[2 * i] > 0 ? 2 * i : 2 * i + 1;
      return i - f->size;
    }
    i /= 2;
  }
  return -1;
}

static void pack_bfd(FmPacked *o, const FmDoc *docs, int64_t n, bool split, FmPosIds pos, uint32_t pad_id) {
  int64_t R = o->R, nitems = 0, cap = n + 16;
  Item *items = fm_xmalloc((size_t)cap * sizeof *items);
  for (int64_t i = 0; i < n; i++) {
    if (docs[i].n == 0) continue;
    if (docs[i].n > R && !split) {
      o->dropped_docs++;
      o->dropped_tokens += docs[i].n;
      continue;
    }
    o->docs++;
    for (int64_t off = 0; off < docs[i].n; off += R) {
      if (nitems == cap) items = fm_xrealloc(items, (size_t)(cap *= 2) * sizeof *items);
      items[nitems++] = (Item){i, off, docs[i].n - off < R ? docs[i].n - off : R};
    }
  }
  items = sort_items(items, nitems, R);
  Fit f = {0};
  for (f.size = 1; f.size <= R; f.size *= 2) {}
  f.cnt = fm_xcalloc((size_t)(2 * f.size), sizeof *f.cnt);
  f.head = fm_xmalloc((size_t)(R + 1) * sizeof *f.head);
  for (int64_t k = 0; k <= R; k++) f.head[k] = -1;
  int64_t row0 = o->rows, rcap = nitems + 1;
  f.next = fm_xmalloc((size_t)rcap * sizeof *f.next);
  f.fill = fm_xcalloc((size_t)rcap, sizeof *f.fill);
  f.nseg = fm_xcalloc((size_t)rcap, sizeof *f.nseg);
  for (int64_t k = 0; k < nitems; k++) {
    const Item *it = &items[k];
    int64_t room = fit_find(&f, it->len), lr;
    if (room < 0) {
      lr = new_row(o) - row0;
      room = R;
    } else {
      lr = f.head[room];
      f.head[room] = f.next[lr];
      fit_add(&f, room, -1);
    }
    put_piece(o, row0 + lr, f.fill[lr], ++f.nseg[lr], &docs[it->doc], it->off, it->len, pos);
    f.fill[lr] += it->len;
    room -= it->len;
    if (room > 0) {
      f.next[lr] = f.head[room];
      f.head[room] = lr;
      fit_add(&f, room, +1);
    }
  }
  for (int64_t lr = 0; lr < o->rows - row0; lr++) pad_tail(o, row0 + lr, f.fill[lr], pos, pad_id);
  free(items);
  free(f.cnt);
  free(f.head);
  free(f.next);
  free(f.fill);
  free(f.nseg);
}

int fm_pack(FmPacked *out, const FmDoc *docs, int64_t n, int64_t seq_len, FmPacking how, FmPosIds pos,
            uint32_t pad_id) {
  if (seq_len < 1 || (out->R && out->R != seq_len + 1)) return FM_EINVAL;
  if (out->lean && (out->rows || out->npiece)) return FM_EINVAL; /* one call on an empty FmPacked */
  out->R = seq_len + 1;
  if (out->lean) {
    out->has_mask = out->mask_odd = false;
    for (int64_t i = 0; i < n && !out->has_mask; i++) out->has_mask = docs[i].mask != NULL;
    if (out->has_mask && out->cap) out->loss_mask = fm_xrealloc(out->loss_mask, (size_t)(out->cap * out->R));
  }
  int64_t rows0 = out->rows, real0 = out->tokens_real;
  if (how == FM_PACK_SIMPLE) pack_simple(out, docs, n, pos, pad_id);
  else pack_bfd(out, docs, n, how == FM_PACK_BFD_SPLIT, pos, pad_id);
  out->padding += (out->rows - rows0) * out->R - (out->tokens_real - real0);
  return 0;
}

void fm_pack_segments(const FmPacked *p, int32_t *out) {
  if (p->rows == 0) return; /* nothing to write (and out may be NULL) */
  int32_t *cnt = out, *len = out + p->rows;
  memset(cnt, 0, (size_t)p->rows * sizeof *cnt);
  for (int64_t k = 0; k < p->npiece; k++) cnt[p->piece_row[k]]++;
  /* a stable counting sort by row: a row's pieces were placed from column 0 on, so their order is column order */
  int64_t *at = fm_xmalloc((size_t)(p->rows + 1) * sizeof *at);
  for (int64_t r = 0, s = 0; r < p->rows; r++) {
    at[r] = s;
    s += cnt[r];
  }
  for (int64_t k = 0; k < p->npiece; k++) len[at[p->piece_row[k]]++] = p->piece_len[k];
  free(at);
}

void fm_packed_free(FmPacked *p) {
  free(p->tokens);
  free(p->loss_mask);
  free(p->position_ids);
  free(p->segment_ids);
  free(p->piece_row);
  free(p->piece_len);
  memset(p, 0, sizeof *p);
}
