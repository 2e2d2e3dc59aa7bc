/* prep.c: task='prep', JSONL to packed shards. The pipeline:
 *   inputs (globs, sorted) -> records (non-blank lines, numbered in input
 *   order) -> fixed windows of window_docs records -> per window: parse,
 *   check, filter by length, split train/valid, tokenize (SFT: template and
 *   masks), pack -> a committed window file (.partial, then renamed) ->
 *   after all windows: rows placed by exclusive prefix sums over windows in
 *   window order -> shards (HDF5 collective writes or .bin pwrite) -> a JSON
 *   manifest per split.
 * Rank r packs windows w with w % P == r; every rank reads every input (only
 * counting lines outside its windows), so window boundaries and therefore
 * the output do not depend on P. Committed windows survive a kill: a rerun
 * of the same deck resumes from them. Packing is pack.c, formats store_*.c.
 * This file drives the phases; reading and filtering records is prep_read.c,
 * window files, shards, the report and resume are prep_out.c. */
#include "prep_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/json.h"
#include "fmhpc/progress.h"
#include "fmhpc/tokenizer.h"

/* ---- phase 1: windows -------------------------------------------------- */
static int pack_window(Prep *p, int64_t w) {
  FmPacked *pk = p->pk;
  for (int s = 0; s < 2; s++) {
    /* the rows of the last window are overwritten: no allocation (and no
     * fresh pages to zero) once the buffers have grown to a window's size */
    pk[s].rows = pk[s].docs = pk[s].tokens_real = pk[s].padding = pk[s].dropped_docs = pk[s].dropped_tokens = 0;
    pk[s].npiece = 0;
    pk[s].lean = true; /* the window file keeps tokens, segment lengths and an odd mask: nothing else is built */
    if (p->ndoc[s] + 1 > p->docscap) {
      p->docscap = 2 * (p->ndoc[s] + 1);
      p->docs = fm_xrealloc(p->docs, (size_t)p->docscap * sizeof *p->docs);
    }
    for (int64_t i = 0; i < p->ndoc[s]; i++) { /* text mode: every id's mask is 1, which a NULL mask says */
      int64_t a = p->doff[s][2 * i], b = p->doff[s][2 * i + 1];
      p->docs[i] = (FmDoc){p->ids + a, p->sft ? p->mask + a : NULL, b - a};
    }
    fm_pack(&pk[s], p->docs, p->ndoc[s], p->R - 1, p->packing, p->pos, p->pad);
  }
  p->stat[ST_docs_train] = pk[0].docs;
  p->stat[ST_docs_valid] = pk[1].docs;
  p->stat[ST_tokens_train] = pk[0].tokens_real;
  p->stat[ST_tokens_valid] = pk[1].tokens_real;
  p->stat[ST_padding_train] = pk[0].padding;
  p->stat[ST_padding_valid] = pk[1].padding;
  p->stat[ST_dropped_train] = pk[0].dropped_docs;
  p->stat[ST_dropped_valid] = pk[1].dropped_docs;
  p->stat[ST_dropped_tok_train] = pk[0].dropped_tokens;
  p->stat[ST_dropped_tok_valid] = pk[1].dropped_tokens;
  p->stat[ST_rows_train] = pk[0].rows;
  p->stat[ST_rows_valid] = pk[1].rows;
  return fm__prep_commit_window(p, w, pk);
}

/* Process the records of window w. Returns 0, FM_EDATA (a bad record, already
 * reported) or another failure. */
