/* deadline_test.c - proves core/deadline.h: a call that finishes before its deadline leaves the
 * process running and silent past the limit (armed and disarmed many times); one that overruns ends
 * the process with DEADLINE_EXIT_CODE and one stderr line naming it and the limit, soon after the
 * limit and long before the call would have returned, also with a second deadline armed and
 * disarmed inside it (that line names the outer deadline's kind's variable); a deadline extended
 * as a call progresses ends it only once it stalls (checked in forked
 * children, their stderr through a pipe, after the parent's own watchdog started: a child starts
 * its own); a limit that is not a positive number is refused; deadline_watchdog_stop ends the
 * watchdog thread (which ran the library's code after st_finalize: a program that unloaded the
 * library crashed in it), leaves it running while a deadline is armed, and the next arm starts a
 * new one that still ends an overrun.
 */
#include "core/deadline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "tests/testing.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double seconds) {
  const struct timespec ts = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
  nanosleep(&ts, NULL);
}

typedef struct child_result {
  int exited, code;
  double seconds;   /* from the fork to the child's end */
  char stderr[512]; /* what it wrote there */
} child_result;

/* Runs `body(seconds, call_s)` in a child and collects how it ended. */
static child_result run_child(void (*body)(double, double), double seconds, double call_s) {
  child_result r = {0};
  int fds[2];
  CHECK(pipe(fds) == 0);
  const double start = now_s();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    body(seconds, call_s);
    _exit(0);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t n;
  while ((n = read(fds[0], r.stderr + got, sizeof r.stderr - 1 - got)) > 0) got += (size_t)n;
  close(fds[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  r.seconds = now_s() - start;
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  return r;
}

/* A blocking call of `call_s` seconds under a deadline of `seconds`. */
static void guarded_call(double seconds, double call_s) {
  deadline d;
  if (deadline_arm(&d, DEADLINE_COLLECTIVE, seconds, "the test's blocking call") != ST_OK)
    _exit(90);
  sleep_s(call_s);
  deadline_disarm(&d);
}

static void check_overrun(void) {
  /* A 0.2 s limit on a 30 s call: the child ends after about 0.2 s, not 30. */
  const child_result r = run_child(guarded_call, 0.2, 30.0);
  CHECK_MSG(r.exited && r.code == DEADLINE_EXIT_CODE, "exited %d with code %d", r.exited, r.code);
  CHECK_MSG(r.seconds >= 0.2 && r.seconds < 10.0, "ended after %.2f s", r.seconds);
  CHECK_MSG(strcmp(r.stderr,
                   "shardtrain: error: the test's blocking call did not finish within 0.2 s "
                   "(ST_COMM_TIMEOUT): a rank failed inside it or cannot reach the others\n") == 0,
            "stderr: '%s'", r.stderr);
}

/* Two deadlines armed, the inner (longer) one disarmed: the outer still ends the call. */
static void nested_call(double seconds, double call_s) {
  deadline outer, inner;
  if (deadline_arm(&outer, DEADLINE_FILE_WORK, seconds, "the outer call") != ST_OK) _exit(90);
  if (deadline_arm(&inner, DEADLINE_COLLECTIVE, 100 * seconds, "the inner call") != ST_OK)
    _exit(91);
  deadline_disarm(&inner);
  sleep_s(call_s);
  deadline_disarm(&outer);
}

static void check_nested(void) {
  const child_result r = run_child(nested_call, 0.2, 30.0);
  CHECK_MSG(r.exited && r.code == DEADLINE_EXIT_CODE, "exited %d with code %d", r.exited, r.code);
  CHECK_MSG(strcmp(r.stderr,
                   "shardtrain: error: the outer call did not finish within 0.2 s (ST_IO_TIMEOUT): "
                   "a rank, or its file system, is stuck\n") == 0,
            "stderr: '%s'", r.stderr);
}

/* A call of `call_s` seconds under a limit of `seconds`, then 100 more, each disarmed in time;
 * then the child lives on past every limit, where a deadline left armed would end it. Each in
 * its own place (a deadline re-armed in place while still armed would link to itself). */
static void calls_in_time(double seconds, double call_s) {
  deadline first, quick[100];
  if (deadline_arm(&first, DEADLINE_COLLECTIVE, seconds, "the test's blocking call") != ST_OK)
    _exit(90);
  sleep_s(call_s);
  deadline_disarm(&first);
  for (int i = 0; i < 100; i++) {
    if (deadline_arm(&quick[i], DEADLINE_COLLECTIVE, seconds, "a quick call") != ST_OK) _exit(90);
    deadline_disarm(&quick[i]);
  }
  sleep_s(2 * seconds);
}

static void check_in_time(void) {
  /* A 0.1 s call under a 0.5 s limit: the child goes on to 1.1 s, exits 0, says nothing. */
  const child_result r = run_child(calls_in_time, 0.5, 0.1);
  CHECK_MSG(r.exited && r.code == 0, "exited %d with code %d", r.exited, r.code);
  CHECK_MSG(r.stderr[0] == '\0', "stderr: '%s'", r.stderr);
  CHECK_MSG(r.seconds >= 1.0, "ended after %.2f s", r.seconds);
}

/* A call that makes progress every `step` seconds for 8 steps, extending its deadline of
 * `seconds` each time, then stalls for 30 s. */
static void progressing_call(double seconds, double step) {
  deadline d;
  if (deadline_arm(&d, DEADLINE_FILE_WORK, seconds, "the progressing call") != ST_OK) _exit(90);
  for (int i = 0; i < 8; i++) {
    sleep_s(step);
    deadline_extend(&d);
  }
  sleep_s(30.0);
  deadline_disarm(&d);
}

static void check_extend(void) {
  /* Steps of 0.1 s under a limit of 0.3 s: alive through the 0.8 s of progress, ended about
   * 0.3 s into the stall. */
  const child_result r = run_child(progressing_call, 0.3, 0.1);
  CHECK_MSG(r.exited && r.code == DEADLINE_EXIT_CODE, "exited %d with code %d", r.exited, r.code);
  CHECK_MSG(r.seconds >= 1.0 && r.seconds < 10.0, "ended after %.2f s", r.seconds);
  CHECK_MSG(strstr(r.stderr, "the progressing call did not finish within 0.3 s") != NULL,
            "stderr: '%s'", r.stderr);
}

static void check_refusals(void) {
  const double bad[] = {0.0, -1.0, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    deadline d;
    CHECK_STATUS(deadline_arm(&d, DEADLINE_COLLECTIVE, bad[i], "a call"), ST_ERR_INVALID_ARG);
    CHECK(strstr(st_last_error(), "deadline for a call:") != NULL);
  }
}

/* The threads of this process. */
static int thread_count(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int threads = -1;
  while (f && fgets(line, sizeof line, f)) {
    if (sscanf(line, "Threads: %d", &threads) == 1) break;
  }
  if (f) fclose(f);
  return threads;
}

static void check_watchdog_stop(void) {
  deadline d;
  CHECK_OK(deadline_arm(&d, DEADLINE_COLLECTIVE, 60, "a call"));
  const int watched = thread_count();
  deadline_watchdog_stop(); /* something is armed: the thread stays */
  CHECK_EQ_INT(thread_count(), watched);
  deadline_disarm(&d);
  deadline_watchdog_stop();
  CHECK_EQ_INT(thread_count(), watched - 1);
  deadline_watchdog_stop(); /* no thread: nothing to do */
  CHECK_EQ_INT(thread_count(), watched - 1);
  CHECK_OK(deadline_arm(&d, DEADLINE_COLLECTIVE, 60, "a call"));
  CHECK_EQ_INT(thread_count(), watched);
  deadline_disarm(&d);
  /* Ended again before the next fork: a thread still starting when the process forks may hold
   * AddressSanitizer's allocator lock (GCC 12's ASan does not take it around fork as glibc's
   * malloc does), and the child's first thread then waits for it forever (2 of 40 runs hung
   * under load). */
  deadline_watchdog_stop();
  CHECK_EQ_INT(thread_count(), watched - 1);
}

/* The watchdog stopped, then the call of check_overrun: the next arm's new thread ends it. */
static void call_after_stop(double seconds, double call_s) {
  deadline d;
  if (deadline_arm(&d, DEADLINE_COLLECTIVE, 60, "a call") != ST_OK) _exit(92);
  deadline_disarm(&d);
  deadline_watchdog_stop();
  guarded_call(seconds, call_s);
}

static void check_overrun_after_stop(void) {
  const child_result r = run_child(call_after_stop, 0.2, 30.0);
  CHECK_MSG(r.exited && r.code == DEADLINE_EXIT_CODE, "exited %d with code %d", r.exited, r.code);
  CHECK_MSG(r.seconds < 10.0, "ended after %.2f s", r.seconds);
}

int main(void) {
  check_in_time();
  check_overrun();
  check_nested();
  check_extend();
  check_refusals();
  check_watchdog_stop();
  check_overrun_after_stop();
  return test_finish("deadline_test");
}
