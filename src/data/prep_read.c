/* prep_read.c: the reading side of task='prep' (prep_internal.h): the
 * deck's &prep settings checked and bound, the input globs expanded on rank 0
 * and broadcast, and each record turned into tokenized documents with their
 * loss masks (plain text, or SFT turns through the chat template), filtered
 * by length and split into train/valid. */
#include "prep_internal.h"

#include <stdlib.h>
#include <string.h>

#include "fmhpc/json.h"
#include "fmhpc/rng.h"

static bool nonempty(const char *s) { return s && s[0]; }

/* ---- configuration ---------------------------------------------------- */
int fm__prep_configure(Prep *p, FILE *err) {
  const FmDeck *d = p->deck;
  int rc = 0;
  if (!nonempty(d->c.prep.tokenizer)) {
    fm_deck_error(d, err, FM_KEY_prep_tokenizer, "task = 'prep' needs a tokenizer");
    if (err) fprintf(err, "hint: tokenizer = 'tokenizers/gpt2' (a directory with encoder.json and vocab.bpe)\n");
    rc = FM_EDECK;
  }
  int ninputs = 0;
  for (int i = 0; i < d->c.prep.inputs_n; i++) ninputs += nonempty(d->c.prep.inputs[i]);
  if (ninputs == 0) {
    fm_deck_error(d, err, FM_KEY_prep_inputs, "task = 'prep' needs input globs");
    if (err) fprintf(err, "hint: inputs = 'corpus/*.jsonl.zst'\n");
    rc = FM_EDECK;
  }
  fm_packing_parse(d->c.prep.packing, &p->packing);
  fm_posids_parse(d->c.prep.position_ids, &p->pos);
  p->sft = d->c.choice[FM_KEY_prep_mode] == FM_PREP_MODE_SFT;
  p->skip_bad = d->c.choice[FM_KEY_prep_on_bad_record] == FM_BAD_RECORD_SKIP;
  p->R = d->c.prep.seq_len + 1;
  p->W = d->c.prep.window_docs;
  p->min_chars = d->c.prep.min_chars;
  p->max_chars = d->c.prep.max_chars;
  p->valid_fraction = d->c.prep.valid_fraction;
  if (p->min_chars > p->max_chars) {
    fm_deck_error(d, err, FM_KEY_prep_min_chars, "min_chars = %lld is above max_chars = %lld",
                  (long long)p->min_chars, (long long)p->max_chars);
    rc = FM_EDECK;
  }
  int nvalid = 0;
  for (int i = 0; i < d->c.prep.valid_inputs_n; i++) nvalid += nonempty(d->c.prep.valid_inputs[i]);
  if (nvalid && p->valid_fraction > 0) {
    fm_deck_error(d, err, FM_KEY_prep_valid_fraction,
                  "valid_fraction = %g and valid_inputs both choose the validation split", p->valid_fraction);
    if (err) fprintf(err, "hint: keep one of them\n");
    rc = FM_EDECK;
  }
  if (!p->sft) return rc;
  /* SFT: sections 'field' or 'field=role', or a messages list */
  for (int i = 0; i < d->c.prep.sections_n; i++) {
    const char *s = d->c.prep.sections[i];
    if (!nonempty(s)) continue;
    const char *eq = strchr(s, '=');
    Section *sc = &p->sec[p->nsec++];
    sc->field = eq ? fm_xstrndup(s, (size_t)(eq - s)) : fm_xstrdup(s);
    sc->role = fm_xstrdup(eq ? eq + 1 : s);
  }
  int ntrain = 0;
  for (int i = 0; i < d->c.prep.train_on_n; i++) ntrain += nonempty(d->c.prep.train_on[i]);
  if (ntrain == 0) {
    fm_deck_error(d, err, FM_KEY_prep_train_on, "mode = 'sft' needs train_on: the sections or roles to train");
    if (err) fprintf(err, "hint: train_on = 'assistant' (roles) or 'response' (sections)\n");
    rc = FM_EDECK;
  }
  for (int k = 0; k < d->c.prep.train_on_n; k++) {
    bool named = false;
    for (int i = 0; i < p->nsec; i++)
      if (!strcmp(d->c.prep.train_on[k], p->sec[i].field) || !strcmp(d->c.prep.train_on[k], p->sec[i].role))
        p->sec[i].train = named = true;
    if (!named && p->nsec > 0 && nonempty(d->c.prep.train_on[k])) { /* sections: every role is known here */
      fm_deck_error(d, err, FM_KEY_prep_train_on, "'%s' is none of the sections' fields or roles",
                    d->c.prep.train_on[k]);
      if (err) {
        fprintf(err, "hint: sections are");
        for (int i = 0; i < p->nsec; i++) fprintf(err, " '%s' (role '%s')", p->sec[i].field, p->sec[i].role);
        fprintf(err, "\n");
      }
      rc = FM_EDECK;
    }
  }
  if (fm_template_from_deck(&p->tmpl, d, err)) rc = FM_EDECK;
  return rc;
}

