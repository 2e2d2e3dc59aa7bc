/* runtime.h: the process runtime. MPI init/finalize with the abort hook, the
 * mesh (world = dp x tp, tp innermost; local rank -> GPU), and FmComm, the one
 * collective interface every module uses (MPI on host buffers, NCCL on device
 * buffers). Only runtime/ and the parallel-HDF5 code in data/ and ckpt/ touch
 * MPI directly; only runtime/comm_nccl.c touches NCCL. */
#ifndef FMHPC_RUNTIME_H
#define FMHPC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "fmhpc/core.h"

/* MPI_Init_thread (FUNNELED), logging rank, and MPI_Abort as the abort hook. */
int fm_runtime_init(int *argc, char ***argv);
void fm_runtime_finalize(void);
int fm_world_rank(void);
int fm_world_size(void);
/* End the job on all ranks with a status every rank agrees on (the error was
 * seen by all, e.g. a bad deck): finalize and exit(code) without MPI_Abort. */
FM_NORETURN void fm_exit_all(int code);
/* CUDA devices visible to this process: 0 in a build without CUDA and when
 * cudaGetDeviceCount fails (no driver, no GPU: it errors rather than say 0). */
int fm_runtime_device_count(void);
/* cudaSetDevice(device) for this process; *now gets cudaGetDevice after it
 * and bus the device's PCI bus id ("0000:01:00.0"; two ranks of one node
 * with the same id share one GPU). FM_ECUDA (reported) when the runtime
 * refuses, FM_EUNSUPPORTED in a build without CUDA. */
int fm_runtime_set_device(int device, int *now, char *bus, size_t bus_len);
/* Binds every rank of MPI_COMM_WORLD to its node-local GPU: local rank
 * (MPI_COMM_TYPE_SHARED) modulo the devices this process sees, so
 * CUDA_VISIBLE_DEVICES as Slurm sets it is respected (one GPU per task: that
 * rank's device 0). Collective over the world; the first call binds, later
 * calls return what it chose. Rank 0 logs one line with every rank's device;
 * ranks of one node on one GPU (legal, slow) get one warning and *shared = 1
 * (NCCL refuses it). *device: the index bound. Returns FM_OK, or on every
 * rank the same error: FM_ENODEV when some rank sees no GPU, FM_ECUDA. */
int fm_runtime_bind_gpu(int *device, int *shared);
/* Every rank of MPI_COMM_WORLD says which backend it chose (kind: 0 none,
 * 1 host memory (CPU), 2 a device (CUDA)); collective, called by every rank
 * before fm_runtime_bind_gpu or any backend-dependent collective. FM_OK when
 * all chose alike; otherwise rank 0 names the first rank of each kind (a node
 * whose GPU is not visible, say, takes the CPU under backend = 'auto') and
 * every rank returns FM_ENODEV, where the ranks would otherwise wait in
 * different collectives. `task` names the caller in the message. */
int fm_runtime_agree_backend(int kind, const char *task);

/* Element types (FmDType) are in core.h. Float sums are allowed only where
 * bits don't matter (DESIGN section 6). Reductions reject FM_DT_BF16 and BOR
 * on floats with FM_EINVAL; bcast and allgather move any type. Counts are
 * elements (int64; the MPI side splits counts above INT_MAX). send == recv
 * means in place for allreduce; for allgather, send == recv + rank*n. */
typedef enum { FM_OP_SUM, FM_OP_MAX, FM_OP_MIN, FM_OP_BOR } FmRedOp;

typedef struct FmComm FmComm;
typedef struct FmCommOps {
  int (*bcast)(FmComm *c, void *buf, int64_t n, FmDType t, int root);
  /* recv holds size*n elements, rank r's n at offset r*n. */
  int (*allgather)(FmComm *c, const void *send, void *recv, int64_t n, FmDType t);
  /* send holds size*n elements; rank r receives the reduction of block r. */
  int (*reduce_scatter)(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op);
  int (*allreduce)(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op);
  int (*barrier)(FmComm *c);
  /* Frees the kind's own state (impl), NULL when it has none; the MPI
   * communicator and the FmComm itself are freed by fm_comm_destroy. */
  void (*destroy)(FmComm *c);
} FmCommOps;

struct FmComm {
  const FmCommOps *ops;
  const char *kind; /* "mpi" or "nccl" */
  int rank, size;
  MPI_Comm mpi; /* the communicator it was built from (owned) */
  void *impl;   /* backend state */
};

