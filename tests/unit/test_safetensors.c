/* test_safetensors.c: the safetensors reader and writer (src/interop/
 * safetensors.c) and the HF name maps and directory import/export (hf_names.c,
 * hf_config.c, hf.c). The writer is checked byte for byte against the
 * reference implementation's own test vectors (huggingface/safetensors
 * safetensors/src/tensor.rs, test_serialization and
 * test_serialization_forced_alignement); every rejection rule has a crafted
 * file whose message must name the file, the tensor and the rule; a few
 * hundred corrupted files must each give an error or a valid read, never a
 * crash. Independent checks in Python live in tests/interop/. */
#include <sys/stat.h>
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/interop.h"

/* ---- helpers ---------------------------------------------------------- */
static char tmpdir[256];

static const char *tmp_path(const char *name) {
  static char buf[8][512];
  static int k;
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fm_st_XXXXXX");
    if (!mkdtemp(tmpdir)) abort();
  }
  char *p = buf[k++ % 8];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (n) fwrite(b, 1, n, f);
  fclose(f);
}

/* A file with header text `h` (its length as given in the 8 bytes unless
 * `nlie` >= 0) and `ndata` data bytes of value i & 0xff. */
static void craft(const char *path, const char *h, int64_t nlie, size_t ndata) {
  size_t hl = strlen(h);
  uint64_t n = nlie >= 0 ? (uint64_t)nlie : hl;
  unsigned char *b = malloc(8 + hl + ndata + 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
  memcpy(b + 8, h, hl);
  for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
  write_bytes(path, b, 8 + hl + ndata);
  free(b);
}

/* Open path expecting status `want`; the message must contain each needle. */
static void expect_reject(const char *path, int want, const char *n1, const char *n2, const char *n3) {
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FmStFile f;
  int rc = fm_st_open(&f, path, err);
  fclose(err);
  FM_EXPECT_EQ_INT(rc, want);
  FM_EXPECT_CONTAINS(msg, path);
  if (n1) FM_EXPECT_CONTAINS(msg, n1);
  if (n2) FM_EXPECT_CONTAINS(msg, n2);
  if (n3) FM_EXPECT_CONTAINS(msg, n3);
  if (rc == 0) fm_st_close(&f);
  free(msg);
}

static int rd_file(const char *path, unsigned char **b, size_t *n) { return fm_read_file(path, (char **)b, n); }

/* ---- writer vs the reference implementation's bytes -------------------- */
FM_TEST(writer_matches_reference_bytes) {
  const float v[6] = {0, 1, 2, 3, 4, 5};
  static const unsigned char want[] = {
      64,  0,  0,   0,  0,   0,  0,   0,   123, 34,  97,  116, 116, 110, 46,  48, 34, 58, 123, 34, 100, 116, 121, 112,
      101, 34, 58,  34, 70,  51, 50,  34,  44,  34,  115, 104, 97,  112, 101, 34, 58, 91, 49,  44, 50,  44,  51,  93,
      44,  34, 100, 97, 116, 97, 95,  111, 102, 102, 115, 101, 116, 115, 34,  58, 91, 48, 44,  50, 52,  93,  125, 125,
      0,   0,  0,   0,  0,   0,  128, 63,  0,   0,   0,   64,  0,   0,   64,  64, 0,  0,  128, 64, 0,   0,   160, 64};
  FmStTensor t = {.name = "attn.0", .dtype = FM_ST_F32, .ndim = 3, .shape = {1, 2, 3}, .data = v};
  const char *p = tmp_path("ref1.safetensors");
  FM_REQUIRE(fm_st_write(p, 1, &t, 0, NULL, NULL, NULL, stderr) == 0);
  unsigned char *b = NULL;
  size_t n = 0;
  FM_REQUIRE(rd_file(p, &b, &n) == 0);
  FM_EXPECT_EQ_INT(n, sizeof want);
  FM_EXPECT(n == sizeof want && memcmp(b, want, n) == 0);
  free(b);
  /* A shorter name: the header is padded with spaces to 72 bytes. */
  static const unsigned char want2_head[] = {72, 0, 0, 0, 0, 0, 0, 0};
  FmStTensor t2 = {.name = "attn0", .dtype = FM_ST_F32, .ndim = 4, .shape = {1, 1, 2, 3}, .data = v};
  FM_REQUIRE(fm_st_write(p, 1, &t2, 0, NULL, NULL, NULL, stderr) == 0);
  FM_REQUIRE(rd_file(p, &b, &n) == 0);
  FM_EXPECT_EQ_INT(n, 8 + 72 + 24);
  FM_EXPECT(memcmp(b, want2_head, 8) == 0);
  FM_EXPECT(memcmp(b + 8 + 65, "       ", 7) == 0);
  FM_EXPECT(memcmp(b + 80, v, 24) == 0);
  free(b);
}

/* ---- round trip --------------------------------------------------------- */
FM_TEST(round_trip_dtypes_order_metadata) {
  const float f32[6] = {1.5f, -2, 3, 4, 5, 6};
  const uint16_t bf16[4] = {0x3F80, 0xC040, 0x0000, 0x8000};
  const int64_t i64[3] = {-1, 0, INT64_MAX};
  const uint8_t u8[5] = {1, 2, 3, 4, 5};
  const double f64[1] = {0.1};
  FmStTensor t[] = {
      {.name = "b.f32", .dtype = FM_ST_F32, .ndim = 2, .shape = {2, 3}, .data = f32},
      {.name = "a.bf16", .dtype = FM_ST_BF16, .ndim = 1, .shape = {4}, .data = bf16},
      {.name = "z.i64", .dtype = FM_ST_I64, .ndim = 1, .shape = {3}, .data = i64},
      {.name = "m.u8", .dtype = FM_ST_U8, .ndim = 1, .shape = {5}, .data = u8},
      {.name = "scalar", .dtype = FM_ST_F64, .ndim = 0, .data = f64},
      {.name = "empty", .dtype = FM_ST_F32, .ndim = 2, .shape = {0, 7}, .data = f32},
  };
  FmStMeta meta[] = {{"format", "pt"}, {"author", "fmhpc \"test\""}};
  const char *p = tmp_path("rt.safetensors");
  FM_REQUIRE(fm_st_write(p, 6, t, 2, meta, NULL, NULL, stderr) == 0);
  FmStFile f;
  FM_REQUIRE(fm_st_open(&f, p, stderr) == 0);
  FM_EXPECT_EQ_INT(f.n, 6);
  FM_EXPECT_EQ_INT(f.data_start % 8, 0);
  FM_EXPECT_EQ_STR(fm_st_meta(&f, "format"), "pt");
  FM_EXPECT_EQ_STR(fm_st_meta(&f, "author"), "fmhpc \"test\"");
  /* Widest dtype first (I64, F64), then by name; so data offsets: */
  const FmStTensor *z = fm_st_find(&f, "z.i64"), *s = fm_st_find(&f, "scalar"), *b = fm_st_find(&f, "b.f32");
  const FmStTensor *e = fm_st_find(&f, "empty"), *a = fm_st_find(&f, "a.bf16"), *m = fm_st_find(&f, "m.u8");
  FM_REQUIRE(z && s && b && e && a && m);
  FM_EXPECT_EQ_INT(z->begin, 0);
  FM_EXPECT_EQ_INT(s->begin, 24);
  FM_EXPECT_EQ_INT(b->begin, 32);
  FM_EXPECT_EQ_INT(e->begin, 56);
  FM_EXPECT_EQ_INT(a->begin, 56);
  FM_EXPECT_EQ_INT(m->begin, 64);
  FM_EXPECT_EQ_INT(s->ndim, 0);
  FM_EXPECT_EQ_INT(s->numel, 1);
  FM_EXPECT_EQ_INT(e->numel, 0);
  FM_EXPECT_EQ_INT(b->shape[1], 3);
  unsigned char buf[64];
  FM_REQUIRE(fm_st_read_raw(&f, z, buf, stderr) == 0);
  FM_EXPECT(memcmp(buf, i64, 24) == 0);
  FM_REQUIRE(fm_st_read_raw(&f, m, buf, stderr) == 0);
  FM_EXPECT(memcmp(buf, u8, 5) == 0);
  float out[6];
  FM_REQUIRE(fm_st_read_f32(&f, b, out, stderr) == 0);
  for (int i = 0; i < 6; i++) FM_EXPECT_BITS_EQ_F32(out[i], f32[i]);
  FM_REQUIRE(fm_st_read_f32(&f, a, out, stderr) == 0);
  FM_EXPECT_BITS_EQ_F32(out[0], 1.0f);
  FM_EXPECT_BITS_EQ_F32(out[1], -3.0f);
  FM_EXPECT_BITS_EQ_F32(out[3], -0.0f);
  FM_REQUIRE(fm_st_read_f32(&f, s, out, stderr) == 0);
  FM_EXPECT_BITS_EQ_F32(out[0], 0.1f); /* F64 rounded to nearest */
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FM_EXPECT_EQ_INT(fm_st_read_f32(&f, z, out, err), FM_EFORMAT);
  fclose(err);
  FM_EXPECT_CONTAINS(msg, "\"z.i64\"");
  FM_EXPECT_CONTAINS(msg, "I64 is not a floating-point type");
  free(msg);
  FM_EXPECT(fm_st_find(&f, "nope") == NULL);
  fm_st_close(&f);
}

FM_TEST(f16_conversion_exact) {
  /* binary16 bit patterns and their exact values. */
  const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x8000, 0x3555};
  const float want[] = {1.0f,     -2.0f,    65504.0f,  0x1p-24f, 0x1.ff8p-15f,
                        0x1p-14f, INFINITY, -INFINITY, -0.0f,    0x1.554p-2f};
  const int n = (int)(sizeof h / sizeof h[0]);
  FmStTensor t = {.name = "h", .dtype = FM_ST_F16, .ndim = 1, .shape = {n}, .data = h};
  const char *p = tmp_path("f16.safetensors");
  FM_REQUIRE(fm_st_write(p, 1, &t, 0, NULL, NULL, NULL, stderr) == 0);
  FmStFile f;
  FM_REQUIRE(fm_st_open(&f, p, stderr) == 0);
  float out[16];
  FM_REQUIRE(fm_st_read_f32(&f, &f.t[0], out, stderr) == 0);
  for (int i = 0; i < n; i++) FM_EXPECT_BITS_EQ_F32(out[i], want[i]);
  fm_st_close(&f);
  /* NaN stays NaN. */
  const uint16_t nan16 = 0x7E00;
  t.shape[0] = 1;
  t.data = &nan16;
  FM_REQUIRE(fm_st_write(p, 1, &t, 0, NULL, NULL, NULL, stderr) == 0);
  FM_REQUIRE(fm_st_open(&f, p, stderr) == 0);
  FM_REQUIRE(fm_st_read_f32(&f, &f.t[0], out, stderr) == 0);
  FM_EXPECT(isnan(out[0]));
  fm_st_close(&f);
}

