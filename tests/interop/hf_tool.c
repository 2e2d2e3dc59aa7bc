/* hf_tool.c: a small driver for the Python interop checks (check_hf.py).
 *   hf_tool export DIR OVERRIDE...        weights w[j] = formula(j) -> DIR (HF format)
 *   hf_tool import DIR OUT.bin OVERRIDE... DIR -> weights, raw little-endian fp32 in OUT.bin
 *   hf_tool export-init DIR OVERRIDE...   weights fmhpc's initialisation (&run seed,
 *                                         &model init_std) + formula(j) / 20, so no
 *                                         norm weight is 1 and no bias 0 -> DIR
 *   hf_tool logits DIR IDS.bin OUT.bin OVERRIDE...
 *                                         DIR's weights on the CPU backend, fp32:
 *                                         the logits (T x V fp32) of one sequence
 *                                         of T int32 ids at positions 0..T-1
 * export and import write the parameter table (name, shape, element offset)
 * and the dims as JSON next to their output, so Python can check the HF
 * layout against fmhpc's canonical one independently; logits is for a
 * reference that runs the HF model itself (regression/gpu/refs.py hf:
 * transformers on the GPU machine). The model comes from deck overrides
 * ("model%arch='llama'" ...), through the same binding a run uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/interop.h"
#include "fmhpc/model.h"

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

/* T int32 ids from ids_path, the model's logits at every position into out_path. */
static int logits(const FmDeck *deck, const char *dir, const char *ids_path, const char *out_path) {
  FmLoadedModel lm;
  FmModelLoadOpts o = {.micro_batch = 1, .hf_dir = dir};
  if (fm_model_load(&lm, deck, &o, NULL, stderr)) return 1;
  const int64_t T = lm.dims.T, V = lm.dims.V;
  int32_t *ids = calloc((size_t)T, sizeof *ids), *pos = calloc((size_t)T, sizeof *pos);
  float *out = calloc((size_t)(T * V), sizeof *out);
  int rc = 1;
  FILE *f = fopen(ids_path, "rb");
  if (!f || fread(ids, sizeof *ids, (size_t)T, f) != (size_t)T)
    fprintf(stderr, "hf_tool: %s: expected %lld int32 ids (&model seq_len)\n", ids_path, (long long)T);
  else {
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)t;
    fm_model_logits(lm.model, &(FmModelInput){.tokens = ids, .pos = pos}, NULL, T, out);
    FILE *g = fopen(out_path, "wb");
    rc = !g || fwrite(out, sizeof *out, (size_t)(T * V), g) != (size_t)(T * V);
    if (g && fclose(g)) rc = 1;
    if (rc) perror(out_path);
  }
  if (f) fclose(f);
  free(ids);
  free(pos);
  free(out);
  fm_model_free(lm.model);
  return rc;
}

int main(int argc, char **argv) {
  const bool is_init = argc >= 3 && !strcmp(argv[1], "export-init");
  const bool is_export = is_init || (argc >= 3 && !strcmp(argv[1], "export"));
  const bool is_import = argc >= 4 && !strcmp(argv[1], "import");
  const bool is_logits = argc >= 5 && !strcmp(argv[1], "logits");
  if (!is_export && !is_import && !is_logits) {
    fprintf(stderr,
            "usage: hf_tool export DIR OVERRIDE... | hf_tool import DIR OUT.bin OVERRIDE... | "
            "hf_tool export-init DIR OVERRIDE... | hf_tool logits DIR IDS.bin OUT.bin OVERRIDE...\n");
    return 2;
  }
  const int first = is_export ? 3 : is_import ? 4 : 5;
  FmDeckSource src[32];
  int n = 0;
  for (int i = first; i < argc && n < 32; i++) src[n++] = (FmDeckSource){"<command line>", argv[i], true};
  FmDeck deck;
  fm_deck_init(&deck);
  if (is_logits) {
    int rc = fm_deck_bind(&deck, n, src, stderr) ? 2 : logits(&deck, argv[2], argv[3], argv[4]);
    fm_deck_free(&deck);
    return rc;
  }
  FmModelDims d;
  const FmModelKind *k = NULL;
  if (fm_deck_bind(&deck, n, src, stderr) || fm_model_dims(&d, &k, &deck, stderr)) return 2;
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = calloc((size_t)tab.numel, sizeof *w);
  int rc;
  char path[4096];
  if (is_export) {
    if (is_init)
      fm_model_init_range(w, &tab, d.L, 0, tab.numel, (uint64_t)deck.c.run.seed, deck.c.model.init_std,
                          deck.c.model.residual_scaled_init);
    for (int64_t j = 0; j < tab.numel; j++) w[j] = is_init ? w[j] + formula(j) / 20.0f : formula(j);
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
