/* test_deck_bind.c: defaults, binding and layering, origins, the resolved
 * deck writer (round trip to the same bits), --help-deck, fm_deck_error and
 * the deck's own cross-key rules. */
#include "../../src/deck/namelist.h"
#include "deck_testing.h"
#include "fm_test.h"
#include "fmhpc/core.h"

/* Groups in the registry, counted from keys.def itself (adding a group edits
 * nothing here). */
enum {
  NGROUPS = 0
#define FM_GROUP(g, help) +1
#define FM_KEY(g, name, type, def, range, help)
#define FM_KEYA(g, name, type, nmax, def, range, help)
#define FM_END(g)
#include "../../src/deck/keys.def"
#undef FM_GROUP
#undef FM_KEY
#undef FM_KEYA
#undef FM_END
};

/* Every default in keys.def parses, binds without a message (so it has the
 * key's type and lies in its range) and leaves the key at the default. */
FM_TEST(defaults_parse_and_lie_in_range) {
  int nbound = 0, nempty = 0;
  for (int k = 0; k < FM_NKEYS; k++) {
    const FmKeyInfo *ki = fm_deck_key_info(k);
    FmNlValue *v;
    int n;
    FmNlError e;
    FM_EXPECT_EQ_INT(fm__nl_parse_values(ki->def, &v, &n, &e), 0);
    fm__nl_values_free(v, n);
    if (n == 0) { /* an empty array; nothing to bind */
      FM_EXPECT(ki->nmax > 1);
      nempty++;
      continue;
    }
    char text[512];
    snprintf(text, sizeof text, "&%s %s = %s /", ki->group, ki->name, ki->def);
    FmDeck d;
    fm_deck_init(&d);
    char *msgs = NULL;
    FM_EXPECT_EQ_INT(deck_bind_text(&d, "def.in", text, &msgs), 0);
    FM_EXPECT_EQ_STR(msgs, "");
    free(msgs);
    fm_deck_free(&d);
    nbound++;
  }
  /* Only array keys may default to no values, among them these: */
  FM_EXPECT(nempty >= 5);
  const char *empty[][2] = {{"prep", "inputs"}, {"prep", "sections"}, {"prep", "train_on"}, {"tokenizer", "inputs"},
                            {"generate", "prompts"}};
  for (int i = 0; i < 5; i++) {
    int id = fm_deck_find_key(empty[i][0], empty[i][1]);
    FM_REQUIRE(id >= 0);
    FM_EXPECT_EQ_STR(fm_deck_key_info(id)->def, "");
  }
  FM_EXPECT_EQ_INT(nbound + nempty, FM_NKEYS);
}

FM_TEST(defaults_values_and_origins) {
  FmDeck d;
  fm_deck_init(&d);
  FM_EXPECT_EQ_INT(d.c.model.d_model, 768);
  FM_EXPECT_EQ_STR(d.c.run.task, "train");
  FM_EXPECT_EQ_STR(d.c.model.init_from, "");
  FM_EXPECT(d.c.model.tie_embeddings == true && d.c.model.recompute == false);
  FM_EXPECT(d.c.optim.lr == 3e-4 && d.c.model.norm_eps == 1e-5);
  FM_EXPECT_EQ_INT(d.c.optim.betas_n, 2);
  FM_EXPECT(d.c.optim.betas[0] == 0.9 && d.c.optim.betas[1] == 0.95);
  FM_EXPECT_EQ_INT(d.c.prep.inputs_n, 0);
  FM_EXPECT_EQ_STR(d.c.prep.inputs[63], ""); /* never NULL */
  FM_EXPECT_EQ_INT(d.c.tokenizer.special_tokens_n, 1);
  FM_EXPECT_EQ_STR(d.c.tokenizer.special_tokens[0], "<|endoftext|>");
  for (int k = 0; k < FM_NKEYS; k++) FM_EXPECT(d.origin[k].file == NULL && d.origin[k].line == 0);
  FM_EXPECT_EQ_INT(d.nwarnings, 0);
  fm_deck_free(&d);
}

