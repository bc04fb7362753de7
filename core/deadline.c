/* deadline.c - the process's watchdog thread over armed deadlines (deadline.h). */
#include "core/deadline.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

/* The watchdog: the armed deadlines, and the process whose thread watches them (a forked child
 * has no thread until it arms a deadline), the thread, and whether it is asked to end (it ends
 * once nothing is armed, and says so by clearing `watching`, so that an arm in the meantime is
 * still watched, and one after it starts a new thread). */
static struct {
  pthread_mutex_t lock;
  deadline *armed;
  pid_t watching; /* 0: no thread */
  int fork_handlers;
  pthread_t thread;
  int ending;
} watch = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* How often the watchdog looks: the deadlines are minutes, so a few tens of ms late is nothing. */
#define WATCH_PERIOD_NS 20000000L

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Per kind: the variable that sets the limit, and what passing it means. */
static const struct {
  const char *variable, *meaning;
} kinds[] = {
    [DEADLINE_COLLECTIVE] = {"ST_COMM_TIMEOUT",
                             "a rank failed inside it or cannot reach the others"},
    [DEADLINE_FILE_WORK] = {"ST_IO_TIMEOUT", "a rank, or its file system, is stuck"},
};

/* Writes the one error line with write(2) (no stdio lock the interrupted call might hold) and
 * ends the process. */
static void overrun(const deadline *d) {
  char line[sizeof d->what + 256];
  const int n =
      snprintf(line, sizeof line, "shardtrain: error: %s did not finish within %g s (%s): %s\n",
               d->what, d->seconds, kinds[d->kind].variable, kinds[d->kind].meaning);
  if (n > 0) {
    const size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (write(STDERR_FILENO, line, len) < 0) {
      /* nothing more can be said */
    }
  }
  _exit(DEADLINE_EXIT_CODE);
}

/* Ends the process if an armed deadline has passed. Called with the lock held. */
static void check_due(void) {
  const double now = now_s();
  for (const deadline *d = watch.armed; d; d = d->next) {
    if (now >= d->due_s) overrun(d);
  }
}

static void *watchdog(void *arg) {
  (void)arg;
  const struct timespec period = {0, WATCH_PERIOD_NS};
  for (int ends = 0; !ends;) {
    nanosleep(&period, NULL);
    pthread_mutex_lock(&watch.lock);
    check_due();
    ends = watch.ending && watch.armed == NULL;
    if (ends) watch.watching = 0;
    pthread_mutex_unlock(&watch.lock);
  }
  return NULL;
}

/* Around a fork: no thread holds the lock while the child copies it; the child starts afresh,
 * with no watchdog and nothing armed. */
static void before_fork(void) { pthread_mutex_lock(&watch.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&watch.lock); }
static void after_fork_child(void) {
  watch.armed = NULL;
  watch.watching = 0;
  watch.ending = 0;
  pthread_mutex_unlock(&watch.lock);
}

/* Starts this process's watchdog thread unless it runs. Called with the lock held. */
static st_status start_watchdog(void) {
  if (watch.watching == getpid()) return ST_OK;
  if (!watch.fork_handlers) {
    if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0) {
      return st_error(ST_ERR_INTERNAL, "deadline: cannot register its fork handlers");
    }
    watch.fork_handlers = 1;
  }
  if (pthread_create(&watch.thread, NULL, watchdog, NULL) != 0) {
    return st_error(ST_ERR_INTERNAL, "deadline: cannot start its watchdog thread");
  }
  watch.watching = getpid();
  watch.ending = 0;
  return ST_OK;
}

void deadline_watchdog_stop(void) {
  pthread_mutex_lock(&watch.lock);
  /* Once: a second stop while the first waits finds `ending` set and leaves the join to it. */
  const int stops = watch.watching == getpid() && watch.armed == NULL && !watch.ending;
  const pthread_t thread = watch.thread;
  if (stops) watch.ending = 1;
  pthread_mutex_unlock(&watch.lock);
  /* A deadline armed meanwhile keeps the thread until it is disarmed. */
  if (stops) pthread_join(thread, NULL);
}

st_status deadline_arm(deadline *d, deadline_kind kind, double seconds, const char *what) {
  memset(d, 0, sizeof *d);
  d->kind = kind;
  if (!isfinite(seconds) || seconds <= 0) {
    return st_error(ST_ERR_INVALID_ARG, "deadline for %s: %g s must be > 0", what, seconds);
  }
  d->seconds = seconds;
  d->due_s = now_s() + seconds;
  snprintf(d->what, sizeof d->what, "%s", what);
  pthread_mutex_lock(&watch.lock);
  const st_status status = start_watchdog();
  if (status == ST_OK) {
    d->next = watch.armed;
    watch.armed = d;
  }
  pthread_mutex_unlock(&watch.lock);
  return status;
}

void deadline_extend(deadline *d) {
  pthread_mutex_lock(&watch.lock);
  d->due_s = now_s() + d->seconds;
  pthread_mutex_unlock(&watch.lock);
}

void deadline_disarm(deadline *d) {
  pthread_mutex_lock(&watch.lock);
  for (deadline **at = &watch.armed; *at; at = &(*at)->next) {
    if (*at == d) {
      *at = d->next;
      break;
    }
  }
  pthread_mutex_unlock(&watch.lock);
}
