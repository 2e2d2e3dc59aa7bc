/* prep_internal.h: what the three files of task='prep' share (src/data/):
 *   prep.c       the driver: phase 1 (windows of records, lock-step rounds
 *                across ranks, progress), then phase 2, fm_prep_run
 *   prep_read.c  reading and filtering: the deck's &prep settings, input
 *                globs, records to tokenized documents (text and SFT)
 *   prep_out.c   output: window files (commit, read back), shards and
 *                manifests placed by prefix sums, the report, resume
 * Not a public interface (data.h is). */
#ifndef FMHPC_PREP_INTERNAL_H
#define FMHPC_PREP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/data.h"
#include "fmhpc/tokenizer.h"

/* Per-window counters; summed over windows (exact integers) for the report. */
#define STAT_TABLE(XX)                                                    \
  XX(records, "records read (non-blank lines)")                           \
  XX(blank, "blank lines skipped")                                        \
  XX(bad_skipped, "bad records skipped (on_bad_record = 'skip')")         \
  XX(too_short, "documents shorter than min_chars")                       \
  XX(too_long, "documents longer than max_chars")                         \
  XX(chars, "characters of kept documents")                               \
  XX(docs_train, "train documents")                                       \
  XX(docs_valid, "valid documents")                                       \
  XX(tokens_train, "train tokens (EOS included)")                         \
  XX(tokens_valid, "valid tokens (EOS included)")                         \
  XX(trained_train, "train tokens with loss mask 1")                      \
  XX(trained_valid, "valid tokens with loss mask 1")                      \
  XX(padding_train, "train padding slots")                                \
  XX(padding_valid, "valid padding slots")                                \
  XX(dropped_train, "train documents longer than a row (bfd drops them)") \
  XX(dropped_valid, "valid documents longer than a row (bfd drops them)") \
  XX(dropped_tok_train, "train tokens of dropped documents")              \
  XX(dropped_tok_valid, "valid tokens of dropped documents")              \
  XX(rows_train, "train rows")                                            \
  XX(rows_valid, "valid rows")

enum {
#define XX(n, h) ST_##n,
  STAT_TABLE(XX)
#undef XX
      NSTAT
};
enum { SPLIT_TRAIN, SPLIT_VALID };

typedef struct Input {
  char *path;
  int64_t bytes;
  char sha[65];
  bool valid; /* from valid_inputs */
} Input;

typedef struct Section {
  char *field, *role;
  bool train;
} Section;

typedef struct Record {
  int in;         /* input index */
  int64_t lineno; /* line in that input */
  size_t off;     /* the line in Prep.rtext */
  size_t len;
} Record;

/* Rows of a split in memory, (cap x R) per array; reused across shards. */
typedef struct RowBuf {
  int64_t cap;
  uint32_t *tok;
  uint8_t *mask;
  int32_t *seg, *pos;
} RowBuf;

typedef struct Prep {
  const FmDeck *deck;
  FmComm *world;
  FILE *log; /* rank 0 only */
  int rank, P;
  FmTokenizer *tok;
  int32_t eos;
  uint32_t pad;
  FmPacking packing;
  FmPosIds pos;
  bool sft, skip_bad;
  FmTemplate tmpl;
  Section sec[16];
  int nsec;
  int64_t R, W, min_chars, max_chars;
  double valid_fraction;
  Input *in;
  int nin;
  int64_t total_bytes;
  char *out, *work, *stage; /* stage: work/stage, where the new shards and manifests wait (fm__prep_publish) */
  /* window being built */
  Record *rec;
  int64_t nrec, reccap;
  char *rtext; /* the window's lines, each NUL-terminated; kept across windows */
  size_t rtlen, rtcap;
  /* encoded documents of one window: ids and masks, offsets per doc */
  int32_t *ids;
  int64_t nids, idcap;
  uint8_t *mask;
  int64_t maskcap;
  int64_t *doff[2], ndoc[2], doccap[2]; /* per split: (start, end) of each document */
  FmDoc *docs;                          /* one split's documents, for fm_pack */
  int64_t docscap;
  FmPacked pk[2]; /* a window's rows; buffers kept across windows */
  int32_t *wseg;  /* a window's segment lengths, as committed */
  int64_t wsegcap;
  int idw;              /* bytes per token id in the window files this prep writes: 2 when the vocab fits u16, else 4 */
  uint16_t *id16;       /* FM_WRITE_CHUNK bytes, made once: ids narrowed for a window file, or read from one to widen */
  RowBuf part, scratch; /* phase 2: a chunk of this rank's rows of a shard; rows read for a checksum */
  int64_t stat[NSTAT];
  /* progress */
  double t0, t_last;
  int64_t done_docs, done_tokens, rounds, blank;
} Prep;

typedef struct Bad {
  char why[320];
} Bad;

/* Per-window row counts and stats, as read back from a window file. */
typedef struct WinInfo {
  int64_t rows[2], stat[NSTAT];
  int64_t idw; /* bytes per token id in the file: 2 or 4 (only int64s: ranks sum WinInfos as int64 arrays) */
} WinInfo;

/* Every rank returns the lowest status any rank had. */
static inline int agree(FmComm *c, int rc) {
  int32_t r = rc, worst = 0;
  if (fm_comm_allreduce(c, &r, &worst, 1, FM_DT_I32, FM_OP_MIN)) return FM_EMPI;
  return worst;
}

/* prep_read.c */
int fm__prep_configure(Prep *p, FILE *err);
int fm__prep_expand_inputs(Prep *p);
int fm__prep_do_record(Prep *p, const Record *r, Bad *bad);

/* prep_out.c */
char *fm__prep_win_path(const Prep *p, int64_t w, bool partial);
int fm__prep_commit_window(Prep *p, int64_t w, FmPacked pk[2]);
int fm__prep_read_window_header(const Prep *p, int64_t w, WinInfo *wi);
int fm__prep_write_split(Prep *p, int s, int64_t nW, const WinInfo *wi, const int64_t *tot, int64_t *nshards_out);
void fm__prep_report(const Prep *p, const int64_t *tot, int64_t nW, const int64_t nsh[2], double secs);
int fm__prep_prepare_dirs(Prep *p);
void fm__prep_remove_work(const Prep *p, int64_t nW);
void fm__prep_remove_stale(const Prep *p, const int64_t nsh[2], bool wrote_valid);
/* The new store is written into p->stage (fm__prep_write_split), not over the
 * output directory's files: a prep that fails or is killed while writing
 * leaves a store already there as it was. Collective. clear_stage empties
 * and creates it (rank 0; 0 or FM_EIO, agreed), drop_stage removes it (rank
 * 0), publish moves its shards into the output directory, then the
 * manifests, valid.json before train.json (0 or FM_EIO, agreed). */
int fm__prep_clear_stage(const Prep *p);
void fm__prep_drop_stage(const Prep *p);
int fm__prep_publish(const Prep *p);
void fm__prep_rowbuf_free(RowBuf *b);

#endif
