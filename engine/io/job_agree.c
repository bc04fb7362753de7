/* job_agree.c - see job_agree.h: mpi_agree_share over the world, where MPI is running, and
 * ST_IO_TIMEOUT's deadline on a rank's file work. */
#include "engine/io/job_agree.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <time.h>

#include "core/env.h"
#include "core/error.h"
#include "core/mpi_agree.h"

/* ST_IO_TIMEOUT's limit in *seconds, or the error naming its bad value. */
static st_status file_limit(double *seconds) {
  int ok = 0;
  *seconds = env_get_positive(ENV_IO_TIMEOUT, &ok);
  if (!ok) {
    return st_error(ST_ERR_INVALID_ARG, "ST_IO_TIMEOUT='%s' is not a positive number of seconds",
                    env_get_string(ENV_IO_TIMEOUT));
  }
  return ST_OK;
}

st_status job_file_limit_check(void) {
  double seconds;
  return file_limit(&seconds);
}

st_status job_file_deadline_arm(deadline *d, const char *what) {
  double seconds;
  ST_CHECK(file_limit(&seconds));
  return deadline_arm(d, DEADLINE_FILE_WORK, seconds, what);
}

void job_test_sleep_ms(int ms) {
  struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

void job_file_test_delay(void) { job_test_sleep_ms(atoi(env_get_string(ENV_WRITE_TEST_DELAY_MS))); }

st_status job_agree(st_status mine) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return mine;
  return mpi_agree_share(MPI_COMM_WORLD, mine);
}

void job_world(int *rank, int *size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  *rank = 0;
  *size = 1;
  if (!initialized) return;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}
