/* runtime.c: process start and end. MPI_Init_thread (FUNNELED), the logging
 * rank, MPI_Abort as the abort hook for errors one rank sees alone, and the
 * clean all-ranks exit for errors every rank sees. The mesh is in mesh.c, the
 * collectives in comm_mpi.c and comm_nccl.c (which also counts CUDA devices:
 * CUDA calls stay in that one file of runtime/). */
#include "fmhpc/runtime.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int mpi_is_up(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/* Open MPI's launcher ends the whole job at the first MPI_Abort or non-zero
 * exit and may drop what the other ranks wrote but it has not yet forwarded:
 * rank 0's error message was lost that way in 2 of 6 failing 2-rank runs.
 * Rank 0 is the one that talks, so the others give it a moment to go first.
 * Only failing paths wait. */
static void let_rank0_go_first(void) {
  if (fm_log_rank() == 0) return;
  const struct timespec wait = {1, 0};
  nanosleep(&wait, NULL);
}

/* An error only this rank saw: the others may be waiting in a collective, so
 * exit() alone would leave them hanging until the batch limit. */
static void runtime_abort_hook(int code) {
  fflush(stdout);
  fflush(stderr);
  if (!mpi_is_up()) return;
  let_rank0_go_first();
  MPI_Abort(MPI_COMM_WORLD, code);
}

/* ---- the start-up watchdog ------------------------------------------------
 * A rank lost while the job starts (killed, its node frozen or unreachable)
 * can leave the others waiting inside MPI_Init's PMIx fence or the first
 * collective, where no MPI error handler runs; if the launcher does not end
 * them, the job sits there until the batch limit. Once every rank is up, a
 * lost rank is the launcher's to report (mpirun and srun end the job at a
 * rank's abnormal exit; faults.rank_kill). So until MPI_Init and one barrier
 * over the world have completed, a thread waits with a deadline
 * (FMHPC_STARTUP_TIMEOUT seconds, default 300, 0 = off); when it passes, the
 * rank says so on stderr and _exit()s, and the launcher sees a dead rank. The
 * deck cannot set it: it is read after MPI is up. */
enum { STARTUP_TIMEOUT_DEFAULT = 300, EXIT_STARTUP = 1 };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int armed, done;
  struct timespec deadline; /* CLOCK_MONOTONIC */
  char msg[256];            /* composed before arming: the thread only writes it */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* This process's rank as the launcher tells it, before MPI can; "?" if none does. */
static const char *launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return v;
  }
  return "?";
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd.mu);
  int rc = 0;
  while (!wd.done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&wd.cv, &wd.mu, &wd.deadline);
  const int fire = !wd.done;
  pthread_mutex_unlock(&wd.mu);
  if (fire) {
    /* The main thread is inside MPI: no stdio locks, no exit handlers (they
     * could call into MPI), one write of the whole line, then out. */
    fflush(stdout);
    const size_t n = strlen(wd.msg);
    for (size_t off = 0; off < n;) {
      const ssize_t w = write(STDERR_FILENO, wd.msg + off, n - off);
      if (w <= 0 && errno != EINTR) break;
      if (w > 0) off += (size_t)w;
    }
    _exit(EXIT_STARTUP);
  }
  return NULL;
}

/* FMHPC_STARTUP_TIMEOUT in seconds (> 0), 0 when off; -1 after an error message. */
static double startup_timeout(void) {
  const char *v = getenv("FMHPC_STARTUP_TIMEOUT");
  if (!v || !*v) return STARTUP_TIMEOUT_DEFAULT;
  char *end = NULL;
  errno = 0;
  const double t = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(t) || t < 0 || t > 1e6) {
    fm_err("FMHPC_STARTUP_TIMEOUT='%s': not a number of seconds in [0, 1e6] (0 turns the MPI start-up watchdog off)",
           v);
    return -1;
  }
  return t;
}

