/* job_agree.h - one verdict for the whole job. A step that each rank does on its own (reading
 * its files, verifying its share of the checksums) must end the same way on every rank, or the
 * ranks that succeeded wait forever in the next collective for the ones that stopped. */
#ifndef ST_ENGINE_IO_JOB_AGREE_H
#define ST_ENGINE_IO_JOB_AGREE_H

#include "shardtrain.h"

/* Collective over MPI_COMM_WORLD (a no-op returning `mine` where MPI is not initialised).
 * Returns ST_OK when every rank's `mine` is ST_OK; otherwise, on every rank, the status and
 * the error text (st_last_error) of the lowest rank that failed. */
st_status job_agree(st_status mine);

/* This process's rank in MPI_COMM_WORLD and the world's size (0 and 1 where MPI is not
 * initialised). */
void job_world(int *rank, int *size);

#endif /* ST_ENGINE_IO_JOB_AGREE_H */
