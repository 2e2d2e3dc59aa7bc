/* test_cuda_msg.c: the words of the CUDA backend's failure reports
 * (src/tensor/cuda_msg.c), which memory.cu fills with what the CUDA runtime
 * says: a failed call names the library, call, file:line and device; a driver
 * too old for the toolkit gives both versions and the fix; out of memory
 * gives the size, what it was for, the plan's figure and the free memory.
 * These run in every build, GPU or not. */
#include <stdint.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/tensor.h"

#define HAS(s, sub)                                                       \
  do {                                                                    \
    if (!strstr((s), (sub))) FM__FAIL("\"%s\" lacks \"%s\"", (s), (sub)); \
  } while (0)

FM_TEST(call_names_lib_call_place_device) {
  char b[512];
  const int n = fm_cuda_msg_call(b, sizeof b, "cuBLASLt", "cublasLtMatmul(lt, ...)", "src/tensor/cuda/gemm.cu", 210, 3,
                                 "CUBLAS_STATUS_EXECUTION_FAILED");
  FM_EXPECT_EQ_INT(n, (int)strlen(b));
  FM_EXPECT_EQ_STR(b,
                   "src/tensor/cuda/gemm.cu:210: cuBLASLt call failed on device 3: cublasLtMatmul(lt, ...): "
                   "CUBLAS_STATUS_EXECUTION_FAILED");
  fm_cuda_msg_call(b, sizeof b, "CUDA", "cudaMemcpyAsync(d, s, n)", "memory.cu", 7, -1, "an illegal memory access");
  HAS(b, "on the current device: cudaMemcpyAsync(d, s, n): an illegal memory access");
  /* truncation is snprintf's: NUL-terminated, full length returned */
  char small[16];
  const int full = fm_cuda_msg_call(small, sizeof small, "CUDA", "x", "f.cu", 1, 0, "e");
  FM_EXPECT(full > (int)sizeof small - 1);
  FM_EXPECT_EQ_INT((int)strlen(small), (int)sizeof small - 1);
}

FM_TEST(driver_too_old_gives_both_versions) {
  char b[512];
  fm_cuda_msg_driver(b, sizeof b, 12020, 13000);
  printf("%s\n", b);
  HAS(b, "driver is too old");
  HAS(b, "supports CUDA up to 12.2 (driver API 12020)");
  HAS(b, "CUDA 13.0 runtime (13000)");
  HAS(b, "hint: install a driver for CUDA >= 13.0");
  HAS(b, "toolkit <= 12.2");
  fm_cuda_msg_driver(b, sizeof b, 12080, 12090); /* minor versions: 12.8 vs 12.9 */
  HAS(b, "up to 12.8");
  HAS(b, "CUDA 12.9 runtime");
  fm_cuda_msg_driver(b, sizeof b, 0, 13000);
  printf("%s\n", b);
  HAS(b, "no NVIDIA driver is loaded");
  HAS(b, "backend='cpu'");
  FM_EXPECT(strstr(b, "too old") == NULL);
}

FM_TEST(oom_names_size_label_plan_and_free) {
  char b[768];
  fm_cuda_msg_oom(b, sizeof b, 1, (int64_t)3 << 30, "the activation arena", (int64_t)5 << 30, (int64_t)1 << 29,
                  (int64_t)141 << 30);
  printf("%s\n", b);
  HAS(b, "out of GPU memory on device 1");
  HAS(b, "allocating 3.00 GiB (3221225472 bytes) for the activation arena");
  HAS(b, "(the plan, fmhpc --check: 5.00 GiB (5368709120 bytes))");
  HAS(b, "512.00 MiB (536870912 bytes) free of 141.00 GiB");
  HAS(b,
      "hint: a smaller &train micro_batch, &model recompute = .true. (activation checkpointing), or a larger &parallel "
      "tp");
  /* no label, no plan, no memory figures: says so rather than invent them */
  fm_cuda_msg_oom(b, sizeof b, -1, 1000, NULL, 0, -1, -1);
  HAS(b, "on the current device allocating 0.00 MiB (1000 bytes) for an unnamed buffer;");
  HAS(b, "free memory unknown");
  FM_EXPECT(strstr(b, "the plan") == NULL);
  /* size unknown (a library call ran out, not fm_cuda_alloc) */
  fm_cuda_msg_oom(b, sizeof b, 0, -1, NULL, 0, 0, (int64_t)80 << 30);
  HAS(b, "allocating memory for an unnamed buffer; 0.00 MiB (0 bytes) free of 80.00 GiB");
}