static bool role_trained(const Prep *p, const char *role) {
  for (int k = 0; k < p->deck->c.prep.train_on_n; k++)
    if (!strcmp(p->deck->c.prep.train_on[k], role)) return true;
  return false;
}

/* Rank 0 expands the globs (sorted, as glob(3) does) and stats the files;
 * the list is broadcast so that every rank reads the same files. Training
 * inputs first, then validation inputs. */
int fm__prep_expand_inputs(Prep *p) {
  const FmConfig *c = &p->deck->c;
  FILE *err = p->rank == 0 ? stderr : NULL;
  FmDeckKeyErr mt = {p->deck, err, FM_KEY_prep_inputs}, mv = {p->deck, err, FM_KEY_prep_valid_inputs};
  FmFileList fl[2] = {{0}, {0}};
  int rc = fm_comm_glob(p->world, c->prep.inputs, c->prep.inputs_n, fm_deck_glob_miss, &mt, &fl[0]);
  if (!rc) rc = fm_comm_glob(p->world, c->prep.valid_inputs, c->prep.valid_inputs_n, fm_deck_glob_miss, &mv, &fl[1]);
  p->in = fm_xcalloc((size_t)(fl[0].n + fl[1].n) + 1, sizeof *p->in);
  for (int v = 0; v < 2 && !rc; v++)
    for (int i = 0; i < fl[v].n; i++) {
      p->in[p->nin].valid = v;
      p->in[p->nin].bytes = fl[v].bytes[i];
      p->in[p->nin].path = fl[v].path[i];
      fl[v].path[i] = NULL;
      p->total_bytes += fl[v].bytes[i];
      p->nin++;
    }
  fm_file_list_free(&fl[0]);
  fm_file_list_free(&fl[1]);
  return rc;
}

/* ---- records to documents --------------------------------------------- */
/* Code points of valid UTF-8: the bytes that are not continuation bytes
 * (10xxxxxx), counted 8 at a time (a byte's bit 7 set and bit 6 clear; the
 * flags, one a byte, summed into the top byte by a multiply: the build has
 * no popcnt instruction, and __builtin_popcountll is a library call). */
