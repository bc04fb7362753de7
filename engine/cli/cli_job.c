/* cli_job.c - see cli_job.h. The end's wait is a barrier on a communicator of its own, made at
 * the start, so that it can never match a collective some other rank is still waiting in. */
#include "engine/cli/cli_job.h"

#include <mpi.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/check_mpi.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mpi_agree.h"
#include "engine/cli/commands.h"

static MPI_Comm end_comm = MPI_COMM_NULL;

/* The arguments after the program's name, each with its terminating zero, in one buffer. */
static st_status joined_arguments(int argc, char **argv, char **out, int *len) {
  size_t n = 0;
  for (int i = 1; i < argc; i++) n += strlen(argv[i]) + 1;
  if (n > (size_t)1 << 30) return st_error(ST_ERR_INVALID_ARG, "the command line is too long");
  ST_CHECK(mem_alloc((void **)out, n + 1, MEM_HOST, MEM_WORKSPACE, NULL));
  char *at = *out;
  for (int i = 1; i < argc; i++) {
    const size_t bytes = strlen(argv[i]) + 1;
    memcpy(at, argv[i], bytes);
    at += bytes;
  }
  *len = (int)n;
  return ST_OK;
}

/* Collective: ST_OK when every rank's arguments are rank 0's, byte for byte; otherwise every
 * rank returns the error of the lowest rank whose arguments differ. */
static st_status same_arguments_as_rank0(int argc, char **argv) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  char *mine = NULL, *rank0 = NULL;
  int len = 0, len0 = 0;
  st_status status = joined_arguments(argc, argv, &mine, &len);
  len0 = len;
  /* Every rank takes part in both broadcasts whatever its own outcome, so none is left in one. */
  if (MPI_Bcast(&len0, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS && status == ST_OK) {
    status = st_error(ST_ERR_MPI, "MPI_Bcast of the command line's length failed");
  }
  if (status == ST_OK) {
    status = mem_alloc((void **)&rank0, (size_t)len0 + 1, MEM_HOST, MEM_WORKSPACE, NULL);
  }
  status = mpi_agree_share(MPI_COMM_WORLD, status);
  if (status == ST_OK) {
    if (rank == 0) memcpy(rank0, mine, (size_t)len);
    if (MPI_Bcast(rank0, len0, MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      status = st_error(ST_ERR_MPI, "MPI_Bcast of the command line failed");
    } else if (len != len0 || memcmp(mine, rank0, (size_t)len) != 0) {
      status = st_error(ST_ERR_INVALID_ARG,
                        "world rank %d was started with other arguments than rank 0 (every rank "
                        "of the job must run the same command line)",
                        rank);
    }
    status = mpi_agree_share(MPI_COMM_WORLD, status);
  }
  mem_free(rank0);
  mem_free(mine);
  return status;
}

/* Collective over the launched job: the end's communicator, then one verdict on the arguments. */
static st_status agree_on_arguments(st_status parsed, int argc, char **argv) {
  /* The program's choice for its world, which the library leaves alone: MPI errors come back as
   * codes that the command reports on one line, instead of MPI's abort. */
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &end_comm));
  ST_CHECK(mpi_agree_share(MPI_COMM_WORLD, parsed));
  return same_arguments_as_rank0(argc, argv);
}

/* A launcher that started N tasks whose MPI did not join them (srun without the MPI plugin its
 * MPI needs, another MPI's mpirun) leaves each a world of its own: N one-rank jobs would train
 * side by side, writing the same files. */
static st_status joined_as_launched(void) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const char *variable = NULL;
  const long tasks = env_launched_tasks(&variable);
  if (size != 1 || tasks <= 1) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG,
                  "launched as one of %ld tasks (%s=%ld), but MPI put this one in a world of its "
                  "own: the launcher and this program's MPI did not meet (with srun, pass "
                  "--mpi=pmix, or the MPI plugin your site documents; with mpirun, use the one of "
                  "the MPI shardtrain was built with)",
                  tasks, variable, tasks);
}

int cli_job_start(const char *command, st_status parsed, int *argc, char ***argv) {
  if (parsed != ST_OK && !env_launched_by_mpi()) {
    st_log(ST_LOG_ERROR, "shardtrain %s: %s", command, st_last_error());
    return 2;
  }
  st_status status = st_init(argc, argv);
  if (status == ST_OK) status = agree_on_arguments(parsed, *argc, *argv);
  if (status == ST_OK) status = joined_as_launched();
  if (status == ST_OK) return CLI_JOB_RUN;
  st_log(ST_LOG_ERROR, "shardtrain %s: %s", command, st_last_error());
  const int code = cli_job_end(exit_code_for(status));
  st_finalize();
  return code;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_job_end(int exit_code) {
  if (end_comm == MPI_COMM_NULL) return exit_code;
  MPI_Request request;
  int done = 0;
  if (MPI_Ibarrier(end_comm, &request) != MPI_SUCCESS) done = -1;
  const double deadline = now_s() + CLI_JOB_FAILED_WAIT_S;
  while (done == 0 && (exit_code == 0 || now_s() < deadline)) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = -1;
    if (done == 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  if (done != 1) {
    /* The others are still inside the command: most likely waiting in a collective for this
     * rank, which will never come. Ending the job is the only way they stop. */
    st_log(ST_LOG_WARN, "the other ranks did not stop within %.0f s of this one: ending the job",
           CLI_JOB_FAILED_WAIT_S);
    MPI_Abort(MPI_COMM_WORLD, exit_code != 0 ? exit_code : 1);
  }
  MPI_Comm_free(&end_comm);
  return exit_code;
}
