/* error_test.c - proves the contract of core/error.h: every status has its own name,
 * st_error formats this thread's detail and returns its status, ST_CHECK returns a failure up
 * the stack and logs only the first propagation site, ST_CHECK_GOTO stores the status and
 * jumps to the cleanup label, and each thread sees only its own detail. */
#include "core/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testing.h"

static void test_status_strings(void) {
  static const struct {
    st_status status;
    const char *name;
  } expected[] = {
      {ST_OK, "ST_OK"},
      {ST_ERR_INVALID_ARG, "ST_ERR_INVALID_ARG"},
      {ST_ERR_OOM, "ST_ERR_OOM"},
      {ST_ERR_IO, "ST_ERR_IO"},
      {ST_ERR_FORMAT, "ST_ERR_FORMAT"},
      {ST_ERR_UNSUPPORTED, "ST_ERR_UNSUPPORTED"},
      {ST_ERR_NO_DEVICE, "ST_ERR_NO_DEVICE"},
      {ST_ERR_CUDA, "ST_ERR_CUDA"},
      {ST_ERR_NCCL, "ST_ERR_NCCL"},
      {ST_ERR_MPI, "ST_ERR_MPI"},
      {ST_ERR_TIMEOUT, "ST_ERR_TIMEOUT"},
      {ST_ERR_INTERNAL, "ST_ERR_INTERNAL"},
  };
  size_t n = sizeof expected / sizeof expected[0];
  CHECK_EQ_INT(n, ST_ERR_INTERNAL + 1); /* a new status must be added here too */
  for (size_t i = 0; i < n; i++) {
    const char *name = st_status_string(expected[i].status);
    CHECK_MSG(name && strcmp(name, expected[i].name) == 0, "status %d is named %s, expected %s",
              (int)expected[i].status, name ? name : "(null)", expected[i].name);
  }
  CHECK(strcmp(st_status_string((st_status)(ST_ERR_INTERNAL + 1)), "ST_ERR_UNKNOWN") == 0);
  CHECK(strcmp(st_status_string((st_status)-1), "ST_ERR_UNKNOWN") == 0);
}

