/* job_agree.c - see job_agree.h: mpi_agree_share over the world, where MPI is running, under
 * ST_IO_TIMEOUT's deadline. */
#include "engine/io/job_agree.h"

#include <mpi.h>
#include <stdio.h>

#include "core/env.h"
#include "core/error.h"
#include "core/mpi_agree.h"

st_status job_file_deadline_arm(deadline *d, const char *what) {
  int ok = 0;
  const double seconds = env_get_positive(ENV_IO_TIMEOUT, &ok);
  if (!ok) {
    return st_error(ST_ERR_INVALID_ARG, "ST_IO_TIMEOUT='%s' is not a positive number of seconds",
                    env_get_string(ENV_IO_TIMEOUT));
  }
  return deadline_arm(d, DEADLINE_FILE_WORK, seconds, what);
}

/* A rank whose limit cannot be armed (its ST_IO_TIMEOUT is bad) offers that error instead of
 * an ST_OK verdict, so that every rank reports it; it waits unguarded. A failing verdict keeps
 * its own text, which arming may have replaced. */
st_status job_agree(st_status mine) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return mine;
  char why[1024] = "";
  if (mine != ST_OK) snprintf(why, sizeof why, "%s", st_last_error());
  deadline d;
  const st_status armed =
      job_file_deadline_arm(&d, "a job-wide agreement (every rank's verdict on its own work)");
  if (mine != ST_OK && armed != ST_OK) st_error(mine, "%s", why);
  const st_status agreed = mpi_agree_share(MPI_COMM_WORLD, mine != ST_OK ? mine : armed);
  if (armed == ST_OK) deadline_disarm(&d);
  return agreed;
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
