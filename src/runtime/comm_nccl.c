/* comm_nccl.c: FmComm over NCCL on device buffers, with its own CUDA stream,
 * bootstrapped by broadcasting the ncclUniqueId over MPI; and
 * fm_runtime_device_count. The only file of runtime/ that calls CUDA or NCCL
 * (DESIGN section 2). Without FMHPC_HAVE_CUDA it compiles to stubs that say
 * FM_EUNSUPPORTED; with CUDA but no usable GPU (CI: cudaGetDeviceCount fails
 * rather than report 0) creation returns FM_ENODEV on every rank.
 *
 * The ops are blocking, like the MPI ones: inputs must be complete when the
 * call is made (work on the legacy default stream is ordered before ours
 * automatically; other streams must be synchronized by the caller), and the
 * outputs are complete when it returns. */
#include "fmhpc/runtime.h"

#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FMHPC_HAVE_CUDA

int fm_runtime_device_count(void) { return 0; }

int fm_runtime_set_device(int device, int *now, char *bus, size_t bus_len) {
  (void)device;
  if (now) *now = -1;
  if (bus && bus_len) bus[0] = '\0';
  return FM_EUNSUPPORTED;
}

int fm_comm_nccl_built(void) { return 0; }

FmComm *fm_comm_nccl_create(MPI_Comm comm, int device, int *status) {
  if (status) *status = FM_EUNSUPPORTED;
  return NULL;
}

#else

#include <cuda_runtime_api.h>
#include <nccl.h>

int fm_runtime_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* leave no error behind for the next CUDA call */
    return 0;
  }
  return n;
}

int fm_comm_nccl_built(void) { return 1; }

int fm_runtime_set_device(int device, int *now, char *bus, size_t bus_len) {
  if (now) *now = -1;
  if (bus && bus_len) bus[0] = '\0';
  cudaError_t e = cudaSetDevice(device);
  int got = -1;
  if (e == cudaSuccess) e = cudaGetDevice(&got);
  if (e != cudaSuccess) {
    fm_err(
        "cudaSetDevice(%d) failed: %s (CUDA error %d) (%s:%d)\nhint: the rank's node-local GPU is its local rank "
        "modulo the GPUs it sees (CUDA_VISIBLE_DEVICES)",
        device, cudaGetErrorString(e), (int)e, __FILE__, __LINE__);
    (void)cudaGetLastError();
    return FM_ECUDA;
  }
  if (now) *now = got;
  if (bus && bus_len > 0) {
    char id[64];
    if (cudaDeviceGetPCIBusId(id, (int)sizeof id, got) == cudaSuccess) {
      snprintf(bus, bus_len, "%s", id);
    } else {
      (void)cudaGetLastError(); /* unknown bus: sharing is then judged by the index */
      snprintf(bus, bus_len, "device %d", got);
    }
  }
  return FM_OK;
}

typedef struct NcclImpl {
  ncclComm_t nccl;
  cudaStream_t stream;
  int device;
  int *scratch; /* one device int for the barrier */
} NcclImpl;

/* A failed NCCL or CUDA call: the library, the call's text, file:line, the
 * rank (fm_err's prefix) and the device; the macros return, so the caller
 * chooses between recovering and aborting. */
