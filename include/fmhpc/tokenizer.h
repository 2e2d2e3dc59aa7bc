/* tokenizer.h: byte-level BPE tokenizers (GPT-2, cl100k/tiktoken, Llama 3,
 * and tokenizers fmhpc trains itself). Pre-tokenization by a PCRE2 regex (UTF
 * + UCP), byte-to-unicode mapping, merges by rank; special tokens matched
 * only when asked. Loaders: GPT-2 encoder.json + vocab.bpe, Hugging Face
 * tokenizer.json (BPE model), tiktoken rank files. Writer: tokenizer.json.
 * Training: task='tokenizer' (src/data/bpe_train.c). */
#ifndef FMHPC_TOKENIZER_H
#define FMHPC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct FmTokenizer FmTokenizer;

/* Load from a path: a tokenizer.json file, a tiktoken rank file (*.tiktoken),
 * or a directory holding encoder.json + vocab.bpe (GPT-2). Errors name the
 * file, the place (line:col or entry) and the rule, to err, and return
 * FM_EFORMAT / FM_EIO. */
int fm_tok_load(FmTokenizer **tok, const char *path, FILE *err);
void fm_tok_free(FmTokenizer *tok);

int64_t fm_tok_vocab_size(const FmTokenizer *tok); /* largest id + 1, specials included */
/* The id of a special token ("<|endoftext|>"), or -1. */
int32_t fm_tok_special_id(const FmTokenizer *tok, const char *name);
/* End-of-document id used between documents (the tokenizer's EOS/EOT). */
int32_t fm_tok_eos_id(const FmTokenizer *tok);
/* SHA-256 hex of the canonical vocabulary + merges + specials + pattern:
 * equal for the same tokenizer however it was stored. */
const char *fm_tok_hash(const FmTokenizer *tok);

/* Encode text[0..n). Special tokens are recognised only when
 * allow_special is true; otherwise their text is encoded as plain bytes.
 * Appends to *ids (grown with realloc; *cap tracks its size); returns the
 * number of ids appended, or a negative FM_E* status. */
int64_t fm_tok_encode(const FmTokenizer *tok, const char *text, size_t n, bool allow_special, int32_t **ids,
                      int64_t *len, int64_t *cap);
/* Decode ids into bytes (appended to *out, NUL-terminated); FM_EINVAL for
 * an id outside the vocabulary. */
int fm_tok_decode(const FmTokenizer *tok, const int32_t *ids, int64_t n, char **out, size_t *len, size_t *cap);

/* Write a Hugging Face tokenizer.json (BPE model, ByteLevel pre-tokenizer
 * and decoder, added tokens) atomically (temp file + rename). */
int fm_tok_save_json(const FmTokenizer *tok, const char *path, FILE *err);

/* ---- threads and caches ------------------------------------------------ */
/* fm_tok_encode keeps per-thread scratch (PCRE2 match data, JIT stack, and a
 * cache of pre-token -> ids) in a thread-local FmTokCache, so one tokenizer
 * may be shared by threads. Callers that want the cache in their own hands
 * (bounded lifetime, several tokenizers per thread) use these. */
typedef struct FmTokCache FmTokCache;
FmTokCache *fm_tok_cache_new(const FmTokenizer *tok);
void fm_tok_cache_free(FmTokCache *c);
int64_t fm_tok_encode_cached(const FmTokenizer *tok, FmTokCache *c, const char *text, size_t n,
                             bool allow_special, int32_t **ids, int64_t *len, int64_t *cap);

/* ---- inspection --------------------------------------------------------- */
/* The bytes id decodes to (a special token's text for specials), or NULL for
 * an id outside the vocabulary or in a hole. */
const char *fm_tok_token_bytes(const FmTokenizer *tok, int32_t id, size_t *n);
bool fm_tok_is_special(const FmTokenizer *tok, int32_t id);
/* The pre-tokenizer regex (PCRE2 syntax), or NULL when the whole text is one
 * pre-token. */
const char *fm_tok_pattern(const FmTokenizer *tok);

/* Pre-tokenizer patterns of the reference tokenizers, verbatim. */
/* GPT-2 (openai/gpt-2 encoder.py; also r50k_base, p50k_base, HF ByteLevel). */
#define FM_TOK_PATTERN_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* cl100k_base (tiktoken_ext/openai_public.py) = Llama 3's Split pattern. */
#define FM_TOK_PATTERN_CL100K                                                                     \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
  "\\s+(?!\\S)|\\s+"

/* ---- training (task='tokenizer', src/data/bpe_train.c) ------------------ */
/* Byte-level BPE training. Documents i = 0..ndocs-1 are read through
 * read_doc; rank r of comm counts the words (pre-tokens) of documents with
 * i % size == r; the counts are merged exactly on every rank, and every rank
 * then runs the same deterministic merges: the pair with the highest count,
 * ties broken by the lexicographically smallest (left bytes, right bytes).
 * The result does not depend on the rank count. Ids: 0..255 the bytes, then
 * merged tokens in merge order, then the special tokens (the first is EOS). */
typedef struct FmComm FmComm;
typedef struct FmBpeTrainOpts {
  int64_t vocab_size;          /* target, specials included (e.g. 100000) */
  const char *const *specials; /* special tokens, e.g. "<|endoftext|>" */
  int nspecials;
  const char *pattern;         /* pre-tokenizer regex; NULL: FM_TOK_PATTERN_CL100K */
  int64_t min_frequency;       /* stop when the best pair is seen fewer times (<= 1: never) */
  int64_t ndocs;
  /* Document i as malloc'd bytes (the trainer frees them); 0 or FM_E*. */
  int (*read_doc)(void *ctx, int64_t i, char **text, size_t *len);
  void *ctx;
  double progress_every_s;     /* progress line interval on rank 0 (0: 2 s on a terminal, else 10 s) */
} FmBpeTrainOpts;
/* comm may be NULL (one process). log: progress lines (rank 0 only; NULL
 * for none). Errors go to stderr on the rank that saw them and are agreed
 * on by all ranks. */
int fm_bpe_train(const FmBpeTrainOpts *o, FmComm *comm, FmTokenizer **out, FILE *log);

/* task='tokenizer' (src/data/tok_task.c): train on the &tokenizer inputs
 * (JSONL globs; each record's 'text') and write &tokenizer output. */
#include "fmhpc/deck.h"
int fm_tokenizer_task(const FmDeck *deck, FmComm *world, FILE *log);

/* ---- command line (fmhpc --encode/--decode TOK) -------------------------- */
/* Read a text file, gunzipping *.gz (documents of corpora and tests). */
int fm_tok_read_text(const char *path, char **text, size_t *len);
/* --encode: stdin text -> ids separated by spaces, then a newline.
 * --decode: ids (any whitespace) -> bytes. Return 0 or FM_E*, message to err. */
int fm_tok_cli_encode(const char *tok_path, FILE *in, FILE *out, FILE *err);
int fm_tok_cli_decode(const char *tok_path, FILE *in, FILE *out, FILE *err);

#endif
