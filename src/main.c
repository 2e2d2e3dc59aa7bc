/* main.c: MPI_Init, read the decks on rank 0 and broadcast them, bind on
 * every rank, build the mesh, dispatch &run task. Short on purpose: each task
 * lives in its module. Exit status: 0 done, 1 runtime failure, 2 bad deck or
 * command line (every rank agrees, so no rank is left hanging), 3 checkpointed
 * on SIGUSR1/SIGTERM: requeue (slurm/train_1p2b.sh). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmhpc/backend.h"
#include "fmhpc/ckpt.h"
#include "fmhpc/core.h"
#include "fmhpc/data.h"
#include "fmhpc/deck.h"
#include "fmhpc/clean.h"
#include "fmhpc/eval.h"
#include "fmhpc/generate.h"
#include "fmhpc/interop.h"
#include "fmhpc/metrics.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tokenizer.h"
#include "fmhpc/train.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };
/* A deck file larger than this is refused unread (/dev/zero named as a deck read until memory ran out). */
#define FM_DECK_MAX_BYTES (16 << 20)

typedef struct Args {
  int check, help, help_deck, version;
  int ranks; /* --ranks N: plan for N ranks instead of the real world */
  const char *encode, *decode; /* --encode/--decode TOK: tokenizer inspection */
  const char *plot;            /* --plot RUN_DIR */
  const char *verify;          /* --verify STORE */
  int nsrc;
  FmDeckSource *src; /* decks and overrides, in command-line order */
} Args;

static void usage(FILE *out) {
  fprintf(out,
          "usage: fmhpc [options] DECK [DECK ...] ['group%%key=value' ...]\n"
          "  Runs the task in &run of the decks (layered left to right; overrides last).\n"
          "  mpirun -n 4 fmhpc inputs/gpt2_nano.in        srun -n 64 fmhpc inputs/llama2.in\n"
          "options:\n"
          "  --check        validate the decks, print the resolved deck and the plan\n"
          "                 (parameters, memory per rank and bytes sent per step over\n"
          "                 tp and dp at the deck's dp x tp, the fit to &parallel\n"
          "                 device_mem_gib, FLOPs), and exit\n"
          "  --ranks N      with --check: plan for N ranks instead of this job's\n"
          "                 (nothing is launched): fmhpc --check --ranks 64 inputs/llama2.in\n"
          "  --help-deck    every deck group and key with type, default, range and help\n"
          "  --encode TOK   stdin text -> token ids on stdout (TOK: tokenizer.json, a\n"
          "                 *.tiktoken file, or a directory with encoder.json + vocab.bpe)\n"
          "  --decode TOK   stdin token ids -> text on stdout\n"
          "  --plot RUN_DIR draw RUN_DIR/loss.png from RUN_DIR/metrics.jsonl (also while\n"
          "                 the run is going; needs a build with PLplot)\n"
          "  --verify STORE check a packed store (prep manifest .json, or one .h5 shard):\n"
          "                 every SHA-256 of the manifest and every row's ids, masks and\n"
          "                 segment/position ids; each rank checks a share (mpirun -n P)\n"
          "  --version      version, git revision and the CPU GEMM kernel (it decides the bits)\n"
          "  --help         this text\n"
          "exit status: 0 done, 1 runtime failure, 2 bad deck or command line,\n"
          "  3 checkpointed on SIGUSR1/SIGTERM (preemption): requeue to continue\n");
}

/* An override is group%key=value; anything else is a deck file. */
static int is_override(const char *a) {
  const char *pct = strchr(a, '%'), *eq = strchr(a, '=');
  return pct && eq && pct < eq;
}

/* "key=value" (no group%) that names no file: the groups that have such a key. */
static void override_without_group(const char *s, FILE *err) {
  const char *eq = strchr(s, '=');
  char key[64], alts[1024] = "";
  snprintf(key, sizeof key, "%.*s", (int)(eq - s < 63 ? eq - s : 63), s);
  size_t used = 0;
  for (int g = 0; g < fm_deck_ngroups() && used < sizeof alts; g++)
    if (fm_deck_find_key(fm_deck_group_name(g), key) >= 0)
      used +=
          (size_t)snprintf(alts + used, sizeof alts - used, "%s'%s%%%s'", used ? " or " : "", fm_deck_group_name(g), s);
  fprintf(err, "fmhpc: '%s' is neither a deck file nor an override (group%%key=value): it has no group\n", s);
  if (alts[0])
    fprintf(err, "hint: name the group: %s\n", alts);
  else
    fprintf(err, "hint: no deck group has a key '%s'; fmhpc --help-deck lists them\n", key);
}

