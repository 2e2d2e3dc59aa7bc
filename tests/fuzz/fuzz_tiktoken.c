/* fuzz_tiktoken: a tiktoken rank file (src/tokenizer/load.c). Input: a byte
 * choosing the file's name (which encoding's pattern and specials apply:
 * r50k_base, p50k_base, cl100k_base, o200k_base, or an unknown name), then
 * the file. fuzz_tok_common.h says what is checked when it loads. The
 * encoding's rank count is not required (FMHPC_TOK_TEST_ANY_RANK_COUNT), or
 * no file of fuzzer size would load. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *names[] = {"r50k_base.tiktoken", "p50k_base.tiktoken", "cl100k_base.tiktoken",
                                "o200k_base.tiktoken", "other.tiktoken"};
  if (size < 1) return 0;
  setenv("FMHPC_TOK_TEST_ANY_RANK_COUNT", "1", 1); /* small files load, so that encoding is fuzzed too */
  char path[512];
  fz_write(path, sizeof path, names[data[0] % 5], data + 1, size - 1);
  fz_tok_exercise(path, data + 1, size - 1);
  unlink(path);
  return 0;
}
