/* store.c: the one reader interface over packed shards. Opens a prep
 * manifest (h5 or bin shards) or a single .h5 shard, maps a sample id to
 * (shard, row), reads rows shard by shard (sorted, deduplicated, so HDF5 gets
 * one hyperslab union per shard) and turns stored rows of R ids into model
 * inputs, targets and masks. The shard formats live in store_h5.c and
 * store_bin.c. */
#include "fmhpc/data.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmhpc/hash.h"
#include "fmhpc/json.h"

/* A barrier that sleeps while it waits: Open MPI's blocking collectives
 * poll, so a rank that arrives first (a window or a shard part smaller than
 * another rank's) spends the wait at full CPU. prep and the shard writers call
 * this where ranks arrive unevenly; it polls an MPI_Ibarrier with sleeps
 * growing from 20 us to 1 ms. */
int fm__idle_barrier(FmComm *c) {
  if (c->size == 1) return 0;
  MPI_Request req;
  if (MPI_Ibarrier(c->mpi, &req) != MPI_SUCCESS) return FM_EMPI;
  long ns = 20000;
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return FM_EMPI;
    if (done) return 0;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    if (ns < 1000000) ns *= 2;
  }
}

struct FmStore {
  FmStoreInfo info;
  FmComm *comm;
  int nshards;
  FmShardReader **shard;
  int64_t *first; /* first global row of each shard; first[nshards] = N */
  char **name;    /* each shard's file, for messages */
  /* scratch, grown to the largest batch seen (no malloc once warm) */
  int64_t scap;
  int64_t *key, *rows;
  uint32_t *tok;
  uint8_t *mask;
  int32_t *pos, *seg, *touched;
  int nsums; /* shards whose manifest entry carries SHA-256 sums (all of them checked on open) */
};

void fm_batch_alloc(FmBatch *b, int64_t cap, int64_t T) {
  memset(b, 0, sizeof *b);
  b->cap = cap;
  b->T = T;
  size_t n = (size_t)(cap * T);
  b->tokens = fm_xmalloc(n * sizeof *b->tokens);
  b->targets = fm_xmalloc(n * sizeof *b->targets);
  b->position_ids = fm_xmalloc(n * sizeof *b->position_ids);
  b->segment_ids = fm_xmalloc(n * sizeof *b->segment_ids);
  b->loss_mask = fm_xmalloc(n);
}