static int do_window(Prep *p, int64_t w) {
  memset(p->stat, 0, sizeof p->stat);
  p->nids = 0;
  p->ndoc[0] = p->ndoc[1] = 0;
  for (int64_t i = 0; i < p->nrec; i++) {
    Bad bad = {""};
    const Record *r = &p->rec[i];
    int rc = fm__prep_do_record(p, r, &bad);
    if (rc == FM_EDATA && p->skip_bad) {
      p->stat[ST_bad_skipped]++;
      if (p->stat[ST_bad_skipped] <= 3)
        fm_err("%s:%lld: skipped: %s", p->in[r->in].path, (long long)r->lineno, bad.why);
      continue;
    }
    if (rc == FM_EDATA) {
      fm_err("%s:%lld: %s\nhint: fix the record, or set &prep on_bad_record = 'skip' to count and skip bad records",
             p->in[r->in].path, (long long)r->lineno, bad.why);
      return rc;
    }
    if (rc) { /* the tokenizer's failure (said above), not the record's: skipping records would not help */
      fm_err("%s:%lld: %s\nhint: the tokenizer failed on this record's text (see above): check &prep tokenizer = '%s' "
             "(a pre-tokenizer regex that backtracks too much, e.g. nested quantifiers, fails on long runs)",
             p->in[r->in].path, (long long)r->lineno, bad.why[0] ? bad.why : fm_strerror(rc), p->deck->c.prep.tokenizer);
      return rc;
    }
  }
  p->stat[ST_records] = p->nrec;
  return pack_window(p, w);
}

/* After each round of windows (every rank calls this once per round, with
 * or without a window): agree on errors and on whether anyone still has
 * windows, count rounds for stop_after_windows, and let rank 0 report
 * progress. Returns 0, FM_EDATA when any rank failed, or 1 to stop here. */
static int sync_round(Prep *p, int err, int active, int64_t raw_bytes, int *any_active) {
  int64_t v[4] = {err ? 1 : 0, active, p->done_docs, p->done_tokens}, s[4];
  int rc = fm__idle_barrier(p->world); /* a rank with a smaller window (or none) waits here asleep */
  if (!rc) rc = fm_comm_allreduce(p->world, v, s, 4, FM_DT_I64, FM_OP_SUM);
  if (rc) return rc;
  *any_active = s[1] > 0;
  p->rounds++;
  double t = fm_now_s();
  if (p->log && p->deck->c.prep.progress_seconds > 0 && t - p->t_last >= p->deck->c.prep.progress_seconds) {
    double el = t - p->t0, frac = p->total_bytes ? (double)raw_bytes / (double)p->total_bytes : 1;
    char eta[32];
    fm_fmt_duration(eta, sizeof eta, frac > 0 ? el * (1 - frac) / frac : -1);
    fprintf(p->log,
            "prep: %lld docs (%.0f docs/s), %lld tokens (%.0f tokens/s), %.1f MB read (%.1f MB/s), %.0f%%, ETA %s\n",
            (long long)s[2], (double)s[2] / el, (long long)s[3], (double)s[3] / el, (double)raw_bytes / 1e6,
            (double)raw_bytes / 1e6 / el, 100 * frac, eta);
    fflush(p->log);
    p->t_last = t;
  }
  if (s[0]) return FM_EDATA;
  int64_t stop = p->deck->c.prep.stop_after_windows;
  return stop && p->rounds >= stop && *any_active ? 1 : 0;
}

/* Pack and commit window w from the records collected (unless an earlier run
 * committed it), then join the round. */
static int finish_window(Prep *p, int64_t w, int active, int64_t raw_bytes, int *any) {
  char *fin = fm__prep_win_path(p, w, false);
  bool done = access(fin, F_OK) == 0;
  free(fin);
  int rc = done ? 0 : do_window(p, w);
  p->nrec = 0;
  p->rtlen = 0;
  if (!done && !rc) {
    p->done_docs += p->stat[ST_docs_train] + p->stat[ST_docs_valid];
    p->done_tokens += p->stat[ST_tokens_train] + p->stat[ST_tokens_valid];
  }
  return sync_round(p, rc, active, raw_bytes, any);
}

/* Phase 1: stream every input; build, pack and commit this rank's windows.
 * Rounds are lock-step: in round k rank r handles window k*P + r. */
