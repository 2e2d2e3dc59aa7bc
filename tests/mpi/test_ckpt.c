/* test_ckpt.c: checkpoints (src/ckpt) at 1-4 ranks. A checkpoint written by
 * P ranks loads bit for bit at every P' (sub-communicators of this job), a
 * flipped byte is detected and the dataset and file are named, resume='auto'
 * skips a corrupt checkpoint and never picks a .partial file, and retention
 * keeps the newest K with `latest` naming the newest. */
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/ckpt.h"
#include "fmhpc/metrics.h"

enum { WINDOW = 5 };

/* Tensors that straddle the 65536-element blocks and so the shards: 340010
 * elements in 6 blocks. */
static void make_table(FmTensorTable *t) {
  fm_table_init(t);
  const int64_t a[2] = {3, 50001}, b[1] = {70000}, c[4] = {2, 3, 4, 5000}, d[1] = {7};
  fm_table_add(t, "h.0.a", FM_DT_F32, FM_TF_MATRIX, FM_TP_NONE, 2, a);
  fm_table_add(t, "h.0.b", FM_DT_F32, FM_TF_BIAS, FM_TP_NONE, 1, b);
  fm_table_add(t, "h.1.c", FM_DT_F32, FM_TF_MATRIX, FM_TP_NONE, 4, c);
  fm_table_add(t, "norm", FM_DT_F32, FM_TF_NORM, FM_TP_NONE, 1, d);
}

typedef struct Fix {
  FmTensorTable tab;
  FmSpike spike;
  FmCkptState s;
  float *w, *m, *v, *amax;
} Fix;

static float wval(int64_t i, int64_t step) { return (float)i * 0.5f + (float)step; }

/* Rank `rank` of P: its shard, filled with values of `step` when fill. */
static void fix_init(Fix *f, int P, int rank, int64_t step, int fill) {
  memset(f, 0, sizeof *f);
  make_table(&f->tab);
  const int64_t n = f->tab.numel, nb = (n + FM_DIST_BLOCK - 1) / FM_DIST_BLOCK;
  int64_t lo, hi;
  fm_zero_range(n, FM_DIST_BLOCK, P, rank, &lo, &hi);
  f->w = fm_xcalloc((size_t)n, sizeof *f->w);
  f->m = fm_xcalloc((size_t)(hi - lo + 1), sizeof *f->m);
  f->v = fm_xcalloc((size_t)(hi - lo + 1), sizeof *f->v);
  f->amax = fm_xcalloc((size_t)nb, sizeof *f->amax);
  fm_spike_init(&f->spike, WINDOW, 3.0);
  if (fill) {
    for (int64_t i = 0; i < n; i++) f->w[i] = wval(i, step);
    for (int64_t i = lo; i < hi; i++) f->m[i - lo] = -(float)i, f->v[i - lo] = (float)i * 0.25f;
    for (int64_t b = 0; b < nb; b++) f->amax[b] = (float)(b + 1) / 3.0f;
    for (int k = 0; k < WINDOW; k++) f->spike.buf[k] = 1.0 / (k + 1);
    f->spike.count = 7, f->spike.head = 2, f->spike.skipped = 1, f->spike.consecutive = 0;
  }
  f->s = (FmCkptState){.spike = &f->spike, .step = step, .skipped = fill ? 4 : 0, .redone = fill ? 2 : 0,
                       .samples = step * 12, .seed = 1234, .optim_name = "adamw", .model_name = "test",
                       .deck_text = "&run task = 'train' /\n"};
  fm_dist_state_init(&f->s.dist, &f->tab, lo, hi); /* the layout dist's table gives a training run */
  fm_dist_state_add(&f->s.dist, "params", FM_DIST_FLAT_SHARD, f->w + lo, 0);
  fm_dist_state_add(&f->s.dist, "optim/m", FM_DIST_FLAT_SHARD, f->m, 0);
  fm_dist_state_add(&f->s.dist, "optim/v", FM_DIST_FLAT_SHARD, f->v, 0);
  fm_dist_state_add(&f->s.dist, "reduce/amax_prev", FM_DIST_WHOLE_F32, f->amax, nb);
  fm_dist_state_add(&f->s.dist, "spike/losses", FM_DIST_WHOLE_F64, f->spike.buf, WINDOW);
}