FM_TEST(registry_lookup) {
  FM_EXPECT_EQ_INT(fm_deck_find_key("OPTIM", "Lr"), FM_KEY_optim_lr);
  FM_EXPECT_EQ_INT(fm_deck_find_key("optim", "nope"), -1);
  FM_EXPECT_EQ_INT(fm_deck_find_key("train", "lr"), -1);
  const FmKeyInfo *ki = fm_deck_key_info(FM_KEY_optim_betas);
  FM_REQUIRE(ki != NULL);
  FM_EXPECT_EQ_STR(ki->group, "optim");
  FM_EXPECT_EQ_STR(ki->name, "betas");
  FM_EXPECT_EQ_INT(ki->type, FM_TYPE_REAL);
  FM_EXPECT_EQ_INT(ki->nmax, 2);
  FM_EXPECT_EQ_STR(ki->range, "[0,1)");
  FM_EXPECT(fm_deck_key_info(-1) == NULL && fm_deck_key_info(FM_NKEYS) == NULL);
  FM_EXPECT_EQ_INT(fm_deck_ngroups(), NGROUPS);
  FM_EXPECT_EQ_STR(fm_deck_group_name(0), "run");
  FM_EXPECT_EQ_STR(fm_deck_group_name(NGROUPS - 1), "generate");
  FM_EXPECT(fm_deck_group_name(NGROUPS) == NULL);
}

FM_TEST(bind_types) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "t.in",
                                  "&model d_model = 1536, init_std = 1, rope_theta = 5d5, recompute = T,\n"
                                  "  tie_embeddings = .False., init_from = 'hf/it''s', arch = \"LLAMA\" /\n"
                                  "&optim lr = 1.5d-3 /",
                                  &msgs),
                   0);
  FM_EXPECT_EQ_STR(msgs, "");
  FM_EXPECT_EQ_INT(d.c.model.d_model, 1536);
  FM_EXPECT(d.c.model.init_std == 1.0); /* an integer literal is a fine REAL */
  FM_EXPECT(d.c.model.rope_theta == 500000.0);
  FM_EXPECT(d.c.model.recompute && !d.c.model.tie_embeddings);
  FM_EXPECT_EQ_STR(d.c.model.init_from, "hf/it's");
  FM_EXPECT_EQ_STR(d.c.model.arch, "llama"); /* choices are stored as the registry spells them */
  double want = 1.5e-3;
  FM_EXPECT(memcmp(&d.c.optim.lr, &want, sizeof want) == 0);
  free(msgs);
  fm_deck_free(&d);
}

FM_TEST(bind_choice_canonical_spelling) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "t.in", "&train precision = 'P=F32,C=BF16', backend = 'CPU' /", &msgs), 0);
  FM_EXPECT_EQ_STR(d.c.train.precision, "p=f32,c=bf16");
  FM_EXPECT_EQ_STR(d.c.train.backend, "cpu");
  free(msgs);
  fm_deck_free(&d);
}

