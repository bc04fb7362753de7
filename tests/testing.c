/* testing.c - failure counting and reporting for tests/testing.h. */
#include "tests/testing.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long checks_run;
static long checks_failed;

int test_check(int ok, const char *file, int line, const char *fmt, ...) {
  checks_run++;
  if (ok) return 1;
  checks_failed++;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL %s:%d: %s\n", file, line, msg);
  return 0;
}

long test_checks_run(void) { return checks_run; }

long test_checks_failed(void) { return checks_failed; }

int test_finish(const char *name) {
  printf("%s: %ld checks, %ld failed\n", name, checks_run, checks_failed);
  return checks_failed ? 1 : 0;
}

/* The GPU suite (tests/gpu/run_gpu_suite.sh) exports ST_TEST_REQUIRE_GPU=1: there a test that
 * would skip has not run, which must not read as a pass. */
int test_skip(const char *name, const char *why) {
  const char *require = getenv("ST_TEST_REQUIRE_GPU");
  if (require && strcmp(require, "1") == 0) {
    checks_run++;
    checks_failed++;
    printf("FAIL %s: would SKIP (%s), but ST_TEST_REQUIRE_GPU=1 requires it to run\n", name, why);
    fflush(stdout);
    return 1;
  }
  printf("SKIP %s: %s\n", name, why);
  return 0;
}

int test_check_eq_int(long long a, long long b, const char *file, int line, const char *a_text,
                      const char *b_text) {
  return test_check(a == b, file, line, "%s == %s (%lld vs %lld)", a_text, b_text, a, b);
}

int test_check_near(double a, double b, double tol, const char *file, int line, const char *a_text,
                    const char *b_text) {
  return test_check(fabs(a - b) <= tol, file, line, "%s ~ %s (%.9g vs %.9g, tol %g)", a_text,
                    b_text, a, b, tol);
}
