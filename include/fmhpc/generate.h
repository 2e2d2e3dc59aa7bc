/* generate.h: text generation (task='generate', src/eval/generate.c): the
 * token sampler (temperature, top-k, top-p, a counter-based draw) and the
 * task that loads an HF model and a tokenizer, prefills prompts in batches
 * and decodes them with the model's key/value cache (model.h
 * fm_model_gen_create / fm_model_decode). The sampled text is a pure
 * function of (seed, prompt index, position): the same at any rank count.
 * Its own header rather than eval.h so the sampler is usable without the
 * evaluation loop's data dependencies. */
#ifndef FMHPC_GENERATE_H
#define FMHPC_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/runtime.h"

typedef struct FmSampleOpts {
  double temperature; /* 0: greedy (argmax) */
  int64_t top_k;      /* keep the k largest logits; 0 keeps all */
  double top_p;       /* nucleus: the smallest prefix of the sorted distribution with mass >= top_p; 1 keeps all */
  uint64_t seed;
} FmSampleOpts;

/* One candidate of the sorted distribution (the sampler's scratch: V of them). */
typedef struct FmSampleCand {
  double p;
  float logit;
  int32_t id;
} FmSampleCand;

/* The largest logit's id (the lowest id among equal maxima). */
int32_t fm_sample_argmax(const float *logits, int64_t V);
/* Sample the next token of sequence `seq` (the prompt's index) at `position`
 * (its index in the sequence) from logits (V):
 *   temperature 0 -> argmax; otherwise candidates sorted by logit (descending,
 *   ties by id), cut to top_k, p_i = exp((logit_i - max) / temperature) in
 *   double, cut to the smallest prefix whose mass reaches top_p of the total
 *   (at least one), and the first candidate whose running mass exceeds
 *   u * mass with u = fm_rng_uniform(seed, FM_RNG_SAMPLE, position, seq).
 * top_k = 1 and a tiny top_p are therefore exactly greedy. cand: V entries. */
int32_t fm_sample_token(const float *logits, int64_t V, const FmSampleOpts *o, int64_t position, int64_t seq,
                        FmSampleCand *cand);

/* task='generate': prompts from &generate prompts and prompts_file, model
 * from &generate model (or &model init_from; dims from &model), tokenizer
 * from &generate tokenizer. Prompts are grouped by index into batches of
 * &generate batch; rank r of P decodes batches [r*nb/P, (r+1)*nb/P). Rank 0
 * streams its own prompts' text to out as it is sampled (batch = 1; whole
 * completions otherwise), then prints the others' in prompt order, writes
 * &generate output (JSONL, one record per prompt) and reports tokens/s. */
int fm_generate_task(const FmDeck *deck, FmComm *world, FILE *out);

#endif
