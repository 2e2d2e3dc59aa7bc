/* ifd_model.c: a small model in Hugging Face format for the IFD and eval
 * end-to-end test (tests/ifd/ifd_case.sh).
 *   ifd_model DIR SEED INIT_STD OVERRIDE...
 * The model comes from deck overrides ("model%d_model=32" ...) through the
 * same binding a run uses; its weights are fmhpc's seeded init
 * (fm_model_init_range) with a large init_std, so that losses differ from
 * ln V and from record to record. */
#include <stdlib.h>

#include "fmhpc/interop.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ifd_model DIR SEED INIT_STD OVERRIDE...\n");
    return 2;
  }
  FmDeckSource src[32];
  int n = 0;
  for (int i = 4; i < argc && n < 32; i++) src[n++] = (FmDeckSource){"<command line>", argv[i], true};
  FmDeck deck;
  fm_deck_init(&deck);
  FmModelDims d;
  const FmModelKind *k = NULL;
  if (fm_deck_bind(&deck, n, src, stderr) || fm_model_dims(&d, &k, &deck, stderr)) return 2;
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = calloc((size_t)tab.numel, sizeof *w);
  fm_model_init_range(w, &tab, d.L, 0, tab.numel, strtoull(argv[2], NULL, 10), strtod(argv[3], NULL), false);
  const int rc = fm_hf_export(argv[1], k, &d, &tab, w, stderr);
  free(w);
  fm_table_free(&tab);
  fm_deck_free(&deck);
  return rc ? 1 : 0;
}
