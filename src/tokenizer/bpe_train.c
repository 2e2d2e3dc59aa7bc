/* bpe_train.c: byte-level BPE training (task='tokenizer').
 *   1. count: rank r pre-tokenizes documents i with i % P == r (the same
 *      splitting as encoding) and counts each distinct pre-token;
 *   2. merge the counts exactly: every rank's table goes to every rank
 *      (FmComm allgather) and is summed; integer sums do not depend on order,
 *      and words are then sorted by their bytes, so what follows is the same
 *      on every rank and for every P;
 *   3. merges: repeatedly take the adjacent pair with the highest count,
 *      ties broken by the lexicographically smallest (left bytes, right
 *      bytes), make it a token (or reuse the token with those bytes, as HF's
 *      BpeTrainer does), update the counts of the neighbouring pairs in the
 *      words that hold it (a max-heap with stale entries skipped, and a word
 *      list per pair, as HF tokenizers' trainer);
 *   4. ids 0..255 are the bytes, then merged tokens, then the specials.
 * Not here: reading corpora (the caller's read_doc), writing (fm_tok_save_json). */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/progress.h"
#include "fmhpc/runtime.h"
#include "tokenizer_internal.h"

/* ---- word counts: bytes -> count ------------------------------------------ */
typedef struct WSlot {
  uint64_t h; /* 0: empty */
  uint64_t off;
  uint32_t len;
  int64_t count;
} WSlot;
typedef struct Words {
  WSlot *slot;
  uint64_t cap, n;
  char *pool;
  size_t plen, pcap;
} Words;

static void words_init(Words *w) {
  memset(w, 0, sizeof *w);
  w->cap = 1 << 16;
  w->slot = fm_xcalloc(w->cap, sizeof *w->slot);
  w->pcap = 4096;
  w->pool = fm_xmalloc(w->pcap);
}
static void words_free(Words *w) { free(w->slot), free(w->pool); }

static void words_add(Words *w, const char *s, size_t n, int64_t count) {
  if ((w->n + 1) * 2 > w->cap) {
    uint64_t nc = w->cap * 2;
    WSlot *ns = fm_xcalloc(nc, sizeof *ns);
    for (uint64_t i = 0; i < w->cap; i++) {
      if (!w->slot[i].h) continue;
      uint64_t j = w->slot[i].h & (nc - 1);
      while (ns[j].h) j = (j + 1) & (nc - 1);
      ns[j] = w->slot[i];
    }
    free(w->slot);
    w->slot = ns;
    w->cap = nc;
  }
  uint64_t h = fm__tok_hash_bytes(s, n) | 1;
  uint64_t j = h & (w->cap - 1);
  for (; w->slot[j].h; j = (j + 1) & (w->cap - 1))
    if (w->slot[j].h == h && w->slot[j].len == n && !memcmp(w->pool + w->slot[j].off, s, n)) {
      w->slot[j].count += count;
      return;
    }
  if (w->plen + n > w->pcap) {
    w->pcap = (w->plen + n) * 2 + 4096;
    w->pool = fm_xrealloc(w->pool, w->pcap);
  }
  memcpy(w->pool + w->plen, s, n);
  w->slot[j] = (WSlot){h, w->plen, (uint32_t)n, count};
  w->plen += n;
  w->n++;
}

static void count_piece(void *ctx, const char *s, size_t n) { words_add(ctx, s, n, 1); }

/* Serialized table: per word u32 length, bytes, i64 count (host order: all
 * ranks of a job share one architecture). */
static char *words_pack(const Words *w, int64_t *nbytes) {
  size_t n = 0;
  for (uint64_t i = 0; i < w->cap; i++)
    if (w->slot[i].h) n += 12 + w->slot[i].len;
  char *buf = fm_xmalloc(n + 1), *p = buf;
  for (uint64_t i = 0; i < w->cap; i++) {
    const WSlot *e = &w->slot[i];
    if (!e->h) continue;
    memcpy(p, &e->len, 4);
    memcpy(p + 4, w->pool + e->off, e->len);
    memcpy(p + 4 + e->len, &e->count, 8);
    p += 12 + e->len;
  }
  *nbytes = (int64_t)n;
  return buf;
}

static void words_unpack(Words *w, const char *p, int64_t n) {
  for (const char *end = p + n; p < end;) {
    uint32_t len;
    int64_t count;
    memcpy(&len, p, 4);
    memcpy(&count, p + 4 + len, 8);
    words_add(w, p + 4, len, count);
    p += 12 + len;
  }
}