static int64_t count_chars(const char *s, size_t n) {
  int64_t c = (int64_t)n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, s + i, 8);
    c -= (int64_t)((((x & ~(x << 1) & 0x8080808080808080ull) >> 7) * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++) c -= ((unsigned char)s[i] & 0xC0) == 0x80;
  return c;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* Append ids of text to the window buffer with loss mask m. */
static int encode(Prep *p, const char *text, size_t n, bool special, uint8_t m) {
  int64_t before = p->nids;
  int64_t k = fm_tok_encode(p->tok, text, n, special, &p->ids, &p->nids, &p->idcap);
  if (k < 0) return (int)k;
  if (!p->sft) return 0; /* text mode keeps no mask: every id is trained */
  if (p->maskcap < p->idcap) {
    p->maskcap = p->idcap;
    p->mask = fm_xrealloc(p->mask, (size_t)p->maskcap);
  }
  if (p->nids > before) memset(p->mask + before, m, (size_t)(p->nids - before)); /* mask is NULL before the first id */
  return 0;
}

static int push_eos(Prep *p, uint8_t m) {
  if (p->nids == p->idcap) {
    p->idcap = p->idcap * 2 + 1024;
    p->ids = fm_xrealloc(p->ids, (size_t)p->idcap * sizeof *p->ids);
  }
  p->ids[p->nids] = p->eos;
  if (!p->sft) { /* text mode keeps no mask: every id is trained */
    p->nids++;
    return 0;
  }
  if (p->maskcap < p->idcap) {
    p->maskcap = p->idcap;
    p->mask = fm_xrealloc(p->mask, (size_t)p->maskcap);
  }
  p->mask[p->nids++] = m;
  return 0;
}

/* A turn of an SFT document. */
typedef struct Turn {
  const char *role, *text;
  size_t len;
  bool train;
} Turn;

/* The first key of object o that an earlier key repeats, or -1. A key twice
 * in one object: fm_json_get takes the first, Python's json (so most tools
 * that wrote or will read the data) the last; which text is the document is
 * not ours to guess. Records have few keys: pairwise. */
static int64_t repeated_key(const FmJson *o) {
  for (int64_t i = 1; i < o->n; i++)
    for (int64_t j = 0; j < i; j++)
      if (o->keylens[i] == o->keylens[j] && !memcmp(o->keys[i], o->keys[j], o->keylens[i])) return i;
  return -1;
}

static int say_repeated(const FmJson *o, const char *where, Bad *bad) {
  const int64_t k = o->type == FM_JSON_OBJ && o->n <= 4096 ? repeated_key(o) : -1;
  if (k < 0) return 0;
  snprintf(bad->why, sizeof bad->why,
           "%skey '%.*s' appears twice (which value is meant? JSON readers differ: the first "
           "or the last)",
           where, (int)(o->keylens[k] > 60 ? 60 : o->keylens[k]), o->keys[k]);
  return FM_EDATA;
}

/* Why a record is bad, in words (file:line is added by the caller). */
static int turns_of(Prep *p, const FmJson *obj, Turn *turns, int *nturns, Bad *bad) {
  *nturns = 0;
  if (p->nsec > 0) {
    for (int i = 0; i < p->nsec; i++) {
      const FmJson *v = fm_json_get(obj, p->sec[i].field);
      if (!v || v->type != FM_JSON_STR) {
        snprintf(bad->why, sizeof bad->why, "section '%s' is %s, expected a string", p->sec[i].field,
                 v ? fm_json_type_name(v->type) : "missing");
        return FM_EDATA;
      }
      turns[(*nturns)++] = (Turn){p->sec[i].role, v->s, v->len, p->sec[i].train};
    }
    return 0;
  }
  const char *mf = p->deck->c.prep.messages_field;
  const FmJson *m = fm_json_get(obj, mf);
  if (!m || m->type != FM_JSON_ARR || m->n == 0 || m->n > 256) {
    snprintf(bad->why, sizeof bad->why, "field '%s' is %s, expected a list of 1..256 {role, content} turns", mf,
             m ? fm_json_type_name(m->type) : "missing");
    return FM_EDATA;
  }
  for (int64_t i = 0; i < m->n; i++) {
    char where[96];
    snprintf(where, sizeof where, "%s[%lld]: ", mf, (long long)i);
    if (say_repeated(&m->items[i], where, bad)) return FM_EDATA;
    const FmJson *t = &m->items[i], *role = t->type == FM_JSON_OBJ ? fm_json_get(t, "role") : NULL,
                 *content = t->type == FM_JSON_OBJ ? fm_json_get(t, "content") : NULL;
    if (!role || role->type != FM_JSON_STR || !content || content->type != FM_JSON_STR) {
      snprintf(bad->why, sizeof bad->why, "%s[%lld] needs string fields 'role' and 'content'", mf, (long long)i);
      return FM_EDATA;
    }
    turns[(*nturns)++] = (Turn){role->s, content->s, content->len, role_trained(p, role->s)};
  }
  return 0;
}

/* A built-in template puts the record's role into its prefix, which is
 * encoded with special tokens on: a role holding a special token's text
 * ("user<|endoftext|>") would put that token (an EOS, a header end) into
 * the document. The role is encoded alone, after the window's ids (then
 * dropped), and refused if any id is special. */
static int role_is_text(Prep *p, const char *role, Bad *bad) {
  const int64_t before = p->nids;
  int64_t k = fm_tok_encode(p->tok, role, strlen(role), true, &p->ids, &p->nids, &p->idcap);
  int rc = k < 0 ? (int)k : 0;
  for (int64_t i = before; !rc && i < p->nids; i++) {
    if (!fm_tok_is_special(p->tok, p->ids[i])) continue;
    size_t len = 0;
    const char *tok = fm_tok_token_bytes(p->tok, p->ids[i], &len);
    snprintf(bad->why, sizeof bad->why,
             "role '%.64s' holds the special token '%.*s': a role from the data is text, never a special token",
             role, (int)(len < 64 ? len : 64), tok ? tok : "");
    rc = FM_EDATA;
  }
  p->nids = before;
  return rc;
}

/* Render turns through the template into ids + mask. Prefix, suffix and bos
 * may hold special tokens; content and the record's roles never. Trained
 * turns train their content and suffix; the closing EOS is trained when the
 * last turn is. */
static int encode_sft(Prep *p, const Turn *turns, int n, Bad *bad) {
  int rc = 0;
  if (nonempty(p->tmpl.bos)) rc = encode(p, p->tmpl.bos, strlen(p->tmpl.bos), true, 0);
  for (int i = 0; i < n && !rc; i++) {
    char *pre, *suf;
    if (fm_template_role(&p->tmpl, turns[i].role, &pre, &suf)) {
      snprintf(bad->why, sizeof bad->why, "role '%s' is not in the deck template's role_names", turns[i].role);
      return FM_EDATA;
    }
    if (p->tmpl.nroles == 0 && (rc = role_is_text(p, turns[i].role, bad)) != 0) {
      free(pre);
      free(suf);
      return rc;
    }
    rc = encode(p, pre, strlen(pre), true, 0);
    if (!rc) rc = encode(p, turns[i].text, turns[i].len, false, turns[i].train);
    if (!rc) rc = encode(p, suf, strlen(suf), true, turns[i].train);
    free(pre);
    free(suf);
  }
  if (!rc) rc = push_eos(p, n > 0 && turns[n - 1].train);
  return rc;
}

/* One record: 0 kept or filtered (counted), FM_EDATA bad (bad->why set),
 * other <0 a failure. */
int fm__prep_do_record(Prep *p, const Record *r, Bad *bad) {
  FmJsonDoc doc;
  FmJsonError je;
  const char *text = p->rtext + r->off;
  if (fm_json_parse(&doc, text, r->len, 64, &je)) {
    /* bad UTF-8 is named as such, before JSON errors (a line that parses is
     * valid UTF-8: the parser checks every string, and JSON outside strings
     * is ASCII, so only a failed line needs the whole-line check) */
    int64_t badoff = fm_utf8_check(text, r->len);
    if (badoff >= 0)
      snprintf(bad->why, sizeof bad->why, "invalid UTF-8 at byte %lld of the line", (long long)badoff + 1);
    else
      snprintf(bad->why, sizeof bad->why, "column %d: malformed JSON: %s", je.col, je.msg);
    return FM_EDATA;
  }
  int rc = 0;
  Turn turns[256];
  int nturns = 0;
  if (doc.root.type != FM_JSON_OBJ) {
    snprintf(bad->why, sizeof bad->why, "the record is a JSON %s, expected an object", fm_json_type_name(doc.root.type));
    rc = FM_EDATA;
  } else if (say_repeated(&doc.root, "", bad)) {
    rc = FM_EDATA;
  } else if (p->sft) {
    rc = turns_of(p, &doc.root, turns, &nturns, bad);
  } else {
    const char *tf = p->deck->c.prep.text_field;
    const FmJson *t = fm_json_get(&doc.root, tf);
    if (!t || t->type != FM_JSON_STR) {
      snprintf(bad->why, sizeof bad->why, "field '%s' is %s, expected a string", tf,
               t ? fm_json_type_name(t->type) : "missing");
      rc = FM_EDATA;
    } else {
      turns[nturns++] = (Turn){"text", t->s, t->len, true};
    }
  }
  if (rc) {
    fm_json_free(&doc);
    return rc;
  }
  int64_t chars = 0;
  for (int i = 0; i < nturns; i++) chars += count_chars(turns[i].text, turns[i].len);
  if (chars < p->min_chars || chars > p->max_chars) {
    p->stat[chars < p->min_chars ? ST_too_short : ST_too_long]++;
    fm_json_free(&doc);
    return 0;
  }
  int split = p->in[r->in].valid;
  if (!split && p->valid_fraction > 0) { /* the text's hash decides (only then is it needed) */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < nturns; i++) h = fnv1a(h, turns[i].text, turns[i].len + 1); /* the NUL separates turns */
    split = fm_rng_uniform((uint64_t)p->deck->c.run.seed, FM_RNG_PREP, 0, h) < (float)p->valid_fraction;
  }
  int64_t start = p->nids;
  if (p->sft) {
    rc = encode_sft(p, turns, nturns, bad);
  } else {
    rc = encode(p, turns[0].text, turns[0].len, false, 1);
    if (!rc) rc = push_eos(p, 1);
  }
  fm_json_free(&doc);
  if (rc == FM_EDATA) {
    p->nids = start;
    return rc;
  }
  if (rc) {
    snprintf(bad->why, sizeof bad->why, "the tokenizer failed: %s", fm_strerror(rc));
    return rc;
  }
  if (2 * p->ndoc[split] + 2 > p->doccap[split]) {
    p->doccap[split] = 2 * p->doccap[split] + 256;
    p->doff[split] = fm_xrealloc(p->doff[split], (size_t)p->doccap[split] * sizeof(int64_t));
  }
  p->doff[split][2 * p->ndoc[split]] = start; /* [start, end) in the window buffer */
  p->doff[split][2 * p->ndoc[split]++ + 1] = p->nids;
  p->stat[ST_chars] += chars;
  int64_t trained = p->sft ? 0 : p->nids - start; /* text mode: every id */
  /* summed here: a uint8_t pointer may alias p->stat, which the loop would store every id */
  for (int64_t i = start; p->sft && i < p->nids; i++) trained += p->mask[i];
  p->stat[split ? ST_trained_valid : ST_trained_train] += trained;
  return 0;
}
