/* tfevents.c: TensorBoard event files written by hand, without TensorFlow.
 *
 * A file is a sequence of TFRecords: uint64 length (little-endian), masked
 * CRC-32C of those 8 bytes, the data, masked CRC-32C of the data. Each record
 * is one serialized tensorflow.Event. The field numbers below are TensorFlow's
 * published ones (tensorflow/core/util/event.proto, core/framework/
 * summary.proto, tensor.proto, types.proto):
 *
 *   Event           { double wall_time = 1; int64 step = 2;
 *                     string file_version = 3; Summary summary = 5; }
 *   Summary         { repeated Value value = 1; }
 *   Summary.Value   { string tag = 1; float simple_value = 2;
 *                     TensorProto tensor = 8; SummaryMetadata metadata = 9; }
 *   SummaryMetadata { PluginData plugin_data = 1; }
 *   PluginData      { string plugin_name = 1; }
 *   TensorProto     { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
 *                     repeated bytes string_val = 8; }      DT_STRING = 7
 *
 * Protobuf's wire format: a key varint (field << 3 | wire type), then a
 * varint (type 0), 8 little-endian bytes (type 1), a length varint and bytes
 * (type 2), or 4 little-endian bytes (type 5). Nested messages are built
 * inside-out in scratch buffers. Every event is flushed: TensorBoard shows a
 * running job live, and a killed job keeps its last step. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fmhpc/core.h"
#include "fmhpc/hash.h"
#include "fmhpc/metrics.h"

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };
enum { DT_STRING = 7 };

struct FmTfEvents {
  FILE *f;
  char path[4096];
  FmStr ev, sum, val, tmp; /* scratch: event, summary, value, nested pieces */
};

