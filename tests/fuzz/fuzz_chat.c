/* fuzz_chat: chat templates and the records prep turns into documents
 * (src/data/template.c, src/data/prep_read.c fm__prep_do_record, and the
 * packing of a window, src/data/pack.c). Input: &prep deck text (mode,
 * chat_template, role_names/role_prefix/role_suffix/template_bos, sections,
 * train_on, messages_field, text_field, min/max_chars, seq_len, packing,
 * position_ids), a 0x1e byte, then JSONL records. The deck binds after a base
 * deck (inputs and tokenizer set); when prep's configuration accepts it, each
 * line goes through fm__prep_do_record with a byte-level tokenizer whose
 * specials are the built-in templates' markers, and the window is packed for
 * both splits. A bad record must say why (Bad.why). */
#include "data/prep_internal.h"
#include "fmhpc/deck.h"
#include "fmhpc/tokenizer.h"
#include "fuzz_common.h"

static FmTokenizer *tok;
static char tok_path[512];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  /* 256 byte tokens, then the template markers as added special tokens */
  static const char *specials[] = {"<|endoftext|>",  "<|begin_of_text|>", "<|start_header_id|>",
                                   "<|end_header_id|>", "<|eot_id|>",     "<|im_start|>",
                                   "<|im_end|>"};
  FmStr j;
  fm_str_init(&j);
  fm_str_cat(&j, "{\"added_tokens\": [");
  for (int i = 0; i < 7; i++)
    fm_str_printf(&j, "%s{\"id\": %d, \"content\": \"%s\", \"special\": true}", i ? ", " : "", 256 + i, specials[i]);
  fm_str_cat(&j, "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                 " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
  /* GPT-2's bytes-to-unicode map: printable bytes stand for themselves */
  int n = 0;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = printable ? b : 256 + n++;
    char u[8];
    if (cp < 0x80) snprintf(u, sizeof u, "%s%c", cp == '"' || cp == '\\' ? "\\" : "", cp);
    else snprintf(u, sizeof u, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
    fm_str_printf(&j, "%s\"%s\": %d", b ? ", " : "", u, b);
  }
  fm_str_cat(&j, "}, \"merges\": []}}");
  fz_write(tok_path, sizeof tok_path, "tokenizer.json", j.s, j.len);
  fm_str_free(&j);
  if (fm_tok_load(&tok, tok_path, stderr)) abort();
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t k = fz_split(data, size, 0x1e);
  char *deck_text = fz_strndup(data, k);
  char base[700];
  snprintf(base, sizeof base, "&prep inputs='in.jsonl' tokenizer='%s' min_chars=0 /\n", tok_path);
  FmDeckSource src[2] = {{"base.in", base, false}, {"fuzz.in", deck_text, false}};
  FmDeck d;
  fm_deck_init(&d);
  FzErr e;
  int rc = fm_deck_bind(&d, 2, src, fz_err_open(&e));
  fz_said(&e, rc, "fm_deck_bind");
  if (rc || d.c.prep.seq_len > 4096) { /* a long row is memory, not parsing */
    fm_deck_free(&d);
    free(deck_text);
    return 0;
  }
  Prep p = {0};
  p.deck = &d;
  rc = fm__prep_configure(&p, fz_err_open(&e));
  fz_said(&e, rc, "fm__prep_configure");
  if (!rc) {
    Input in = {0};
    p.in = &in;
    p.nin = 1;
    p.tok = tok;
    p.eos = fm_tok_eos_id(tok);
    const uint8_t *rec = k < size ? data + k + 1 : data + size, *end = data + size;
    for (int64_t line = 1; rec < end; line++) {
      const uint8_t *nl = memchr(rec, '\n', (size_t)(end - rec));
      size_t n = nl ? (size_t)(nl - rec) : (size_t)(end - rec);
      char *text = fz_strndup(rec, n);
      Record r = {0, line, 0, n}; /* the line at offset 0 of p.rtext */
      p.rtext = text;
      Bad bad = {{0}};
      rc = fm__prep_do_record(&p, &r, &bad);
      if (rc == FM_EDATA && !bad.why[0]) {
        fprintf(stderr, "fuzz_chat: a bad record (line %lld) without a reason\n", (long long)line);
        abort();
      }
      if (rc && rc != FM_EDATA) abort();
      free(text);
      p.rtext = NULL;
      rec = nl ? nl + 1 : end;
    }
    for (int s = 0; s < 2; s++) {
      FmDoc *docs = malloc((size_t)(p.ndoc[s] + 1) * sizeof *docs);
      for (int64_t i = 0; i < p.ndoc[s]; i++) {
        int64_t a = p.doff[s][2 * i], b = p.doff[s][2 * i + 1];
        docs[i] = (FmDoc){p.ids + a, p.sft ? p.mask + a : NULL, b - a}; /* text mode keeps no mask */
      }
      FmPacked pk;
      memset(&pk, 0, sizeof pk);
      if (fm_pack(&pk, docs, p.ndoc[s], p.R - 1, p.packing, p.pos, p.pad) == 0) fm_packed_free(&pk);
      free(docs);
    }
  }
  fm_template_free(&p.tmpl);
  for (int i = 0; i < p.nsec; i++) {
    free(p.sec[i].field);
    free(p.sec[i].role);
  }
  free(p.ids);
  free(p.mask);
  free(p.doff[0]);
  free(p.doff[1]);
  fm_deck_free(&d);
  free(deck_text);
  return 0;
}