/* base.in < site.in < run.in < overrides; origins follow the last writer. */
FM_TEST(bind_layering_and_origins) {
  FmDeck d;
  fm_deck_init(&d);
  FmDeckSource src[5] = {
      {"base.in", "&model d_model = 512, n_layer = 8 /\n&optim lr = 1e-3 /", false},
      {"site.in", "&run\n  out_dir = '/scratch/me'\n/\n&parallel tp = 4 /", false},
      {"run.in", "&model\n  n_layer = 16\n/", false},
      {"<command line>", "optim%lr=3e-4", true},
      {"<command line>", "optim%betas(2)=0.99", true},
  };
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_capture(&d, 5, src, &msgs), 0);
  FM_EXPECT_EQ_STR(msgs, "");
  FM_EXPECT_EQ_INT(d.c.model.d_model, 512);
  FM_EXPECT_EQ_INT(d.c.model.n_layer, 16);
  FM_EXPECT_EQ_STR(d.c.run.out_dir, "/scratch/me");
  FM_EXPECT_EQ_INT(d.c.parallel.tp, 4);
  FM_EXPECT(d.c.optim.lr == 3e-4);
  FM_EXPECT(d.c.optim.betas[0] == 0.9 && d.c.optim.betas[1] == 0.99);
  FM_EXPECT_EQ_INT(d.c.optim.betas_n, 2);
  const FmOrigin *o = d.origin;
  FM_EXPECT_EQ_STR(o[FM_KEY_model_d_model].file, "base.in");
  FM_EXPECT_EQ_INT(o[FM_KEY_model_d_model].line, 1);
  FM_EXPECT_EQ_INT(o[FM_KEY_model_d_model].col, 8);
  FM_EXPECT_EQ_STR(o[FM_KEY_model_n_layer].file, "run.in");
  FM_EXPECT_EQ_INT(o[FM_KEY_model_n_layer].line, 2);
  FM_EXPECT_EQ_INT(o[FM_KEY_model_n_layer].col, 3);
  FM_EXPECT_EQ_STR(o[FM_KEY_run_out_dir].file, "site.in");
  FM_EXPECT_EQ_STR(o[FM_KEY_optim_lr].file, "<command line>");
  FM_EXPECT_EQ_INT(o[FM_KEY_optim_lr].col, 7);
  FM_EXPECT_EQ_INT(o[FM_KEY_optim_betas].col, 7);
  FM_EXPECT(o[FM_KEY_model_n_head].file == NULL);
  free(msgs);
  /* A second bind keeps the first bind's origin names valid. */
  FmDeckSource more = {"late.in", "&log every = 5 /", false};
  FM_EXPECT_EQ_INT(fm_deck_bind(&d, 1, &more, NULL), 0);
  FM_EXPECT_EQ_STR(o[FM_KEY_model_d_model].file, "base.in");
  FM_EXPECT_EQ_STR(o[FM_KEY_log_every].file, "late.in");
  FM_EXPECT(o[FM_KEY_optim_lr].file == o[FM_KEY_optim_betas].file); /* one copy per name */
  fm_deck_free(&d);
}

FM_TEST(bind_override_forms) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_override(&d, "optim%betas=0.8,0.9", &msgs), 0);
  free(msgs);
  FM_EXPECT(d.c.optim.betas[0] == 0.8 && d.c.optim.betas[1] == 0.9);
  FM_EXPECT_EQ_INT(deck_bind_override(&d, "run%name='my run'", &msgs), 0);
  free(msgs);
  FM_EXPECT_EQ_STR(d.c.run.name, "my run");
  FM_EXPECT_EQ_INT(deck_bind_override(&d, "train%steps=100", &msgs), 0);
  free(msgs);
  FM_EXPECT_EQ_INT(d.c.train.steps, 100);
  FM_EXPECT_EQ_INT(deck_bind_override(&d, "model%recompute=.true.", &msgs), 0);
  free(msgs);
  FM_EXPECT(d.c.model.recompute);
  fm_deck_free(&d);
}

/* A whole-array assignment replaces the array; an element extends it. */
FM_TEST(bind_array_semantics) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "a.in", "&prep inputs = 'a.jsonl', 'b.jsonl', 'c.jsonl' /", &msgs), 0);
  free(msgs);
  FM_EXPECT_EQ_INT(d.c.prep.inputs_n, 3);
  FM_EXPECT_EQ_INT(
      deck_bind_text(&d, "b.in", "&prep inputs = 'x.jsonl' /\n&generate prompts(1) = 'hi', prompts(2) = 'yo' /", &msgs),
      0);
  free(msgs);
  FM_EXPECT_EQ_INT(d.c.prep.inputs_n, 1);
  FM_EXPECT_EQ_STR(d.c.prep.inputs[0], "x.jsonl");
  FM_EXPECT_EQ_STR(d.c.prep.inputs[1], ""); /* cleared, not stale */
  FM_EXPECT_EQ_INT(d.c.generate.prompts_n, 2);
  FM_EXPECT_EQ_STR(d.c.generate.prompts[1], "yo");
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "c.in", "&prep sections = 3*'s' /\n&optim betas = 0.5 /", &msgs), 0);
  free(msgs);
  FM_EXPECT_EQ_INT(d.c.prep.sections_n, 3);
  FM_EXPECT_EQ_STR(d.c.prep.sections[2], "s");
  FM_EXPECT_EQ_INT(d.c.optim.betas_n, 1);
  FM_EXPECT(d.c.optim.betas[1] == 0.0);
  fm_deck_free(&d);
}