static void put_varint(FmStr *b, uint64_t v) {
  char c[10];
  size_t n = 0;
  do {
    c[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  fm_str_catn(b, c, n);
}

static void put_key(FmStr *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_le(FmStr *b, uint64_t v, int nbytes) {
  char c[8];
  for (int i = 0; i < nbytes; i++) c[i] = (char)(v >> (8 * i) & 0xff);
  fm_str_catn(b, c, (size_t)nbytes);
}

static void put_bytes(FmStr *b, int field, const char *s, size_t n) {
  put_key(b, field, WT_LEN);
  put_varint(b, n);
  fm_str_catn(b, s, n);
}

static void put_double(FmStr *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  put_key(b, field, WT_FIXED64);
  put_le(b, u, 8);
}

static void put_float(FmStr *b, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  put_key(b, field, WT_FIXED32);
  put_le(b, u, 4);
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One TFRecord holding tb->ev, flushed. */
static int write_record(FmTfEvents *tb) {
  char head[12];
  const uint64_t n = tb->ev.len;
  for (int i = 0; i < 8; i++) head[i] = (char)(n >> (8 * i) & 0xff);
  const uint32_t hc = fm_crc32c_mask(fm_crc32c(0, head, 8)), dc = fm_crc32c_mask(fm_crc32c(0, tb->ev.s, n));
  for (int i = 0; i < 4; i++) head[8 + i] = (char)(hc >> (8 * i) & 0xff);
  char tail[4];
  for (int i = 0; i < 4; i++) tail[i] = (char)(dc >> (8 * i) & 0xff);
  if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(tb->ev.s, 1, n, tb->f) != n || fwrite(tail, 1, 4, tb->f) != 4 ||
      fflush(tb->f) != 0)
    return FM_EIO;
  return 0;
}

/* tb->ev = Event{wall_time, step} followed by what the caller appends. Step 0
 * is left out, as proto3 leaves out a default value: every event is then
 * byte-for-byte what protobuf itself serializes (the test checks that). */
static void begin_event(FmTfEvents *tb, int64_t step) {
  tb->ev.len = 0;
  put_double(&tb->ev, 1, wall_now());
  if (step == 0) return;
  put_key(&tb->ev, 2, WT_VARINT);
  put_varint(&tb->ev, (uint64_t)step);
}

/* Keep [A-Za-z0-9._-] of a run name for a file name; others become '_'. */
static void file_safe(char *out, size_t n, const char *s) {
  size_t i = 0;
  for (; s[i] && i + 1 < n; i++) {
    const char c = s[i];
    const int ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out[i] = ok ? c : '_';
  }
  out[i] = '\0';
}

int fm_tfevents_open(FmTfEvents **out, const char *dir, const char *run_name, FILE *err) {
  *out = NULL;
  if (fm_mkdirs(dir)) {
    if (err) fprintf(err, "fmhpc: cannot create directory '%s': %s\nhint: check &run out_dir\n", dir, strerror(errno));
    return FM_EIO;
  }
  char host[256] = "localhost", name[128];
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  file_safe(name, sizeof name, run_name);
  FmTfEvents *tb = fm_xcalloc(1, sizeof *tb);
  /* TensorBoard reads every file whose name holds "tfevents", in name
   * order: time first; the pid keeps a resume within the same second apart;
   * the run name keeps runs apart in a listing. */
  snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%lld.%s", dir, (long long)time(NULL), host,
           (long long)getpid(), name);
  tb->f = fopen(tb->path, "ab");
  if (!tb->f) {
    if (err) fprintf(err, "fmhpc: cannot write '%s': %s\nhint: check &run out_dir\n", tb->path, strerror(errno));
    free(tb);
    return FM_EIO;
  }
  fm_str_init(&tb->ev);
  fm_str_init(&tb->sum);
  fm_str_init(&tb->val);
  fm_str_init(&tb->tmp);
  begin_event(tb, 0);
  put_bytes(&tb->ev, 3, "brain.Event:2", 13);
  int rc = write_record(tb);
  if (rc) {
    if (err) fprintf(err, "fmhpc: cannot write '%s': %s\n", tb->path, strerror(errno));
    fm_tfevents_close(tb);
    return rc;
  }
  *out = tb;
  return 0;
}

const char *fm_tfevents_path(const FmTfEvents *tb) { return tb ? tb->path : ""; }

int fm_tfevents_scalars(FmTfEvents *tb, int64_t step, const FmTfScalar *v, int n) {
  if (!tb || n <= 0) return 0;
  begin_event(tb, step);
  tb->sum.len = 0;
  for (int i = 0; i < n; i++) {
    tb->val.len = 0;
    put_bytes(&tb->val, 1, v[i].tag, strlen(v[i].tag));
    put_float(&tb->val, 2, (float)v[i].value);
    put_bytes(&tb->sum, 1, tb->val.s, tb->val.len);
  }
  put_bytes(&tb->ev, 5, tb->sum.s, tb->sum.len);
  return write_record(tb);
}

int fm_tfevents_text(FmTfEvents *tb, int64_t step, const char *tag, const char *text) {
  if (!tb) return 0;
  begin_event(tb, step);
  tb->val.len = 0;
  put_bytes(&tb->val, 1, tag, strlen(tag));
  tb->tmp.len = 0; /* TensorProto: a scalar DT_STRING (empty shape) */
  put_key(&tb->tmp, 1, WT_VARINT);
  put_varint(&tb->tmp, DT_STRING);
  put_bytes(&tb->tmp, 2, "", 0);
  put_bytes(&tb->tmp, 8, text, strlen(text));
  put_bytes(&tb->val, 8, tb->tmp.s, tb->tmp.len);
  tb->tmp.len = 0; /* SummaryMetadata{plugin_data{plugin_name: "text"}} */
  put_bytes(&tb->tmp, 1, "text", 4);
  tb->sum.len = 0;
  put_bytes(&tb->sum, 1, tb->tmp.s, tb->tmp.len);
  put_bytes(&tb->val, 9, tb->sum.s, tb->sum.len);
  tb->sum.len = 0;
  put_bytes(&tb->sum, 1, tb->val.s, tb->val.len);
  put_bytes(&tb->ev, 5, tb->sum.s, tb->sum.len);
  return write_record(tb);
}

void fm_tfevents_close(FmTfEvents *tb) {
  if (!tb) return;
  if (tb->f) fclose(tb->f);
  fm_str_free(&tb->ev);
  fm_str_free(&tb->sum);
  fm_str_free(&tb->val);
  fm_str_free(&tb->tmp);
  free(tb);
}