/* Wrap (duplicate) an MPI communicator. Host buffers. */
FmComm *fm_comm_mpi_create(MPI_Comm comm);
/* NCCL communicator over the same ranks, bootstrapped by broadcasting the
 * ncclUniqueId over `comm`; device buffers on `device`. Returns NULL and sets
 * *status to FM_EUNSUPPORTED (no CUDA build) or FM_ENODEV (no GPU). */
FmComm *fm_comm_nccl_create(MPI_Comm comm, int device, int *status);
/* 1 when this program has NCCL (comm_nccl.c built with FMHPC_HAVE_CUDA: a
 * CUDA build, or the tests' emulated NCCL), else 0. */
int fm_comm_nccl_built(void);

static inline int fm_comm_bcast(FmComm *c, void *buf, int64_t n, FmDType t, int root) {
  return c->ops->bcast(c, buf, n, t, root);
}
static inline int fm_comm_allgather(FmComm *c, const void *s, void *r, int64_t n, FmDType t) {
  return c->ops->allgather(c, s, r, n, t);
}
static inline int fm_comm_reduce_scatter(FmComm *c, const void *s, void *r, int64_t n, FmDType t, FmRedOp op) {
  return c->ops->reduce_scatter(c, s, r, n, t, op);
}
static inline int fm_comm_allreduce(FmComm *c, const void *s, void *r, int64_t n, FmDType t, FmRedOp op) {
  return c->ops->allreduce(c, s, r, n, t, op);
}
static inline int fm_comm_barrier(FmComm *c) { return c->ops->barrier(c); }
void fm_comm_destroy(FmComm *c);

/* In-place all-gather of uneven ranges: rank r's count[r] elements at
 * buf + displ[r] (in elements of t) reach the same place on every rank;
 * count and displ are alike everywhere and the ranges disjoint. One
 * MPI_Allgatherv with MPI_IN_PLACE: no staging copies. Returns
 * FM_EUNSUPPORTED, having moved nothing and said nothing, for a kind other
 * than "mpi" or more elements in all than one MPI call carries: the caller
 * gathers another way. */
int fm_comm_allgatherv_inplace(FmComm *c, void *buf, const int *count, const int *displ, FmDType t);

/* The int64 SUM reduce-scatter of the exact gradient reduction, as a
 * pipelined ring over nonblocking point-to-point: P-1 steps, each block cut
 * into chunks; a chunk is received, added to this rank's block and sent on
 * while the next chunks are in flight. Integer sums are exact (two's
 * complement, wrapping), so the bits equal fm_comm_reduce_scatter's for any
 * schedule. Sized once for blocks of n elements (no allocation per call);
 * other kinds than "mpi" fall back to fm_comm_reduce_scatter. */
typedef struct FmRing FmRing;
FmRing *fm_comm_ring_create(FmComm *c, int64_t n);
/* send holds size*n elements; recv gets the sum of every rank's block `rank`.
 * done (may be NULL) is called with ctx on each piece [off, off + len) of
 * recv as soon as it holds its final sums (the pieces cover recv once), so
 * the caller can use it while it is still in cache. */
typedef void (*FmRingDone)(void *ctx, int64_t off, int64_t len);
int fm_comm_ring_reduce_scatter_i64(FmRing *ring, const int64_t *send, int64_t *recv, FmRingDone done, void *ctx);
void fm_comm_ring_free(FmRing *ring);

/* The exact reduction's per-bucket exchange: int64 pieces summed onto the
 * rank that owns them, started as soon as a piece is final and progressed
 * without blocking, so it overlaps the rest of the backward pass. Every rank
 * declares the same pieces in the same order (fm_comm_osum_piece); a rank
 * that does not own a piece sends its `count` elements to the owner, the
 * owner adds every other rank's into its own (buf holds its part: wrapping
 * int64, exact in any order, so the bits equal a reduce-scatter's). Pieces
 * are cut into chunks; the owner receives through a fixed pool of staging
 * slots (no allocation per step once the first step has sized the queues).
 * Only "mpi" communicators of more than one rank have one (else NULL: the
 * caller keeps its blocking path). */
typedef struct FmOwnerSum FmOwnerSum;
FmOwnerSum *fm_comm_osum_create(FmComm *c);
/* buf (count int64) must stay untouched until fm_comm_osum_wait returns. */
int fm_comm_osum_piece(FmOwnerSum *x, int owner, int64_t *buf, int64_t count);
/* Drive the transfers already started and add what has arrived; never blocks. */
int fm_comm_osum_progress(FmOwnerSum *x);
/* Every declared piece summed on its owner and every send complete. */
int fm_comm_osum_wait(FmOwnerSum *x);
void fm_comm_osum_free(FmOwnerSum *x);