FM_TEST(writer_rejects_duplicates) {
  const float v[2] = {1, 2};
  FmStTensor t[] = {{.name = "x", .dtype = FM_ST_F32, .ndim = 1, .shape = {1}, .data = v},
                    {.name = "x", .dtype = FM_ST_F16, .ndim = 1, .shape = {1}, .data = v}};
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  FM_EXPECT_EQ_INT(fm_st_write(tmp_path("dup_w.safetensors"), 2, t, 0, NULL, NULL, NULL, err), FM_EINVAL);
  fclose(err);
  FM_EXPECT_CONTAINS(msg, "tensor x given twice");
  free(msg);
  FM_EXPECT(access(tmp_path("dup_w.safetensors"), F_OK) != 0); /* nothing half-written */
}

/* ---- every rejection kind -------------------------------------------- */
FM_TEST(reject_truncated) {
  const char *p = tmp_path("short.safetensors");
  write_bytes(p, "\x10\0\0", 3);
  expect_reject(p, FM_EFORMAT, "3 bytes, too short for the 8-byte header length", "hint:", NULL);
  /* A valid file cut inside its data: the header promises more than is there. */
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 10);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "run past the data region, which is 10 bytes", "truncated");
}

FM_TEST(reject_header_longer_than_file) {
  const char *p = tmp_path("hlen.safetensors");
  craft(p, "{}", 5000, 0);
  expect_reject(p, FM_EFORMAT, "header length 5000 runs past the end of the file (10 bytes)", "truncated", NULL);
}

