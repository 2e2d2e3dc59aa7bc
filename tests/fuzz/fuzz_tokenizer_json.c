/* fuzz_tokenizer_json: a Hugging Face tokenizer.json (src/tokenizer/load.c,
 * vocab.c, bpe.c). Input: the file. fuzz_tok_common.h says what is checked
 * when it loads. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[512];
  fz_write(path, sizeof path, "tokenizer.json", data, size);
  fz_tok_exercise(path, data, size);
  return 0;
}
