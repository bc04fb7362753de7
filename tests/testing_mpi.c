/* testing_mpi.c - world-wide failure count for multi-rank tests. */
#include "tests/testing_mpi.h"

#include <mpi.h>
#include <stdio.h>

int test_finish_mpi(const char *name) {
  long counts[2] = {test_checks_run(), test_checks_failed()};
  long totals[2] = {0, 0};
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(counts, totals, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (counts[1]) fprintf(stderr, "%s: rank %d had %ld failed checks\n", name, rank, counts[1]);
  if (rank == 0) {
    printf("%s: %d ranks, %ld checks, %ld failed\n", name, size, totals[0], totals[1]);
  }
  return totals[1] ? 1 : 0;
}
