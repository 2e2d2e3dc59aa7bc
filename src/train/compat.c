/* compat.c: may this deck continue that checkpoint? The checkpoint stores the
 * resolved deck it was trained with; resume binds it again and compares it
 * with the deck of this run: the model by its resolved dims
 * (fm_model_dims_diff, as loading a checkpoint does), the rest key by key. A
 * change of what the weights mean (the architecture, a head count at the same
 * width, RoPE's base for a RoPE model, seq_len, the optimizer whose state is
 * stored, the compute precision) refuses the resume,
 * naming each key with both values; any other change that touches training
 * (lr, schedule length, data store, global batch, eval cadence, ...) is
 * allowed, listed in a warning and recorded in metrics.jsonl. Keys of the
 * other tasks (prep, tokenizer, dedup, ifd, generate), output places and
 * &ckpt resume itself are not compared. The train loop (train.c) calls this; the sample position
 * after a changed global batch is the sampler's (data/sampler.c). */
#include <stdlib.h>
#include <string.h>

#include "fmhpc/json.h"
#include "fmhpc/train.h"

/* Keys whose change makes the stored weights or optimizer state mean
 * something else, even where every tensor keeps its shape, beside the model
 * itself (fm_model_dims_diff, the rule loading a checkpoint applies). */
static const int refused[] = {FM_KEY_model_seq_len, FM_KEY_optim_name, FM_KEY_train_precision};
/* The keys fm_model_dims_diff decides through the resolved dims: refused by
 * value only when a stored deck gives no dims to compare. */
static const int model_keys[] = {
    FM_KEY_model_arch,      FM_KEY_model_d_model,    FM_KEY_model_n_layer,        FM_KEY_model_n_head,
    FM_KEY_model_n_kv_head, FM_KEY_model_head_dim,   FM_KEY_model_d_ff,           FM_KEY_model_vocab_size,
    FM_KEY_model_norm_eps,  FM_KEY_model_rope_theta, FM_KEY_model_tie_embeddings,
};

static bool in_list(const int *list, size_t n, int k) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == k) return true;
  return false;
}

/* Keys that do not bear on a training run, or that a resume changes by
 * nature (where outputs go: a run directory may be copied or moved). */
static bool is_ignored(int k) {
  static const char *const other_tasks[] = {"prep", "tokenizer", "dedup", "ifd", "generate"};
  const FmKeyInfo *ki = fm_deck_key_info(k);
  for (size_t i = 0; i < sizeof other_tasks / sizeof other_tasks[0]; i++)
    if (!strcmp(ki->group, other_tasks[i])) return true;
  return k == FM_KEY_ckpt_resume || k == FM_KEY_ckpt_dir || k == FM_KEY_run_out_dir || k == FM_KEY_run_task ||
         k == FM_KEY_eval_model || k == FM_KEY_eval_per_doc;
}

static void json_change(FILE *j, int n, int k, const char *old, const char *now) {
  const FmKeyInfo *ki = fm_deck_key_info(k);
  char key[128];
  snprintf(key, sizeof key, "&%s %s", ki->group, ki->name);
  fputs(n ? ", {\"key\": " : "{\"key\": ", j);
  fm_json_write_str(j, key, strlen(key));
  fputs(", \"checkpoint\": ", j);
  fm_json_write_str(j, old, strlen(old));
  fputs(", \"now\": ", j);
  fm_json_write_str(j, now, strlen(now));
  fputs("}", j);
}

int fm_train_resume_compat(const FmDeck *now, const char *stored, const char *ckpt, int64_t step, FILE *err,
                           char **record) {
  *record = NULL;
  if (!stored) {
    fm_warn0("resume: %s stores no deck: model and optimizer keys cannot be compared", ckpt);
    return 0;
  }
  FmDeck old;
  fm_deck_init(&old);
  FmDeckSource src = {ckpt, stored, false};
  if (fm_deck_bind(&old, 1, &src, NULL))
    fm_warn0("resume: the deck stored in %s has keys this version does not know: the others are compared", ckpt);
  char *buf = NULL;
  size_t len = 0;
  FILE *j = open_memstream(&buf, &len);
  fprintf(j, "{\"record\": \"resume_changes\", \"step\": %lld, \"checkpoint\": ", (long long)step);
  fm_json_write_str(j, ckpt, strlen(ckpt));
  fputs(", \"changed\": [", j);
  int nrefused = 0, nchanged = 0;
  FmStr warn;
  fm_str_init(&warn);
  /* the model: by its resolved dims where both decks give them (head_dim = 0 and its default are one model; GPT-2
   * has no use for rope_theta), else key by key */
  FmModelDims dold, dnow;
  const FmModelKind *kold = NULL, *know = NULL;
  const bool dims = fm_model_dims(&dold, &kold, &old, NULL) == 0 && fm_model_dims(&dnow, &know, now, NULL) == 0;
  int nmodel = 0;
  if (dims) {
    FmModelDiff diff[16];
    nmodel = fm_model_dims_diff(kold, &dold, know, &dnow, diff, 16);
    for (int i = 0; i < nmodel && i < 16; i++) {
      if (err && !nrefused) fprintf(err, "fmhpc: resume: %s was trained with another model or optimizer:\n", ckpt);
      if (err)
        fprintf(err, "  &model %s = %s in the checkpoint, %s in this deck\n", diff[i].key, diff[i].then, diff[i].now);
      nrefused++;
    }
  }
  for (int k = 0; k < FM_NKEYS; k++) {
    if (is_ignored(k) || fm_deck_key_equal(&old, now, k)) continue;
    const bool model_key = in_list(model_keys, sizeof model_keys / sizeof *model_keys, k);
    if (model_key && nmodel) continue; /* named above */
    const FmKeyInfo *ki = fm_deck_key_info(k);
    char *a = fm_deck_value_text(&old, k), *b = fm_deck_value_text(now, k);
    if (in_list(refused, sizeof refused / sizeof *refused, k) || (model_key && !dims)) {
      if (err && !nrefused) fprintf(err, "fmhpc: resume: %s was trained with another model or optimizer:\n", ckpt);
      if (err) fprintf(err, "  &%s %s = %s in the checkpoint, %s in this deck\n", ki->group, ki->name, a, b);
      nrefused++;
    } else {
      json_change(j, nchanged++, k, a, b);
      fm_str_printf(&warn, "\n  &%s %s = %s in the checkpoint, %s now", ki->group, ki->name, a, b);
    }
    free(a);
    free(b);
  }
  fputs("]}", j);
  fclose(j);
  if (nrefused && err)
    fprintf(err,
            "hint: these keys change what the stored weights mean; resume with the checkpoint's values, or start "
            "a new run (&ckpt resume = 'none', or another out_dir) and &model init_from its exported weights\n");
  if (!nrefused && nchanged) {
    fm_warn0("resume: %d key(s) differ from %s (allowed; recorded in metrics.jsonl):%s", nchanged, ckpt, warn.s);
    *record = buf;
    buf = NULL;
  }
  free(buf);
  fm_str_free(&warn);
  fm_deck_free(&old);
  return nrefused ? FM_EDECK : 0;
}
