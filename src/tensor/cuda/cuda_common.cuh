/* cuda_common.cuh: what every file in src/tensor/cuda/ needs: the C headers
 * the CUDA runtime, the stream the ops run on, and the launch
 * shape of the elementwise kernels. Private to src/tensor/cuda/. */
#ifndef FMHPC_TENSOR_CUDA_COMMON_CUH
#define FMHPC_TENSOR_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "fmhpc/backend.h" /* C headers carry their own extern "C" */
#include "fmhpc/core.h"

/* The stream set with fm_cuda_set_stream (memory.cu). */
static inline cudaStream_t fm__cuda_stream(void) { return (cudaStream_t)fm_cuda_get_stream(); }

/* Elementwise kernels: 256 threads a block, grid-stride loops with int64
 * indices (n may exceed 2^31), and at most FM__CUDA_MAX_BLOCKS blocks: enough
 * to fill an H200 (132 SMs x 8 resident blocks) many times over, small enough
 * that each thread does several elements on huge arrays. */
#define FM__CUDA_BLOCK      256
#define FM__CUDA_MAX_BLOCKS 16384
static inline unsigned fm__cuda_grid(int64_t n) {
  int64_t blocks = (n + FM__CUDA_BLOCK - 1) / FM__CUDA_BLOCK;
  return (unsigned)(blocks < FM__CUDA_MAX_BLOCKS ? blocks : FM__CUDA_MAX_BLOCKS);
}
#define FM__CUDA_FOR_EACH(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#endif