static int parse_args(Args *a, int argc, char **argv, FILE *err) {
  memset(a, 0, sizeof *a);
  a->src = fm_xcalloc((size_t)argc, sizeof *a->src);
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--check")) a->check = 1;
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) a->help = 1;
    else if (!strcmp(s, "--help-deck")) a->help_deck = 1;
    else if (!strcmp(s, "--version")) a->version = 1;
    else if (!strcmp(s, "--encode") || !strcmp(s, "--decode")) {
      if (i + 1 >= argc) {
        if (err) fprintf(err, "fmhpc: %s needs a tokenizer path\n", s);
        return FM_EINVAL;
      }
      *(s[2] == 'e' ? &a->encode : &a->decode) = argv[++i];
    }
    else if (!strcmp(s, "--verify")) {
      if (i + 1 >= argc) {
        if (err) fprintf(err, "fmhpc: --verify needs a store (a prep manifest .json or an .h5 shard)\n");
        return FM_EINVAL;
      }
      a->verify = argv[++i];
    }
    else if (!strcmp(s, "--plot")) {
      if (i + 1 >= argc) {
        if (err) fprintf(err, "fmhpc: --plot needs a run directory (&run out_dir)\n");
        return FM_EINVAL;
      }
      a->plot = argv[++i];
    }
    else if (!strcmp(s, "--ranks")) {
      char *end = NULL;
      long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end || v < 1 || v > 1 << 24) {
        if (err) fprintf(err, "fmhpc: --ranks needs a positive rank count\n");
        return FM_EINVAL;
      }
      a->ranks = (int)v;
      i++;
    } else if (s[0] == '-' && s[1]) { /* "-x" is no deck either: ./-x names a file of that name */
      if (err)
        fprintf(err, "fmhpc: unknown option '%s'\nhint: fmhpc --help lists the options%s%s\n", s,
                s[1] == '-' ? "" : "; a deck whose name starts with '-' is ./", s[1] == '-' ? "" : s);
      return FM_EINVAL;
    } else if (!is_override(s) && strchr(s, '=') && access(s, F_OK) != 0) {
      if (err) override_without_group(s, err);
      return FM_EINVAL;
    } else {
      a->src[a->nsrc].name = is_override(s) ? "<command line>" : s;
      a->src[a->nsrc].text = s;
      a->src[a->nsrc].is_override = is_override(s);
      a->nsrc++;
    }
  }
  if (a->ranks && !a->check) {
    if (err) fprintf(err, "fmhpc: --ranks only makes sense with --check\n");
    return FM_EINVAL;
  }
  /* a mode of its own reads no deck: a deck or override given to it would be dropped without a word (--help
   * prints its text whatever else is given) */
  const char *mode = a->encode      ? "--encode"
                     : a->decode    ? "--decode"
                     : a->verify    ? "--verify"
                     : a->plot      ? "--plot"
                     : a->help      ? NULL
                     : a->version   ? "--version"
                     : a->help_deck ? "--help-deck"
                                    : NULL;
  const int modes = !!a->encode + !!a->decode + !!a->verify + !!a->plot + (!a->help && (a->version || a->help_deck));
  if (mode && (modes > 1 || a->nsrc || a->check)) {
    const char *extra = modes > 1  ? "other of --encode, --decode, --verify, --plot, --version, --help-deck"
                        : a->check ? "--check"
                        : a->src[0].is_override ? "override (group%key=value)"
                                                : "deck";
    if (err) fprintf(err, "fmhpc: %s runs on its own: it takes no %s\nhint: fmhpc --help shows each option's arguments\n",
                     mode, extra);
    return FM_EINVAL;
  }
  return 0;
}

