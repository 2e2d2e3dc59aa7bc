/* prep_out.c: the writing side of task='prep' (prep_internal.h): window
 * files (written as .partial, fsynced, renamed: a committed window survives a
 * kill), rows placed by prefix sums over windows into shards and a JSON
 * manifest per split, the report, and resume (a fingerprint of the settings
 * that committed windows must share). */
#include "prep_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
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
/* Window file: "FMWIN1\0\0", int64 R, has_pos, NSTAT, stats[NSTAT], then per
 * split (train, valid): tokens u32, loss_mask u8, segment_ids i32,
 * position_ids i32 (if has_pos), each rows x R. */
static const char win_magic[8] = "FMWIN1";

char *fm__prep_win_path(const Prep *p, int64_t w, bool partial) {
  char *s = fm_xmalloc(strlen(p->work) + 48);
  sprintf(s, "%s/win_%09lld.bin%s", p->work, (long long)w, partial ? ".partial" : "");
  return s;
}

static int write_all(FILE *f, const void *b, size_t n) { return fwrite(b, 1, n, f) == n ? 0 : FM_EIO; }

int fm__prep_commit_window(Prep *p, int64_t w, FmPacked pk[2]) {
  char *part = fm__prep_win_path(p, w, true), *fin = fm__prep_win_path(p, w, false);
  FILE *f = fopen(part, "wb");
  int rc = f ? 0 : FM_EIO;
  int64_t hdr[3] = {p->R, p->pos != FM_POS_NONE, NSTAT};
  if (!rc) rc = write_all(f, win_magic, 8);
  if (!rc) rc = write_all(f, hdr, sizeof hdr);
  if (!rc) rc = write_all(f, p->stat, sizeof p->stat);
  for (int s = 0; s < 2 && !rc; s++) {
    size_t n = (size_t)(pk[s].rows * p->R);
    if (!n) continue;
    rc = write_all(f, pk[s].tokens, n * 4);
    if (!rc) rc = write_all(f, pk[s].loss_mask, n);
    if (!rc) rc = write_all(f, pk[s].segment_ids, n * 4);
    if (!rc && p->pos != FM_POS_NONE) rc = write_all(f, pk[s].position_ids, n * 4);
  }
  if (f && (fflush(f) || fsync(fileno(f)))) rc = FM_EIO;
  if (f && fclose(f)) rc = FM_EIO;
  if (!rc && rename(part, fin)) rc = FM_EIO;
  if (rc) fm_err("%s: cannot write the window file: %s\nhint: check free space in &prep output", part, strerror(errno));
  free(part);
  free(fin);
  return rc;
}


/* ---- phase 2: placement and shards ------------------------------------ */

int fm__prep_read_window_header(const Prep *p, int64_t w, WinInfo *wi) {
  char *path = fm__prep_win_path(p, w, false);
  FILE *f = fopen(path, "rb");
  char magic[8];
  int64_t hdr[3];
  int rc = 0;
  if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, win_magic, 8) != 0 || fread(hdr, sizeof hdr, 1, f) != 1 ||
      hdr[0] != p->R || hdr[1] != (p->pos != FM_POS_NONE) || hdr[2] != NSTAT ||
      fread(wi->stat, sizeof wi->stat, 1, f) != 1) {
    fm_err("%s: missing or not a window file of this prep\nhint: delete %s and run again", path, p->work);
    rc = FM_EDATA;
  } else {
    wi->rows[0] = wi->stat[ST_rows_train];
    wi->rows[1] = wi->stat[ST_rows_valid];
  }
  if (f) fclose(f);
  free(path);
  return rc;
}

/* Read rows [r0, r0+n) of split s of window w into the part buffers at row
 * offset `at`. */
