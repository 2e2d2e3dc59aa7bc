/* load.c: the three ways a byte-level BPE tokenizer arrives.
 *   - a directory with GPT-2's encoder.json + vocab.bpe (openai/gpt-2);
 *   - a Hugging Face tokenizer.json with a BPE model;
 *   - a tiktoken rank file (base64 token, space, rank; one per line).
 * Each loader checks everything it reads and rejects what fmhpc would not
 * tokenize exactly as the reference does (a normalizer, a WordPiece model,
 * Metaspace, byte_fallback, ...): an error names the file, the place (JSON
 * line:col or path, or "vocab.bpe line 17"), the rule, and a hint. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmhpc/core.h"
#include "fmhpc/json.h"
#include "tokenizer_internal.h"

#define FM_TOK_PATTERN_O200K                                                                              \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* A JSON string shortened for messages. */
static const char *shown(const char *s, size_t n, char *buf, size_t cap) {
  size_t k = n < cap - 4 ? n : cap - 4;
  memcpy(buf, s, k);
  memcpy(buf + k, n > k ? "..." : "", n > k ? 4 : 1);
  return buf;
}

/* ---- merges -------------------------------------------------------------- */
/* A merge given as its left and right tokens' bytes side by side, s[0..ln)
 * and s[ln..ln+rn) (a length <= 0: that side did not decode): the left, the
 * right and the merged token looked up in the model vocab in that order
 * (id[0..2], -1 from the first one missing on), the merged id tried at *guess
 * first (merges usually create ids in order: a right guess costs no map
 * probe); when all three are there the merge is appended and *guess moves
 * past it. Every loader's merges (vocab.bpe, tokenizer.json's general and
 * direct paths) go through here. */
static bool add_merge_bytes(FmTokenizer *t, const char *s, int64_t ln, int64_t rn, int32_t *guess, int32_t id[3]) {
  id[0] = ln > 0 ? fm__tok_lookup(t, s, (size_t)ln) : -1;
  id[1] = id[0] >= 0 && rn > 0 ? fm__tok_lookup(t, s + ln, (size_t)rn) : -1;
  id[2] = id[1] >= 0 ? fm__tok_lookup_near(t, s, (size_t)(ln + rn), *guess) : -1;
  if (id[2] < 0) return false;
  fm__tok_add_merge(t, id[0], id[1], id[2]);
  *guess = id[2] + 1;
  return true;
}

/* ---- GPT-2: encoder.json + vocab.bpe ------------------------------------ */
/* vocab.bpe's merge lines "a b" (HF's GPT2 loader and encoder.py read them
 * the same way: an optional "#version" first line, then one merge a line). */
static int load_merges_file(FmTokenizer *t, const char *path, FILE *err) {
  char *text;
  size_t len;
  if (fm_read_file(path, &text, &len)) {
    fm_say(err, "a GPT-2 tokenizer directory holds encoder.json and vocab.bpe", "%s: cannot read: %s", path,
        strerror(errno));
    return FM_EIO;
  }
  int rc = 0;
  char *p = text, *end = text + len;
  int64_t lines = 0; /* non-empty ones: a file of blank lines must not reserve for each (from review) */
  for (const char *q = text; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++) lines += q > text && q[-1] != '\n';
  fm__tok_reserve(t, 0, 0, 0, lines + 1);
  /* left and right decoded side by side: buf[0..nl) + buf[nl..nl+nr) is
   * the merged token's bytes (decoding never lengthens) */
  char *buf = fm_xmalloc(len + 1);
  int32_t guess = 256; /* merged ids usually follow the 256 bytes in merge order */
  for (int64_t line = 1; p < end && !rc; line++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *e = nl ? nl : end;
    size_t n = (size_t)(e - p);
    if (n && p[n - 1] == '\r') n--;
    if (!(line == 1 && n >= 8 && !memcmp(p, "#version", 8)) && n > 0) {
      char *sp = memchr(p, ' ', n);
      if (!sp || sp == p || sp == p + n - 1 || memchr(sp + 1, ' ', (size_t)(p + n - sp - 1))) {
        fm_say(err, "each line of vocab.bpe is two tokens separated by one space", "%s line %lld: not a merge: '%.*s'",
            path, (long long)line, (int)(n > 60 ? 60 : n), p);
        rc = FM_EFORMAT;
        break;
      }
      int64_t nl_ = fm__tok_bytelevel_decode(p, (size_t)(sp - p), buf);
      int64_t nr_ = nl_ > 0 ? fm__tok_bytelevel_decode(sp + 1, (size_t)(p + n - sp - 1), buf + nl_) : -1;
      int32_t id[3];
      if (!add_merge_bytes(t, buf, nl_, nr_, &guess, id)) {
        fm_say(err, "vocab.bpe and encoder.json must come from the same tokenizer",
            "%s line %lld: merge '%.*s': %s is not in encoder.json", path, (long long)line, (int)n, p,
            id[0] < 0 ? "the left token" : id[1] < 0 ? "the right token" : "the merged token");
        rc = FM_EFORMAT;
        break;
      }
    }
    p = nl ? nl + 1 : end;
  }
  free(buf), free(text);
  return rc;
}

/* Ids index dense tables: an id far beyond the number of tokens a file
 * defines (a typo, or a damaged file) would allocate gigabytes. Holes are
 * allowed (tiktoken's specials sit past gaps), up to this many. */
enum { ID_SLACK = 1024 };
static int id_too_big(int64_t id, int64_t entries, FILE *err, const char *file, const char *where, const char *what) {
  if (id < entries + ID_SLACK) return 0;
  fm_say(err, "a vocabulary's ids are dense: 0 .. (number of tokens - 1), with few holes",
      "%s: %s: %s %lld is beyond the %lld tokens the file defines (at most %lld here)", file, where, what,
      (long long)id, (long long)entries, (long long)(entries + ID_SLACK - 1));
  return 1;
}