static void fix_free(Fix *f) {
  free(f->s.deck_read); /* a read's copy of the stored deck (ckpt.h: the caller frees) */
  free(f->s.gemm_plans_read);
  free(f->w);
  free(f->m);
  free(f->v);
  free(f->amax);
  fm_spike_free(&f->spike);
  fm_table_free(&f->tab);
}

/* Every value this rank loaded equals what the writer held. */
static int fix_check(const Fix *f, int64_t step) {
  int bad = 0;
  for (int64_t i = f->s.dist.lo; i < f->s.dist.hi; i++) {
    bad += f->w[i] != wval(i, step);
    bad += f->m[i - f->s.dist.lo] != -(float)i || f->v[i - f->s.dist.lo] != (float)i * 0.25f;
  }
  for (int64_t b = 0; b < f->s.dist.e[3].n; b++) bad += f->amax[b] != (float)(b + 1) / 3.0f;
  for (int k = 0; k < WINDOW; k++) bad += f->spike.buf[k] != 1.0 / (k + 1);
  bad += f->s.step != step || f->s.skipped != 4 || f->s.redone != 2 || f->s.samples != step * 12;
  bad += f->spike.count != 7 || f->spike.head != 2 || f->spike.skipped != 1;
  return bad;
}

static FmComm *world(void) { return fm_comm_mpi_create(MPI_COMM_WORLD); }

/* A fresh directory per test and rank count (rank 0 creates, all wait). */
static void test_dir(FmComm *c, const char *name, char *dir, size_t n) {
  snprintf(dir, n, "%s/tests/ckpt_tmp/%s_np%d", FMHPC_BINARY_DIR, name, c->size);
  if (c->rank == 0) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    FM_EXPECT(system(cmd) == 0);
    FM_EXPECT(fm_mkdirs(dir) == 0);
  }
  fm_comm_barrier(c);
}

/* The first `n` ranks of the world (NULL on the others). */
static FmComm *first_ranks(int n) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub == MPI_COMM_NULL) return NULL;
  FmComm *c = fm_comm_mpi_create(sub);
  MPI_Comm_free(&sub);
  return c;
}

FM_TEST(any_layout) {
  FmComm *w = world();
  char dir[4096];
  test_dir(w, "layout", dir, sizeof dir);
  for (int pw = 1; pw <= w->size; pw++) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/w%d", dir, pw);
    FmComm *c = first_ranks(pw);
    if (c) {
      Fix f;
      fix_init(&f, pw, c->rank, 10 + pw, 1);
      FM_EXPECT_EQ_INT(fm_ckpt_write(sub, &f.s, 3, c, stderr, NULL, 0), 0);
      fix_free(&f);
      fm_comm_destroy(c);
    }
    fm_comm_barrier(w);
    char path[4300];
    snprintf(path, sizeof path, "%s/step_%08d.h5", sub, 10 + pw);
    for (int pr = 1; pr <= w->size; pr++) {
      c = first_ranks(pr);
      if (c) {
        Fix f;
        fix_init(&f, pr, c->rank, 0, 0);
        char why[4096];
        FM_EXPECT_EQ_INT(fm_ckpt_read(path, &f.s, c, why, sizeof why), 0);
        const int bad = fix_check(&f, 10 + pw);
        if (bad) fprintf(stderr, "written at %d ranks, read at %d: %d values differ (rank %d)\n", pw, pr, bad, c->rank);
        FM_EXPECT_EQ_INT(bad, 0);
        fix_free(&f);
        fm_comm_destroy(c);
      }
      fm_comm_barrier(w);
    }
  }
  fm_comm_destroy(w);
}

/* Flip one byte inside the data of /optim/v/h.0.b (rank 0, serial HDF5 to
 * find the offset), then every rank must see FM_ECKPT naming it. */