FM_TEST(reject_huge_header_length) {
  const char *p = tmp_path("huge.safetensors");
  craft(p, "{}", (int64_t)1 << 40, 0);
  expect_reject(p, FM_EFORMAT, "header length 1099511627776 is over the format's 100 MB limit", NULL, NULL);
  craft(p, "{}", INT64_MAX, 0); /* and one that would overflow 8 + N */
  expect_reject(p, FM_EFORMAT, "over the format's 100 MB limit", NULL, NULL);
}

FM_TEST(reject_header_not_json) {
  const char *p = tmp_path("json.safetensors");
  craft(p, "{\"w\":\n  {\"dtype\": F32}}", -1, 0);
  expect_reject(p, FM_EFORMAT, "header JSON at line 2, column 13", "hint:", NULL);
  craft(p, "[1,2]   ", -1, 0);
  expect_reject(p, FM_EFORMAT, "does not start with '{'", NULL, NULL);
  craft(p, "{\"w\":1}", -1, 0);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "entry is a JSON number, not an object", NULL);
}

FM_TEST(reject_offsets_outside_file) {
  const char *p = tmp_path("outside.safetensors");
  craft(p,
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[1000000,1000008]}}",
        -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"b\"", "data_offsets [1000000, 1000008] run past the data region", NULL);
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,3]}}", -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"a\"", "end before they begin", NULL);
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[-8,0]}}", -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"a\"", "data_offsets must be non-negative integers", NULL);
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8.0]}}", -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"a\"", "data_offsets must be non-negative integers", NULL);
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0]}}", -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"a\"", "must be an array [begin, end]", NULL);
}