/* A shared-memory window over the ranks of c when they all share one node
 * (MPI-3: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), MPI_Win_allocate_shared):
 * every rank owns `bytes` of it and reads every other rank's part with plain
 * loads, with no copy through the MPI transport (the exact reduction's owner
 * sums and parameter all-gather, reduce.c). *out stays NULL, and the caller
 * keeps its point-to-point path, when c is not "mpi", has one rank, spans
 * nodes (a node holds fewer than all of c's ranks), FMHPC_REDUCE_SHM=0 on some
 * rank, the test knob fm__comm_mpi_set_shm turned it off, or some rank's
 * /dev/shm cannot hold its node's window (rank 0 logs that). Collective over
 * c; FM_EMPI after a report when MPI fails (the window's allocation: the
 * node's shared-memory file system, /dev/shm, may be full or small). */
typedef struct FmShm FmShm;
int fm_comm_shm_create(FmComm *c, int64_t bytes, FmShm **out);
/* Rank `rank`'s part (of c's ranks), mapped in this process (8-byte aligned). */
void *fm_comm_shm_part(const FmShm *x, int rank);
/* Stores made by any rank before it are seen by every rank's loads after it
 * (MPI_Win_sync, MPI_Barrier on the node, MPI_Win_sync: MPI-3's shared-memory
 * model; the barrier waits in MPI, no spin of ours). Collective. */
int fm_comm_shm_sync(FmShm *x);
void fm_comm_shm_free(FmShm *x);

/* Deterministic sum of n floats (host buffers) over the communicator's
 * ranks, in place (ordered.c): every rank gets ((x_0 + x_1) + x_2) + ...
 * added in rank order by this code after an all-gather, never by the
 * library's float reduction, so a fixed rank count gives the same bits on
 * every rank and run to run (tp = 2: one addition per element). For the
 * tensor-parallel activation sums. scratch holds
 * fm_comm_sum_ordered_scratch(c, n) floats. */
int fm_comm_sum_ordered(FmComm *c, float *buf, int64_t n, float *scratch);
int64_t fm_comm_sum_ordered_scratch(const FmComm *c, int64_t n);
/* The same for a communicator of P ranks (the plan's figure, no communicator). */
int64_t fm_comm_sum_ordered_scratch_p(int P, int64_t n);

/* Broadcast a string (any length) from root; *s is replaced on other ranks
 * with a malloc'd copy (free with free()); their old *s is not freed. A NULL
 * on root arrives as NULL everywhere. Goes over c->mpi with host buffers, so
 * it works for NCCL communicators too. */
int fm_comm_bcast_str(FmComm *c, char **s, int root);

/* Files named by shell globs, the same list on every rank. Rank 0 expands the
 * patterns with glob(3) (each sorted, in pattern order; blank patterns are
 * skipped), keeps the regular files with their sizes and broadcasts the list.
 * A pattern that matches no regular file goes to miss(ctx, i, pattern, NULL,
 * 0) on rank 0, a match that cannot be stat'ed (a dangling symlink) to
 * miss(ctx, i, pattern, path, errno); miss reports it and returns a status
 * (FM_EIO when miss is NULL); the first such status ends the expansion and
 * every rank returns it. */
typedef struct FmFileList {
  int n;
  char **path;
  int64_t *bytes;
} FmFileList;
typedef int (*FmGlobMiss)(void *ctx, int i, const char *pattern, const char *path, int err);
int fm_comm_glob(FmComm *c, char *const *patterns, int npatterns, FmGlobMiss miss, void *ctx, FmFileList *out);
void fm_file_list_free(FmFileList *l);

/* The mesh: world = dp x tp with tp innermost (a tp group sits inside a
 * node). dp_rank/tp_rank are this rank's coordinates. */
typedef struct FmMesh {
  int world_rank, world_size;
  int dp, tp;                        /* degrees */
  int dp_rank, tp_rank;              /* coordinates */
  int local_rank, local_size;        /* on this node (MPI_COMM_TYPE_SHARED) */
  int device;                        /* GPU index (local_rank mod devices), -1 for none */
  FmComm *world, *dp_comm, *tp_comm; /* MPI: host buffers */
  FmComm *dp_nccl, *tp_nccl;         /* NCCL over the same ranks, device buffers; NULL until fm_mesh_nccl */
} FmMesh;

