/* fm_test.c: the harness behind fm_test.h (registration and the runner). */
#include "fm_test.h"

FmTestCase fm__tests[512];
int fm__ntests = 0;
int fm__failures = 0;

void fm__test_register(const char *name, FmTestFn fn) {
  if (fm__ntests == (int)(sizeof fm__tests / sizeof fm__tests[0])) {
    fprintf(stderr, "fm_test: too many cases\n");
    exit(2);
  }
  fm__tests[fm__ntests].name = name;
  fm__tests[fm__ntests].fn = fn;
  fm__ntests++;
}

void fm_test_skip(const char *why) {
  printf("SKIP: %s\n", why);
  fflush(stdout);
  exit(77);
}

void fm_test_missing_oracle(const char *why) {
  const char *ci = getenv("CI");
  if (ci && !strcmp(ci, "true")) {
    printf("FAIL: %s; in CI a missing oracle is a failure\n", why);
    fflush(stdout);
    exit(1);
  }
  fm_test_skip(why);
}

static int run_case(const FmTestCase *tc) {
  int before = fm__failures;
  tc->fn();
  int failed = fm__failures != before;
  printf("%s: %s\n", failed ? "FAIL" : "ok", tc->name);
  fflush(stdout);
  return failed;
}

int fm_test_main(int argc, char **argv) {
  int nfail = 0, nrun = 0;
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < fm__ntests; i++) printf("%s\n", fm__tests[i].name);
    return 0;
  }
  for (int i = 0; i < fm__ntests; i++) {
    int selected = argc <= 1;
    for (int a = 1; a < argc; a++)
      if (strcmp(argv[a], fm__tests[i].name) == 0) selected = 1;
    if (!selected) continue;
    nrun++;
    nfail += run_case(&fm__tests[i]);
  }
  if (nrun == 0) {
    fprintf(stderr, "fm_test: no case matched\n");
    return 2;
  }
  return nfail ? 1 : 0;
}