static void test_st_error_records_detail(void) {
  st_error_clear();
  CHECK(strcmp(st_last_error(), "") == 0);

  st_status s =
      st_error(ST_ERR_INVALID_ARG, "mesh %dx%dx%d needs %d ranks, world has %s", 2, 3, 2, 12, "8");
  CHECK_EQ_INT(s, ST_ERR_INVALID_ARG);
  CHECK_MSG(strcmp(st_last_error(), "mesh 2x3x2 needs 12 ranks, world has 8") == 0, "detail '%s'",
            st_last_error());

  /* A later error replaces the detail rather than appending to it. */
  CHECK_STATUS(st_error(ST_ERR_IO, "cannot open %s", "a.bin"), ST_ERR_IO);
  CHECK(strcmp(st_last_error(), "cannot open a.bin") == 0);

  /* A detail longer than the fixed buffer is truncated, never overflowed. */
  char long_text[4096];
  memset(long_text, 'x', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = '\0';
  CHECK_STATUS(st_error(ST_ERR_FORMAT, "%s", long_text), ST_ERR_FORMAT);
  size_t len = strlen(st_last_error());
  CHECK_MSG(len > 0 && len < sizeof long_text - 1, "truncated detail has length %zu", len);
  CHECK(strspn(st_last_error(), "x") == len);

  st_error_clear();
  CHECK(strcmp(st_last_error(), "") == 0);
}

/* A three-level call chain: leaf fails, mid and top propagate with ST_CHECK. */
static int mid_reached_end;

static st_status leaf(int fail) {
  return fail ? st_error(ST_ERR_IO, "leaf failed with code %d", 42) : ST_OK;
}

static st_status mid(int fail) {
  ST_CHECK(leaf(fail));
  mid_reached_end = 1;
  return ST_OK;
}

static st_status top(int fail) {
  ST_CHECK(mid(fail));
  return ST_OK;
}

/* Runs top(1) with stderr captured and returns the number of log lines it wrote. */
static int logged_lines_of_failing_chain(char *captured, size_t cap) {
  FILE *tmp = tmpfile();
  if (!CHECK(tmp != NULL)) return -1;
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  st_status s = top(1);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  CHECK_EQ_INT(s, ST_ERR_IO);

  rewind(tmp);
  size_t n = fread(captured, 1, cap - 1, tmp);
  captured[n] = '\0';
  fclose(tmp);
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += captured[i] == '\n';
  return lines;
}

static void test_st_check_propagates(void) {
  mid_reached_end = 0;
  CHECK_OK(top(0));
  CHECK(mid_reached_end); /* success falls through ST_CHECK */

  mid_reached_end = 0;
  st_error_clear();
  CHECK_STATUS(top(1), ST_ERR_IO);
  CHECK(!mid_reached_end); /* failure returns before the rest of mid */
  CHECK(strcmp(st_last_error(), "leaf failed with code 42") == 0);

  /* With ST_LOG_LEVEL=debug (set in main) the fresh error is logged at the first ST_CHECK
   * only, naming the expression and the detail; a second fresh error is logged again. */
  char captured[4096];
  for (int round = 0; round < 2; round++) {
    int lines = logged_lines_of_failing_chain(captured, sizeof captured);
    CHECK_MSG(lines == 1, "round %d: a failure through two ST_CHECKs logged %d lines: %s", round,
              lines, captured);
    CHECK_MSG(strstr(captured, "leaf(fail)") && strstr(captured, "ST_ERR_IO") &&
                  strstr(captured, "leaf failed with code 42") && strstr(captured, "debug"),
              "log line '%s'", captured);
  }
}

/* Acquires three resources with ST_CHECK_GOTO; the second step fails when asked to. */
typedef struct goto_trace {
  int acquired;
  int third_step_ran;
  int cleanup_ran;
  int released;
} goto_trace;

static st_status acquire(goto_trace *t, int fail) {
  if (fail) return st_error(ST_ERR_OOM, "step %d failed", t->acquired + 1);
  t->acquired++;
  return ST_OK;
}

static st_status three_steps(goto_trace *t, int fail_second) {
  st_status status = ST_OK;
  ST_CHECK_GOTO(acquire(t, 0), status, fail);
  ST_CHECK_GOTO(acquire(t, fail_second), status, fail);
  t->third_step_ran = 1;
  ST_CHECK_GOTO(acquire(t, 0), status, fail);
  return ST_OK;
fail:
  t->cleanup_ran = 1;
  t->released = t->acquired;
  t->acquired = 0;
  return status;
}

static void test_st_check_goto_jumps_to_cleanup(void) {
  goto_trace ok = {0};
  CHECK_OK(three_steps(&ok, 0));
  CHECK_EQ_INT(ok.acquired, 3);
  CHECK(ok.third_step_ran);
  CHECK(!ok.cleanup_ran);

  goto_trace bad = {0};
  CHECK_STATUS(three_steps(&bad, 1), ST_ERR_OOM);
  CHECK(!bad.third_step_ran);
  CHECK(bad.cleanup_ran);
  CHECK_EQ_INT(bad.released, 1); /* exactly what the first step acquired */
  CHECK_EQ_INT(bad.acquired, 0);
  CHECK(strcmp(st_last_error(), "step 2 failed") == 0);
}

/* The second thread reports what it saw; only the main thread runs CHECKs (the harness's
 * counters are not thread-safe). */
typedef struct thread_view {
  pthread_barrier_t *barrier;
  char initial[64];
  char own_after_main_wrote[64];
} thread_view;

static void *detail_thread(void *arg) {
  thread_view *v = arg;
  snprintf(v->initial, sizeof v->initial, "%s", st_last_error());
  st_error(ST_ERR_TIMEOUT, "thread detail %d", 7);
  pthread_barrier_wait(v->barrier); /* 1: main now writes its own detail */
  pthread_barrier_wait(v->barrier); /* 2: main has written */
  snprintf(v->own_after_main_wrote, sizeof v->own_after_main_wrote, "%s", st_last_error());
  return NULL;
}

static void test_detail_is_thread_local(void) {
  st_error(ST_ERR_MPI, "main detail");
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  thread_view view = {.barrier = &barrier};
  pthread_t thread;
  if (!CHECK(pthread_create(&thread, NULL, detail_thread, &view) == 0)) return;
  pthread_barrier_wait(&barrier);
  CHECK_MSG(strcmp(st_last_error(), "main detail") == 0, "main sees '%s' after the thread wrote",
            st_last_error());
  st_error(ST_ERR_MPI, "main detail, second");
  pthread_barrier_wait(&barrier);
  pthread_join(thread, NULL);
  pthread_barrier_destroy(&barrier);

  CHECK_MSG(strcmp(view.initial, "") == 0, "a new thread starts with detail '%s'", view.initial);
  CHECK_MSG(strcmp(view.own_after_main_wrote, "thread detail 7") == 0,
            "the thread sees '%s' after main wrote", view.own_after_main_wrote);
  CHECK(strcmp(st_last_error(), "main detail, second") == 0);
}

int main(void) {
  /* Must precede the first log call: the level is read once. */
  setenv("ST_LOG_LEVEL", "debug", 1);
  test_status_strings();
  test_st_error_records_detail();
  test_st_check_propagates();
  test_st_check_goto_jumps_to_cleanup();
  test_detail_is_thread_local();
  return test_finish("error_test");
}