/* Every rank ends with the exact sum of all ranks' tables. */
static int words_allmerge(Words *w, FmComm *comm) {
  if (!comm || comm->size == 1) return 0;
  int64_t n, maxn = 0;
  char *mine = words_pack(w, &n);
  int64_t *sizes = fm_xmalloc(sizeof *sizes * (size_t)comm->size);
  int rc = fm_comm_allgather(comm, &n, sizes, 1, FM_DT_I64);
  for (int r = 0; !rc && r < comm->size; r++) maxn = sizes[r] > maxn ? sizes[r] : maxn;
  char *all = NULL;
  if (!rc) {
    mine = fm_xrealloc(mine, (size_t)maxn + 1);
    all = fm_xmalloc((size_t)maxn * (size_t)comm->size + 1);
    rc = fm_comm_allgather(comm, mine, all, maxn, FM_DT_U8);
  }
  if (!rc) {
    Words sum;
    words_init(&sum);
    for (int r = 0; r < comm->size; r++) words_unpack(&sum, all + (size_t)r * (size_t)maxn, sizes[r]);
    words_free(w);
    *w = sum;
  }
  free(all), free(mine), free(sizes);
  return rc;
}

/* ---- the merge loop ------------------------------------------------------- */
typedef struct Pair {
  int32_t l, r;
  int64_t count;
  int32_t *words; /* words that held this pair when it was counted (may repeat) */
  int64_t nw, capw;
} Pair;

typedef struct HeapE {
  int64_t count;
  int32_t pair;
} HeapE;

typedef struct Trainer {
  FmTokenizer *t;  /* the tokens so far (bytes, vocab map) */
  int32_t *sym;    /* all words' symbols */
  int64_t *wstart; /* word w: sym[wstart[w] .. wstart[w] + wlen[w]) */
  int32_t *wlen;
  int64_t *wcount;
  int64_t *wstamp; /* last merge that visited the word */
  int64_t nwords;
  Pair *pairs;
  int64_t npairs, cap_pairs;
  uint64_t *pkey; /* open addressing: (l,r) key -> pair index + 1 */
  int32_t *pidx;
  uint64_t pcap;
  HeapE *heap;
  int64_t nheap, cap_heap;
  int32_t *changed;
  int64_t nchanged, cap_changed;
  uint8_t *is_changed;
} Trainer;

static int cmp_bytes(const FmTokenizer *t, int32_t a, int32_t b) {
  uint32_t la = t->len[a], lb = t->len[b];
  int c = memcmp(t->pool + t->off[a], t->pool + t->off[b], la < lb ? la : lb);
  return c ? c : (la < lb ? -1 : la > lb);
}

/* a before b: higher count, then smaller (left bytes, right bytes). */
static int heap_before(const Trainer *tr, const HeapE *a, const HeapE *b) {
  if (a->count != b->count) return a->count > b->count;
  const Pair *x = &tr->pairs[a->pair], *y = &tr->pairs[b->pair];
  int c = cmp_bytes(tr->t, x->l, y->l);
  if (!c) c = cmp_bytes(tr->t, x->r, y->r);
  return c < 0;
}

static void heap_push(Trainer *tr, int64_t count, int32_t pair) {
  if (tr->nheap == tr->cap_heap) {
    tr->cap_heap = tr->cap_heap ? 2 * tr->cap_heap : 4096;
    tr->heap = fm_xrealloc(tr->heap, sizeof *tr->heap * (size_t)tr->cap_heap);
  }
  HeapE e = {count, pair};
  int64_t i = tr->nheap++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_before(tr, &e, &tr->heap[p])) break;
    tr->heap[i] = tr->heap[p];
    i = p;
  }
  tr->heap[i] = e;
}