static int phase_windows(Prep *p, int64_t *nrecords, bool *stopped) {
  int64_t g = 0, raw_done = 0; /* global record index; raw bytes of finished inputs */
  int rc = 0, any = 1;
  *stopped = false;
  for (int i = 0; i < p->nin && !rc; i++) {
    FmJsonl *jr;
    rc = fm_jsonl_open(&jr, p->in[i].path, stderr);
    if (rc) break;
    if (p->rank != 0) fm_jsonl_no_sha256(jr); /* rank 0 hashes the inputs (share_input_sums) */
    const char *line;
    size_t len;
    int64_t lineno;
    int k;
    while (!rc && (k = fm_jsonl_next(jr, &line, &len, &lineno)) == 1) {
      size_t sp = 0;
      while (sp < len && (line[sp] == ' ' || line[sp] == '\t' || line[sp] == '\r')) sp++;
      if (sp == len) { /* blank lines are not records: counted, never packed */
        p->blank++;
        continue;
      }
      int64_t w = g++ / p->W;
      if (w % p->P != p->rank) continue;
      if (p->nrec == p->reccap) {
        p->reccap = 2 * p->reccap + 64;
        p->rec = fm_xrealloc(p->rec, (size_t)p->reccap * sizeof *p->rec);
      }
      if (p->rtlen + len + 1 > p->rtcap) {
        p->rtcap = 2 * (p->rtlen + len + 1);
        p->rtext = fm_xrealloc(p->rtext, p->rtcap);
      }
      memcpy(p->rtext + p->rtlen, line, len);
      p->rtext[p->rtlen + len] = '\0';
      p->rec[p->nrec++] = (Record){i, lineno, p->rtlen, len};
      p->rtlen += len + 1;
      if (g % p->W == 0) rc = finish_window(p, w, 1, raw_done + fm_jsonl_raw_bytes(jr), &any);
    }
    if (!rc && k < 0) rc = k;
    if (!rc && p->rank == 0) snprintf(p->in[i].sha, sizeof p->in[i].sha, "%s", fm_jsonl_sha256(jr));
    raw_done += fm_jsonl_raw_bytes(jr);
    fm_jsonl_close(jr);
  }
  if (rc == 1) {
    *stopped = true;
    return 0;
  }
  if (rc == FM_EDATA || rc == FM_EMPI) return rc; /* every rank saw it in the same round */
  if (rc) {                                       /* a read error: join this round with it so that no rank waits */
    sync_round(p, rc, 0, raw_done, &any);
    return FM_EDATA;
  }
  int64_t w = g / p->W; /* the last, partial window */
  if (g % p->W && w % p->P == p->rank) {
    rc = finish_window(p, w, 0, raw_done, &any);
    if (rc) return rc < 0 ? rc : 0;
  }
  while (any) {
    rc = sync_round(p, 0, 0, raw_done, &any);
    if (rc) return rc < 0 ? rc : 0;
  }
  *nrecords = g;
  return 0;
}

/* Every rank gets rank 0's SHA-256 of each input (the shards' and manifests' sources): one rank hashes them,
 * not every rank (each reads every input). */
static int share_input_sums(Prep *p) {
  char *buf = fm_xcalloc((size_t)p->nin, 65);
  for (int i = 0; i < p->nin && p->rank == 0; i++) memcpy(buf + (size_t)i * 65, p->in[i].sha, 65);
  int rc = fm_comm_bcast(p->world, buf, (int64_t)p->nin * 65, FM_DT_U8, 0);
  for (int i = 0; i < p->nin && !rc; i++) memcpy(p->in[i].sha, buf + (size_t)i * 65, 65);
  free(buf);
  return rc;
}

