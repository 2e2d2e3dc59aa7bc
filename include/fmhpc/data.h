/* data.h: training data. The prep task (JSONL -> tokens -> packed shards),
 * the packer, SFT chat templates, the streaming JSONL reader, the stores that
 * read packed shards (HDF5 with collective hyperslab reads, .bin by mmap) and
 * the stateless sampler of DESIGN section 7. The tokenizer has its own header
 * (tokenizer.h); the on-disk layout is documented in docs/data-format.md.
 *
 * A training loop does:
 *   FmStore *st; fm_store_open(&st, cfg.data.train, cfg.data.format, dp_comm, stderr);
 *   FmSampler s; fm_sampler_init(&s, fm_store_info(st)->n_seq, B, b, dp, dp_rank, seed, stderr);
 *   FmBatch mb; fm_batch_alloc(&mb, b, fm_store_info(st)->seq_len);
 *   for each owned micro-batch m: fm_sampler_micro_ids(&s, step, m, ids);
 *                                 fm_store_read_batch_coll(st, ids, b, &mb);
 * Vocabulary: B global batch, b micro-batch, M = B/b micro-batches per step,
 * P data-parallel ranks, N samples in the store, T = seq_len, R = T + 1 the
 * stored row length (a row holds T inputs and, shifted by one, T targets). */
#ifndef FMHPC_DATA_H
#define FMHPC_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fmhpc/core.h"
#include "fmhpc/deck.h"
#include "fmhpc/runtime.h"

/* ---- prep: task='prep' ------------------------------------------------- */
/* Run &prep of the deck on every rank of `world`. `log` is where rank 0 talks
 * (progress, the report); other ranks only report errors, to stderr. Returns
 * 0 or the same FM_E* on every rank. */
int fm_prep_run(const FmDeck *deck, FmComm *world, FILE *log);

/* ---- packing ----------------------------------------------------------- */
typedef enum { FM_PACK_SIMPLE, FM_PACK_BFD, FM_PACK_BFD_SPLIT } FmPacking;
typedef enum { FM_POS_NONE, FM_POS_DOC_RESET, FM_POS_CONTINUOUS } FmPosIds;
int fm_packing_parse(const char *s, FmPacking *p); /* FM_EINVAL for an unknown name */
int fm_posids_parse(const char *s, FmPosIds *p);
const char *fm_packing_name(FmPacking p);
const char *fm_posids_name(FmPosIds p);

/* One document ready to pack: its ids (ending in exactly one EOS) and the
 * loss mask of each id (1: trained when it is a target). */
typedef struct FmDoc {
  const int32_t *tok;
  const uint8_t *mask;
  int64_t n;
} FmDoc;

/* Packed rows of length R = seq_len + 1, all (rows, R). Segment ids count
 * the pieces of a row from 1; padding is segment 0, loss mask 0, id pad_id.
 * A piece is a document or the part of one that a cut left in this row: it
 * always starts a new segment. */
typedef struct FmPacked {
  int64_t R, rows, cap;
  uint32_t *tokens;
  uint8_t *loss_mask;
  int32_t *position_ids;
  int32_t *segment_ids;
  int64_t docs;           /* documents packed (whole or in pieces) */
  int64_t tokens_real;    /* ids from documents (EOS included) */
  int64_t padding;        /* pad slots */
  int64_t dropped_docs;   /* bfd: documents longer than R ids (not packed) */
  int64_t dropped_tokens; /* their ids */
  /* Lean packing (set lean before a call on an FmPacked with no rows and no
   * pieces yet: fresh, or its counts reset with its buffers kept; one call
   * per reset): only tokens are written, and loss_mask only when some document has
   * a mask (mask_odd: some packed id's mask is not 1); segment and position
   * ids are not. Each row's segments are kept instead as pieces (row, length)
   * that fm_pack_segments orders. For prep's window files, which store a row
   * as its segment lengths and rebuild the ids from them. */
  bool lean, has_mask, mask_odd;
  int64_t npiece, piececap;
  int64_t *piece_row;
  int32_t *piece_len;
} FmPacked;

/* Pack docs[0..n) in order. simple: concatenate and cut every R ids (only
 * the last row pads). bfd: best-fit decreasing into rows of R (equal lengths
 * in input order; equal rooms: the row that reached it last); documents longer than R are dropped and counted. bfd_split:
 * cut documents into R-id chunks and a remainder, then bfd. Appends to out
 * (zeroed or from a previous call). */