FM_TEST(reject_overlapping_tensors) {
  const char *p = tmp_path("overlap.safetensors");
  craft(p,
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
        -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"b\"", "overlap those of tensor \"a\"", NULL);
}

FM_TEST(reject_size_shape_mismatch) {
  const char *p = tmp_path("size.safetensors");
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"",
                "shape and dtype give 24 bytes (6 x F32) but data_offsets [0, 16] hold 16", NULL);
  /* Shapes whose element or byte count overflows 64 bits. */
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "element count overflows 64 bits", NULL);
  craft(p, "{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "byte count overflows 64 bits", NULL);
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", -1, 4);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "9 dimensions; fmhpc reads at most 8", NULL);
}

FM_TEST(reject_unknown_dtype) {
  const char *p = tmp_path("dtype.safetensors");
  craft(p, "{\"w\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "unknown dtype \"F12\"", "known dtypes: BOOL");
  craft(p, "{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "\"dtype\" is not a string", NULL);
}

FM_TEST(reject_duplicate_names) {
  const char *p = tmp_path("dup.safetensors");
  craft(p,
        "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
        -1, 4);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "appears twice", "duplicate names");
  craft(p, "{\"__metadata__\":{},\"__metadata__\":{}}", -1, 0);
  expect_reject(p, FM_EFORMAT, "\"__metadata__\" appears twice", NULL, NULL);
  craft(p, "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1, 2);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "member \"dtype\" appears twice", NULL);
}

FM_TEST(reject_negative_shape) {
  const char *p = tmp_path("neg.safetensors");
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "shape[1] is not a non-negative integer", NULL);
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "shape[0] is not a non-negative integer", NULL);
  craft(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,16]}}", -1, 16);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "\"shape\" is a JSON object", NULL);
}

FM_TEST(reject_hole_and_uncovered_bytes) {
  const char *p = tmp_path("hole.safetensors");
  craft(p,
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
        -1, 12);
  expect_reject(p, FM_EFORMAT, "tensor \"b\"", "hole of 4 bytes", "without holes");
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", -1, 8);
  expect_reject(p, FM_EFORMAT, "tensor \"a\"", "hole of 4 bytes after the start of the data region", NULL);
  craft(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", -1, 9);
  expect_reject(p, FM_EFORMAT, "5 bytes after the last tensor's data", "without holes", NULL);
}

FM_TEST(reject_entry_members_and_metadata) {
  const char *p = tmp_path("members.safetensors");
  craft(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"offsets\":[0,2]}}", -1, 2);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "unknown member \"offsets\"", "dtype, shape and data_offsets");
  craft(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[2]}}", -1, 2);
  expect_reject(p, FM_EFORMAT, "tensor \"w\"", "no \"data_offsets\"", NULL);
  craft(p, "{\"__metadata__\":{\"format\":1}}", -1, 0);
  expect_reject(p, FM_EFORMAT, "\"__metadata__\" member \"format\" is a JSON number", "string-to-string", NULL);
  craft(p, "{\"__metadata__\":[]}", -1, 0);
  expect_reject(p, FM_EFORMAT, "\"__metadata__\" is a JSON array", NULL, NULL);
  craft(p, "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0);
  expect_reject(p, FM_EFORMAT, "NUL character", NULL, NULL);
}

FM_TEST(reject_unreadable) {
  expect_reject(tmp_path("no_such_file.safetensors"), FM_EIO, "cannot open", NULL, NULL);
  const char *d = tmp_path("a_directory.safetensors");
  mkdir(d, 0755);
  expect_reject(d, FM_EFORMAT, "not a regular file", NULL, NULL);
}

/* Spec edge cases that are valid: empty header, header padded with spaces,
 * zero-size tensors sharing an offset, a scalar. */
