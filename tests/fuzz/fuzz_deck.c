/* fuzz_deck: the namelist deck and command-line overrides (src/deck).
 * Input: deck text, then optional overrides, separated by 0x1e bytes:
 *   "&optim lr=1e-3 /\n" 0x1e "model%n_layer=4" 0x1e "train%steps=9"
 * As main.c: the deck file's raw bytes through fm_deck_check_bytes (a NUL is
 * an error there), overrides as argv strings (up to a NUL), then bind and
 * validate. A bound deck must survive its own round trip: fm_deck_text, bound
 * again, gives a deck with every key equal ("a deck that can be run again";
 * the texts differ in their [file:line] origin comments). */
#include "fmhpc/deck.h"
#include "fuzz_common.h"

enum { MAX_SRC = 8 };

static void round_trip(const FmDeck *d) {
  char *text = fm_deck_text(d);
  FmDeck d2;
  fm_deck_init(&d2);
  FmDeckSource s = {"<resolved>", text, false};
  FzErr e;
  int rc = fm_deck_bind(&d2, 1, &s, fz_err_open(&e));
  fclose(e.f);
  if (rc) {
    fprintf(stderr, "fuzz_deck: the resolved deck does not bind again:\n%s\n--- messages:\n%s\n", text, e.buf);
    abort();
  }
  free(e.buf);
  for (int k = 0; k < FM_NKEYS; k++)
    if (!fm_deck_key_equal(d, &d2, k)) {
      const FmKeyInfo *ki = fm_deck_key_info(k);
      char *a = fm_deck_value_text(d, k), *b = fm_deck_value_text(&d2, k);
      fprintf(stderr, "fuzz_deck: &%s %s changed in the round trip: %s -> %s\n", ki->group, ki->name, a, b);
      abort();
    }
  free(text);
  fm_deck_free(&d2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FmDeckSource src[MAX_SRC];
  char *own[MAX_SRC];
  int n = 0;
  size_t k = fz_split(data, size, 0x1e);
  FzErr e;
  int rc = fm_deck_check_bytes("fuzz.in", (const char *)data, k, fz_err_open(&e));
  fz_said(&e, rc, "fm_deck_check_bytes");
  if (rc) return 0;
  own[n] = fz_strndup(data, k);
  src[n] = (FmDeckSource){"fuzz.in", own[n], false};
  n++;
  while (k < size && n < MAX_SRC) {
    data += k + 1;
    size -= k + 1;
    k = fz_split(data, size, 0x1e);
    own[n] = fz_strndup(data, k); /* argv: ends at a NUL */
    src[n] = (FmDeckSource){"<command line>", own[n], true};
    n++;
  }
  FmDeck d;
  fm_deck_init(&d);
  rc = fm_deck_bind(&d, n, src, fz_err_open(&e));
  fz_said(&e, rc, "fm_deck_bind");
  if (!rc) {
    round_trip(&d);
    rc = fm_deck_validate(&d, fz_err_open(&e));
    fz_said(&e, rc, "fm_deck_validate");
  }
  fm_deck_free(&d);
  for (int i = 0; i < n; i++) free(own[i]);
  return 0;
}
