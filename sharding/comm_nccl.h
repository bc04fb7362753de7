/* comm_nccl.h - the NCCL collective backend: one NCCL communicator per group, bootstrapped by
 * broadcasting the unique id over the group's MPI communicator (a duplicate: ncclCommSplit).
 * Collectives run on the stream they are ordered on, else the comm's own CUDA stream; completion
 * is an event recorded after each one. Ranks that share a GPU need distinct NCCL_HOSTIDs (NCCL
 * refuses two ranks of one host on one GPU); without them the mesh takes MPI (`auto`) or refuses
 * (`nccl`), sharding/mesh.c. */
#ifndef ST_SHARDING_COMM_NCCL_H
#define ST_SHARDING_COMM_NCCL_H

#include <mpi.h>

#include "sharding/comm.h"

/* Whether this build has the NCCL backend. */
int comm_nccl_available(void);

/* Collective over the group: every rank of mpi_comm must call it. dev must be a CUDA device.
 * A failure a rank meets before NCCL's own set-up (its stream, rank 0's unique id) fails every
 * rank: that rank with its error, the others naming it.
 * The communicator's collectives (and its duplicates') run on at most max_ctas thread blocks
 * (1..32: ncclConfig_t's maxCTAs), so that those overlapping compute leave it the other SMs. */
st_status comm_nccl_create(comm **out, MPI_Comm mpi_comm, const char *group_name,
                           const st_device *dev, double timeout_s, int max_ctas);

#endif /* ST_SHARDING_COMM_NCCL_H */
