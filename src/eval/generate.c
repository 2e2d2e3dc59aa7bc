/* generate.c: task='generate'. The sampler (temperature -> top-k -> top-p ->
 * a counter-based categorical draw) and the task: prompts (deck and JSONL),
 * chat template (data.h's built-ins), an HF model whose prefill is the model's
 * forward and whose decode steps run the same forward one position at a time
 * against its key/value cache (model.h), stop tokens and strings, streaming
 * on rank 0, tokens/s. The model code lives in src/model; nothing here
 * computes a layer. */
#include "fmhpc/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmhpc/core.h"
#include "fmhpc/data.h"
#include "fmhpc/interop.h"
#include "fmhpc/json.h"
#include "fmhpc/model.h"
#include "fmhpc/rng.h"
#include "fmhpc/tokenizer.h"

/* ---- sampler ------------------------------------------------------------------ */

int32_t fm_sample_argmax(const float *logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  return (int32_t)best;
}

/* The positions a sequence can hold: its prompt (len < T) + max_tokens, at
 * most the context T (the text stops there), computed without overflowing
 * int64 (&generate max_tokens may be as large as the deck allows). */
static int64_t seq_need(int64_t len, int64_t max_tokens, int64_t T) {
  return max_tokens > T - len ? T : len + max_tokens;
}

static int cand_cmp(const void *pa, const void *pb) {
  const FmSampleCand *a = pa, *b = pb;
  if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

int32_t fm_sample_token(const float *logits, int64_t V, const FmSampleOpts *o, int64_t position, int64_t seq,
                        FmSampleCand *cand) {
  if (o->temperature <= 0.0) return fm_sample_argmax(logits, V);
  for (int64_t i = 0; i < V; i++) cand[i] = (FmSampleCand){0.0, logits[i], (int32_t)i};
  qsort(cand, (size_t)V, sizeof *cand, cand_cmp);
  int64_t n = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  const double mx = cand[0].logit;
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) {
    cand[i].p = exp(((double)cand[i].logit - mx) / o->temperature);
    total += cand[i].p;
  }
  if (o->top_p < 1.0) { /* the smallest prefix with mass >= top_p (Holtzman et al., 2020) */
    double run = 0.0;
    for (int64_t i = 0; i < n; i++) {
      run += cand[i].p;
      if (run >= o->top_p * total) {
        n = i + 1;
        total = run;
        break;
      }
    }
  }
  const double u = (double)fm_rng_uniform(o->seed, FM_RNG_SAMPLE, (uint32_t)position, (uint64_t)seq) * total;
  double run = 0.0;
  for (int64_t i = 0; i < n; i++) {
    run += cand[i].p;
    if (u < run) return cand[i].id;
  }
  return cand[n - 1].id;
}

/* ---- prompts ------------------------------------------------------------------ */

typedef struct Prompts {
  int n, cap;
  char **text;
} Prompts;

static void prompts_add(Prompts *p, const char *s, size_t len) {
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 16;
    p->text = fm_xrealloc(p->text, (size_t)p->cap * sizeof *p->text);
  }
  char *t = fm_xmalloc(len + 1);
  memcpy(t, s, len);
  t[len] = 0;
  p->text[p->n++] = t;
}

static void prompts_free(Prompts *p) {
  for (int i = 0; i < p->n; i++) free(p->text[i]);
  free(p->text);
}

