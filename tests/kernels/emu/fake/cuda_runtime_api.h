/* fake/cuda_runtime_api.h: the part of the CUDA runtime API that fmhpc's
 * host-side CUDA code (src/runtime/comm_nccl.c, tests/kernels/test_cuda_nccl.c)
 * calls, for the emulated build (tests/kernels/tests.cmake, target
 * fm_nccl_emu): the same declarations, implemented in nccl_emu.c on host
 * memory. A "device" pointer is a host pointer, as in fmhpc_emu's kernel
 * table. Every name is renamed to fm_emu_<name> so that a build with the real
 * CUDA runtime linked beside it (FMHPC_CUDA=ON) sees no clash.
 *
 * The emulated machine has FMHPC_EMU_GPUS devices (default 8; 0 makes
 * cudaGetDeviceCount fail as on a node without a GPU). FMHPC_EMU_VISIBLE_DEVICES
 * (a comma-separated list of those, as Slurm sets CUDA_VISIBLE_DEVICES, e.g.
 * one GPU per task) restricts what this process sees and renumbers it from 0;
 * its own name, so a real CUDA_VISIBLE_DEVICES cannot change the emulator. */
#ifndef FMHPC_EMU_FAKE_CUDA_RUNTIME_API_H
#define FMHPC_EMU_FAKE_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

typedef struct FmEmuStream *cudaStream_t;

#define cudaGetDeviceCount    fm_emu_cudaGetDeviceCount
#define cudaGetLastError      fm_emu_cudaGetLastError
#define cudaGetErrorString    fm_emu_cudaGetErrorString
#define cudaSetDevice         fm_emu_cudaSetDevice
#define cudaGetDevice         fm_emu_cudaGetDevice
#define cudaDeviceGetPCIBusId fm_emu_cudaDeviceGetPCIBusId
#define cudaMalloc            fm_emu_cudaMalloc
#define cudaFree              fm_emu_cudaFree
#define cudaMemset            fm_emu_cudaMemset
#define cudaMemcpy            fm_emu_cudaMemcpy
#define cudaStreamCreate      fm_emu_cudaStreamCreate
#define cudaStreamDestroy     fm_emu_cudaStreamDestroy
#define cudaStreamSynchronize fm_emu_cudaStreamSynchronize
#define cudaDeviceSynchronize fm_emu_cudaDeviceSynchronize

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
/* "0000:XX:00.0" with XX the emulated physical device (hex). */
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);

/* Tests only: the next call of the function named `fn` (its CUDA or NCCL
 * name, e.g. "ncclAllReduce", "cudaStreamSynchronize") on this process fails,
 * with an error that says it was injected. FMHPC_EMU_FAIL=NAME does the same
 * from the environment (fmhpc_emu). NULL clears. */
void fm_emu_fail_next(const char *fn);
/* Tests only: cudaStreamSynchronize calls so far (comm_nccl.c waits for its
 * stream after each collective; fmhpc_emu's FMHPC_EMU_COPY_STATS prints it). */
long long fm_emu_stream_syncs(void);

#ifdef __cplusplus
}
#endif

#endif
