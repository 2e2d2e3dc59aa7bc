/* emu/simt.cpp: the SIMT emulator's scheduler, barriers and warp collectives
 * (see simt.h for the model and what it reports). One fiber per GPU thread of
 * the running block; fibers switch only here. On x86-64 the switch is eight
 * instructions of assembly (callee-saved registers, MXCSR and the x87 control
 * word: what the SysV ABI says survives a call); elsewhere ucontext, whose
 * swapcontext makes a signal-mask syscall per switch (about 20x slower). */
#include "simt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

/* FM_SIMT_UCONTEXT forces the portable switch (to measure the difference). */
#if defined(__x86_64__) && !defined(FM_SIMT_UCONTEXT)
#define FM__SIMT_ASM 1
#else
#define FM__SIMT_ASM 0
#include <ucontext.h>
#endif

namespace fmsim {

Coord *g_cur = nullptr;
unsigned char *g_dyn_smem = nullptr;

namespace {

enum State { READY, WAIT_BLOCK, WAIT_WARP, DONE };

struct Fiber {
#if FM__SIMT_ASM
  void *sp = nullptr;
#else
  ucontext_t ctx;
#endif
  Coord c;
  State state = READY;
  const void *site = nullptr; /* where it waits */
};

struct Warp {
  uint32_t data[2][32][8]; /* collective deposits, double-buffered by generation */
  int op[32];
  const void *site[32];
  int size = 32, arrived = 0;
  unsigned gen = 0;
};

struct Sched {
  FmSimtOrder order = FM_SIMT_FORWARD;
  uint64_t seed = 1;
  FmSimtStats stats = {0, 0, 0, 0};
  std::vector<Fiber> f;
  std::vector<Warp> w;
  std::vector<int> turn;
  int arrived = 0; /* at the block barrier */
  Fiber *cur = nullptr;
  Body body = nullptr;
  void *ctx = nullptr;
  unsigned char *stacks = nullptr;
  size_t stack_bytes = 0, stacks_len = 0;
  std::vector<unsigned char> dyn;
#if FM__SIMT_ASM
  void *sched_sp = nullptr;
#else
  ucontext_t sched_ctx;
#endif
};
Sched S;

}  // namespace
}  // namespace fmsim

#if FM__SIMT_ASM
/* fm__simt_switch(&save_sp, next_sp): push the callee-saved state on this
 * stack, park rsp in *save_sp, load next_sp and pop the state saved there. */
extern "C" void fm__simt_switch(void **save_sp, void *next_sp);
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl fm__simt_switch\n"
    ".hidden fm__simt_switch\n"
    ".type fm__simt_switch,@function\n"
    "fm__simt_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size fm__simt_switch, .-fm__simt_switch\n");
#endif