FM_TEST(accept_spec_edge_cases) {
  const char *p = tmp_path("edge.safetensors");
  craft(p, "{}      ", -1, 0);
  FmStFile f;
  FM_EXPECT_EQ_INT(fm_st_open(&f, p, stderr), 0);
  FM_EXPECT_EQ_INT(f.n, 0);
  fm_st_close(&f);
  craft(p,
        "{\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"e2\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
        "\"v\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[4,6]}}  ",
        -1, 6);
  FM_REQUIRE(fm_st_open(&f, p, stderr) == 0);
  FM_EXPECT_EQ_INT(f.n, 4);
  FM_EXPECT_EQ_INT(fm_st_find(&f, "s")->ndim, 0);
  fm_st_close(&f);
}

/* ---- corrupted files never crash --------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

/* Open and read everything; returns the open status. */
static int exercise(const char *path) {
  FmStFile f;
  FILE *null = fopen("/dev/null", "w");
  int rc = fm_st_open(&f, path, null);
  if (rc == 0) {
    for (int i = 0; i < f.n; i++) {
      const FmStTensor *t = &f.t[i];
      void *buf = malloc((size_t)(t->end - t->begin) + 4 * (size_t)t->numel + 8);
      fm_st_read_raw(&f, t, buf, null);
      fm_st_read_f32(&f, t, buf, null);
      free(buf);
    }
    fm_st_close(&f);
  }
  fclose(null);
  return rc;
}

FM_TEST(corrupted_files_error_never_crash) {
  /* A valid file with a few dtypes and metadata. */
  float w[64];
  uint16_t h[24];
  for (int i = 0; i < 64; i++) w[i] = (float)i * 0.25f - 3;
  for (int i = 0; i < 24; i++) h[i] = (uint16_t)(0x3C00 + i);
  FmStTensor t[] = {{.name = "model.layers.0.w", .dtype = FM_ST_F32, .ndim = 2, .shape = {8, 8}, .data = w},
                    {.name = "model.norm.weight", .dtype = FM_ST_BF16, .ndim = 1, .shape = {12}, .data = h},
                    {.name = "x.f16", .dtype = FM_ST_F16, .ndim = 2, .shape = {3, 4}, .data = h + 12}};
  FmStMeta meta = {"format", "pt"};
  const char *good = tmp_path("fuzz_good.safetensors"), *bad = tmp_path("fuzz_bad.safetensors");
  FM_REQUIRE(fm_st_write(good, 3, t, 1, &meta, NULL, NULL, stderr) == 0);
  unsigned char *orig = NULL, *b = NULL;
  size_t n = 0;
  FM_REQUIRE(rd_file(good, &orig, &n) == 0);
  b = malloc(n);
  const size_t hl = (size_t)orig[0] | (size_t)orig[1] << 8;
  int nok = 0, nerr = 0, nother = 0, ntrunc_ok = 0;
  /* Truncation at every 1/64th: the tensors no longer cover the file, so
   * every one of them must be rejected. */
  for (int k = 0; k < 64; k++) {
    write_bytes(bad, orig, n * (size_t)k / 64);
    int rc = exercise(bad);
    if (rc == 0) ntrunc_ok++;
    if (rc != FM_EFORMAT) nother++;
  }
  /* Byte flips: 1..4 random bytes, mostly in the header (where parsing is). */
  for (int k = 0; k < 400; k++) {
    memcpy(b, orig, n);
    int nflip = 1 + (int)(rng_next() % 4);
    for (int j = 0; j < nflip; j++) {
      size_t at = rng_next() % 8 == 0 ? rng_next() % n : rng_next() % (8 + hl);
      b[at] = (unsigned char)(rng_next() % 4 == 0 ? b[at] ^ (1u << (rng_next() % 8)) : rng_next());
    }
    write_bytes(bad, b, n);
    int rc = exercise(bad);
    if (rc == 0)
      nok++;
    else if (rc == FM_EFORMAT)
      nerr++;
    else
      nother++;
  }
  /* Lies in the length field and appended garbage. */
  for (int k = 0; k < 64; k++) {
    memcpy(b, orig, n);
    uint64_t lie = rng_next() >> (rng_next() % 64);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(lie >> (8 * i));
    write_bytes(bad, b, n);
    if (exercise(bad) != FM_EFORMAT) nother++;
  }
  FM_EXPECT_EQ_INT(ntrunc_ok, 0);
  FM_EXPECT_EQ_INT(nother, 0);
  FM_EXPECT(nerr > 300); /* most flips in the header break it */
  printf("corrupted files: %d truncated, 400 flipped (%d still valid, %d rejected), 64 bad lengths\n", 64, nok, nerr);
  free(orig);
  free(b);
}

