/* train.h: the training task. For now the plan that `fmhpc --check` prints:
 * parameter count from the model's tensor table, bytes per rank for weights,
 * gradients, optimizer state and activations, and FLOPs per token and step,
 * for a given rank count and the deck's parallel layout. */
#ifndef FMHPC_TRAIN_H
#define FMHPC_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "fmhpc/deck.h"
#include "fmhpc/model.h"
#include "fmhpc/optim.h"

typedef struct FmPlan {
  const FmModelKind *model;
  const FmOptimKind *optim;
  FmModelDims dims;
  int world, dp, tp;
  int64_t n_params;      /* whole model, exact, from the tensor table */
  int64_t n_params_rank; /* held by one rank after the tensor-parallel split */
  int64_t shard;         /* largest ZeRO-1 shard of those (elements, FM_DIST_BLOCK-aligned) */
  int64_t micro_batches; /* M = global_batch / micro_batch */
  int64_t tokens_per_step;
  int compute_bytes; /* 4 (f32) or 2 (bf16) */
  /* Bytes on one rank (the deck's micro-batch). */
  int64_t params, master, grads, grad_accum, optim_state;
  int64_t act, act_recompute;
  /* On a device backend (CUDA): flash attention's grow-once buffers (bf16
   * Q, K, V, dO copies and D; c=bf16, head size 64 or 128) and the cuBLASLt
   * workspace, in the total. tp > 1: the tp sums' and the vocab-parallel
   * cross-entropy's scratch, host memory (in the total on the CPU backend). */
  int64_t attn_scratch, gemm_ws, tp_scratch;
  /* On a device backend: the summed gradient shard (S x 4) and, with zero =
   * 0, the full gradient the replicated optimizer reads (n x 4) (train.c
   * gshard_d, gfull_d). */
  int64_t dev_grad;
  bool on_device;
  bool use_nccl;      /* &parallel comm resolved (fm_comm_choose) */
  char comm_why[256]; /* and why */
  int64_t total;      /* with the deck's recompute */
  /* Bytes one rank sends per optimizer step (ring/all-gather algorithms). */
  int64_t tp_act;    /* Megatron activation sums (fm_comm_sum_ordered) */
  int64_t tp_xent;   /* vocab-parallel cross-entropy: max, sum-exp, target logit */
  int64_t dp_grad;   /* gradient reduce-scatter (int64 exact, fp32 fast) */
  int64_t dp_gather; /* fp32 all-gather of the updated weights (zero=1) or gradient shards (zero=0) */
  int64_t dp_scales; /* exact mode's per-block scales and the norm's block sums */
  /* Fit against &parallel device_mem_gib, else on a device backend the
   * device's total memory (device_free: free when asked; -1 unknown)
   * (0: unknown, nothing below set). */
  int64_t device_mem, device_free;
  bool device_measured;
  int fit_tp;        /* the smallest tp that fits, 0 when none does */
  int64_t fit_micro; /* its micro-batch */
  bool fit_recompute;
  int64_t fit_total;
  double flops_per_token, flops_per_step;
} FmPlan;

/* task='train': builds the mesh over the world (dp x tp, tp innermost) and
 * runs the step loop over its dp communicator (tp = 1 in this version).
 * Rank 0 logs to `log`; returns 0 or the same FM_E* on every rank. */
#include "fmhpc/runtime.h"
int fm_train_run(const FmDeck *deck, FmComm *world, FILE *log);
/* What the deck's training run needs of its backend (fm_backend_choose's
 * FM_NEED_* flags): the model ops, and set_compute_bf16 for c=bf16. */
int fm_train_backend_needs(const FmConfig *c);
/* MFU's peak in FLOP/s per rank when &log peak_tflops is 0, and where it
 * came from into src (n bytes): on the CPU this rank's measured fp32 GEMM
 * rate; on a device its dense vendor peak (no sparsity) looked up by the
 * backend's device_name ("NVIDIA H200": H100/H200/GH200 and their PCIe/NVL
 * parts, A100) at the compute precision (bf16 tensor cores, or fp32 without
 * TF32), else measured ("measured: ..."). Also bench/step_gpu's roof. */
double fm_train_mfu_peak(const FmBackend *be, bool bf16, char *src, size_t n);

/* Resume compatibility (compat.c): compare the deck `stored` in checkpoint
 * `ckpt` with `now`. Keys that change the model's meaning (arch, widths, head
 * counts, vocab, seq_len, norm_eps, rope_theta, tie_embeddings, optimizer,
 * precision) give FM_EDECK with each key's two values on err; other changes
 * are warned about and *record gets a metrics.jsonl line for them (malloc'd;
 * NULL when nothing changed). A NULL `stored` is warned about and passes. */
int fm_train_resume_compat(const FmDeck *now, const char *stored, const char *ckpt, int64_t step, FILE *err,
                           char **record);

/* Build the plan for world_size ranks; deck-rule errors go to err. */
int fm_plan_make(FmPlan *p, const FmDeck *deck, int world_size, FILE *err);
void fm_plan_print(const FmPlan *p, const FmDeck *deck, FILE *out);
/* The plan's figure for each labelled device allocation (fm_mem_plan_set),
 * so that an out-of-memory report names it: weights, gradients, activations
 * (with the deck's recompute), reduction buffers, optimizer state. */
void fm_plan_mem_figures(const FmPlan *p, const FmDeck *deck);

#endif