static HeapE heap_pop(Trainer *tr) {
  HeapE top = tr->heap[0], e = tr->heap[--tr->nheap];
  int64_t i = 0, n = tr->nheap;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_before(tr, &tr->heap[c + 1], &tr->heap[c])) c++;
    if (!heap_before(tr, &tr->heap[c], &e)) break;
    tr->heap[i] = tr->heap[c];
    i = c;
  }
  if (n > 0) tr->heap[i] = e;
  return top;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int32_t pair_find(Trainer *tr, int32_t l, int32_t r, int create) {
  uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
  if (create && (uint64_t)(tr->npairs + 1) * 2 > tr->pcap) {
    uint64_t nc = tr->pcap ? tr->pcap * 2 : 1 << 16;
    uint64_t *nk = fm_xmalloc(nc * sizeof *nk);
    int32_t *ni = fm_xmalloc(nc * sizeof *ni);
    for (uint64_t i = 0; i < nc; i++) ni[i] = -1;
    for (uint64_t i = 0; i < tr->pcap; i++) {
      if (tr->pidx[i] < 0) continue;
      uint64_t j = mix(tr->pkey[i]) & (nc - 1);
      while (ni[j] >= 0) j = (j + 1) & (nc - 1);
      nk[j] = tr->pkey[i], ni[j] = tr->pidx[i];
    }
    free(tr->pkey), free(tr->pidx);
    tr->pkey = nk, tr->pidx = ni, tr->pcap = nc;
  }
  uint64_t j = mix(k) & (tr->pcap - 1);
  for (; tr->pidx[j] >= 0; j = (j + 1) & (tr->pcap - 1))
    if (tr->pkey[j] == k) return tr->pidx[j];
  if (!create) return -1;
  if (tr->npairs == tr->cap_pairs) {
    tr->cap_pairs = tr->cap_pairs ? 2 * tr->cap_pairs : 1 << 14;
    tr->pairs = fm_xrealloc(tr->pairs, sizeof *tr->pairs * (size_t)tr->cap_pairs);
    tr->is_changed = fm_xrealloc(tr->is_changed, (size_t)tr->cap_pairs);
  }
  int32_t p = (int32_t)tr->npairs++;
  tr->pairs[p] = (Pair){l, r, 0, NULL, 0, 0};
  tr->is_changed[p] = 0;
  tr->pkey[j] = k, tr->pidx[j] = p;
  return p;
}

static void pair_add(Trainer *tr, int32_t l, int32_t r, int64_t delta, int32_t w) {
  int32_t p = pair_find(tr, l, r, 1);
  Pair *q = &tr->pairs[p];
  q->count += delta;
  if (delta > 0) {
    if (q->nw == q->capw) q->words = fm_xrealloc(q->words, sizeof *q->words * (size_t)(q->capw = q->capw ? 2 * q->capw : 4));
    q->words[q->nw++] = w;
  }
  if (!tr->is_changed[p]) {
    tr->is_changed[p] = 1;
    if (tr->nchanged == tr->cap_changed)
      tr->changed = fm_xrealloc(tr->changed, sizeof *tr->changed * (size_t)(tr->cap_changed = tr->cap_changed ? 2 * tr->cap_changed : 1024));
    tr->changed[tr->nchanged++] = p;
  }
}

/* Replace every non-overlapping A B (left to right) in word w by N. */
static void merge_word(Trainer *tr, int32_t w, int32_t A, int32_t B, int32_t N) {
  int32_t *s = tr->sym + tr->wstart[w];
  int32_t n = tr->wlen[w];
  int64_t c = tr->wcount[w];
  int32_t k = 0; /* write position */
  for (int32_t i = 0; i < n;) {
    if (i + 1 < n && s[i] == A && s[i + 1] == B) {
      if (k > 0) {
        pair_add(tr, s[k - 1], A, -c, w);
        pair_add(tr, s[k - 1], N, c, w);
      }
      if (i + 2 < n) {
        pair_add(tr, B, s[i + 2], -c, w);
        pair_add(tr, N, s[i + 2], c, w);
      }
      s[k++] = N;
      i += 2;
    } else {
      s[k++] = s[i++];
    }
  }
  tr->wlen[w] = k;
}

static int cmp_slot_bytes(const void *a, const void *b, const char *pool) {
  const WSlot *x = a, *y = b;
  int c = memcmp(pool + x->off, pool + y->off, x->len < y->len ? x->len : y->len);
  return c ? c : (x->len < y->len ? -1 : x->len > y->len);
}
static const char *sort_pool; /* qsort has no context argument in C11 */
static int cmp_slot_q(const void *a, const void *b) { return cmp_slot_bytes(a, b, sort_pool); }

