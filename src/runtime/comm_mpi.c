/* comm_mpi.c: FmComm over MPI on host buffers (bcast, allgather,
 * reduce-scatter, allreduce, barrier), fm_comm_bcast_str and fm_comm_destroy.
 * Counts are int64: a count above what one MPI call carries (INT_MAX, or the
 * test knob) is split into pieces whose boundaries depend only on the count,
 * the type and the communicator size, so every rank issues the same calls.
 * Failures come back as FM_EMPI / FM_EINVAL after a report; deciding whether to
 * abort is the caller's business. NCCL lives in comm_nccl.c. */
#include "fmhpc/runtime.h"

#include "comm_internal.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static int64_t max_count = INT_MAX; /* elements per MPI call */
static int64_t ncalls = 0;          /* MPI collectives issued here */

/* reduce-scatter above max_count packs each piece's blocks into one buffer of
 * size*k elements; this caps that buffer. */
enum { PACK_BYTES = 64 << 20 };

int64_t fm__comm_mpi_set_max_count(int64_t m) {
  int64_t old = max_count;
  max_count = (m >= 1 && m <= INT_MAX) ? m : INT_MAX;
  return old;
}
int64_t fm__comm_mpi_calls(void) { return ncalls; }

static int report_mpi(const char *call, const char *file, int line, int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", code);
  fm__report_call("MPI", call, file, line, msg);
  return FM_EMPI;
}