/* Everything set away from its default, with awkward values. */
static const char *const awkward_deck =
    "&run task = 'check', name = 'it''s \"quoted\" ! not a comment', seed = 9223372036854775807 /\n"
    "&model arch = 'llama', norm_eps = 1e-300, rope_theta = 500000, init_std = 0.1, recompute = T /\n"
    "&optim lr = 3e-4, betas = 0.9, 0.999, eps = 4.9e-324, weight_decay = 0.30000000000000004 /\n"
    "&prep inputs = 'a', '', 'c', min_chars = 0 /\n"
    "&tokenizer special_tokens = '<|a|>', '<|b|>' /\n"
    "&generate temperature = 0.7, prompts = 'Once' /\n";

/* Same values, bit for bit, element by element. */
static void expect_same_INT(const char *key, const int64_t *a, const int64_t *b, int n) {
  for (int i = 0; i < n; i++)
    if (a[i] != b[i]) FM__FAIL("%s(%d): %lld != %lld", key, i + 1, (long long)a[i], (long long)b[i]);
}
static void expect_same_REAL(const char *key, const double *a, const double *b, int n) {
  for (int i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(double)) != 0) FM__FAIL("%s(%d): %a != %a", key, i + 1, a[i], b[i]);
}
static void expect_same_BOOL(const char *key, const bool *a, const bool *b, int n) {
  for (int i = 0; i < n; i++)
    if (a[i] != b[i]) FM__FAIL("%s(%d): %d != %d", key, i + 1, a[i], b[i]);
}
static void expect_same_STR(const char *key, char *const *a, char *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(a[i], b[i]) != 0) FM__FAIL("%s(%d): \"%s\" != \"%s\"", key, i + 1, a[i], b[i]);
}

/* Every key of two configs, generated from keys.def like FmConfig itself. */
static void expect_same_config(const FmDeck *a, const FmDeck *b) {
#define FM_GROUP(g, help)
#define FM_KEY(g, name, type, def, range, help) expect_same_##type(#g "%" #name, &a->c.g.name, &b->c.g.name, 1);
#define FM_KEYA(g, name, type, nmax, def, range, help) \
  FM_EXPECT_EQ_INT(a->c.g.name##_n, b->c.g.name##_n);  \
  expect_same_##type(#g "%" #name, a->c.g.name, b->c.g.name, a->c.g.name##_n);
#define FM_END(g)
#include "../../src/deck/keys.def"
#undef FM_GROUP
#undef FM_KEY
#undef FM_KEYA
#undef FM_END
}

/* The written deck reads back to the same bits, defaults included. */
FM_TEST(write_round_trip) {
  FmDeck a, b;
  fm_deck_init(&a);
  fm_deck_init(&b);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&a, "awkward.in", awkward_deck, &msgs), 0);
  FM_EXPECT_EQ_STR(msgs, "");
  free(msgs);
  FM_EXPECT(a.c.optim.eps == 4.9e-324); /* the smallest subnormal survives */
  char *text = deck_write_string(&a);
  FM_EXPECT_EQ_INT(deck_bind_text(&b, "written.in", text, &msgs), 0);
  FM_EXPECT_EQ_STR(msgs, "");
  expect_same_config(&a, &b);
  FM_EXPECT_EQ_INT(b.nwarnings, 0);
  free(msgs);
  free(text);
  /* And the defaults alone. */
  FmDeck c, e;
  fm_deck_init(&c);
  fm_deck_init(&e);
  e.c.optim.lr = 0.1; /* make sure the comparison can fail */
  text = deck_write_string(&c);
  FM_EXPECT_EQ_INT(deck_bind_text(&e, "written.in", text, &msgs), 0);
  expect_same_config(&c, &e);
  free(msgs);
  free(text);
  fm_deck_free(&a);
  fm_deck_free(&b);
  fm_deck_free(&c);
  fm_deck_free(&e);
}