/* ---- HF name maps ------------------------------------------------------ */
static FmModelDims gpt2_dims(bool tied) {
  return (FmModelDims){.C = 8,
                       .L = 2,
                       .NH = 2,
                       .NKV = 2,
                       .HS = 4,
                       .F = 32,
                       .V = 11,
                       .T = 6,
                       .tied = tied,
                       .norm_eps = 1e-5,
                       .rope_theta = 10000.0};
}
static FmModelDims llama_dims(bool tied) {
  return (FmModelDims){.C = 8,
                       .L = 3,
                       .NH = 4,
                       .NKV = 2,
                       .HS = 4,
                       .F = 12,
                       .V = 13,
                       .T = 5,
                       .tied = tied,
                       .norm_eps = 1e-5,
                       .rope_theta = 10000.0};
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The HF tensors tile the weights arena exactly once. */
static void check_tiles(const char *model, FmModelDims d, int want_n) {
  const FmModelKind *k = fm_model_find(model);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  FmHfTensor *ht;
  int n;
  FM_REQUIRE(fm_hf_tensors(&ht, &n, k, &d, &tab, stderr) == 0);
  FM_EXPECT_EQ_INT(n, want_n);
  int64_t *pairs = malloc(2 * sizeof(int64_t) * (size_t)n), total = 0;
  for (int i = 0; i < n; i++) {
    pairs[2 * i] = ht[i].offset;
    pairs[2 * i + 1] = ht[i].numel;
    total += ht[i].numel;
  }
  qsort(pairs, (size_t)n, 2 * sizeof(int64_t), cmp_i64);
  int64_t pos = 0;
  for (int i = 0; i < n; i++) {
    FM_EXPECT_EQ_INT(pairs[2 * i], pos);
    pos += pairs[2 * i + 1];
  }
  FM_EXPECT_EQ_INT(total, tab.numel);
  free(pairs);
  free(ht);
  fm_table_free(&tab);
}

FM_TEST(hf_maps_tile_the_table) {
  check_tiles("gpt2", gpt2_dims(true), 4 + 12 * 2);
  check_tiles("gpt2", gpt2_dims(false), 5 + 12 * 2);
  check_tiles("llama", llama_dims(false), 3 + 9 * 3);
  check_tiles("llama", llama_dims(true), 2 + 9 * 3);
}

FM_TEST(hf_names_and_layouts) {
  const FmModelKind *k = fm_model_find("gpt2");
  FmModelDims d = gpt2_dims(true);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  FmHfTensor *ht;
  int n;
  FM_REQUIRE(fm_hf_tensors(&ht, &n, k, &d, &tab, stderr) == 0);
  const FmHfTensor *c_attn = NULL, *c_fc = NULL, *ln = NULL;
  for (int i = 0; i < n; i++) {
    if (!strcmp(ht[i].name, "transformer.h.1.attn.c_attn.weight")) c_attn = &ht[i];
    if (!strcmp(ht[i].name, "transformer.h.0.mlp.c_fc.weight")) c_fc = &ht[i];
    if (!strcmp(ht[i].name, "transformer.h.1.ln_2.bias")) ln = &ht[i];
    FM_EXPECT(strcmp(ht[i].name, "lm_head.weight") != 0); /* tied: HF omits it */
  }
  FM_REQUIRE(c_attn && c_fc && ln);
  FM_EXPECT(c_attn->transpose);
  FM_EXPECT_EQ_INT(c_attn->shape[0], 8); /* Conv1D (in, out) = (C, 3C) */
  FM_EXPECT_EQ_INT(c_attn->shape[1], 24);
  FM_EXPECT_EQ_INT(c_attn->offset, fm_table_find(&tab, "h.attn.wqkv")->offset + 24 * 8);
  FM_EXPECT_EQ_INT(c_fc->shape[0], 8); /* (C, F) */
  FM_EXPECT_EQ_INT(c_fc->shape[1], 32);
  FM_EXPECT(!ln->transpose);
  FM_EXPECT_EQ_INT(ln->ndim, 1);
  FM_EXPECT(fm_hf_ignorable(k, "transformer.h.3.attn.bias"));
  FM_EXPECT(fm_hf_ignorable(k, "h.3.attn.masked_bias"));
  FM_EXPECT(!fm_hf_ignorable(k, "transformer.h.3.attn.c_attn.bias"));
  FM_EXPECT(fm_hf_ignorable(fm_model_find("llama"), "model.layers.0.self_attn.rotary_emb.inv_freq"));
  free(ht);
  fm_table_free(&tab);
}

/* ---- directory export / import ----------------------------------------- */
static float formula(int64_t j) { return (float)((j * 37 + 11) % 1001 - 500) / 256.0f; }

static float *known_weights(const FmTensorTable *tab) {
  float *w = malloc((size_t)tab->numel * sizeof *w);
  for (int64_t j = 0; j < tab->numel; j++) w[j] = formula(j);
  return w;
}

static void round_trip(const char *model, FmModelDims d, const char *dirname) {
  const FmModelKind *k = fm_model_find(model);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = known_weights(&tab), *back = calloc((size_t)tab.numel, sizeof *back);
  const char *dir = tmp_path(dirname);
  FM_REQUIRE(fm_hf_export(dir, k, &d, &tab, w, stderr) == 0);
  FM_REQUIRE(fm_hf_import(dir, k, &d, &tab, back, stderr) == 0);
  FM_EXPECT(memcmp(w, back, (size_t)tab.numel * sizeof *w) == 0);
  free(w);
  free(back);
  fm_table_free(&tab);
}

FM_TEST(export_import_round_trip) {
  round_trip("gpt2", gpt2_dims(true), "rt_gpt2_tied");
  round_trip("gpt2", gpt2_dims(false), "rt_gpt2_untied");
  round_trip("llama", llama_dims(false), "rt_llama_untied");
  round_trip("llama", llama_dims(true), "rt_llama_tied");
}

FM_TEST(export_gpt2_conv1d_is_transposed) {
  const FmModelKind *k = fm_model_find("gpt2");
  FmModelDims d = gpt2_dims(true);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = known_weights(&tab);
  const char *dir = tmp_path("gpt2_layout");
  FM_REQUIRE(fm_hf_export(dir, k, &d, &tab, w, stderr) == 0);
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FmStFile f;
  FM_REQUIRE(fm_st_open(&f, path, stderr) == 0);
  FM_EXPECT_EQ_STR(fm_st_meta(&f, "format"), "pt");
  FM_EXPECT(fm_st_find(&f, "lm_head.weight") == NULL);
  const FmStTensor *t = fm_st_find(&f, "transformer.h.1.attn.c_attn.weight");
  FM_REQUIRE(t && t->ndim == 2 && t->shape[0] == 8 && t->shape[1] == 24);
  float hf[8 * 24];
  FM_REQUIRE(fm_st_read_f32(&f, t, hf, stderr) == 0);
  const FmTensor *wqkv = fm_table_find(&tab, "h.attn.wqkv"); /* (L, 3C, C) */
  for (int o = 0; o < 24; o++)
    for (int i = 0; i < 8; i++) FM_EXPECT_BITS_EQ_F32(hf[i * 24 + o], w[wqkv->offset + (1 * 24 + o) * 8 + i]);
  fm_st_close(&f);
  free(w);
  fm_table_free(&tab);
}

static char *import_msg(const char *model, FmModelDims d, const char *dir, int *rc) {
  const FmModelKind *k = fm_model_find(model);
  FmTensorTable tab;
  fm_model_param_table(&tab, k, &d);
  float *w = calloc((size_t)tab.numel, sizeof *w);
  char *msg = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&msg, &len);
  *rc = fm_hf_import(dir, k, &d, &tab, w, err);
  fclose(err);
  free(w);
  fm_table_free(&tab);
  return msg;
}

