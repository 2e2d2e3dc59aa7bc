/* fmhpc_emu.c: the fmhpc executable with an emulated GPU, built for tests
 * only (tests/kernels/tests.cmake, target fmhpc_emu). backend = 'cuda' (and
 * 'auto') is the table of CUDA kernels of src/tensor/cuda/ compiled for the
 * host SIMT emulator (src/tensor/cuda/emu): every kernel runs as blocks of
 * fibers in host memory, and the table says host_accessible = 0, so the
 * train loop takes its device path (device arenas, host copies for the
 * reduction and the optimizer) exactly as on a GPU. Ops without a CUDA kernel
 * (ops.def `nocuda`) stay NULL, as in the real CUDA table.
 *
 * FMHPC_EMU_SCHEDULE picks the thread order of every launch: `forward`
 * (default), `reverse`, or `random:SEED`. Two schedules giving different bits
 * is a race or an order-dependent reduction in some kernel.
 * FMHPC_EMU_DROP_OP=NAME leaves op NAME out of the table (tests of the
 * backend choice: a build that lacks an op the run needs).
 * FMHPC_EMU_COPY_STATS=1 counts the host<->device traffic: every
 * copy_to_device and copy_to_host through the table, in bytes and calls,
 * printed by each process at exit as
 *   fmhpc_emu: rank R copies: to_device B bytes in N calls, to_host B bytes in N calls
 * and, for each device buffer the program named (fm_backend_name_buffer:
 * the weights, the optimizer state, the gradient shard), the bytes of those
 * copies that landed in it or came from it:
 *   fmhpc_emu: rank R buffer 'NAME' (B bytes): to_device B bytes, to_host B bytes
 * (tests/kernels/emu_train.sh, case traffic: what a training step moves),
 * and what a step waits for or allocates on the device:
 *   fmhpc_emu: rank R device: A allocations, W waits (H reads, U uploads, S synchronize calls), Q queued uploads
 * (the emulated runtime's calls, fm_simt_mem_calls, through the table or a
 * kernel file's own: A counts allocations; a wait is a call that waits for
 * the stream on a GPU, a host sync: copy_to_host (a read), copy_to_device (an
 * upload that returns when the host buffer may be reused) and synchronize; Q
 * counts copy_to_device_async, which does not wait. Apart:
 *   fmhpc_emu: rank R nccl: N stream synchronizations
 * (comm_nccl.c waits for its own stream after each collective). emu_train.sh, case sync:
 * the waits of a step do not grow with its micro-batches, and a step after
 * the first allocates nothing).
 *
 * Everything else is src/main.c, compiled here with main renamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/simt.h"
#include "fmhpc/backend.h"

#include "emu_backend.h"

int fmhpc_main(int argc, char **argv);
long long fm_emu_stream_syncs(void); /* kernels/emu/nccl_emu.c: the NCCL communicator's stream waits */

static FmBackend table;
static long long h2d_bytes, h2d_calls, d2h_bytes, d2h_calls;

/* Buffers the program named (fm_backend_name_buffer): each copy whose device
 * address falls inside one is counted under its name too. */
enum { MAX_NAMED = 32 };
static struct {
  const char *base;
  int64_t bytes;
  char name[48];
  long long to_device, to_host;
} named[MAX_NAMED];
static int nnamed;

static void name_buffer(const void *p, int64_t bytes, const char *name) {
  if (nnamed == MAX_NAMED) return;
  named[nnamed].base = p;
  named[nnamed].bytes = bytes;
  snprintf(named[nnamed].name, sizeof named[nnamed].name, "%s", name);
  nnamed++;
}
static int named_at(const void *p) {
  for (int i = 0; i < nnamed; i++)
    if ((const char *)p >= named[i].base && (const char *)p < named[i].base + named[i].bytes) return i;
  return -1;
}
static void counted_to_device(void *dst, const void *src, int64_t bytes) {
  h2d_bytes += bytes;
  h2d_calls++;
  const int i = named_at(dst);
  if (i >= 0) named[i].to_device += bytes;
  emu.copy_to_device(dst, src, bytes);
}
static void counted_to_host(void *dst, const void *src, int64_t bytes) {
  d2h_bytes += bytes;
  d2h_calls++;
  const int i = named_at(src);
  if (i >= 0) named[i].to_host += bytes;
  emu.copy_to_host(dst, src, bytes);
}
static void print_copy_stats(void) { /* the launcher's rank (Open MPI, else PMI, else -1): MPI is finalised here */
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMI_RANK");
  fprintf(stderr, "fmhpc_emu: rank %s copies: to_device %lld bytes in %lld calls, to_host %lld bytes in %lld calls\n",
          rank ? rank : "-1", h2d_bytes, h2d_calls, d2h_bytes, d2h_calls);
  FmSimtMemCalls c;
  fm_simt_mem_calls(&c);
  fprintf(stderr,
          "fmhpc_emu: rank %s device: %llu allocations, %llu waits (%llu reads, %llu uploads, %llu synchronize "
          "calls), %llu queued uploads\n",
          rank ? rank : "-1", (unsigned long long)c.allocs, (unsigned long long)(c.reads + c.uploads + c.syncs),
          (unsigned long long)c.reads, (unsigned long long)c.uploads, (unsigned long long)c.syncs,
          (unsigned long long)c.queued);
  fprintf(stderr, "fmhpc_emu: rank %s nccl: %lld stream synchronizations\n", rank ? rank : "-1", fm_emu_stream_syncs());
  for (int i = 0; i < nnamed; i++)
    fprintf(stderr, "fmhpc_emu: rank %s buffer '%s' (%lld bytes): to_device %lld bytes, to_host %lld bytes\n",
            rank ? rank : "-1", named[i].name, (long long)named[i].bytes, named[i].to_device, named[i].to_host);
}

int main(int argc, char **argv) {
  const char *s = getenv("FMHPC_EMU_SCHEDULE");
  unsigned long long seed = 0;
  if (!s || !s[0] || strcmp(s, "forward") == 0) {
    fm_simt_set_schedule(FM_SIMT_FORWARD, 0);
  } else if (strcmp(s, "reverse") == 0) {
    fm_simt_set_schedule(FM_SIMT_REVERSE, 0);
  } else if (sscanf(s, "random:%llu", &seed) == 1) {
    fm_simt_set_schedule(FM_SIMT_RANDOM, seed);
  } else {
    fprintf(stderr, "fmhpc_emu: FMHPC_EMU_SCHEDULE='%s': expected forward, reverse or random:SEED\n", s);
    return 2;
  }
  table = emu;
  const char *stats = getenv("FMHPC_EMU_COPY_STATS");
  if (stats && strcmp(stats, "1") == 0) {
    table.copy_to_device = counted_to_device;
    table.copy_to_host = counted_to_host;
    fm_backend_set_buffer_namer(name_buffer);
    atexit(print_copy_stats);
  }
  const char *drop = getenv("FMHPC_EMU_DROP_OP");
  if (drop && drop[0]) {
    int found = 0;
#define FM_OP(name, cuda, use, ret, params) \
  if (strcmp(drop, #name) == 0) {           \
    table.name = NULL;                      \
    found = 1;                              \
  }
#include "fmhpc/ops.def"
#undef FM_OP
    if (!found) {
      fprintf(stderr, "fmhpc_emu: FMHPC_EMU_DROP_OP='%s': no such op in fmhpc/ops.def\n", drop);
      return 2;
    }
  }
  fm_backend_set_cuda_stand_in(&table);
  return fmhpc_main(argc, argv);
}
