/* nccl_emu.c: the CUDA runtime calls and the NCCL collectives of
 * fake/cuda_runtime_api.h and fake/nccl.h on host memory over MPI, so that
 * src/runtime/comm_nccl.c (compiled a second time with FMHPC_HAVE_CUDA
 * against those headers) runs in CI without a GPU: its bootstrap, its ops
 * and its error paths (tests/kernels/tests.cmake: fm_nccl_emu, fmhpc_emu,
 * test_emu_nccl).
 *
 * Semantics kept from NCCL: the buffer layouts (ncclReduceScatter's count is
 * per rank and rank r keeps block r; ncclAllGather's count is per rank; in
 * place when recv + rank * count == send), one device per rank of a
 * communicator (two ranks of one host on one device is ncclInvalidUsage, as
 * NCCL's "Duplicate GPU detected"), a communicator made from a unique id that
 * one rank generated and the others received out of band. Integer sums and
 * max/min are exact whatever the algorithm, so MPI's equal NCCL's bit for bit;
 * fp32 sums may differ in order, as between two NCCL versions.
 * Not NCCL: every call completes before it returns (the "stream" is the
 * host), and calls between ncclGroupStart and ncclGroupEnd run at once, which
 * is the same for collectives that every rank issues in the same order.
 *
 * Bootstrap without a world-wide collective: the id names the world rank that
 * generated it and a serial number; in ncclCommInitRank every member sends its
 * rank to that world rank (tag from the serial), which answers with the
 * member list, and the members alone create the communicator
 * (MPI_Comm_create_group). So communicators of different groups may be
 * created in any order, as with NCCL. The generating rank must be a member
 * (comm_nccl.c: rank 0 of the communicator). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake/cuda_runtime_api.h"
#include "fake/nccl.h"

/* ---- injected failures (tests) ------------------------------------------ */
static char fail_name[64];
static int fail_env_read;

void fm_emu_fail_next(const char *fn) {
  fail_env_read = 1; /* an explicit choice overrides the environment */
  snprintf(fail_name, sizeof fail_name, "%s", fn ? fn : "");
}

/* 1 when `fn` was chosen to fail now (once). */
static int injected(const char *fn) {
  if (!fail_env_read) {
    fail_env_read = 1;
    const char *e = getenv("FMHPC_EMU_FAIL");
    if (e) snprintf(fail_name, sizeof fail_name, "%s", e);
  }
  if (!fail_name[0] || strcmp(fail_name, fn) != 0) return 0;
  fail_name[0] = '\0';
  fprintf(stderr, "NCCL/CUDA emulation: %s fails as injected (FMHPC_EMU_FAIL / fm_emu_fail_next)\n", fn);
  return 1;
}

/* ---- CUDA runtime --------------------------------------------------------- */
static int current_device;
static cudaError_t last_error;

struct FmEmuStream {
  int device;
};

static cudaError_t cuda_ret(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

static int machine_devices(void) {
  const char *e = getenv("FMHPC_EMU_GPUS");
  if (!e || !e[0]) return 8;
  char *end = NULL;
  long n = strtol(e, &end, 10);
  return end && *end == '\0' && n >= 0 && n <= 1024 ? (int)n : 0;
}

/* The physical device behind visible index `i` (FMHPC_EMU_VISIBLE_DEVICES,
 * as CUDA_VISIBLE_DEVICES: the list up to its first invalid entry), or -1;
 * *count gets the number visible. */
static int visible(int i, int *count) {
  const int n = machine_devices();
  const char *e = getenv("FMHPC_EMU_VISIBLE_DEVICES");
  if (!e) {
    if (count) *count = n;
    return i >= 0 && i < n ? i : -1;
  }
  int k = 0, phys = -1;
  const char *p = e;
  while (*p) {
    char *end = NULL;
    long d = strtol(p, &end, 10);
    if (end == p || d < 0 || d >= n) break;
    if (k == i) phys = (int)d;
    k++;
    p = end;
    if (*p != ',') break;
    p++;
  }
  if (count) *count = k;
  return phys;
}

static int device_count(void) {
  int n = 0;
  (void)visible(0, &n);
  return n;
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (injected("cudaGetDeviceCount")) return cuda_ret(cudaErrorNoDevice);
  int n = device_count();
  *count = n;
  return n > 0 ? cudaSuccess : cuda_ret(cudaErrorNoDevice); /* as the runtime without a GPU */
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
  }
  return "unrecognized error code";
}