/* Rank 0 reads every deck file; the texts are broadcast so that all ranks
 * bind identical input (a parallel file system may serve ranks different
 * versions of a file being edited). Returns 0 on every rank or an error on
 * every rank. */
static int read_decks(Args *a, FmComm *world) {
  int32_t status = 0;
  for (int i = 0; i < a->nsrc; i++) {
    if (a->src[i].is_override) continue;
    char *text = NULL;
    size_t len = 0;
    if (world->rank == 0) {
      if (fm_read_file_max(a->src[i].name, &text, &len, FM_DECK_MAX_BYTES) != 0) {
        if (errno == EFBIG)
          fprintf(stderr,
                  "fmhpc: deck '%s' holds more than %d MiB: a deck is a namelist text of a few KiB\n"
                  "hint: check the path; decks ship in inputs/\n",
                  a->src[i].name, FM_DECK_MAX_BYTES >> 20);
        else
          fprintf(stderr, "fmhpc: cannot read deck '%s': %s\nhint: check the path; decks ship in inputs/\n",
                  a->src[i].name, strerror(errno));
        status = FM_EIO;
      } else {
        status = fm_deck_check_bytes(a->src[i].name, text, len, stderr);
      }
    }
    fm_comm_bcast(world, &status, 1, FM_DT_I32, 0);
    if (status) {
      free(text);
      return status;
    }
    fm_comm_bcast_str(world, &text, 0);
    a->src[i].text = text;
  }
  return 0;
}

static int run_check(const FmDeck *deck, const Args *a, FmComm *world, FILE *out) {
  const char *task = deck->c.run.task;
  if (a->check && strcmp(task, "train") != 0 && strcmp(task, "check") != 0) {
    /* the plan is a training step's (memory per rank, bytes per step): printed for another task, it would describe a
     * default model that task never builds */
    if (world->rank == 0)
      fprintf(out,
              "check      the deck is valid for task '%s' (its files are read when it runs); the plan (memory per rank, "
              "bytes per step) is for task = 'train'\n",
              task);
    return 0;
  }
  FmPlan plan;
  int nranks = a->ranks ? a->ranks : world->size;
  int rc = fm_plan_make(&plan, deck, nranks, world->rank == 0 ? stderr : NULL);
  if (rc) return rc;
  if (!a->ranks) { /* the real layout: tp groups must sit inside a node */
    FmMesh mesh;
    rc = fm_mesh_create(&mesh, (int)deck->c.parallel.tp, -1);
    if (rc) return rc;
    if (world->rank == 0)
      fprintf(out, "mesh       %d ranks, %d on rank 0's node, device %d on rank 0\n", mesh.world_size,
              mesh.local_size, mesh.device);
    fm_mesh_destroy(&mesh);
  }
  if (world->rank == 0) fm_plan_print(&plan, deck, out);
  return 0;
}

/* ---- the task registry (src/deck/tasks.def): one adapter per task ------------ */
typedef int (*TaskFn)(const FmDeck *deck, const Args *a, FmComm *world, FILE *out);

static int task_check(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return run_check(d, a, w, out); }
static int task_train(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_train_run(d, w, out); }
static int task_prep(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_prep_run(d, w, out); }
static int task_tokenizer(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_tokenizer_task(d, w, out); }
static int task_eval(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_eval_task(d, w, out); }
static int task_generate(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_generate_task(d, w, out); }
static int task_ifd(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_ifd_task(d, w, out); }
static int task_dedup(const FmDeck *d, const Args *a, FmComm *w, FILE *out) { return fm_dedup_task(d, w, out); }
static int task_export(const FmDeck *d, const Args *a, FmComm *w, FILE *out) {
  return fm_interop_export_task(d, w, w->rank == 0 ? stderr : NULL);
}

typedef struct Task {
  const char *name;
  TaskFn run;
  const char *help;
} Task;

static const Task tasks[] = {
#define FM_TASK(n, fn, help) {#n, fn, help},
#include "fmhpc/tasks.def"
#undef FM_TASK
};

static const Task *find_task(const char *name) {
  for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++)
    if (fm_strcasecmp(tasks[i].name, name) == 0) return &tasks[i];
  return NULL;
}

