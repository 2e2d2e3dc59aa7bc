/* model_dump.c: writes what tests/model/ref_models.py checks fmhpc against.
 *   model_dump <out_dir> <gpt2|llama> <tied 0|1>
 * runs one forward + backward of the tiny model and batch of
 * model_testing.h on the CPU backend and writes raw little-endian files:
 * params.f32 and grads.f32 (the flat arenas, laid out by the parameter table),
 * logits.f32 (B*T x V), tokens/targets/pos/seg.i32 and weight.f32 (B*T), and
 * index.json with the dims, the loss, per-layer residual variances and the
 * table (name, shape, offset); and the weights as a Hugging Face model
 * (hf/config.json + hf/model.safetensors, fm_hf_export), which the reference
 * loads. */
#include <stdio.h>

#include "fmhpc/interop.h"
#include "model_testing.h"

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, bytes, f) != bytes) {
    fprintf(stderr, "model_dump: cannot write %s\n", path);
    if (f) fclose(f);
    return 1;
  }
  return fclose(f) != 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: model_dump <out_dir> <gpt2|llama> <tied 0|1>\n");
    return 2;
  }
  const char *dir = argv[1], *arch = argv[2];
  const bool tied = argv[3][0] == '1';
  FmModel *m = tiny_model(arch, tied, false);
  if (!m) return 1;
  const FmModelDims *d = fm_model_get_dims(m);
  const FmTensorTable *tab = fm_model_params(m);
  TinyBatch b;
  tiny_batch(&b, d->V, 5);
  fm_model_zero_grad(m);
  const double loss = fm_model_forward_backward(m, &b.in, b.weight, true);
  double var[16];
  const int L = fm_model_act_stats(m, var);
  float *logits = malloc((size_t)(TINY_N * d->V) * sizeof(float));
  fm_model_logits(m, &b.in, NULL, 0, logits);
  const size_t pb = (size_t)tab->numel * sizeof(float), nb = (size_t)TINY_N * 4;
  int rc = write_raw(dir, "params.f32", fm_model_param_arena(m), pb) |
           write_raw(dir, "grads.f32", fm_model_grad_arena(m), pb) |
           write_raw(dir, "logits.f32", logits, (size_t)(TINY_N * d->V) * sizeof(float)) |
           write_raw(dir, "tokens.i32", b.tokens, nb) | write_raw(dir, "targets.i32", b.targets, nb) |
           write_raw(dir, "pos.i32", b.pos, nb) | write_raw(dir, "seg.i32", b.seg, nb) |
           write_raw(dir, "weight.f32", b.weight, nb);
  char path[1024];
  snprintf(path, sizeof path, "%s/hf", dir);
  rc |= fm_hf_export(path, fm_model_find(arch), d, tab, fm_model_param_arena(m), stderr) != 0;
  snprintf(path, sizeof path, "%s/index.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f,
          "{\"arch\": \"%s\", \"tied\": %s, \"B\": %lld, \"T\": %lld, \"C\": %lld, \"L\": %lld, \"NH\": %lld, "
          "\"NKV\": %lld, \"HS\": %lld, \"F\": %lld, \"V\": %lld, \"eps\": %.17g, \"theta\": %.17g, "
          "\"loss\": %.17g,\n \"act_var\": [",
          arch, tied ? "true" : "false", (long long)TINY_B, (long long)d->T, (long long)d->C, (long long)d->L,
          (long long)d->NH, (long long)d->NKV, (long long)d->HS, (long long)d->F, (long long)d->V, d->norm_eps,
          d->rope_theta, loss);
  for (int l = 0; l < L; l++) fprintf(f, "%s%.17g", l ? ", " : "", var[l]);
  fprintf(f, "],\n \"params\": [\n");
  for (int i = 0; i < tab->n; i++) {
    const FmTensor *t = &tab->t[i];
    fprintf(f, "  {\"name\": \"%s\", \"offset\": %lld, \"shape\": [", t->name, (long long)t->offset);
    for (int k = 0; k < t->ndim; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)t->shape[k]);
    fprintf(f, "]}%s\n", i + 1 < tab->n ? "," : "");
  }
  fprintf(f, " ]}\n");
  rc |= fclose(f) != 0;
  free(logits);
  fm_model_free(m);
  return rc;
}
