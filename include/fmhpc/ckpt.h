/* ckpt.h: checkpoints (DESIGN section 8). One parallel-HDF5 file per
 * checkpoint, written collectively by all data-parallel ranks, every tensor in
 * its unsharded shape under its canonical name; the commit protocol, retention,
 * resume ('auto' | 'none' | a path) on any rank count, and the preemption flag
 * (SIGUSR1/SIGTERM). Not here: what the train loop does with them (train.c).
 *
 * File layout (format "fmhpc-ckpt" version 1):
 *   /params/<name>         f32, the parameter's shape      e.g. /params/h.0.attn.wq
 *   /optim/<s>/<name>      f32, the parameter's shape      s = m, v or h (optimizer state)
 *   /reduce/amax_prev      f32 (nblocks)  exact reduction's block scales
 *   /spike/losses          f64 (window)   loss-spike window (when window > 0)
 * Each dataset carries the attribute sha256; the root group carries the run
 * state: step, samples (data position: the sampler is a pure function of
 * seed and step), seed, skipped, redone, spike_* scalars, optimizer, model,
 * n_params, world_size, deck (the resolved deck text), fmhpc_version, git,
 * hdf5_version, mpi_version, host, cpu, checksum_scheme.
 *
 * Checksums ("sha256-blocks-v1"): a dataset's elements are cut into pieces at
 * the boundaries of FM_DIST_BLOCK-element blocks of the flat parameter vector
 * (for /reduce and /spike, of the dataset itself); the checksum is the SHA-256
 * of the concatenated SHA-256 digests of its pieces, in element order, over
 * the little-endian bytes. ZeRO-1 shards are cut at multiples of the block, so
 * every piece lies inside one rank's shard at any rank count: each rank hashes
 * its own pieces, the digests are combined exactly (bitwise OR of zero-padded
 * arrays), and writer and reader at different rank counts compute the same
 * value. regression/ckpt_tool.py recomputes it with h5py.
 *
 * Commit protocol: rank 0 checks the free space, writes DIR/latest.tmp
 * ("step_N.h5\n") and creates DIR/step_N.h5.partial (N zero-padded to 8
 * digits) as an empty HDF5 file whose full size it allocates on disk
 * (fallocate(2)); the status is agreed over all ranks; all ranks open it,
 * write and close it (each flat array: its datasets created collectively,
 * then each rank writes its shard's parts with independent 1 MiB writes,
 * hashing them as it goes and starting their writeback (sync_file_range),
 * then the sha256 attributes); the status is agreed; rank 0 fsyncs the file, renames
 * it to step_N.h5, fsyncs the directory, renames latest.tmp to `latest` and
 * fsyncs the directory. A crash at any point leaves the previous step_*.h5
 * and `latest` intact; a .partial is never loaded. Then the oldest
 * checkpoints beyond `keep` and stale .partial files of earlier steps are
 * removed, on a thread of rank 0 that the next write, fm_ckpt_list and the
 * process's exit wait for. A failed write removes its .partial and latest.tmp.
 *
 * Disk full: the reservation is the one place a full disk shows (ENOSPC on
 * rank 0, agreed before any collective I/O), so no rank meets ENOSPC inside
 * a collective write or H5Fclose, where with HDF5 1.10.8 / Open MPI 4.1.4 the
 * ranks take different paths (seen: a hang in H5Fclose, or a segfault at
 * MPI_Finalize on the rank whose close failed). A disk that fills up after
 * the reservation cannot fail the write; the commit needs no new block (it
 * renames). A file system without fallocate support is written unreserved
 * (a warning says so) and only the free-space check protects it.
 *
 * Test hooks (environment, read on every rank; for tests only):
 *   FMHPC_CKPT_TEST_KILL_AT=N    while writing the checkpoint of step N, the
 *                                last rank SIGKILLs itself after the params
 *                                datasets (a crash mid-write).
 *   FMHPC_CKPT_TEST_KILL_COMMIT=N:P  rank 0 SIGKILLs itself in step N's
 *                                commit: P=1 after the .partial's fsync, 2
 *                                after its rename, 3 after `latest` moved.
 *   FMHPC_CKPT_TEST_SIGNAL_AT=N  after step N the last rank raises SIGUSR1 on
 *                                itself (a deterministic preemption).
 *   FMHPC_CKPT_TEST_NO_SPACE_CHECK  skip the free-space check before a write.
 *   FMHPC_CKPT_TEST_NO_RESERVE   skip the reservation (shows the old failure).
 *   FMHPC_CKPT_TEST_HOLD=N:POINT:FILE  rank 0 creates FILE.held at POINT of
 *                                step N's write (start: before the directory
 *                                check; reserve: before the file is created;
 *                                write: after the params datasets) and waits
 *                                for FILE.go (at most 120 s): a test fills
 *                                the disk or changes permissions then.
 * Each params/optim dataset also has the attribute flat_offset (its first
 * element's index in the flat vector) so a reader can recompute checksums. */
#ifndef FMHPC_CKPT_H
#define FMHPC_CKPT_H

#include <stdint.h>
#include <stdio.h>

#include "fmhpc/dist.h"
#include "fmhpc/optim.h"
#include "fmhpc/runtime.h"
#include "fmhpc/tensor.h"

/* fm_train_run's return (positive, not an FM_E*) when it stopped on a signal
 * after checkpointing; main turns it into exit status FM_EXIT_REQUEUE. */
#define FM_CKPT_PREEMPTED 1
#define FM_EXIT_REQUEUE 3

enum { FM_CKPT_RUN_ID_LEN = 33 };

/* What a checkpoint holds: the sharded arrays as the table dist.h owns
 * (walked in order: one dataset group per FM_DIST_FLAT_SHARD entry, one
 * dataset per whole entry), and the run's scalars. */
