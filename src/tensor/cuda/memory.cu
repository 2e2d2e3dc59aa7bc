/* cuda/memory.cu: the CUDA backend's device probe, device selection, stream,
 * and memory ops (alloc, free, memset, copies, synchronize). Every CUDA call
 * is checked: FM_CHECK_CUDA reports rank, file:line and the call and ends the
 * job (no step can continue after a failed allocation or copy); the probe and
 * device selection return a status instead, because "no GPU" is an answer. */
#include "cuda_common.cuh"

/* One stream for every op in this process; NULL is the legacy default stream. */
static cudaStream_t fm__stream = NULL;

extern "C" void fm_cuda_set_stream(void *stream) { fm__stream = (cudaStream_t)stream; }
extern "C" void *fm_cuda_get_stream(void) { return (void *)fm__stream; }

extern "C" int fm_cuda_device_count(int *count) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  /* Without a driver this is error 35 (cudaErrorInsufficientDriver) and n is
   * left unwritten: the return code decides, not n. Clear the error so a later
   * cudaGetLastError() check does not report it against an unrelated call. */
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  if (count) *count = n;
  return n > 0 ? FM_OK : FM_ENODEV;
}

extern "C" int fm_cuda_select_device(int device) {
  int n = 0;
  if (fm_cuda_device_count(&n) != 0 || device < 0 || device >= n) return FM_ENODEV;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    fm__report_call("CUDA", "cudaSetDevice(device)", __FILE__, __LINE__, cudaGetErrorString(e));
    return FM_ECUDA;
  }
  return FM_OK;
}

extern "C" void *fm_cuda_alloc(int64_t bytes) {
  if (bytes < 0) fm_abort_one(1, "fm_cuda_alloc: negative size %lld", (long long)bytes);
  if (bytes == 0) return NULL;
  void *p = NULL;
  FM_CHECK_CUDA(cudaMalloc(&p, (size_t)bytes)); /* 256-byte aligned */
  return p;
}

extern "C" void fm_cuda_free(void *p) {
  if (p) FM_CHECK_CUDA(cudaFree(p));
}

extern "C" void fm_cuda_memset(void *p, int value, int64_t bytes) {
  if (bytes > 0) FM_CHECK_CUDA(cudaMemsetAsync(p, value, (size_t)bytes, fm__stream));
}

/* Host -> device. Returns when the host buffer may be reused: with pinned
 * memory cudaMemcpyAsync would still be reading it, so wait for the stream. */
extern "C" void fm_cuda_copy_to_device(void *dst, const void *host_src, int64_t bytes) {
  if (bytes <= 0) return;
  FM_CHECK_CUDA(cudaMemcpyAsync(dst, host_src, (size_t)bytes, cudaMemcpyHostToDevice, fm__stream));
  FM_CHECK_CUDA(cudaStreamSynchronize(fm__stream));
}

/* Device -> host, after all work queued on the stream; returns when the data is there. */
extern "C" void fm_cuda_copy_to_host(void *host_dst, const void *src, int64_t bytes) {
  if (bytes <= 0) return;
  FM_CHECK_CUDA(cudaMemcpyAsync(host_dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, fm__stream));
  FM_CHECK_CUDA(cudaStreamSynchronize(fm__stream));
}

extern "C" void fm_cuda_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0 && dst != src)
    FM_CHECK_CUDA(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, fm__stream));
}

extern "C" void fm_cuda_synchronize(void) { FM_CHECK_CUDA(cudaStreamSynchronize(fm__stream)); }