static void trainer_load_words(Trainer *tr, Words *w) {
  WSlot *list = fm_xmalloc(sizeof *list * (w->n + 1));
  int64_t n = 0, total = 0;
  for (uint64_t i = 0; i < w->cap; i++)
    if (w->slot[i].h) list[n++] = w->slot[i], total += w->slot[i].len;
  sort_pool = w->pool;
  qsort(list, (size_t)n, sizeof *list, cmp_slot_q);
  tr->nwords = n;
  tr->sym = fm_xmalloc(sizeof *tr->sym * (size_t)(total + 1));
  tr->wstart = fm_xmalloc(sizeof *tr->wstart * (size_t)(n + 1));
  tr->wlen = fm_xmalloc(sizeof *tr->wlen * (size_t)(n + 1));
  tr->wcount = fm_xmalloc(sizeof *tr->wcount * (size_t)(n + 1));
  tr->wstamp = fm_xcalloc((size_t)(n + 1), sizeof *tr->wstamp);
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    tr->wstart[i] = at;
    tr->wlen[i] = (int32_t)list[i].len;
    tr->wcount[i] = list[i].count;
    for (uint32_t k = 0; k < list[i].len; k++) tr->sym[at++] = (uint8_t)w->pool[list[i].off + k];
  }
  free(list);
  for (int64_t i = 0; i < n; i++) {
    const int32_t *s = tr->sym + tr->wstart[i];
    for (int32_t k = 0; k + 1 < tr->wlen[i]; k++) pair_add(tr, s[k], s[k + 1], tr->wcount[i], (int32_t)i);
  }
}

static void trainer_free(Trainer *tr) {
  for (int64_t i = 0; i < tr->npairs; i++) free(tr->pairs[i].words);
  free(tr->pairs), free(tr->pkey), free(tr->pidx), free(tr->heap), free(tr->changed), free(tr->is_changed);
  free(tr->sym), free(tr->wstart), free(tr->wlen), free(tr->wcount), free(tr->wstamp);
}

static void flush_changed(Trainer *tr) {
  for (int64_t i = 0; i < tr->nchanged; i++) {
    int32_t p = tr->changed[i];
    tr->is_changed[p] = 0;
    if (tr->pairs[p].count > 0) heap_push(tr, tr->pairs[p].count, p);
  }
  tr->nchanged = 0;
}

static int run_merges(Trainer *tr, int64_t target, int64_t min_freq, FILE *log, double every) {
  FmTokenizer *t = tr->t;
  int64_t ntok = 256, done = 0;
  FmProgress pg; /* merges done of at most target - 256 (min_freq may stop it early) */
  fm_progress_start(&pg, log, "tokenizer", "merges", target - 256, every);
  flush_changed(tr);
  size_t bcap = 256;
  char *buf = fm_xmalloc(bcap);
  while (ntok < target && tr->nheap > 0) {
    HeapE top = heap_pop(tr);
    Pair *q = &tr->pairs[top.pair];
    if (top.count != q->count) { /* stale: requeue with the current count */
      if (q->count > 0) heap_push(tr, q->count, top.pair);
      continue;
    }
    if (q->count < min_freq) break;
    int32_t A = q->l, B = q->r;
    size_t la = t->len[A], lb = t->len[B];
    if (la + lb > bcap) buf = fm_xrealloc(buf, bcap = 2 * (la + lb));
    memcpy(buf, t->pool + t->off[A], la);
    memcpy(buf + la, t->pool + t->off[B], lb);
    int32_t N = fm__tok_lookup(t, buf, la + lb);
    if (N < 0) {
      N = (int32_t)ntok++;
      fm__tok_set(t, N, buf, la + lb, FM__TOK_MODEL, NULL);
    }
    fm__tok_add_merge(t, A, B, N);
    done++;
    /* The word list may grow while we walk it only for pairs holding N. */
    int64_t nw = q->nw;
    int32_t *ws = q->words;
    q->words = NULL, q->nw = q->capw = 0;
    for (int64_t i = 0; i < nw; i++) {
      int32_t w = ws[i];
      if (tr->wstamp[w] == done) continue;
      tr->wstamp[w] = done;
      merge_word(tr, w, A, B, N);
    }
    free(ws);
    tr->pairs[top.pair].count = 0;
    flush_changed(tr);
    fm_progress_tick(&pg, done);
  }
  free(buf);
  return (int)(ntok - 256);
}