cudaError_t cudaSetDevice(int device) {
  if (injected("cudaSetDevice")) return cuda_ret(cudaErrorInvalidDevice);
  if (device < 0 || device >= device_count()) return cuda_ret(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  const int phys = visible(device, NULL);
  if (!pciBusId || len < 13) return cuda_ret(cudaErrorInvalidValue);
  if (phys < 0) return cuda_ret(cudaErrorInvalidDevice);
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", phys);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  if (!p) return cuda_ret(cudaErrorInvalidValue);
  *p = NULL;
  if (injected("cudaMalloc")) return cuda_ret(cudaErrorMemoryAllocation);
  *p = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256); /* cudaMalloc's alignment; never NULL for 0 */
  return *p ? cudaSuccess : cuda_ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  if (injected("cudaMemset")) return cuda_ret(cudaErrorInvalidValue);
  if (!p && bytes) return cuda_ret(cudaErrorInvalidValue);
  if (bytes) memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  if (injected("cudaMemcpy")) return cuda_ret(cudaErrorInvalidValue);
  if ((!dst || !src) && bytes) return cuda_ret(cudaErrorInvalidValue);
  if ((int)kind < 0 || kind > cudaMemcpyDefault) return cuda_ret(cudaErrorInvalidValue);
  if (bytes) memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
  if (injected("cudaStreamCreate")) return cuda_ret(cudaErrorMemoryAllocation);
  *s = calloc(1, sizeof **s);
  if (!*s) return cuda_ret(cudaErrorMemoryAllocation);
  (*s)->device = current_device;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cuda_ret(cudaErrorInvalidResourceHandle);
  free(s);
  return cudaSuccess;
}

/* Work is done when issued: a synchronize has nothing to wait for. */
static long long g_stream_syncs;
long long fm_emu_stream_syncs(void) { return g_stream_syncs; }

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (injected("cudaStreamSynchronize")) return cuda_ret(cudaErrorInvalidResourceHandle);
  if (!s) return cuda_ret(cudaErrorInvalidResourceHandle);
  g_stream_syncs++;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

/* ---- NCCL ----------------------------------------------------------------- */
struct FmEmuNcclComm {
  MPI_Comm mpi; /* the members, ranked as NCCL ranks */
  int rank, nranks, device;
};

/* What an id carries: a magic, the generating world rank and its serial. */
typedef struct {
  uint32_t magic;
  int32_t root;
  int32_t serial;
} IdBody;
enum { ID_MAGIC = 0x4e43454du, TAG_BASE = 16384, TAG_SPAN = 16000 };

static int group_depth;

/* NCCL_DEBUG=WARN's line, always: the emulation says why it refused. */
static ncclResult_t warn(ncclResult_t r, const char *fn, const char *why) {
  int wr = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  fprintf(stderr, "NCCL WARN (emulated, world rank %d) %s: %s\n", wr, fn, why);
  return r;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclNumResults:
      break;
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int32_t serial;
  if (injected("ncclGetUniqueId")) return ncclSystemError;
  if (!id) return warn(ncclInvalidArgument, "ncclGetUniqueId", "id is NULL");
  IdBody b = {ID_MAGIC, 0, serial++};
  if (MPI_Comm_rank(MPI_COMM_WORLD, &b.root) != MPI_SUCCESS) return ncclSystemError;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &b, sizeof b);
  return ncclSuccess;
}

/* Members of the id's communicator, in NCCL rank order: world ranks. The
 * generating rank collects every member's (rank, world rank) and answers
 * with the list, or with -1 in list[0] when the ranks are not 0..n-1 once. */
