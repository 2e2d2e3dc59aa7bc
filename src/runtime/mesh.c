/* mesh.c: the parallel layout. world = dp x tp with tp innermost, so
 * world_rank = dp_rank*tp + tp_rank and a tp group is tp consecutive world
 * ranks, which must share a node (tp collectives run in every layer and need
 * NVLink or shared memory). fm_mesh_layout/fm_mesh_plan are the formulas with
 * no MPI; fm_mesh_create applies them to MPI_COMM_WORLD, finds the node
 * (MPI_COMM_TYPE_SHARED) and the GPU, and builds the dp and tp communicators. */
#include "fmhpc/runtime.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int fake_ranks_per_node = 0; /* test knob; 0 = the real node split */

void fm__mesh_set_ranks_per_node(int ranks_per_node) { fake_ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 0; }

static void mesh_clear(FmMesh *m) {
  memset(m, 0, sizeof *m);
  m->local_rank = -1;
  m->device = -1;
}

/* "1, 2, 4 or 8": the small divisors of n, the tp values that would work. */
static void small_divisors(char *buf, size_t len, int n) {
  int d[8], nd = 0;
  for (int i = 1; i <= n && i <= 64 && nd < 8; i++)
    if (n % i == 0) d[nd++] = i;
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < nd && used < len; i++) {
    const char *sep = i == 0 ? "" : (i == nd - 1 ? " or " : ", ");
    int w = snprintf(buf + used, len - used, "%s%d", sep, d[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}

static int layout_fail(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int layout_fail(char *why, size_t why_len, const char *fmt, ...) {
  if (why && why_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return FM_EINVAL;
}

int fm_mesh_layout(FmMesh *m, int world_size, int tp, int world_rank, char *why, size_t why_len) {
  mesh_clear(m);
  if (why && why_len) why[0] = '\0';
  if (world_size < 1) return layout_fail(why, why_len, "a job of %d ranks: must be >= 1", world_size);
  if (tp < 1)
    return layout_fail(why, why_len, "&parallel tp = %d: must be >= 1\nhint: tp = 1 is plain data parallelism", tp);
  if (world_size % tp != 0) {
    char divs[96];
    small_divisors(divs, sizeof divs, world_size);
    return layout_fail(why, why_len,
                       "&parallel tp = %d does not divide the %d rank%s of the job (world = dp x tp)\n"
                       "hint: with %d rank%s use tp = %s, or run on a multiple of %d ranks",
                       tp, world_size, world_size == 1 ? "" : "s", world_size, world_size == 1 ? "" : "s", divs, tp);
  }
  if (world_rank < 0 || world_rank >= world_size)
    return layout_fail(why, why_len, "world rank %d: must be in [0, %d)", world_rank, world_size);
  m->world_rank = world_rank;
  m->world_size = world_size;
  m->tp = tp;
  m->dp = world_size / tp;
  m->dp_rank = world_rank / tp; /* tp innermost */
  m->tp_rank = world_rank % tp;
  return 0;
}

int fm_mesh_plan(FmMesh *m, int world_size, int tp) {
  char why[512];
  int rc = fm_mesh_layout(m, world_size, tp, 0, why, sizeof why);
  if (rc && fm_log_rank() == 0) fm_err("%s", why);
  return rc;
}

/* This rank's node communicator: the shared-memory split, or consecutive
 * blocks of fake_ranks_per_node ranks when a test asks for them. */
static MPI_Comm node_comm(int world_rank) {
  MPI_Comm node;
  if (fake_ranks_per_node > 0)
    FM_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, world_rank / fake_ranks_per_node, world_rank, &node));
  else
    FM_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  return node;
}

/* ---- the backend every rank chose ------------------------------------------- */
int fm_runtime_agree_backend(int kind, const char *task) {
  int rank = 0, lo = kind, hi = kind;
  FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  FM_CHECK_MPI(MPI_Allreduce(&kind, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  FM_CHECK_MPI(MPI_Allreduce(&kind, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (lo == hi) return FM_OK;
  /* the lowest rank of each kind, for the message */
  int first[3], mine[3];
  for (int k = 0; k < 3; k++) mine[k] = kind == k ? rank : INT_MAX;
  FM_CHECK_MPI(MPI_Allreduce(mine, first, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (rank == 0) {
    static const char *const what[3] = {"no backend", "the CPU backend", "a GPU (CUDA)"};
    char at[256] = "";
    size_t n = 0;
    for (int k = 2; k >= 0; k--)
      if (first[k] != INT_MAX && n < sizeof at)
        n += (size_t)snprintf(at + n, sizeof at - n, "%srank %d takes %s", n ? ", " : "", first[k], what[k]);
    fm_err(
        "%s: the ranks chose different backends (%s): a node whose GPU is not visible, or whose driver fails, "
        "takes the CPU under &train backend = 'auto'\nhint: check CUDA_VISIBLE_DEVICES and the job's GPU request on "
        "every node, or set &train backend = 'cpu' (or 'cuda', which names the rank without a GPU)",
        task, at);
  }
  return FM_ENODEV;
}

/* ---- GPU binding ----------------------------------------------------------- */
typedef struct {
  int world_rank, node, device; /* node: its lowest world rank */
  char bus[32];
} GpuSeat;

static int bound_device = -2, bound_shared = 0; /* -2: not bound yet */

int fm_runtime_bind_gpu(int *device, int *shared) {
  if (bound_device != -2) {
    if (device) *device = bound_device;
    if (shared) *shared = bound_shared;
    return bound_device >= 0 ? FM_OK : FM_ENODEV;
  }
  int world_rank = 0, world_size = 1, local_rank = 0, local_size = 1;
  FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  MPI_Comm node = node_comm(world_rank);
  FM_CHECK_MPI(MPI_Comm_rank(node, &local_rank));
  FM_CHECK_MPI(MPI_Comm_size(node, &local_size));
  GpuSeat me;
  memset(&me, 0, sizeof me);
  me.world_rank = world_rank;
  me.device = -1;
  FM_CHECK_MPI(MPI_Allreduce(&world_rank, &me.node, 1, MPI_INT, MPI_MIN, node));
  const int ndev = fm_runtime_device_count();
  int st = FM_ENODEV;
  if (ndev > 0)
    st = fm_runtime_set_device(local_rank % ndev, &me.device, me.bus, sizeof me.bus);
  else
    fm_err("rank %d (local rank %d) sees no CUDA device; hint: check CUDA_VISIBLE_DEVICES and the job's GPU request",
           world_rank, local_rank);
  int all = st;
  FM_CHECK_MPI(MPI_Allreduce(&st, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (all != FM_OK) {
    FM_CHECK_MPI(MPI_Comm_free(&node));
    return all;
  }
  /* Sharing: two ranks of this node on one physical GPU (same bus id). */
  GpuSeat *seats = fm_xcalloc((size_t)local_size, sizeof *seats);
  FM_CHECK_MPI(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, seats, (int)sizeof me, MPI_BYTE, node));
  int mine = 0;
  for (int i = 0; i < local_rank; i++)
    if (strcmp(seats[i].bus, me.bus) == 0) mine = 1;
  free(seats);
  FM_CHECK_MPI(MPI_Comm_free(&node));
  int nshared = 0;
  FM_CHECK_MPI(MPI_Allreduce(&mine, &nshared, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  GpuSeat *world_seats = world_rank == 0 ? fm_xcalloc((size_t)world_size, sizeof *world_seats) : NULL;
  FM_CHECK_MPI(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, world_seats, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD));
  if (world_rank == 0) {
    char line[1024];
    size_t used = 0;
    int nodes = 0;
    for (int i = 0; i < world_size; i++) nodes += world_seats[i].node == i;
    const int shown = world_size < 16 ? world_size : 16;
    for (int i = 0; i < shown && used < sizeof line; i++) {
      int w = snprintf(line + used, sizeof line - used, "%s%d:%d (%s)", i ? ", " : "", i, world_seats[i].device,
                       world_seats[i].bus);
      if (w < 0) break;
      used += (size_t)w;
    }
    fm_log0(
        "gpu: %d rank%s on %d node%s, each bound to its node-local GPU (local rank mod the %d it sees); "
        "rank:device %s%s",
        world_size, world_size == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", ndev, line,
        shown < world_size ? ", ..." : "");
    free(world_seats);
  }
  if (nshared > 0)
    fm_warn0(
        "gpu: %d rank%s share%s a GPU with another rank of %s node (more ranks per node than GPUs): legal but "
        "slow, and comm = 'nccl' refuses it\nhint: one rank per GPU (srun --gpus-per-task=1, or fewer ranks "
        "per node)",
        nshared, nshared == 1 ? "" : "s", nshared == 1 ? "s" : "", nshared == 1 ? "its" : "their");
  bound_device = me.device;
  bound_shared = nshared > 0;
  if (device) *device = bound_device;
  if (shared) *shared = bound_shared;
  return FM_OK;
}

/* Every rank learns the first tp group (by dp_rank) whose ranks sit on more
 * than one node, or -1: the verdict must be the same everywhere so that all
 * ranks return FM_EINVAL together. A node is named by its lowest world rank. */
static int first_split_tp_group(const FmMesh *m, MPI_Comm tpc, int node_id) {
  int lo = 0, hi = 0;
  FM_CHECK_MPI(MPI_Allreduce(&node_id, &lo, 1, MPI_INT, MPI_MIN, tpc));
  FM_CHECK_MPI(MPI_Allreduce(&node_id, &hi, 1, MPI_INT, MPI_MAX, tpc));
  int mine = lo != hi ? m->dp_rank : INT_MAX, first = INT_MAX;
  FM_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return first == INT_MAX ? -1 : first;
}

static FmComm *wrap_split(int color, int key) {
  MPI_Comm sub;
  FM_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub));
  FmComm *c = fm_comm_mpi_create(sub);
  FM_CHECK_MPI(MPI_Comm_free(&sub));
  return c;
}

int fm_mesh_create(FmMesh *m, int tp, int ndevices) {
  int world_rank = 0, world_size = 1;
  FM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  FM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  /* tp comes from the deck, the same on every rank: so is this verdict. */
  char why[512];
  int rc = fm_mesh_layout(m, world_size, tp, world_rank, why, sizeof why);
  if (rc) {
    if (world_rank == 0) fm_err("%s", why);
    return rc;
  }

  MPI_Comm node = node_comm(world_rank);
  int node_id = 0;
  FM_CHECK_MPI(MPI_Comm_rank(node, &m->local_rank));
  FM_CHECK_MPI(MPI_Comm_size(node, &m->local_size));
  FM_CHECK_MPI(MPI_Allreduce(&world_rank, &node_id, 1, MPI_INT, MPI_MIN, node));
  FM_CHECK_MPI(MPI_Comm_free(&node));

  MPI_Comm tpc;
  FM_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, m->dp_rank, m->tp_rank, &tpc));
  int bad = first_split_tp_group(m, tpc, node_id);
  if (bad >= 0) {
    if (world_rank == 0)
      fm_err(
          "&parallel tp = %d: tensor-parallel group %d (world ranks %d..%d) spans more than one node; "
          "a tp group must sit inside one node\n"
          "hint: make tp divide the ranks per node (rank 0's node has %d) and place ranks in blocks "
          "(srun --distribution=block, mpirun --map-by core)",
          tp, bad, bad * tp, bad * tp + tp - 1, m->local_size);
    FM_CHECK_MPI(MPI_Comm_free(&tpc));
    mesh_clear(m);
    return FM_EINVAL;
  }
  m->tp_comm = fm_comm_mpi_create(tpc);
  FM_CHECK_MPI(MPI_Comm_free(&tpc));
  m->dp_comm = wrap_split(m->tp_rank, m->dp_rank);
  m->world = fm_comm_mpi_create(MPI_COMM_WORLD);

  if (ndevices < 0) ndevices = fm_runtime_device_count();
  m->device = ndevices > 0 ? m->local_rank % ndevices : -1;
  if (ndevices > 0 && m->local_size > ndevices)
    fm_warn0("%d ranks on rank 0's node share %d GPU(s); hint: one rank per GPU is the fast layout", m->local_size,
             ndevices);
  return 0;
}

void fm_mesh_destroy(FmMesh *m) {
  fm_comm_destroy(m->dp_nccl); /* before the MPI ones: NULL-safe */
  fm_comm_destroy(m->tp_nccl);
  fm_comm_destroy(m->world);
  fm_comm_destroy(m->dp_comm);
  fm_comm_destroy(m->tp_comm);
  mesh_clear(m);
}