int fm_pack(FmPacked *out, const FmDoc *docs, int64_t n, int64_t seq_len, FmPacking how, FmPosIds pos,
            uint32_t pad_id);
void fm_packed_free(FmPacked *p);
/* Lean packing's segments: out[r] = the number of segments of row r (rows
 * entries), then every segment's length, rows in order and each row's
 * segments from column 0 on (npiece entries): what the segment ids of a full
 * packing say, as lengths. */
void fm_pack_segments(const FmPacked *p, int32_t *out);

/* ---- SFT chat templates ------------------------------------------------ */
/* A template wraps each turn (role, content) as prefix + content + suffix and
 * may open the document with bos. Prefix, suffix and bos are encoded with
 * special tokens allowed; content never. "{role}" in a built-in prefix is the
 * turn's role. */
enum { FM_TEMPLATE_MAX_ROLES = 16 };
typedef struct FmTemplate {
  char name[16]; /* none | llama3 | chatml | deck */
  char *bos;
  int nroles; /* deck: explicit roles; built-ins: 0 (any role) */
  char *role[FM_TEMPLATE_MAX_ROLES], *prefix[FM_TEMPLATE_MAX_ROLES], *suffix[FM_TEMPLATE_MAX_ROLES];
  char *any_prefix, *any_suffix; /* built-ins: with {role} */
} FmTemplate;
/* From &prep: chat_template and, for 'deck', role_names / role_prefix /
 * role_suffix / template_bos (with \n, \t and \\ escapes). */
int fm_template_from_deck(FmTemplate *t, const FmDeck *deck, FILE *err);
/* A deck string with the escapes \n, \t and \\ read (deck strings are
 * Fortran strings, which have none): the template keys and &generate stop.
 * Caller frees. */
char *fm_template_unescape(const char *s);
int fm_template_builtin(FmTemplate *t, const char *name);
/* Prefix and suffix for a role (NULL when a deck template lacks the role). */
int fm_template_role(const FmTemplate *t, const char *role, char **prefix, char **suffix);
void fm_template_free(FmTemplate *t);

/* ---- stores ------------------------------------------------------------ */
typedef struct FmStoreInfo {
  char format[8]; /* "h5" or "bin" */
  int64_t n_seq;  /* N samples */
  int64_t seq_len, row_len; /* T and R = T + 1 */
  int64_t vocab_size;
  int32_t eos_id, pad_id;
  bool has_position_ids;
  char packing[16], position_ids[16];
  char tokenizer_hash[72];
  int nshards;
} FmStoreInfo;

/* Sample i as the model sees it, all (n, T): tokens = row[0..T), targets =
 * row[1..T+R), loss_mask[t] = 1 when targets[t] counts in the loss,
 * position_ids (stored ones, or t when the store has none), segment_ids of
 * the inputs (0 is padding) for document-causal attention. */
typedef struct FmBatch {
  int64_t n, T, cap;
  int32_t *tokens, *targets, *position_ids, *segment_ids;
  uint8_t *loss_mask;
} FmBatch;
void fm_batch_alloc(FmBatch *b, int64_t cap, int64_t T);
void fm_batch_free(FmBatch *b);

typedef struct FmStore FmStore;
/* Open a store: a manifest (*.json, written by prep, for h5 or bin shards) or
 * one .h5 shard. format: "auto" (by name), "h5" or "bin". comm: NULL opens
 * HDF5 serially; otherwise every rank of comm opens it (collectively, MPI-IO)
 * and may use fm_store_read_batch_coll. Errors name the file and the rule. */
int fm_store_open(FmStore **st, const char *path, const char *format, FmComm *comm, FILE *err);
const FmStoreInfo *fm_store_info(const FmStore *st);
/* Read samples ids[0..n) (each in [0, N)) into b (n <= b->cap). */
int fm_store_read_batch(FmStore *st, const int64_t *ids, int64_t n, FmBatch *b);
/* The same, collective over the comm given at open: every rank calls it the
 * same number of times (n may differ, and may be 0). For .bin it is the
 * plain read. */