static ncclResult_t rendezvous(const IdBody *b, int nranks, int rank, int *list) {
  const int tag = TAG_BASE + (int)(b->serial % TAG_SPAN);
  int wr = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  if (wr != b->root) {
    if (MPI_Send(&rank, 1, MPI_INT, b->root, tag, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Recv(list, nranks, MPI_INT, b->root, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return ncclSystemError;
    return list[0] >= 0 ? ncclSuccess : ncclInvalidArgument;
  }
  int *from = calloc((size_t)nranks, sizeof *from);
  if (!from) return ncclSystemError;
  for (int i = 0; i < nranks; i++) list[i] = -1;
  int ok = rank >= 0 && rank < nranks;
  if (ok) list[rank] = wr;
  for (int k = 1; k < nranks; k++) {
    int r = -1;
    MPI_Status st;
    if (MPI_Recv(&r, 1, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st) != MPI_SUCCESS) {
      free(from);
      return ncclSystemError;
    }
    from[k] = st.MPI_SOURCE;
    if (r < 0 || r >= nranks || list[r] >= 0)
      ok = 0;
    else
      list[r] = st.MPI_SOURCE;
  }
  if (!ok) list[0] = -1;
  for (int k = 1; k < nranks; k++)
    if (MPI_Send(list, nranks, MPI_INT, from[k], tag, MPI_COMM_WORLD) != MPI_SUCCESS) ok = 0;
  free(from);
  return ok ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm) return warn(ncclInvalidArgument, "ncclCommInitRank", "comm is NULL");
  *comm = NULL;
  IdBody b;
  memcpy(&b, id.internal, sizeof b);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (b.magic != ID_MAGIC || b.root < 0 || b.root >= world)
    return warn(ncclInvalidArgument, "ncclCommInitRank", "the unique id was not made by ncclGetUniqueId");
  if (nranks < 1 || nranks > world || rank < 0 || rank >= nranks)
    return warn(ncclInvalidArgument, "ncclCommInitRank", "rank or nranks out of range");
  if (injected("ncclCommInitRank")) return ncclSystemError;
  int *list = calloc((size_t)nranks, sizeof *list);
  if (!list) return ncclSystemError;
  ncclResult_t r = rendezvous(&b, nranks, rank, list);
  if (r != ncclSuccess) {
    free(list);
    return warn(r, "ncclCommInitRank", "the ranks given for this id are not 0..nranks-1, each once");
  }
  MPI_Group wg, g;
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  MPI_Group_incl(wg, nranks, list, &g);
  const int tag = TAG_BASE + (int)(b.serial % TAG_SPAN);
  int mrc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c);
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  free(list);
  if (mrc != MPI_SUCCESS || c == MPI_COMM_NULL) return ncclSystemError;
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  /* One device per rank on a host (NCCL's "Duplicate GPU detected"): every
   * member sees every (host, physical device) pair, so all agree on the
   * verdict; ranks that each see one other GPU as device 0 do not clash. */
  typedef struct {
    char host[MPI_MAX_PROCESSOR_NAME];
    int device;
  } Where;
  Where me, *all = calloc((size_t)nranks, sizeof *all);
  if (!all) return ncclSystemError;
  memset(&me, 0, sizeof me);
  int len = 0;
  MPI_Get_processor_name(me.host, &len);
  me.device = visible(current_device, NULL);
  MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, c);
  int dup_a = -1, dup_b = -1;
  for (int i = 0; i < nranks && dup_a < 0; i++)
    for (int j = i + 1; j < nranks; j++)
      if (all[i].device == all[j].device && strcmp(all[i].host, all[j].host) == 0) {
        dup_a = i, dup_b = j;
        break;
      }
  free(all);
  if (dup_a >= 0) {
    char why[160];
    snprintf(why, sizeof why, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", dup_a, dup_b,
             current_device);
    MPI_Comm_free(&c);
    return warn(ncclInvalidUsage, "ncclCommInitRank", why);
  }
  ncclComm_t k = calloc(1, sizeof *k);
  if (!k) {
    MPI_Comm_free(&c);
    return ncclSystemError;
  }
  k->mpi = c;
  k->rank = rank;
  k->nranks = nranks;
  k->device = current_device;
  *comm = k;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return warn(ncclInvalidArgument, "ncclCommDestroy", "comm is NULL");
  MPI_Comm_free(&comm->mpi);
  free(comm);
  return ncclSuccess;
}

/* Local, like NCCL's: the MPI communicator is left (freeing it is collective). */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || !count) return warn(ncclInvalidArgument, "ncclCommCount", "NULL argument");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || !rank) return warn(ncclInvalidArgument, "ncclCommUserRank", "NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return warn(ncclInvalidUsage, "ncclGroupEnd", "not in a group call");
  group_depth--;
  return ncclSuccess;
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    case ncclNumTypes:
      break;
  }
  return 0;
}

/* The MPI type that reduces as NCCL does; MPI_DATATYPE_NULL for the 16-bit
 * floats, which move (as bytes) but are not reduced here. */
static MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16:
    case ncclNumTypes:
      break;
  }
  return MPI_DATATYPE_NULL;
}

