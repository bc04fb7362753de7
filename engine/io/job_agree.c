/* job_agree.c - see job_agree.h: mpi_agree_share over the world, where MPI is running. */
#include "engine/io/job_agree.h"

#include <mpi.h>

#include "core/mpi_agree.h"

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
