/* template.c: SFT chat templates as strings: the built-ins (llama3, chatml,
 * none) and a deck-defined prefix/suffix per role. Which tokens are trained
 * and how pieces are tokenized is prep.c's business; this file only says
 * what text wraps a turn. */
#include "fmhpc/data.h"

#include <stdlib.h>
#include <string.h>

typedef struct Builtin {
  const char *name, *bos, *prefix, *suffix;
} Builtin;

/* As Meta's Llama 3 chat format and OpenAI's ChatML. */
static const Builtin builtins[] = {
    {"none", "", "", ""},
    {"llama3", "<|begin_of_text|>", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>"},
    {"chatml", "", "<|im_start|>{role}\n", "<|im_end|>\n"},
};

int fm_template_builtin(FmTemplate *t, const char *name) {
  memset(t, 0, sizeof *t);
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
    if (fm_strcasecmp(name, builtins[i].name)) continue;
    snprintf(t->name, sizeof t->name, "%s", builtins[i].name);
    t->bos = fm_xstrdup(builtins[i].bos);
    t->any_prefix = fm_xstrdup(builtins[i].prefix);
    t->any_suffix = fm_xstrdup(builtins[i].suffix);
    return 0;
  }
  return FM_EINVAL;
}

/* Deck strings are Fortran strings (no escapes): \n, \t and \\ are ours. */
char *fm_template_unescape(const char *s) {
  char *o = fm_xmalloc(strlen(s) + 1), *p = o;
  for (; *s; s++) {
    if (s[0] == '\\' && (s[1] == 'n' || s[1] == 't' || s[1] == '\\')) {
      *p++ = s[1] == 'n' ? '\n' : s[1] == 't' ? '\t' : '\\';
      s++;
    } else {
      *p++ = *s;
    }
  }
  *p = 0;
  return o;
}

int fm_template_from_deck(FmTemplate *t, const FmDeck *deck, FILE *err) {
  const char *name = deck->c.prep.chat_template;
  if (fm_strcasecmp(name, "deck")) {
    if (fm_template_builtin(t, name) == 0) return 0;
    fm_deck_error(deck, err, FM_KEY_prep_chat_template, "unknown chat template '%s'", name);
    return FM_EDECK;
  }
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "deck");
  int n = deck->c.prep.role_names_n;
  if (n == 0 || deck->c.prep.role_prefix_n != n || deck->c.prep.role_suffix_n != n) {
    fm_deck_error(deck, err, FM_KEY_prep_role_names,
                  "chat_template = 'deck' needs role_names, role_prefix and role_suffix with one entry per role "
                  "(got %d, %d and %d)",
                  n, deck->c.prep.role_prefix_n, deck->c.prep.role_suffix_n);
    if (err) fprintf(err, "hint: role_names = 'user', 'assistant'  role_prefix = 'Q: ', 'A: '  role_suffix = '\\n', ''\n");
    return FM_EDECK;
  }
  t->nroles = n;
  t->bos = fm_template_unescape(deck->c.prep.template_bos);
  for (int i = 0; i < n; i++) {
    t->role[i] = fm_xstrdup(deck->c.prep.role_names[i]);
    t->prefix[i] = fm_template_unescape(deck->c.prep.role_prefix[i]);
    t->suffix[i] = fm_template_unescape(deck->c.prep.role_suffix[i]);
  }
  return 0;
}

static char *subst_role(const char *pat, const char *role) {
  FmStr b;
  fm_str_init(&b);
  for (const char *p = pat; *p;) {
    const char *q = strstr(p, "{role}");
    if (!q) {
      fm_str_cat(&b, p);
      break;
    }
    fm_str_catn(&b, p, (size_t)(q - p));
    fm_str_cat(&b, role);
    p = q + 6;
  }
  if (!b.s) fm_str_cat(&b, "");
  return b.s;
}

int fm_template_role(const FmTemplate *t, const char *role, char **prefix, char **suffix) {
  *prefix = *suffix = NULL;
  if (t->nroles == 0) {
    *prefix = subst_role(t->any_prefix, role);
    *suffix = subst_role(t->any_suffix, role);
    return 0;
  }
  for (int i = 0; i < t->nroles; i++)
    if (!strcmp(t->role[i], role)) {
      *prefix = fm_xstrdup(t->prefix[i]);
      *suffix = fm_xstrdup(t->suffix[i]);
      return 0;
    }
  return FM_EINVAL;
}

void fm_template_free(FmTemplate *t) {
  free(t->bos);
  free(t->any_prefix);
  free(t->any_suffix);
  for (int i = 0; i < t->nroles; i++) {
    free(t->role[i]);
    free(t->prefix[i]);
    free(t->suffix[i]);
  }
  memset(t, 0, sizeof *t);
}
