/* deadline.c - a timer thread that ends the process when a blocking call overruns (deadline.h). */
#include "core/deadline.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

/* Writes the one error line with write(2) (no stdio lock the interrupted call might hold) and
 * ends the process. */
static void overrun(const deadline *d) {
  char line[320];
  const int n = snprintf(line, sizeof line,
                         "shardtrain: error: %s did not finish within %g s (ST_COMM_TIMEOUT): a "
                         "rank failed inside it or cannot reach the others\n",
                         d->what, d->seconds);
  if (n > 0) {
    const size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (write(STDERR_FILENO, line, len) < 0) {
      /* nothing more can be said */
    }
  }
  _exit(DEADLINE_EXIT_CODE);
}

static void *timer(void *arg) {
  deadline *d = arg;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  const double whole = floor(d->seconds);
  until.tv_sec += (time_t)whole;
  until.tv_nsec += (long)((d->seconds - whole) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&d->lock);
  int waited = 0;
  while (!d->disarmed && waited != ETIMEDOUT) {
    waited = pthread_cond_timedwait(&d->disarmed_cond, &d->lock, &until);
  }
  const int passed = !d->disarmed;
  pthread_mutex_unlock(&d->lock);
  if (passed) overrun(d);
  return NULL;
}

st_status deadline_arm(deadline *d, double seconds, const char *what) {
  memset(d, 0, sizeof *d);
  if (!isfinite(seconds) || seconds <= 0) {
    return st_error(ST_ERR_INVALID_ARG, "deadline for %s: %g s must be > 0", what, seconds);
  }
  d->seconds = seconds;
  snprintf(d->what, sizeof d->what, "%s", what);
  pthread_condattr_t attr;
  int failed = pthread_condattr_init(&attr);
  if (!failed) {
    failed = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!failed) failed = pthread_cond_init(&d->disarmed_cond, &attr);
    pthread_condattr_destroy(&attr);
  }
  if (failed) return st_error(ST_ERR_INTERNAL, "deadline for %s: no condition variable", what);
  pthread_mutex_init(&d->lock, NULL);
  if (pthread_create(&d->thread, NULL, timer, d) != 0) {
    pthread_cond_destroy(&d->disarmed_cond);
    pthread_mutex_destroy(&d->lock);
    return st_error(ST_ERR_INTERNAL, "deadline for %s: cannot start its timer thread", what);
  }
  return ST_OK;
}

void deadline_disarm(deadline *d) {
  pthread_mutex_lock(&d->lock);
  d->disarmed = 1;
  pthread_cond_signal(&d->disarmed_cond);
  pthread_mutex_unlock(&d->lock);
  pthread_join(d->thread, NULL);
  pthread_cond_destroy(&d->disarmed_cond);
  pthread_mutex_destroy(&d->lock);
}
