/* deadline.h - a limit on a blocking call that has none of its own. NCCL's communicator set-up
 * (ncclCommInitRankConfig, ncclCommSplit) and a collective's enqueue, where NCCL connects the
 * ranks on first use, wait inside the call for every rank of the group: a rank that failed
 * inside it, or cannot reach the others, would leave them waiting for ever.
 *
 *   deadline d;
 *   ST_CHECK(deadline_arm(&d, DEADLINE_COLLECTIVE, timeout_s,
 *                         "NCCL set-up (ncclCommSplit) of group shard"));
 *   ... the blocking call ...
 *   deadline_disarm(&d);
 *
 * The same guard bounds a stall in a rank's file work (engine/io/job_agree.h): a rank stuck on a
 * hung file system would hold itself and the others for ever.
 *
 * One watchdog thread per process, started by the first arm (until deadline_watchdog_stop), keeps
 * the armed deadlines. If a
 * call is still running `seconds` after its arm, the watchdog writes one error line to stderr
 * naming what did not finish, the limit and the variable that sets it (the kind's), and ends
 * the process with exit code DEADLINE_EXIT_CODE at once (_exit: nothing else may run meanwhile,
 * least of all the call it interrupts). A rank that exits without MPI_Finalize makes mpirun end the
 * job; under srun every rank stuck in the same call meets its own deadline. Arming and disarming
 * cost a lock each, cheap enough for every collective's enqueue. A forked child starts its own
 * watchdog. */
#ifndef ST_CORE_DEADLINE_H
#define ST_CORE_DEADLINE_H

#include "shardtrain.h"

/* The exit code of a process whose deadline passed: that of a collective's timeout. */
enum { DEADLINE_EXIT_CODE = 3 };

/* What a deadline bounds, which names the variable that sets its limit in the error line. */
typedef enum deadline_kind {
  DEADLINE_COLLECTIVE = 0, /* a collective call: ST_COMM_TIMEOUT */
  DEADLINE_FILE_WORK = 1   /* a stall in a rank's file work: ST_IO_TIMEOUT */
} deadline_kind;

typedef struct deadline {
  deadline_kind kind;
  double due_s;          /* on the monotonic clock */
  double seconds;        /* the limit, for the message */
  char what[4400];       /* room for a checkpoint file's path */
  struct deadline *next; /* the watchdog's list */
} deadline;

/* Arms a deadline of `kind` `seconds` from now for `what` (a phrase: "NCCL set-up
 * (ncclCommSplit) of group shard"); `d` must stay in place until disarmed. ST_ERR_INVALID_ARG for
 * seconds not finite and > 0; ST_ERR_INTERNAL when the watchdog cannot be started (nothing is
 * armed then). */
st_status deadline_arm(deadline *d, deadline_kind kind, double seconds, const char *what);

/* Moves armed `d` to `seconds` (its arm's) from now: a long call that makes progress (a file
 * written chunk by chunk) extends its deadline with each step, so the limit bounds a stall, not
 * the whole call. */
void deadline_extend(deadline *d);

/* Disarms `d`, armed before. */
void deadline_disarm(deadline *d);

/* Ends the watchdog thread, if it runs and nothing is armed, and waits for it (st_finalize): a
 * program that unloads the library (dlclose) after st_finalize must not keep a thread running
 * its code. The next arm starts a new one. */
void deadline_watchdog_stop(void);

#endif /* ST_CORE_DEADLINE_H */
