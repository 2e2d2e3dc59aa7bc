/* hf_tool.c: a small driver for the Python interop checks (check_hf.py).
 *   hf_tool export DIR OVERRIDE...        weights w[j] = formula(j) -> DIR (HF format)
 *   hf_tool import DIR OUT.bin OVERRIDE... DIR -> weights, raw little-endian fp32 in OUT.bin
 * Both write the parameter table (name, shape, element offset) and the dims
 * as JSON next to their output, so Python can check the HF layout against
 * fmhpc's canonical one independently. The model comes from deck overrides
 * ("model%arch='llama'" ...), through the same binding a run uses. */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/interop.h"

/* Exactly representable in fp32 and fp16: multiples of 1/256 in (-2, 2). */
static float formula(int64_t j) { return (float)((j * 37 + 11) % 1001 - 500) / 256.0f; }

static void write_table(const char *path, const FmTensorTable *tab, const FmModelDims *d) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fprintf(f,
          "{\"numel\": %lld, \"dims\": {\"C\": %lld, \"L\": %lld, \"NH\": %lld, \"NKV\": %lld, \"HS\": %lld, "
          "\"F\": %lld, \"V\": %lld, \"T\": %lld, \"tied\": %s},\n \"tensors\": [",
          (long long)tab->numel, (long long)d->C, (long long)d->L, (long long)d->NH, (long long)d->NKV,
          (long long)d->HS, (long long)d->F, (long long)d->V, (long long)d->T, d->tied ? "true" : "false");
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    fprintf(f, "%s\n  {\"name\": \"%s\", \"offset\": %lld, \"shape\": [", i ? "," : "", t->name, (long long)t->offset);
    for (int j = 0; j < t->ndim; j++) fprintf(f, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
    fprintf(f, "]}");
  }
  fprintf(f, "]}\n");
  fclose(f);
}

int main(int argc, char **argv) {
  const bool is_export = argc >= 3 && !strcmp(argv[1], "export");
  const bool is_import = argc >= 4 && !strcmp(argv[1], "import");
  if (!is_export && !is_import) {
    fprintf(stderr, "usage: hf_tool export DIR OVERRIDE... | hf_tool import DIR OUT.bin OVERRIDE...\n");
    return 2;
  }
  const int first = is_export ? 3 : 4;
  FmDeckSource src[32];
  int n = 0;
  for (int i = first; i < argc && n < 32; i++) src[n++] = (FmDeckSource){"<command line>", argv[i], true};
  FmDeck deck;
  fm_deck_init(&deck);
  FmModelDims d;
  const FmModelKind *k = NULL;
  if (fm_deck_bind(&deck, n, src, stderr) || fm_model_dims(&d, &k, &deck, stderr)) return 2;
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = calloc((size_t)tab.numel, sizeof *w);
  int rc;
  char path[4096];
  if (is_export) {
    for (int64_t j = 0; j < tab.numel; j++) w[j] = formula(j);
    rc = fm_hf_export(argv[2], k, &d, &tab, w, stderr);
    snprintf(path, sizeof path, "%s.table.json", argv[2]);
  } else {
    rc = fm_hf_import(argv[2], k, &d, &tab, w, stderr);
    if (!rc) {
      FILE *f = fopen(argv[3], "wb");
      if (!f || fwrite(w, sizeof *w, (size_t)tab.numel, f) != (size_t)tab.numel) rc = FM_EIO;
      if (f) fclose(f);
    }
    snprintf(path, sizeof path, "%s.table.json", argv[3]);
  }
  if (!rc) write_table(path, &tab, &d);
  free(w);
  fm_table_free(&tab);
  fm_deck_free(&deck);
  return rc ? 1 : 0;
}