int fm_store_read_batch_coll(FmStore *st, const int64_t *ids, int64_t n, FmBatch *b);
/* Raw stored row i (R ids, R mask bytes, R segment ids); tests and tools. */
int fm_store_read_row(FmStore *st, int64_t i, uint32_t *tok, uint8_t *mask, int32_t *seg, int32_t *pos);
void fm_store_close(FmStore *st); /* collective when opened with a comm */
/* fmhpc --verify: opens the store (manifest, every shard's SHA-256) and checks
 * every row (ids < vocab_size, masks 0/1, segment ids as prep numbers them,
 * position ids >= 0), each rank a contiguous share. Collective over comm;
 * prints a summary on out (rank 0's), the first bad row on err. */
int fm_store_verify(const char *path, const char *format, FmComm *comm, FILE *out, FILE *err);

/* ---- sampler (DESIGN section 7) ---------------------------------------- */
/* Slot k = step*B + j, epoch e = k / N, sample = perm(seed, e)(k mod N), with
 * perm a keyed Feistel permutation of [0, N) (cycle walking). Rank r of P
 * owns micro-batches [r*M/P, (r+1)*M/P) of each step; micro-batch m is slots
 * [m*b, (m+1)*b). Stateless: the resume state is the step. */
typedef struct FmSampler {
  int64_t n_samples, global_batch, micro_batch, n_micro; /* N, B, b, M */
  int dp_size, dp_rank;                                   /* P, r */
  uint64_t seed;
  int64_t base_step, base_samples; /* resume: slots restart after base_samples at base_step (0, 0 fresh) */
} FmSampler;
/* FM_EINVAL with a message (to err) unless b | B and P | M and N >= 1. */
int fm_sampler_init(FmSampler *s, int64_t n_samples, int64_t global_batch, int64_t micro_batch, int dp_size,
                    int dp_rank, uint64_t seed, FILE *err);
/* Resume at `step` after `samples` slots were consumed (the checkpoint's
 * count): a run resumed with another global_batch continues from the next
 * unseen slot instead of jumping to step * B_new. */
void fm_sampler_resume(FmSampler *s, int64_t step, int64_t samples);
/* Slots consumed before `step` (what a checkpoint of that step stores). */
int64_t fm_sampler_samples_at(const FmSampler *s, int64_t step);
/* The permutation of [0, n) for (seed, epoch), applied to i. */
int64_t fm_feistel_perm(uint64_t seed, uint64_t epoch, int64_t n, int64_t i);
/* Sample of slot j (0 <= j < B) of a step. */
int64_t fm_sampler_index(const FmSampler *s, int64_t step, int64_t j);
/* This rank's micro-batches of every step: [*first, *first + *count). */
void fm_sampler_my_micro(const FmSampler *s, int64_t *first, int64_t *count);
/* The b sample ids of micro-batch m of a step. */
void fm_sampler_micro_ids(const FmSampler *s, int64_t step, int64_t m, int64_t *ids);

/* ---- shard writers (prep's side of the stores; internal) --------------- */
/* What every shard records about itself and where it came from. */
typedef struct FmShardMeta {
  const char *split;  /* "train" or "valid" */
  int shard, nshards; /* this shard's index and the split's count */
  int64_t first_seq;  /* global index of this shard's row 0 */
  int64_t n_seq, seq_len;
  int64_t vocab_size;
  int32_t eos_id, pad_id;
  const char *packing, *position_ids, *tokenizer_hash;
  const char *sources;    /* "sha256  path\n" lines (sha256sum format) */
  const char *provenance; /* JSON: counts, inputs, the deck */
} FmShardMeta;

/* The most bytes one write() call of prep and the store writers passes: in the
 * VM measured by bench/prep (bench_shard_io.c), 220 MB copied into the page
 * cache of a kept file cost 0.05 CPU-s in 1 MiB calls and 0.53-0.56 s in one. */
#define FM_WRITE_CHUNK ((size_t)1 << 20)

/* The rows a rank writes into one shard: `nruns` runs of consecutive shard
 * rows (start, count), in increasing order, data concatenated in that order. */
typedef struct FmShardPart {
  int64_t nruns;
  const int64_t *run_start, *run_count;
  const uint32_t *tokens;
  const uint8_t *loss_mask;
  const int32_t *position_ids; /* NULL when position_ids = 'none' */
  const int32_t *segment_ids;
} FmShardPart;

