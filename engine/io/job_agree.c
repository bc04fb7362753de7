/* job_agree.c - see job_agree.h: the lowest failing rank is found with one all-reduce, and
 * its status and message are broadcast. */
#include "engine/io/job_agree.h"

#include <mpi.h>
#include <string.h>

#include "core/error.h"

st_status job_agree(st_status mine) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return mine;
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int first = mine != ST_OK ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return ST_OK;
  int status = (int)mine;
  char text[1024] = {0};
  if (rank == first) strncpy(text, st_last_error(), sizeof text - 1);
  MPI_Bcast(&status, 1, MPI_INT, first, MPI_COMM_WORLD);
  MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first, MPI_COMM_WORLD);
  if (rank == first) return mine;
  return st_error((st_status)status, "%s", text);
}
