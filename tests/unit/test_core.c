/* test_core.c: the status table, edit distance, number formatting, the
 * whole-file reader, and warnings and errors as single writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fm_test.h"
#include "fmhpc/core.h"

FM_TEST(status_table) {
  FM_EXPECT_EQ_STR(fm_strerror(FM_OK), "success");
  FM_EXPECT_EQ_STR(fm_strerror(FM_EDECK), "invalid input deck");
  FM_EXPECT_EQ_STR(fm_status_name(FM_EIO), "FM_EIO");
  FM_EXPECT_EQ_STR(fm_strerror(-9999), "unknown status");
  FM_EXPECT(FM_EDECK < 0 && FM_EIO < 0 && FM_EDECK != FM_EIO);
}

FM_TEST(edit_distance) {
  FM_EXPECT_EQ_INT(fm_edit_distance("lr", "lr"), 0);
  FM_EXPECT_EQ_INT(fm_edit_distance("lr", "LR"), 0);
  FM_EXPECT_EQ_INT(fm_edit_distance("n_heads", "n_head"), 1);
  FM_EXPECT_EQ_INT(fm_edit_distance("betsa", "betas"), 1); /* transposition */
  FM_EXPECT_EQ_INT(fm_edit_distance("kitten", "sitting"), 3);
}

FM_TEST(format_numbers) {
  char b[64];
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, 1203807744), "1,203,807,744");
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, 999), "999");
  FM_EXPECT_EQ_STR(fm_fmt_count(b, sizeof b, -1000), "-1,000");
  FM_EXPECT_EQ_STR(fm_fmt_bytes(b, sizeof b, 1536.0 * 1024 * 1024), "1.50 GiB");
  FM_EXPECT_EQ_STR(fm_fmt_bytes(b, sizeof b, 12), "12 B");
}

FM_TEST(growable_string) {
  FmStr s;
  fm_str_init(&s);
  for (int i = 0; i < 1000; i++) fm_str_printf(&s, "%d,", i % 10);
  FM_EXPECT_EQ_INT(s.len, 2000);
  FM_EXPECT(strncmp(s.s, "0,1,2,", 6) == 0);
  fm_str_free(&s);
}

FM_TEST(dtype_sizes) {
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_BF16), 2);
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_F32), 4);
  FM_EXPECT_EQ_INT(fm_dtype_size(FM_DT_I64), 8);
  FM_EXPECT_EQ_STR(fm_dtype_name(FM_DT_U32), "u32");
}

/* Checked sizes: exact below the limit, refused at and past overflow. */
FM_TEST(checked_sizes) {
  int64_t p = 7;
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_C(3037000499), INT64_C(3037000499), &p), 0);
  FM_EXPECT(p == INT64_C(9223372030926249001));
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_C(3037000500), INT64_C(3037000500), &p), FM_ERANGE);
  FM_EXPECT(p == INT64_C(9223372030926249001)); /* left alone */
  FM_EXPECT_EQ_INT(fm_mul_i64(INT64_MAX, -1, &p), 0);
  FM_EXPECT(p == -INT64_MAX);
  const int64_t ok[3] = {1024, 1024, 1024}, at[2] = {INT64_C(1) << 25, INT64_C(1) << 25};
  const int64_t past[2] = {(INT64_C(1) << 25) + 1, INT64_C(1) << 25}, wrap[3] = {INT64_C(1) << 40, 1 << 20, 1 << 20};
  const int64_t zero[2] = {5, 0};
  FM_EXPECT(fm_elems(3, ok) == INT64_C(1) << 30);
  FM_EXPECT(fm_elems(2, at) == FM_MAX_ELEMS);
  FM_EXPECT(fm_elems(2, past) == -1);
  FM_EXPECT(fm_elems(3, wrap) == -1); /* 2^80 wraps to 0 in int64 */
  FM_EXPECT(fm_elems(2, zero) == -1);
}

/* fm_read_file: regular files of sizes around its buffer steps give their
 * bytes (NUL-terminated); a FIFO and a /proc file (size 0, content longer
 * than a probe) take the growing path; a directory and a missing file are
 * FM_EIO with errno kept. */