static int parse_json_text(const char *path, const char *text, size_t len, FmJsonDoc *doc, FILE *err) {
  FmJsonError je;
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) { /* the parser would say 'bad number' at 1:1 */
    fm_say(err, "remove the BOM, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE",
           "%s: starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow (RFC 8259, 8.1)", path);
    return FM_EFORMAT;
  }
  if (fm_json_parse(doc, text, len, 0, &je)) {
    fm_say(err, "the file must be strict JSON (RFC 8259)", "%s:%d:%d: %s", path, je.line, je.col, je.msg);
    return FM_EFORMAT;
  }
  return 0;
}

/* vocab: {"ByteLevel token": id, ...}. added: content of added tokens, whose
 * vocab entries (if any) are kept as raw text. */
static int load_vocab(FmTokenizer *t, const FmJson *v, const char *file, const char *where, int64_t entries,
                      FILE *err) {
  char sb[80];
  if (!v || v->type != FM_JSON_OBJ) {
    fm_say(err, NULL, "%s: %s must be an object of token -> id", file, where);
    return FM_EFORMAT;
  }
  size_t cap = 64, key_bytes = 0;
  for (int64_t i = 0; i < v->n; i++) key_bytes += v->keylens[i] + 1; /* decoding never lengthens */
  fm__tok_reserve(t, v->n, v->n, t->pool_len + key_bytes, 0);
  char *buf = fm_xmalloc(cap);
  int rc = 0;
  for (int64_t i = 0; i < v->n && !rc; i++) {
    const char *k = v->keys[i];
    size_t kn = v->keylens[i];
    const FmJson *id = &v->items[i];
    if (id->type != FM_JSON_NUM || !id->is_int || id->i < 0 || id->i >= INT32_MAX) {
      fm_say(err, NULL, "%s: %s[\"%s\"]: the id must be an integer in [0, 2^31-1)", file, where, shown(k, kn, sb, sizeof sb));
      rc = FM_EFORMAT;
      break;
    }
    if (id_too_big(id->i, entries, err, file, where, "id")) {
      rc = FM_EFORMAT;
      break;
    }
    if (kn > cap) cap = kn * 2, buf = fm_xrealloc(buf, cap);
    int64_t nb = fm__tok_bytelevel_decode(k, kn, buf);
    if (nb <= 0) {
      /* Not ByteLevel text: acceptable only for an added token's own entry. */
      int32_t want = (int32_t)id->i;
      size_t an;
      const char *ab = fm_tok_token_bytes(t, want, &an);
      if (ab && (t->flags[want] & FM__TOK_ADDED) && an == kn && !memcmp(ab, k, kn)) continue;
      fm_say(err, "fmhpc supports byte-level BPE: every vocabulary token is GPT-2 ByteLevel text",
          "%s: %s[\"%s\"]: not a ByteLevel token", file, where, shown(k, kn, sb, sizeof sb));
      rc = FM_EFORMAT;
      break;
    }
    int32_t other = -1;
    if (fm__tok_set(t, (int32_t)id->i, buf, (size_t)nb, FM__TOK_MODEL, &other)) {
      fm_say(err, NULL, "%s: %s[\"%s\"]: id %lld %s", file, where, shown(k, kn, sb, sizeof sb), (long long)id->i,
          other == (int32_t)id->i ? "is already another token's id" : "repeats a token already in the vocabulary");
      rc = FM_EFORMAT;
    }
  }
  free(buf);
  return rc;
}

/* ---- encoder.json without the JSON tree -------------------------------- */
/* encoder.json is one flat object {"ByteLevel token": id, ...}. Building the
 * general JSON tree for it (50K nodes, key copies, strtod) costs more than
 * the rest of the load, so plain files are read by this direct scanner.
 * It accepts a strict subset of what fm_json_parse accepts: whitespace, one
 * object, string keys whose characters (raw UTF-8 of at most two bytes, or
 * escapes other than surrogates) are all ByteLevel characters, decimal ids
 * 0 .. 2^31-2 with no sign, fraction or exponent, and every entry passing
 * the checks load_vocab makes, in the same order with the same calls. On
 * anything else it returns 0 and the caller rebuilds from scratch through
 * fm_json_parse + load_vocab, so every malformed file still gets exactly
 * the message it got before. */
typedef struct FlatEntry {
  uint32_t off, len; /* decoded bytes in the scratch buffer */
  int32_t id;
} FlatEntry;