/* What a user reads at the top of every run. */
FM_TEST(write_format) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "run.in", "&optim\n  lr = 6e-4\n  name = 'LION'\n/\n&run name = 'o''k' /", &msgs),
                   0);
  free(msgs);
  char *text = deck_write_string(&d);
  FM_EXPECT(strncmp(text, "! fmhpc ", 8) == 0);
  FM_EXPECT_CONTAINS(text,
                     "\n&optim  ! optimizer and schedule\n"
                     "  name             = 'lion'                  ! optimizer [run.in:3]\n"
                     "  lr               = 0.0006                  ! peak learning rate [run.in:2]\n"
                     "  betas            = 0.9, 0.95               ! beta1, beta2\n"
                     "  eps              = 1e-8                    ! AdamW epsilon\n");
  FM_EXPECT_CONTAINS(text,
                     "\n  name    = 'o''k'                           ! run name: log header, summary.json, checkpoint "
                     "attribute, TensorBoard, plot title [run.in:5]\n");
  FM_EXPECT_CONTAINS(text, "\n  rope_theta           = 10000.0             ! RoPE base frequency (llama)\n");
  FM_EXPECT_CONTAINS(text,
                     "\n  ! inputs             = (no values)         ! input globs: .jsonl, .jsonl.gz, .jsonl.zst\n");
  FM_EXPECT_CONTAINS(text, "\n  residual_scaled_init = .true.              !");
  /* Every group opens and closes, every key appears. */
  for (int g = 0; g < fm_deck_ngroups(); g++) {
    char open[32];
    snprintf(open, sizeof open, "\n&%s  ! ", fm_deck_group_name(g));
    FM_EXPECT_CONTAINS(text, open);
  }
  int closes = 0;
  for (const char *p = text; (p = strstr(p, "\n/\n")); p++) closes++;
  FM_EXPECT_EQ_INT(closes, NGROUPS);
  for (int k = 0; k < FM_NKEYS; k++) {
    char key[80], empty[80];
    snprintf(key, sizeof key, "\n  %s ", fm_deck_key_info(k)->name);
    snprintf(empty, sizeof empty, "\n  ! %s ", fm_deck_key_info(k)->name);
    if (!strstr(text, key) && !strstr(text, empty)) FM__FAIL("key %s missing", fm_deck_key_info(k)->name);
  }
  free(text);
  fm_deck_free(&d);
}

FM_TEST(write_reals_shortest) {
  FmDeck d;
  fm_deck_init(&d);
  const double vals[] = {0.1, 3e-4, 1e-5, 2.5e-7, 1e22, 123456.75, 0.30000000000000004};
  const char *want[] = {"0.1", "0.0003", "1e-5", "2.5e-7", "1e22", "123456.75", "0.30000000000000004"};
  for (int i = 0; i < 7; i++) {
    d.c.log.peak_tflops = vals[i];
    char *text = deck_write_string(&d);
    char line[96];
    snprintf(line, sizeof line, "\n  peak_tflops = %-28s ! peak TFLOP/s", want[i]);
    FM_EXPECT_CONTAINS(text, line);
    free(text);
  }
  fm_deck_free(&d);
}