/* ---- entry point -------------------------------------------------------- */
int fm_bpe_train(const FmBpeTrainOpts *o, FmComm *comm, FmTokenizer **out, FILE *log) {
  *out = NULL;
  int rank = comm ? comm->rank : 0, size = comm ? comm->size : 1;
  if (rank != 0) log = NULL;
  double t0 = fm_now_s();
  int64_t target = o->vocab_size - o->nspecials;
  if (target < 256 || o->nspecials < 0 || !o->read_doc) {
    if (rank == 0)
      fprintf(stderr, "tokenizer: vocab_size %lld leaves %lld ids after %d special tokens; at least 256 (the bytes) "
                      "are needed\n", (long long)o->vocab_size, (long long)target, o->nspecials);
    return FM_EINVAL;
  }
  /* A bytes-only tokenizer that pre-tokenizes exactly as encoding will. */
  FmTokenizer *t = fm__tok_new(FM__TOK_MERGES);
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    fm__tok_set(t, b, &c, 1, FM__TOK_MODEL, NULL);
  }
  fm__tok_set_pattern(t, o->pattern ? o->pattern : FM_TOK_PATTERN_CL100K);
  int rc = fm__tok_finish(t, "tokenizer training pattern", rank == 0 ? stderr : NULL);
  /* 1. count */
  Words w;
  words_init(&w);
  int64_t ndocs = 0, nbytes = 0;
  FmTokCache *cache = rc ? NULL : fm_tok_cache_new(t);
  for (int64_t i = rank; !rc && i < o->ndocs; i += size) {
    char *text = NULL;
    size_t len = 0;
    rc = o->read_doc(o->ctx, i, &text, &len);
    if (!rc) rc = fm__tok_pretokenize(t, cache, text, len, count_piece, &w);
    if (rc) fm_err("tokenizer: document %lld: %s\n", (long long)i, fm_strerror(rc));
    free(text);
    ndocs++, nbytes += (int64_t)len;
  }
  fm_tok_cache_free(cache);
  /* Every rank agrees on failure before any collective that could hang. */
  int32_t bad = rc != 0, anybad = bad;
  if (comm) fm_comm_allreduce(comm, &bad, &anybad, 1, FM_DT_I32, FM_OP_MAX);
  if (anybad) {
    words_free(&w);
    fm_tok_free(t);
    return rc ? rc : FM_EIO;
  }
  int64_t tot[2] = {ndocs, nbytes}, sum[2] = {ndocs, nbytes};
  if (comm) fm_comm_allreduce(comm, tot, sum, 2, FM_DT_I64, FM_OP_SUM);
  /* 2. merge the counts */
  rc = words_allmerge(&w, comm);
  if (rc) {
    words_free(&w);
    fm_tok_free(t);
    return rc;
  }
  if (log) {
    char a[32], b[32], c[32];
    fprintf(log, "tokenizer: counted %s distinct words in %s documents (%s bytes) on %d rank%s, %.1f s\n",
            fm_fmt_count(a, sizeof a, (int64_t)w.n), fm_fmt_count(b, sizeof b, sum[0]), fm_fmt_count(c, sizeof c, sum[1]),
            size, size == 1 ? "" : "s", fm_now_s() - t0);
  }
  /* 3. merges */
  Trainer tr;
  memset(&tr, 0, sizeof tr);
  tr.t = t;
  trainer_load_words(&tr, &w);
  words_free(&w);
  int64_t min_freq = o->min_frequency > 1 ? o->min_frequency : 1;
  int nmerged = run_merges(&tr, target, min_freq, log, o->progress_every_s > 0 ? o->progress_every_s : -1);
  trainer_free(&tr);
  /* 4. specials after the merged tokens */
  int64_t next = 256 + nmerged;
  for (int i = 0; i < o->nspecials; i++) {
    const char *s = o->specials[i];
    int32_t other = -1;
    if (fm__tok_set(t, (int32_t)(next + i), s, strlen(s), FM__TOK_ADDED | FM__TOK_SPECIAL, &other)) rc = FM_EINVAL;
  }
  if (!rc) rc = fm__tok_finish(t, "trained tokenizer", rank == 0 ? stderr : NULL);
  /* The EOS is the first special, whatever its name. */
  if (!rc && o->nspecials > 0) t->eos = (int32_t)next;
  if (log && !rc)
    fprintf(log, "tokenizer: done: %lld tokens (%d merges, %d specials), hash %.16s, %.1f s\n",
            (long long)fm_tok_vocab_size(t), nmerged, o->nspecials, fm_tok_hash(t), fm_now_s() - t0);
  if (rc) {
    fm_tok_free(t);
    return rc;
  }
  *out = t;
  return 0;
}
