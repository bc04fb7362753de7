/* testing.h - the minimal test harness shared by every C and C++ test.
 *
 * CHECK* macros record a failure (with file:line and the values) and carry on, so one run
 * reports every broken assertion. test_finish() prints "<name>: N checks, M failed" and
 * returns the process exit code. Multi-rank tests use testing_mpi.h instead of test_finish.
 */
#ifndef ST_TESTS_TESTING_H
#define ST_TESTS_TESTING_H

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records one check; on failure prints "FAIL file:line: <message>". Returns ok. */
int test_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

long test_checks_run(void);
long test_checks_failed(void);

/* Prints the summary line and returns 0 when nothing failed, 1 otherwise. */
int test_finish(const char *name);

/* Prints "SKIP <name>: <why>" and returns 0 (the exit code of a skipped test). Where the
 * environment sets ST_TEST_REQUIRE_GPU=1 (the GPU suite) a skip is a failure instead: it prints
 * "FAIL <name>: would SKIP (<why>) ...", counts a failed check and returns 1. */
int test_skip(const char *name, const char *why);

/* Back ends of CHECK_EQ_INT and CHECK_NEAR: each argument is evaluated exactly once. */
int test_check_eq_int(long long a, long long b, const char *file, int line, const char *a_text,
                      const char *b_text);
int test_check_near(double a, double b, double tol, const char *file, int line, const char *a_text,
                    const char *b_text);

#ifdef __cplusplus
}
#endif

#define CHECK(cond) test_check(!!(cond), __FILE__, __LINE__, "%s", #cond)
#define CHECK_MSG(cond, ...) test_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_EQ_INT(a, b) \
  test_check_eq_int((long long)(a), (long long)(b), __FILE__, __LINE__, #a, #b)
#define CHECK_NEAR(a, b, tol) \
  test_check_near((double)(a), (double)(b), (double)(tol), __FILE__, __LINE__, #a, #b)
/* Runs a call that must succeed; on failure prints the status and st_last_error(). */
#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    st_status check_ok_s_ = (expr);                                             \
    test_check(check_ok_s_ == ST_OK, __FILE__, __LINE__, "%s -> %s: %s", #expr, \
               st_status_string(check_ok_s_), st_last_error());                 \
  } while (0)
/* Runs a call that must fail with `status`. */
#define CHECK_STATUS(expr, status)                                                               \
  do {                                                                                           \
    st_status check_st_s_ = (expr);                                                              \
    test_check(check_st_s_ == (status), __FILE__, __LINE__, "%s -> %s, expected %s (%s)", #expr, \
               st_status_string(check_st_s_), st_status_string(status), st_last_error());        \
  } while (0)

#endif /* ST_TESTS_TESTING_H */
