/* job_agree.h - one verdict for the whole job. A step that each rank does on its own (reading
 * its files, verifying its share of the checksums) must end the same way on every rank, or the
 * ranks that succeeded wait forever in the next collective for the ones that stopped.
 *
 * A rank stuck on a hung file system would hold itself, and the others waiting for its verdict,
 * for ever. Its file work (a checkpoint's or an export's write, a metrics line) therefore runs
 * under a deadline of ST_IO_TIMEOUT (core/deadline.h), extended as the work progresses, which ends
 * a rank stalled that long with one error line naming the file and exit code 3; the launcher then
 * ends the others. The agreement itself waits without a limit: a rank waiting there cannot tell
 * another rank's slow write from a stuck one.
 */
#ifndef ST_ENGINE_IO_JOB_AGREE_H
#define ST_ENGINE_IO_JOB_AGREE_H

#include "core/deadline.h"
#include "shardtrain.h"

/* Collective over MPI_COMM_WORLD (a no-op returning `mine` where MPI is not initialised).
 * Returns ST_OK when every rank's `mine` is ST_OK; otherwise, on every rank, the status and
 * the error text (st_last_error) of the lowest rank that failed. */
st_status job_agree(st_status mine);

/* ST_ERR_INVALID_ARG, naming the variable, when ST_IO_TIMEOUT is not a positive number of
 * seconds: checked at start-up, before any file work needs it. */
st_status job_file_limit_check(void);

/* Arms `d` with ST_IO_TIMEOUT's limit for `what` (a phrase: "writing the checkpoint file P"), to
 * be extended as the work progresses (deadline_extend) and disarmed when it is done.
 * ST_ERR_INVALID_ARG as job_file_limit_check (nothing is armed then). */
st_status job_file_deadline_arm(deadline *d, const char *what);

/* For tests (ST_WRITE_TEST_DELAY_MS): waits that many milliseconds, standing in for a hung file
 * system, in the writing rank's file work under its deadline (an export, a metrics line). */
void job_file_test_delay(void);

/* Sleeps `ms` milliseconds (none for ms <= 0), all of them though a caught signal interrupts the
 * sleep: the test delays' windows, in which the tests send their signals. */
void job_test_sleep_ms(int ms);

/* This process's rank in MPI_COMM_WORLD and the world's size (0 and 1 where MPI is not
 * initialised). */
void job_world(int *rank, int *size);

#endif /* ST_ENGINE_IO_JOB_AGREE_H */