namespace fmsim {
namespace {

void fiber_entry() {
  S.body(S.ctx);
  S.cur->state = DONE;
#if FM__SIMT_ASM
  fm__simt_switch(&S.cur->sp, S.sched_sp);
#else
  swapcontext(&S.cur->ctx, &S.sched_ctx);
#endif
  __builtin_unreachable();
}

/* From the running fiber back to the scheduler. */
void to_scheduler() {
  S.stats.switches++;
#if FM__SIMT_ASM
  fm__simt_switch(&S.cur->sp, S.sched_sp);
#else
  swapcontext(&S.cur->ctx, &S.sched_ctx);
#endif
}

void run_fiber(Fiber &f) {
  S.cur = &f;
  g_cur = &f.c;
  S.stats.switches++;
#if FM__SIMT_ASM
  fm__simt_switch(&S.sched_sp, f.sp);
#else
  swapcontext(&S.sched_ctx, &f.ctx);
#endif
}

size_t stack_size() {
  static size_t bytes = 0;
  if (!bytes) {
    const char *e = getenv("FM_SIMT_STACK_KB");
    long kb = e ? atol(e) : 64;
    if (kb < 16) kb = 16;
    bytes = (size_t)kb * 1024;
  }
  return bytes;
}

/* n stacks, each with a PROT_NONE guard page below it (an overflow faults
 * instead of writing into the next fiber's stack). Kept between launches. */
void ensure_stacks(int n) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t per = stack_size() + page;
  if (S.stacks && S.stacks_len >= per * (size_t)n) return;
  if (S.stacks) munmap(S.stacks, S.stacks_len);
  S.stacks_len = per * (size_t)n;
  void *p = mmap(nullptr, S.stacks_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail("cannot map %zu bytes of fiber stacks for %d threads", S.stacks_len, n);
  S.stacks = static_cast<unsigned char *>(p);
  S.stack_bytes = per;
  for (int i = 0; i < n; i++) mprotect(S.stacks + per * (size_t)i, page, PROT_NONE);
}

void init_fiber(Fiber &f, int i) {
  unsigned char *lo = S.stacks + S.stack_bytes * (size_t)i + (S.stack_bytes - stack_size());
  unsigned char *top = lo + stack_size();
  top = (unsigned char *)((uintptr_t)top & ~(uintptr_t)15);
#if FM__SIMT_ASM
  /* What fm__simt_switch pops, top down: pad, return address (16-aligned, so
   * fiber_entry starts with rsp = 8 mod 16 as after a call), rbp rbx r12 r13
   * r14 r15 = 0, then MXCSR (default 0x1F80) and the x87 control word (0x37F). */
  uint64_t *sp = reinterpret_cast<uint64_t *>(top);
  *--sp = 0;
  *--sp = (uint64_t)(uintptr_t)&fiber_entry;
  for (int r = 0; r < 6; r++) *--sp = 0;
  *--sp = (uint64_t)0x1F80u | ((uint64_t)0x037Fu << 32);
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = lo;
  f.ctx.uc_stack.ss_size = (size_t)(top - lo);
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, (void (*)())fiber_entry, 0);
#endif
}

int cur_warp() { return S.cur->c.linear >> 5; }

const char *state_name(State s) {
  return s == READY ? "ready" : s == WAIT_BLOCK ? "__syncthreads" : s == WAIT_WARP ? "warp collective" : "exited";
}

[[noreturn]] void deadlock() {
  const Coord &c0 = S.f[0].c;
  fprintf(stderr, "simt: deadlock in block (%u,%u,%u) of grid (%u,%u,%u), block (%u,%u,%u):\n", c0.bid.x, c0.bid.y,
          c0.bid.z, c0.gdim.x, c0.gdim.y, c0.gdim.z, c0.bdim.x, c0.bdim.y, c0.bdim.z);
  int shown = 0;
  State prev = READY;
  int run_start = -1;
  const int n = (int)S.f.size();
  for (int i = 0; i <= n; i++) { /* runs of equal state */
    State s = i < n ? S.f[i].state : READY;
    if (i == n || i == 0 || s != prev) {
      if (run_start >= 0 && shown < 16) {
        fprintf(stderr, "  threads %d..%d: %s\n", run_start, i - 1, state_name(prev));
        shown++;
      }
      run_start = i;
      prev = s;
    }
  }
  fprintf(stderr,
          "  (a barrier or warp collective that some threads never reach, e.g. inside a branch, or after "
          "threads returned)\n");
  abort();
}

void run_block() {
  const int n = (int)S.f.size();
  S.turn.resize((size_t)n);
  for (int i = 0; i < n; i++) S.turn[(size_t)i] = S.order == FM_SIMT_REVERSE ? n - 1 - i : i;
  const Coord &c = S.f[0].c;
  std::mt19937_64 rng(S.seed ^ (0x9E3779B97F4A7C15ull * (1 + c.bid.x + 65536ull * (c.bid.y + 65536ull * c.bid.z))));
  int live = n;
  while (live > 0) {
    if (S.order == FM_SIMT_RANDOM) std::shuffle(S.turn.begin(), S.turn.end(), rng);
    int ran = 0;
    for (int k = 0; k < n; k++) {
      Fiber &f = S.f[(size_t)S.turn[(size_t)k]];
      if (f.state != READY) continue;
      run_fiber(f);
      ran++;
      if (f.state == DONE) live--;
    }
    if (ran == 0) deadlock();
  }
  S.cur = nullptr;
  g_cur = nullptr;
}

/* The last arrival wakes the others and gives up its turn, so what runs
 * after a barrier follows the schedule too. */
void wait_here(State st, const void *site) {
  S.cur->state = st;
  S.cur->site = site;
  to_scheduler();
}
void yield_ready() {
  S.cur->state = READY;
  to_scheduler();
}

unsigned warp_full_mask(const Warp &w) { return w.size == 32 ? 0xffffffffu : ((1u << w.size) - 1u); }

}  // namespace

[[noreturn]] void fail(const char *fmt, ...) {
  fprintf(stderr, "simt: ");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (g_cur)
    fprintf(stderr, " [block (%u,%u,%u) thread (%u,%u,%u)]", g_cur->bid.x, g_cur->bid.y, g_cur->bid.z, g_cur->tid.x,
            g_cur->tid.y, g_cur->tid.z);
  fprintf(stderr, "\n");
  abort();
}

int lane_id() { return S.cur->c.linear & 31; }

