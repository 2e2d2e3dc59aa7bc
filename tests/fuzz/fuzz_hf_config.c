/* fuzz_hf_config: a Hugging Face config.json checked against the deck's
 * model (src/interop/hf_config.c and the adapters hf_gpt2.c, hf_llama.c), as
 * import and init_from do. Input: a byte choosing the deck's model (gpt2 or
 * llama, small dims), then config.json. At start the config fmhpc itself
 * writes for each model must pass the check (a round trip). */
#include "fmhpc/deck.h"
#include "fmhpc/interop.h"
#include "fmhpc/model.h"
#include "fuzz_common.h"

static const FmModelKind *kind[2];
static FmModelDims dims[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  static const char *decks[2] = {
      "&model arch='gpt2' d_model=64 n_layer=2 n_head=4 vocab_size=100 seq_len=32 /",
      "&model arch='llama' d_model=64 n_layer=2 n_head=4 n_kv_head=2 vocab_size=100 seq_len=32 tie_embeddings=.false. /"};
  for (int i = 0; i < 2; i++) {
    FmDeck d;
    fm_deck_init(&d);
    FmDeckSource s = {"fuzz.in", decks[i], false};
    if (fm_deck_bind(&d, 1, &s, stderr) || fm_model_dims(&dims[i], &kind[i], &d, stderr)) abort();
    fm_deck_free(&d);
    char path[512];
    fz_path(path, sizeof path, i ? "llama_config.json" : "gpt2_config.json");
    if (fm_hf_config_write(path, kind[i], &dims[i], stderr) || fm_hf_config_check(path, kind[i], &dims[i], stderr)) {
      fprintf(stderr, "fuzz_hf_config: fmhpc's own config.json for %s does not pass its check\n", kind[i]->name);
      abort();
    }
  }
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int m = data[0] & 1;
  char path[512];
  fz_write(path, sizeof path, "config.json", data + 1, size - 1);
  FzErr e;
  int rc = fm_hf_config_check(path, kind[m], &dims[m], fz_err_open(&e));
  fz_said(&e, rc, "fm_hf_config_check");
  return 0;
}
