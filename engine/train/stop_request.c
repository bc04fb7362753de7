/* stop_request.c - see stop_request.h. */
#include "engine/train/stop_request.h"

#include <mpi.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "core/check_mpi.h"

static const int caught_signals[] = {SIGTERM, SIGUSR1};
enum { CAUGHT_COUNT = sizeof caught_signals / sizeof caught_signals[0] };

/* The largest signal number caught, as the ranks agree on it (stop_request_agree), so that a
 * rank that got SIGTERM and then SIGUSR1 reports what the others would. Atomic: a signal sent
 * to the process may run its handler on any of its threads (the watchdog's, MPI's, BLAS's). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a lock-free int, safe in a signal handler");
static atomic_int received;
static struct sigaction previous[CAUGHT_COUNT];

static void note_signal(int signo) {
  int seen = atomic_load(&received);
  while (signo > seen && !atomic_compare_exchange_weak(&received, &seen, signo)) {
  }
}

void stop_request_install(void) {
  atomic_store(&received, 0);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  /* SA_RESTART: a read or write the signal interrupts carries on; SA_RESETHAND: the next signal
   * of the kind takes its default action. */
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  for (int i = 0; i < CAUGHT_COUNT; i++) sigaction(caught_signals[i], &action, &previous[i]);
}

void stop_request_restore(void) {
  for (int i = 0; i < CAUGHT_COUNT; i++) sigaction(caught_signals[i], &previous[i], NULL);
  atomic_store(&received, 0);
}

st_status stop_request_agree(int *signo) {
  *signo = atomic_load(&received);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, signo, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return ST_OK;
}

const char *stop_request_signal_name(int signo) {
  return signo == SIGTERM ? "SIGTERM" : signo == SIGUSR1 ? "SIGUSR1" : "a signal";
}
