/* cuda_blaslt.c: cuBLASLt is opened at run time, not linked (gemm.cu's
 * loader). Loading libcublasLt runs its initialisers: 25k page faults and
 * ~200 MB of resident memory in every process that links it, CPU runs and
 * each MPI rank included. These cases check, in a CUDA build and without a
 * GPU, that a process starts without it, that the loader finds the library
 * the build was compiled against and resolves every function gemm.cu calls
 * (cublasLtGetVersion then answers), and the messages of the two failures.
 * Registered only in a CUDA build (tests/CMakeLists.txt). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fm_test.h"
#include "fmhpc/backend.h"
#include "fmhpc/core.h"

/* 1 when a mapping of this process names `lib` (/proc/self/maps). */
static int mapped(const char *lib) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  if (!f) return -1;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
  fclose(f);
  return found;
}

FM_TEST(not_loaded_at_start) {
  FM_EXPECT_EQ_INT(mapped("libcudart.so"), 1); /* linked: the check reads the maps it means to read */
  FM_EXPECT_EQ_INT(mapped("libcublasLt"), 0);
  FM_EXPECT_EQ_INT(mapped("libcublas.so"), 0);
  FM_EXPECT(fm_cuda_blaslt_version() == -1);
}

FM_TEST(loads_and_resolves) {
  char why[1024] = "";
  FM_EXPECT_EQ_INT(fm_cuda_blaslt_load(NULL, why, (int)sizeof why), FM_OK);
  FM_EXPECT_EQ_STR(why, "");
  FM_EXPECT_EQ_INT(mapped("libcublasLt"), 1);
  /* cublasLtGetVersion: major * 10000 + minor * 100 + patch, of the toolkit the build used */
  const int64_t v = fm_cuda_blaslt_version();
  printf("cuBLASLt %lld\n", (long long)v);
  FM_EXPECT_EQ_INT((int)(v / 10000), FMHPC_TEST_CUDA_MAJOR);
  /* a second load keeps the table */
  FM_EXPECT_EQ_INT(fm_cuda_blaslt_load(NULL, why, (int)sizeof why), FM_OK);
  FM_EXPECT(fm_cuda_blaslt_version() == v);
}

FM_TEST(missing_library_message) {
  char why[1024] = "";
  FM_EXPECT_EQ_INT(fm_cuda_blaslt_load("/nonexistent/libcublasLt.so.99", why, (int)sizeof why), FM_ENODEV);
  printf("%s\n", why);
  FM_EXPECT_CONTAINS(why, "cannot load cuBLASLt (/nonexistent/libcublasLt.so.99: ");
  FM_EXPECT_CONTAINS(why, "), which the CUDA backend's GEMMs need\n");
  FM_EXPECT_CONTAINS(why,
                     "hint: put the CUDA toolkit's library directory on LD_LIBRARY_PATH (module load cuda), "
                     "or set &train backend = 'cpu'");
  FM_EXPECT(fm_cuda_blaslt_version() == -1);
}

FM_TEST(wrong_library_message) {
  char why[1024] = "", want[256];
  FM_EXPECT_EQ_INT(fm_cuda_blaslt_load("libz.so.1", why, (int)sizeof why), FM_ENODEV);
  printf("%s\n", why);
  snprintf(want, sizeof want,
           "libz.so.1 has no cublasLtGetVersion: it is not the cuBLASLt %d this build was compiled against\n",
           FMHPC_TEST_CUDA_MAJOR);
  FM_EXPECT_CONTAINS(why, want);
  snprintf(want, sizeof want, "hint: put the CUDA %d toolkit's library directory first on LD_LIBRARY_PATH",
           FMHPC_TEST_CUDA_MAJOR);
  FM_EXPECT_CONTAINS(why, want);
  FM_EXPECT(fm_cuda_blaslt_version() == -1);
}
