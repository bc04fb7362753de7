/* testing_mpi.h - finishing a multi-rank test: every rank prints its own failures (through
 * testing.h's CHECK macros); test_finish_mpi sums them over the world so every rank exits
 * non-zero when any rank failed, and rank 0 prints the summary. */
#ifndef ST_TESTS_TESTING_MPI_H
#define ST_TESTS_TESTING_MPI_H

#include "tests/testing.h"

int test_finish_mpi(const char *name);

#endif /* ST_TESTS_TESTING_MPI_H */
