/* mpi_agree.h - one verdict over the ranks of an MPI communicator. A step that each rank does
 * on its own (allocating, reading its files, creating its streams) must end the same way on
 * every rank before the next collective, or the ranks that succeeded wait in that collective
 * forever for the ones that stopped. Each function is itself a collective over `comm`: every
 * rank calls it with its own outcome, and either every rank gets ST_OK or every rank an error. */
#ifndef ST_CORE_MPI_AGREE_H
#define ST_CORE_MPI_AGREE_H

#include <mpi.h>

#include "shardtrain.h"

/* On failure, every rank returns the status and the error text (st_last_error) of the lowest
 * rank that failed: the whole job reports that rank's reason, which a rank that did not fail
 * alike prefixes with "on world rank N: " (unless the text names "world rank N " itself). */
st_status mpi_agree_share(MPI_Comm comm, st_status mine);

/* On failure, a rank that failed keeps its own status and error; every other rank returns the
 * lowest failing rank's status with one line: "<abandoned> abandoned: world rank N failed (its
 * own error says why)", where `abandoned` names the step ("NCCL set-up of group tp"). */
st_status mpi_agree_naming(MPI_Comm comm, st_status mine, const char *abandoned);

#endif /* ST_CORE_MPI_AGREE_H */