FM_TEST(import_config_mismatch_names_both_keys) {
  round_trip("gpt2", gpt2_dims(true), "cfg_gpt2");
  FmModelDims other = gpt2_dims(true);
  other.C = 16;
  other.HS = 8;
  other.F = 32; /* d_ff given explicitly as 32: n_inner null means 4*8 = 32 too */
  other.tied = false;
  int rc;
  char *msg = import_msg("gpt2", other, tmp_path("cfg_gpt2"), &rc);
  FM_EXPECT_EQ_INT(rc, FM_EDECK);
  FM_EXPECT_CONTAINS(msg, "cfg_gpt2/config.json: \"n_embd\" = 8 but the deck's &model d_model gives 16");
  FM_EXPECT_CONTAINS(msg, "\"tie_word_embeddings\" = true but the deck's &model tie_embeddings = .false.");
  FM_EXPECT_CONTAINS(msg, "hint: to match this model, set in the deck: &model d_model = 8 tie_embeddings = .true. /");
  free(msg);
  msg = import_msg("llama", llama_dims(false), tmp_path("cfg_gpt2"), &rc);
  FM_EXPECT_EQ_INT(rc, FM_EDECK);
  FM_EXPECT_CONTAINS(msg, "\"model_type\" = \"gpt2\" but the deck's &model arch = 'llama'");
  free(msg);
}

