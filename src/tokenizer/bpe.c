/* bpe.c: the byte-level BPE merge loop over one pre-token: start from byte
 * tokens and merge the leftmost adjacent pair of lowest priority until none
 * is left (tokenizer.c explains why this is every reference's order). Short
 * pre-tokens use arrays and a linear scan, long ones a heap. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "tokenizer_internal.h"

size_t fm__tok_small_max = 256;

/* ---- the merge loop ---------------------------------------------------- */
/* Small pre-tokens: arrays, a linear scan for the leftmost minimum. */
static int64_t bpe_small(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  int32_t prio[512], mer[512];
  int64_t m = (int64_t)n;
  for (size_t i = 0; i < n; i++) out[i] = t->byte_id[s[i]];
  for (int64_t i = 0; i + 1 < m; i++) {
    const FmTokPSlot *e = fm__tok_pmap_get(&t->pairs, out[i], out[i + 1]);
    prio[i] = e ? e->prio : INT32_MAX;
    mer[i] = e ? e->merged : -1;
  }
  while (m > 1) {
    int64_t best = -1;
    int32_t bp = INT32_MAX;
    for (int64_t i = 0; i + 1 < m; i++)
      if (prio[i] < bp) bp = prio[i], best = i;
    if (best < 0) break;
    out[best] = mer[best];
    memmove(out + best + 1, out + best + 2, (size_t)(m - best - 2) * sizeof *out);
    memmove(prio + best + 1, prio + best + 2, (size_t)(m - best - 2) * sizeof *prio);
    memmove(mer + best + 1, mer + best + 2, (size_t)(m - best - 2) * sizeof *mer);
    m--;
    for (int64_t i = best - 1; i <= best; i++) {
      if (i < 0 || i + 1 >= m) continue;
      const FmTokPSlot *e = fm__tok_pmap_get(&t->pairs, out[i], out[i + 1]);
      prio[i] = e ? e->prio : INT32_MAX;
      mer[i] = e ? e->merged : -1;
    }
  }
  return m;
}

/* Long pre-tokens (runs of punctuation or spaces, base64 blobs): symbols in
 * a linked list and a binary heap of (priority, position), stale entries
 * skipped on pop, as HF tokenizers' Word::merge_all. Same merges as
 * bpe_small, in O(n log n). */
typedef struct HeapE {
  int32_t prio;
  int32_t pos;
  int32_t merged;
  int32_t right; /* the symbol id right of pos when pushed */
} HeapE;
static int heap_less(const HeapE *a, const HeapE *b) {
  return a->prio != b->prio ? a->prio < b->prio : a->pos < b->pos;
}
static void heap_push(HeapE *h, int64_t *n, HeapE e) {
  int64_t i = (*n)++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_less(&e, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = e;
}
static HeapE heap_pop(HeapE *h, int64_t *n) {
  HeapE top = h[0], e = h[--(*n)];
  int64_t i = 0;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
    if (!heap_less(&h[c], &e)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = e;
  return top;
}

static int64_t bpe_long(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  int32_t *sym = fm_xmalloc(n * sizeof *sym), *prev = fm_xmalloc(n * sizeof *prev), *next = fm_xmalloc(n * sizeof *next);
  HeapE *heap = fm_xmalloc(2 * n * sizeof *heap + sizeof *heap);
  int64_t nh = 0;
  for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]], prev[i] = (int32_t)i - 1, next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  for (size_t i = 0; i + 1 < n; i++) {
    const FmTokPSlot *e = fm__tok_pmap_get(&t->pairs, sym[i], sym[i + 1]);
    if (e) heap_push(heap, &nh, (HeapE){e->prio, (int32_t)i, e->merged, sym[i + 1]});
  }
  while (nh > 0) {
    HeapE top = heap_pop(heap, &nh);
    int32_t p = top.pos, q = next[p];
    /* Stale: the symbol was merged away or its pair changed since the push. */
    if (sym[p] < 0 || q < 0 || sym[q] != top.right) continue;
    const FmTokPSlot *cur = fm__tok_pmap_get(&t->pairs, sym[p], sym[q]);
    if (!cur || cur->merged != top.merged || cur->prio != top.prio) continue;
    sym[p] = top.merged;
    sym[q] = -1;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) {
      const FmTokPSlot *e = fm__tok_pmap_get(&t->pairs, sym[prev[p]], sym[p]);
      if (e) heap_push(heap, &nh, (HeapE){e->prio, prev[p], e->merged, sym[p]});
    }
    if (next[p] >= 0) {
      const FmTokPSlot *e = fm__tok_pmap_get(&t->pairs, sym[p], sym[next[p]]);
      if (e) heap_push(heap, &nh, (HeapE){e->prio, p, e->merged, sym[next[p]]});
    }
  }
  int64_t m = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) out[m++] = sym[i];
  free(sym), free(prev), free(next), free(heap);
  return m;
}

int64_t fm__tok_bpe(const FmTokenizer *t, const uint8_t *s, size_t n, int32_t *out) {
  if (n == 0) return 0;
  return n <= fm__tok_small_max && n <= 512 ? bpe_small(t, s, n, out) : bpe_long(t, s, n, out);
}
