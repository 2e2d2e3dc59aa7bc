/* cuda/memory.cu: the CUDA backend's device probe, device selection, stream,
 * memory ops (alloc, free, memset, copies, synchronize) and the failure
 * reports of every CUDA file (fm__cuda_fail*). Every CUDA call is checked:
 * FM_CUDA_CHECK reports rank, device, file:line and the call and ends the job
 * (no step can continue after a failed allocation or copy); a driver too old
 * for the toolkit and out-of-memory get their own message
 * (src/tensor/cuda_msg.c). The probe and device selection return a status
 * instead, because "no GPU" is an answer. */
#include "cuda_common.cuh"

/* ---- failure reports ---------------------------------------------------------- */
static int fm__device_now(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    d = -1;
  }
  return d;
}

void fm__cuda_fail(const char *lib, const char *call, const char *file, int line, const char *what) {
  char msg[1024];
  fm_cuda_msg_call(msg, (int)sizeof msg, lib, call, file, line, fm__device_now(), what);
  fm_abort_one(1, "%s", msg);
}

/* The free/total memory of the current device, or -1 each when unknown. */
static void fm__mem_info(int64_t *free_b, int64_t *total_b) {
  size_t f = 0, t = 0;
  *free_b = *total_b = -1;
  if (cudaMemGetInfo(&f, &t) == cudaSuccess) {
    *free_b = (int64_t)f;
    *total_b = (int64_t)t;
  } else {
    (void)cudaGetLastError();
  }
}

void fm__cuda_fail_code(const char *call, const char *file, int line, cudaError_t e) {
  char msg[1024], extra[512];
  fm_cuda_msg_call(msg, (int)sizeof msg, "CUDA", call, file, line, fm__device_now(), cudaGetErrorString(e));
  extra[0] = '\0';
  if (e == cudaErrorInsufficientDriver) {
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = CUDART_VERSION;
    fm_cuda_msg_driver(extra, (int)sizeof extra, drv, rt);
  } else if (e == cudaErrorMemoryAllocation) {
    int64_t f, t;
    fm__mem_info(&f, &t);
    fm_cuda_msg_oom(extra, (int)sizeof extra, fm__device_now(), -1, NULL, 0, f, t);
  }
  if (extra[0]) fm_abort_one(1, "%s\n%s", msg, extra);
  fm_abort_one(1, "%s", msg);
}

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
    /* A driver is loaded but older than the toolkit: the GPUs are there and
     * unusable, which a user must hear (once); no driver at all (a CPU node,
     * CI) is the ordinary CPU fallback and stays quiet. */
    static int told = 0;
    int drv = 0;
    if (e == cudaErrorInsufficientDriver && !told && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) {
      char msg[512];
      fm_cuda_msg_driver(msg, (int)sizeof msg, drv, CUDART_VERSION);
      fm_warn0("%s", msg);
      told = 1;
    }
  }
  if (count) *count = n;
  return n > 0 ? FM_OK : FM_ENODEV;
}

extern "C" void *fm_cuda_alloc_for(int64_t bytes, const char *label, int64_t plan_bytes) {
  if (bytes < 0) fm_abort_one(1, "fm_cuda_alloc: negative size %lld for %s", (long long)bytes, label ? label : "?");
  if (bytes == 0) return NULL;
  void *p = NULL;
  const cudaError_t e = cudaMalloc(&p, (size_t)bytes); /* 256-byte aligned */
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    int64_t f, t;
    fm__mem_info(&f, &t);
    char msg[768];
    fm_cuda_msg_oom(msg, (int)sizeof msg, fm__device_now(), bytes, label, plan_bytes, f, t);
    fm_abort_one(1, "%s", msg);
  }
  if (e != cudaSuccess) fm__cuda_fail_code("cudaMalloc(&p, (size_t)bytes)", __FILE__, __LINE__, e);
  return p;
}

extern "C" void *fm_cuda_alloc(int64_t bytes) { return fm_cuda_alloc_for(bytes, NULL, 0); }

extern "C" int fm_cuda_device_mem(int64_t *free_bytes, int64_t *total_bytes) {
  int64_t f, t;
  fm__mem_info(&f, &t);
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return t > 0 ? FM_OK : FM_ENODEV;
}

extern "C" int fm_cuda_device_name(char *buf, int64_t cap) {
  if (!buf || cap <= 0) return FM_EINVAL;
  buf[0] = '\0';
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* leave no error behind for the next CUDA call */
    return FM_ENODEV;
  }
  snprintf(buf, (size_t)cap, "%s", prop.name);
  return FM_OK;
}

extern "C" void fm_cuda_free(void *p) {
  if (p) FM_CUDA_CHECK(cudaFree(p));
}

extern "C" void fm_cuda_memset(void *p, int value, int64_t bytes) {
  if (bytes > 0) FM_CUDA_CHECK(cudaMemsetAsync(p, value, (size_t)bytes, fm__stream));
}

/* Host -> device. Returns when the host buffer may be reused: with pinned
 * memory cudaMemcpyAsync would still be reading it, so wait for the stream. */
extern "C" void fm_cuda_copy_to_device(void *dst, const void *host_src, int64_t bytes) {
  if (bytes <= 0) return;
  FM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, (size_t)bytes, cudaMemcpyHostToDevice, fm__stream));
  FM_CUDA_CHECK(cudaStreamSynchronize(fm__stream));
}

/* Host -> device without waiting: queued on the stream; the caller keeps the
 * host buffer unchanged until its next wait (a micro-batch's upload: the step
 * ends with a read). From pageable memory the runtime stages the buffer before
 * returning; from pinned memory the DMA overlaps the queued kernels. */
extern "C" void fm_cuda_copy_to_device_async(void *dst, const void *host_src, int64_t bytes) {
  if (bytes <= 0) return;
  FM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, (size_t)bytes, cudaMemcpyHostToDevice, fm__stream));
}

/* Device -> host, after all work queued on the stream; returns when the data is there. */
extern "C" void fm_cuda_copy_to_host(void *host_dst, const void *src, int64_t bytes) {
  if (bytes <= 0) return;
  FM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, fm__stream));
  FM_CUDA_CHECK(cudaStreamSynchronize(fm__stream));
}

extern "C" void fm_cuda_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0 && dst != src)
    FM_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, fm__stream));
}

extern "C" void fm_cuda_synchronize(void) { FM_CUDA_CHECK(cudaStreamSynchronize(fm__stream)); }