FM_TEST(read_file_any_size_and_kind) {
  char dir[] = "/tmp/fm_read_file_XXXXXX";
  FM_REQUIRE(mkdtemp(dir) != NULL);
  char path[300];
  snprintf(path, sizeof path, "%s/f", dir);
  static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 65535, 65536, 65537, 300001};
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
    size_t n = sizes[c];
    char *want = malloc(n + 1);
    for (size_t i = 0; i < n; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, want[i] = (char)(x >> 56);
    FILE *f = fopen(path, "wb");
    FM_REQUIRE(f != NULL);
    FM_REQUIRE(fwrite(want, 1, n, f) == n);
    fclose(f);
    char *got = NULL;
    size_t len = 12345;
    FM_EXPECT_EQ_INT(fm_read_file(path, &got, &len), 0);
    FM_EXPECT_EQ_INT(len, n);
    FM_EXPECT(got != NULL && memcmp(got, want, n) == 0 && got[n] == 0);
    free(got), free(want);
  }
  unlink(path);
  /* a FIFO: a writer child puts 100,000 bytes through it */
  FM_REQUIRE(mkfifo(path, 0600) == 0);
  pid_t pid = fork();
  FM_REQUIRE(pid >= 0);
  if (pid == 0) {
    FILE *w = fopen(path, "wb");
    for (int i = 0; i < 100000; i++) fputc('a' + i % 26, w);
    fclose(w);
    _exit(0);
  }
  char *got = NULL;
  size_t len = 0;
  FM_EXPECT_EQ_INT(fm_read_file(path, &got, &len), 0);
  FM_EXPECT_EQ_INT(len, 100000);
  int ok = got != NULL && got[len] == 0;
  for (size_t i = 0; ok && i < len; i++) ok = got[i] == 'a' + (int)(i % 26);
  FM_EXPECT(ok);
  free(got);
  unlink(path);
  /* /proc: st_size 0, content read to the end (compared with stdio's read) */
  char *proc = NULL;
  FM_EXPECT_EQ_INT(fm_read_file("/proc/self/maps", &proc, &len), 0);
  FM_EXPECT(proc != NULL && len > 0 && strlen(proc) == len && strstr(proc, "test_core") != NULL);
  free(proc);
  errno = 0;
  FM_EXPECT_EQ_INT(fm_read_file(dir, &got, &len), FM_EIO);
  FM_EXPECT_EQ_INT(errno, EISDIR);
  FM_EXPECT(got == NULL && len == 0);
  rmdir(dir);
  errno = 0;
  FM_EXPECT_EQ_INT(fm_read_file("/nonexistent/fm_read_file", &got, &len), FM_EIO);
  FM_EXPECT_EQ_INT(errno, ENOENT);
}

/* fm_same_file: one file by two spellings, through a symlink, and a file not
 * yet written named two ways (dedup's outputs); two files are not one. */
