/* fuzz_gpt2_bpe: a GPT-2 tokenizer directory, encoder.json + vocab.bpe
 * (src/tokenizer/load.c). Input: encoder.json, a 0x1e byte, vocab.bpe.
 * fuzz_tok_common.h says what is checked when it loads. */
#include <sys/stat.h>

#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char dir[512], enc[600], bpe[600];
  fz_path(dir, sizeof dir, "gpt2");
  mkdir(dir, 0700);
  size_t k = fz_split(data, size, 0x1e);
  fz_write(enc, sizeof enc, "gpt2/encoder.json", data, k);
  fz_write(bpe, sizeof bpe, "gpt2/vocab.bpe", data + (k < size ? k + 1 : k), k < size ? size - k - 1 : 0);
  fz_tok_exercise(dir, data + (k < size ? k + 1 : k), k < size ? size - k - 1 : 0);
  return 0;
}