/* What every collective checks first, as NCCL's argument checks do. */
static ncclResult_t check(const char *fn, ncclComm_t comm, cudaStream_t stream, ncclDataType_t t, const void *send,
                          const void *recv, size_t count) {
  if (injected(fn)) return ncclSystemError;
  if (!comm) return warn(ncclInvalidArgument, fn, "comm is NULL");
  if (!stream) return warn(ncclInvalidArgument, fn, "stream is NULL (the emulation takes no default stream)");
  if (type_size(t) == 0) return warn(ncclInvalidArgument, fn, "invalid datatype");
  if (count > 0 && (!send || !recv)) return warn(ncclInvalidArgument, fn, "NULL buffer");
  if (count > (size_t)INT32_MAX) return warn(ncclInvalidArgument, fn, "count too large for the emulation");
  if (comm->device != current_device) return warn(ncclInvalidUsage, fn, "the current device is not the comm's");
  return ncclSuccess;
}

static ncclResult_t reduce_type(const char *fn, ncclDataType_t t, ncclRedOp_t op, MPI_Datatype *mt, MPI_Op *mo) {
  *mt = mpi_type(t);
  if (*mt == MPI_DATATYPE_NULL) return warn(ncclInvalidArgument, fn, "16-bit float reductions are not emulated");
  switch (op) {
    case ncclSum:
      *mo = MPI_SUM;
      return ncclSuccess;
    case ncclMax:
      *mo = MPI_MAX;
      return ncclSuccess;
    case ncclMin:
      *mo = MPI_MIN;
      return ncclSuccess;
    case ncclProd:
    case ncclAvg:
    case ncclNumOps:
      break;
  }
  return warn(ncclInvalidArgument, fn, "reduction op not emulated (sum, max and min are)");
}

static ncclResult_t mpi_ok(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r =
      check("ncclBroadcast", comm, stream, datatype, comm && comm->rank == root ? sendbuff : recvbuff, recvbuff, count);
  if (r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks) return warn(ncclInvalidArgument, "ncclBroadcast", "root out of range");
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * type_size(datatype);
  if (comm->rank == root && sendbuff != recvbuff) memmove(recvbuff, sendbuff, bytes);
  return mpi_ok(MPI_Bcast(recvbuff, (int)bytes, MPI_BYTE, root, comm->mpi));
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = check("ncclAllGather", comm, stream, datatype, sendbuff, recvbuff, sendcount);
  if (r != ncclSuccess) return r;
  if (sendcount == 0) return ncclSuccess;
  const size_t bytes = sendcount * type_size(datatype);
  if ((size_t)comm->nranks * bytes > (size_t)INT32_MAX)
    return warn(ncclInvalidArgument, "ncclAllGather", "count too large for the emulation");
  const char *mine = (const char *)recvbuff + (size_t)comm->rank * bytes;
  const void *src = sendbuff == (const void *)mine ? MPI_IN_PLACE : sendbuff; /* NCCL's in-place layout */
  return mpi_ok(MPI_Allgather(src, (int)bytes, MPI_BYTE, recvbuff, (int)bytes, MPI_BYTE, comm->mpi));
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = check("ncclReduceScatter", comm, stream, datatype, sendbuff, recvbuff, recvcount);
  if (r != ncclSuccess) return r;
  MPI_Datatype mt;
  MPI_Op mo;
  if ((r = reduce_type("ncclReduceScatter", datatype, op, &mt, &mo)) != ncclSuccess) return r;
  if (recvcount == 0) return ncclSuccess;
  if ((size_t)comm->nranks * recvcount > (size_t)INT32_MAX)
    return warn(ncclInvalidArgument, "ncclReduceScatter", "count too large for the emulation");
  const size_t bytes = recvcount * type_size(datatype);
  const char *mine = (const char *)sendbuff + (size_t)comm->rank * bytes;
  if ((const void *)mine == (const void *)recvbuff) { /* NCCL's in-place layout: recv is send's block `rank` */
    void *tmp = malloc(bytes);
    if (!tmp) return ncclSystemError;
    int rc = MPI_Reduce_scatter_block(sendbuff, tmp, (int)recvcount, mt, mo, comm->mpi);
    memcpy(recvbuff, tmp, bytes);
    free(tmp);
    return mpi_ok(rc);
  }
  return mpi_ok(MPI_Reduce_scatter_block(sendbuff, recvbuff, (int)recvcount, mt, mo, comm->mpi));
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r = check("ncclAllReduce", comm, stream, datatype, sendbuff, recvbuff, count);
  if (r != ncclSuccess) return r;
  MPI_Datatype mt;
  MPI_Op mo;
  if ((r = reduce_type("ncclAllReduce", datatype, op, &mt, &mo)) != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  return mpi_ok(MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff, (int)count, mt, mo, comm->mpi));
}