void launch_impl(dim3 grid, dim3 block, size_t smem, Body body, void *ctx) {
  if (S.cur) fail("kernel launch from inside a kernel (dynamic parallelism) is not emulated");
  const uint64_t n64 = (uint64_t)block.x * block.y * block.z;
  if (n64 == 0 || n64 > 1024 || block.z > 64)
    fail("invalid block (%u,%u,%u): 1..1024 threads, z <= 64", block.x, block.y, block.z);
  if ((uint64_t)grid.x * grid.y * grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    fail("invalid grid (%u,%u,%u)", grid.x, grid.y, grid.z);
  if (smem > 227 * 1024) fail("dynamic shared memory %zu bytes > 227 KiB (sm_90)", smem);
  const int n = (int)n64;
  ensure_stacks(n);
  S.f.assign((size_t)n, Fiber());
  S.w.assign((size_t)((n + 31) / 32), Warp());
  for (size_t i = 0; i < S.w.size(); i++) S.w[i].size = std::min(32, n - 32 * (int)i);
  S.body = body;
  S.ctx = ctx;
  S.dyn.resize(smem ? smem : 1);
  S.stats.launches++;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        for (int i = 0; i < n; i++) {
          Fiber &f = S.f[(size_t)i];
          f.state = READY;
          f.site = nullptr;
          f.c.tid = dim3((unsigned)i % block.x, ((unsigned)i / block.x) % block.y, (unsigned)i / (block.x * block.y));
          f.c.bid = dim3(bx, by, bz);
          f.c.bdim = block;
          f.c.gdim = grid;
          f.c.linear = i;
          init_fiber(f, i);
        }
        for (Warp &w : S.w) {
          w.arrived = 0;
          w.gen = 0;
        }
        S.arrived = 0;
        std::fill(S.dyn.begin(), S.dyn.end(), (unsigned char)0xFF);
        g_dyn_smem = S.dyn.data();
        S.stats.blocks++;
        S.stats.threads += (uint64_t)n;
        run_block();
      }
  g_dyn_smem = nullptr;
}

void syncthreads(const void *site) {
  if (!S.cur) fail("__syncthreads outside a kernel");
  const int n = (int)S.f.size();
  S.cur->site = site;
  if (++S.arrived < n) {
    wait_here(WAIT_BLOCK, site);
    return;
  }
  /* Call sites are not compared: the compiler may duplicate one barrier into
   * two copies (tail duplication), and bar.sync 0 does not tell them apart. */
  S.arrived = 0;
  for (Fiber &f : S.f) f.state = READY;
  yield_ready();
}

/* Arrive at this warp's barrier for collective `op`; returns the buffer index
 * every lane of this collective deposited into. */
static int warp_arrive(int op, unsigned mask, const void *site, const uint32_t *mine) {
  if (!S.cur) fail("warp collective outside a kernel");
  Warp &w = S.w[(size_t)cur_warp()];
  const int lane = lane_id();
  const unsigned full = warp_full_mask(w);
  if ((mask & full) != full)
    fail("warp collective with mask 0x%08x leaves out live lanes (warp mask 0x%08x): partial masks are not emulated",
         mask, full);
  const int buf = (int)(w.gen & 1u);
  if (mine) memcpy(w.data[buf][lane], mine, sizeof w.data[buf][lane]);
  w.op[lane] = op;
  w.site[lane] = site;
  if (++w.arrived < w.size) {
    wait_here(WAIT_WARP, site);
    return buf;
  }
  w.arrived = 0;
  w.gen++;
  const int base = cur_warp() * 32;
  for (int l = 0; l < w.size; l++)
    if (w.op[l] != op)
      fail(
          "lanes of warp %d are in different warp collectives (lane %d: op %d, lane %d: op %d): divergent .sync "
          "instruction",
          cur_warp(), lane, op, l, w.op[l]);
  for (int l = 0; l < w.size; l++) S.f[(size_t)(base + l)].state = READY;
  yield_ready();
  return buf;
}

void syncwarp(unsigned mask, const void *site) { (void)warp_arrive(COLL_SYNCWARP, mask, site, nullptr); }

uint64_t shfl(uint64_t bits, unsigned mask, int src_lane, const void *site) {
  uint32_t mine[8] = {(uint32_t)bits, (uint32_t)(bits >> 32), 0, 0, 0, 0, 0, 0};
  const int buf = warp_arrive(COLL_SHFL, mask, site, mine);
  if (src_lane < 0) return bits;
  const Warp &w = S.w[(size_t)cur_warp()];
  if (src_lane >= w.size) fail("shuffle reads lane %d of a %d-lane warp", src_lane, w.size);
  return (uint64_t)w.data[buf][src_lane][0] | ((uint64_t)w.data[buf][src_lane][1] << 32);
}

unsigned ballot(unsigned mask, int pred, const void *site) {
  uint32_t mine[8] = {pred != 0, 0, 0, 0, 0, 0, 0, 0};
  const int buf = warp_arrive(COLL_BALLOT, mask, site, mine);
  const Warp &w = S.w[(size_t)cur_warp()];
  unsigned bits = 0;
  for (int l = 0; l < w.size; l++) bits |= (w.data[buf][l][0] ? 1u : 0u) << l;
  return bits;
}

