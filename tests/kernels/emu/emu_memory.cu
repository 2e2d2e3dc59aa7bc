/* emu_memory.cu: the emulated device's labelled allocation, memory query and
 * name (the alloc_for, device_mem and device_name ops of the emulated table; memory.cu, the
 * real ones, is the CUDA runtime itself and is not emulated). The device's
 * size is FMHPC_EMU_DEVICE_MEM (src/tensor/cuda/emu/simt.cpp counts the bytes
 * in use): an allocation beyond it gets the report a GPU run gets
 * (fm_cuda_msg_oom: the label, the bytes asked, the plan's figure, the
 * device's free/total memory and the hint), so tests can assert it. */
#include "cuda_common.cuh"

extern "C" void *fm_simt_alloc(int64_t bytes);
extern "C" int64_t fm_simt_mem_limit(void);
extern "C" int64_t fm_simt_mem_used(void);

extern "C" int fm_simt_device_mem(int64_t *free_bytes, int64_t *total_bytes) {
  const int64_t limit = fm_simt_mem_limit(), used = fm_simt_mem_used();
  if (free_bytes) *free_bytes = limit < 0 ? -1 : (limit > used ? limit - used : 0);
  if (total_bytes) *total_bytes = limit;
  return limit < 0 ? FM_ENODEV : FM_OK;
}

extern "C" int fm_simt_device_name(char *buf, int64_t cap) {
  if (!buf || cap <= 0) return FM_EINVAL;
  snprintf(buf, (size_t)cap, "SIMT emulator");
  return FM_OK;
}

extern "C" void *fm_simt_alloc_for(int64_t bytes, const char *label, int64_t plan_bytes) {
  int64_t f = -1, t = -1;
  if (bytes > 0 && fm_simt_device_mem(&f, &t) == FM_OK && bytes > f) {
    char msg[1024];
    fm_cuda_msg_oom(msg, (int)sizeof msg, 0, bytes, label, plan_bytes, f, t);
    fm_abort_one(1, "%s", msg);
  }
  return fm_simt_alloc(bytes);
}