/* Each line of a JSONL file: an object with a string "prompt". */
static int prompts_read_jsonl(Prompts *p, const char *path, FILE *err) {
  FmJsonl *r = NULL;
  int rc = fm_jsonl_open(&r, path, err);
  if (rc) return rc;
  const char *line;
  size_t len;
  int64_t lineno;
  while ((rc = fm_jsonl_next(r, &line, &len, &lineno)) == 1) {
    FmJsonDoc doc;
    FmJsonError je;
    if (fm_json_parse(&doc, line, len, 0, &je) != 0) {
      if (err) fprintf(err, "error: %s:%lld:%d: %s\n", path, (long long)lineno, je.col, je.msg);
      rc = FM_EFORMAT;
      break;
    }
    const FmJson *v = doc.root.type == FM_JSON_OBJ ? fm_json_get(&doc.root, "prompt") : NULL;
    if (!v || v->type != FM_JSON_STR) {
      if (err)
        fprintf(err, "error: %s:%lld: each line must be an object with a string \"prompt\"\n", path, (long long)lineno);
      fm_json_free(&doc);
      rc = FM_EFORMAT;
      break;
    }
    if (memchr(v->s, 0, (size_t)v->len)) { /* the prompt's text is a C string from here on: it was cut there */
      if (err)
        fprintf(err,
                "error: %s:%lld: the prompt holds a NUL character (\\u0000), which generation cannot take\n"
                "hint: remove it from the prompt\n",
                path, (long long)lineno);
      fm_json_free(&doc);
      rc = FM_EFORMAT;
      break;
    }
    prompts_add(p, v->s, v->len);
    fm_json_free(&doc);
  }
  fm_jsonl_close(r);
  return rc < 0 ? rc : 0;
}

/* Encode one prompt, wrapped as a user turn and an open assistant turn when
 * tpl is given (special tokens only in the template's own text). An empty
 * prompt starts from EOS, as GPT-2's unconditional samples do. */
static int encode_prompt(const FmTokenizer *tok, const FmTemplate *tpl, const char *text, int32_t **ids, int64_t *len,
                         int64_t *cap) {
  *len = 0;
  int64_t rc = 0;
  if (tpl) {
    char *up = NULL, *us = NULL, *ap = NULL, *as = NULL;
    fm_template_role(tpl, "user", &up, &us);
    fm_template_role(tpl, "assistant", &ap, &as);
    FmStr head, tail;
    fm_str_init(&head);
    fm_str_init(&tail);
    fm_str_cat(&head, tpl->bos ? tpl->bos : "");
    fm_str_cat(&head, up ? up : "");
    fm_str_cat(&tail, us ? us : "");
    fm_str_cat(&tail, ap ? ap : "");
    rc = fm_tok_encode(tok, head.s ? head.s : "", head.len, true, ids, len, cap);
    if (rc >= 0) rc = fm_tok_encode(tok, text, strlen(text), false, ids, len, cap);
    if (rc >= 0) rc = fm_tok_encode(tok, tail.s ? tail.s : "", tail.len, true, ids, len, cap);
    fm_str_free(&head);
    fm_str_free(&tail);
    free(up);
    free(us);
    free(ap);
    free(as);
  } else {
    rc = fm_tok_encode(tok, text, strlen(text), false, ids, len, cap);
  }
  if (rc < 0) return (int)rc;
  if (*len == 0) {
    if (*cap < 1) {
      *cap = 16;
      *ids = fm_xrealloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*len)++] = fm_tok_eos_id(tok);
  }
  return 0;
}

/* ---- one batch ---------------------------------------------------------------- */

typedef struct Seq {
  int32_t *ids;
  int64_t len, cap, nprompt;
  FmStr text; /* generated text, cut at a stop string */
  size_t shown;
  const char *why; /* "eos", "stop", "length", "context" */
  bool done, stream;
} Seq;

typedef struct Gen {
  const FmConfig *c;
  const FmTokenizer *tok;
  FmModel *m, *dec;
  FmSampleOpts so;
  FmSampleCand *cand;
  int64_t B, T, V;
  int32_t *tokens, *pos, *dtok, *dpos; /* host: (B, T) prefill, (B) decode */
  int64_t *rows;
  float *logits; /* host (B, V) */
  size_t hold;   /* bytes held back while streaming: longest stop string - 1 */
  char *stop[4]; /* &generate stop with \n, \t and \\ read as the template keys read them */
  int nstop;
  FILE *out;
  int64_t generated;
} Gen;

static void stream(Gen *g, Seq *s) {
  if (!s->stream) return;
  const size_t upto = s->done ? s->text.len : (s->text.len > g->hold ? s->text.len - g->hold : 0);
  if (upto > s->shown) {
    fwrite(s->text.s + s->shown, 1, upto - s->shown, g->out);
    fflush(g->out);
    s->shown = upto;
  }
}