static void report_dev(const char *lib, const char *call, const char *file, int line, int device, const char *what) {
  char w[512];
  if (device >= 0)
    snprintf(w, sizeof w, "%s (device %d)", what, device);
  else
    snprintf(w, sizeof w, "%s (no device bound yet)", what);
  fm__report_call(lib, call, file, line, w);
}
#define NCCL_RET(call)                                                                      \
  do {                                                                                      \
    ncclResult_t cn__e = (call);                                                            \
    if (cn__e != ncclSuccess) {                                                             \
      report_dev("NCCL", #call, __FILE__, __LINE__, im->device, ncclGetErrorString(cn__e)); \
      return FM_ENCCL;                                                                      \
    }                                                                                       \
  } while (0)
#define CUDA_RET(call)                                                                      \
  do {                                                                                      \
    cudaError_t cn__e = (call);                                                             \
    if (cn__e != cudaSuccess) {                                                             \
      report_dev("CUDA", #call, __FILE__, __LINE__, im->device, cudaGetErrorString(cn__e)); \
      return FM_ECUDA;                                                                      \
    }                                                                                       \
  } while (0)

static int bad_arg(const FmComm *c, const char *op, int status, const char *why) {
  if (c->rank == 0) fm_err("fm_comm_%s (nccl): %s", op, why);
  return status;
}

static ncclDataType_t nccl_type(FmDType t) {
  switch (t) {
    case FM_DT_U8:
      return ncclUint8;
    case FM_DT_I32:
      return ncclInt32;
    case FM_DT_U32:
      return ncclUint32;
    case FM_DT_I64:
      return ncclInt64;
    case FM_DT_U64:
      return ncclUint64;
    case FM_DT_F32:
      return ncclFloat32;
    case FM_DT_F64:
      return ncclFloat64;
    case FM_DT_BF16:
      return ncclBfloat16;
  }
  return ncclNumTypes;
}

static int check_args(const FmComm *c, const char *op, FmDType t, int64_t n) {
  if (nccl_type(t) == ncclNumTypes) return bad_arg(c, op, FM_EINVAL, "unknown element type");
  if (n < 0) return bad_arg(c, op, FM_EINVAL, "count must be >= 0");
  return 0;
}

/* The same rules as the MPI side, so code is written once against FmComm;
 * NCCL has no bitwise OR, so BOR is refused here rather than emulated. */
static int reduce_op(const FmComm *c, const char *op, FmDType t, FmRedOp r, ncclRedOp_t *no) {
  const char *why = fm__comm_reduce_refusal(t, r);
  if (why) return bad_arg(c, op, FM_EINVAL, why);
  if (r == FM_OP_BOR) return bad_arg(c, op, FM_EUNSUPPORTED, "NCCL has no bitwise OR; hint: use the MPI communicator");
  *no = r == FM_OP_SUM ? ncclSum : r == FM_OP_MAX ? ncclMax : ncclMin;
  return 0;
}

static int finish(NcclImpl *im) {
  CUDA_RET(cudaStreamSynchronize(im->stream));
  return 0;
}

static int op_bcast(FmComm *c, void *buf, int64_t n, FmDType t, int root) {
  NcclImpl *im = c->impl;
  int rc = check_args(c, "bcast", t, n);
  if (rc) return rc;
  if (root < 0 || root >= c->size) return bad_arg(c, "bcast", FM_EINVAL, "root out of range");
  if (n == 0) return 0;
  CUDA_RET(cudaSetDevice(im->device));
  NCCL_RET(ncclBroadcast(buf, buf, (size_t)n, nccl_type(t), root, im->nccl, im->stream));
  return finish(im);
}

static int op_allgather(FmComm *c, const void *send, void *recv, int64_t n, FmDType t) {
  NcclImpl *im = c->impl;
  int rc = check_args(c, "allgather", t, n);
  if (rc || n == 0) return rc;
  CUDA_RET(cudaSetDevice(im->device));
  NCCL_RET(ncclAllGather(send, recv, (size_t)n, nccl_type(t), im->nccl, im->stream));
  return finish(im);
}

static int op_reduce_scatter(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op) {
  NcclImpl *im = c->impl;
  ncclRedOp_t no = ncclSum;
  int rc = check_args(c, "reduce_scatter", t, n);
  if (!rc) rc = reduce_op(c, "reduce_scatter", t, op, &no);
  if (rc || n == 0) return rc;
  CUDA_RET(cudaSetDevice(im->device));
  NCCL_RET(ncclReduceScatter(send, recv, (size_t)n, nccl_type(t), no, im->nccl, im->stream));
  return finish(im);
}

static int op_allreduce(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op) {
  NcclImpl *im = c->impl;
  ncclRedOp_t no = ncclSum;
  int rc = check_args(c, "allreduce", t, n);
  if (!rc) rc = reduce_op(c, "allreduce", t, op, &no);
  if (rc || n == 0) return rc;
  CUDA_RET(cudaSetDevice(im->device));
  NCCL_RET(ncclAllReduce(send, recv, (size_t)n, nccl_type(t), no, im->nccl, im->stream));
  return finish(im);
}

/* NCCL has no barrier: a one-int allreduce every rank must join does it. */
static int op_barrier(FmComm *c) {
  NcclImpl *im = c->impl;
  CUDA_RET(cudaSetDevice(im->device));
  NCCL_RET(ncclAllReduce(im->scratch, im->scratch, 1, ncclInt32, ncclSum, im->nccl, im->stream));
  return finish(im);
}

/* Frees what exists; `abort_nccl` when other ranks may not have a matching
 * communicator (a failed creation), where ncclCommDestroy could wait on them. */
static void impl_free(NcclImpl *im, int abort_nccl) {
  if (!im) return;
  if (im->device >= 0) (void)cudaSetDevice(im->device);
  if (im->nccl) {
    ncclResult_t e = abort_nccl ? ncclCommAbort(im->nccl) : ncclCommDestroy(im->nccl);
    if (e != ncclSuccess)
      report_dev("NCCL", abort_nccl ? "ncclCommAbort(im->nccl)" : "ncclCommDestroy(im->nccl)", __FILE__, __LINE__,
                 im->device, ncclGetErrorString(e));
  }
  if (im->stream) (void)cudaStreamDestroy(im->stream);
  if (im->scratch) (void)cudaFree(im->scratch);
  free(im);
}

/* The NCCL state only; fm_comm_destroy frees the MPI companion and c. */
static void op_destroy(FmComm *c) { impl_free(c->impl, 0); }

static const FmCommOps comm_nccl_ops = {
    .bcast = op_bcast,
    .allgather = op_allgather,
    .reduce_scatter = op_reduce_scatter,
    .allreduce = op_allreduce,
    .barrier = op_barrier,
    .destroy = op_destroy,
};

/* This rank's half of creation: the device, the stream, the scratch int. */
static int local_setup(NcclImpl *im, int device, int rank) {
  int ndev = fm_runtime_device_count();
  if (ndev == 0) return FM_ENODEV;
  if (device < 0 || device >= ndev) {
    fm_err("fm_comm_nccl_create: device %d, but this process sees %d GPU(s) (rank %d)", device, ndev, rank);
    return FM_ENODEV;
  }
  im->device = device;
  CUDA_RET(cudaSetDevice(device));
  CUDA_RET(cudaStreamCreate(&im->stream));
  CUDA_RET(cudaMalloc((void **)&im->scratch, sizeof(int)));
  CUDA_RET(cudaMemset(im->scratch, 0, sizeof(int)));
  return 0;
}

/* Every rank returns the same status: the lowest code any rank saw. */
static int agree(int st, MPI_Comm comm) {
  int all = 0;
  FM_CHECK_MPI(MPI_Allreduce(&st, &all, 1, MPI_INT, MPI_MIN, comm));
  return all;
}

FmComm *fm_comm_nccl_create(MPI_Comm comm, int device, int *status) {
  int rank = 0, size = 1;
  FM_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  FM_CHECK_MPI(MPI_Comm_size(comm, &size));
  NcclImpl *im = fm_xcalloc(1, sizeof *im);
  im->device = -1;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int st = local_setup(im, device, rank);
  if (st == 0 && rank == 0) {
    ncclResult_t e = ncclGetUniqueId(&id);
    if (e != ncclSuccess) {
      report_dev("NCCL", "ncclGetUniqueId(&id)", __FILE__, __LINE__, im->device, ncclGetErrorString(e));
      st = FM_ENCCL;
    }
  }
  /* ncclCommInitRank waits for all ranks: agree first so none waits forever. */
  st = agree(st, comm);
  if (st == 0) {
    FM_CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm));
    ncclResult_t e = ncclCommInitRank(&im->nccl, size, id, rank);
    if (e != ncclSuccess) {
      report_dev("NCCL", "ncclCommInitRank(&im->nccl, size, id, rank)", __FILE__, __LINE__, im->device,
                 ncclGetErrorString(e));
      im->nccl = NULL;
      st = FM_ENCCL;
    }
    st = agree(st, comm);
  }
  if (status) *status = st;
  if (st != 0) {
    impl_free(im, 1);
    return NULL;
  }
  FmComm *c = fm_xcalloc(1, sizeof *c);
  c->ops = &comm_nccl_ops;
  c->kind = "nccl";
  c->impl = im;
  /* Host-side companion for fm_comm_bcast_str and small host collectives. */
  FM_CHECK_MPI(MPI_Comm_dup(comm, &c->mpi));
  FM_CHECK_MPI(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
  c->rank = rank;
  c->size = size;
  return c;
}

#endif