static void prep_free(Prep *p) {
  if (p->tok) fm_tok_free(p->tok);
  fm_template_free(&p->tmpl);
  for (int i = 0; i < p->nsec; i++) {
    free(p->sec[i].field);
    free(p->sec[i].role);
  }
  for (int i = 0; i < p->nin; i++) free(p->in[i].path);
  free(p->in);
  free(p->out);
  free(p->work);
  free(p->stage);
  free(p->rec);
  free(p->rtext);
  free(p->ids);
  free(p->mask);
  free(p->doff[0]);
  free(p->doff[1]);
  free(p->docs);
  fm_packed_free(&p->pk[0]);
  fm_packed_free(&p->pk[1]);
  free(p->wseg);
  free(p->id16);
  fm__prep_rowbuf_free(&p->part);
  fm__prep_rowbuf_free(&p->scratch);
}

int fm_prep_run(const FmDeck *deck, FmComm *world, FILE *log) {
  /* a window's buffers (its text, ids, packed rows, about 16 bytes a token: 20 MB for 512 linux-doc records)
   * and the tokenizer's tables, first touched in 2 MiB pages: the 1x linux-doc prep took 14k page faults,
   * 11k of them these, and 13% of its CPU on this project's VMs (bench/prep) */
  (void)fm_heap_huge((size_t)64 << 20);
  Prep p = {0};
  p.deck = deck;
  p.world = world;
  p.rank = world->rank;
  p.P = world->size;
  p.log = world->rank == 0 ? log : NULL;
  p.t0 = p.t_last = fm_now_s();
  FILE *err = world->rank == 0 ? stderr : NULL;
  /* ranks leave MPI start-up and the tokenizer's load unevenly: wait asleep, not in the agreeing collectives'
   * polling (tens of CPU-ms a rank at 2 ranks on a loaded machine) */
  fm__idle_barrier(world);
  int rc = agree(world, fm__prep_configure(&p, err));
  if (!rc) rc = fm__prep_expand_inputs(&p);
  if (!rc) {
    int lr = fm_tok_load(&p.tok, deck->c.prep.tokenizer, err);
    if (lr && err)
      fprintf(err, "hint: &prep tokenizer names a tokenizer.json, a *.tiktoken file or a GPT-2 directory\n");
    fm__idle_barrier(world);
    rc = agree(world, lr);
  }
  if (!rc) {
    p.eos = fm_tok_eos_id(p.tok);
    p.pad = 0;
    /* ids are < vocab size (specials included) and pad is 0: every id of every window fits in this width */
    p.idw = fm_tok_vocab_size(p.tok) <= 65536 ? 2 : 4;
    if (p.eos < 0) {
      if (err)
        fprintf(err, "%s: the tokenizer has no end-of-document token\nhint: add '<|endoftext|>' as a special token\n",
                deck->c.prep.tokenizer);
      rc = FM_EDATA;
    }
  }
  if (!rc) rc = fm__prep_prepare_dirs(&p);
  if (!rc && p.log) {
    char b[32];
    fprintf(p.log, "prep: %d input files (%s), %d rank%s, windows of %lld records, seq_len %lld, packing %s\n", p.nin,
            fm_fmt_bytes(b, sizeof b, (double)p.total_bytes), p.P, p.P == 1 ? "" : "s", (long long)p.W,
            (long long)(p.R - 1), fm_packing_name(p.packing));
    fflush(p.log);
  }
  int64_t nrec = 0;
  bool stopped = false;
  if (!rc) rc = phase_windows(&p, &nrec, &stopped);
  if (!rc && !stopped) rc = share_input_sums(&p);
  if (!rc && stopped) {
    if (p.log)
      fprintf(p.log, "prep: stopped after %lld window rounds (stop_after_windows); rerun the same deck to resume\n",
              (long long)deck->c.prep.stop_after_windows);
    rc = FM_EIO;
  }
  if (!rc && nrec == 0) {
    if (err) fprintf(err, "prep: the inputs hold no records\nhint: check &prep inputs\n");
    rc = FM_EDATA;
  }
  if (rc) {
    prep_free(&p);
    return rc;
  }
  /* phase 2: every window's row counts and stats, placed by prefix sums */
  int64_t nW = nrec / p.W + (nrec % p.W != 0); /* not (nrec + W - 1) / W: window_docs may be near INT64_MAX */
  WinInfo *wi = fm_xcalloc((size_t)nW, sizeof *wi), *sum = fm_xcalloc((size_t)nW, sizeof *sum);
  for (int64_t w = p.rank; w < nW && !rc; w += p.P) rc = fm__prep_read_window_header(&p, w, &wi[w]);
  rc = agree(world, rc);
  if (!rc) rc = fm_comm_allreduce(world, wi, sum, nW * (int64_t)(sizeof *wi / sizeof(int64_t)), FM_DT_I64, FM_OP_SUM);
  int64_t tot[NSTAT] = {0}, nsh[2] = {0, 0};
  for (int64_t w = 0; w < nW; w++)
    for (int k = 0; k < NSTAT; k++) tot[k] += sum[w].stat[k];
  tot[ST_blank] = p.blank; /* every rank read every line */
  if (!rc && p.sft && tot[ST_docs_train] > 0 && tot[ST_trained_train] == 0) {
    /* a train_on that matches no turn (a misspelt role) makes a store whose loss mask is 0 everywhere: training
     * on it "runs" at loss 0 and learns nothing. Refused before any shard is written; the windows, which hold
     * this train_on's masks, are of no further use. */
    if (err) {
      fprintf(err, "prep: &prep train_on = ");
      for (int i = 0; i < deck->c.prep.train_on_n; i++)
        fprintf(err, "%s'%s'", i ? ", " : "", deck->c.prep.train_on[i]);
      fprintf(err,
              " trains no token: no turn of the %lld train documents has a role it names, so the loss mask would be 0 "
              "everywhere\nhint: name roles of the records' '%s' turns (e.g. 'assistant'); nothing was written\n",
              (long long)tot[ST_docs_train], deck->c.prep.messages_field);
    }
    fm__idle_barrier(world);
    fm__prep_remove_work(&p, nW);
    rc = FM_EDATA;
  }
  if (!rc && tot[ST_docs_train] == 0) {
    /* a store training cannot use: refused before any shard is written, so a store already in the output
     * directory is left as it was (its shards would otherwise be replaced or removed as stale) */
    if (err)
      fprintf(err,
              "prep: the train split would hold no document: %lld records read, %lld shorter than min_chars = %lld, "
              "%lld longer than max_chars = %lld, %lld bad records skipped, %lld longer than a row dropped by "
              "packing = 'bfd', %lld documents to valid\n"
              "hint: check &prep text_field / mode against the JSONL, min_chars, max_chars, packing and "
              "valid_fraction; nothing was written\n",
              (long long)tot[ST_records], (long long)tot[ST_too_short], (long long)p.min_chars,
              (long long)tot[ST_too_long], (long long)p.max_chars, (long long)tot[ST_bad_skipped],
              (long long)tot[ST_dropped_train], (long long)tot[ST_docs_valid]);
    fm__idle_barrier(world);
    fm__prep_remove_work(&p, nW);
    rc = FM_EDATA;
  }
  bool want_valid = p.valid_fraction > 0 || tot[ST_docs_valid] > 0;
  for (int i = 0; i < p.nin; i++) want_valid |= p.in[i].valid;
  if (!rc) rc = fm__prep_clear_stage(&p);
  for (int s = 0; s < (want_valid ? 2 : 1) && !rc; s++) rc = fm__prep_write_split(&p, s, nW, sum, tot, &nsh[s]);
  if (!rc) rc = fm__prep_publish(&p);
  if (rc) fm__prep_drop_stage(&p); /* the output directory as it was (the windows stay, for a rerun) */
  if (!rc) {
    fm__prep_report(&p, tot, nW, nsh, fm_now_s() - p.t0);
    fm__prep_remove_stale(&p, nsh, want_valid);
    fm__idle_barrier(world);
    fm__prep_remove_work(&p, nW);
  }
  free(wi);
  free(sum);
  prep_free(&p);
  return rc;
}