static int read_window_rows(const Prep *p, int64_t w, const WinInfo *wi, int s, int64_t r0, int64_t n, int64_t at,
                            uint32_t *tok, uint8_t *mask, int32_t *seg, int32_t *pos) {
  char *path = fm__prep_win_path(p, w, false);
  FILE *f = fopen(path, "rb");
  int rc = f ? 0 : FM_EIO;
  int has_pos = p->pos != FM_POS_NONE;
  int64_t R = p->R, base = 8 + 3 * 8 + NSTAT * 8;
  int64_t per_row = R * (4 + 1 + 4 + (has_pos ? 4 : 0));
  if (s == 1) base += wi->rows[0] * per_row;
  int64_t nr = wi->rows[s];
  struct {
    void *dst;
    int64_t elem;
  } arr[4] = {{tok, 4}, {mask, 1}, {seg, 4}, {pos, 4}};
  int64_t off = base;
  for (int a = 0; a < 3 + has_pos && !rc; a++) {
    if (fseeko(f, (off_t)(off + r0 * R * arr[a].elem), SEEK_SET) ||
        fread((char *)arr[a].dst + at * R * arr[a].elem, (size_t)(R * arr[a].elem), (size_t)n, f) != (size_t)n)
      rc = FM_EIO;
    off += nr * R * arr[a].elem;
  }
  if (rc) fm_err("%s: cannot read rows %lld..%lld\nhint: delete %s and run again", path, (long long)r0,
                 (long long)r0 + (long long)n, p->work);
  if (f) fclose(f);
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
  int has_pos = p->pos != FM_POS_NONE;
  for (int64_t j = 0; j < nsh && !rc; j++) {
    int64_t a = j * per, b = a + per < N ? a + per : N;
    /* this rank's windows that intersect rows [a, b) */
    int64_t nruns = 0, nrows = 0;
    for (int64_t w = p->rank; w < nW; w += p->P) {
      int64_t lo = off[w] > a ? off[w] : a, hi = off[w + 1] < b ? off[w + 1] : b;
      if (lo < hi) nruns++, nrows += hi - lo;
    }
    int64_t *rs = fm_xmalloc((size_t)(nruns + 1) * sizeof *rs), *rcnt = fm_xmalloc((size_t)(nruns + 1) * sizeof *rcnt);
    uint32_t *tok = fm_xmalloc((size_t)(nrows * R + 1) * 4);
    uint8_t *mask = fm_xmalloc((size_t)(nrows * R + 1));
    int32_t *seg = fm_xmalloc((size_t)(nrows * R + 1) * 4), *pos = has_pos ? fm_xmalloc((size_t)(nrows * R + 1) * 4) : NULL;
    int64_t k = 0, at = 0;
    for (int64_t w = p->rank; w < nW && !rc; w += p->P) {
      int64_t lo = off[w] > a ? off[w] : a, hi = off[w + 1] < b ? off[w + 1] : b;
      if (lo >= hi) continue;
      rs[k] = lo - a;
      rcnt[k++] = hi - lo;
      rc = read_window_rows(p, w, &wi[w], s, lo - off[w], hi - lo, at, tok, mask, seg, pos);
      at += hi - lo;
    }
    rc = agree(p->world, rc);
    if (!rc) {
      char name[64], *path = fm_xmalloc(strlen(p->out) + 80);
      snprintf(name, sizeof name, "%s_%05lld%s", split_names[s], (long long)j, is_h5 ? ".h5" : "");
      sprintf(path, "%s/%s", p->out, name);
      FmShardMeta m = {split_names[s], (int)j, (int)nsh, a, b - a, R - 1, fm_tok_vocab_size(p->tok), p->eos,
                       (int32_t)p->pad, fm_packing_name(p->packing), fm_posids_name(p->pos), fm_tok_hash(p->tok),
                       src.s, prov};
      FmShardPart part = {nruns, rs, rcnt, tok, mask, pos, seg};
      rc = is_h5 ? fm__h5_write_shard(path, &m, &part, p->world, stderr)
                 : fm__bin_write_shard(path, &m, &part, p->world, stderr);
      free(path);
    }
    free(rs);
    free(rcnt);
    free(tok);
    free(mask);
    free(seg);
    free(pos);
  }
  /* every shard's checksums, read back (shard j by rank j % P), for the manifest */
  char(*sums)[FM_SHARD_NDSETS][65] = fm_xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *sums);
  for (int64_t j = p->rank; j < nsh && !rc; j += p->P) {
    char *path = fm_xmalloc(strlen(p->out) + 80);
    sprintf(path, "%s/%s_%05lld%s", p->out, split_names[s], (long long)j, is_h5 ? ".h5" : "");
    const int64_t n = (j + 1) * per < N ? per : N - j * per;
    FmStoreInfo info = {.row_len = R, .has_position_ids = has_pos};
    FmShardReader *rd = NULL;
    int64_t nh = n;
    rc = is_h5 ? fm__h5_shard_open(&rd, path, NULL, &info, &nh, stderr)
               : fm__bin_shard_open(&rd, path, &info, n, stderr);
    if (!rc) {
      fm__shard_digests(rd, n, R, has_pos, sums[j]);
      rd->close(rd);
    }
    free(path);
  }
  rc = agree(p->world, rc);
  if (!rc) FM_CHECK(fm_comm_allreduce(p->world, sums, sums, nsh * (int64_t)sizeof *sums, FM_DT_U8, FM_OP_BOR));
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
    char *path = fm_xmalloc(strlen(p->out) + 64), *part = fm_xmalloc(strlen(p->out) + 80);
    sprintf(path, "%s/%s.json", p->out, split_names[s]);
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
  fprintf(o, "records      %s in %lld windows of %lld\n", fm_fmt_count(b1, sizeof b1, tot[ST_records]),
          (long long)nW, (long long)p->W);
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
      fprintf(o, "             %lld documents longer than a row dropped by packing = 'bfd' (%lld tokens)\n"
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
  fm_str_printf(&b, "tok=%s seq=%lld pack=%s pos=%s mode=%s field=%s msg=%s tmpl=%s min=%lld max=%lld bad=%s "
                    "vf=%.17g W=%lld seed=%lld bos=%s fmt=%s\n",
                fm_tok_hash(p->tok), (long long)c->prep.seq_len, c->prep.packing, c->prep.position_ids, c->prep.mode,
                c->prep.text_field, c->prep.messages_field, c->prep.chat_template, (long long)c->prep.min_chars,
                (long long)c->prep.max_chars, c->prep.on_bad_record, c->prep.valid_fraction,
                (long long)c->prep.window_docs, (long long)c->run.seed, c->prep.template_bos, "v1");
  for (int i = 0; i < c->prep.sections_n; i++) fm_str_printf(&b, "sec=%s\n", c->prep.sections[i]);
  for (int i = 0; i < c->prep.train_on_n; i++) fm_str_printf(&b, "train=%s\n", c->prep.train_on[i]);
  for (int i = 0; i < c->prep.role_names_n; i++)
    fm_str_printf(&b, "role=%s|%s|%s\n", c->prep.role_names[i], i < c->prep.role_prefix_n ? c->prep.role_prefix[i] : "",
                  i < c->prep.role_suffix_n ? c->prep.role_suffix[i] : "");
  for (int i = 0; i < p->nin; i++) fm_str_printf(&b, "in=%d %lld %s\n", p->in[i].valid, (long long)p->in[i].bytes, p->in[i].path);
  uint8_t d[32];
  fm_sha256(b.s, b.len, d);
  fm_hex(d, 32, hex);
  fm_str_free(&b);
}

/* Rank 0 prepares the output and work directories and checks that committed
 * windows there come from the same prep. */
int fm__prep_prepare_dirs(Prep *p) {
  int rc = 0;
  p->out = fm_xstrdup(p->deck->c.prep.output);
  p->work = fm_xmalloc(strlen(p->out) + 16);
  sprintf(p->work, "%s/.prep_work", p->out);
  if (p->rank == 0) {
    char fp[65], old[80] = "", *fpath = fm_xmalloc(strlen(p->work) + 16);
    fingerprint(p, fp);
    sprintf(fpath, "%s/fingerprint", p->work);
    if (fm_mkdirs(p->work)) {
      fm_err("%s: cannot create: %s\nhint: &prep output must be a writable directory", p->work, strerror(errno));
      rc = FM_EIO;
    } else {
      FILE *f = fopen(fpath, "r");
      if (f) {
        if (!fgets(old, sizeof old, f)) old[0] = 0;
        fclose(f);
        old[strcspn(old, "\n")] = 0;
        if (strcmp(old, fp) != 0) {
          fm_err("%s: committed windows of a different prep (deck, tokenizer or inputs changed)\n"
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

void fm__prep_remove_work(const Prep *p, int64_t nW) {
  if (p->rank != 0) return;
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