/* A shard being written: created collectively (the .partial file or files at
 * their final size), rows put by each rank on its own in any order and
 * pieces (prep streams its rows through a small buffer instead of holding a
 * rank's part of the shard), closed collectively. */
typedef struct FmShardWriter FmShardWriter;
struct FmShardWriter {
  /* Rows [row, row + n) of the shard from arrays of n*R elements (pos
   * ignored when position_ids = 'none'). 0, or FM_EIO with the file named. */
  int (*put)(FmShardWriter *w, int64_t row, int64_t n, const uint32_t *tok, const uint8_t *mask, const int32_t *seg,
             const int32_t *pos);
  /* Collective: close; when every rank's rc (its status so far) is 0, rank 0
   * renames the .partial to the name, else removes it. The lowest rc of any
   * rank. Frees w. */
  int (*close)(FmShardWriter *w, int rc);
};
/* Collective over comm: path.partial with the attributes and the datasets
 * allocated; the same calls for any rank count, so the file's bytes do not
 * depend on it. */
int fm__h5_shard_create(FmShardWriter **w, const char *path, const FmShardMeta *m, FmComm *comm, FILE *err);
/* .bin: path_stem.{tokens,loss_mask,segment_ids,position_ids}.bin.partial at
 * their final sizes, written with pwrite at computed offsets, fsynced and
 * renamed at close. */
int fm__bin_shard_create(FmShardWriter **w, const char *path_stem, const FmShardMeta *m, FmComm *comm, FILE *err);
/* Each run of part through w->put: 0 or the first failure. */
int fm__shard_put_part(FmShardWriter *w, const FmShardPart *part, int64_t R);
/* Every rank's part in one go: create, put each run, close. */
int fm__h5_write_shard(const char *path, const FmShardMeta *m, const FmShardPart *part, FmComm *comm, FILE *err);
int fm__bin_write_shard(const char *path_stem, const FmShardMeta *m, const FmShardPart *part, FmComm *comm, FILE *err);
/* Readers behind fm_store_open, one shard each: a small ops table that the
 * h5 and bin readers embed as their first member. read: rows[0..n)
 * (shard-local, increasing, distinct) into contiguous buffers of n*R (pos may
 * be NULL); coll: a collective read over the comm given at open (n may be 0). */
typedef struct FmShardReader FmShardReader;
struct FmShardReader {
  int (*read)(FmShardReader *r, const int64_t *rows, int64_t n, bool coll, uint32_t *tok, uint8_t *mask,
              int32_t *pos, int32_t *seg);
  void (*close)(FmShardReader *r);
};
/* A shard's checksums: sha256-blocks-v1 (hash.h) of each dataset's elements
 * in row order, read back through its reader (independent reads). prep
 * writes them into the manifest and fm_store_open verifies them; the
 * position_ids entry is "" when none are stored. */
enum { FM_SHARD_NDSETS = 4 };
extern const char *const fm__shard_dsets[FM_SHARD_NDSETS]; /* tokens, loss_mask, segment_ids, position_ids */
/* A barrier over c that sleeps while it waits (blocking MPI collectives poll
 * at full CPU): for ranks that arrive unevenly. 0 or FM_EMPI. */
int fm__idle_barrier(FmComm *c);
void fm__shard_digests(FmShardReader *r, int64_t n_seq, int64_t R, bool has_pos, char hex[FM_SHARD_NDSETS][65]);
/* The sizes a store states (shard attributes or manifest), before any is
 * used: 1 <= seq_len <= 2^30, 0 <= n_seq with n_seq * (seq_len + 1) in
 * int64, 1 <= vocab_size <= 2^31, eos_id and pad_id in [0, vocab_size).
 * 0, or FM_EFORMAT with the value and the rule on err. */
int fm__store_check_sizes(const char *path, int64_t seq_len, int64_t n_seq, int64_t vocab_size, int64_t eos_id,
                          int64_t pad_id, FILE *err);
/* info: filled from the shard's attributes (h5) or checked against them. */
int fm__h5_shard_open(FmShardReader **r, const char *path, FmComm *comm, FmStoreInfo *info, int64_t *n_seq,
                      FILE *err);
int fm__bin_shard_open(FmShardReader **r, const char *path_stem, const FmStoreInfo *info, int64_t n_seq,
                       FILE *err);

#endif
