/* bench_load.c: the CPU time of fm_tok_load (what every fmhpc run with a
 * tokenizer pays once at start-up). Loads each tokenizer given REPS times
 * and prints, per tokenizer: the CPU ms of the first load (what a run pays:
 * fresh memory, cold caches; run the program several times for its spread),
 * CPU ms per load after it (minimum and median over the other loads, which
 * reuse warm memory), the MB/s of its files at the first load, and its
 * fm_tok_hash (so two builds can be checked to load the same tokenizer).
 *   bench_load REPS TOKENIZER...
 * A TOKENIZER is a tokenizer.json, a *.tiktoken file, or a GPT-2 directory
 * (encoder.json + vocab.bpe). Not run in CI. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmhpc/tokenizer.h"
#include "../bench_util.h"

static double file_bytes(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return (double)st.st_size;
  char p[4096];
  double b = 0;
  snprintf(p, sizeof p, "%s/encoder.json", path);
  if (stat(p, &st) == 0) b += (double)st.st_size;
  snprintf(p, sizeof p, "%s/vocab.bpe", path);
  if (stat(p, &st) == 0) b += (double)st.st_size;
  return b;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: bench_load REPS TOKENIZER...\n"), 2;
  int reps = atoi(argv[1]);
  if (reps < 1) return fprintf(stderr, "bench_load: REPS must be >= 1\n"), 2;
  double *ms = malloc(sizeof *ms * (size_t)reps);
  for (int a = 2; a < argc; a++) {
    char hash[65] = "";
    for (int r = 0; r < reps; r++) {
      FmTokenizer *tok;
      double c0 = cpu_now();
      if (fm_tok_load(&tok, argv[a], stderr)) return 1;
      ms[r] = 1e3 * (cpu_now() - c0);
      snprintf(hash, sizeof hash, "%s", fm_tok_hash(tok));
      fm_tok_free(tok);
    }
    double first = ms[0], mb = file_bytes(argv[a]) / 1e6;
    printf("load %s: %.2f MB, first load %.2f ms CPU, %.1f MB/s", argv[a], mb, first, first > 0 ? mb / (first / 1e3) : 0);
    if (reps > 1) {
      qsort(ms + 1, (size_t)reps - 1, sizeof *ms, cmp_double);
      printf("; %d more loads: min %.2f ms, median %.2f ms CPU", reps - 1, ms[1], ms[1 + (reps - 1) / 2]);
    }
    printf("; hash %.16s\n", hash);
  }
  free(ms);
  return 0;
}
