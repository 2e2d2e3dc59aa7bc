/* test_mfu_peak.c: MFU's peak (fm_train_mfu_peak, train.c). A device the
 * vendor table names gets its dense peak at the compute precision; the
 * expected figures are NVIDIA's datasheets (dense, no sparsity: the
 * datasheets' "with sparsity" bf16 figures halved), not the table's own
 * numbers: H100 SXM5 and H200 989.4 bf16 / 66.9 fp32 TFLOP/s, H100 PCIe
 * 756 / 51.2, H100 NVL and H200 NVL 835 / 60, GH200 as the H100 SXM5,
 * A100 312 / 19.5. The names are cudaGetDeviceProperties' (the first one
 * as the H200 in session 18 reported it). A device the table lacks is
 * measured (a GEMM), and says so; the CPU is always measured. The stand-in
 * device is the CPU backend with host_accessible cleared and a device_name
 * that reports a chosen name. */
#include <string.h>

#include "fm_test.h"
#include "fmhpc/backend.h"
#include "fmhpc/train.h"

static const char *g_name;

static int fake_device_name(char *buf, int64_t cap) {
  snprintf(buf, (size_t)cap, "%s", g_name);
  return FM_OK;
}

static FmBackend device_named(const char *name) {
  FmBackend be = *fm_backend_cpu();
  be.host_accessible = 0;
  be.device_name = fake_device_name;
  g_name = name;
  return be;
}

FM_TEST(vendor_peaks_by_device_name) {
  static const struct {
    const char *name;
    double bf16, fp32; /* TFLOP/s */
  } want[] = {{"NVIDIA H200", 989.4, 66.9},           {"NVIDIA H200 NVL", 835.0, 60.0},
              {"NVIDIA GH200 480GB", 989.4, 66.9},    {"NVIDIA H100 80GB HBM3", 989.4, 66.9},
              {"NVIDIA H100 PCIe", 756.0, 51.2},      {"NVIDIA H100 NVL", 835.0, 60.0},
              {"NVIDIA A100-SXM4-80GB", 312.0, 19.5}, {"NVIDIA A100 80GB PCIe", 312.0, 19.5}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    FmBackend be = device_named(want[i].name);
    char src[256];
    const double bf16 = fm_train_mfu_peak(&be, true, src, sizeof src);
    FM_EXPECT_NEAR(bf16, want[i].bf16 * 1e12, 1e-12, 0);
    FM_EXPECT(strstr(src, want[i].name) && strstr(src, "vendor's dense bf16"));
    const double fp32 = fm_train_mfu_peak(&be, false, src, sizeof src);
    FM_EXPECT_NEAR(fp32, want[i].fp32 * 1e12, 1e-12, 0);
    FM_EXPECT(strstr(src, want[i].name) && strstr(src, "fp32 (no TF32)"));
  }
}

FM_TEST(unknown_device_is_measured_and_says_so) {
  FmBackend be = device_named("NVIDIA L4");
  char src[256];
  const double p = fm_train_mfu_peak(&be, false, src, sizeof src);
  FM_EXPECT(p > 1e8 && p < 1e14); /* a host GEMM: between 0.1 GFLOP/s and 100 TFLOP/s */
  FM_EXPECT(strncmp(src, "measured: fp32 GEMM on ", 23) == 0);
  FM_EXPECT(strstr(src, "on NVIDIA L4 (not in the vendor table)") != NULL);
}

FM_TEST(cpu_is_measured) {
  char src[256];
  const double p = fm_train_mfu_peak(fm_backend_cpu(), false, src, sizeof src);
  FM_EXPECT(p > 1e8 && p < 1e14);
  FM_EXPECT(strcmp(src, "measured: this rank's fp32 GEMM on 512^3") == 0);
}
