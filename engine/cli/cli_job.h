/* cli_job.h - the start and the end of a command that runs on every rank of a job (train,
 * selftest).
 *
 * The start settles the command line once for the whole job: either every rank parsed the same
 * arguments without error, or every rank stops with the same error line (the lowest failing
 * rank's) and exit code 2. A rank started with other arguments than rank 0 (another --seed, a
 * --lr only it rejects) would otherwise train something else, or wait forever in the first
 * collective for ranks that stopped.
 *
 * The end cannot hang: a rank that failed on its own (its files, its device, its environment)
 * while the others wait for it in a collective ends the whole job, with its own exit code,
 * after waiting CLI_JOB_FAILED_WAIT_S seconds for the others to stop too. When every rank
 * stops together (a failure they agreed on, or a check they all made), each ends normally. */
#ifndef ST_ENGINE_CLI_CLI_JOB_H
#define ST_ENGINE_CLI_CLI_JOB_H

#include "shardtrain.h"

/* cli_job_start's answer when the command should go on to run. */
#define CLI_JOB_RUN (-1)

/* How long a rank that failed waits at the end for the others before it ends the job. */
#define CLI_JOB_FAILED_WAIT_S 10.0

/* `parsed`: this rank's verdict on its own arguments (st_last_error() says why when it is not
 * ST_OK). Starts MPI (st_init) and, under a launcher, agrees with every other rank. Returns
 * CLI_JOB_RUN when the command should run (MPI started, every rank's arguments valid and equal);
 * otherwise the process's exit code, after printing "shardtrain <command>: <why>" and shutting
 * MPI down. A process started alone with bad arguments answers without starting MPI. */
int cli_job_start(const char *command, st_status parsed, int *argc, char ***argv);

/* Ends a command that cli_job_start let run and returns `exit_code`. Every rank calls it once
 * with its own code, before freeing anything that collectives may still use (the caller frees
 * and calls st_finalize afterwards): a rank that succeeded waits for all the others; a rank
 * that failed waits at most CLI_JOB_FAILED_WAIT_S for them and otherwise aborts the job
 * (MPI_Abort) with its code. */
int cli_job_end(int exit_code);

#endif /* ST_ENGINE_CLI_CLI_JOB_H */