/* Append the sampled token; decide whether the sequence ends. */
static void accept(Gen *g, Seq *s, int32_t id) {
  if (!s->ids) fm_abort_one(1, "generate: internal error: sequence buffer not allocated");
  s->ids[s->len++] = id;
  g->generated++;
  if (id == fm_tok_eos_id(g->tok)) {
    s->done = true;
    s->why = "eos";
    return;
  }
  const size_t before = s->text.len;
  char *piece = NULL;
  size_t plen = 0, pcap = 0;
  if (fm_tok_decode(g->tok, &id, 1, &piece, &plen, &pcap) == 0) fm_str_catn(&s->text, piece, plen);
  free(piece);
  for (int i = 0; i < g->nstop; i++) {
    const char *st = g->stop[i];
    const size_t sl = strlen(st);
    if (!sl) continue;
    const size_t from = before >= sl ? before - sl + 1 : 0;
    const char *hit = s->text.len >= sl ? strstr(s->text.s + from, st) : NULL;
    if (hit) {
      s->text.len = (size_t)(hit - s->text.s);
      s->text.s[s->text.len] = 0;
      s->done = true;
      s->why = "stop";
      return;
    }
  }
  if (s->len - s->nprompt >= g->c->generate.max_tokens) {
    s->done = true;
    s->why = "length";
  } else if (s->len >= g->T) {
    s->done = true;
    s->why = "context";
  }
}

/* Prefill the batch's prompts, then decode until every sequence is done. n
 * sequences are real; the rest of the B rows are padding (one EOS). first:
 * the global index of sequence 0 (the sampler's sequence index). */
static void run_batch(Gen *g, Seq *seq, int64_t n, int64_t first) {
  const int64_t B = g->B, T = g->T, V = g->V;
  memset(g->tokens, 0, (size_t)(B * T) * sizeof(int32_t));
  for (int64_t b = 0; b < B; b++) {
    const int32_t *ids = b < n ? seq[b].ids : NULL;
    const int64_t len = b < n ? seq[b].len : 1;
    for (int64_t t = 0; t < T; t++) g->pos[b * T + t] = (int32_t)t;
    for (int64_t t = 0; t < len; t++) g->tokens[b * T + t] = ids ? ids[t] : fm_tok_eos_id(g->tok);
    g->rows[b] = b * T + len - 1;
  }
  const FmModelInput in = {g->tokens, NULL, g->pos, NULL};
  fm_model_logits(g->m, &in, g->rows, B, g->logits);
  for (;;) {
    bool all_done = true;
    for (int64_t b = 0; b < n; b++) {
      Seq *s = &seq[b];
      if (s->done) continue;
      accept(g, s, fm_sample_token(g->logits + b * V, V, &g->so, s->len, first + b, g->cand));
      stream(g, s);
      all_done = all_done && s->done;
    }
    if (all_done) break;
    for (int64_t b = 0; b < B; b++) { /* finished and padding rows run too: the batch shape is fixed */
      const int64_t len = b < n ? seq[b].len : 1;
      g->dtok[b] = b < n ? seq[b].ids[len - 1] : fm_tok_eos_id(g->tok);
      g->dpos[b] = (int32_t)(len - 1 < T - 1 ? len - 1 : T - 1);
    }
    fm_model_decode(g->dec, g->dtok, g->dpos, g->logits);
  }
}

/* ---- the task ----------------------------------------------------------------- */

