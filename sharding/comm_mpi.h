/* comm_mpi.h - the MPI collective backend (non-blocking MPI-3 collectives).
 *
 * Host buffers are used in place. With a CUDA device, buffers are device memory and are
 * staged through pinned host memory (copied down when the collective starts, back up when it
 * completes), so the MPI backend also serves several ranks sharing one GPU, which NCCL
 * refuses. bf16 and fp16 reductions use user-defined MPI ops that accumulate in fp32 per
 * pairwise step. */
#ifndef ST_SHARDING_COMM_MPI_H
#define ST_SHARDING_COMM_MPI_H

#include <mpi.h>

#include "sharding/comm.h"

/* Creates a comm over `mpi_comm` (duplicated; the caller keeps its own). */
st_status comm_mpi_create(comm **out, MPI_Comm mpi_comm, const char *group_name,
                          const st_device *dev, double timeout_s);

/* Whether MPI is finalized (st_finalize, or the program's own MPI_Finalize). From then on MPI
 * may not be called at all (MPI_Finalized aside): destroy paths release only memory, leaving
 * the MPI objects to the finalized MPI, and calls that would communicate refuse. */
int comm_mpi_finalized(void);

#endif /* ST_SHARDING_COMM_MPI_H */