static void flip_byte(const char *path, const char *dset, FmComm *c) {
  if (c->rank == 0) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    FM_EXPECT(off != HADDR_UNDEF);
    FILE *fp = fopen(path, "r+b");
    FM_EXPECT(fp != NULL);
    if (fp) {
      fseek(fp, (long)off + 1001, SEEK_SET);
      int ch = fgetc(fp);
      fseek(fp, (long)off + 1001, SEEK_SET);
      fputc(ch ^ 0x10, fp);
      fclose(fp);
    }
  }
  fm_comm_barrier(c);
}

FM_TEST(flipped_byte_named) {
  FmComm *c = world();
  char dir[4096], why[16384], loaded[4096] = "";
  test_dir(c, "flip", dir, sizeof dir);
  Fix f;
  for (int step = 1; step <= 2; step++) {
    fix_init(&f, c->size, c->rank, step, 1);
    FM_EXPECT_EQ_INT(fm_ckpt_write(dir, &f.s, 3, c, stderr, NULL, 0), 0);
    fix_free(&f);
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/step_00000002.h5", dir);
  flip_byte(path, "optim/v/h.0.b", c);
  fix_init(&f, c->size, c->rank, 0, 0);
  FM_EXPECT_EQ_INT(fm_ckpt_read(path, &f.s, c, why, sizeof why), FM_ECKPT);
  FM_EXPECT_CONTAINS(why, "optim/v/h.0.b");
  FM_EXPECT_CONTAINS(why, "step_00000002.h5");
  FM_EXPECT_CONTAINS(why, "SHA-256 mismatch");
  /* auto skips it (with a warning) and takes step 1, exactly */
  FM_EXPECT_EQ_INT(fm_ckpt_resume("auto", dir, &f.s, c, stderr, loaded, sizeof loaded), 0);
  FM_EXPECT_CONTAINS(loaded, "step_00000001.h5");
  FM_EXPECT_EQ_INT(fix_check(&f, 1), 0);
  /* a named path that is corrupt is an error, not a fallback */
  FM_EXPECT_EQ_INT(fm_ckpt_resume(path, dir, &f.s, c, NULL, loaded, sizeof loaded), FM_ECKPT);
  fix_free(&f);
  fm_comm_destroy(c);
}

FM_TEST(partial_keep_latest) {
  FmComm *c = world();
  char dir[4096], loaded[4096] = "";
  test_dir(c, "keep", dir, sizeof dir);
  Fix f;
  for (int step = 1; step <= 5; step++) {
    fix_init(&f, c->size, c->rank, step, 1);
    FM_EXPECT_EQ_INT(fm_ckpt_write(dir, &f.s, 2, c, stderr, NULL, 0), 0);
    fix_free(&f);
  }
  char cmd[8400], *text = NULL;
  if (c->rank == 0) { /* a newer, complete-looking file that was never committed */
    snprintf(cmd, sizeof cmd, "cp '%s/step_00000005.h5' '%s/step_00000009.h5.partial'", dir, dir);
    FM_EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s/latest", dir);
    FM_EXPECT(fm_read_file(cmd, &text, NULL) == 0);
    FM_EXPECT_EQ_STR(text, "step_00000005.h5\n");
    free(text);
    char **paths;
    int n = fm_ckpt_list(dir, &paths);
    FM_EXPECT_EQ_INT(n, 2);
    if (n == 2) {
      FM_EXPECT_CONTAINS(paths[0], "step_00000005.h5");
      FM_EXPECT_CONTAINS(paths[1], "step_00000004.h5");
    }
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
  }
  fm_comm_barrier(c);
  fix_init(&f, c->size, c->rank, 0, 0);
  FM_EXPECT_EQ_INT(fm_ckpt_resume("auto", dir, &f.s, c, stderr, loaded, sizeof loaded), 0);
  FM_EXPECT_CONTAINS(loaded, "step_00000005.h5");
  FM_EXPECT_EQ_INT(fix_check(&f, 5), 0);
  FM_EXPECT_EQ_INT(fm_ckpt_resume("none", dir, &f.s, c, stderr, loaded, sizeof loaded), 1);
  char empty[4200];
  snprintf(empty, sizeof empty, "%s/nothing_here", dir);
  FM_EXPECT_EQ_INT(fm_ckpt_resume("auto", empty, &f.s, c, stderr, loaded, sizeof loaded), 1);
  fix_free(&f);
  fm_comm_destroy(c);
}
