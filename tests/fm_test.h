/* fm_test.h: the unit-test harness. A test file declares cases with
 *   FM_TEST(name) { ... FM_EXPECT_EQ_INT(a, b); ... }
 * and CMake (fm_add_test_file in tests/CMakeLists.txt) reads the FM_TEST lines
 * and registers one ctest per case, run as `binary name`. With no argument the
 * binary runs every case. A failed expectation prints file:line, both values,
 * and makes the case fail; cases never share state. */
#ifndef FM_TEST_H
#define FM_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*FmTestFn)(void);
typedef struct FmTestCase {
  const char *name;
  FmTestFn fn;
} FmTestCase;

extern FmTestCase fm__tests[];
extern int fm__ntests;
extern int fm__failures;
void fm__test_register(const char *name, FmTestFn fn);

#define FM_TEST(name)                                                                       \
  static void fm__test_##name(void);                                                        \
  __attribute__((constructor)) static void fm__reg_##name(void) {                          \
    fm__test_register(#name, fm__test_##name);                                              \
  }                                                                                         \
  static void fm__test_##name(void)

#define FM__FAIL(...)                                         \
  do {                                                        \
    fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);     \
    fprintf(stderr, __VA_ARGS__);                             \
    fputc('\n', stderr);                                      \
    fm__failures++;                                           \
  } while (0)

#define FM_EXPECT(cond)                               \
  do {                                                \
    if (!(cond)) FM__FAIL("expected %s", #cond);      \
  } while (0)
#define FM_REQUIRE(cond)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      FM__FAIL("required %s", #cond);                                   \
      return;                                                           \
    }                                                                   \
  } while (0)
#define FM_EXPECT_EQ_INT(a, b)                                                               \
  do {                                                                                       \
    long long fm__a = (long long)(a), fm__b = (long long)(b);                                \
    if (fm__a != fm__b) FM__FAIL("%s == %s: %lld != %lld", #a, #b, fm__a, fm__b);            \
  } while (0)
#define FM_EXPECT_EQ_STR(a, b)                                                               \
  do {                                                                                       \
    const char *fm__a = (a), *fm__b = (b);                                                   \
    if (!fm__a || !fm__b || strcmp(fm__a, fm__b) != 0)                                       \
      FM__FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, fm__a ? fm__a : "(null)",               \
               fm__b ? fm__b : "(null)");                                                    \
  } while (0)
#define FM_EXPECT_CONTAINS(hay, needle)                                                      \
  do {                                                                                       \
    const char *fm__h = (hay), *fm__n = (needle);                                            \
    if (!fm__h || !strstr(fm__h, fm__n))                                                     \
      FM__FAIL("%s contains \"%s\"; it is:\n%s", #hay, fm__n, fm__h ? fm__h : "(null)");     \
  } while (0)
/* |a-b| <= atol + rtol*|b| */
#define FM_EXPECT_NEAR(a, b, rtol, atol)                                                     \
  do {                                                                                       \
    double fm__a = (double)(a), fm__b = (double)(b);                                         \
    if (!(fabs(fm__a - fm__b) <= (atol) + (rtol)*fabs(fm__b)))                               \
      FM__FAIL("%s ~ %s: %.9g vs %.9g (rtol %g, atol %g)", #a, #b, fm__a, fm__b,             \
               (double)(rtol), (double)(atol));                                              \
  } while (0)
/* Bitwise equality of floats (the design promises bits in places). */
#define FM_EXPECT_BITS_EQ_F32(a, b)                                                          \
  do {                                                                                       \
    float fm__a = (a), fm__b = (b);                                                          \
    if (memcmp(&fm__a, &fm__b, 4) != 0) FM__FAIL("%s bits == %s bits: %a vs %a", #a, #b,    \
                                                 (double)fm__a, (double)fm__b);             \
  } while (0)

/* Run the harness. `skip_code`: a case may call fm_test_skip() (e.g. no GPU)
 * and the binary then exits 77, which ctest reports as skipped. */
int fm_test_main(int argc, char **argv);
_Noreturn void fm_test_skip(const char *why);
/* A missing oracle (a reference file a torch fixture writes, ...): skipped
 * (exit 77) on a developer machine, a failure (exit 1) when env CI=true, as
 * tests/oracle.py and tests/oracle.sh. */
_Noreturn void fm_test_missing_oracle(const char *why);

#endif