/* Deck rules and inputs every rank checks alike. */
static int load_inputs(const FmDeck *deck, Prompts *p, FmTokenizer **tok, FmTemplate *tpl, bool *has_tpl, FILE *err) {
  const FmConfig *c = &deck->c;
  const char *model = c->generate.model[0] ? c->generate.model : c->model.init_from;
  if (!model[0]) {
    fm_deck_error(deck, err, FM_KEY_generate_model,
                  "task = 'generate' needs a model: an HF directory (config.json + model.safetensors), here or in "
                  "&model init_from");
    return FM_EDECK;
  }
  if (!c->generate.tokenizer[0]) {
    fm_deck_error(deck, err, FM_KEY_generate_tokenizer,
                  "task = 'generate' needs a tokenizer: tokenizer.json, a tiktoken file, or a GPT-2 directory "
                  "(encoder.json + vocab.bpe)");
    return FM_EDECK;
  }
  for (int i = 0; i < c->generate.prompts_n; i++)
    prompts_add(p, c->generate.prompts[i], strlen(c->generate.prompts[i]));
  int rc = c->generate.prompts_file[0] ? prompts_read_jsonl(p, c->generate.prompts_file, err) : 0;
  if (!rc && p->n == 0) {
    fm_deck_error(deck, err, FM_KEY_generate_prompts, "no prompts: give &generate prompts or prompts_file");
    rc = FM_EDECK;
  }
  if (!rc && c->generate.chat) {
    if (fm_template_builtin(tpl, c->generate.template)) {
      fm_deck_error(deck, err, FM_KEY_generate_template, "unknown chat template '%s'", c->generate.template);
      rc = FM_EDECK;
    } else {
      *has_tpl = true;
    }
  }
  if (!rc) rc = fm_tok_load(tok, c->generate.tokenizer, err);
  return rc;
}

/* Every rank holds every prompt's text; the owner of prompt i broadcasts its
 * result so rank 0 can print and write them in prompt order. */
static int share_results(FmComm *world, Seq *seq, int64_t np, int64_t B, int64_t nb) {
  for (int64_t i = 0; i < np; i++) {
    const int64_t batch = i / B;
    int root = 0;
    while ((int64_t)(root + 1) * nb / world->size <= batch) root++;
    int64_t meta[3] = {(int64_t)seq[i].text.len, seq[i].len, 0};
    if (seq[i].why)
      meta[2] = !strcmp(seq[i].why, "eos")      ? 1
                : !strcmp(seq[i].why, "stop")   ? 2
                : !strcmp(seq[i].why, "length") ? 3
                                                : 4;
    int rc = fm_comm_bcast(world, meta, 3, FM_DT_I64, root);
    if (rc) return rc;
    if (world->rank != root) {
      seq[i].text.len = 0;
      fm_str_catn(&seq[i].text, "", 0);
      char *buf = fm_xmalloc((size_t)meta[0] + 1);
      rc = fm_comm_bcast(world, buf, meta[0], FM_DT_U8, root);
      fm_str_catn(&seq[i].text, buf, (size_t)meta[0]);
      free(buf);
      seq[i].len = meta[1];
      static const char *whys[] = {"", "eos", "stop", "length", "context"};
      seq[i].why = whys[meta[2]];
    } else {
      rc = fm_comm_bcast(world, seq[i].text.s ? seq[i].text.s : (char *)"", meta[0], FM_DT_U8, root);
    }
    if (rc) return rc;
  }
  return 0;
}

/* Rank 0: the results JSONL; FM_EIO (the task's status 1) when it cannot be written. */
static int write_results(const FmConfig *c, const Prompts *p, const Seq *seq) {
  char path[4096];
  if (c->generate.output[0])
    snprintf(path, sizeof path, "%s", c->generate.output);
  else
    snprintf(path, sizeof path, "%s/generate.jsonl", c->run.out_dir);
  FILE *f = (c->generate.output[0] || fm_mkdirs(c->run.out_dir) == 0) ? fopen(path, "w") : NULL;
  if (!f) {
    fm_err("cannot write %s", path);
    return FM_EIO;
  }
  for (int i = 0; i < p->n; i++) {
    fputs("{\"prompt\": ", f);
    fm_json_write_str(f, p->text[i], strlen(p->text[i]));
    fputs(", \"text\": ", f);
    fm_json_write_str(f, seq[i].text.s ? seq[i].text.s : "", seq[i].text.len);
    fprintf(f, ", \"prompt_tokens\": %lld, \"tokens\": %lld, \"stop\": \"%s\"}\n", (long long)seq[i].nprompt,
            (long long)(seq[i].len - seq[i].nprompt), seq[i].why ? seq[i].why : "");
  }
  fclose(f);
  return 0;
}

