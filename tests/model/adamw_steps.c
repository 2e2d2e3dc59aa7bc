/* adamw_steps.c: 10 AdamW steps of the tiny GPT-2 or Llama of
 * model_testing.h, for adamw_steps.py to repeat in PyTorch.
 *   adamw_steps <out_dir> <gpt2|llama> <tied 0|1>
 * Writes hf/ (the initial weights, fm_hf_export), batch_<s>.{tokens,targets,
 * pos,seg}.i32 and batch_<s>.weight.f32 for each step s, and losses.txt (one
 * loss per step, %.9e). AdamW as the train loop runs it: lr 1e-2, betas
 * (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices only (fmhpc's default
 * mask: no decay on norms, biases, embeddings). */
#include <stdio.h>

#include "fmhpc/interop.h"
#include "fmhpc/optim.h"
#include "model_testing.h"

static int dump(const char *dir, int s, const char *what, const void *p, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/batch_%d.%s", dir, s, what);
  FILE *f = fopen(path, "wb");
  int bad = !f || fwrite(p, 1, bytes, f) != bytes;
  if (f) bad |= fclose(f) != 0;
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: adamw_steps <out_dir> <gpt2|llama> <tied 0|1>\n");
    return 2;
  }
  const char *dir = argv[1], *arch = argv[2];
  FmModel *m = tiny_model(arch, argv[3][0] == '1', false);
  if (!m) return 1;
  const FmModelDims *d = fm_model_get_dims(m);
  const FmTensorTable *tab = fm_model_params(m);
  char path[1024];
  snprintf(path, sizeof path, "%s/hf", dir);
  if (fm_hf_export(path, fm_model_find(arch), d, tab, fm_model_param_arena(m), stderr)) return 1;
  FmOptimParams op = {.kind = fm_optim_find("adamw"), .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  FmOptim *opt = fm_optim_create(&op, tab, 0, tab->numel, stderr);
  snprintf(path, sizeof path, "%s/losses.txt", dir);
  FILE *out = fopen(path, "w");
  if (!opt || !out) return 1;
  int rc = 0;
  for (int s = 0; s < 10; s++) {
    TinyBatch b;
    tiny_batch(&b, d->V, 100 + (uint64_t)s);
    const size_t nb = (size_t)TINY_N * 4;
    rc |= dump(dir, s, "tokens.i32", b.tokens, nb) | dump(dir, s, "targets.i32", b.targets, nb) |
          dump(dir, s, "pos.i32", b.pos, nb) | dump(dir, s, "seg.i32", b.seg, nb) |
          dump(dir, s, "weight.f32", b.weight, nb);
    fm_model_zero_grad(m);
    const double loss = fm_model_forward_backward(m, &b.in, b.weight, true);
    fm_optim_step(opt, fm_model_param_arena(m), fm_model_grad_arena(m), s + 1, 1e-2f);
    fprintf(out, "%.9e\n", loss);
  }
  rc |= fclose(out) != 0;
  fm_optim_free(opt);
  fm_model_free(m);
  return rc;
}
