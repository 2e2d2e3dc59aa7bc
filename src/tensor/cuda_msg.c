/* cuda_msg.c: the CUDA backend's failure messages (a failed call, a driver
 * too old for the toolkit, out of device memory) as plain formatting, in
 * every build, so the words are tested where there is no GPU
 * (tests/unit/test_cuda_msg.c); src/tensor/cuda/memory.cu fills in the values
 * the CUDA runtime reports. */
#include <stdio.h>

#include "fmhpc/tensor.h"

/* "13.0" from 13000 (CUDA's 1000 * major + 10 * minor). */
static void cuda_version(char *out, size_t n, int v) { snprintf(out, n, "%d.%d", v / 1000, (v % 1000) / 10); }

/* Bytes as "1.50 GiB (1610612736 bytes)". */
static void bytes_text(char *out, size_t n, int64_t b) {
  const double g = (double)b / (double)(1 << 30);
  if (b >= ((int64_t)1 << 30))
    snprintf(out, n, "%.2f GiB (%lld bytes)", g, (long long)b);
  else
    snprintf(out, n, "%.2f MiB (%lld bytes)", (double)b / (double)(1 << 20), (long long)b);
}

static void device_text(char *out, size_t n, int device) {
  if (device >= 0)
    snprintf(out, n, "device %d", device);
  else
    snprintf(out, n, "the current device");
}

int fm_cuda_msg_call(char *buf, int n, const char *lib, const char *call, const char *file, int line, int device,
                     const char *what) {
  char dev[32];
  device_text(dev, sizeof dev, device);
  return snprintf(buf, (size_t)(n > 0 ? n : 0), "%s:%d: %s call failed on %s: %s: %s", file ? file : "?", line,
                  lib ? lib : "CUDA", dev, call ? call : "?", what ? what : "unknown error");
}

int fm_cuda_msg_driver(char *buf, int n, int driver_version, int runtime_version) {
  char rt[16], drv[16];
  cuda_version(rt, sizeof rt, runtime_version);
  const size_t sz = (size_t)(n > 0 ? n : 0);
  if (driver_version <= 0)
    return snprintf(buf, sz,
                    "no NVIDIA driver is loaded (cudaErrorInsufficientDriver); this fmhpc was built with the CUDA %s "
                    "runtime (%d); hint: on a GPU node load the NVIDIA driver (nvidia-smi should list the GPUs), "
                    "or run with backend='cpu'",
                    rt, runtime_version);
  cuda_version(drv, sizeof drv, driver_version);
  return snprintf(buf, sz,
                  "the NVIDIA driver is too old for this build: it supports CUDA up to %s (driver API %d), fmhpc was "
                  "built with the CUDA %s runtime (%d); hint: install a driver for CUDA >= %s, or rebuild fmhpc with a "
                  "CUDA toolkit <= %s (nvidia-smi shows the driver's CUDA version)",
                  drv, driver_version, rt, runtime_version, rt, drv);
}

int fm_cuda_msg_oom(char *buf, int n, int device, int64_t bytes, const char *label, int64_t plan_bytes,
                    int64_t free_bytes, int64_t total_bytes) {
  char dev[32], ask[64], plan[128], mem[160];
  device_text(dev, sizeof dev, device);
  if (bytes >= 0)
    bytes_text(ask, sizeof ask, bytes);
  else
    snprintf(ask, sizeof ask, "memory");
  plan[0] = '\0';
  if (plan_bytes > 0) {
    char pb[64];
    bytes_text(pb, sizeof pb, plan_bytes);
    snprintf(plan, sizeof plan, " (the plan, fmhpc --check: %s)", pb);
  }
  if (free_bytes >= 0 && total_bytes > 0) {
    char fb[64], tb[64];
    bytes_text(fb, sizeof fb, free_bytes);
    bytes_text(tb, sizeof tb, total_bytes);
    snprintf(mem, sizeof mem, "%s free of %s", fb, tb);
  } else {
    snprintf(mem, sizeof mem, "free memory unknown");
  }
  return snprintf(buf, (size_t)(n > 0 ? n : 0),
                  "out of GPU memory on %s allocating %s for %s%s; %s; hint: a smaller &train micro_batch, &model "
                  "recompute = .true. (activation checkpointing), or a larger &parallel tp (fmhpc --check DECK "
                  "prints the per-GPU plan and the smallest layout that fits)",
                  dev, ask, label ? label : "an unnamed buffer", plan, mem);
}