FM_TEST(help_lists_every_key) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  fm_deck_help(f);
  fclose(f);
  FM_EXPECT_CONTAINS(text, "\n&optim: optimizer and schedule\n");
  FM_EXPECT_CONTAINS(text, "\n  betas                  REAL[2]   default 0.9, 0.95  range [0,1)\n      beta1, beta2\n");
  FM_EXPECT_CONTAINS(text,
                     "\n  task                   STR       default 'train'  one of "
                     "train|check|prep|tokenizer|eval|generate|export|ifd|dedup\n      task to run\n");
  FM_EXPECT_CONTAINS(text, "\n  inputs                 STR[64]   default (none)\n");
  FM_EXPECT_CONTAINS(text, "\n  recompute              BOOL      default .false.\n");
  for (int g = 0; g < fm_deck_ngroups(); g++) {
    char open[32];
    snprintf(open, sizeof open, "\n&%s: ", fm_deck_group_name(g));
    FM_EXPECT_CONTAINS(text, open);
  }
  for (int k = 0; k < FM_NKEYS; k++) {
    char line[200];
    snprintf(line, sizeof line, "  %-22s ", fm_deck_key_info(k)->name);
    FM_EXPECT_CONTAINS(text, line);
    FM_EXPECT_CONTAINS(text, fm_deck_key_info(k)->help);
  }
  free(text);
}

FM_TEST(deck_error_format) {
  FmDeck d;
  fm_deck_init(&d);
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(deck_bind_text(&d, "m.in", "&model\n  n_head = 5 /\n&optim betas = 0.8, 0.9 /", &msgs), 0);
  free(msgs);
  size_t len = 0;
  FILE *f = open_memstream(&msgs, &len);
  fm_deck_error(&d, f, FM_KEY_model_n_head, "must divide d_model = %d", 768);
  fm_deck_error(&d, f, FM_KEY_model_d_model, "too wide");
  fm_deck_error(&d, f, FM_KEY_optim_betas, "beta2 below beta1");
  fm_deck_error(&d, f, FM_KEY_run_name, "bad");
  fm_deck_error(&d, NULL, FM_KEY_run_name, "silent on other ranks");
  fclose(f);
  FM_EXPECT_EQ_STR(msgs,
                   "m.in:2:3: &model n_head = 5: must divide d_model = 768\n"
                   "(default): &model d_model = 768: too wide\n"
                   "m.in:3:8: &optim betas = 0.8, 0.9: beta2 below beta1\n"
                   "(default): &run name = 'fmhpc': bad\n");
  free(msgs);
  fm_deck_free(&d);
}

static int validate_text(const char *text, char **msgs) {
  FmDeck d;
  fm_deck_init(&d);
  int rc = deck_bind_text(&d, "v.in", text, msgs);
  free(*msgs);
  size_t len = 0;
  FILE *f = open_memstream(msgs, &len);
  if (rc == 0) rc = fm_deck_validate(&d, f);
  fclose(f);
  fm_deck_free(&d);
  return rc;
}

FM_TEST(validate_batch_multiple) {
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(validate_text("&train global_batch = 12, micro_batch = 3 /", &msgs), 0);
  FM_EXPECT_EQ_STR(msgs, "");
  free(msgs);
  FM_EXPECT_EQ_INT(validate_text("&train global_batch = 10\n  micro_batch = 3 /", &msgs), FM_EDECK);
  FM_EXPECT_EQ_STR(msgs, "v.in:1:8: &train global_batch = 10: must be a multiple of &train micro_batch = 3 (v.in:2)\n");
  free(msgs);
  FM_EXPECT_EQ_INT(validate_text("&train global_batch = 9 /", &msgs), 0); /* micro_batch 1 divides all */
  free(msgs);
  FM_EXPECT_EQ_INT(validate_text("&train micro_batch = 16 /", &msgs), FM_EDECK);
  FM_EXPECT_EQ_STR(msgs,
                   "(default): &train global_batch = 8: must be a multiple of &train micro_batch = 16 (v.in:1)\n");
  free(msgs);
}

