/* test_bpe_train.c: BPE training over MPI (run at 1 and 3 ranks).
 * Trains on a slice of linux-doc (every 8th document) with the job's
 * communicator and again with MPI_COMM_SELF: the two tokenizer.json files
 * must be byte-identical (training does not depend on the rank count). The
 * file then loads back and round-trips every linux-doc document, and
 * compresses the corpus to over 2 bytes per token. The file is left in
 * the build tree (tok_ref/trained.json) for the transformers.js check. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/core.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tokenizer.h"

#define LINUXDOC "/usr/share/doc/linux-doc-6.1/Documentation"

typedef struct Docs {
  char **path;
  int64_t n, cap;
} Docs;

static void walk(Docs *d, const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (e->d_name[0] == '.') continue;
    FmStr p;
    fm_str_init(&p);
    fm_str_printf(&p, "%s/%s", dir, e->d_name);
    struct stat st;
    size_t n = p.len;
    if (stat(p.s, &st) == 0 && S_ISDIR(st.st_mode)) walk(d, p.s);
    else if (n > 7 && !strcmp(p.s + n - 7, ".rst.gz")) {
      if (d->n == d->cap) d->path = realloc(d->path, sizeof *d->path * (size_t)(d->cap = d->cap ? 2 * d->cap : 1024));
      d->path[d->n++] = fm_xstrdup(p.s);
    }
    fm_str_free(&p);
  }
  closedir(dp);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct Slice {
  Docs *d;
  int every;
} Slice;

static int read_slice(void *ctx, int64_t i, char **text, size_t *len) {
  Slice *s = ctx;
  return fm_tok_read_text(s->d->path[i * s->every], text, len);
}

static char *slurp(const char *path, size_t *n) {
  char *t = NULL;
  fm_read_file(path, &t, n);
  return t;
}

FM_TEST(train_same_file_any_ranks) {
  Docs d = {0};
  walk(&d, LINUXDOC);
  if (d.n < 3000) fm_test_skip("linux-doc-6.1 is not installed (bash .ci/setup)");
  qsort(d.path, (size_t)d.n, sizeof *d.path, cmp_str);
  Slice sl = {&d, 8};
  const char *specials[] = {"<|endoftext|>", "<|pad|>"};
  FmBpeTrainOpts o = {.vocab_size = 4000, .specials = specials, .nspecials = 2, .min_frequency = 2,
                      .ndocs = (d.n + 7) / 8, .read_doc = read_slice, .ctx = &sl, .progress_every_s = 1.0};
  FmComm *world = fm_comm_mpi_create(MPI_COMM_WORLD);
  FmComm *self = fm_comm_mpi_create(MPI_COMM_SELF);
  FmTokenizer *tw = NULL, *ts = NULL;
  FM_REQUIRE(fm_bpe_train(&o, world, &tw, stdout) == 0);
  FM_REQUIRE(fm_bpe_train(&o, self, &ts, world->rank == 0 ? stdout : NULL) == 0);
  FM_EXPECT_EQ_INT(fm_tok_vocab_size(tw), 4000);
  FM_EXPECT_EQ_STR(fm_tok_hash(tw), fm_tok_hash(ts));
  if (world->rank == 0) {
    char dir[512], pw[600], ps[600];
    snprintf(dir, sizeof dir, "%s/tok_ref", FMHPC_BINARY_DIR);
    mkdir(dir, 0755);
    snprintf(pw, sizeof pw, "%s/trained.json", dir);
    snprintf(ps, sizeof ps, "%s/trained_np1_%d.json", dir, (int)getpid());
    FM_REQUIRE(fm_tok_save_json(tw, pw, stderr) == 0);
    FM_REQUIRE(fm_tok_save_json(ts, ps, stderr) == 0);
    size_t nw, ns;
    char *fw = slurp(pw, &nw), *fs = slurp(ps, &ns);
    FM_REQUIRE(fw && fs);
    FM_EXPECT(nw == ns && !memcmp(fw, fs, nw)); /* byte-identical files */
    printf("trained on %d ranks vs 1: %zu-byte tokenizer.json files %s\n", world->size, nw,
           nw == ns && !memcmp(fw, fs, nw) ? "identical" : "DIFFER");
    free(fw), free(fs);
    unlink(ps);
    /* Loads back; specials after the merged tokens; EOS is the first. */
    FmTokenizer *tl;
    FM_REQUIRE(fm_tok_load(&tl, pw, stderr) == 0);
    FM_EXPECT_EQ_STR(fm_tok_hash(tl), fm_tok_hash(tw));
    FM_EXPECT_EQ_INT(fm_tok_special_id(tl, "<|endoftext|>"), 3998);
    FM_EXPECT_EQ_INT(fm_tok_special_id(tl, "<|pad|>"), 3999);
    FM_EXPECT_EQ_INT(fm_tok_eos_id(tl), 3998);
    /* Every linux-doc document round-trips; compression beats bytes. */
    int64_t bad = 0, bytes = 0, toks = 0;
    int32_t *ids = NULL;
    int64_t cap = 0;
    char *back = NULL;
    size_t bcap = 0;
    for (int64_t i = 0; i < d.n; i++) {
      char *text;
      size_t len;
      FM_REQUIRE(fm_tok_read_text(d.path[i], &text, &len) == 0);
      int64_t n = 0;
      size_t bl = 0;
      fm_tok_encode(tl, text, len, false, &ids, &n, &cap);
      if (fm_tok_decode(tl, ids, n, &back, &bl, &bcap) || bl != len || memcmp(back, text, len)) bad++;
      bytes += (int64_t)len, toks += n;
      free(text);
    }
    printf("trained tokenizer: %lld documents, %lld bytes -> %lld tokens (%.2f bytes/token), %lld round-trip "
           "failures\n", (long long)d.n, (long long)bytes, (long long)toks, (double)bytes / (double)toks, (long long)bad);
    FM_EXPECT_EQ_INT(bad, 0);
    FM_EXPECT(toks * 2 < bytes); /* over 2 bytes per token (GPT-2's 50k vocabulary: 2.86) */
    free(ids), free(back);
    fm_tok_free(tl);
  }
  fm_tok_free(tw);
  fm_tok_free(ts);
  fm_comm_destroy(self);
  fm_comm_destroy(world);
  for (int64_t i = 0; i < d.n; i++) free(d.path[i]);
  free(d.path);
}
