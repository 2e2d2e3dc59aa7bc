/* eval.h: evaluation. The validation loss used during training and
 * task='eval' (loss and perplexity of a model, from an HF directory, on a
 * store). Batches are shared round-robin over the data-parallel ranks and
 * summed in batch order, so the number is the same for any rank count. */
#ifndef FMHPC_EVAL_H
#define FMHPC_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "fmhpc/data.h"
#include "fmhpc/deck.h"
#include "fmhpc/model.h"
#include "fmhpc/runtime.h"

/* Mean loss per unmasked target over nb micro-batches of b = fm_model_batch(m)
 * samples: micro-batch i holds samples [i*b, (i+1)*b) mod N of the store.
 * buf must hold b samples. *ntok gets the number of targets counted.
 * Collective over dp (store reads included). */
double fm_eval_loss(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, int64_t *ntok);

/* task='eval': &eval model (an HF directory) on &data valid (or &data train
 * when valid is empty), &eval batches micro-batches; prints loss and
 * perplexity and writes out_dir/eval.json. */
int fm_eval_task(const FmDeck *deck, FmComm *world, FILE *log);

#endif