int fm_generate_task(const FmDeck *deck, FmComm *world, FILE *out) {
  const FmConfig *c = &deck->c;
  FILE *err = world->rank == 0 ? stderr : NULL;
  Prompts p = {0};
  FmTokenizer *tok = NULL;
  FmTemplate tpl;
  bool has_tpl = false;
  FmModelDims dims;
  memset(&dims, 0, sizeof dims);
  Gen g;
  memset(&g, 0, sizeof g);
  Seq *seq = NULL;
  int rc = load_inputs(deck, &p, &tok, &tpl, &has_tpl, err);
  const char *model_dir = c->generate.model[0] ? c->generate.model : c->model.init_from;
  g.B = c->generate.batch < p.n ? c->generate.batch : (p.n > 0 ? p.n : 1);
  const FmModelKind *kind = NULL;
  if (!rc) rc = fm_model_dims(&dims, &kind, deck, err);
  if (!rc && fm_tok_vocab_size(tok) > dims.V) {
    fm_deck_error(deck, err, FM_KEY_model_vocab_size, "the tokenizer has %lld ids, more than the model's %lld",
                  (long long)fm_tok_vocab_size(tok), (long long)dims.V);
    rc = FM_EDECK;
  }
  if (!rc) { /* every rank encodes every prompt: length errors are seen alike */
    seq = fm_xcalloc((size_t)p.n, sizeof *seq);
    for (int i = 0; i < p.n && !rc; i++) {
      fm_str_init(&seq[i].text);
      rc = encode_prompt(tok, has_tpl ? &tpl : NULL, p.text[i], &seq[i].ids, &seq[i].len, &seq[i].cap);
      seq[i].nprompt = seq[i].len;
      if (!rc && seq[i].len >= dims.T) {
        fm_deck_error(deck, err, FM_KEY_model_seq_len, "prompt %d is %lld tokens: the context holds %lld", i,
                      (long long)seq[i].len, (long long)dims.T);
        rc = FM_EDECK;
      }
      const int64_t need = rc ? 0 : seq_need(seq[i].len, c->generate.max_tokens, dims.T);
      if (!rc && seq[i].cap < need) {
        seq[i].cap = need;
        seq[i].ids = fm_xrealloc(seq[i].ids, (size_t)need * sizeof(int32_t));
      }
    }
  }
  /* The key/value cache holds the longest prompt + max_tokens positions, not
   * the whole context; a sequence that would pass seq_len stops there
   * (stop reason "context"), as before. */
  int64_t ctx = 1;
  for (int i = 0; !rc && i < p.n; i++) {
    const int64_t need = seq_need(seq[i].len, c->generate.max_tokens, dims.T);
    if (c->generate.max_tokens > dims.T - seq[i].len)
      fm_warn0(
          "generate: prompt %d (%lld tokens) + max_tokens %lld passes &model seq_len = %lld: its text stops "
          "at the context (stop 'context')",
          i, (long long)seq[i].len, (long long)c->generate.max_tokens, (long long)dims.T);
    ctx = need > ctx ? need : ctx;
  }
  ctx = ctx < dims.T ? ctx : dims.T;
  if (!rc) { /* the import status is agreed below, with the decoder's */
    /* &train backend: generation needs attention_decode besides the model ops (fp32 compute). */
    char why[256];
    int st_be = 0;
    const FmBackend *be =
        fm_backend_choose(c->train.backend, FM_NEED_MODEL | FM_NEED_DECODE, why, (int)sizeof why, &st_be);
    if (be)
      fm_log0("backend: %s (%s)", be->name, why);
    else
      fm_deck_error(deck, err, FM_KEY_train_backend, "generate cannot use this backend: %s", why);
    rc = fm_runtime_agree_backend(be ? (be->host_accessible ? 1 : 2) : 0, "generate");
    const FmModelLoadOpts lo = {be, g.B, false, model_dir, false, ctx, NULL};
    FmLoadedModel lm = {0};
    int gpu = -1, shared = 0;
    if (!rc && be && !be->host_accessible)
      rc = fm_runtime_bind_gpu(&gpu, &shared); /* each rank on its node-local GPU */
    if (!be)
      rc = FM_EDECK;
    else if (!rc)
      rc = fm_model_load(&lm, deck, &lo, world, err); /* world: a checkpoint is read collectively */
    g.m = lm.model;
    /* Generation computes in fp32 whatever &train precision says (as it always has). */
    if (g.m) fm_model_set_compute_bf16(g.m, false);
  }
  if (!rc) rc = fm_model_gen_create(&g.dec, g.m, err);
  int32_t ok = rc == 0, all_ok = 0;
  fm_comm_allreduce(world, &ok, &all_ok, 1, FM_DT_I32, FM_OP_MIN);
  if (all_ok && !rc && seq) {
    g.c = c;
    g.tok = tok;
    g.T = ctx;
    g.V = dims.V;
    g.out = out;
    g.so = (FmSampleOpts){c->generate.temperature, c->generate.top_k, c->generate.top_p,
                          (uint64_t)(c->generate.seed >= 0 ? c->generate.seed : c->run.seed)};
    g.cand = fm_xmalloc((size_t)g.V * sizeof *g.cand);
    g.tokens = fm_xmalloc((size_t)(2 * g.B * g.T + 2 * g.B) * sizeof(int32_t));
    g.pos = g.tokens + g.B * g.T;
    g.dtok = g.pos + g.B * g.T;
    g.dpos = g.dtok + g.B;
    g.rows = fm_xmalloc((size_t)g.B * sizeof(int64_t));
    g.logits = fm_xmalloc((size_t)(g.B * g.V) * sizeof(float));
    for (int i = 0; i < c->generate.stop_n && i < 4; i++) {
      g.stop[g.nstop++] = fm_template_unescape(c->generate.stop[i]);
      const size_t sl = strlen(g.stop[i]);
      if (sl > g.hold + 1) g.hold = sl - 1;
    }
    const int64_t nb = (p.n + g.B - 1) / g.B;
    const int64_t b0 = world->rank * nb / world->size, b1 = (world->rank + 1) * nb / world->size;
    if (world->rank == 0)
      fprintf(out, "generate: %d prompts, batches of %lld, %s, max_tokens %lld, seed %llu\n", p.n, (long long)g.B,
              c->generate.temperature > 0 ? "sampling" : "greedy", (long long)c->generate.max_tokens,
              (unsigned long long)g.so.seed);
    const double t0 = fm_now_s();
    for (int64_t bi = b0; bi < b1; bi++) {
      const int64_t first = bi * g.B, n = p.n - first < g.B ? p.n - first : g.B;
      for (int64_t j = 0; j < n && world->rank == 0; j++) seq[first + j].stream = g.B == 1;
      if (world->rank == 0 && g.B == 1) fprintf(out, "--- prompt %lld ---\n%s", (long long)first, p.text[first]);
      run_batch(&g, seq + first, n, first);
      if (world->rank == 0 && g.B == 1) fputs("\n", out);
    }
    const double dt = fm_now_s() - t0;
    rc = share_results(world, seq, p.n, g.B, nb);
    int64_t tokens = 0;
    double tmax = 0;
    fm_comm_allreduce(world, &g.generated, &tokens, 1, FM_DT_I64, FM_OP_SUM);
    fm_comm_allreduce(world, &dt, &tmax, 1, FM_DT_F64, FM_OP_MAX);
    if (world->rank == 0) {
      for (int i = 0; i < p.n; i++) {
        if (seq[i].stream) continue;
        fprintf(out, "--- prompt %d ---\n%s%s\n", i, p.text[i], seq[i].text.s ? seq[i].text.s : "");
      }
      if (write_results(c, &p, seq) && !rc) rc = FM_EIO;
      fprintf(out, "generate: %lld tokens in %.2f s: %.1f tokens/s over %d rank%s\n", (long long)tokens, tmax,
              tmax > 0 ? (double)tokens / tmax : 0.0, world->size, world->size == 1 ? "" : "s");
    }
  }
  for (int i = 0; seq && i < p.n; i++) {
    free(seq[i].ids);
    fm_str_free(&seq[i].text);
  }
  free(seq);
  free(g.cand);
  free(g.tokens);
  free(g.rows);
  free(g.logits);
  for (int i = 0; i < g.nstop; i++) free(g.stop[i]);
  fm_model_free(g.dec);
  fm_model_free(g.m);
  if (has_tpl) fm_template_free(&tpl);
  fm_tok_free(tok);
  prompts_free(&p);
  return all_ok ? rc : (rc ? rc : FM_EIO);
}