/* Build the mesh over MPI_COMM_WORLD. Fails with FM_EINVAL (and a message on
 * rank 0 to stderr) when tp does not divide the world or a tp group would
 * cross a node. ndevices < 0 means "ask the backend". */
int fm_mesh_create(FmMesh *m, int tp, int ndevices);
/* The same layout computed for a hypothetical world (fmhpc --check --ranks),
 * as seen by world rank 0; no MPI: communicators NULL, device -1, and the
 * node is unknown (local_rank -1, local_size 0).
 * On FM_EINVAL it prints the rule and a hint (rank 0 only). */
int fm_mesh_plan(FmMesh *m, int world_size, int tp);
/* The layout as seen by `world_rank`: dp_rank = world_rank / tp, tp_rank =
 * world_rank % tp. Silent; on FM_EINVAL `why` (if not NULL) gets the message. */
int fm_mesh_layout(FmMesh *m, int world_size, int tp, int world_rank, char *why, size_t why_len);
void fm_mesh_destroy(FmMesh *m); /* frees the NCCL communicators too */
/* The NCCL twins of dp_comm and tp_comm (m->dp_nccl, m->tp_nccl) on
 * m->device, for collectives on CUDA device buffers (the exact reduction's
 * int64 reduce-scatter, the block maxima, the parameter all-gather). Every
 * world rank calls it, once, after fm_mesh_create; all return the same
 * status: FM_OK, FM_EUNSUPPORTED (no NCCL in this build), FM_ENODEV (no GPU
 * for some rank) or FM_ENCCL/FM_ECUDA (reported with the call, file:line and
 * rank); on failure both stay NULL. The MPI communicators stay for host
 * buffers (strings, losses, metadata). */
int fm_mesh_nccl(FmMesh *m);

/* &parallel comm: which collectives the run's step uses. choice is the deck's
 * FM_COMM_* (deck.h; the same values as FmCommChoice, which the runtime may
 * not include), cuda_backend 1 when the step's buffers are CUDA device memory.
 * 'auto': NCCL on the CUDA backend in a build with NCCL, else MPI; 'mpi':
 * MPI; 'nccl': NCCL, or FM_EUNSUPPORTED on the CPU backend or in a build
 * without NCCL. Writes the reason to why (n bytes; "auto: NCCL, ...", the
 * refusal) and, on a refusal, *hint (a static string; NULL otherwise).
 * *use_nccl: 1 NCCL, 0 MPI (0 on a refusal). */
typedef enum { FM_COMM_CHOICE_AUTO = 0, FM_COMM_CHOICE_MPI = 1, FM_COMM_CHOICE_NCCL = 2 } FmCommChoice;
int fm_comm_choose(int choice, int cuda_backend, int *use_nccl, char *why, size_t n, const char **hint);
/* The same with the build's NCCL given (tests). */
int fm__comm_choose(int choice, int cuda_backend, int have_nccl, int *use_nccl, char *why, size_t n, const char **hint);

/* ---- test knobs (internal; the defaults are what production uses) ------- */
/* Largest element count one MPI call carries (default INT_MAX); returns the
 * old value. Tests set it small to exercise the >INT_MAX splitting. */
int64_t fm__comm_mpi_set_max_count(int64_t max_count);
/* Elements per ring chunk for rings created afterwards (default 128Ki, also
 * capped by max_count; 0: no ring, fm_comm_reduce_scatter instead, for
 * bench/reduce's side-by-side; < 0: the default); returns the old value.
 * Tests set it small to run many chunks through the pipeline. */
int64_t fm__comm_mpi_set_ring_chunk(int64_t chunk);
/* Elements per chunk of fm_comm_osum pieces created afterwards (default
 * 256Ki; < 1: the default); returns the old value. Tests set it small. */
int64_t fm__comm_mpi_set_osum_chunk(int64_t chunk);
/* fm_comm_shm_create for windows created afterwards: on (1, the default) or
 * off (0: the point-to-point paths, as across nodes); ranks_per_node > 0
 * pretends nodes of that many consecutive ranks of the communicator (0: the
 * real split). Returns the old on/off. Tests force the multi-node fallback. */
int fm__comm_mpi_set_shm(int on, int ranks_per_node);
/* MPI collective calls issued by comm_mpi.c since start (to see the split). */
int64_t fm__comm_mpi_calls(void);
/* Pretend nodes hold `ranks_per_node` consecutive world ranks (0: the real
 * MPI_COMM_TYPE_SHARED split); lets one machine test the tp-in-a-node rule. */
void fm__mesh_set_ranks_per_node(int ranks_per_node);

#endif