static const char *skip_json_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static int hex_digit(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One character of a key or merge string at q (not its closing quote): its
 * code point (plain ASCII, two-byte UTF-8 or a JSON escape) in *cp; returns
 * the position after it, or NULL where the scanners give up (to the general
 * JSON path): longer UTF-8 is never a ByteLevel character. */
static const uint8_t *flat_cp(const uint8_t *q, const uint8_t *e, uint32_t *cp) {
  uint32_t c = *q;
  if (c < 0x20) return NULL;
  if (c < 0x80 && c != '\\') {
    *cp = c;
    return q + 1;
  }
  if (c >= 0xC2 && c <= 0xDF) { /* two-byte UTF-8 (C0, C1 would be overlong) */
    if (q + 1 >= e || (q[1] & 0xC0) != 0x80) return NULL;
    *cp = (c & 0x1F) << 6 | (q[1] & 0x3F);
    return q + 2;
  }
  if (c != '\\' || q + 1 >= e) return NULL;
  switch (q[1]) {
    case '"': *cp = '"'; break;
    case '\\': *cp = '\\'; break;
    case '/': *cp = '/'; break;
    case 'b': *cp = '\b'; break;
    case 'f': *cp = '\f'; break;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'u': {
      if (e - q < 6) return NULL;
      c = 0;
      for (int i = 2; i < 6; i++) {
        int d = hex_digit(q[i]);
        if (d < 0) return NULL;
        c = c << 4 | (uint32_t)d;
      }
      *cp = c;
      return q + 6;
    }
    default: return NULL;
  }
  return q + 2;
}

/* A key at p (its opening quote), decoded from ByteLevel into out; returns
 * the position after the closing quote, or NULL where the scanner gives up. */
static const char *flat_key(const char *p, const char *end, char *out, size_t *outlen) {
  const uint8_t *q = (const uint8_t *)p + 1, *e = (const uint8_t *)end;
  size_t n = 0;
  for (;;) {
    if (q >= e) return NULL;
    if (*q == '"') break;
    uint32_t cp;
    if (!(q = flat_cp(q, e, &cp))) return NULL;
    int b = fm__tok_cp_to_byte(cp); /* control characters, surrogates and cp >= 0x800 give -1 */
    if (b < 0) return NULL;
    out[n++] = (char)b;
  }
  *outlen = n;
  return (const char *)q + 1;
}

/* encoder.json's (or model.vocab's) entries, decoded: phase one, before any
 * table is touched, so that the entry count is known (load_vocab's id range
 * check uses it). */
typedef struct FlatVocab {
  char *bytes;
  FlatEntry *ent;
  size_t n, used;
} FlatVocab;

static void flat_vocab_free(FlatVocab *fv) {
  free(fv->ent), free(fv->bytes);
  memset(fv, 0, sizeof *fv);
}

/* The object that is all of text[0..len) (whitespace around it allowed);
 * 1: the plain form, entries in fv (free with flat_vocab_free either way). */
static int flat_vocab_scan(const char *text, size_t len, FlatVocab *fv) {
  memset(fv, 0, sizeof *fv);
  const char *p = skip_json_ws(text, text + len), *end = text + len;
  if (p >= end || *p != '{') return 0;
  p = skip_json_ws(p + 1, end);
  fv->bytes = fm_xmalloc(len + 1);
  size_t cap = 0;
  int ok = 0;
  while (p < end && *p == '"') {
    size_t kn;
    const char *q = flat_key(p, end, fv->bytes + fv->used, &kn);
    if (!q || kn == 0) break;
    q = skip_json_ws(q, end);
    if (q >= end || *q != ':') break;
    q = skip_json_ws(q + 1, end);
    int64_t id = 0;
    const char *d = q;
    while (q < end && *q >= '0' && *q <= '9' && q - d < 11) id = id * 10 + (*q++ - '0');
    if (q == d || q - d > 10 || (*d == '0' && q - d > 1) || id >= INT32_MAX) break;
    if (q < end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9'))) break;
    if (fv->n == cap) {
      cap = cap ? 2 * cap : 65536;
      fv->ent = fm_xrealloc(fv->ent, cap * sizeof *fv->ent);
    }
    fv->ent[fv->n++] = (FlatEntry){(uint32_t)fv->used, (uint32_t)kn, (int32_t)id};
    fv->used += kn;
    p = skip_json_ws(q, end);
    if (p < end && *p == ',') {
      p = skip_json_ws(p + 1, end);
      if (p >= end || *p != '"') break;
      continue;
    }
    if (p < end && *p == '}') ok = skip_json_ws(p + 1, end) == end;
    break;
  }
  return ok && fv->n > 0 && fv->used < UINT32_MAX;
}

/* Phase two: load_vocab's checks, in its order (the id's range against
 * entries, then fm__tok_set); 0 where one fails (t must then be dropped). */
static int flat_vocab_apply(FmTokenizer *t, const FlatVocab *fv, int64_t entries) {
  fm__tok_reserve(t, (int64_t)fv->n, (int64_t)fv->n, t->pool_len + fv->used + fv->n, 0);
  for (size_t i = 0; i < fv->n; i++)
    if (fv->ent[i].id >= entries + ID_SLACK ||
        fm__tok_set(t, fv->ent[i].id, fv->bytes + fv->ent[i].off, fv->ent[i].len, FM__TOK_MODEL, NULL) != 0)
      return 0;
  return 1;
}

static int flat_vocab(FmTokenizer *t, const char *text, size_t len) {
  FlatVocab fv;
  int ok = flat_vocab_scan(text, len, &fv) && flat_vocab_apply(t, &fv, (int64_t)fv.n);
  flat_vocab_free(&fv);
  return ok;
}

static int load_gpt2_dir(FmTokenizer **out, const char *dir, FILE *err) {
  char enc[4096], bpe[4096];
  snprintf(enc, sizeof enc, "%s/encoder.json", dir);
  snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
  char *text;
  size_t len;
  if (fm_read_file(enc, &text, &len)) {
    fm_say(err, NULL, "%s: cannot read: %s", enc, strerror(errno));
    return FM_EIO;
  }
  FmTokenizer *t = fm__tok_new(FM__TOK_MERGES);
  int rc = 0;
  if (!flat_vocab(t, text, len)) { /* the general path, with its messages */
    fm_tok_free(t);
    t = NULL;
    FmJsonDoc doc;
    rc = parse_json_text(enc, text, len, &doc, err);
    if (!rc) {
      t = fm__tok_new(FM__TOK_MERGES);
      rc = load_vocab(t, &doc.root, enc, "encoder.json", doc.root.type == FM_JSON_OBJ ? doc.root.n : 0, err);
      fm_json_free(&doc);
    }
  }
  free(text);
  if (!rc) rc = load_merges_file(t, bpe, err);
  if (!rc) {
    /* GPT-2's end of text: a special token (never from plain text). */
    int32_t eot = fm__tok_lookup(t, "<|endoftext|>", 13);
    if (eot >= 0) fm__tok_set(t, eot, "<|endoftext|>", 13, FM__TOK_ADDED | FM__TOK_SPECIAL, NULL);
    fm__tok_set_pattern(t, FM_TOK_PATTERN_GPT2);
    /* The reference for these files is gpt-3-encoder, whose \s is
     * JavaScript's: a BOM is whitespace (OpenAI's encoder.py and tiktoken's
     * r50k_base differ there; see tokenizer_internal.h). */
    t->ws = FM__TOK_WS_JS;
    rc = fm__tok_finish(t, dir, err); /* first: a missing byte token is the more basic fault */
    /* Every token of encoder.json past the 256 bytes (and <|endoftext|>) is made by one merge: fewer merges
     * is a vocab.bpe cut short or emptied (it encoded with the merges it had, byte by byte when none). */
    int64_t ntok = 0;
    for (int64_t i = 0; i < t->n_ids; i++) ntok += t->len[i] != UINT32_MAX;
    const int64_t want = ntok - 256 - (eot >= 0);
    if (!rc && t->n_merges != want) {
      fm_say(err, "vocab.bpe and encoder.json must come whole from the same tokenizer",
             "%s: %lld merges, but encoder.json's %lld tokens need %lld (one for each token past the 256 bytes%s): "
             "the file is cut short, empty or from another tokenizer",
             bpe, (long long)t->n_merges, (long long)ntok, (long long)want, eot >= 0 ? " and <|endoftext|>" : "");
      rc = FM_EFORMAT;
    }
  }
  if (rc) fm_tok_free(t);
  else *out = t;
  return rc;
}

/* ---- tiktoken rank files ------------------------------------------------ */
static int b64val(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Standard base64 with padding; returns the byte count or -1. */
static int64_t b64decode(const char *s, size_t n, char *out) {
  if (n % 4) return -1;
  int64_t k = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int j = 0; j < 4; j++) {
      if (s[i + j] == '=' && i + 4 == n && j >= 2) v[j] = 0, pad++;
      else if (pad || (v[j] = b64val((unsigned char)s[i + j])) < 0) return -1;
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[k++] = (char)(w >> 16);
    if (pad < 2) out[k++] = (char)(w >> 8);
    if (pad < 1) out[k++] = (char)w;
  }
  return k;
}

/* A tiktoken file holds only the ranks; the pattern and the special tokens
 * are tiktoken_ext/openai_public.py's, chosen by the file's name. */
typedef struct TiktokenSpec {
  const char *name;
  int32_t ranks; /* lines of the published file (tiktoken's explicit_n_vocab less the specials) */
  const char *pattern;
  struct {
    const char *text;
    int32_t id;
  } special[8];
} TiktokenSpec;
static const TiktokenSpec tiktoken_specs[] = {
    {"r50k_base", 50256, FM_TOK_PATTERN_GPT2, {{"<|endoftext|>", 50256}}},
    {"p50k_base", 50280, FM_TOK_PATTERN_GPT2, {{"<|endoftext|>", 50256}}},
    {"cl100k_base",
     100256,
     FM_TOK_PATTERN_CL100K,
     {{"<|endoftext|>", 100257},
      {"<|fim_prefix|>", 100258},
      {"<|fim_middle|>", 100259},
      {"<|fim_suffix|>", 100260},
      {"<|endofprompt|>", 100276}}},
    {"o200k_base", 199998, FM_TOK_PATTERN_O200K, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
};

static int load_tiktoken(FmTokenizer **out, const char *path, const char *text, size_t len, FILE *err) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const TiktokenSpec *spec = NULL;
  for (size_t i = 0; i < sizeof tiktoken_specs / sizeof *tiktoken_specs; i++)
    if (strstr(base, tiktoken_specs[i].name)) spec = &tiktoken_specs[i];
  if (!spec) {
    fm_say(err,
        "name the file after its encoding (its name must contain r50k_base, p50k_base, cl100k_base or o200k_base), or "
        "convert it to a tokenizer.json that states its pre-tokenizer",
        "%s: a tiktoken rank file does not say its pre-tokenizer pattern or special tokens, and the name '%s' "
        "is not a known encoding",
        path, base);
    return FM_EFORMAT;
  }
  int64_t entries = 0, filled = 0; /* lines (the ranks' bound), and the non-empty ones (what is reserved) */
  char where[32];
  for (size_t i = 0; i < len; i++) {
    entries += text[i] == '\n';
    filled += text[i] == '\n' && i > 0 && text[i - 1] != '\n';
  }
  entries += len > 0 && text[len - 1] != '\n';
  filled += len > 0 && text[len - 1] != '\n';
  FmTokenizer *t = fm__tok_new(FM__TOK_RANKS);
  t->ignore_merges = true; /* tiktoken: a piece in the encoder is one token */
  /* base64 decodes shorter; blank lines reserve nothing (a file of them must not allocate gigabytes: from review) */
  fm__tok_reserve(t, filled, filled, len + (size_t)filled, 0);
  char *buf = fm_xmalloc(len + 1);
  int rc = 0;
  const char *p = text, *end = text + len;
  for (int64_t line = 1; p < end && !rc; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    if (e > p) {
      const char *sp = memchr(p, ' ', (size_t)(e - p));
      char *rend = NULL;
      long long rank = sp ? strtoll(sp + 1, &rend, 10) : -1;
      int64_t nb = sp ? b64decode(p, (size_t)(sp - p), buf) : -1;
      int32_t other = -1;
      if (!sp || nb <= 0 || rend != e || rank < 0 || rank >= INT32_MAX) {
        fm_say(err, "each line of a tiktoken file is: base64 token, one space, decimal rank", "%s line %lld: malformed",
            path, (long long)line);
        rc = FM_EFORMAT;
      } else if (rank >= entries + ID_SLACK) {
        snprintf(where, sizeof where, "line %lld", (long long)line);
        rc = id_too_big(rank, entries, err, path, where, "rank") ? FM_EFORMAT : 0;
      } else if (fm__tok_set(t, (int32_t)rank, buf, (size_t)nb, FM__TOK_MODEL, &other)) {
        fm_say(err, NULL, "%s line %lld: rank %lld %s", path, (long long)line, rank,
            other == (int32_t)rank ? "appears twice" : "repeats a token of another rank");
        rc = FM_EFORMAT;
      }
    }
    p = nl ? nl + 1 : end;
  }
  free(buf);
  for (int i = 0; !rc && i < 8 && spec->special[i].text; i++) {
    const char *s = spec->special[i].text;
    if (fm__tok_set(t, spec->special[i].id, s, strlen(s), FM__TOK_ADDED | FM__TOK_SPECIAL, NULL)) {
      fm_say(err, NULL, "%s: rank %d is a token of the file, but %s needs it for %s", path, spec->special[i].id,
          spec->name, s);
      rc = FM_EFORMAT;
    }
  }
  /* a file cut short at a line's end (an interrupted copy) parses: its rank count is what shows it; with fewer
   * ranks every text past them would encode to other ids than the encoding's */
  if (!rc && filled != spec->ranks && !getenv("FMHPC_TOK_TEST_ANY_RANK_COUNT")) { /* the fuzzer's small files */
    fm_say(err, "copy the file again, or name it after the encoding it holds",
        "%s: %lld ranks, but %s has %d (the file is cut short, or holds another encoding)", path, (long long)filled,
        spec->name, spec->ranks);
    rc = FM_EFORMAT;
  }
  if (!rc) {
    fm__tok_set_pattern(t, spec->pattern);
    rc = fm__tok_finish(t, path, err);
  }
  if (rc) fm_tok_free(t);
  else *out = t;
  return rc;
}

/* ---- Hugging Face tokenizer.json ---------------------------------------- */
static bool is_null(const FmJson *v) { return !v || v->type == FM_JSON_NULL; }
static bool is_str(const FmJson *v, const char *s) {
  return v && v->type == FM_JSON_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len);
}
static bool bool_or(const FmJson *v, bool dflt) { return v && v->type == FM_JSON_BOOL ? v->b : dflt; }

static int unsupported(FILE *err, const char *file, const char *where, const FmJson *type, const char *why) {
  char sb[80];
  fm_say(err,
      "fmhpc reads byte-level BPE tokenizer.json files (GPT-2, Llama 3, tiktoken conversions, its own): "
      "ByteLevel or Split+ByteLevel pre-tokenizers, no normalizer",
      "%s: %s%s%s%s: %s", file, where, type && type->type == FM_JSON_STR ? " type '" : "",
      type && type->type == FM_JSON_STR ? shown(type->s, type->len, sb, sizeof sb) : "",
      type && type->type == FM_JSON_STR ? "'" : "", why);
  return FM_EFORMAT;
}

/* Pre-tokenizer: ByteLevel, or Sequence[Split(regex, Isolated), ByteLevel(use_regex false)]. */
static int load_pretok(FmTokenizer *t, const FmJson *pt, const char *file, FILE *err) {
  if (is_null(pt)) return unsupported(err, file, "pre_tokenizer", NULL, "missing: a byte-level BPE needs ByteLevel");
  const FmJson *type = fm_json_get(pt, "type");
  const FmJson *split = NULL, *bl = NULL;
  if (is_str(type, "ByteLevel")) {
    bl = pt;
  } else if (is_str(type, "Sequence")) {
    const FmJson *seq = fm_json_get(pt, "pretokenizers");
    if (!seq || seq->type != FM_JSON_ARR || seq->n < 1 || seq->n > 2)
      return unsupported(err, file, "pre_tokenizer.pretokenizers", NULL, "expected [Split, ByteLevel] or [ByteLevel]");
    const FmJson *last = &seq->items[seq->n - 1];
    if (!is_str(fm_json_get(last, "type"), "ByteLevel"))
      return unsupported(err, file, "pre_tokenizer.pretokenizers[last]", fm_json_get(last, "type"),
                         "the last pre-tokenizer must be ByteLevel");
    bl = last;
    if (seq->n == 2) {
      split = &seq->items[0];
      if (!is_str(fm_json_get(split, "type"), "Split"))
        return unsupported(err, file, "pre_tokenizer.pretokenizers[0]", fm_json_get(split, "type"),
                           "only Split may come before ByteLevel");
    }
  } else {
    return unsupported(err, file, "pre_tokenizer", type, "not supported");
  }
  t->add_prefix_space = bool_or(fm_json_get(bl, "add_prefix_space"), false);
  bool use_regex = bool_or(fm_json_get(bl, "use_regex"), true);
  if (split) {
    if (use_regex)
      return unsupported(err, file, "pre_tokenizer.pretokenizers[1].use_regex", NULL,
                         "true after a Split (two regex passes) is not supported");
    const FmJson *beh = fm_json_get(split, "behavior");
    if (!is_str(beh, "Isolated"))
      return unsupported(err, file, "pre_tokenizer.pretokenizers[0].behavior", NULL, "only \"Isolated\" is supported");
    if (bool_or(fm_json_get(split, "invert"), false))
      return unsupported(err, file, "pre_tokenizer.pretokenizers[0].invert", NULL, "only false is supported");
    const FmJson *pat = fm_json_get(split, "pattern");
    const FmJson *re = pat ? fm_json_get(pat, "Regex") : NULL, *lit = pat ? fm_json_get(pat, "String") : NULL;
    if (re && re->type == FM_JSON_STR) {
      if (strlen(re->s) != re->len)
        return unsupported(err, file, "pre_tokenizer.pretokenizers[0].pattern.Regex", NULL, "holds a NUL");
      fm__tok_set_pattern(t, re->s);
    } else if (lit && lit->type == FM_JSON_STR && lit->len > 0 && strlen(lit->s) == lit->len) {
      FmStr q; /* a literal: quote it for PCRE2 */
      fm_str_init(&q);
      fm_str_cat(&q, "\\Q");
      fm_str_cat(&q, lit->s);
      fm_str_cat(&q, "\\E");
      fm__tok_set_pattern(t, q.s);
      fm_str_free(&q);
    } else {
      return unsupported(err, file, "pre_tokenizer.pretokenizers[0].pattern", NULL,
                         "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    }
  } else {
    fm__tok_set_pattern(t, use_regex ? FM_TOK_PATTERN_GPT2 : NULL); /* HF ByteLevel's regex is GPT-2's */
  }
  return 0;
}

static int check_model(const FmJson *m, const char *file, FILE *err) {
  if (!m || m->type != FM_JSON_OBJ) return unsupported(err, file, "model", NULL, "missing");
  const FmJson *type = fm_json_get(m, "type");
  if (type && !is_str(type, "BPE")) return unsupported(err, file, "model", type, "only BPE models are supported");
  const FmJson *d = fm_json_get(m, "dropout");
  if (!is_null(d) && !(d->type == FM_JSON_NUM && d->num == 0.0))
    return unsupported(err, file, "model.dropout", NULL, "BPE dropout is not supported (it is random)");
  const char *empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const FmJson *v = fm_json_get(m, empty_keys[i]);
    if (!is_null(v) && !(v->type == FM_JSON_STR && v->len == 0)) {
      char w[64];
      snprintf(w, sizeof w, "model.%s", empty_keys[i]);
      return unsupported(err, file, w, NULL, "must be null in a byte-level BPE");
    }
  }
  if (bool_or(fm_json_get(m, "byte_fallback"), false))
    return unsupported(err, file, "model.byte_fallback", NULL, "true (SentencePiece-style <0xNN> tokens) is not supported");
  return 0;
}

static int load_added(FmTokenizer *t, const FmJson *a, const char *file, int64_t entries, FILE *err) {
  if (is_null(a)) return 0;
  if (a->type != FM_JSON_ARR) return unsupported(err, file, "added_tokens", NULL, "must be an array");
  for (int64_t i = 0; i < a->n; i++) {
    const FmJson *e = &a->items[i], *id = fm_json_get(e, "id"), *c = fm_json_get(e, "content");
    char w[96];
    snprintf(w, sizeof w, "added_tokens[%lld]", (long long)i);
    if (!id || !id->is_int || id->i < 0 || id->i >= INT32_MAX || !c || c->type != FM_JSON_STR || c->len == 0)
      return unsupported(err, file, w, NULL, "needs an integer id and a non-empty content string");
    if (id_too_big(id->i, entries, err, file, w, "id")) return FM_EFORMAT;
    const char *flags[] = {"lstrip", "rstrip", "single_word"};
    for (int k = 0; k < 3; k++)
      if (bool_or(fm_json_get(e, flags[k]), false)) {
        snprintf(w, sizeof w, "added_tokens[%lld].%s", (long long)i, flags[k]);
        return unsupported(err, file, w, NULL, "true is not supported (fmhpc matches added tokens exactly)");
      }
    int fl = FM__TOK_ADDED | (bool_or(fm_json_get(e, "special"), false) ? FM__TOK_SPECIAL : 0);
    if (fm__tok_set(t, (int32_t)id->i, c->s, c->len, fl, NULL)) {
      snprintf(w, sizeof w, "added_tokens[%lld].id", (long long)i);
      return unsupported(err, file, w, NULL, "is already used by another added token");
    }
  }
  return 0;
}

static int load_merges_json(FmTokenizer *t, const FmJson *ms, const char *file, FILE *err) {
  if (!ms || ms->type != FM_JSON_ARR) return unsupported(err, file, "model.merges", NULL, "must be an array");
  fm__tok_reserve(t, 0, 0, 0, ms->n);
  char *buf = NULL; /* left and right decoded side by side, as in load_merges_file */
  size_t cap = 0;
  int32_t guess = 256;
  int rc = 0;
  for (int64_t i = 0; i < ms->n && !rc; i++) {
    const FmJson *e = &ms->items[i];
    const char *ls = NULL, *rs = NULL;
    size_t ln = 0, rn = 0;
    if (e->type == FM_JSON_STR) { /* "a b" (tokenizers < 0.20 and many files) */
      const char *sp = memchr(e->s, ' ', e->len);
      if (sp && !memchr(sp + 1, ' ', e->len - (size_t)(sp - e->s) - 1))
        ls = e->s, ln = (size_t)(sp - e->s), rs = sp + 1, rn = e->len - ln - 1;
    } else if (e->type == FM_JSON_ARR && e->n == 2 && e->items[0].type == FM_JSON_STR &&
               e->items[1].type == FM_JSON_STR) { /* ["a", "b"] (tokenizers >= 0.20) */
      ls = e->items[0].s, ln = e->items[0].len, rs = e->items[1].s, rn = e->items[1].len;
    }
    char w[96]; /* the place, written only for a message */
    if (!ls || !ln || !rn) {
      snprintf(w, sizeof w, "model.merges[%lld]", (long long)i);
      rc = unsupported(err, file, w, NULL, "a merge is \"left right\" or [\"left\", \"right\"]");
      break;
    }
    if (ln + rn > cap) cap = 2 * (ln + rn), buf = fm_xrealloc(buf, cap);
    int64_t nl = fm__tok_bytelevel_decode(ls, ln, buf);
    int64_t nr = nl > 0 ? fm__tok_bytelevel_decode(rs, rn, buf + nl) : -1;
    int32_t id[3];
    if (!add_merge_bytes(t, buf, nl, nr, &guess, id)) {
      snprintf(w, sizeof w, "model.merges[%lld]", (long long)i);
      rc = unsupported(err, file, w, NULL,
                       id[0] < 0   ? "the left token is not in model.vocab"
                       : id[1] < 0 ? "the right token is not in model.vocab"
                                   : "the merged token is not in model.vocab (HF: MergeTokenOutOfVocabulary)");
    }
  }
  free(buf);
  return rc;
}

/* ---- tokenizer.json's vocab and merges without the JSON tree ------------ */
/* model.vocab and model.merges are nearly all of a tokenizer.json (the
 * Llama 3 file: 128K entries, 280K merges, millions of JSON nodes). When the
 * file is plain, the rest of the document is parsed by fm_json_parse with
 * those two values written as {} and [], and they are read by the direct
 * scanners (flat_vocab_scan, flat_merges_scan). That is the same document:
 * up to the two values every byte is the same, a scanner accepts only a
 * complete value, and a JSON value ends where its own text says. Anything
 * else, and any check that fails, drops the result and the file is read
 * again through the general path, which gives every message. */

/* The end of the string starting at p (its opening quote), or NULL. Sets
 * *esc when it holds a backslash. */
static const char *skip_json_str(const char *p, const char *end, bool *esc) {
  for (p++; p < end; p++) {
    if (*p == '\\') {
      *esc = true;
      p++;
    } else if (*p == '"') {
      return p + 1;
    }
  }
  return NULL;
}

/* The end of the value starting at p: strings and brackets are followed
 * (string-aware depth), anything else runs to a delimiter. Validates
 * nothing: fm_json_parse or a scanner checks the same text afterwards. */
static const char *skip_json_value(const char *p, const char *end) {
  bool esc = false;
  if (p >= end) return NULL;
  if (*p == '"') return skip_json_str(p, end, &esc);
  if (*p == '{' || *p == '[') {
    int64_t depth = 0;
    while (p < end) {
      if (*p == '"') {
        if (!(p = skip_json_str(p, end, &esc))) return NULL;
        continue;
      }
      if (*p == '{' || *p == '[') depth++;
      else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
      p++;
    }
    return NULL;
  }
  while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
  return p;
}

/* In the object at p, the value of the first key equal to `a` and of the
 * first equal to `b` (b may be NULL): [start, end) each, or start NULL when
 * absent. 0 when the object's form is not followed (or a key has an escape:
 * the keys are compared as written). */
static int find_members(const char *p, const char *end, const char *a, const char *b, const char *span[2][2]) {
  span[0][0] = span[0][1] = span[1][0] = span[1][1] = NULL;
  p = skip_json_ws(p, end);
  if (p >= end || *p != '{') return 0;
  p = skip_json_ws(p + 1, end);
  if (p < end && *p == '}') return 1;
  for (;;) {
    if (p >= end || *p != '"') return 0;
    bool esc = false;
    const char *k = p + 1, *q = skip_json_str(p, end, &esc);
    if (!q || esc) return 0;
    size_t kn = (size_t)(q - 1 - k);
    q = skip_json_ws(q, end);
    if (q >= end || *q != ':') return 0;
    q = skip_json_ws(q + 1, end);
    const char *ve = skip_json_value(q, end);
    if (!ve || ve == q) return 0;
    for (int w = 0; w < 2; w++) {
      const char *name = w ? b : a;
      if (name && !span[w][0] && kn == strlen(name) && !memcmp(k, name, kn)) span[w][0] = q, span[w][1] = ve;
    }
    p = skip_json_ws(ve, end);
    if (p < end && *p == ',') {
      p = skip_json_ws(p + 1, end);
      continue;
    }
    return p < end && *p == '}';
  }
}

/* model.merges, decoded: left and right bytes side by side per merge. */
typedef struct FlatMerges {
  char *bytes;
  uint32_t (*m)[3]; /* offset, left length, right length */
  size_t n;
} FlatMerges;

/* A merge string "left right" at p: the JSON string decoded (escapes,
 * two-byte UTF-8) with ByteLevel, split at its one space. */
static const char *flat_merge_str(const char *p, const char *end, char *out, size_t *ln, size_t *rn) {
  const uint8_t *q = (const uint8_t *)p + 1, *e = (const uint8_t *)end;
  size_t n = 0, split = SIZE_MAX;
  for (;;) {
    if (q >= e) return NULL;
    if (*q == '"') break;
    uint32_t cp;
    if (!(q = flat_cp(q, e, &cp))) return NULL;
    if (cp == ' ') {
      if (split != SIZE_MAX) return NULL;
      split = n;
      continue;
    }
    int b = fm__tok_cp_to_byte(cp);
    if (b < 0) return NULL;
    out[n++] = (char)b;
  }
  if (split == SIZE_MAX) return NULL;
  *ln = split, *rn = n - split;
  return (const char *)q + 1;
}

/* The array that is exactly text[0..len): merges as "a b" strings or
 * ["a", "b"] pairs; 1: the plain form, merges in fm (free either way). */
static int flat_merges_scan(const char *text, size_t len, FlatMerges *fm) {
  memset(fm, 0, sizeof *fm);
  const char *p = text, *end = text + len;
  if (p >= end || *p != '[') return 0;
  p = skip_json_ws(p + 1, end);
  fm->bytes = fm_xmalloc(len + 1);
  size_t cap = 0, used = 0;
  int ok = 0;
  while (p < end && (*p == '"' || *p == '[')) {
    size_t ln = 0, rn = 0;
    if (*p == '"') {
      p = flat_merge_str(p, end, fm->bytes + used, &ln, &rn);
    } else {
      p = skip_json_ws(p + 1, end);
      p = p < end && *p == '"' ? flat_key(p, end, fm->bytes + used, &ln) : NULL;
      p = p ? skip_json_ws(p, end) : NULL;
      p = p && p < end && *p == ',' ? skip_json_ws(p + 1, end) : NULL;
      p = p && p < end && *p == '"' ? flat_key(p, end, fm->bytes + used + ln, &rn) : NULL;
      p = p ? skip_json_ws(p, end) : NULL;
      p = p && p < end && *p == ']' ? p + 1 : NULL;
    }
    if (!p || !ln || !rn) break;
    if (fm->n == cap) {
      cap = cap ? 2 * cap : 65536;
      fm->m = fm_xrealloc(fm->m, cap * sizeof *fm->m);
    }
    fm->m[fm->n][0] = (uint32_t)used, fm->m[fm->n][1] = (uint32_t)ln, fm->m[fm->n][2] = (uint32_t)rn;
    fm->n++;
    used += ln + rn;
    p = skip_json_ws(p, end);
    if (p < end && *p == ',') {
      p = skip_json_ws(p + 1, end);
      if (p >= end || (*p != '"' && *p != '[')) break;
      continue;
    }
    ok = p + 1 == end && *p == ']';
    break;
  }
  return ok && used < UINT32_MAX;
}

/* load_merges_json's lookups and additions, in its order; 0 where a merge
 * is not in the vocab (t must then be dropped). */
static int flat_merges_apply(FmTokenizer *t, const FlatMerges *fm) {
  fm__tok_reserve(t, 0, 0, 0, (int64_t)fm->n);
  int32_t guess = 256, id[3];
  for (size_t i = 0; i < fm->n; i++)
    if (!add_merge_bytes(t, fm->bytes + fm->m[i][0], fm->m[i][1], fm->m[i][2], &guess, id)) return 0;
  return 1;
}

static void flat_merges_free(FlatMerges *fm) {
  free(fm->m), free(fm->bytes);
  memset(fm, 0, sizeof *fm);
}

/* Everything load_tokenizer_json reads from the document, in its order.
 * fv, fm: model.vocab and model.merges from the scanners (root's are then
 * {} and []), or NULL: from root. */
static int tokenizer_json_build(FmTokenizer *t, const FmJson *root, const char *path, FILE *err, const FlatVocab *fv,
                                const FlatMerges *fm) {
  int rc = 0;
  if (root->type != FM_JSON_OBJ) rc = unsupported(err, path, "(root)", NULL, "must be an object");
  const FmJson *norm = rc ? NULL : fm_json_get(root, "normalizer");
  if (!rc && !is_null(norm))
    rc = unsupported(err, path, "normalizer", fm_json_get(norm, "type"),
                     "not supported: fmhpc encodes the bytes as given (no normalization)");
  const FmJson *m = rc ? NULL : fm_json_get(root, "model");
  if (!rc) rc = check_model(m, path, err);
  if (!rc) rc = load_pretok(t, fm_json_get(root, "pre_tokenizer"), path, err);
  const FmJson *dec = rc ? NULL : fm_json_get(root, "decoder");
  if (!rc && !is_null(dec) && !is_str(fm_json_get(dec, "type"), "ByteLevel"))
    rc = unsupported(err, path, "decoder", fm_json_get(dec, "type"), "only ByteLevel decodes byte-level BPE");
  /* Post-processors only add special tokens around a sequence; fmhpc's
   * encode never adds them (prep places EOS itself), so these are ignored. */
  const FmJson *pp = rc ? NULL : fm_json_get(root, "post_processor");
  if (!rc && !is_null(pp)) {
    const FmJson *ty = fm_json_get(pp, "type");
    if (!is_str(ty, "ByteLevel") && !is_str(ty, "TemplateProcessing") && !is_str(ty, "RobertaProcessing") &&
        !is_str(ty, "BertProcessing") && !is_str(ty, "Sequence"))
      rc = unsupported(err, path, "post_processor", ty, "not supported");
  }
  const FmJson *added = rc ? NULL : fm_json_get(root, "added_tokens"), *vocab = rc ? NULL : fm_json_get(m, "vocab");
  int64_t entries = (added && added->type == FM_JSON_ARR ? added->n : 0) +
                    (fv ? (int64_t)fv->n : vocab && vocab->type == FM_JSON_OBJ ? vocab->n : 0);
  if (!rc) rc = load_added(t, added, path, entries, err);
  if (!rc) rc = fv ? (flat_vocab_apply(t, fv, entries) ? 0 : FM_EFORMAT) : load_vocab(t, vocab, path, "model.vocab", entries, err);
  if (!rc) {
    t->ignore_merges = bool_or(fm_json_get(m, "ignore_merges"), false);
    rc = fm ? (flat_merges_apply(t, fm) ? 0 : FM_EFORMAT) : load_merges_json(t, fm_json_get(m, "merges"), path, err);
  }
  return rc;
}

/* The direct path: a tokenizer built up to fm__tok_finish, or NULL. */
static FmTokenizer *tokenizer_json_flat(const char *path, const char *text, size_t len) {
  const char *end = text + len, *root[2][2], *model[2][2];
  if (!find_members(text, end, "model", NULL, root) || !root[0][0] ||
      !find_members(root[0][0], root[0][1], "vocab", "merges", model) || !model[0][0] || !model[1][0])
    return NULL;
  FlatVocab fv;
  FlatMerges fm;
  memset(&fm, 0, sizeof fm);
  int ok = flat_vocab_scan(model[0][0], (size_t)(model[0][1] - model[0][0]), &fv) &&
           flat_merges_scan(model[1][0], (size_t)(model[1][1] - model[1][0]), &fm);
  FmTokenizer *t = NULL;
  if (ok) { /* the document with the two values written as {} and [] */
    int second = model[1][0] < model[0][0];
    const char *cut[2][2] = {{model[second][0], model[second][1]}, {model[!second][0], model[!second][1]}};
    const char *put[2] = {second ? "[]" : "{}", second ? "{}" : "[]"};
    size_t n0 = (size_t)(cut[0][0] - text), n1 = (size_t)(cut[1][0] - cut[0][1]), n2 = (size_t)(end - cut[1][1]);
    char *small = fm_xmalloc(n0 + n1 + n2 + 5);
    memcpy(small, text, n0);
    memcpy(small + n0, put[0], 2);
    memcpy(small + n0 + 2, cut[0][1], n1);
    memcpy(small + n0 + 2 + n1, put[1], 2);
    memcpy(small + n0 + 4 + n1, cut[1][1], n2);
    FmJsonDoc doc;
    if (fm_json_parse(&doc, small, n0 + n1 + n2 + 4, 0, NULL) == 0) {
      t = fm__tok_new(FM__TOK_MERGES);
      if (tokenizer_json_build(t, &doc.root, path, NULL, &fv, &fm)) fm_tok_free(t), t = NULL;
      fm_json_free(&doc);
    }
    free(small);
  }
  flat_vocab_free(&fv);
  flat_merges_free(&fm);
  return t;
}

static int load_tokenizer_json(FmTokenizer **out, const char *path, const char *text, size_t len, FILE *err) {
  int rc = 0;
  FmTokenizer *t = tokenizer_json_flat(path, text, len);
  if (!t) { /* the general path, with its messages */
    FmJsonDoc doc;
    rc = parse_json_text(path, text, len, &doc, err);
    if (rc) return rc;
    t = fm__tok_new(FM__TOK_MERGES);
    rc = tokenizer_json_build(t, &doc.root, path, err, NULL, NULL);
    fm_json_free(&doc);
  }
  if (!rc) rc = fm__tok_finish(t, path, err);
  if (rc) fm_tok_free(t);
  else *out = t;
  return rc;
}

int fm_tok_load(FmTokenizer **tok, const char *path, FILE *err) {
  *tok = NULL;
  struct stat st;
  if (stat(path, &st) != 0) {
    fm_say(err, "give a tokenizer.json, a *.tiktoken rank file, or a directory with encoder.json + vocab.bpe",
        "%s: cannot open tokenizer: %s", path, strerror(errno));
    return FM_EIO;
  }
  if (S_ISDIR(st.st_mode)) return load_gpt2_dir(tok, path, err);
  char *text;
  size_t len;
  if (fm_read_file(path, &text, &len)) {
    fm_say(err, NULL, "%s: cannot read: %s", path, strerror(errno));
    return FM_EIO;
  }
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
  /* a file named *.json is JSON whatever it starts with: an empty one, a BOM or an array is said to be what it
   * is, not taken for a tiktoken rank file (whose message then misled) */
  const size_t pl = strlen(path);
  const bool json_name = pl >= 5 && !strcmp(path + pl - 5, ".json");
  int rc = (i < len && text[i] == '{') || json_name ? load_tokenizer_json(tok, path, text, len, err)
                                                    : load_tiktoken(tok, path, text, len, err);
  free(text);
  return rc;
}
