/* deck_testing.h: helpers shared by the test_deck_*.c files: bind deck text
 * and capture everything the binder wrote to `err`, so a test can assert on
 * exact file:line:col messages. */
#ifndef FMHPC_DECK_TESTING_H
#define FMHPC_DECK_TESTING_H

#include <stdio.h>
#include <stdlib.h>

#include "fmhpc/deck.h"

/* Bind `n` sources into d (already initialised); *msgs (caller frees) gets
 * the text written to err. Returns fm_deck_bind's status. */
static inline int deck_bind_capture(FmDeck *d, int n, const FmDeckSource *src, char **msgs) {
  size_t len = 0;
  FILE *err = open_memstream(msgs, &len);
  int rc = fm_deck_bind(d, n, src, err);
  fclose(err);
  return rc;
}

/* One deck file named `name`. */
static inline int deck_bind_text(FmDeck *d, const char *name, const char *text, char **msgs) {
  FmDeckSource s = {name, text, false};
  return deck_bind_capture(d, 1, &s, msgs);
}

/* One command-line override. */
static inline int deck_bind_override(FmDeck *d, const char *text, char **msgs) {
  FmDeckSource s = {"<command line>", text, true};
  return deck_bind_capture(d, 1, &s, msgs);
}

/* fm_deck_write into a string (caller frees). */
static inline char *deck_write_string(const FmDeck *d) { return fm_deck_text(d); }

#endif