static void list_tasks(FILE *out) {
  for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++)
    fprintf(out, "  %-11s  %s\n", tasks[i].name, tasks[i].help);
}

int main(int argc, char **argv) {
  fm_runtime_init(&argc, &argv);
  FmComm *world = fm_comm_mpi_create(MPI_COMM_WORLD);
  FILE *err = world->rank == 0 ? stderr : NULL;
  Args a;
  if (parse_args(&a, argc, argv, err)) fm_exit_all(EXIT_USAGE);
  if (a.help || a.version || a.help_deck) {
    if (world->rank == 0) {
      if (a.help) {
        usage(stdout);
        printf("tasks (&run task = '...'):\n");
        list_tasks(stdout);
      }
      if (a.version) { /* the GEMM kernel decides the bits of a CPU run (README, bitwise) */
        printf("fmhpc %s (git %s)\n", FM_VERSION_STRING, FMHPC_GIT_REV);
        printf("cpu gemm: %s\n", fm_cpu_blas_info());
      }
      if (a.help_deck) fm_deck_help(stdout);
    }
    fm_exit_all(0);
  }
  if (a.encode || a.decode) { /* rank 0 reads stdin; the others wait for its status */
    int32_t rc = 0;
    if (world->rank == 0)
      rc = a.encode ? fm_tok_cli_encode(a.encode, stdin, stdout, stderr) : fm_tok_cli_decode(a.decode, stdin, stdout, stderr);
    fflush(stdout);
    fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0);
    fm_exit_all(rc ? EXIT_RUNTIME : 0);
  }
  if (a.plot) { /* rank 0 draws; the others wait for its status */
    int32_t rc = 0;
    if (world->rank == 0) {
      char png[4200];
      snprintf(png, sizeof png, "%s/loss.png", a.plot);
      rc = fm_plot_run(a.plot, stderr);
      if (!rc) printf("wrote %s\n", png);
    }
    fflush(stdout);
    fm_comm_bcast(world, &rc, 1, FM_DT_I32, 0);
    fm_exit_all(rc == FM_EUNSUPPORTED ? EXIT_USAGE : rc ? EXIT_RUNTIME : 0);
  }
  if (a.verify) { /* collective: every rank checks a share of the rows */
    int rc = fm_store_verify(a.verify, "auto", world, world->rank == 0 ? stdout : NULL, world->rank == 0 ? stderr : NULL);
    fflush(stdout);
    fm_exit_all(rc ? EXIT_RUNTIME : 0);
  }
  if (a.nsrc == 0) {
    if (err) usage(err);
    fm_exit_all(EXIT_USAGE);
  }
  if (read_decks(&a, world)) fm_exit_all(EXIT_USAGE);

  FmDeck deck;
  fm_deck_init(&deck);
  if (fm_deck_bind(&deck, a.nsrc, a.src, err) || fm_deck_validate(&deck, err)) fm_exit_all(EXIT_USAGE);
  const char *task = a.check ? "check" : deck.c.run.task;
  if (world->rank == 0) {
    printf("fmhpc %s (git %s) on %d rank%s: task '%s', run '%s'\n", FM_VERSION_STRING, FMHPC_GIT_REV, world->size,
           world->size == 1 ? "" : "s", task, deck.c.run.name);
    printf("== resolved deck ==\n");
    fm_deck_write(&deck, stdout);
    fflush(stdout);
  }

  int rc = FM_EUNSUPPORTED;
  const Task *t = find_task(task);
  if (t) {
    rc = t->run(&deck, &a, world, stdout);
  } else if (err) { /* the deck's choice list (tasks.def) keeps this from happening */
    fprintf(err, "fmhpc: no task '%s'; the tasks:\n", task);
    list_tasks(err);
  }
  fm_deck_free(&deck);
  fm_comm_destroy(world);
  if (rc == FM_CKPT_PREEMPTED) fm_exit_all(FM_EXIT_REQUEUE);
  fm_exit_all(rc == 0 ? 0 : (rc == FM_EDECK || rc == FM_EUNSUPPORTED || rc == FM_EINVAL) ? EXIT_USAGE
                                                                                        : EXIT_RUNTIME);
}