typedef struct FmCkptState {
  FmDistState dist; /* a read fills the shard [lo, hi) of each flat entry: the caller all-gathers params */
  FmSpike *spike;   /* the window's scalars (its buffer is the "spike/losses" entry) */
  int64_t step, skipped, redone, samples, seed;
  const char *optim_name, *model_name;
  const char *deck_text; /* write: the resolved deck, stored whole (a variable-length string attribute) */
  const char *run_name;  /* write only: &run name */
  /* Which run wrote it: made at a fresh start, carried by every resume (a read
   * fills it; "" for a checkpoint older than run ids). Retention and
   * resume='auto' consider only checkpoints of one run id. */
  char run_id[FM_CKPT_RUN_ID_LEN];
  char *deck_read; /* read: the stored deck (malloc'd, the caller frees; NULL when the file has none) */
  /* write: the backend's pinned GEMM plans (gemm_plans_record: the device
   * and toolkit that chose them, one line per plan), rank 0's text stored as
   * the gemm_plans attribute; NULL or "" (CPU) writes none. read: that text
   * (malloc'd, the caller frees; NULL when the file has none). */
  const char *gemm_plans;
  char *gemm_plans_read;
  /* read: the file's /reduce/amax_prev has another block count than the
   * table's (written at another tensor-parallel layout: the scales are cut
   * per tp shard): it is not loaded and the table's scales are kept. */
  int scales_skipped;
} FmCkptState;

/* Write DIR/step_<step>.h5 with the commit protocol and retention (keep the
 * newest `keep` of s->run_id; other runs' files are left alone). Collective over comm. 0, or FM_EIO/FM_EHDF5 on every rank
 * with the reason on err (rank 0); `latest` then still names the previous
 * checkpoint. `written` (may be NULL) gets the committed path. */
int fm_ckpt_write(const char *dir, const FmCkptState *s, int keep, FmComm *comm, FILE *err, char *written,
                  size_t written_len);

/* Where this rank's time went in its last fm_ckpt_write (seconds on the
 * monotonic clock; the benchmark prints the slowest rank's): the directory
 * and free-space check with latest.tmp, the file's creation and reservation,
 * the parallel open, the run-state attributes, the checksums (hashing and
 * the digests' exchange), the wait for the flush of each flat array's data
 * that runs while the rank hashes it, dataset creation and attributes, each
 * rank's independent data writes of its shard, the one agreement per flat
 * array after its writes, the close (HDF5's flush of metadata and
 * truncation), then rank 0's commit: the file's fsync, the
 * renames with the directory's fsyncs, and retention. total is the call;
 * cpu the process's CPU seconds in it (user + system: the page-cache copy
 * is system time). */
typedef struct FmCkptProfile {
  double prepare, create, open, run_state, hash, flush, dset_meta, dset_write, agree, close, fsync, rename, retain,
      total, cpu;
} FmCkptProfile;
void fm_ckpt_last_profile(FmCkptProfile *p);

/* Rank 0's line after a write of `seconds` committed `path`: its size and
 * rate, "checkpoint: PATH, 83.89 MiB in 1.20 s (69.9 MiB/s)" (fm_log0). */
void fm_ckpt_log_written(const char *path, double seconds);

/* Load one checkpoint file into s (w gets [lo,hi) only: the caller all-gathers;
 * state, amax_prev, spike and the scalars are filled). Every dataset's
 * checksum is verified. Collective. 0, or FM_ECKPT/FM_EIO on every rank with
 * `why` (may be NULL) holding a message naming the file and the dataset. */
int fm_ckpt_read(const char *path, FmCkptState *s, FmComm *comm, char *why, size_t why_len);

/* The weights only (every rank the whole vector w, checksums verified), for
 * eval, generate and ifd; deck (may be NULL) gets the stored deck (malloc'd,
 * the caller frees; NULL when the file has none). Collective. 0, or
 * FM_ECKPT with `why`. */
int fm_ckpt_read_params(const char *path, const FmTensorTable *params, float *w, FmComm *comm, char **deck, char *why,
                        size_t why_len);

/* Resume as &ckpt resume says: 'none' (returns 1), a path (that file; failure
 * is an error), or 'auto': the file `latest` names, then older checkpoints of
 * the same run id, each failing one skipped with a warning naming the reason
 * (no `latest`, hence nothing committed there: returns 1, a fresh start);
 * candidates present but none valid is FM_ECKPT. 0 when loaded; `loaded`
 * gets the path. A fresh start in a directory holding other
 * runs' checkpoints says so. Collective. */
int fm_ckpt_resume(const char *resume, const char *dir, FmCkptState *s, FmComm *comm, FILE *err, char *loaded,
                   size_t loaded_len);

/* Candidate checkpoints in dir, newest first (rank-local scan; the caller
 * decides who scans). Returns the count; *paths is malloc'd (free each and
 * the array). .partial files are never listed. */
int fm_ckpt_list(const char *dir, char ***paths);

/* A fresh run id (rank 0's clock, pid and host mixed with the seed), the
 * same on every rank. Collective. */
void fm_ckpt_new_run_id(FmComm *comm, int64_t seed, char id[FM_CKPT_RUN_ID_LEN]);

/* Where a checkpoint of state s would not fit in dir's free space now: the
 * message with both figures in why (returned), else NULL. Each write checks
 * with it, and a run at start. Local (no collective): the lead rank asks. */
const char *fm_ckpt_space_short(const char *dir, const FmCkptState *s, char *why, size_t n);

/* SIGUSR1 and SIGTERM set a flag (nothing else happens in the handler). */
void fm_ckpt_signals_install(void);
int fm_ckpt_signal_pending(void);
void fm_ckpt_signal_clear(void);

#endif
