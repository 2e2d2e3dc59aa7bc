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

#endif
