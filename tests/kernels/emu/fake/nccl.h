/* fake/nccl.h: the part of the NCCL API that src/runtime/comm_nccl.c calls,
 * for the emulated build (see fake/cuda_runtime_api.h): NCCL's names, types
 * and semantics, implemented in nccl_emu.c over MPI on host memory. Every
 * function is renamed to fm_emu_<name>. Not emulated, and refused with
 * ncclInvalidArgument rather than approximated: reductions of half/bf16 and
 * ncclProd/ncclAvg (fmhpc reduces neither), point-to-point. */
#ifndef FMHPC_EMU_FAKE_NCCL_H
#define FMHPC_EMU_FAKE_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct FmEmuNcclComm *ncclComm_t;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclNumTypes = 10
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

#define ncclGetErrorString fm_emu_ncclGetErrorString
#define ncclGetUniqueId    fm_emu_ncclGetUniqueId
#define ncclCommInitRank   fm_emu_ncclCommInitRank
#define ncclCommDestroy    fm_emu_ncclCommDestroy
#define ncclCommAbort      fm_emu_ncclCommAbort
#define ncclCommCount      fm_emu_ncclCommCount
#define ncclCommUserRank   fm_emu_ncclCommUserRank
#define ncclGroupStart     fm_emu_ncclGroupStart
#define ncclGroupEnd       fm_emu_ncclGroupEnd
#define ncclBroadcast      fm_emu_ncclBroadcast
#define ncclAllGather      fm_emu_ncclAllGather
#define ncclReduceScatter  fm_emu_ncclReduceScatter
#define ncclAllReduce      fm_emu_ncclAllReduce

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