const uint32_t (*exchange(int op, const uint32_t mine[8], const void *site))[8] {
  Warp &w0 = S.w[(size_t)cur_warp()];
  if (w0.size != 32) fail("warp collective %d in a partial warp of %d lanes", op, w0.size);
  const int buf = warp_arrive(op, 0xffffffffu, site, mine);
  return S.w[(size_t)cur_warp()].data[buf];
}

}  // namespace fmsim

/* ---- the C interface ------------------------------------------------------ */
extern "C" void fm_simt_set_schedule(FmSimtOrder order, uint64_t seed) {
  fmsim::S.order = order;
  fmsim::S.seed = seed;
}
extern "C" FmSimtOrder fm_simt_schedule(void) { return fmsim::S.order; }
extern "C" const char *fm_simt_schedule_name(void) {
  static char buf[48];
  if (fmsim::S.order == FM_SIMT_FORWARD) return "forward";
  if (fmsim::S.order == FM_SIMT_REVERSE) return "reverse";
  snprintf(buf, sizeof buf, "random(%llu)", (unsigned long long)fmsim::S.seed);
  return buf;
}
extern "C" void fm_simt_stats(FmSimtStats *s) { *s = fmsim::S.stats; }
extern "C" void fm_simt_reset_stats(void) { fmsim::S.stats = FmSimtStats{0, 0, 0, 0}; }

/* ---- emulated device memory: host memory (the emulated ops take host
 * pointers), so the emulated table is a whole FmBackend ------------------ */
/* The emulated device's size: FMHPC_EMU_DEVICE_MEM bytes (a number with an
 * optional K, M or G suffix, binary), -1 (unlimited) when unset. Each
 * allocation keeps its size in a 256-byte header, so the bytes in use are
 * known and an allocation beyond the size fails as cudaMalloc would. */
static int64_t g_mem_used = 0;
extern "C" int64_t fm_simt_mem_limit(void) {
  const char *e = getenv("FMHPC_EMU_DEVICE_MEM");
  if (!e || !e[0]) return -1;
  char *end = nullptr;
  const double v = strtod(e, &end);
  const double mult = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
  if (!(v >= 0) || v * mult > 9.0e18 || (*end && (end[1] || mult == 1.0)))
    fmsim::fail("FMHPC_EMU_DEVICE_MEM='%s': expected bytes, optionally with a K, M or G suffix", e);
  return (int64_t)(v * mult);
}
extern "C" int64_t fm_simt_mem_used(void) { return g_mem_used; }
static FmSimtMemCalls g_calls;
extern "C" void fm_simt_mem_calls(FmSimtMemCalls *c) { *c = g_calls; }
extern "C" void *fm_simt_alloc(int64_t bytes) {
  g_calls.allocs++;
  if (bytes < 0) fmsim::fail("fm_simt_alloc: negative size %lld", (long long)bytes);
  if (bytes == 0) return nullptr;
  const int64_t limit = fm_simt_mem_limit();
  if (limit >= 0 && bytes > limit - g_mem_used)
    fmsim::fail("out of emulated device memory: %lld bytes asked, %lld of %lld in use (FMHPC_EMU_DEVICE_MEM)",
                (long long)bytes, (long long)g_mem_used, (long long)limit);
  void *p = nullptr;
  if (posix_memalign(&p, 256, (size_t)bytes + 256) != 0)
    fmsim::fail("out of host memory for %lld bytes", (long long)bytes);
  memcpy(p, &bytes, sizeof bytes);
  g_mem_used += bytes;
  p = (char *)p + 256;
  memset(p, 0xFF, (size_t)bytes); /* as uninitialised device memory might hold anything: NaN */
  return p;
}
extern "C" void fm_simt_free(void *p) {
  if (!p) return;
  char *h = (char *)p - 256;
  int64_t bytes = 0;
  memcpy(&bytes, h, sizeof bytes);
  g_mem_used -= bytes;
  free(h);
}
extern "C" void fm_simt_memset(void *p, int value, int64_t bytes) {
  if (bytes > 0) memset(p, value, (size_t)bytes);
}
extern "C" void fm_simt_copy_to_device(void *dst, const void *src, int64_t bytes) {
  g_calls.uploads++;
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}
extern "C" void fm_simt_copy_to_device_async(void *dst, const void *src, int64_t bytes) {
  g_calls.queued++;
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}
extern "C" void fm_simt_copy_to_host(void *dst, const void *src, int64_t bytes) {
  g_calls.reads++;
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}
extern "C" void fm_simt_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0 && dst != src) memmove(dst, src, (size_t)bytes);
}
extern "C" void fm_simt_synchronize(void) { g_calls.syncs++; }
