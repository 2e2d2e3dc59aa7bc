/* test_emu_model.c: whole training steps of the tiny GPT-2 and Llama
 * (tests/model/model_testing.h: two sequences of 9 tokens, two documents
 * each, masked targets, GQA for Llama, tied and untied embeddings) on the
 * emulated CUDA backend: every op of the step (embedding, norms, matmuls,
 * RoPE, attention, GELU/SwiGLU, cross-entropy, their backwards, the update) is a
 * CUDA kernel of src/tensor/cuda/ run by the SIMT emulator, driven by the
 * model code through an FmBackend generated from ops.def. The table says
 * host_accessible = 0, so the model takes its device path (batch copies,
 * host staging) as on a GPU.
 *
 * Three steps on one micro-batch (zero grad, forward + backward, SGD w -= lr g
 * through the backend's scale and add, lr 0.1):
 *   - the losses equal the CPU backend's within 1e-5 relative and the
 *     weights after step 3 within 1e-5 absolute (kernels sum in other
 *     orders: GEMMs, attention, cross-entropy; a wrong gradient would move
 *     the weights by ~lr |g| ~ 1e-2 and the losses of steps 2 and 3);
 *   - the loss falls (it trains);
 *   - the same loss and weight bits under the forward and a seeded random
 *     thread schedule.
 * SGD, not AdamW, for the weights: AdamW turns a mathematically zero
 * gradient (GPT-2's key bias: softmax ignores it) into +-lr from rounding
 * noise of either sign. AdamW's kernel is compared bitwise in test_emu_ops.
 *     thread schedule. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu/simt.h"
#include "fm_test.h"
#include "model/model_testing.h"

#include "emu_backend.h"

enum { STEPS = 3 };

typedef struct Run {
  double loss[STEPS];
  float *w; /* host copy of the weights after the last step */
  int64_t P;
} Run;

/* STEPS SGD steps of arch on backend be, from tiny_randomize's weights. */
static int train(Run *r, const char *arch, bool tied, const FmBackend *be) {
  const FmModelKind *k = fm_model_find(arch);
  const FmModelDims d = tiny_dims(arch, tied);
  FmModel *m = NULL;
  fm_log_set_quiet(1);
  if (!k || fm_model_create(&m, k, &d, be, TINY_B, false, stderr) != 0) return -1;
  tiny_randomize(m, 42);
  const int64_t P = fm_model_params(m)->numel, bytes = P * (int64_t)sizeof(float);
  TinyBatch b;
  tiny_batch(&b, d.V, 100);
  for (int s = 0; s < STEPS; s++) {
    fm_model_zero_grad(m);
    r->loss[s] = fm_model_forward_backward(m, &b.in, b.weight, true);
    be->scale(fm_model_grad_arena(m), -0.1f, P);
    be->add(fm_model_param_arena(m), fm_model_param_arena(m), fm_model_grad_arena(m), P);
  }
  r->P = P;
  r->w = malloc((size_t)bytes);
  be->copy_to_host(r->w, fm_model_param_arena(m), bytes);
  fm_model_free(m);
  return 0;
}

static void compare(const char *arch, bool tied) {
  Run cpu_run, emu_run[2];
  FM_REQUIRE(train(&cpu_run, arch, tied, fm_backend_cpu()) == 0);
  for (int s = 0; s < 2; s++) {
    fm_simt_set_schedule(s == 0 ? FM_SIMT_FORWARD : FM_SIMT_RANDOM, 777);
    FM_REQUIRE(train(&emu_run[s], arch, tied, &emu) == 0);
  }
  for (int s = 0; s < STEPS; s++) {
    printf("%s%s step %d: loss cpu %.9f cuda(emulated) %.9f\n", arch, tied ? " (tied)" : "", s + 1, cpu_run.loss[s],
           emu_run[0].loss[s]);
    FM_EXPECT_NEAR(emu_run[0].loss[s], cpu_run.loss[s], 1e-5, 0.0);
    FM_EXPECT(memcmp(&emu_run[0].loss[s], &emu_run[1].loss[s], sizeof(double)) == 0);
  }
  FM_EXPECT(cpu_run.loss[STEPS - 1] < cpu_run.loss[0]); /* it trains */
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < cpu_run.P; i++) {
    const double e = fabs((double)emu_run[0].w[i] - (double)cpu_run.w[i]);
    worst = e > worst ? e : worst;
    bad += !(e <= 1e-5);
  }
  printf("%s: %lld weights, max |cuda(emulated) - cpu| after %d steps %.3g\n", arch, (long long)cpu_run.P, STEPS,
         worst);
  FM_EXPECT_EQ_INT(bad, 0);
  FM_EXPECT(memcmp(emu_run[0].w, emu_run[1].w, (size_t)cpu_run.P * sizeof(float)) == 0);
  FmSimtStats st;
  fm_simt_stats(&st);
  printf("emu: %llu kernel launches, %llu blocks, %llu threads, 2 schedules\n", (unsigned long long)st.launches,
         (unsigned long long)st.blocks, (unsigned long long)st.threads);
  free(cpu_run.w);
  free(emu_run[0].w);
  free(emu_run[1].w);
}

FM_TEST(gpt2_train_steps) { compare("gpt2", false); }
FM_TEST(gpt2_tied_train_steps) { compare("gpt2", true); }
FM_TEST(llama_train_steps) { compare("llama", false); }