/* Rewrite dir/model.safetensors: drop `drop`, add a copy of `dup` as `as`. */
static void edit_model(const char *dir, const char *drop, const char *dup, const char *as, bool perturb) {
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FmStFile f;
  if (fm_st_open(&f, path, stderr)) abort();
  FmStTensor *t = calloc((size_t)f.n + 1, sizeof *t);
  void **bufs = calloc((size_t)f.n + 1, sizeof *bufs);
  int n = 0;
  for (int i = 0; i < f.n; i++) {
    bool is_dup = dup && !strcmp(f.t[i].name, dup);
    if (drop && !strcmp(f.t[i].name, drop)) continue;
    bufs[i] = malloc((size_t)(f.t[i].end - f.t[i].begin) + 1);
    fm_st_read_raw(&f, &f.t[i], bufs[i], stderr);
    t[n] = f.t[i];
    t[n++].data = bufs[i];
    if (is_dup) {
      t[n] = f.t[i];
      t[n].name = (char *)as;
      float *copy = malloc((size_t)(f.t[i].end - f.t[i].begin));
      memcpy(copy, bufs[i], (size_t)(f.t[i].end - f.t[i].begin));
      if (perturb) copy[3] += 1.0f;
      t[n++].data = copy;
    }
  }
  FmStMeta meta = {"format", "pt"};
  if (fm_st_write(path, n, t, 1, &meta, NULL, NULL, stderr)) abort();
  for (int i = 0; i < n; i++)
    if (as && t[i].name == as) free((void *)t[i].data);
  for (int i = 0; i < f.n; i++) free(bufs[i]);
  free(bufs);
  free(t);
  fm_st_close(&f);
}

FM_TEST(import_rejects_missing_extra_and_untied_head) {
  const char *dir = tmp_path("imp_edit");
  round_trip("gpt2", gpt2_dims(true), "imp_edit");
  /* A tied model accepts an lm_head.weight equal to wte (HF may save both). */
  edit_model(dir, NULL, "transformer.wte.weight", "lm_head.weight", false);
  int rc;
  char *msg = import_msg("gpt2", gpt2_dims(true), dir, &rc);
  FM_EXPECT_EQ_INT(rc, 0);
  free(msg);
  edit_model(dir, "lm_head.weight", "transformer.wte.weight", "lm_head.weight", true);
  msg = import_msg("gpt2", gpt2_dims(true), dir, &rc);
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  FM_EXPECT_CONTAINS(msg, "lm_head.weight differs from the token embedding, but the deck ties them");
  free(msg);
  edit_model(dir, "lm_head.weight", "transformer.ln_f.bias", "transformer.h.9.extra", false);
  msg = import_msg("gpt2", gpt2_dims(true), dir, &rc);
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  FM_EXPECT_CONTAINS(msg, "tensor \"transformer.h.9.extra\" is not a parameter of fmhpc's gpt2");
  free(msg);
  edit_model(dir, "transformer.h.1.mlp.c_fc.weight", NULL, NULL, false);
  msg = import_msg("gpt2", gpt2_dims(true), dir, &rc);
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  FM_EXPECT_CONTAINS(msg, "no tensor transformer.h.1.mlp.c_fc.weight (fmhpc's h.mlp.w1, one layer)");
  free(msg);
}

FM_TEST(import_rejects_wrong_shape) {
  const char *dir = tmp_path("imp_shape");
  round_trip("llama", llama_dims(false), "imp_shape");
  /* Replace k_proj of layer 2 with q_proj's (NH*HS rows instead of NKV*HS). */
  edit_model(dir, "model.layers.2.self_attn.k_proj.weight", "model.layers.2.self_attn.q_proj.weight",
             "model.layers.2.self_attn.k_proj.weight", false);
  int rc;
  char *msg = import_msg("llama", llama_dims(false), dir, &rc);
  FM_EXPECT_EQ_INT(rc, FM_EFORMAT);
  FM_EXPECT_CONTAINS(msg,
                     "tensor model.layers.2.self_attn.k_proj.weight: shape [16, 8] but the deck's model needs [8, 8]");
  free(msg);
}
