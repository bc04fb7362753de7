/* deadline.h - a limit on a blocking call that has none of its own: NCCL's communicator set-up
 * (ncclCommInitRankConfig, ncclCommSplit) waits inside the call for every rank of the group, and
 * a rank that failed inside it, or cannot reach the others, leaves them waiting for ever.
 *
 *   deadline d;
 *   ST_CHECK(deadline_arm(&d, timeout_s, "NCCL set-up (ncclCommSplit) of group shard"));
 *   ... the blocking call ...
 *   deadline_disarm(&d);
 *
 * Arming starts a timer thread. If the call is still running `seconds` later, that thread writes
 * one error line to stderr naming what did not finish and the limit, and ends the process with
 * exit code DEADLINE_EXIT_CODE at once (_exit: nothing else can run meanwhile, least of all the
 * call it interrupts). A rank that exits without MPI_Finalize makes mpirun end the job; under
 * srun every rank stuck in the same call meets its own deadline. */
#ifndef ST_CORE_DEADLINE_H
#define ST_CORE_DEADLINE_H

#include <pthread.h>

#include "shardtrain.h"

/* The exit code of a process whose deadline passed: that of a collective's timeout. */
enum { DEADLINE_EXIT_CODE = 3 };

typedef struct deadline {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t disarmed_cond;
  int disarmed;
  double seconds;
  char what[160];
} deadline;

/* Starts the timer for `what` (a phrase: "NCCL set-up (ncclCommSplit) of group shard").
 * ST_ERR_INVALID_ARG for seconds not finite and > 0; ST_ERR_INTERNAL when the thread cannot be
 * started (nothing is left running then). */
st_status deadline_arm(deadline *d, double seconds, const char *what);

/* Stops the timer and waits for its thread to end. */
void deadline_disarm(deadline *d);

#endif /* ST_CORE_DEADLINE_H */