static int watchdog_arm(void) {
  const double t = startup_timeout();
  if (t < 0) return FM_EINVAL;
  if (t == 0) return 0;
  snprintf(wd.msg, sizeof wd.msg,
           "fmhpc[rank %s]: MPI start-up did not complete within %g s (a rank lost during start-up?); "
           "exiting so that the launcher ends the job (FMHPC_STARTUP_TIMEOUT sets the limit)\n",
           launcher_rank(), t);
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr)) return FM_ENOMEM;
  int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(&wd.cv, &attr);
  pthread_condattr_destroy(&attr);
  if (rc) return FM_ENOMEM;
  clock_gettime(CLOCK_MONOTONIC, &wd.deadline);
  const double whole = floor(t);
  wd.deadline.tv_sec += (time_t)whole;
  wd.deadline.tv_nsec += (long)((t - whole) * 1e9);
  if (wd.deadline.tv_nsec >= 1000000000L) {
    wd.deadline.tv_sec++;
    wd.deadline.tv_nsec -= 1000000000L;
  }
  wd.done = 0;
  if (pthread_create(&wd.thread, NULL, watchdog_main, NULL)) {
    pthread_cond_destroy(&wd.cv);
    return FM_ENOMEM;
  }
  wd.armed = 1;
  return 0;
}

static void watchdog_disarm(void) {
  if (!wd.armed) return;
  pthread_mutex_lock(&wd.mu);
  wd.done = 1;
  pthread_cond_signal(&wd.cv);
  pthread_mutex_unlock(&wd.mu);
  pthread_join(wd.thread, NULL);
  pthread_cond_destroy(&wd.cv);
  wd.armed = 0;
}

/* FMHPC_TEST_STARTUP_STOP=R (tests/faults): the rank the launcher numbers R
 * stops itself (SIGSTOP, as a frozen node) before MPI_Init, so the others
 * wait for it inside MPI_Init: the hang the watchdog bounds. */
static void test_startup_stop(void) {
  const char *v = getenv("FMHPC_TEST_STARTUP_STOP");
  if (!v || strcmp(v, launcher_rank()) != 0) return;
  fprintf(stderr, "FMHPC_TEST_STARTUP_STOP=%s: rank %s stops itself before MPI_Init\n", v, launcher_rank());
  fflush(stderr);
  raise(SIGSTOP);
}

int fm_runtime_init(int *argc, char ***argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int rc = watchdog_arm();
    if (rc == FM_EINVAL) exit(EXIT_STARTUP); /* every rank reads the same environment */
    if (rc) fm_warn0("cannot start the MPI start-up watchdog thread; a rank lost during start-up may hang the job");
    test_startup_stop();
    /* FUNNELED: only the main thread calls MPI; OpenMP threads compute. */
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      fm_err("MPI_Init_thread failed");
      return FM_EMPI;
    }
    if (provided < MPI_THREAD_FUNNELED)
      fm_warn0("MPI provides thread level %d, below MPI_THREAD_FUNNELED; OpenMP regions must not call MPI", provided);
  }
  fm_set_abort_hook(runtime_abort_hook); /* from here on, fm_abort_one ends every rank */
  /* Errors come back as codes so FM_CHECK_MPI and comm_mpi.c can report the
   * failing call with rank and file:line before deciding how to end. */
  FM_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  fm_log_set_rank(rank, size);
  /* Start-up ends when every rank has been heard from: MPI_Init's own fence
   * may complete before the point-to-point connections are made. */
  if (wd.armed) FM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  watchdog_disarm();
  return 0;
}

void fm_runtime_finalize(void) {
  if (!mpi_is_up()) return;
  fflush(stdout);
  fflush(stderr);
  /* After Finalize MPI_Abort is illegal: fall back to a plain exit(). */
  fm_set_abort_hook(NULL);
  MPI_Finalize();
}

int fm_world_rank(void) {
  int rank = 0;
  if (mpi_is_up()) FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

int fm_world_size(void) {
  int size = 1;
  if (mpi_is_up()) FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

/* Every rank reached the same verdict (a bad deck, --check done), so a clean
 * finalize on all of them beats MPI_Abort's "job aborted" noise, and the batch
 * script sees `code` from every rank. */
void fm_exit_all(int code) {
  const int several = fm_world_size() > 1;
  fm_runtime_finalize();
  if (code != 0 && several) let_rank0_go_first();
  exit(code);
}
