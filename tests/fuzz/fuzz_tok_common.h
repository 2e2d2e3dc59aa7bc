/* fuzz_tok_common.h: what the three tokenizer harnesses (tokenizer.json,
 * GPT-2 encoder.json + vocab.bpe, tiktoken) do once fm_tok_load accepted the
 * fuzz bytes: encode a fixed multilingual text and a piece of the input,
 * without and with special tokens, decode, and check that decoding the ids
 * of plain text (specials not allowed) gives the text back, byte for byte:
 * a byte-level BPE represents every byte (unless add_prefix_space, which
 * prepends a space to each pre-token by design). */
#ifndef FMHPC_FUZZ_TOK_COMMON_H
#define FMHPC_FUZZ_TOK_COMMON_H

#include "fmhpc/core.h"
#include "fmhpc/tokenizer.h"
#include "fuzz_common.h"
#include "tokenizer/tokenizer_internal.h"

static void fz_tok_roundtrip(const FmTokenizer *tok, const char *text, size_t n) {
  for (int special = 0; special < 2; special++) {
    int32_t *ids = NULL;
    int64_t len = 0, cap = 0;
    int64_t k = fm_tok_encode(tok, text, n, special, &ids, &len, &cap);
    if (k < 0) { /* an encode failure is a status (e.g. a regex limit), never a crash */
      free(ids);
      continue;
    }
    if (k != len) abort();
    for (int64_t i = 0; i < len; i++)
      if (ids[i] < 0 || ids[i] >= fm_tok_vocab_size(tok) || !fm_tok_token_bytes(tok, ids[i], &(size_t){0})) {
        fprintf(stderr, "fuzz_tok: encode gave id %d outside the vocabulary\n", ids[i]);
        abort();
      }
    char *out = NULL;
    size_t olen = 0, ocap = 0;
    if (fm_tok_decode(tok, ids, len, &out, &olen, &ocap)) abort();
    if (!special && !tok->add_prefix_space && (olen != n || memcmp(out, text, n) != 0)) {
      fprintf(stderr, "fuzz_tok: decode(encode(text)) differs from the text (%zu -> %lld ids -> %zu bytes)\n", n,
              (long long)len, olen);
      abort();
    }
    free(out);
    free(ids);
  }
}

static void fz_tok_exercise(const char *path, const uint8_t *data, size_t size) {
  FmTokenizer *tok = NULL;
  FzErr e;
  int rc = fm_tok_load(&tok, path, fz_err_open(&e));
  fz_said(&e, rc, "fm_tok_load");
  if (rc) return;
  static const char sample[] = "Hello, world! <|endoftext|> caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80  12345 "
                               "it's\n\n\tdone <|im_start|>user\n";
  fz_tok_roundtrip(tok, sample, sizeof sample - 1);
  fz_tok_roundtrip(tok, (const char *)data, size < 256 ? size : 256);
  (void)fm_tok_hash(tok);
  (void)fm_tok_eos_id(tok);
  fm_tok_free(tok);
}

#endif