void fm_batch_free(FmBatch *b) {
  free(b->tokens);
  free(b->targets);
  free(b->position_ids);
  free(b->segment_ids);
  free(b->loss_mask);
  memset(b, 0, sizeof *b);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int fm__store_check_sizes(const char *path, int64_t seq_len, int64_t n_seq, int64_t vocab_size, int64_t eos_id,
                          int64_t pad_id, FILE *err) {
  const char *bad = NULL;
  int64_t v = 0;
  if (seq_len < 1 || seq_len > (INT64_C(1) << 30)) bad = "seq_len", v = seq_len;
  else if (n_seq < 0 || n_seq > INT64_MAX / (seq_len + 1)) bad = "n_seq", v = n_seq;
  else if (vocab_size < 1 || vocab_size > (INT64_C(1) << 31)) bad = "vocab_size", v = vocab_size;
  else if (eos_id < 0 || eos_id >= vocab_size) bad = "eos_id", v = eos_id;
  else if (pad_id < 0 || pad_id >= vocab_size) bad = "pad_id", v = pad_id;
  if (!bad) return 0;
  if (err)
    fprintf(err,
            "%s: %s = %lld is out of range (seq_len in [1, 2^30], n_seq >= 0, vocab_size in [1, 2^31], eos_id and "
            "pad_id in [0, vocab_size)): the store is damaged or not from fmhpc prep\nhint: run task='prep' again\n",
            path, bad, (long long)v);
  return FM_EFORMAT;
}

static int json_i64(const FmJson *o, const char *key, int64_t *v) {
  const FmJson *j = fm_json_get(o, key);
  if (!j || j->type != FM_JSON_NUM || !j->is_int) return FM_EFORMAT;
  *v = j->i;
  return 0;
}
static int json_str(const FmJson *o, const char *key, char *buf, size_t cap) {
  const FmJson *j = fm_json_get(o, key);
  if (!j || j->type != FM_JSON_STR) return FM_EFORMAT;
  snprintf(buf, cap, "%s", j->s);
  return 0;
}

const char *const fm__shard_dsets[FM_SHARD_NDSETS] = {"tokens", "loss_mask", "segment_ids", "position_ids"};

int fm__shard_put_part(FmShardWriter *w, const FmShardPart *part, int64_t R) {
  int64_t at = 0;
  for (int64_t k = 0; k < part->nruns; k++) {
    int64_t n = part->run_count[k], e = at * R;
    int rc = w->put(w, part->run_start[k], n, part->tokens + e, part->loss_mask + e, part->segment_ids + e,
                    part->position_ids ? part->position_ids + e : NULL);
    if (rc) return rc;
    at += n;
  }
  return 0;
}

void fm__shard_digests(FmShardReader *r, int64_t n_seq, int64_t R, bool has_pos, char hex[FM_SHARD_NDSETS][65]) {
  enum { CHUNK = 1024 };
  int64_t *rows = fm_xmalloc(CHUNK * sizeof *rows);
  uint32_t *tok = fm_xmalloc((size_t)(CHUNK * R) * sizeof *tok);
  uint8_t *mask = fm_xmalloc((size_t)(CHUNK * R));
  int32_t *seg = fm_xmalloc((size_t)(CHUNK * R) * sizeof *seg), *pos = fm_xmalloc((size_t)(CHUNK * R) * sizeof *pos);
  const void *bufs[FM_SHARD_NDSETS] = {tok, mask, seg, pos};
  const size_t esize[FM_SHARD_NDSETS] = {4, 1, 4, 4};
  const int nd = has_pos ? 4 : 3; /* the datasets stored */
  FmShaPieces p[FM_SHARD_NDSETS];
  FmShaPieces *const pp[FM_SHARD_NDSETS] = {&p[0], &p[1], &p[2], &p[3]};
  for (int d = 0; d < FM_SHARD_NDSETS; d++) fm_sha_pieces_init(&p[d], esize[d]);
  for (int64_t a = 0; a < n_seq; a += CHUNK) {
    const int64_t n = n_seq - a < CHUNK ? n_seq - a : CHUNK;
    for (int64_t i = 0; i < n; i++) rows[i] = a + i;
    FM_CHECK(r->read(r, rows, n, false, tok, mask, has_pos ? pos : NULL, seg));
    const int64_t ne[FM_SHARD_NDSETS] = {n * R, n * R, n * R, n * R};
    fm_sha_pieces_update_multi(pp, bufs, ne, nd); /* the datasets side by side */
  }
  for (int d = 0; d < nd; d++) fm_sha_pieces_final(&p[d], hex[d]);
  if (!has_pos) hex[3][0] = '\0';
  free(rows);
  free(tok);
  free(mask);
  free(seg);
  free(pos);
}

/* Every shard's datasets against the manifest's SHA-256 (a flipped byte that
 * stays a valid id would train silently): shard s is hashed by rank s % P and
 * the first mismatch is agreed, so every rank stops with the same message. A
 * manifest without checksums (before they were written) is not checked. */
static int verify_shards(FmStore *st, const char *path, const FmJson *shards, FILE *err) {
  const int P = st->comm ? st->comm->size : 1, me = st->comm ? st->comm->rank : 0;
  int32_t bad = INT32_MAX, nsums = 0;
  for (int s = 0; s < st->nshards; s++) {
    const FmJson *sums = fm_json_get(&shards->items[s], "sha256");
    if (!sums || sums->type != FM_JSON_OBJ || s % P != me) {
      nsums += sums != NULL;
      continue;
    }
    nsums++;
    char hex[FM_SHARD_NDSETS][65];
    fm__shard_digests(st->shard[s], st->first[s + 1] - st->first[s], st->info.row_len, st->info.has_position_ids, hex);
    for (int d = 0; d < FM_SHARD_NDSETS && bad == INT32_MAX; d++) {
      const FmJson *want = fm_json_get(sums, fm__shard_dsets[d]);
      if (hex[d][0] && (!want || want->type != FM_JSON_STR || strcmp(want->s, hex[d]) != 0))
        bad = s * FM_SHARD_NDSETS + d;
    }
  }
  if (st->comm) FM_CHECK(fm_comm_allreduce(st->comm, &bad, &bad, 1, FM_DT_I32, FM_OP_MIN));
  st->nsums = nsums; /* every rank counted every shard's entry */
  if (nsums < st->nshards && me == 0) /* unchecked data must not train without a word */
    fm_warn0(
        "data: %s: %d of its %d shard%s no SHA-256 sums in the manifest (a store prepped before checksums, or "
        "an edited manifest): %s not checked\nhint: run task='prep' again to write them; fmhpc --verify %s "
        "checks every row's ids and masks",
        path, st->nshards - nsums, st->nshards, st->nshards == 1 ? " has" : "s have",
        st->nshards - nsums == 1 ? "that one is" : "those are", path);
  if (bad == INT32_MAX) {
    if (nsums == st->nshards && st->nshards > 0 && me == 0)
      fm_log0("data: %s: every dataset of its %d shard%s matches its SHA-256", path, st->nshards,
              st->nshards == 1 ? "" : "s");
    return 0;
  }
  const FmJson *file = fm_json_get(&shards->items[bad / FM_SHARD_NDSETS], "file");
  if (err)
    fprintf(err,
            "%s: shard '%s': dataset '%s' does not match its SHA-256 in the manifest: the shard was changed or "
            "damaged after prep\nhint: run task='prep' again, or restore the shard from a copy\n",
            path, file && file->type == FM_JSON_STR ? file->s : "?", fm__shard_dsets[bad % FM_SHARD_NDSETS]);
  return FM_EDATA;
}

/* Shards listed in a manifest; h5 shards must agree with it. */
static int open_manifest(FmStore *st, const char *path, const char *format, FILE *err) {
  char *text = NULL;
  int rc = 0;
  if (!st->comm || st->comm->rank == 0) rc = fm_read_file(path, &text, NULL);
  if (st->comm) {
    int32_t r = rc;
    fm_comm_bcast(st->comm, &r, 1, FM_DT_I32, 0);
    rc = r;
    if (!rc) fm_comm_bcast_str(st->comm, &text, 0);
  }
  if (rc) {
    if (err) fprintf(err, "%s: cannot read the store manifest\nhint: run task='prep' first, or check &data train\n", path);
    return FM_EIO;
  }
  FmJsonDoc doc;
  FmJsonError je;
  if (fm_json_parse(&doc, text, strlen(text), 0, &je)) {
    if (err) fprintf(err, "%s:%d:%d: %s\n", path, je.line, je.col, je.msg);
    free(text);
    return FM_EFORMAT;
  }
  free(text);
  const FmJson *root = &doc.root, *shards = fm_json_get(root, "shards");
  FmStoreInfo *in = &st->info;
  char kind[16] = "", fmt[32] = "";
  int64_t eos = 0, pad = 0;
  if (root->type != FM_JSON_OBJ || json_str(root, "format", fmt, sizeof fmt) || strcmp(fmt, "fmhpc-packed") != 0 ||
      json_str(root, "storage", kind, sizeof kind) || json_i64(root, "seq_len", &in->seq_len) ||
      json_i64(root, "n_seq", &in->n_seq) || json_i64(root, "vocab_size", &in->vocab_size) ||
      json_i64(root, "eos_id", &eos) || json_i64(root, "pad_id", &pad) ||
      json_str(root, "packing", in->packing, sizeof in->packing) ||
      json_str(root, "position_ids", in->position_ids, sizeof in->position_ids) ||
      json_str(root, "tokenizer_hash", in->tokenizer_hash, sizeof in->tokenizer_hash) || !shards ||
      shards->type != FM_JSON_ARR) {
    if (err)
      fprintf(err, "%s: not an fmhpc manifest (format 'fmhpc-packed', storage, seq_len, n_seq, vocab_size, "
                   "eos_id, pad_id, packing, position_ids, tokenizer_hash, shards expected)\n", path);
    fm_json_free(&doc);
    return FM_EFORMAT;
  }
  int64_t version = 1; /* every fmhpc prep writes 1 */
  if (fm_json_get(root, "format_version") && (json_i64(root, "format_version", &version) || version != 1)) {
    char v[32] = "(not an integer)";
    if (version != 1) snprintf(v, sizeof v, "%lld", (long long)version);
    if (err)
      fprintf(err,
              "%s: format_version %s: this fmhpc reads version 1 of the store format\n"
              "hint: a store from another fmhpc version: read it with that one, or prep again with this one\n",
              path, v);
    fm_json_free(&doc);
    return FM_EFORMAT;
  }
  if (fm__store_check_sizes(path, in->seq_len, in->n_seq, in->vocab_size, eos, pad, err)) {
    fm_json_free(&doc);
    return FM_EFORMAT;
  }
  if (strcmp(format, "auto") != 0 && strcmp(format, kind) != 0) {
    if (err) fprintf(err, "%s: the manifest describes '%s' shards but &data format = '%s'\nhint: use format='auto'\n",
                     path, kind, format);
    fm_json_free(&doc);
    return FM_EFORMAT;
  }
  snprintf(in->format, sizeof in->format, "%s", kind);
  in->row_len = in->seq_len + 1;
  in->eos_id = (int32_t)eos;
  in->pad_id = (int32_t)pad;
  in->has_position_ids = strcmp(in->position_ids, "none") != 0;
  st->nshards = in->nshards = (int)shards->n;
  st->shard = fm_xcalloc((size_t)st->nshards + 1, sizeof *st->shard); // NOLINT(bugprone-sizeof-expression): pointers
  st->first = fm_xcalloc((size_t)st->nshards + 1, sizeof *st->first);
  st->name = fm_xcalloc((size_t)st->nshards + 1, sizeof *st->name);  // NOLINT(bugprone-sizeof-expression): pointers
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
  int64_t total = 0;
  for (int s = 0; s < st->nshards && !rc; s++) {
    const FmJson *sh = &shards->items[s];
    char file[1024] = "";
    int64_t first = 0, n = 0;
    if (json_str(sh, "file", file, sizeof file) || json_i64(sh, "first_seq", &first) || json_i64(sh, "n_seq", &n) ||
        first != total || n < 0 || n > in->n_seq - total) {
      if (err)
        fprintf(err, "%s: shards[%d]: needs file, first_seq = %lld and n_seq in [0, %lld]\n", path, s, (long long)total,
                (long long)(in->n_seq - total));
      rc = FM_EFORMAT;
      break;
    }
    char *full = fm_xmalloc(dirlen + strlen(file) + 1);
    memcpy(full, path, dirlen);
    memcpy(full + dirlen, file, strlen(file) + 1);
    st->name[s] = full;
    if (strcmp(kind, "h5") == 0) {
      FmStoreInfo si = *in;
      int64_t nh = 0;
      rc = fm__h5_shard_open(&st->shard[s], full, st->comm, &si, &nh, err);
      /* every attribute the shard repeats must be the manifest's: the manifest's are what training uses (a
       * vocab_size or eos_id edited in one of them went unnoticed) */
      char what[160] = "";
      if (!rc && nh != n)
        snprintf(what, sizeof what, "%lld rows, the manifest says %lld", (long long)nh, (long long)n);
      else if (!rc && si.seq_len != in->seq_len)
        snprintf(what, sizeof what, "seq_len %lld, the manifest says %lld", (long long)si.seq_len,
                 (long long)in->seq_len);
      else if (!rc && si.vocab_size != in->vocab_size)
        snprintf(what, sizeof what, "vocab_size %lld, the manifest says %lld", (long long)si.vocab_size,
                 (long long)in->vocab_size);
      else if (!rc && (si.eos_id != in->eos_id || si.pad_id != in->pad_id))
        snprintf(what, sizeof what, "eos_id %d and pad_id %d, the manifest says %d and %d", si.eos_id, si.pad_id,
                 in->eos_id, in->pad_id);
      else if (!rc && (strcmp(si.packing, in->packing) != 0 || strcmp(si.position_ids, in->position_ids) != 0))
        snprintf(what, sizeof what, "packing '%s' and position ids '%s', the manifest says '%s' and '%s'", si.packing,
                 si.position_ids, in->packing, in->position_ids);
      else if (!rc && strcmp(si.tokenizer_hash, in->tokenizer_hash) != 0)
        snprintf(what, sizeof what, "another tokenizer (hash %.12s..., the manifest's %.12s...)", si.tokenizer_hash,
                 in->tokenizer_hash);
      if (what[0]) {
        if (err)
          fprintf(err, "%s: does not match the manifest %s: the shard has %s\nhint: the manifest or the shard was "
                       "edited or replaced; run task='prep' again for this store\n", full, path, what);
        rc = FM_EFORMAT;
      }
    } else {
      rc = fm__bin_shard_open(&st->shard[s], full, in, n, err);
    }
    st->first[s] = first;
    total += n;
  }
  st->first[st->nshards] = total;
  if (!rc && total != in->n_seq) {
    if (err) fprintf(err, "%s: shards hold %lld rows, n_seq says %lld\n", path, (long long)total, (long long)in->n_seq);
    rc = FM_EFORMAT;
  }
  if (st->comm) { /* the checksum pass is collective: enter it only together */
    int32_t all = rc;
    FM_CHECK(fm_comm_allreduce(st->comm, &all, &all, 1, FM_DT_I32, FM_OP_MIN));
    if (!rc) rc = all;
  }
  if (!rc) rc = verify_shards(st, path, shards, err);
  fm_json_free(&doc);
  return rc;
}

int fm_store_open(FmStore **out, const char *path, const char *format, FmComm *comm, FILE *err) {
  *out = NULL;
  FmStore *st = fm_xcalloc(1, sizeof *st);
  st->comm = comm;
  int rc;
  if (!format) format = "auto";
  if (ends_with(path, ".h5") || (strcmp(format, "h5") == 0 && !ends_with(path, ".json"))) {
    st->nshards = st->info.nshards = 1;
    st->shard = fm_xcalloc(1, sizeof *st->shard); // NOLINT(bugprone-sizeof-expression): pointers
    st->first = fm_xcalloc(2, sizeof *st->first);
    st->name = fm_xcalloc(1, sizeof *st->name);  // NOLINT(bugprone-sizeof-expression): pointers
    st->name[0] = fm_xstrdup(path);
    rc = fm__h5_shard_open(&st->shard[0], path, comm, &st->info, &st->first[1], err);
    st->info.n_seq = st->first[1];
  } else if (ends_with(path, ".json")) {
    rc = open_manifest(st, path, format, err);
  } else {
    if (err) fprintf(err, "%s: a store is a prep manifest (.json) or an HDF5 shard (.h5)\n", path);
    rc = FM_EINVAL;
  }
  if (rc) {
    fm_store_close(st);
    return rc;
  }
  *out = st;
  return 0;
}

const FmStoreInfo *fm_store_info(const FmStore *st) { return &st->info; }

static int shard_of(const FmStore *st, int64_t i) {
  int lo = 0, hi = st->nshards - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (st->first[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static void grow(FmStore *st, int64_t n) {
  if (n <= st->scap) return;
  st->scap = n;
  size_t R = (size_t)st->info.row_len;
  st->key = fm_xrealloc(st->key, (size_t)n * sizeof *st->key);
  st->rows = fm_xrealloc(st->rows, (size_t)n * sizeof *st->rows);
  st->tok = fm_xrealloc(st->tok, (size_t)n * R * sizeof *st->tok);
  st->mask = fm_xrealloc(st->mask, (size_t)n * R);
  st->pos = fm_xrealloc(st->pos, (size_t)n * R * sizeof *st->pos);
  st->seg = fm_xrealloc(st->seg, (size_t)n * R * sizeof *st->seg);
}

static int row_problem(const FmStoreInfo *in, const uint32_t *tok, const uint8_t *mask, const int32_t *seg,
                       const int32_t *pos, int64_t *col, char *why, size_t n);

/* Every row read for training obeys the format's rules, the ones --verify
 * checks (row_problem): a corrupt shard whose checksums were re-made, or a
 * store written by another tool, would otherwise index past the embedding
 * tables (a token id, a position id) or train on a mask or segments that
 * mean something else. Row u of the rows just read. */
static int check_row(const FmStore *st, int s, int64_t row, int64_t u) {
  const int64_t R = st->info.row_len;
  int64_t col = 0;
  const int64_t sample = st->first[s] + row;
  char why[200];
  if (!row_problem(&st->info, st->tok + u * R, st->mask + u * R, st->seg + u * R,
                   st->info.has_position_ids ? st->pos + u * R : NULL, &col, why, sizeof why))
    return 0;
  fm_err(
      "%s: row %lld (sample %lld), column %lld: %s: the shard is corrupt or not written by fmhpc's prep\n"
      "hint: run task='prep' again for this store, or restore the shard from a copy (fmhpc --verify checks every "
      "row)",
      st->name[s], (long long)row, (long long)sample, (long long)col, why);
  return FM_EFORMAT;
}

static int read_batch(FmStore *st, const int64_t *ids, int64_t n, FmBatch *b, bool coll) {
  const FmStoreInfo *in = &st->info;
  int64_t R = in->row_len, T = in->seq_len;
  if (n > b->cap || b->T != T) {
    fm_err("fm_store_read_batch: batch of %lld x %lld holds at most %lld x %lld", (long long)n, (long long)T,
           (long long)b->cap, (long long)b->T);
    return FM_EINVAL;
  }
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= in->n_seq) {
      fm_err("fm_store_read_batch: sample %lld outside [0, %lld)", (long long)ids[i], (long long)in->n_seq);
      return FM_ERANGE;
    }
  grow(st, n > 0 ? n : 1);
  /* key = global row * n + slot: sorted, rows come out grouped by shard */
  for (int64_t i = 0; i < n; i++) st->key[i] = ids[i] * n + i;
  qsort(st->key, (size_t)n, sizeof *st->key, cmp_i64);
  /* collective: every rank visits the shards any rank touches */
  if (!st->touched) st->touched = fm_xcalloc((size_t)st->nshards * 2, sizeof *st->touched);
  int32_t *mine = st->touched, *any = st->touched + st->nshards;
  memset(mine, 0, (size_t)st->nshards * sizeof *mine);
  for (int64_t i = 0; i < n; i++) mine[shard_of(st, st->key[i] / n)] = 1;
  if (coll && st->comm) {
    int rc = fm_comm_allreduce(st->comm, mine, any, st->nshards, FM_DT_I32, FM_OP_MAX);
    if (rc) return rc;
  } else {
    memcpy(any, mine, (size_t)st->nshards * sizeof *mine);
  }
  int64_t k = 0;
  for (int s = 0; s < st->nshards; s++) {
    if (!any[s]) continue;
    int64_t k0 = k, nu = 0;
    while (k < n && st->key[k] / n < st->first[s + 1]) {
      int64_t row = st->key[k] / n - st->first[s];
      if (nu == 0 || st->rows[nu - 1] != row) st->rows[nu++] = row;
      k++;
    }
    int rc = st->shard[s]->read(st->shard[s], st->rows, nu, coll && st->comm, st->tok, st->mask,
                                in->has_position_ids ? st->pos : NULL, st->seg);
    if (rc) return rc;
    /* scatter the distinct rows to their slots */
    for (int64_t q = k0, u = -1; q < k; q++) {
      int64_t row = st->key[q] / n - st->first[s], slot = st->key[q] % n;
      if (u < 0 || st->rows[u] != row) u++;
      const uint32_t *tr = st->tok + u * R;
      const uint8_t *mr = st->mask + u * R;
      if (check_row(st, s, row, u)) return FM_EFORMAT;
      for (int64_t t = 0; t < T; t++) {
        b->tokens[slot * T + t] = (int32_t)tr[t];
        b->targets[slot * T + t] = (int32_t)tr[t + 1];
        b->loss_mask[slot * T + t] = mr[t + 1];
        b->segment_ids[slot * T + t] = st->seg[u * R + t];
        b->position_ids[slot * T + t] = in->has_position_ids ? st->pos[u * R + t] : (int32_t)t;
      }
    }
  }
  b->n = n;
  return 0;
}

int fm_store_read_batch(FmStore *st, const int64_t *ids, int64_t n, FmBatch *b) {
  return read_batch(st, ids, n, b, false);
}
int fm_store_read_batch_coll(FmStore *st, const int64_t *ids, int64_t n, FmBatch *b) {
  return read_batch(st, ids, n, b, true);
}

int fm_store_read_row(FmStore *st, int64_t i, uint32_t *tok, uint8_t *mask, int32_t *seg, int32_t *pos) {
  if (i < 0 || i >= st->info.n_seq) return FM_ERANGE;
  int s = shard_of(st, i);
  int64_t row = i - st->first[s];
  return st->shard[s]->read(st->shard[s], &row, 1, false, tok, mask, st->info.has_position_ids ? pos : NULL, seg);
}

/* ---- fmhpc --verify STORE ------------------------------------------------ */

/* The first thing wrong with one stored row, or 0: column *col, what in why. */
static int row_problem(const FmStoreInfo *in, const uint32_t *tok, const uint8_t *mask, const int32_t *seg,
                       const int32_t *pos, int64_t *col, char *why, size_t n) {
  int32_t prev = 0;
  for (int64_t t = 0; t < in->row_len; t++) {
    *col = t;
    if (tok[t] >= (uint64_t)in->vocab_size) {
      snprintf(why, n, "token id %lu >= vocab_size %lld", (unsigned long)tok[t], (long long)in->vocab_size);
      return 1;
    }
    if (mask[t] > 1) {
      snprintf(why, n, "loss mask %u: masks are 0 or 1", (unsigned)mask[t]);
      return 1;
    }
    /* prep numbers a row's pieces 1, 2, ... from column 0; padding (0) only trails */
    if (seg[t] < 0 || (seg[t] != 0 && seg[t] != prev && seg[t] != prev + 1) || (prev == 0 && t > 0 && seg[t] != 0)) {
      snprintf(why, n, "segment id %ld after %ld: a row numbers its documents 1, 2, ... from column 0, then "
               "padding 0", (long)seg[t], (long)prev);
      return 1;
    }
    if (pos && (pos[t] < 0 || pos[t] > t)) { /* doc_reset counts from 0 in each piece, continuous is the column */
      snprintf(why, n,
               "position id %ld at column %lld: positions are 0 .. the column (the model's embedding has "
               "seq_len rows)",
               (long)pos[t], (long long)t);
      return 1;
    }
    prev = seg[t];
  }
  return 0;
}

/* Checks every row this rank owns, a contiguous share of the samples; the
 * first bad sample * row_len + column (INT64_MAX if none) in *bad. */
static int scan_rows(FmStore *st, int64_t *bad, char *why, size_t why_len) {
  const FmStoreInfo *in = &st->info;
  const int P = st->comm ? st->comm->size : 1, me = st->comm ? st->comm->rank : 0;
  const int64_t lo = in->n_seq / P * me + (me < in->n_seq % P ? me : in->n_seq % P);
  const int64_t hi = lo + in->n_seq / P + (me < in->n_seq % P), R = in->row_len;
  enum { CHUNK = 256 };
  grow(st, CHUNK);
  *bad = INT64_MAX;
  for (int64_t a = lo; a < hi && *bad == INT64_MAX;) {
    const int s = shard_of(st, a);
    int64_t n = hi - a < CHUNK ? hi - a : CHUNK;
    if (n > st->first[s + 1] - a) n = st->first[s + 1] - a;
    for (int64_t i = 0; i < n; i++) st->rows[i] = a - st->first[s] + i;
    int rc = st->shard[s]->read(st->shard[s], st->rows, n, false, st->tok, st->mask,
                                in->has_position_ids ? st->pos : NULL, st->seg);
    if (rc) return rc;
    for (int64_t i = 0; i < n; i++) {
      int64_t col = 0;
      if (row_problem(in, st->tok + i * R, st->mask + i * R, st->seg + i * R,
                      in->has_position_ids ? st->pos + i * R : NULL, &col, why, why_len)) {
        *bad = (a + i) * R + col;
        break;
      }
    }
    a += n;
  }
  return 0;
}

int fm_store_verify(const char *path, const char *format, FmComm *comm, FILE *out, FILE *err) {
  FmStore *st = NULL;
  const double t0 = fm_now_s();
  int rc = fm_store_open(&st, path, format, comm, err); /* checks the manifest and every SHA-256 */
  if (rc) return rc;
  const FmStoreInfo *in = &st->info;
  char why[160] = "";
  int64_t bad = INT64_MAX;
  int32_t st_rc = scan_rows(st, &bad, why, sizeof why);
  if (comm) {
    FM_CHECK(fm_comm_allreduce(comm, &st_rc, &st_rc, 1, FM_DT_I32, FM_OP_MIN));
    int64_t mine = bad;
    FM_CHECK(fm_comm_allreduce(comm, &mine, &bad, 1, FM_DT_I64, FM_OP_MIN));
    if (bad != INT64_MAX && mine != bad) why[0] = '\0'; /* the owner of the first one tells */
  }
  if (!st_rc && bad != INT64_MAX) {
    const int64_t sample = bad / in->row_len, col = bad % in->row_len;
    const int s = shard_of(st, sample);
    if (why[0])
      fm_err("%s: row %lld (sample %lld), column %lld: %s: the shard is corrupt or not written by fmhpc's prep\n"
             "hint: run task='prep' again for this store, or restore the shard from a copy",
             st->name[s], (long long)(sample - st->first[s]), (long long)sample, (long long)col, why);
    st_rc = FM_EFORMAT;
  }
  if (!st_rc && out) {
    const int64_t tokens = in->n_seq * in->row_len;
    fprintf(out, "verify: %s: %d %s shard%s, %lld rows of %lld ids (%lld ids), vocab_size %lld\n", path,
            st->nshards, in->format, st->nshards == 1 ? "" : "s", (long long)in->n_seq, (long long)in->row_len,
            (long long)tokens, (long long)in->vocab_size);
    if (st->nsums == st->nshards && st->nshards > 0)
      fprintf(out, "verify:   SHA-256: every dataset of every shard matches the manifest\n");
    else if (ends_with(path, ".json"))
      fprintf(out, "verify:   SHA-256: %d of %d shards have sums in the manifest (a store prepped before "
                   "checksums): the rest not checked\n", st->nsums, st->nshards);
    else
      fprintf(out, "verify:   SHA-256: not checked: the sums live in the prep manifest; verify the .json to "
                   "check them\n");
    fprintf(out, "verify:   every row: ids < vocab_size, loss masks 0/1, segment ids 1, 2, ... then padding%s\n",
            in->has_position_ids ? ", position ids >= 0" : "");
    fprintf(out, "verify: OK in %.1f s\n", fm_now_s() - t0);
  }
  fm_store_close(st);
  return st_rc;
}

void fm_store_close(FmStore *st) {
  if (!st) return;
  for (int s = 0; s < st->nshards; s++)
    if (st->shard && st->shard[s]) st->shard[s]->close(st->shard[s]);
  free(st->shard);
  for (int s = 0; s < st->nshards && st->name; s++) free(st->name[s]);
  free(st->name);
  free(st->first);
  free(st->key);
  free(st->rows);
  free(st->tok);
  free(st->mask);
  free(st->pos);
  free(st->seg);
  free(st->touched);
  free(st);
}