/* Call MPI; on failure report rank, file:line and the call, return FM_EMPI. */
#define COMM_MPI_CALL(call)                                                        \
  do {                                                                             \
    ncalls++;                                                                      \
    int cm__e = (call);                                                            \
    if (cm__e != MPI_SUCCESS) return report_mpi(#call, __FILE__, __LINE__, cm__e); \
  } while (0)

/* A misuse every rank makes alike (same arguments everywhere): rank 0 of the
 * communicator says why, every rank returns FM_EINVAL. */
static int bad_arg(const FmComm *c, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad_arg(const FmComm *c, const char *op, const char *fmt, ...) {
  if (c->rank == 0) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fm_err("fm_comm_%s (mpi): %s", op, why);
  }
  return FM_EINVAL;
}

/* bf16 travels as its 16 bits: fine for moving, meaningless for reducing. */
static MPI_Datatype mpi_type(FmDType t) {
  switch (t) {
    case FM_DT_U8:
      return MPI_UINT8_T;
    case FM_DT_I32:
      return MPI_INT32_T;
    case FM_DT_U32:
      return MPI_UINT32_T;
    case FM_DT_I64:
      return MPI_INT64_T;
    case FM_DT_U64:
      return MPI_UINT64_T;
    case FM_DT_F32:
      return MPI_FLOAT;
    case FM_DT_F64:
      return MPI_DOUBLE;
    case FM_DT_BF16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

static int check_type(const FmComm *c, const char *op, FmDType t, int64_t n) {
  if (mpi_type(t) == MPI_DATATYPE_NULL) return bad_arg(c, op, "unknown element type %d", (int)t);
  if (n < 0) return bad_arg(c, op, "count %lld: must be >= 0", (long long)n);
  return 0;
}

/* MPI has no bf16 and fmhpc wants no rounding it did not choose: reduce in
 * f32 (or exact integers) instead (comm_internal.h has the rules). */
static int reduce_op(const FmComm *c, const char *op, FmDType t, FmRedOp r, MPI_Op *mo) {
  const char *why = fm__comm_reduce_refusal(t, r);
  if (why) return bad_arg(c, op, "%s", why);
  *mo = r == FM_OP_SUM ? MPI_SUM : r == FM_OP_MAX ? MPI_MAX : r == FM_OP_MIN ? MPI_MIN : MPI_BOR;
  return 0;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int bcast_pieces(MPI_Comm comm, void *buf, int64_t n, MPI_Datatype mt, size_t es, int root) {
  char *p = buf;
  for (int64_t off = 0; off < n; off += max_count) {
    int k = (int)min64(max_count, n - off);
    COMM_MPI_CALL(MPI_Bcast(p + (size_t)off * es, k, mt, root, comm));
  }
  return 0;
}

static int op_bcast(FmComm *c, void *buf, int64_t n, FmDType t, int root) {
  int rc = check_type(c, "bcast", t, n);
  if (rc) return rc;
  if (root < 0 || root >= c->size) return bad_arg(c, "bcast", "root %d: must be in [0, %d)", root, c->size);
  return bcast_pieces(c->mpi, buf, n, mpi_type(t), fm_dtype_size(t), root);
}

/* One piece [off, off+k) of every rank's n: the receive type is k elements
 * whose extent is n elements, so rank r's piece lands at r*n + off. */
static int allgather_piece(FmComm *c, const void *send, char *recv, int64_t n, int64_t off, int k, MPI_Datatype mt,
                           size_t es) {
  MPI_Datatype piece, strided;
  int e = MPI_Type_contiguous(k, mt, &piece);
  if (e != MPI_SUCCESS) return report_mpi("MPI_Type_contiguous", __FILE__, __LINE__, e);
  e = MPI_Type_create_resized(piece, 0, (MPI_Aint)n * (MPI_Aint)es, &strided);
  MPI_Type_free(&piece);
  if (e != MPI_SUCCESS) return report_mpi("MPI_Type_create_resized", __FILE__, __LINE__, e);
  e = MPI_Type_commit(&strided);
  if (e == MPI_SUCCESS) {
    const void *sb = send == MPI_IN_PLACE ? MPI_IN_PLACE : (const char *)send + (size_t)off * es;
    ncalls++;
    e = MPI_Allgather(sb, k, mt, recv + (size_t)off * es, 1, strided, c->mpi);
  }
  MPI_Type_free(&strided);
  if (e != MPI_SUCCESS) return report_mpi("MPI_Allgather (piece)", __FILE__, __LINE__, e);
  return 0;
}

static int op_allgather(FmComm *c, const void *send, void *recv, int64_t n, FmDType t) {
  int rc = check_type(c, "allgather", t, n);
  if (rc || n == 0) return rc;
  MPI_Datatype mt = mpi_type(t);
  size_t es = fm_dtype_size(t);
  const void *sb = send == (const char *)recv + (size_t)c->rank * (size_t)n * es ? MPI_IN_PLACE : send;
  if (n <= max_count) {
    COMM_MPI_CALL(MPI_Allgather(sb, (int)n, mt, recv, (int)n, mt, c->mpi));
    return 0;
  }
  for (int64_t off = 0; off < n; off += max_count) {
    rc = allgather_piece(c, sb, recv, n, off, (int)min64(max_count, n - off), mt, es);
    if (rc) return rc;
  }
  return 0;
}

/* Above max_count the blocks r*n + [off, off+k) are packed side by side so one
 * MPI_Reduce_scatter_block handles the piece of every block. */
static int reduce_scatter_pieces(FmComm *c, const char *send, char *recv, int64_t n, MPI_Datatype mt, size_t es,
                                 MPI_Op mo) {
  int64_t k = min64(max_count, (int64_t)PACK_BYTES / ((int64_t)c->size * (int64_t)es));
  if (k < 1) k = 1;
  char *pack = fm_xmalloc((size_t)c->size * (size_t)k * es);
  int rc = 0;
  for (int64_t off = 0; off < n && rc == 0; off += k) {
    int64_t kk = min64(k, n - off);
    for (int r = 0; r < c->size; r++)
      memcpy(pack + (size_t)r * (size_t)kk * es, send + ((size_t)r * (size_t)n + (size_t)off) * es, (size_t)kk * es);
    ncalls++;
    int e = MPI_Reduce_scatter_block(pack, recv + (size_t)off * es, (int)kk, mt, mo, c->mpi);
    if (e != MPI_SUCCESS) rc = report_mpi("MPI_Reduce_scatter_block (piece)", __FILE__, __LINE__, e);
  }
  free(pack);
  return rc;
}

static int op_reduce_scatter(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op) {
  MPI_Op mo = MPI_OP_NULL;
  int rc = check_type(c, "reduce_scatter", t, n);
  if (!rc) rc = reduce_op(c, "reduce_scatter", t, op, &mo);
  if (rc || n == 0) return rc;
  if (send == recv)
    return bad_arg(c, "reduce_scatter", "send and recv are the same buffer; hint: recv needs its own n elements");
  MPI_Datatype mt = mpi_type(t);
  if (n <= max_count) {
    COMM_MPI_CALL(MPI_Reduce_scatter_block(send, recv, (int)n, mt, mo, c->mpi));
    return 0;
  }
  return reduce_scatter_pieces(c, send, recv, n, mt, fm_dtype_size(t), mo);
}

static int op_allreduce(FmComm *c, const void *send, void *recv, int64_t n, FmDType t, FmRedOp op) {
  MPI_Op mo = MPI_OP_NULL;
  int rc = check_type(c, "allreduce", t, n);
  if (!rc) rc = reduce_op(c, "allreduce", t, op, &mo);
  if (rc) return rc;
  MPI_Datatype mt = mpi_type(t);
  size_t es = fm_dtype_size(t);
  int in_place = send == recv;
  for (int64_t off = 0; off < n; off += max_count) {
    int k = (int)min64(max_count, n - off);
    const void *sb = in_place ? MPI_IN_PLACE : (const char *)send + (size_t)off * es;
    COMM_MPI_CALL(MPI_Allreduce(sb, (char *)recv + (size_t)off * es, k, mt, mo, c->mpi));
  }
  return 0;
}

static int op_barrier(FmComm *c) {
  COMM_MPI_CALL(MPI_Barrier(c->mpi));
  return 0;
}

static const FmCommOps comm_mpi_ops = {
    .bcast = op_bcast,
    .allgather = op_allgather,
    .reduce_scatter = op_reduce_scatter,
    .allreduce = op_allreduce,
    .barrier = op_barrier,
    .destroy = NULL, /* no state beyond the communicator */
};

FmComm *fm_comm_mpi_create(MPI_Comm comm) {
  FmComm *c = fm_xcalloc(1, sizeof *c);
  c->ops = &comm_mpi_ops;
  c->kind = "mpi";
  /* A private duplicate: our messages never match a caller's on `comm`. */
  FM_CHECK_MPI(MPI_Comm_dup(comm, &c->mpi));
  FM_CHECK_MPI(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
  FM_CHECK_MPI(MPI_Comm_rank(c->mpi, &c->rank));
  FM_CHECK_MPI(MPI_Comm_size(c->mpi, &c->size));
  return c;
}

/* Every kind owns a duplicated MPI communicator (the NCCL kind's host-side
 * companion): freed here once, after the kind's own state. After
 * MPI_Finalize it can no longer be freed (nor need be). */
void fm_comm_destroy(FmComm *c) {
  if (!c) return;
  if (c->ops->destroy) c->ops->destroy(c);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
  free(c);
}

/* Length first (-1 for NULL), then the bytes; over c->mpi whatever c's kind,
 * since strings live on the host. */
int fm_comm_bcast_str(FmComm *c, char **s, int root) {
  if (root < 0 || root >= c->size) return bad_arg(c, "bcast_str", "root %d: must be in [0, %d)", root, c->size);
  int64_t len = -1;
  if (c->rank == root && *s) len = (int64_t)strlen(*s);
  int rc = bcast_pieces(c->mpi, &len, 1, MPI_INT64_T, sizeof len, root);
  if (rc) return rc;
  if (c->rank != root) *s = len < 0 ? NULL : fm_xmalloc((size_t)len + 1);
  if (len < 0) return 0;
  rc = bcast_pieces(c->mpi, *s, len, MPI_CHAR, 1, root);
  if (c->rank != root) {
    if (rc) {
      free(*s);
      *s = NULL;
    } else {
      (*s)[len] = '\0';
    }
  }
  return rc;
}

/* ---- in-place all-gather of uneven ranges (runtime.h) --------------------- */

int fm_comm_allgatherv_inplace(FmComm *c, void *buf, const int *count, const int *displ, FmDType t) {
  if (strcmp(c->kind, "mpi") != 0) return FM_EUNSUPPORTED;
  int64_t total = 0;
  for (int r = 0; r < c->size; r++) total += count[r];
  if (total > max_count) return FM_EUNSUPPORTED;
  int rc = check_type(c, "allgatherv_inplace", t, total);
  if (rc) return rc;
  MPI_Datatype mt = mpi_type(t); /* the send type is ignored in place; a real one all the same */
  COMM_MPI_CALL(MPI_Allgatherv(MPI_IN_PLACE, 0, mt, buf, count, displ, mt, c->mpi));
  return 0;
}

/* ---- the pipelined int64 ring reduce-scatter (runtime.h) ---------------- */

enum { RING_SLOTS = 4 };                     /* receives in flight */
static int64_t ring_chunk_default = 1 << 17; /* 1 MiB of int64 */

int64_t fm__comm_mpi_set_ring_chunk(int64_t chunk) {
  int64_t old = ring_chunk_default;
  ring_chunk_default = chunk >= 0 ? chunk : (int64_t)1 << 17;
  return old;
}

struct FmRing {
  FmComm *c;
  int64_t n, k, nchunks; /* block size, chunk size, chunks per block */
  int64_t *slot;         /* RING_SLOTS chunks being received */
  MPI_Request *sreq;     /* the last send of each chunk of the block */
};

FmRing *fm_comm_ring_create(FmComm *c, int64_t n) {
  FmRing *g = fm_xcalloc(1, sizeof *g);
  g->c = c;
  g->n = n > 0 ? n : 0;
  g->k = min64(min64(ring_chunk_default > 0 ? ring_chunk_default : 1, max_count), g->n > 0 ? g->n : 1);
  g->nchunks = (g->n + g->k - 1) / g->k;
  if (strcmp(c->kind, "mpi") == 0 && c->size > 1 && g->n > 0 && ring_chunk_default > 0) {
    g->slot = fm_xmalloc((size_t)RING_SLOTS * (size_t)g->k * sizeof *g->slot);
    g->sreq = fm_xmalloc((size_t)g->nchunks * sizeof(MPI_Request));
  }
  return g;
}

void fm_comm_ring_free(FmRing *g) {
  if (!g) return;
  free(g->slot);
  free(g->sreq);
  free(g);
}

/* Step s (0 .. P-2) of rank r receives the partial sum of block
 * (r - s - 2) mod P from the left, adds its own part and (but at the last
 * step, where the block is r: the result) sends it on to the right. Step 0
 * sends block r - 1 straight from `send`. Chunk j = s * nchunks + c flows in
 * that order over one tag, so MPI's non-overtaking rule matches the sends and
 * receives in order. Progress: the rank furthest behind can always go on
 * (what it waits for was sent before), so there is no deadlock. Partial sums
 * live in recv (the block of step s overwrites that of step s-1 once its send
 * is done). */
int fm_comm_ring_reduce_scatter_i64(FmRing *g, const int64_t *send, int64_t *recv, FmRingDone done, void *ctx) {
  FmComm *c = g->c;
  const int64_t n = g->n, k = g->k, K = g->nchunks;
  if (n == 0) return 0;
  if (!g->slot) {
    int rc = 0;
    if (c->size == 1)
      memcpy(recv, send, (size_t)n * sizeof *recv);
    else
      rc = fm_comm_reduce_scatter(c, send, recv, n, FM_DT_I64, FM_OP_SUM);
    if (!rc && done) done(ctx, 0, n);
    return rc;
  }
  const int P = c->size, r = c->rank, right = (r + 1) % P, left = (r + P - 1) % P;
  const int64_t total = (int64_t)(P - 1) * K;
  MPI_Request rreq[RING_SLOTS];
  int rc = 0, e = MPI_SUCCESS;
  const char *what = "";
  for (int i = 0; i < RING_SLOTS; i++) rreq[i] = MPI_REQUEST_NULL;
  for (int64_t cc = 0; cc < K; cc++) g->sreq[cc] = MPI_REQUEST_NULL;
  const int64_t *first = send + (int64_t)((r + P - 1) % P) * n;
  for (int64_t cc = 0; cc < K && e == MPI_SUCCESS; cc++) {
    ncalls++;
    what = "MPI_Isend (ring)";
    e = MPI_Isend(first + cc * k, (int)min64(k, n - cc * k), MPI_INT64_T, right, 0, c->mpi, &g->sreq[cc]);
  }
  for (int64_t j = 0; j < total && j < RING_SLOTS && e == MPI_SUCCESS; j++) {
    ncalls++;
    what = "MPI_Irecv (ring)";
    e = MPI_Irecv(g->slot + j * k, (int)min64(k, n - (j % K) * k), MPI_INT64_T, left, 0, c->mpi, &rreq[j]);
  }
  for (int64_t j = 0; j < total && e == MPI_SUCCESS; j++) {
    const int64_t s = j / K, cc = j % K, len = min64(k, n - cc * k);
    const int blk = (int)((r - s - 2 + 2 * (int64_t)P) % P);
    int64_t *in = g->slot + (j % RING_SLOTS) * k, *out = recv + cc * k;
    const int64_t *mine = send + (int64_t)blk * n + cc * k;
    what = "MPI_Wait (ring receive)";
    e = MPI_Wait(&rreq[j % RING_SLOTS], MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) break;
    what = "MPI_Wait (ring send)";
    e = MPI_Wait(&g->sreq[cc], MPI_STATUS_IGNORE); /* out's previous partial has left */
    if (e != MPI_SUCCESS) break;
    for (int64_t i = 0; i < len; i++) out[i] = (int64_t)((uint64_t)in[i] + (uint64_t)mine[i]);
    if (j + RING_SLOTS < total) {
      const int64_t jn = j + RING_SLOTS;
      ncalls++;
      what = "MPI_Irecv (ring)";
      e = MPI_Irecv(in, (int)min64(k, n - (jn % K) * k), MPI_INT64_T, left, 0, c->mpi, &rreq[j % RING_SLOTS]);
      if (e != MPI_SUCCESS) break;
    }
    if (s == P - 2 && done) done(ctx, cc * k, len); /* final (this rank's block), the next receive in flight */
    if (s < P - 2) {
      ncalls++;
      what = "MPI_Isend (ring)";
      e = MPI_Isend(out, (int)len, MPI_INT64_T, right, 0, c->mpi, &g->sreq[cc]);
    }
  }
  if (e == MPI_SUCCESS) {
    what = "MPI_Waitall (ring sends)";
    e = MPI_Waitall((int)K, g->sreq, MPI_STATUSES_IGNORE);
  }
  if (e != MPI_SUCCESS) rc = report_mpi(what, __FILE__, __LINE__, e);
  return rc;
}

/* ---- sums onto owners, started piece by piece (runtime.h) ---------------- */

enum { OSUM_SLOTS = 16, OSUM_TAGS = 32000 }; /* chunks received at once; tags 1..OSUM_TAGS (the ring has 0) */
static int64_t osum_chunk_default = 1 << 18; /* 2 MiB of int64 */

int64_t fm__comm_mpi_set_osum_chunk(int64_t chunk) {
  int64_t old = osum_chunk_default;
  osum_chunk_default = chunk >= 1 ? chunk : (int64_t)1 << 18;
  return old;
}

typedef struct OsumChunk {
  int64_t *dst; /* the owner's part: every other rank's chunk is added here */
  int64_t count;
  int tag;
} OsumChunk;

struct FmOwnerSum {
  FmComm *c;
  int64_t k;         /* elements per chunk */
  int64_t *stage;    /* OSUM_SLOTS * (size - 1) * k: one chunk from each other rank per slot */
  MPI_Request *rreq; /* OSUM_SLOTS * (size - 1) */
  OsumChunk *rq;     /* the chunks this rank owns, in declaration order */
  int64_t nrq, rq_cap;
  int64_t posted, done; /* rq[done, posted) have receives in slot (index % OSUM_SLOTS) */
  MPI_Request *sreq;    /* the sends of chunks other ranks own */
  int64_t nsreq, sreq_cap, sdone;
  int64_t seq; /* chunks declared since the last wait: the tag */
};

FmOwnerSum *fm_comm_osum_create(FmComm *c) {
  if (strcmp(c->kind, "mpi") != 0 || c->size < 2) return NULL;
  FmOwnerSum *x = fm_xcalloc(1, sizeof *x);
  x->c = c;
  x->k = min64(osum_chunk_default, max_count);
  x->stage = fm_xmalloc((size_t)OSUM_SLOTS * (size_t)(c->size - 1) * (size_t)x->k * sizeof *x->stage);
  x->rreq = fm_xmalloc((size_t)OSUM_SLOTS * (size_t)(c->size - 1) * sizeof(MPI_Request));
  return x;
}

void fm_comm_osum_free(FmOwnerSum *x) {
  if (!x) return;
  free(x->stage);
  free(x->rreq);
  free(x->rq);
  free(x->sreq);
  free(x);
}

/* Receives for the owned chunks that have a free slot, in order. */
static int osum_post(FmOwnerSum *x) {
  const int P = x->c->size, me = x->c->rank;
  while (x->posted < x->nrq && x->posted - x->done < OSUM_SLOTS) {
    const OsumChunk *q = &x->rq[x->posted];
    const int64_t slot = x->posted % OSUM_SLOTS;
    for (int p = 0, j = 0; p < P; p++) {
      if (p == me) continue;
      const int64_t at = slot * (P - 1) + j++;
      ncalls++;
      int e = MPI_Irecv(x->stage + at * x->k, (int)q->count, MPI_INT64_T, p, q->tag, x->c->mpi, &x->rreq[at]);
      if (e != MPI_SUCCESS) return report_mpi("MPI_Irecv (owner sum)", __FILE__, __LINE__, e);
    }
    x->posted++;
  }
  return 0;
}

/* The oldest posted chunk has arrived from every rank: add it. */
static void osum_add(FmOwnerSum *x) {
  const int P = x->c->size;
  const OsumChunk *q = &x->rq[x->done];
  const int64_t slot = x->done % OSUM_SLOTS;
  for (int j = 0; j < P - 1; j++) {
    const int64_t *in = x->stage + (slot * (P - 1) + j) * x->k;
    int64_t *dst = q->dst;
    for (int64_t i = 0; i < q->count; i++) dst[i] = (int64_t)((uint64_t)dst[i] + (uint64_t)in[i]);
  }
  x->done++;
}

int fm_comm_osum_piece(FmOwnerSum *x, int owner, int64_t *buf, int64_t count) {
  for (int64_t off = 0; off < count; off += x->k) {
    const int64_t len = min64(x->k, count - off);
    const int tag = (int)(x->seq++ % OSUM_TAGS) + 1;
    if (owner == x->c->rank) {
      if (x->nrq == x->rq_cap) { /* grows in the first steps only: the pieces are the same every step */
        x->rq_cap = x->rq_cap ? 2 * x->rq_cap : 256;
        x->rq = fm_xrealloc(x->rq, (size_t)x->rq_cap * sizeof *x->rq);
      }
      x->rq[x->nrq++] = (OsumChunk){buf + off, len, tag};
    } else {
      if (x->nsreq == x->sreq_cap) {
        x->sreq_cap = x->sreq_cap ? 2 * x->sreq_cap : 256;
        x->sreq = fm_xrealloc(x->sreq, (size_t)x->sreq_cap * sizeof(MPI_Request));
      }
      ncalls++;
      int e = MPI_Isend(buf + off, (int)len, MPI_INT64_T, owner, tag, x->c->mpi, &x->sreq[x->nsreq]);
      if (e != MPI_SUCCESS) return report_mpi("MPI_Isend (owner sum)", __FILE__, __LINE__, e);
      x->nsreq++;
    }
  }
  return osum_post(x);
}

int fm_comm_osum_progress(FmOwnerSum *x) {
  const int P = x->c->size;
  int flag = 1, e;
  while (x->done < x->posted) {
    e = MPI_Testall(P - 1, x->rreq + (x->done % OSUM_SLOTS) * (P - 1), &flag, MPI_STATUSES_IGNORE);
    if (e != MPI_SUCCESS) return report_mpi("MPI_Testall (owner sum)", __FILE__, __LINE__, e);
    if (!flag) break;
    osum_add(x);
    int rc = osum_post(x);
    if (rc) return rc;
  }
  while (x->sdone < x->nsreq) {
    e = MPI_Test(&x->sreq[x->sdone], &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) return report_mpi("MPI_Test (owner sum)", __FILE__, __LINE__, e);
    if (!flag) break;
    x->sdone++;
  }
  return 0;
}

int fm_comm_osum_wait(FmOwnerSum *x) {
  const int P = x->c->size;
  int rc = osum_post(x), e;
  while (!rc && x->done < x->nrq) {
    e = MPI_Waitall(P - 1, x->rreq + (x->done % OSUM_SLOTS) * (P - 1), MPI_STATUSES_IGNORE);
    if (e != MPI_SUCCESS) return report_mpi("MPI_Waitall (owner sum)", __FILE__, __LINE__, e);
    osum_add(x);
    rc = osum_post(x);
  }
  if (rc) return rc;
  e = MPI_Waitall((int)(x->nsreq - x->sdone), x->sreq + x->sdone, MPI_STATUSES_IGNORE);
  if (e != MPI_SUCCESS) return report_mpi("MPI_Waitall (owner sum sends)", __FILE__, __LINE__, e);
  x->nrq = x->posted = x->done = 0;
  x->nsreq = x->sdone = 0;
  x->seq = 0;
  return 0;
}

/* ---- a node's shared-memory window (runtime.h) ---------------------------- */

static int shm_enabled = 1;        /* test knob: 0 takes the point-to-point paths */
static int shm_ranks_per_node = 0; /* test knob: pretend nodes of this many consecutive ranks (0: the real split) */

int fm__comm_mpi_set_shm(int on, int ranks_per_node) {
  int old = shm_enabled;
  shm_enabled = on != 0;
  shm_ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 0;
  return old;
}

struct FmShm {
  FmComm *c;
  MPI_Comm node; /* the same ranks as c, in the same order */
  MPI_Win win;
  char **part; /* (size) each rank's part, mapped in this process */
  bool locked; /* inside the window's one lock_all epoch */
};

/* Whether /dev/shm, where Open MPI (osc_sm_backing_directory) and MPICH map
 * shared windows on Linux, has room for the node's window: containers often
 * give it 64 MiB, and a failed allocation would end the run where the ring
 * works. No /dev/shm: MPI's own place, assumed to fit. */
static int shm_fits(int64_t node_bytes) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return 1;
  return (double)v.f_bavail * (double)v.f_frsize >= (double)node_bytes;
}

/* Whether every rank of c is in this rank's node and the window fits: the
 * node communicator is kept in *node when so (and the knobs allow), else
 * freed. Agreed over c (the knob and FMHPC_REDUCE_SHM may differ between
 * ranks). */
static int shm_node(FmComm *c, int64_t bytes, MPI_Comm *node) {
  const char *env = getenv("FMHPC_REDUCE_SHM");
  int mine[2] = {shm_enabled && !(env && strcmp(env, "0") == 0), 1}, all[2] = {0, 0}, nsize = 0;
  *node = MPI_COMM_NULL;
  if (shm_ranks_per_node > 0)
    COMM_MPI_CALL(MPI_Comm_split(c->mpi, c->rank / shm_ranks_per_node, c->rank, node));
  else
    COMM_MPI_CALL(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, node));
  COMM_MPI_CALL(MPI_Comm_size(*node, &nsize));
  mine[0] = mine[0] && nsize == c->size;
  mine[1] = !mine[0] || shm_fits(bytes * nsize);
  COMM_MPI_CALL(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, c->mpi));
  if (all[0] && !all[1])
    fm_log0("reduce: /dev/shm cannot hold the shared window (%lld bytes a rank): the exact sums take the ring",
            (long long)bytes);
  if (!all[0] || !all[1]) MPI_Comm_free(node);
  return 0;
}

int fm_comm_shm_create(FmComm *c, int64_t bytes, FmShm **out) {
  *out = NULL;
  if (!c->kind || strcmp(c->kind, "mpi") != 0 || c->size < 2 || bytes <= 0) return 0;
  MPI_Comm node;
  int rc = shm_node(c, bytes, &node);
  if (rc || node == MPI_COMM_NULL) return rc;
  FmShm *x = fm_xcalloc(1, sizeof *x);
  x->c = c;
  x->node = node;
  x->win = MPI_WIN_NULL;
  x->part = fm_xcalloc((size_t)c->size, sizeof *x->part);
  MPI_Info info = MPI_INFO_NULL;
  void *base = NULL;
  int e = MPI_Info_create(&info);
  /* each rank's part on its own pages (its own NUMA domain where the OS places it so) */
  if (e == MPI_SUCCESS) e = MPI_Info_set(info, "alloc_shared_noncontig", "true");
  if (e == MPI_SUCCESS) {
    ncalls++;
    e = MPI_Win_allocate_shared((MPI_Aint)bytes, 8, info, node, &base, &x->win);
  }
  if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  if (e != MPI_SUCCESS) {
    fm_comm_shm_free(x);
    rc = report_mpi("MPI_Win_allocate_shared (reduction window)", __FILE__, __LINE__, e);
    fm_err(
        "the exact reduction's shared-memory window (%lld bytes on this rank) could not be allocated\n"
        "hint: the node's /dev/shm may be too small (df -h /dev/shm); FMHPC_REDUCE_SHM=0 sums over the ring instead",
        (long long)bytes);
    return rc;
  }
  *out = x;
  COMM_MPI_CALL(MPI_Win_set_errhandler(x->win, MPI_ERRORS_RETURN));
  for (int p = 0; p < c->size; p++) {
    MPI_Aint size = 0;
    int disp = 0;
    COMM_MPI_CALL(MPI_Win_shared_query(x->win, p, &size, &disp, &x->part[p]));
  }
  /* One passive epoch for the window's life: loads and stores are ordered by
   * fm_comm_shm_sync (MPI-3's shared-memory model: sync, barrier, sync). */
  COMM_MPI_CALL(MPI_Win_lock_all(MPI_MODE_NOCHECK, x->win));
  x->locked = true;
  return 0;
}

void *fm_comm_shm_part(const FmShm *x, int rank) { return x->part[rank]; }

int fm_comm_shm_sync(FmShm *x) {
  COMM_MPI_CALL(MPI_Win_sync(x->win));
  COMM_MPI_CALL(MPI_Barrier(x->node));
  COMM_MPI_CALL(MPI_Win_sync(x->win));
  return 0;
}

void fm_comm_shm_free(FmShm *x) {
  if (!x) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && x->win != MPI_WIN_NULL) {
    if (x->locked) MPI_Win_unlock_all(x->win);
    MPI_Win_free(&x->win);
  }
  if (!fin && x->node != MPI_COMM_NULL) MPI_Comm_free(&x->node);
  free(x->part);
  free(x);
}