FM_TEST(validate_chars_and_betas) {
  char *msgs = NULL;
  FM_EXPECT_EQ_INT(validate_text("&prep min_chars = 100, max_chars = 99 /\n&optim betas = 0.9 /", &msgs), FM_EDECK);
  FM_EXPECT_EQ_STR(msgs,
                   "v.in:1:7: &prep min_chars = 100: must be <= &prep max_chars = 99 (v.in:1)\n"
                   "v.in:2:8: &optim betas = 0.9: needs two values (beta1, beta2), got 1\n");
  free(msgs);
  FM_EXPECT_EQ_INT(validate_text("&prep min_chars = 99, max_chars = 99 /", &msgs), 0);
  free(msgs);
}

/* The reference decks shipped in inputs/ bind and validate cleanly. */
FM_TEST(reference_decks_bind) {
  const char *decks[] = {"gpt2_nano.in", "gpt2_small.in", "llama2.in", "llama_1p2b.in", "llama_nano.in"};
  for (int i = 0; i < 5; i++) {
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/inputs/%s", FMHPC_SOURCE_DIR, decks[i]);
    if (fm_read_file(path, &text, NULL) != 0) continue; /* another area's file, not there yet */
    FmDeck d;
    fm_deck_init(&d);
    char *msgs = NULL;
    FM_EXPECT_EQ_INT(deck_bind_text(&d, path, text, &msgs), 0);
    FM_EXPECT_EQ_STR(msgs, "");
    free(msgs);
    size_t len = 0;
    FILE *f = open_memstream(&msgs, &len);
    FM_EXPECT_EQ_INT(fm_deck_validate(&d, f), 0);
    fclose(f);
    FM_EXPECT_EQ_STR(msgs, "");
    free(msgs);
    fm_deck_free(&d);
    free(text);
  }
}

/* Choice keys are bound to their enums once, at binding: every spelling of
 * &train precision and determinism (any case) gives the enum of its place in
 * keys.def's list, defaults included; keys without a list stay -1. */
FM_TEST(choice_keys_bind_to_enums) {
  static const struct {
    const char *text;
    int key, want;
  } cases[] = {
      {"&train precision = 'p=f32,c=bf16' /\n", FM_KEY_train_precision, FM_PRECISION_BF16},
      {"&train precision = 'P=F32,C=F32' /\n", FM_KEY_train_precision, FM_PRECISION_F32},
      {"&train determinism = 'fast' /\n", FM_KEY_train_determinism, FM_DETERMINISM_FAST},
      {"&train determinism = 'EXACT' /\n", FM_KEY_train_determinism, FM_DETERMINISM_EXACT},
      {"&optim schedule = 'inv_sqrt' /\n", FM_KEY_optim_schedule, 4},
      {"&prep format = 'BIN' /\n", FM_KEY_prep_format, FM_PREP_FORMAT_BIN},
      {"&prep mode = 'sft' /\n", FM_KEY_prep_mode, FM_PREP_MODE_SFT},
      {"&prep on_bad_record = 'skip' /\n", FM_KEY_prep_on_bad_record, FM_BAD_RECORD_SKIP},
      {"&tokenizer pattern = 'gpt2' /\n", FM_KEY_tokenizer_pattern, FM_TOK_PATTERN_KEY_GPT2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FmDeck d;
    fm_deck_init(&d);
    FM_EXPECT_EQ_INT(d.c.choice[FM_KEY_train_precision], FM_PRECISION_F32); /* the default */
    FM_EXPECT_EQ_INT(d.c.choice[FM_KEY_train_determinism], FM_DETERMINISM_EXACT);
    FmDeckSource src = {"t.in", cases[i].text, false};
    char *msgs = NULL;
    FM_REQUIRE(deck_bind_capture(&d, 1, &src, &msgs) == 0);
    free(msgs);
    FM_EXPECT_EQ_INT(d.c.choice[cases[i].key], cases[i].want);
    FM_EXPECT_EQ_INT(d.c.choice[FM_KEY_run_name], -1);
    FM_EXPECT_EQ_INT(d.c.choice[FM_KEY_model_d_model], -1);
    fm_deck_free(&d);
  }
}