FM_TEST(same_file) {
  char dir[] = "/tmp/fm_same_XXXXXX";
  FM_REQUIRE(mkdtemp(dir) != NULL);
  char a[300], a2[300], b[300], link[300], miss[300], miss2[300];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(a2, sizeof a2, "%s/./sub/../a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(link, sizeof link, "%s/l", dir);
  snprintf(miss, sizeof miss, "%s/new.jsonl", dir);
  snprintf(miss2, sizeof miss2, "%s/sub/../new.jsonl", dir);
  char sub[300];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  FM_REQUIRE(mkdir(sub, 0700) == 0);
  FILE *f = fopen(a, "w");
  FM_REQUIRE(f != NULL);
  fclose(f);
  f = fopen(b, "w");
  FM_REQUIRE(f != NULL);
  fclose(f);
  FM_REQUIRE(symlink(a, link) == 0);
  FM_EXPECT(fm_same_file(a, a2));
  FM_EXPECT(fm_same_file(a, link));
  FM_EXPECT(!fm_same_file(a, b));
  FM_EXPECT(fm_same_file(miss, miss2));
  FM_EXPECT(!fm_same_file(miss, a));
  unlink(link), unlink(a), unlink(b), rmdir(sub), rmdir(dir);
}

/* fm_read_file_max: a device that never ends (/dev/zero), a regular file and
 * a /proc file over the cap are FM_EIO with errno EFBIG and nothing held; at
 * the cap they are read. */
FM_TEST(read_file_max_refuses_more) {
  char *got = (char *)1;
  size_t len = 7;
  errno = 0;
  FM_EXPECT_EQ_INT(fm_read_file_max("/dev/zero", &got, &len, (size_t)1 << 20), FM_EIO);
  FM_EXPECT_EQ_INT(errno, EFBIG);
  FM_EXPECT(got == NULL && len == 0);
  char path[] = "/tmp/fm_read_max_XXXXXX";
  const int fd = mkstemp(path);
  FM_REQUIRE(fd >= 0);
  FM_REQUIRE(write(fd, "0123456789", 10) == 10);
  close(fd);
  errno = 0;
  FM_EXPECT_EQ_INT(fm_read_file_max(path, &got, &len, 9), FM_EIO);
  FM_EXPECT_EQ_INT(errno, EFBIG);
  FM_EXPECT(got == NULL);
  FM_EXPECT_EQ_INT(fm_read_file_max(path, &got, &len, 10), 0);
  FM_EXPECT(len == 10 && got && strcmp(got, "0123456789") == 0);
  free(got);
  unlink(path);
  /* /proc/self/maps: st_size 0 and many lines, so the growing path decides */
  errno = 0;
  FM_EXPECT_EQ_INT(fm_read_file_max("/proc/self/maps", &got, &len, 100), FM_EIO);
  FM_EXPECT_EQ_INT(errno, EFBIG);
}

/* A warning or an error reaches stderr in one write(), prefix, message and
 * newline together, so a log that mpirun fills from a rank's stdout and
 * stderr at once cannot split them (regression.tp_resume once read
 * "fmhpc: warning: " followed by a stdout line). On a datagram socket each
 * write() is one datagram: the first one received must be the whole line. */
FM_TEST(warnings_and_errors_are_one_write) {
  int sv[2];
  FM_REQUIRE(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0);
  fflush(stderr);
  int saved = dup(2);
  FM_REQUIRE(saved >= 0);
  FM_REQUIRE(dup2(sv[0], 2) == 2);
  fm_warn0("resume: %d key(s) differ from %s", 2, "ckpt.h5");
  fm_err("%s: bad %s", "deck.in", "value");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char a[256] = {0}, b[256] = {0};
  ssize_t na = recv(sv[1], a, sizeof a - 1, MSG_DONTWAIT), nb = recv(sv[1], b, sizeof b - 1, MSG_DONTWAIT);
  close(sv[0]);
  close(sv[1]);
  FM_EXPECT(na > 0 && nb > 0);
  FM_EXPECT_EQ_STR(a, "fmhpc: warning: resume: 2 key(s) differ from ckpt.h5\n");
  FM_EXPECT_EQ_STR(b, "fmhpc: deck.in: bad value\n");
}

/* fm_heap_huge: a buffer allocated after the call is first touched in 2 MiB pages,
 * so touching 6 MiB takes far fewer faults than its 1536 4 KiB pages (at
 * most the 511 of an unaligned head below the first 2 MiB boundary, plus a
 * few huge ones). */
FM_TEST(heap_huge_pages_fault_less) {
#if defined(__SANITIZE_ADDRESS__)
  fm_test_skip("ASan's allocator ignores mallopt");
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  fm_test_skip("ASan's allocator ignores mallopt");
#endif
#endif
  char mode[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) {
    if (!fgets(mode, sizeof mode, f)) mode[0] = '\0';
    fclose(f);
  }
  if (!f || strstr(mode, "[never]")) fm_test_skip("transparent huge pages are off on this kernel");
  FM_EXPECT(fm_heap_huge((size_t)8 << 20));
  const size_t n = (size_t)6 << 20;
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  char *b = fm_xmalloc(n);
  memset(b, 1, n);
  getrusage(RUSAGE_SELF, &r1);
  long faults = r1.ru_minflt - r0.ru_minflt;
  fprintf(stderr, "touching %zu MiB took %ld faults (%zu pages of 4 KiB)\n", n >> 20, faults, n >> 12);
  FM_EXPECT(faults < 768);
  FM_EXPECT(b[n - 1] == 1);
  free(b);
}
