/* eval.h: evaluation. The validation loss used during training;
 * task='eval' (loss, perplexity and token accuracy of a model, from an HF
 * directory, on a store, with per-document results on request); and
 * task='ifd' (instruction-following difficulty of instruction/response
 * records, src/eval/ifd.c). Batches and records are shared round-robin over
 * the ranks and combined in batch (record) order, so every number is the same
 * for any rank count. */
#ifndef FMHPC_EVAL_H
#define FMHPC_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "fmhpc/data.h"
#include "fmhpc/deck.h"
#include "fmhpc/model.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tokenizer.h"

/* Mean loss per unmasked target over nb micro-batches of b = fm_model_batch(m)
 * samples: micro-batch i holds samples [i*b, (i+1)*b) mod N of the store.
 * buf must hold b samples. *ntok gets the number of targets counted.
 * Collective over dp (store reads included). */
double fm_eval_loss(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, int64_t *ntok);

/* Token accuracy and per-document results over the same micro-batches as
 * fm_eval_loss, from full-vocabulary logits (fm_model_logits). A target
 * counts when its loss mask is set; it is correct when the argmax of its
 * logits (the lowest id among ties) equals it. A document is a run of one
 * segment id (not 0) within a row, named by (sample index, segment id); a
 * target belongs to the segment of its input position. Its loss is
 * sum(logsumexp(z) - z[target]) in double from the fp32 logits (within ~1e-6
 * of the fused cross-entropy). per_doc (rank 0; NULL for none) gets one JSON
 * line per document with at least one counted target, in batch order:
 * {"batch", "sample", "segment", "loss_sum", "tokens", "loss", "correct",
 * "accuracy"}. Collective over dp; returns 0 or FM_E* on every rank. */
int fm_eval_detail(FmModel *m, FmStore *st, FmBatch *buf, int64_t nb, FmComm *dp, FILE *per_doc, int64_t *correct,
                   int64_t *ntok);

/* task='eval': &eval model (a checkpoint file or an HF directory) on &data valid (or &data train
 * when valid is empty), &eval batches micro-batches; prints loss, perplexity
 * and token accuracy, writes out_dir/eval.json and, with &eval per_doc, the
 * per-document JSONL there. */
int fm_eval_task(const FmDeck *deck, FmComm *world, FILE *log);

/* ---- IFD (task='ifd', src/eval/ifd.c) -------------------------------------
 * Li et al. 2023, "From Quantity to Quality" (Cherry LLM). For a record
 * (instruction I, response R) and a template with bos text B, role prefixes
 * and suffixes P_u, S_u (user) and P_a, S_a (assistant); enc() without special
 * tokens, enc_s() with them:
 *   start   = enc_s(B) when B is not empty, else [EOS]
 *   context = start + enc_s(P_u) + enc(I) + enc_s(S_u) + enc_s(P_a)
 *   scored  = enc(R) + enc_s(S_a) + [EOS]            (the closing EOS is scored,
 *                                                     as SFT trains it)
 *   cond    = context + scored[0..k)     uncond = start + scored[0..k)
 * k = min(|scored|, max_len - |context|): a long response is cut to the
 * same k ids in both forms (truncated = k < |scored|); k < 1 skips the record.
 * L_cond and L_uncond are the mean cross-entropy of the k scored ids
 * (each id predicted from the ids before it); IFD = L_cond / L_uncond. */
typedef struct FmIfdForms {
  int32_t *cond, *uncond;
  int64_t n_cond, n_uncond;     /* ids in each form */
  int64_t ctx_cond, ctx_uncond; /* ids before the first scored id */
  int64_t n_scored, n_full;     /* k, and |scored| before the cut */
} FmIfdForms;
/* Build both forms. FM_EINVAL when the template lacks role 'user' or
 * 'assistant'; a tokenizer error as it comes. */
int fm_ifd_forms(FmIfdForms *f, const FmTokenizer *tok, const FmTemplate *t, const char *instr, size_t ilen,
                 const char *resp, size_t rlen, int64_t max_len);
void fm_ifd_forms_free(FmIfdForms *f);

/* Summary of values x[0..n) that are finite (others are left out): count,
 * mean, median (mean of the two middle values when even), std (population,
 * divided by count), share strictly above 1.0. NaN fields when count is 0. */
typedef struct FmIfdStats {
  int64_t count;
  double mean, median, std, above1;
} FmIfdStats;
void fm_ifd_stats(FmIfdStats *s, const double *x, int64_t n);
/* Pearson r of the pairs where both are finite; NaN below 2 pairs or when
 * either side has zero variance. */
double fm_ifd_pearson(const double *x, const double *y, int64_t n);

/* task='ifd': &ifd on every rank of world (record i on rank i % P); rank 0
 * writes the per-record JSONL (record order; identical bytes for any rank
 * count), prints the summary and writes out_dir/ifd_summary.json. */
int fm_ifd_task(const FmDeck *deck, FmComm *world, FILE *log);

#endif
